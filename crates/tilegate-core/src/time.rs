//! UTC timestamps as RFC 3339 text, without a calendar library.

use crate::UnixMillis;

/// `2026-12-03T07:21:15Z` (whole seconds; milliseconds are dropped).
pub fn rfc3339(ms: UnixMillis) -> String {
    let secs = ms.div_euclid(1000);
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    let (y, m, d) = civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// Days since 1970-01-01 → (year, month, day) in the proleptic Gregorian calendar (Howard
/// Hinnant's `civil_from_days`).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = u32::try_from(doy - (153 * mp + 2) / 5 + 1).unwrap_or(1);
    let m = u32::try_from(if mp < 10 { mp + 3 } else { mp - 9 }).unwrap_or(1);
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

/// Whether a field holds a time in milliseconds since the epoch (and so gains a `_utc` copy).
pub fn is_time_field(name: &str) -> bool {
    name.ends_with("_at") || name.ends_with("_at_ms") || name == "delete_after"
}

/// The name of a time field's readable copy: `created_at` → `created_at_utc`,
/// `dead_at_ms` → `dead_at_utc`.
pub fn utc_name(name: &str) -> String {
    format!("{}_utc", name.strip_suffix("_ms").unwrap_or(name))
}

/// `doc` with a readable copy (RFC 3339, UTC) beside every time field: `"created_at":
/// 1796419968000, "created_at_utc": "2026-12-05T12:00:00Z"`, or null beside a null.
pub fn with_utc(mut doc: serde_json::Value) -> serde_json::Value {
    add_utc(&mut doc);
    doc
}

fn add_utc(v: &mut serde_json::Value) {
    match v {
        serde_json::Value::Object(map) => {
            let times: Vec<(String, serde_json::Value)> = map
                .iter()
                .filter(|(k, v)| is_time_field(k) && (v.is_i64() || v.is_u64() || v.is_null()))
                .map(|(k, v)| {
                    let readable = v
                        .as_i64()
                        .map_or(serde_json::Value::Null, |ms| rfc3339(ms).into());
                    (utc_name(k), readable)
                })
                .collect();
            for v in map.values_mut() {
                add_utc(v);
            }
            for (k, v) in times {
                map.entry(k).or_insert(v);
            }
        }
        serde_json::Value::Array(items) => items.iter_mut().for_each(add_utc),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::rfc3339;

    #[test]
    fn known_instants() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(951_782_400_000), "2000-02-29T00:00:00Z");
        assert_eq!(rfc3339(1_796_282_475_999), "2026-12-03T07:21:15Z");
        assert_eq!(rfc3339(-1000), "1969-12-31T23:59:59Z");
    }

    #[test]
    fn every_time_field_gets_a_readable_copy() {
        let doc = serde_json::json!({
            "created_at": 0,
            "nested": [{"dead_at_ms": 86_400_000, "delete_after": null, "count": 3}],
            "not_a_time": 5,
        });
        let got = super::with_utc(doc);
        assert_eq!(got["created_at_utc"], "1970-01-01T00:00:00Z");
        assert_eq!(got["nested"][0]["dead_at_utc"], "1970-01-02T00:00:00Z");
        assert_eq!(
            got["nested"][0]["delete_after_utc"],
            serde_json::Value::Null
        );
        assert!(got.get("not_a_time_utc").is_none());
        assert!(got["nested"][0].get("count_utc").is_none());
    }
}

//! The counters of tilegate's observability contract, with the same names in every exporter.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};

pub const TILES_WRITTEN: &str = "tiles_written_total";
pub const PRECONDITION_FAILED: &str = "conditional_write_precondition_failed_total";
pub const DUPLICATE_ENCODES_SKIPPED: &str = "duplicate_encodes_skipped_total";
pub const MANIFEST_ROWS_WRITTEN: &str = "manifest_rows_written_total";
pub const CLAIMS_WON: &str = "claims_won_total";
pub const CLAIMS_LOST: &str = "claims_lost_total";
pub const MULTIPART_BYTES_UPLOADED: &str = "multipart_bytes_uploaded_total";
pub const DEAD_LETTERED: &str = "dead_lettered_total";
pub const SOURCE_CHANGED: &str = "source_changed_total";
pub const WINDOW_PANICS: &str = "window_panics_total";
pub const MANIFEST_MISMATCH: &str = "manifest_mismatch_total";
/// Regeneration orders whose attempt was uploaded but whose accept the ledger refused (a newer
/// attempt published, this one published before, the pointer contended): the order is done,
/// the pointer did not move.
pub const ACCEPTS_REFUSED: &str = "attempt_accepts_refused_total";
/// A pyramid's tile images written (each distinct blob or `z/x/y` object once; a refused
/// Create is counted as a precondition failure, as a window's is).
pub const PYRAMID_TILES_WRITTEN: &str = "pyramid_tiles_written_total";

/// Every counter name, in reporting order.
pub const ALL: [&str; 13] = [
    TILES_WRITTEN,
    PRECONDITION_FAILED,
    DUPLICATE_ENCODES_SKIPPED,
    MANIFEST_ROWS_WRITTEN,
    CLAIMS_WON,
    CLAIMS_LOST,
    MULTIPART_BYTES_UPLOADED,
    DEAD_LETTERED,
    SOURCE_CHANGED,
    WINDOW_PANICS,
    MANIFEST_MISMATCH,
    ACCEPTS_REFUSED,
    PYRAMID_TILES_WRITTEN,
];

/// The counters an assembler bumps itself (no worker flushes them): its caller adds them to the
/// job's — the claims, the multipart bytes, and a pyramid's tiles made above its windows and
/// the Creates of them that found a copy in place.
pub const ASSEMBLER: [&str; 5] = [
    CLAIMS_WON,
    CLAIMS_LOST,
    MULTIPART_BYTES_UPLOADED,
    PYRAMID_TILES_WRITTEN,
    PRECONDITION_FAILED,
];

/// The name under which dead letters of one reason are counted: `dead_lettered_total{reason="x"}`.
pub fn dead_lettered_by(reason: &str) -> String {
    format!("{DEAD_LETTERED}{{reason=\"{reason}\"}}")
}

/// Requests a job's stores sent, by provider service and operation.
pub const REQUESTS: &str = "requests_total";
/// Bytes of request bodies a job's stores sent, by service.
pub const BYTES_SENT: &str = "bytes_sent_total";
/// Bytes of response bodies a job's stores received, by service.
pub const BYTES_RECEIVED: &str = "bytes_received_total";

/// `requests_total{service="s3",op="PutObject"}`.
pub fn requests_by(service: &str, op: &str) -> String {
    format!("{REQUESTS}{{service=\"{service}\",op=\"{op}\"}}")
}

/// `bytes_sent_total{service="s3"}`.
pub fn bytes_sent_by(service: &str) -> String {
    format!("{BYTES_SENT}{{service=\"{service}\"}}")
}

/// `bytes_received_total{service="s3"}`.
pub fn bytes_received_by(service: &str) -> String {
    format!("{BYTES_RECEIVED}{{service=\"{service}\"}}")
}

/// A labelled counter's base name and labels: `requests_total{service="s3",op="Put"}` →
/// (`requests_total`, [(service, s3), (op, Put)]); a plain name has no labels.
pub fn split_labels(name: &str) -> (&str, Vec<(&str, &str)>) {
    let Some((base, rest)) = name.split_once('{') else {
        return (name, Vec::new());
    };
    let labels = rest
        .trim_end_matches('}')
        .split(',')
        .filter_map(|kv| {
            let (k, v) = kv.split_once('=')?;
            Some((k, v.trim_matches('"')))
        })
        .collect();
    (base, labels)
}

/// A process's counters. Cheap to bump from any thread.
#[derive(Debug, Default)]
pub struct Counters {
    values: [AtomicU64; ALL.len()],
    by_reason: std::sync::Mutex<BTreeMap<String, u64>>,
}

impl Counters {
    pub fn new() -> Self {
        Self::default()
    }

    fn index(name: &str) -> usize {
        ALL.iter()
            .position(|n| *n == name)
            .unwrap_or_else(|| panic!("unknown counter {name}"))
    }

    pub fn add(&self, name: &str, n: u64) {
        self.values[Self::index(name)].fetch_add(n, Ordering::Relaxed);
    }

    pub fn inc(&self, name: &str) {
        self.add(name, 1);
    }

    /// Count a dead letter under its reason (and in the total).
    pub fn dead_lettered(&self, reason: &str) {
        self.inc(DEAD_LETTERED);
        *self
            .by_reason
            .lock()
            .expect("counter lock")
            .entry(dead_lettered_by(reason))
            .or_default() += 1;
    }

    pub fn get(&self, name: &str) -> u64 {
        self.values[Self::index(name)].load(Ordering::Relaxed)
    }

    /// Every counter (zeros included) and the per-reason dead-letter counts.
    pub fn snapshot(&self) -> BTreeMap<String, u64> {
        let mut m: BTreeMap<String, u64> =
            ALL.iter().map(|n| ((*n).to_owned(), self.get(n))).collect();
        m.extend(
            self.by_reason
                .lock()
                .expect("counter lock")
                .iter()
                .map(|(k, v)| (k.clone(), *v)),
        );
        m
    }
}

/// What each counter counts, for exporters' help text.
pub fn help(name: &str) -> &'static str {
    match name {
        TILES_WRITTEN => "Tiles this process's Create wrote.",
        PRECONDITION_FAILED => {
            "Creates the store refused because the object was already there (a duplicate reached \
             the end state first). Flat at zero for long means the exactly-once gate is untested."
        }
        DUPLICATE_ENCODES_SKIPPED => "Windows whose tile already existed, so encoding was skipped.",
        MANIFEST_ROWS_WRITTEN => "Manifest rows this process created.",
        CLAIMS_WON => "Claim-gate leases won.",
        CLAIMS_LOST => "Claim-gate leases found held by another owner or already done.",
        MULTIPART_BYTES_UPLOADED => "Bytes sent in multipart upload parts.",
        DEAD_LETTERED => "Messages moved to the dead-letter queue, by reason.",
        SOURCE_CHANGED => "Window reads refused because the source no longer matched its plan.",
        WINDOW_PANICS => {
            "Panics caught inside one window's encoder or handler; the window is retried and \
             dead-lettered with `encoder-panicked` after its last receive, the process carries on."
        }
        MANIFEST_MISMATCH => {
            "Manifest rows found disagreeing (size or ETag) with the tile in place when a \
             worker recorded its window; assembly refuses such a job until it is repaired."
        }
        REQUESTS => "Requests the job's stores sent, by provider service and operation.",
        BYTES_SENT => "Bytes of request bodies the job's stores sent, by service.",
        BYTES_RECEIVED => "Bytes of response bodies the job's stores received, by service.",
        _ => "A tilegate counter.",
    }
}

/// Split `dead_lettered_total{reason="x"}` into its reason.
pub fn dead_letter_reason(series: &str) -> Option<&str> {
    series
        .strip_prefix(DEAD_LETTERED)?
        .strip_prefix("{reason=\"")?
        .strip_suffix("\"}")
}

/// A snapshot in the Prometheus text exposition format (version 0.0.4): every counter with
/// its HELP and TYPE lines; dead letters as one series per reason (`reason` label) and no
/// unlabelled total, so that summing the family never counts twice.
pub fn prometheus_text(snapshot: &BTreeMap<String, u64>) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    for name in ALL {
        let _ = writeln!(out, "# HELP {name} {}", help(name));
        let _ = writeln!(out, "# TYPE {name} counter");
        if name == DEAD_LETTERED {
            for (series, v) in snapshot {
                if let Some(reason) = dead_letter_reason(series) {
                    let reason = reason.replace('\\', "\\\\").replace('"', "\\\"");
                    let _ = writeln!(out, "{name}{{reason=\"{reason}\"}} {v}");
                }
            }
        } else {
            let _ = writeln!(out, "{name} {}", snapshot.get(name).copied().unwrap_or(0));
        }
    }
    out
}

/// Counter increments as CloudWatch Embedded Metric Format documents, one JSON line each: one
/// with every counter (dimension `function`), and one per dead-letter reason (dimensions
/// `function`, `reason`). Counters that did not move are sent as zeros, so that alarms on
/// them see data.
pub fn emf_lines(
    namespace: &str,
    function: &str,
    deltas: &BTreeMap<String, u64>,
    timestamp_ms: i64,
) -> Vec<String> {
    let doc = |dims: Vec<&str>, metrics: Vec<(&str, u64)>, extra: Option<(&str, &str)>| {
        let metrics: Vec<_> = metrics.into_iter().map(|(n, v)| (n, "Count", v)).collect();
        emf_document(namespace, function, &dims, &metrics, extra, timestamp_ms)
    };
    let all: Vec<(&str, u64)> = ALL
        .iter()
        .map(|n| (*n, deltas.get(*n).copied().unwrap_or(0)))
        .collect();
    let mut lines = vec![doc(vec!["function"], all, None)];
    for (series, v) in deltas {
        if let Some(reason) = dead_letter_reason(series) {
            lines.push(doc(
                vec!["function", "reason"],
                vec![(DEAD_LETTERED, *v)],
                Some(("reason", reason)),
            ));
        }
    }
    lines
}

/// The deletion SLO gauge: the age of the oldest ledger row past its deadline and not yet
/// deleted (0 when none is overdue). Read from the due index, never counted by a process.
pub const DELETION_OVERDUE_OLDEST: &str = "deletion_overdue_oldest_seconds";

/// One gauge in the Prometheus text format, with its HELP and TYPE lines.
pub fn gauge_text(name: &str, help: &str, value: u64) -> String {
    format!("# HELP {name} {help}\n# TYPE {name} gauge\n{name} {value}\n")
}

/// One CloudWatch Embedded Metric Format document: `(name, unit, value)` metrics under
/// `dims` (`function` always set, `extra` the one other dimension's value).
fn emf_document(
    namespace: &str,
    function: &str,
    dims: &[&str],
    metrics: &[(&str, &str, u64)],
    extra: Option<(&str, &str)>,
    timestamp_ms: i64,
) -> String {
    let mut root = serde_json::Map::new();
    root.insert(
        "_aws".into(),
        serde_json::json!({
            "Timestamp": timestamp_ms,
            "CloudWatchMetrics": [{
                "Namespace": namespace,
                "Dimensions": [dims],
                "Metrics": metrics.iter().map(|(n, u, _)| serde_json::json!({"Name": n, "Unit": u})).collect::<Vec<_>>(),
            }],
        }),
    );
    root.insert("function".into(), function.into());
    if let Some((k, v)) = extra {
        root.insert(k.into(), v.into());
    }
    for (n, _, v) in metrics {
        root.insert((*n).into(), (*v).into());
    }
    serde_json::Value::Object(root).to_string()
}

/// Gauges as one EMF document (dimension `function`): `(name, unit, value)` with units
/// `Seconds` or `Count`.
pub fn emf_gauges(
    namespace: &str,
    function: &str,
    gauges: &[(&str, &str, u64)],
    timestamp_ms: i64,
) -> String {
    emf_document(
        namespace,
        function,
        &["function"],
        gauges,
        None,
        timestamp_ms,
    )
}

/// `after - before`, series by series (counters only grow).
pub fn deltas(
    before: &BTreeMap<String, u64>,
    after: &BTreeMap<String, u64>,
) -> BTreeMap<String, u64> {
    after
        .iter()
        .map(|(k, v)| {
            (
                k.clone(),
                v.saturating_sub(before.get(k).copied().unwrap_or(0)),
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gauges_are_typed_as_gauges() {
        let t = gauge_text(DELETION_OVERDUE_OLDEST, "Age.", 42);
        assert_eq!(
            t,
            "# HELP deletion_overdue_oldest_seconds Age.\n# TYPE deletion_overdue_oldest_seconds gauge\ndeletion_overdue_oldest_seconds 42\n"
        );
        let emf: serde_json::Value = serde_json::from_str(&emf_gauges(
            "tilegate",
            "gc",
            &[(DELETION_OVERDUE_OLDEST, "Seconds", 42)],
            1,
        ))
        .unwrap();
        assert_eq!(emf[DELETION_OVERDUE_OLDEST], 42);
        assert_eq!(
            emf["_aws"]["CloudWatchMetrics"][0]["Metrics"][0]["Unit"],
            "Seconds"
        );
    }

    #[test]
    fn prometheus_text_names_every_counter_and_labels_dead_letters() {
        let c = Counters::new();
        c.add(TILES_WRITTEN, 3);
        c.dead_lettered("source-changed");
        let text = prometheus_text(&c.snapshot());
        for name in ALL {
            assert!(text.contains(&format!("# TYPE {name} counter\n")), "{name}");
        }
        assert!(text.contains("\ntiles_written_total 3\n"));
        assert!(text.contains("\ndead_lettered_total{reason=\"source-changed\"} 1\n"));
        assert!(
            !text.contains("\ndead_lettered_total 1\n"),
            "no unlabelled total"
        );
    }

    #[test]
    fn emf_documents_declare_their_metrics() {
        let c = Counters::new();
        c.add(PRECONDITION_FAILED, 2);
        c.dead_lettered("malformed-message");
        let lines = emf_lines("tilegate", "worker", &c.snapshot(), 1_700_000_000_000);
        assert_eq!(lines.len(), 2);
        let v: serde_json::Value = serde_json::from_str(&lines[0]).unwrap();
        assert_eq!(v["_aws"]["CloudWatchMetrics"][0]["Namespace"], "tilegate");
        assert_eq!(
            v["_aws"]["CloudWatchMetrics"][0]["Metrics"]
                .as_array()
                .unwrap()
                .len(),
            ALL.len()
        );
        assert_eq!(v[PRECONDITION_FAILED], 2);
        assert_eq!(v["function"], "worker");
        let r: serde_json::Value = serde_json::from_str(&lines[1]).unwrap();
        assert_eq!(r["reason"], "malformed-message");
        assert_eq!(r[DEAD_LETTERED], 1);
        assert_eq!(
            r["_aws"]["CloudWatchMetrics"][0]["Dimensions"][0][1],
            "reason"
        );
    }
}

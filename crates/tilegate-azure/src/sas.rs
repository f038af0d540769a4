//! An account SAS signed with the account key, for a connection string that carries one:
//! `azure_storage_blob` authorises requests with Entra ID tokens or a SAS in the URL, never
//! with the shared key itself ("Create an account SAS", signed version 2018-11-09).

use crate::error::AzureError;
use azure_core::credentials::Secret;
use time::{Duration, OffsetDateTime};

/// The signed version of the SAS (the string-to-sign below is this version's).
const SIGNED_VERSION: &str = "2018-11-09";
/// Permissions: read, write, delete, list, add, create, update, process.
const PERMISSIONS: &str = "rwdlacup";
/// How long a signature is valid; [`crate::credential`] signs a fresh one a day before.
pub(crate) const VALIDITY: Duration = Duration::days(7);
/// Clock skew allowed at the start.
const SKEW: Duration = Duration::minutes(15);

fn iso(t: OffsetDateTime) -> String {
    format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}Z",
        t.year(),
        u8::from(t.month()),
        t.day(),
        t.hour(),
        t.minute(),
        t.second()
    )
}

/// Percent-encode a query value (RFC 3986 unreserved characters pass).
fn encode(v: &str) -> String {
    v.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                char::from(b).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// The string an account SAS of [`SIGNED_VERSION`] signs.
fn string_to_sign(account: &str, start: &str, expiry: &str, protocols: &str) -> String {
    format!(
        "{account}\n{PERMISSIONS}\nb\nsco\n{start}\n{expiry}\n\n{protocols}\n{SIGNED_VERSION}\n"
    )
}

/// An account SAS query string (no `?`) for the blob service of `account`, valid from a little
/// before `now` for [`VALIDITY`], over `protocols` (`https`, or `https,http` for a plain-HTTP
/// emulator: [`crate::Account::sas_protocols`]).
pub(crate) fn account_sas(
    account: &str,
    key: &str,
    now: OffsetDateTime,
    protocols: &str,
) -> Result<String, AzureError> {
    let start = iso(now - SKEW);
    let expiry = iso(now + VALIDITY);
    let sig = azure_core::hmac::hmac_sha256(
        &string_to_sign(account, &start, &expiry, protocols),
        &Secret::new(key.to_owned()),
    )
    .map_err(|e| AzureError::Config {
        detail: format!("sign a SAS with the account key: {e}"),
    })?;
    Ok(format!(
        "sv={SIGNED_VERSION}&ss=b&srt=sco&sp={PERMISSIONS}&st={}&se={}&spr={protocols}&sig={}",
        encode(&start),
        encode(&expiry),
        encode(&sig)
    ))
}

/// A service SAS that reads one blob (`sr=b`, `sp=r`) of [`SIGNED_VERSION`] over `protocols`,
/// valid from a little before `now` until `now + valid`: what a tenant's URL carries. The
/// string-to-sign of 2018-11-09 and later: permissions, start, expiry, canonicalized resource,
/// identifier, IP, protocol, version, resource, snapshot time, and the five response-header
/// overrides. `valid` is at most [`crate::MAX_URL_LIFETIME`], so the expiry is never past
/// what a date can hold: anything else is refused, not signed.
pub(crate) fn blob_read_sas(
    account: &str,
    key: &str,
    (container, blob): (&str, &str),
    now: OffsetDateTime,
    valid: std::time::Duration,
    protocols: &str,
) -> Result<String, AzureError> {
    let refused = || AzureError::UrlLifetime { asked: valid };
    if valid.is_zero() || valid > crate::MAX_URL_LIFETIME {
        return Err(refused());
    }
    let valid = Duration::try_from(valid).map_err(|_| refused())?;
    let start = iso(now - SKEW);
    let expiry = iso(now.checked_add(valid).ok_or_else(refused)?);
    let to_sign = format!(
        "r\n{start}\n{expiry}\n/blob/{account}/{container}/{blob}\n\n\n{protocols}\n{SIGNED_VERSION}\nb\n\n\n\n\n\n"
    );
    let sig =
        azure_core::hmac::hmac_sha256(&to_sign, &Secret::new(key.to_owned())).map_err(|e| {
            AzureError::Config {
                detail: format!("sign a SAS with the account key: {e}"),
            }
        })?;
    Ok(format!(
        "sv={SIGNED_VERSION}&sr=b&sp=r&st={}&se={}&spr={protocols}&sig={}",
        encode(&start),
        encode(&expiry),
        encode(&sig)
    ))
}

/// `blob` as a URL path: each segment percent-encoded, `/` kept.
pub(crate) fn blob_path(blob: &str) -> String {
    blob.split('/').map(encode).collect::<Vec<_>>().join("/")
}

/// The value of parameter `name` in SAS query `query` (tests read the fields signed).
#[cfg(test)]
pub(crate) fn param<'a>(query: &'a str, name: &str) -> &'a str {
    query
        .split('&')
        .find_map(|kv| kv.strip_prefix(name)?.strip_prefix('='))
        .unwrap_or_else(|| panic!("no {name} in {query}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_signature_covers_the_documented_fields() {
        let now = OffsetDateTime::from_unix_timestamp(1_764_633_600).unwrap(); // 2025-12-02
        for protocols in ["https", "https,http"] {
            let sas = account_sas("devstoreaccount1", crate::DEV_KEY, now, protocols).unwrap();
            assert!(
                sas.starts_with(&format!(
                    "sv=2018-11-09&ss=b&srt=sco&sp=rwdlacup&st=2025-12-01T23%3A45%3A00Z&se=2025-12-09T00%3A00%3A00Z&spr={protocols}&sig="
                )),
                "{sas}"
            );
            // The signature is the HMAC of exactly these lines (recomputed independently of
            // the query string's encoding).
            let expected = azure_core::hmac::hmac_sha256(
                &format!(
                    "devstoreaccount1\nrwdlacup\nb\nsco\n2025-12-01T23:45:00Z\n2025-12-09T00:00:00Z\n\n{protocols}\n2018-11-09\n"
                ),
                &Secret::new(crate::DEV_KEY.to_owned()),
            )
            .unwrap();
            assert!(sas.ends_with(&format!("&sig={}", encode(&expected))));
        }
        assert!(account_sas("a", "not base64!", now, "https").is_err());
    }

    #[test]
    fn a_read_url_is_signed_for_its_protocols_and_at_most_seven_days() {
        let now = OffsetDateTime::from_unix_timestamp(1_764_633_600).unwrap();
        let hour = std::time::Duration::from_secs(3600);
        let sign = |valid, protocols| {
            blob_read_sas(
                "acct1",
                crate::DEV_KEY,
                ("tiles", "a/b.tif"),
                now,
                valid,
                protocols,
            )
        };
        let sas = sign(hour, "https").unwrap();
        assert_eq!(param(&sas, "spr"), "https");
        assert_eq!(param(&sas, "se"), "2025-12-02T01%3A00%3A00Z");
        let expected = azure_core::hmac::hmac_sha256(
            "r\n2025-12-01T23:45:00Z\n2025-12-02T01:00:00Z\n/blob/acct1/tiles/a/b.tif\n\n\nhttps\n\
             2018-11-09\nb\n\n\n\n\n\n",
            &Secret::new(crate::DEV_KEY.to_owned()),
        )
        .unwrap();
        assert_eq!(param(&sas, "sig"), encode(&expected), "spr is signed");
        assert_eq!(
            param(&sign(hour, "https,http").unwrap(), "spr"),
            "https,http"
        );
        let week = crate::MAX_URL_LIFETIME;
        assert_eq!(
            param(&sign(week, "https").unwrap(), "se"),
            "2025-12-09T00%3A00%3A00Z"
        );
        for asked in [
            week + std::time::Duration::from_secs(1),
            std::time::Duration::from_secs(8 * 86_400),
            std::time::Duration::from_secs(36_500 * 86_400),
            std::time::Duration::from_secs(u64::MAX),
            std::time::Duration::MAX,
            std::time::Duration::ZERO,
        ] {
            match sign(asked, "https") {
                Err(AzureError::UrlLifetime { asked: a }) => assert_eq!(a, asked),
                other => panic!("{asked:?}: {other:?}"),
            }
        }
    }
}

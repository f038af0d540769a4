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
/// How long a signature is valid. A store re-signs when it is opened; a process that runs
/// longer than this must reopen it.
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
fn string_to_sign(account: &str, start: &str, expiry: &str) -> String {
    format!("{account}\n{PERMISSIONS}\nb\nsco\n{start}\n{expiry}\n\nhttps,http\n{SIGNED_VERSION}\n")
}

/// An account SAS query string (no `?`) for the blob service of `account`, valid from a little
/// before `now` for [`VALIDITY`].
pub(crate) fn account_sas(
    account: &str,
    key: &str,
    now: OffsetDateTime,
) -> Result<String, AzureError> {
    let start = iso(now - SKEW);
    let expiry = iso(now + VALIDITY);
    let sig = azure_core::hmac::hmac_sha256(
        &string_to_sign(account, &start, &expiry),
        &Secret::new(key.to_owned()),
    )
    .map_err(|e| AzureError::Config {
        detail: format!("sign a SAS with the account key: {e}"),
    })?;
    Ok(format!(
        "sv={SIGNED_VERSION}&ss=b&srt=sco&sp={PERMISSIONS}&st={}&se={}&spr=https,http&sig={}",
        encode(&start),
        encode(&expiry),
        encode(&sig)
    ))
}

/// A service SAS that reads one blob (`sr=b`, `sp=r`) of [`SIGNED_VERSION`], valid from a
/// little before `now` until `now + valid`: what a tenant's URL carries. The string-to-sign of
/// 2018-11-09 and later: permissions, start, expiry, canonicalized resource, identifier, IP,
/// protocol, version, resource, snapshot time, and the five response-header overrides.
pub(crate) fn blob_read_sas(
    account: &str,
    key: &str,
    container: &str,
    blob: &str,
    now: OffsetDateTime,
    valid: Duration,
) -> Result<String, AzureError> {
    let start = iso(now - SKEW);
    let expiry = iso(now + valid);
    let to_sign = format!(
        "r\n{start}\n{expiry}\n/blob/{account}/{container}/{blob}\n\n\nhttps,http\n{SIGNED_VERSION}\nb\n\n\n\n\n\n"
    );
    let sig =
        azure_core::hmac::hmac_sha256(&to_sign, &Secret::new(key.to_owned())).map_err(|e| {
            AzureError::Config {
                detail: format!("sign a SAS with the account key: {e}"),
            }
        })?;
    Ok(format!(
        "sv={SIGNED_VERSION}&sr=b&sp=r&st={}&se={}&spr=https,http&sig={}",
        encode(&start),
        encode(&expiry),
        encode(&sig)
    ))
}

/// `blob` as a URL path: each segment percent-encoded, `/` kept.
pub(crate) fn blob_path(blob: &str) -> String {
    blob.split('/').map(encode).collect::<Vec<_>>().join("/")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_signature_covers_the_documented_fields() {
        let now = OffsetDateTime::from_unix_timestamp(1_764_633_600).unwrap(); // 2025-12-02
        let sas = account_sas("devstoreaccount1", crate::DEV_KEY, now).unwrap();
        assert!(
            sas.starts_with(
                "sv=2018-11-09&ss=b&srt=sco&sp=rwdlacup&st=2025-12-01T23%3A45%3A00Z&se=2025-12-09T00%3A00%3A00Z&spr=https,http&sig="
            ),
            "{sas}"
        );
        // The signature is the HMAC of exactly these lines (recomputed independently of the
        // query string's encoding).
        let expected = azure_core::hmac::hmac_sha256(
            "devstoreaccount1\nrwdlacup\nb\nsco\n2025-12-01T23:45:00Z\n2025-12-09T00:00:00Z\n\nhttps,http\n2018-11-09\n",
            &Secret::new(crate::DEV_KEY.to_owned()),
        )
        .unwrap();
        assert!(sas.ends_with(&format!("&sig={}", encode(&expected))));
        assert!(account_sas("a", "not base64!", now).is_err());
    }
}

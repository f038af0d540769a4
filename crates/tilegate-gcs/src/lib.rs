//! The Google Cloud Storage backend of tilegate: [`GcsStore`], the `ObjectStore` contract on
//! one bucket and key prefix (`gs://bucket[/prefix]`), over GCS's JSON API.
//!
//! How the contract maps onto GCS:
//! - **Versions are generations.** The store's ETag is the object's generation (quoted),
//!   because generations are what GCS preconditions evaluate: a condition taken from any
//!   `ObjectMeta` means "this very content" here as on S3. `ObjectMeta::version` carries it
//!   too;
//! - Create is a single-request (`uploadType=multipart`) upload with `ifGenerationMatch=0`, so
//!   the precondition is checked before any byte is stored; Update is `ifGenerationMatch=G`;
//!   a conditional delete sends `ifGenerationMatch=G` after a look that reports absence and a
//!   mismatch. 412 → `AlreadyPresent` / `Superseded`, classified by status (the emulator's
//!   reason string is not GCS's);
//! - a read takes the object's metadata, evaluates the caller's conditions on its generation
//!   (an `If-Match` of one tag is also sent as `ifGenerationMatch`), and reads the bytes pinned
//!   to that generation (`generation=G`), so the bytes are exactly the version the conditions
//!   were true of; a generation replaced in between is read again;
//! - a multipart upload is a resumable session created with the mode's precondition, which GCS
//!   checks again when the session is finalised: two racing large uploads end with one
//!   object. The session takes bytes in order, so parts are appended in part-number order
//!   (whole 256 KiB chunks sent as they fill, the remainder with the total at completion) by
//!   the handle that started it. GCS cannot list sessions, so each is recorded at
//!   `.tilegate/uploads/<id>` under the store's prefix (`.tilegate` is refused as a first key
//!   segment), where `list_multipart` finds it and `abort_multipart` cancels it. A completion
//!   must use the mode the upload was started with (`NotImplemented` otherwise).
//!
//! Sources `gs://bucket/key` are pinned by their generation ([`GcsSources`]) and read by GDAL
//! through `/vsigs/` with the same endpoint ([`gdal_gs_config`]).
//!
//! Configuration as Google's client libraries take it: Application Default Credentials
//! (`GOOGLE_APPLICATION_CREDENTIALS`, the gcloud user credentials, the metadata server), and
//! `STORAGE_EMULATOR_HOST` for an emulator (then anonymous, as the libraries do).
//!
//! What fake-gcs-server 1.54 (the emulator the tests run) does not prove: it ignores
//! preconditions on resumable finalisation, on media reads and on deletes (and on media
//! uploads, which the store does not use). The conformance tests that need them say so when
//! they skip; `tests/it/contracts/scripted_gcs.rs` checks the requests tilegate sends there and its
//! reading of GCS's 412 against a scripted responder. A lost answer is tested for real on
//! every HTTP store: a proxy forwards the write and closes the connection unanswered
//! (`tests/lossy.rs`).

pub mod error;
mod meter;
mod sources;
mod store;
mod upload;

pub use error::{Failure, GcsError, classify};
pub use sources::GcsSources;
pub use store::GcsStore;

use tilegate_core::{StoreError, StoreResult, keys};

/// `gs://bucket[/prefix]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GcsLocation {
    pub bucket: String,
    /// `""` or `seg/seg` (no leading or trailing slash).
    pub prefix: String,
}

impl GcsLocation {
    /// Parse and validate a `gs://` URL: a bucket name as GCS allows it (3–63 characters of
    /// a-z, 0-9, `-`, `_`, `.`, starting and ending with a letter or digit), and a prefix of
    /// valid key segments.
    pub fn parse(url: &str) -> StoreResult<Self> {
        let bad = |reason: &str| {
            StoreError::backend(
                "open objects",
                url,
                tilegate_core::Retry::Permanent,
                GcsError::InvalidUrl {
                    url: url.to_owned(),
                    reason: reason.to_owned(),
                },
            )
        };
        let rest = url
            .strip_prefix("gs://")
            .ok_or_else(|| bad("expected gs://bucket[/prefix]"))?;
        let rest = rest.trim_end_matches('/');
        let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
        let ok_char = |b: u8| b.is_ascii_lowercase() || b.is_ascii_digit() || b"-_.".contains(&b);
        let edge = |b: Option<&u8>| b.is_some_and(|b| b.is_ascii_lowercase() || b.is_ascii_digit());
        if !(3..=63).contains(&bucket.len())
            || !bucket.bytes().all(ok_char)
            || !edge(bucket.as_bytes().first())
            || !edge(bucket.as_bytes().last())
        {
            return Err(bad(
                "a bucket name is 3-63 characters of a-z, 0-9, `-`, `_`, `.`, starting and \
                 ending with a letter or digit",
            ));
        }
        if !prefix.is_empty() {
            keys::validate_key(prefix)
                .map_err(|e| bad(&format!("prefix segment `{}`: {}", e.shown, e.reason)))?;
        }
        Ok(Self {
            bucket: bucket.to_owned(),
            prefix: prefix.to_owned(),
        })
    }
}

/// The JSON API endpoint: `STORAGE_EMULATOR_HOST` (`host:port` or a URL, as Google's client
/// libraries accept it) where set, else GCS.
pub fn endpoint() -> (String, bool) {
    endpoint_from(std::env::var("STORAGE_EMULATOR_HOST").ok().as_deref())
}

fn endpoint_from(emulator: Option<&str>) -> (String, bool) {
    match emulator.map(str::trim).filter(|v| !v.is_empty()) {
        Some(v) if v.contains("://") => (v.trim_end_matches('/').to_owned(), true),
        Some(v) => (format!("http://{}", v.trim_end_matches('/')), true),
        None => ("https://storage.googleapis.com".to_owned(), false),
    }
}

/// GDAL configuration options for reading `gs://` sources through `/vsigs/` with the same
/// settings: for an emulator, `CPL_GS_ENDPOINT` (its URL with a trailing `/`) and
/// `GS_NO_SIGN_REQUEST=YES`; otherwise GDAL finds Application Default Credentials itself
/// (`GOOGLE_APPLICATION_CREDENTIALS` and friends are passed through).
pub fn gdal_gs_config() -> Vec<(String, String)> {
    gdal_gs_config_from(|k| std::env::var(k).ok().filter(|v| !v.is_empty()))
}

fn gdal_gs_config_from(get: impl Fn(&str) -> Option<String>) -> Vec<(String, String)> {
    let mut out = Vec::new();
    if let Some(host) = get("STORAGE_EMULATOR_HOST") {
        let (url, _) = endpoint_from(Some(&host));
        out.push(("CPL_GS_ENDPOINT".to_owned(), format!("{url}/")));
        out.push(("GS_NO_SIGN_REQUEST".to_owned(), "YES".to_owned()));
    } else if let Some(v) = get("CPL_GS_ENDPOINT") {
        out.push(("CPL_GS_ENDPOINT".to_owned(), v));
    }
    for k in [
        "GOOGLE_APPLICATION_CREDENTIALS",
        "GS_NO_SIGN_REQUEST",
        "GS_OAUTH2_REFRESH_TOKEN",
        "GS_ACCESS_KEY_ID",
        "GS_SECRET_ACCESS_KEY",
    ] {
        if let Some(v) = get(k)
            && !out.iter().any(|(o, _)| o == k)
        {
            out.push((k.to_owned(), v));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    #[test]
    fn parses_gs_urls() {
        let l = GcsLocation::parse("gs://tiles-1/scenes/a").unwrap();
        assert_eq!(
            (l.bucket.as_str(), l.prefix.as_str()),
            ("tiles-1", "scenes/a")
        );
        let l = GcsLocation::parse("gs://tiles/").unwrap();
        assert_eq!(l.prefix, "");
        for bad in [
            "s3://tiles",
            "gs://ab",
            "gs://Tiles",
            "gs://-tiles",
            "gs://tiles/../x",
            "gs://tiles/a b",
        ] {
            assert!(GcsLocation::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn the_emulator_host_is_taken_as_google_libraries_take_it() {
        assert_eq!(
            endpoint_from(Some("127.0.0.1:4443")),
            ("http://127.0.0.1:4443".to_owned(), true)
        );
        assert_eq!(
            endpoint_from(Some("http://127.0.0.1:4443/")),
            ("http://127.0.0.1:4443".to_owned(), true)
        );
        assert!(!endpoint_from(None).1);
        assert!(!endpoint_from(Some(" ")).1);
    }

    #[test]
    fn gdal_reads_sources_from_the_same_endpoint() {
        let env = HashMap::from([("STORAGE_EMULATOR_HOST", "127.0.0.1:5610")]);
        let got = gdal_gs_config_from(|k| env.get(k).map(|v| (*v).to_owned()));
        assert!(got.contains(&("CPL_GS_ENDPOINT".into(), "http://127.0.0.1:5610/".into())));
        assert!(got.contains(&("GS_NO_SIGN_REQUEST".into(), "YES".into())));
        assert!(gdal_gs_config_from(|_| None).is_empty());
    }
}

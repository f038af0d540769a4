//! What travels in headers: user metadata as Azure names it, a write's condition headers,
//! and an object's metadata read back from an answer's headers.

use azure_core::http::Etag;
use azure_core::http::headers::Headers;
use std::collections::{BTreeMap, HashMap};
use std::time::{SystemTime, UNIX_EPOCH};
use tilegate_core::object::{ObjectMeta, PutMode};
use tilegate_core::{ETag, StoreError, StoreResult};

/// Azure metadata names are C# identifiers, so `-` (as in `tilegate-attempt`) is stored as
/// this, and read back as `-`.
const HYPHEN: &str = "_h_";

/// User metadata as Azure stores it: names of ASCII letters, digits, `_` and `-` (stored as
/// [`HYPHEN`]), not starting with a digit; values of printable ASCII (they travel as
/// `x-ms-meta-*` headers).
pub(crate) fn to_azure_metadata(
    metadata: &BTreeMap<String, String>,
) -> StoreResult<HashMap<String, String>> {
    let mut out = HashMap::new();
    for (name, value) in metadata {
        let name_ok = !name.is_empty()
            && !name.starts_with(|c: char| c.is_ascii_digit())
            && name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
            && !name.contains(HYPHEN);
        let value_ok = value.chars().all(|c| c == ' ' || c.is_ascii_graphic());
        if !name_ok || !value_ok {
            return Err(StoreError::InvalidKey {
                key: name.chars().take(64).flat_map(char::escape_debug).collect(),
                reason: "Azure user metadata needs names of ASCII letters, digits, `_` and `-` \
                         (not starting with a digit) and printable ASCII values"
                    .to_owned(),
            });
        }
        out.insert(name.replace('-', HYPHEN), value.clone());
    }
    Ok(out)
}

pub(super) fn from_azure_name(name: &str) -> String {
    name.replace(HYPHEN, "-")
}

pub(super) fn time_of(t: Option<time::OffsetDateTime>) -> SystemTime {
    t.map_or(UNIX_EPOCH, SystemTime::from)
}

pub(super) fn etag_header(t: &ETag) -> Etag {
    Etag::from(t.as_str().to_owned())
}

/// A write's condition headers for `mode`, as (`If-Match`, `If-None-Match`); `None` when an
/// Update names no ETag, which cannot be the current version.
pub(crate) type Conditions = (Option<Etag>, Option<Etag>);

pub(crate) fn conditions(mode: &PutMode) -> Option<Conditions> {
    match mode {
        PutMode::Overwrite => Some((None, None)),
        PutMode::Create => Some((None, Some(Etag::from("*")))),
        PutMode::Update(v) => v.e_tag.as_ref().map(|t| (Some(etag_header(t)), None)),
    }
}

/// An object's metadata from the headers of a HEAD or GET answer.
pub(crate) fn meta_of_headers(key: &str, h: &Headers, size: Option<u64>) -> ObjectMeta {
    let get = |n: &str| {
        h.iter()
            .find(|(k, _)| k.as_str().eq_ignore_ascii_case(n))
            .map(|(_, v)| v.as_str().to_owned())
    };
    // A ranged answer's total is after the `/` of `Content-Range: bytes a-b/total`.
    let total = get("content-range")
        .and_then(|r| r.rsplit_once('/').and_then(|(_, t)| t.parse().ok()))
        .or(size)
        .or_else(|| get("content-length").and_then(|l| l.parse().ok()))
        .unwrap_or(0);
    let metadata = h
        .iter()
        .filter_map(|(k, v)| {
            let k = k.as_str().to_ascii_lowercase();
            k.strip_prefix("x-ms-meta-")
                .map(|n| (from_azure_name(n), v.as_str().to_owned()))
        })
        .collect();
    ObjectMeta {
        key: key.to_owned(),
        size: total,
        e_tag: ETag::new(get("etag").unwrap_or_default()),
        last_modified: time_of(
            get("last-modified").and_then(|t| azure_core::time::parse_rfc7231(&t).ok()),
        ),
        version: None,
        metadata,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metadata_names_round_trip_through_identifiers() {
        let m: BTreeMap<String, String> = [
            ("tilegate-attempt".to_owned(), "abc".to_owned()),
            ("owner".to_owned(), "worker-7".to_owned()),
        ]
        .into();
        let a = to_azure_metadata(&m).unwrap();
        assert_eq!(a["tilegate_h_attempt"], "abc");
        assert_eq!(from_azure_name("tilegate_h_attempt"), "tilegate-attempt");
        for bad in ["", "1x", "a b", "x_h_y", "é"] {
            let m = [(bad.to_owned(), "v".to_owned())].into();
            assert!(to_azure_metadata(&m).is_err(), "{bad:?}");
        }
        let m = [("k".to_owned(), "line\nbreak".to_owned())].into();
        assert!(to_azure_metadata(&m).is_err());
    }
}

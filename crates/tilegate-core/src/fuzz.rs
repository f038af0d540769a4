//! Properties that must hold for arbitrary input bytes, shared by the `cargo fuzz` targets in
//! `fuzz/` and the property tests of the test suite (so CI exercises the same checks on every
//! run). Each function panics when a property is violated; none panics on merely bad input.

use crate::etag::{ConditionList, ETag};
use crate::id::JobId;
use crate::keys::{Prefix, validate_key, validate_segment};
use crate::message::WindowMessage;

fn is_reason_code(code: &str) -> bool {
    !code.is_empty() && code.bytes().all(|b| b.is_ascii_lowercase() || b == b'-')
}

/// The message decoder: never panics; what it accepts is self-consistent (window inside the
/// grid, job ID derived from source and recipe, canonical prefix) and survives a round trip;
/// what it refuses carries a named reason.
pub fn window_message(data: &[u8]) {
    let Ok(body) = std::str::from_utf8(data) else {
        return;
    };
    match WindowMessage::decode(body) {
        Ok(m) => {
            assert!(
                m.grid.contains(m.window),
                "accepted a window outside the grid"
            );
            assert_eq!(
                m.job_id,
                JobId::of(&m.source, &m.recipe, &m.prefix, &m.tenant),
                "accepted a job ID that does not derive from its source, recipe and prefix"
            );
            assert!(Prefix::parse(m.prefix.as_str()).is_ok());
            let again = WindowMessage::decode(&m.encode()).expect("re-decode an accepted message");
            assert_eq!(again, m, "an accepted message does not round-trip");
        }
        Err(e) => assert!(
            is_reason_code(e.reason_code().as_str()),
            "unnamed refusal: {e}"
        ),
    }
}

/// Key validation: whatever is accepted is made only of safe segments, and keys built from an
/// accepted prefix are accepted too.
pub fn key_segments(data: &[u8]) {
    let Ok(s) = std::str::from_utf8(data) else {
        return;
    };
    let safe = |seg: &str| {
        !seg.is_empty()
            && seg != "."
            && seg != ".."
            && seg.len() <= 128
            && seg
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
    };
    if let Ok(seg) = validate_segment(s) {
        assert!(safe(seg), "accepted unsafe segment {seg:?}");
    }
    if let Ok(key) = validate_key(s) {
        assert!(key.split('/').all(safe), "accepted unsafe key {key:?}");
    }
    if let Ok(p) = Prefix::parse(s) {
        assert_eq!(p.as_str(), s, "a prefix was normalised instead of refused");
        assert!(
            p.as_str().len() <= crate::keys::MAX_PREFIX_LEN,
            "accepted a prefix of {} bytes",
            p.as_str().len()
        );
        let job = JobId::derive("u", "e", "r", "p");
        // The longest tile key any grid can give: the largest row and column.
        let key = p.tile_key(&job, crate::Window::new(u32::MAX, u32::MAX));
        assert!(
            validate_key(&key).is_ok(),
            "tile key {key:?} of an accepted prefix"
        );
        assert!(validate_key(&p.scene_key(&job)).is_ok());
    }
}

/// `If-Match` / `If-None-Match` lists: an accepted list renders back to a header that parses to
/// the same list, and strong matching implies weak matching.
pub fn condition_list(data: &[u8]) {
    let Ok(s) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(list) = ConditionList::parse(s) else {
        return;
    };
    let again = ConditionList::parse(&list.to_header()).expect("re-parse a rendered list");
    assert_eq!(again, list, "a condition list does not round-trip");
    if let ConditionList::Tags(tags) = &list {
        assert!(!tags.is_empty());
        for t in tags {
            assert!(list.matches_weak(t));
            let strong = ETag::new(t.as_str().trim_start_matches("W/"));
            if list.matches_strong(&strong) {
                assert!(list.matches_weak(&strong));
            }
        }
    } else {
        assert!(list.matches_strong(&ETag::new("\"anything\"")));
    }
}

/// The source policy under arbitrary references (the default policy): the input is an origin
/// line (empty: the operator's command line; otherwise the document a reference comes from)
/// and then either a reference or a STAC Item whose assets' hrefs are the references. Never
/// panics; whatever it accepts from a remote document is neither a local file nor off the
/// document's origin; no accepted HTTP(S) URL names a special address literally; every refusal
/// names its rule.
pub fn source_policy(data: &[u8]) {
    use crate::source_policy::{Origin, SourcePolicy, special};
    let text = String::from_utf8_lossy(data);
    let (origin_line, rest) = text.split_once('\n').unwrap_or(("", &text));
    let origin = if origin_line.is_empty() {
        Origin::Operator
    } else {
        Origin::Document(origin_line)
    };
    let refs: Vec<String> = match serde_json::from_str::<serde_json::Value>(rest) {
        Ok(item) => item
            .get("assets")
            .and_then(|a| a.as_object())
            .map(|assets| {
                assets
                    .values()
                    .filter_map(|a| a.get("href")?.as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default(),
        Err(_) => vec![rest.to_owned()],
    };
    let policy = SourcePolicy::default();
    let remote_doc = match origin {
        Origin::Document(d) => url::Url::parse(d)
            .ok()
            .filter(|u| matches!(u.scheme(), "http" | "https" | "s3" | "gs" | "az")),
        Origin::Operator => None,
    };
    for r in refs {
        match policy.check(&r, origin) {
            Ok(()) => {
                let parsed = url::Url::parse(&r).ok();
                if let Some(doc) = &remote_doc {
                    let u = parsed
                        .as_ref()
                        .expect("accepted a reference from a remote document that is no URL");
                    assert_ne!(u.scheme(), "file", "a remote document reached a local file");
                    assert!(
                        u.scheme() == doc.scheme()
                            || (matches!(u.scheme(), "http" | "https")
                                && matches!(doc.scheme(), "http" | "https")),
                        "a remote document reached another kind of store: {r} from {doc}"
                    );
                    assert_eq!(
                        u.host_str().map(str::to_ascii_lowercase),
                        doc.host_str().map(str::to_ascii_lowercase),
                        "a remote document reached another origin: {r} from {doc}"
                    );
                }
                if let Some(u) = parsed.filter(|u| matches!(u.scheme(), "http" | "https")) {
                    let ip = match u.host() {
                        Some(url::Host::Ipv4(ip)) => Some(std::net::IpAddr::V4(ip)),
                        Some(url::Host::Ipv6(ip)) => Some(std::net::IpAddr::V6(ip)),
                        _ => None,
                    };
                    if let Some(ip) = ip {
                        assert_eq!(special(ip), None, "accepted a special address: {r}");
                    }
                }
            }
            Err(f) => assert!(is_reason_code(f.rule), "unnamed refusal: {f}"),
        }
    }
}

/// The arrival reader ([`crate::arrival::parse`]): never panics on hostile bytes; an object it
/// accepts is named by a plain bucket and a key without control characters, its URI exactly
/// `s3://bucket/key`; an item has a usable ID.
pub fn arrival(data: &[u8]) {
    use crate::arrival::{Arrival, Record, parse};
    let Ok(body) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(records) = parse(body) else { return };
    for r in records {
        match r {
            Record::Arrival(Arrival::Object {
                uri, bucket, key, ..
            }) => {
                assert_eq!(uri, format!("s3://{bucket}/{key}"));
                assert!(
                    !bucket.is_empty() && !bucket.contains('/'),
                    "accepted bucket {bucket:?}"
                );
                assert!(
                    !key.is_empty() && !key.chars().any(char::is_control),
                    "accepted key {key:?}"
                );
            }
            Record::Arrival(Arrival::Item { id, .. }) => {
                assert!(!id.is_empty() && !id.chars().any(char::is_control));
            }
            Record::Ignored(_) => {}
        }
    }
}

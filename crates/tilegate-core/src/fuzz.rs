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
        Err(e) => assert!(is_reason_code(e.reason_code()), "unnamed refusal: {e}"),
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

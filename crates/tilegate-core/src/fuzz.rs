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

/// One parse of every reference, checked against the readers downstream: for any string the
/// parser accepts ([`crate::reference::Reference::parse`]), the policy's reading, the HTTP
/// client's request (reqwest parses the canonical form with the same WHATWG parser), and
/// GDAL's (its `/vsicurl/` URL read by curl's RFC 3986 rules: the authority runs to the first
/// `/`, `?` or `#`, userinfo to its last `@`, `\` an ordinary character; its `/vsigs/`,
/// `/vsiaz/` and `/vsis3/` paths with dot segments collapsed, the first segment the bucket) all
/// name the same scheme, host, port and path — of the canonical form and of the input as typed.
/// Whatever differs is refused with a named rule.
pub fn reference_differential(data: &[u8]) {
    use crate::reference::{Reference, Store};
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let r = match Reference::parse(text) {
        Ok(r) => r,
        Err(f) => {
            assert!(is_reason_code(f.rule), "unnamed refusal: {f}");
            return;
        }
    };
    let canonical = r.canonical();
    assert_eq!(
        Reference::parse(&canonical).as_ref(),
        Ok(&r),
        "the canonical form is a fixed point: {text:?} → {canonical:?}"
    );
    match &r {
        Reference::Http(u) => {
            // The HTTP client's request: the same parser on the canonical form.
            let client = url::Url::parse(&canonical).expect("the canonical form is a URL");
            assert_eq!(client.host_str(), u.host_str());
            assert_eq!(client.port_or_known_default(), u.port_or_known_default());
            assert_eq!(client.path(), u.path());
            // GDAL: curl's reading of the `/vsicurl/` URL, and of the input as typed.
            let gdal = r.gdal_path().expect("a URL is read");
            let gdal_url = gdal
                .strip_prefix("/vsicurl/")
                .expect("read through /vsicurl/");
            for (what, s) in [("GDAL's URL", gdal_url), ("the input", text)] {
                let c = rfc3986(s).unwrap_or_else(|| panic!("{what} is no URL to curl: {s:?}"));
                assert_eq!(c.scheme, u.scheme(), "{what}: scheme of {text:?}");
                assert_eq!(c.userinfo, None, "{what}: userinfo in {text:?}");
                // The same host: GDAL's exactly; the typed one as the host parser reads it
                // (case, IDNA, IPv4 spellings), which is where the authority ended.
                let host = if what == "GDAL's URL" {
                    Some(c.host.to_owned())
                } else {
                    url::Host::parse(c.host).ok().map(|h| h.to_string())
                };
                assert_eq!(host.as_deref(), u.host_str(), "{what}: host of {text:?}");
                let port = match c.port {
                    "" => u.port_or_known_default(),
                    p => p.parse().ok(),
                };
                assert_eq!(port, u.port_or_known_default(), "{what}: port of {text:?}");
                assert_eq!(
                    remove_dot_segments(c.path),
                    c.path,
                    "{what}: dot segments in {text:?}"
                );
            }
        }
        Reference::Object { store, bucket, key } => {
            let gdal = r.gdal_path().expect("an object is read");
            let vsi_rest = gdal.splitn(3, '/').nth(2).unwrap_or("");
            let typed = text.split_once("://").map_or("", |(_, rest)| rest);
            let typed = match store {
                // GDAL's `/vsiaz/` path starts at the container.
                Store::Az => typed.split_once('/').map_or("", |(_, rest)| rest),
                _ => typed,
            };
            for (what, path) in [("GDAL's path", vsi_rest), ("the input", typed)] {
                let collapsed = remove_dot_segments(&format!("/{path}"));
                let (b, k) = collapsed[1..]
                    .split_once('/')
                    .unwrap_or((&collapsed[1..], ""));
                let expected_bucket = match store {
                    Store::Az => bucket.split_once('/').map_or("", |(_, c)| c),
                    _ => bucket.as_str(),
                };
                assert_eq!(b, expected_bucket, "{what}: bucket of {text:?}");
                assert_eq!(k, key, "{what}: key of {text:?}");
            }
        }
        Reference::Local(_) | Reference::Message(_) => {}
    }
}

/// A URL as curl reads it (RFC 3986): scheme, userinfo (to the authority's last `@`), host,
/// port and path. `None` for what is no `scheme://` URL.
struct Rfc3986<'a> {
    scheme: String,
    userinfo: Option<&'a str>,
    host: &'a str,
    port: &'a str,
    path: &'a str,
}

fn rfc3986(s: &str) -> Option<Rfc3986<'_>> {
    let (scheme, rest) = s.split_once("://")?;
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(end);
    let (userinfo, hostport) = match authority.rsplit_once('@') {
        Some((u, h)) => (Some(u), h),
        None => (None, authority),
    };
    let (host, port) = if let Some(v6) = hostport.strip_prefix('[') {
        let (h, after) = v6.split_once(']')?;
        (h, after.strip_prefix(':').unwrap_or(after))
    } else {
        hostport.rsplit_once(':').unwrap_or((hostport, ""))
    };
    let host = if hostport.starts_with('[') {
        // Compare as the URL parser writes an IPv6 host: in brackets.
        &authority[authority.find('[')?..authority.find(']')? + 1]
    } else {
        host
    };
    let path = tail.split(['?', '#']).next().unwrap_or("");
    Some(Rfc3986 {
        scheme: scheme.to_ascii_lowercase(),
        userinfo,
        host,
        port,
        path,
    })
}

/// RFC 3986's remove_dot_segments, as curl and GDAL's `/vsi*/` paths apply it.
fn remove_dot_segments(path: &str) -> String {
    let mut out: Vec<&str> = Vec::new();
    let segments: Vec<&str> = path.split('/').collect();
    for (i, seg) in segments.iter().enumerate() {
        let last = i + 1 == segments.len();
        match *seg {
            "." => {
                if last {
                    out.push("");
                }
            }
            ".." => {
                if out.len() > 1 {
                    out.pop();
                }
                if last {
                    out.push("");
                }
            }
            s => out.push(s),
        }
    }
    out.join("/")
}

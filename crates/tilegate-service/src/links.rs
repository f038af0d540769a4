//! Links the service signs itself, for a store that cannot sign (the embedded store, whose own
//! "URL" is a `file://` path on the server that nothing can expire): `POST …/urls` answers
//! `{base}/v1/objects/{key}?expires=…&sig=…`, and `GET /v1/objects/{key}` streams the object
//! to whoever holds an unexpired, untampered link — the link is the whole grant, as an S3
//! presigned URL is.
//!
//! The signature is HMAC-SHA256 over the key and the expiry, with a secret of the data
//! directory's own (32 random bytes in `service-link.secret`, made `0600` on first use and
//! published with a create-if-absent link, so two servers on one directory share one). Only a
//! key of the job the request names is ever signed ([`LinkSigner::sign`]); the key is checked
//! as every object key is ([`ObjectKey::checked`]: no `..`, no empty or odd segments) before
//! it is signed and again before it is read.

use crate::error::ApiError;
use axum::body::Body;
use axum::extract::{Path, RawQuery, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use base64::Engine as _;
use bytes::Bytes;
use std::io::Write as _;
use std::path::{Path as FsPath, PathBuf};
use std::sync::Arc;
use tilegate_core::object::ObjectStoreExt as _;
use tilegate_core::table::JobRecord;
use tilegate_core::{JobId, ObjectKey, Prefix, Reason, UnixMillis, now_millis};

/// The secret's file name in the data directory.
pub const SECRET_FILE: &str = "service-link.secret";

/// Where links are signed and checked.
pub struct LinkSigner {
    key: aws_lc_rs::hmac::Key,
    /// What links start with: `http://127.0.0.1:8080` (no trailing `/`).
    base: String,
}

impl std::fmt::Debug for LinkSigner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LinkSigner")
            .field("base", &self.base)
            .finish_non_exhaustive()
    }
}

/// Why a link's secret could not be had.
#[derive(Debug, thiserror::Error)]
pub enum SecretError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{0}: not a link secret (64 hexadecimal digits); remove it to make a new one")]
    Malformed(PathBuf),
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn unhex(s: &str) -> Option<Vec<u8>> {
    let s = s.trim();
    if s.len() != 64 {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

/// The data directory's link secret: read, or made (`0600`) and published create-if-absent.
pub fn load_or_create_secret(dir: &FsPath) -> Result<Vec<u8>, SecretError> {
    let path = dir.join(SECRET_FILE);
    let io = |source| SecretError::Io {
        path: path.clone(),
        source,
    };
    if !path.exists() {
        std::fs::create_dir_all(dir).map_err(io)?;
        let mut secret = [0u8; 32];
        aws_lc_rs::rand::fill(&mut secret).map_err(|_| {
            io(std::io::Error::other(
                "the system's random source did not answer",
            ))
        })?;
        let tmp = dir.join(format!("{SECRET_FILE}.{}.tmp", std::process::id()));
        {
            let mut opts = std::fs::OpenOptions::new();
            opts.write(true).create_new(true);
            #[cfg(unix)]
            std::os::unix::fs::OpenOptionsExt::mode(&mut opts, 0o600);
            let mut f = opts.open(&tmp).map_err(io)?;
            f.write_all(format!("{}\n", hex(&secret)).as_bytes())
                .and_then(|()| f.sync_all())
                .map_err(io)?;
        }
        // Create-if-absent: a second server racing this one keeps the first secret.
        let linked = std::fs::hard_link(&tmp, &path);
        let _ = std::fs::remove_file(&tmp);
        match linked {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(io(e)),
        }
    }
    let text = std::fs::read_to_string(&path).map_err(io)?;
    unhex(&text).ok_or(SecretError::Malformed(path))
}

/// Whether `key` is one of `job`'s own objects: its tiles, its scene (and the scene's STAC
/// Item beside it), its attempts, or a pyramid's archive and tiles.
pub fn of_job(p: &Prefix, id: &JobId, key: &str) -> bool {
    key.starts_with(&p.tiles_dir(id))
        || key.starts_with(&p.attempts_dir(id))
        || key == p.scene_key(id).as_str()
        || key == p.pyramid_key(id).as_str()
        || key.starts_with(&p.pyramid_dir(id))
}

/// A link's query: `expires` (ms since the epoch) and `sig`.
#[derive(Debug, PartialEq, Eq)]
struct LinkQuery {
    expires: UnixMillis,
    sig: String,
}

fn parse_query(q: Option<&str>) -> Option<LinkQuery> {
    let (mut expires, mut sig) = (None, None);
    for pair in q?.split('&') {
        match pair.split_once('=') {
            Some(("expires", v)) => expires = v.parse().ok(),
            Some(("sig", v)) => sig = Some(v.to_owned()),
            _ => {}
        }
    }
    Some(LinkQuery {
        expires: expires?,
        sig: sig?,
    })
}

fn invalid(message: impl Into<String>) -> ApiError {
    ApiError::new(StatusCode::FORBIDDEN, Reason::LinkSignatureInvalid, message)
}

impl LinkSigner {
    /// A signer with `secret` for links under `base` (`http://HOST:PORT`).
    pub fn new(secret: &[u8], base: &str) -> Self {
        Self {
            key: aws_lc_rs::hmac::Key::new(aws_lc_rs::hmac::HMAC_SHA256, secret),
            base: base.trim_end_matches('/').to_owned(),
        }
    }

    fn message(key: &str, expires: UnixMillis) -> Vec<u8> {
        format!("tilegate-link-v1\n{key}\n{expires}").into_bytes()
    }

    fn signature(&self, key: &str, expires: UnixMillis) -> String {
        let tag = aws_lc_rs::hmac::sign(&self.key, &Self::message(key, expires));
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(tag.as_ref())
    }

    /// A link to `key` of `job` that works until `expires`. A key that is not the job's own
    /// object, or not a valid key, is never signed.
    pub fn sign(
        &self,
        job: &JobRecord,
        key: &str,
        expires: UnixMillis,
    ) -> Result<String, ApiError> {
        self.sign_for(&job.prefix, &job.job_id, key, expires)
    }

    /// [`Self::sign`] for the job `id` whose outputs are under `prefix`.
    pub fn sign_for(
        &self,
        prefix: &Prefix,
        id: &JobId,
        key: &str,
        expires: UnixMillis,
    ) -> Result<String, ApiError> {
        let checked = ObjectKey::checked(key).map_err(|e| {
            ApiError::unprocessable(Reason::UnsafeKeySegment, format!("not an object key: {e}"))
        })?;
        if !of_job(prefix, id, checked.as_str()) {
            return Err(ApiError::new(
                StatusCode::FORBIDDEN,
                Reason::NotYourTenant,
                format!(
                    "`{}` is not an object of job {}: only a job's own outputs are signed",
                    crate::error::shown(key),
                    id
                ),
            ));
        }
        let key = checked.as_str();
        Ok(format!(
            "{}/v1/objects/{key}?expires={expires}&sig={}",
            self.base,
            self.signature(key, expires)
        ))
    }

    /// Check a link to `key` with `query` at `now`: its signature first (an altered link says
    /// nothing about its expiry), then its expiry.
    fn verify(&self, key: &str, query: Option<&str>, now: UnixMillis) -> Result<(), ApiError> {
        let q = parse_query(query)
            .ok_or_else(|| invalid("a link needs `expires` and `sig`: ask the service for one"))?;
        let tag = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(q.sig.as_bytes())
            .map_err(|_| invalid("the link's signature is not one this service makes"))?;
        aws_lc_rs::hmac::verify(&self.key, &Self::message(key, q.expires), &tag).map_err(|_| {
            invalid(
                "the link's signature does not match its object and expiry (altered, or signed by \
                 another data directory)",
            )
        })?;
        if q.expires <= now {
            return Err(ApiError::new(
                StatusCode::FORBIDDEN,
                Reason::LinkExpired,
                format!(
                    "the link expired at {}: ask the service for a new one (`POST /v1/jobs/{{id}}/urls`)",
                    tilegate_core::time::rfc3339(q.expires)
                ),
            ));
        }
        Ok(())
    }
}

/// A single `bytes=` range of a body of `len` bytes: `Ok(None)` for none (or one not worth
/// honouring: several ranges), `Err` for one that does not overlap the body (416).
fn wanted_range(headers: &HeaderMap, len: u64) -> Result<Option<(u64, u64)>, ()> {
    let Some(spec) = headers
        .get(header::RANGE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().strip_prefix("bytes="))
    else {
        return Ok(None);
    };
    if spec.contains(',') {
        return Ok(None);
    }
    let (a, b) = spec.split_once('-').ok_or(())?;
    let (a, b) = (a.trim(), b.trim());
    let (start, end) = match (a.is_empty(), b.is_empty()) {
        // `-N`: the last N bytes.
        (true, false) => {
            let n: u64 = b.parse().map_err(|_| ())?;
            if n == 0 {
                return Err(());
            }
            (len.saturating_sub(n), len.saturating_sub(1))
        }
        (false, true) => (a.parse().map_err(|_| ())?, len.saturating_sub(1)),
        (false, false) => {
            let (s, e): (u64, u64) = (a.parse().map_err(|_| ())?, b.parse().map_err(|_| ())?);
            (s, e.min(len.saturating_sub(1)))
        }
        (true, true) => return Err(()),
    };
    if len == 0 || start >= len || start > end {
        return Err(());
    }
    Ok(Some((start, end)))
}

/// `body` as a GET of it answers: whole, or the one range asked for (206), or 416; with its
/// ETag, size and `Accept-Ranges`. A HEAD gets the same headers.
pub fn ranged(
    headers: &HeaderMap,
    body: Bytes,
    etag: &str,
    content_type: &'static str,
) -> Response {
    let len = body.len() as u64;
    let (status, part, range) = match wanted_range(headers, len) {
        Ok(None) => (StatusCode::OK, body, None),
        Ok(Some((s, e))) => (
            StatusCode::PARTIAL_CONTENT,
            body.slice(s as usize..=e as usize),
            Some(format!("bytes {s}-{e}/{len}")),
        ),
        Err(()) => {
            let mut r = ApiError::new(
                StatusCode::RANGE_NOT_SATISFIABLE,
                Reason::BadRequest,
                format!("the range asked for is not within the object's {len} bytes"),
            )
            .into_response();
            if let Ok(v) = HeaderValue::from_str(&format!("bytes */{len}")) {
                r.headers_mut().insert(header::CONTENT_RANGE, v);
            }
            return r;
        }
    };
    let mut r = Response::new(Body::from(part.clone()));
    *r.status_mut() = status;
    let h = r.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    h.insert(header::CONTENT_LENGTH, HeaderValue::from(part.len()));
    h.insert(header::ACCEPT_RANGES, HeaderValue::from_static("bytes"));
    if let Ok(v) = HeaderValue::from_str(etag) {
        h.insert(header::ETAG, v);
    }
    if let Some(cr) = range.and_then(|c| HeaderValue::from_str(&c).ok()) {
        h.insert(header::CONTENT_RANGE, cr);
    }
    r
}

/// `GET /v1/objects/{key}?expires=…&sig=…`: the object, to whoever holds a valid link.
pub async fn object(
    State(s): State<Arc<crate::Service>>,
    Path(key): Path<String>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let Some(signer) = &s.links else {
        return Err(ApiError::new(
            StatusCode::NOT_FOUND,
            Reason::BadRequest,
            "this service signs no links of its own: its store signs them",
        ));
    };
    let checked = ObjectKey::checked(&key).map_err(|e| {
        ApiError::bad_request(Reason::UnsafeKeySegment, format!("not an object key: {e}"))
    })?;
    signer.verify(checked.as_str(), query.as_deref(), now_millis())?;
    let got = match s.backends.objects.get_bytes(&checked).await {
        Ok(g) => g,
        Err(tilegate_core::StoreError::NotFound { .. }) => {
            return Err(ApiError::new(
                StatusCode::NOT_FOUND,
                Reason::NoTile,
                "the object this link names is gone (collected, or never published)",
            ));
        }
        Err(e) => return Err(e.into()),
    };
    let etag = got.meta.e_tag.as_str().to_owned();
    Ok(ranged(&headers, got.bytes, &etag, "image/tiff"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(v: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(header::RANGE, HeaderValue::from_str(v).unwrap());
        h
    }

    #[test]
    fn a_link_verifies_until_it_expires_and_not_once_altered() {
        let s = LinkSigner::new(&[7; 32], "http://127.0.0.1:1/");
        let sig = s.signature("p/scenes/j.tif", 2_000);
        let q = format!("expires=2000&sig={sig}");
        assert!(s.verify("p/scenes/j.tif", Some(&q), 1_999).is_ok());
        let e = s.verify("p/scenes/j.tif", Some(&q), 2_000).unwrap_err();
        assert_eq!(e.reason, Reason::LinkExpired);
        for (key, q) in [
            ("p/scenes/k.tif", q.clone()),
            ("p/scenes/j.tif", format!("expires=3000&sig={sig}")),
            ("p/scenes/j.tif", "expires=2000".to_owned()),
            ("p/scenes/j.tif", "expires=2000&sig=%%".to_owned()),
        ] {
            let e = s.verify(key, Some(&q), 1_000).unwrap_err();
            assert_eq!(e.reason, Reason::LinkSignatureInvalid, "{key} {q}");
            assert_eq!(e.status, StatusCode::FORBIDDEN);
        }
        let other = LinkSigner::new(&[8; 32], "http://127.0.0.1:1");
        let e = other.verify("p/scenes/j.tif", Some(&q), 1_000).unwrap_err();
        assert_eq!(e.reason, Reason::LinkSignatureInvalid);
    }

    #[test]
    fn only_a_jobs_own_valid_keys_are_signed() {
        let s = LinkSigner::new(&[7; 32], "http://127.0.0.1:1");
        let prefix = Prefix::parse("out/tenants/a").unwrap();
        let job = JobId::derive("u", "e", "r", "p");
        let other = JobId::derive("v", "e", "r", "p");
        for key in [
            prefix.scene_key(&job).into_string(),
            prefix
                .tile_key(&job, tilegate_core::Window::new(0, 1))
                .into_string(),
            format!("{}scene/attempt-x.tif", prefix.attempts_dir(&job)),
        ] {
            let url = s.sign_for(&prefix, &job, &key, 5_000).unwrap();
            assert!(
                url.starts_with(&format!(
                    "http://127.0.0.1:1/v1/objects/{key}?expires=5000&sig="
                )),
                "{url}"
            );
        }
        let refused = [
            // Another job's scene, another tenant's, the keys' own directory.
            prefix.scene_key(&other).into_string(),
            format!("out/tenants/b/scenes/{job}.tif"),
            ".service/keys/x/key.json".to_owned(),
            // Not keys at all.
            format!("{}../../b/x.tif", prefix.tiles_dir(&job)),
            format!("{}/scenes//{job}.tif", prefix.as_str()),
        ];
        for key in refused {
            assert!(s.sign_for(&prefix, &job, &key, 5_000).is_err(), "{key}");
        }
    }

    #[test]
    fn ranges_are_single_and_within_the_body() {
        assert_eq!(wanted_range(&HeaderMap::new(), 10), Ok(None));
        assert_eq!(wanted_range(&at("bytes=0-3"), 10), Ok(Some((0, 3))));
        assert_eq!(wanted_range(&at("bytes=4-"), 10), Ok(Some((4, 9))));
        assert_eq!(wanted_range(&at("bytes=-3"), 10), Ok(Some((7, 9))));
        assert_eq!(wanted_range(&at("bytes=5-100"), 10), Ok(Some((5, 9))));
        assert_eq!(wanted_range(&at("bytes=0-1,4-5"), 10), Ok(None));
        assert_eq!(wanted_range(&at("bytes=10-"), 10), Err(()));
        assert_eq!(wanted_range(&at("bytes=5-2"), 10), Err(()));
    }

    #[test]
    fn the_secret_is_made_once_private_and_shared() {
        let dir = std::env::temp_dir().join(format!("tilegate-link-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let a = load_or_create_secret(&dir).unwrap();
        let b = load_or_create_secret(&dir).unwrap();
        assert_eq!(a, b);
        assert_eq!(a.len(), 32);
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt as _;
            let mode = std::fs::metadata(dir.join(SECRET_FILE))
                .unwrap()
                .permissions()
                .mode();
            assert_eq!(mode & 0o777, 0o600);
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

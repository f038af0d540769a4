//! Sources served over HTTP(S): pinned by a HEAD (the ETag, or Last-Modified and size where the
//! server sends no ETag) when planning and again per window, read by GDAL through `/vsicurl/`.

use crate::source::SourceError;
use std::sync::LazyLock;
use std::time::Duration;
use tilegate_core::ETag;

static CLIENT: LazyLock<reqwest::Client> = LazyLock::new(|| {
    reqwest::Client::builder()
        .connect_timeout(Duration::from_secs(10))
        .timeout(Duration::from_secs(60))
        .build()
        .expect("build the HTTP client")
});

/// True for `http://` and `https://` URIs.
pub fn is_http(uri: &str) -> bool {
    uri.starts_with("https://") || uri.starts_with("http://")
}

fn failure(uri: &str, status: Option<reqwest::StatusCode>, message: String) -> SourceError {
    match status {
        Some(s) if s == reqwest::StatusCode::NOT_FOUND || s == reqwest::StatusCode::GONE => {
            SourceError::Missing {
                path: uri.to_owned(),
            }
        }
        _ => SourceError::Http {
            uri: uri.to_owned(),
            retryable: status
                .is_none_or(|s| s.is_server_error() || s == reqwest::StatusCode::TOO_MANY_REQUESTS),
            message,
        },
    }
}

/// HEAD `uri`: its pin (the ETag, else `"lm:<Last-Modified>;size:<bytes>"`) and size.
pub async fn head(uri: &str) -> Result<(ETag, u64), SourceError> {
    let resp = CLIENT
        .head(uri)
        .send()
        .await
        .map_err(|e| failure(uri, e.status(), format!("HEAD: {e}")))?;
    let status = resp.status();
    if !status.is_success() {
        return Err(failure(uri, Some(status), format!("HEAD: HTTP {status}")));
    }
    let header = |name: reqwest::header::HeaderName| {
        resp.headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    };
    let size = header(reqwest::header::CONTENT_LENGTH)
        .and_then(|v| v.parse::<u64>().ok())
        .ok_or_else(|| SourceError::Http {
            uri: uri.to_owned(),
            message: "the server sends no Content-Length, so GDAL cannot read it by ranges".into(),
            retryable: false,
        })?;
    let etag = match (
        header(reqwest::header::ETAG),
        header(reqwest::header::LAST_MODIFIED),
    ) {
        (Some(etag), _) => ETag::new(etag),
        (None, Some(lm)) => ETag::new(format!("\"lm:{lm};size:{size}\"")),
        (None, None) => {
            return Err(SourceError::Http {
                uri: uri.to_owned(),
                message:
                    "the server sends neither ETag nor Last-Modified: nothing pins its content"
                        .into(),
                retryable: false,
            });
        }
    };
    Ok((etag, size))
}

/// GET a small document (a STAC Item) whole.
pub async fn get(uri: &str) -> Result<Vec<u8>, SourceError> {
    let resp = CLIENT
        .get(uri)
        .send()
        .await
        .map_err(|e| failure(uri, e.status(), format!("GET: {e}")))?;
    let status = resp.status();
    if !status.is_success() {
        return Err(failure(uri, Some(status), format!("GET: HTTP {status}")));
    }
    resp.bytes()
        .await
        .map(|b| b.to_vec())
        .map_err(|e| failure(uri, None, format!("GET body: {e}")))
}

//! The router behind API Gateway's HTTP API: a payload format 2.0 event in, the same request
//! through the same router, a 2.0 response out. The JWT authorizer in front has already
//! checked a token; the router checks it again (and API keys, where a route has no
//! authorizer), so the function answers exactly as the server does.

use axum::body::Body;
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use tower::ServiceExt as _;

/// The parts of an HTTP API (2.0) event the router needs.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HttpApiEvent {
    pub raw_path: String,
    #[serde(default)]
    pub raw_query_string: String,
    #[serde(default)]
    pub cookies: Vec<String>,
    /// Header names lower-case; repeated headers joined with commas.
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    pub request_context: RequestContext,
    #[serde(default)]
    pub body: Option<String>,
    #[serde(default)]
    pub is_base64_encoded: bool,
}

#[derive(Debug, Clone, Deserialize)]
pub struct RequestContext {
    pub http: HttpContext,
}

#[derive(Debug, Clone, Deserialize)]
pub struct HttpContext {
    pub method: String,
}

/// An HTTP API (2.0) response.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HttpApiResponse {
    pub status_code: u16,
    pub headers: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cookies: Vec<String>,
    pub body: String,
    pub is_base64_encoded: bool,
}

/// Why an event could not be answered.
#[derive(Debug, thiserror::Error)]
pub enum EventError {
    #[error("not an HTTP API 2.0 event: {0}")]
    Shape(#[from] serde_json::Error),
    #[error("the event's body is not base64: {0}")]
    Base64(#[from] base64::DecodeError),
    #[error("the event is not a request: {0}")]
    Request(#[from] http::Error),
    #[error("read the response body: {0}")]
    Body(String),
}

/// The request an event describes.
pub fn request_of(event: HttpApiEvent) -> Result<http::Request<Body>, EventError> {
    let uri = if event.raw_query_string.is_empty() {
        event.raw_path.clone()
    } else {
        format!("{}?{}", event.raw_path, event.raw_query_string)
    };
    let mut b = http::Request::builder()
        .method(event.request_context.http.method.as_str())
        .uri(uri);
    for (k, v) in &event.headers {
        b = b.header(k.as_str(), v.as_str());
    }
    if !event.cookies.is_empty() {
        b = b.header("cookie", event.cookies.join("; "));
    }
    let body = match event.body {
        None => Vec::new(),
        Some(s) if event.is_base64_encoded => B64.decode(s)?,
        Some(s) => s.into_bytes(),
    };
    Ok(b.body(Body::from(body))?)
}

/// Whether a response of `content_type` is text (sent as is) or bytes (sent as base64).
fn is_text(content_type: &str) -> bool {
    let ct = content_type.to_ascii_lowercase();
    ct.starts_with("text/")
        || ct.contains("json")
        || ct.contains("xml")
        || ct.contains("javascript")
}

/// Answer one event with `router`.
pub async fn handle(
    router: axum::Router,
    event: serde_json::Value,
) -> Result<HttpApiResponse, EventError> {
    let event: HttpApiEvent = serde_json::from_value(event)?;
    let req = request_of(event)?;
    let resp = router.oneshot(req).await.unwrap_or_else(|e| match e {});
    let (parts, body) = resp.into_parts();
    let bytes = axum::body::to_bytes(body, 64 << 20)
        .await
        .map_err(|e| EventError::Body(e.to_string()))?;
    let mut headers = BTreeMap::new();
    let mut cookies = Vec::new();
    for (k, v) in &parts.headers {
        let v = String::from_utf8_lossy(v.as_bytes()).into_owned();
        if k == http::header::SET_COOKIE {
            cookies.push(v);
            continue;
        }
        headers
            .entry(k.as_str().to_owned())
            .and_modify(|e: &mut String| {
                e.push(',');
                e.push_str(&v);
            })
            .or_insert(v);
    }
    let text = headers.get("content-type").is_none_or(|ct| is_text(ct))
        && std::str::from_utf8(&bytes).is_ok();
    Ok(HttpApiResponse {
        status_code: parts.status.as_u16(),
        headers,
        cookies,
        body: if text {
            String::from_utf8(bytes.to_vec()).expect("checked above")
        } else {
            B64.encode(&bytes)
        },
        is_base64_encoded: !text,
    })
}

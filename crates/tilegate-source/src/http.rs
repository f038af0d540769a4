//! Sources served over HTTP(S): pinned by a HEAD (the ETag, or Last-Modified and size where the
//! server sends no ETag) when planning and again per window, read by GDAL through `/vsicurl/`;
//! and small documents (STAC Items) fetched whole.
//!
//! Every request goes through the source policy: the URL is judged before it is sent, every
//! name is resolved by a resolver that refuses addresses the policy forbids (so a name that
//! resolves to a private address, or is re-pointed there, is never connected to), redirects are
//! followed by hand — each `Location` judged as a reference made by the response that gave it —
//! and a document's body is read only up to the policy's limit.

use crate::policy::{Origin, SourcePolicy};
use crate::resolve::SourceError;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tilegate_core::ETag;

/// True for `http://` and `https://` URIs.
pub fn is_http(uri: &str) -> bool {
    uri.starts_with("https://") || uri.starts_with("http://")
}

/// A DNS resolver that hands reqwest only addresses the policy allows.
struct PolicyResolver(Arc<SourcePolicy>);

impl reqwest::dns::Resolve for PolicyResolver {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let policy = Arc::clone(&self.0);
        let host = name.as_str().to_owned();
        Box::pin(async move {
            let addrs: Vec<std::net::SocketAddr> =
                tokio::net::lookup_host((host.as_str(), 0)).await?.collect();
            let ips: Vec<IpAddr> = addrs.iter().map(std::net::SocketAddr::ip).collect();
            policy
                .check_addresses(&ips)
                .map_err(|f| -> Box<dyn std::error::Error + Send + Sync> { Box::new(f) })?;
            Ok(Box::new(addrs.into_iter()) as reqwest::dns::Addrs)
        })
    }
}

/// The client of one policy (built once per policy and kept: the policy is configuration).
fn client(policy: &Arc<SourcePolicy>) -> reqwest::Client {
    static CLIENTS: Mutex<Vec<(Arc<SourcePolicy>, reqwest::Client)>> = Mutex::new(Vec::new());
    let mut clients = CLIENTS.lock().expect("HTTP clients");
    if let Some((_, c)) = clients.iter().find(|(p, _)| **p == **policy) {
        return c.clone();
    }
    let c = reqwest::Client::builder()
        .connect_timeout(Duration::from_secs(10))
        .timeout(Duration::from_secs(60))
        .redirect(reqwest::redirect::Policy::none())
        .dns_resolver(Arc::new(PolicyResolver(Arc::clone(policy))))
        .build()
        .expect("build the HTTP client");
    clients.push((Arc::clone(policy), c.clone()));
    c
}

use crate::resolve::shown;

fn failure(uri: &str, status: Option<reqwest::StatusCode>, message: String) -> SourceError {
    let uri = &shown(uri);
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

/// A request's error: the policy's refusal (its resolver said no) by name, anything else as
/// the transport's failure.
fn send_failure(uri: &str, what: &str, e: &reqwest::Error) -> SourceError {
    let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(c) = cause {
        if let Some(f) = c.downcast_ref::<crate::policy::Forbidden>() {
            return SourceError::forbidden(&shown(uri), f.clone());
        }
        cause = c.source();
    }
    // reqwest's error names the URL it was sending; the message names it without credentials.
    let text = e.to_string().replace(uri, &shown(uri));
    failure(uri, e.status(), format!("{what}: {text}"))
}

/// Send `method` to `uri` and follow redirects by hand, each target judged by the policy as a
/// reference the redirecting response made. Returns the final response.
async fn send(
    policy: &Arc<SourcePolicy>,
    method: reqwest::Method,
    uri: &str,
    origin: Origin<'_>,
) -> Result<reqwest::Response, SourceError> {
    let forbidden = |at: &str, reason| SourceError::forbidden(&shown(at), reason);
    // What is sent is the reference as the policy parsed it, never the string given.
    let mut at = policy
        .admit(uri, origin)
        .map_err(|r| forbidden(uri, r))?
        .canonical();
    let client = client(policy);
    for _ in 0..=policy.max_redirects {
        let resp = client
            .request(method.clone(), &at)
            .send()
            .await
            .map_err(|e| send_failure(&at, method.as_str(), &e))?;
        if !resp.status().is_redirection() {
            return Ok(resp);
        }
        let Some(location) = resp
            .headers()
            .get(reqwest::header::LOCATION)
            .and_then(|v| v.to_str().ok())
        else {
            return Ok(resp);
        };
        if location.contains('\\') {
            return Err(forbidden(
                uri,
                crate::policy::Forbidden {
                    rule: "malformed",
                    detail: "a backslash in a redirect's Location".into(),
                },
            ));
        }
        let next = resp
            .url()
            .join(location)
            .map_err(|e| failure(uri, None, format!("redirect to `{location}`: {e}")))?
            .to_string();
        let next = policy
            .admit(&next, Origin::Document(&at))
            .map_err(|r| forbidden(uri, r))?
            .canonical();
        tracing::debug!(from = %shown(&at), to = %shown(&next), "following a redirect");
        at = next;
    }
    Err(forbidden(
        uri,
        crate::policy::Forbidden {
            rule: "redirects",
            detail: format!("more than {} redirects", policy.max_redirects),
        },
    ))
}

/// HEAD `uri`: its pin (the ETag, else `"lm:<Last-Modified>;size:<bytes>"`) and size.
pub async fn head(
    policy: &Arc<SourcePolicy>,
    uri: &str,
    origin: Origin<'_>,
) -> Result<(ETag, u64), SourceError> {
    let resp = send(policy, reqwest::Method::HEAD, uri, origin).await?;
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
            uri: shown(uri),
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
                uri: shown(uri),
                message:
                    "the server sends neither ETag nor Last-Modified: nothing pins its content"
                        .into(),
                retryable: false,
            });
        }
    };
    Ok((etag, size))
}

/// GET a small document (a STAC Item) whole, at most the policy's document size.
pub async fn get(
    policy: &Arc<SourcePolicy>,
    uri: &str,
    origin: Origin<'_>,
) -> Result<Vec<u8>, SourceError> {
    let mut resp = send(policy, reqwest::Method::GET, uri, origin).await?;
    let status = resp.status();
    if !status.is_success() {
        return Err(failure(uri, Some(status), format!("GET: HTTP {status}")));
    }
    let limit = policy.max_document_bytes;
    let too_large = || SourceError::forbidden(&shown(uri), crate::policy::too_large(limit));
    if resp.content_length().is_some_and(|n| n > limit) {
        return Err(too_large());
    }
    let mut body = Vec::new();
    while let Some(chunk) = resp
        .chunk()
        .await
        .map_err(|e| failure(uri, None, format!("GET body: {e}")))?
    {
        if body.len() as u64 + chunk.len() as u64 > limit {
            return Err(too_large());
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

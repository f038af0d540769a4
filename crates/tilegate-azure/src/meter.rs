//! Every request the Azure client puts on the wire, counted for the job that sent it
//! (`tilegate_retry::meter`), by Blob service operation: a pipeline policy that runs once per
//! transmission.

use async_trait::async_trait;
use azure_core::http::headers::CONTENT_LENGTH;
use azure_core::http::policies::{Policy, PolicyResult};
use azure_core::http::{Context, Method, Request};
use std::sync::Arc;
use tilegate_retry::meter;

/// Counts each request by the Blob operation it is.
#[derive(Debug)]
pub(crate) struct RequestMeter;

/// The Blob service operation of a request, by method and query (`comp`, `restype`).
pub(crate) fn operation(method: Method, query: Option<&str>) -> &'static str {
    let q = query.unwrap_or("");
    let has = |p: &str| q.split('&').any(|kv| kv == p);
    match method {
        Method::Put if has("comp=block") => "PutBlock",
        Method::Put if has("comp=blocklist") => "PutBlockList",
        Method::Put if has("restype=container") => "CreateContainer",
        Method::Put => "PutBlob",
        Method::Get if has("comp=list") => "ListBlobs",
        Method::Get if has("comp=blocklist") => "GetBlockList",
        Method::Get => "GetBlob",
        Method::Head => "GetBlobProperties",
        Method::Delete => "DeleteBlob",
        _ => "Other",
    }
}

#[async_trait]
impl Policy for RequestMeter {
    async fn send(
        &self,
        ctx: &Context,
        request: &mut Request,
        next: &[Arc<dyn Policy>],
    ) -> PolicyResult {
        let op = operation(request.method(), request.url().query());
        let sent = request.body().len().unwrap_or(0);
        // A HEAD's Content-Length is the blob's size, not bytes that crossed the wire.
        let head = request.method() == Method::Head;
        meter::record("azure", op, sent);
        let answer = next[0].send(ctx, request, &next[1..]).await;
        if let (Ok(r), false) = (&answer, head) {
            let received = r
                .headers()
                .get_optional_str(&CONTENT_LENGTH)
                .and_then(|v| v.parse().ok())
                .unwrap_or(0);
            meter::received("azure", received);
        }
        answer
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn operations_are_named_by_method_and_query() {
        assert_eq!(
            operation(Method::Put, Some("comp=block&blockid=x")),
            "PutBlock"
        );
        assert_eq!(
            operation(Method::Put, Some("comp=blocklist")),
            "PutBlockList"
        );
        assert_eq!(operation(Method::Put, Some("sv=1&sig=x")), "PutBlob");
        assert_eq!(
            operation(Method::Put, Some("restype=container")),
            "CreateContainer"
        );
        assert_eq!(
            operation(Method::Get, Some("restype=container&comp=list")),
            "ListBlobs"
        );
        assert_eq!(operation(Method::Get, None), "GetBlob");
        assert_eq!(operation(Method::Head, None), "GetBlobProperties");
        assert_eq!(operation(Method::Delete, None), "DeleteBlob");
    }
}

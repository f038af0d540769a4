//! Every request the GCS client puts on the wire, counted for the job that sent it
//! (`tilegate_retry::meter`), by JSON API operation: a middleware of the client's HTTP stack,
//! so each transmission is counted once.

use reqwest_middleware::reqwest::{Method, Request, Response};
use reqwest_middleware::{ClientWithMiddleware, Middleware, Next};
use tilegate_retry::meter;

/// Counts each request by the JSON API operation it is.
#[derive(Debug)]
struct RequestMeter;

/// The JSON API operation of a request, by method, path and `uploadType`/`alt`.
pub(crate) fn operation(method: &Method, path: &str, query: Option<&str>) -> &'static str {
    let q = query.unwrap_or("");
    let has = |p: &str| q.split('&').any(|kv| kv == p);
    let upload = path.starts_with("/upload/");
    let object = path.contains("/o/");
    match *method {
        Method::POST if upload && has("uploadType=resumable") => "resumable",
        Method::POST if upload => "insert",
        // A chunk (or the finalisation) of a resumable session.
        Method::PUT if upload => "upload_chunk",
        Method::GET if object && has("alt=media") => "get_media",
        Method::GET if object => "get_metadata",
        Method::GET if path.ends_with("/o") => "list",
        Method::DELETE if upload => "cancel_resumable",
        Method::DELETE => "delete",
        Method::POST if path.ends_with("/b") => "create_bucket",
        _ => "other",
    }
}

#[async_trait::async_trait]
impl Middleware for RequestMeter {
    async fn handle(
        &self,
        req: Request,
        extensions: &mut http::Extensions,
        next: Next<'_>,
    ) -> reqwest_middleware::Result<Response> {
        let op = operation(req.method(), req.url().path(), req.url().query());
        // A body in memory has its length; a single-request (multipart/related) upload is a
        // stream whose length this layer cannot see, and counts no bytes.
        let sent = req
            .body()
            .and_then(|b| b.as_bytes())
            .map(|b| b.len() as u64)
            .or_else(|| {
                req.headers()
                    .get(http::header::CONTENT_LENGTH)
                    .and_then(|v| v.to_str().ok()?.parse().ok())
            })
            .unwrap_or(0);
        meter::record("gcs", op, sent);
        let answer = next.run(req, extensions).await;
        if let Ok(r) = &answer {
            meter::received("gcs", r.content_length().unwrap_or(0));
        }
        answer
    }
}

/// The HTTP client the GCS client uses: reqwest's default, with the meter.
pub(crate) fn http_client() -> ClientWithMiddleware {
    reqwest_middleware::ClientBuilder::new(reqwest_middleware::reqwest::Client::default())
        .with(RequestMeter)
        .build()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn operations_are_named_by_method_path_and_query() {
        let up = "/upload/storage/v1/b/bk/o";
        assert_eq!(
            operation(
                &Method::POST,
                up,
                Some("uploadType=multipart&ifGenerationMatch=0")
            ),
            "insert"
        );
        assert_eq!(
            operation(&Method::POST, up, Some("uploadType=resumable")),
            "resumable"
        );
        assert_eq!(
            operation(&Method::PUT, up, Some("uploadType=resumable&upload_id=x")),
            "upload_chunk"
        );
        assert_eq!(
            operation(&Method::GET, "/storage/v1/b/bk/o/a%2Fb", Some("alt=media")),
            "get_media"
        );
        assert_eq!(
            operation(&Method::GET, "/storage/v1/b/bk/o/a%2Fb", None),
            "get_metadata"
        );
        assert_eq!(
            operation(&Method::GET, "/storage/v1/b/bk/o", Some("prefix=x")),
            "list"
        );
        assert_eq!(
            operation(&Method::DELETE, "/storage/v1/b/bk/o/a", None),
            "delete"
        );
    }
}

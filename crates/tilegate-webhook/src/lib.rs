//! A webhook sink: each message POSTed as JSON to an operator's HTTPS endpoint, signed with
//! HMAC-SHA256 so that the receiver can tell it came from this deployment, and retried with
//! backoff while the endpoint fails.
//!
//! Headers (the scheme Stripe and GitHub receivers already verify):
//! - `Idempotency-Key`: the announcement's key — the same on every retry and redelivery;
//! - `X-Tilegate-Event`: `tilegate.job.published` or `tilegate.job.incomplete`;
//! - `X-Tilegate-Signature: t=UNIX_SECONDS,v1=HEX` where `HEX` is
//!   `HMAC-SHA256(secret, "UNIX_SECONDS." + body)`: a receiver recomputes it, compares in
//!   constant time and refuses an old `t` (a replay).
//!
//! The URL is the operator's (trusted); redirects are not followed (a 3xx is a failure), and
//! the secret never leaves the process: not in the sink's name, not in a log.

use hmac::{Hmac, Mac as _};
use sha2::Sha256;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tilegate_core::announce::{Message, Sink, SinkError};
use tilegate_retry::RetryPolicy;

/// How long one POST may take.
const TIMEOUT: Duration = Duration::from_secs(10);
/// A sink that does not answer a connection within this is said to be unreachable at once,
/// rather than after the whole request's timeout (an address nothing routes to).
const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);

/// A signed webhook.
#[derive(Clone)]
pub struct Webhook {
    id: String,
    url: reqwest::Url,
    secret: Option<Vec<u8>>,
    client: reqwest::Client,
    retry: RetryPolicy,
}

/// Shown by its sink name (`webhook:HOST/PATH`): never the secret, nor the URL's query.
impl std::fmt::Debug for Webhook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Webhook")
            .field("id", &self.id)
            .field("secret", &self.secret.as_ref().map(|_| "<redacted>"))
            .field("retry", &self.retry)
            .finish_non_exhaustive()
    }
}

/// Why a webhook cannot be set up.
#[derive(Debug, thiserror::Error)]
pub enum WebhookError {
    #[error("webhook URL `{0}`: not a URL")]
    NotAUrl(String),
    #[error(
        "webhook URL `{0}`: must be https:// (http:// only to a loopback address, for testing)"
    )]
    NotHttps(String),
    #[error("webhook URL `{0}`: credentials in the URL would be logged; use the signing secret")]
    Credentials(String),
}

impl Webhook {
    /// A webhook to `url`, signing with `secret` when there is one. Six attempts, from 0.5 s
    /// doubling to 30 s.
    pub fn new(url: &str, secret: Option<&[u8]>) -> Result<Self, WebhookError> {
        let parsed = reqwest::Url::parse(url).map_err(|_| WebhookError::NotAUrl(url.to_owned()))?;
        let loopback = match parsed.host() {
            Some(url::Host::Ipv4(a)) => a.is_loopback(),
            Some(url::Host::Ipv6(a)) => a.is_loopback(),
            Some(url::Host::Domain(d)) => d == "localhost",
            None => false,
        };
        if !(parsed.scheme() == "https" || (parsed.scheme() == "http" && loopback)) {
            return Err(WebhookError::NotHttps(url.to_owned()));
        }
        if !parsed.username().is_empty() || parsed.password().is_some() {
            return Err(WebhookError::Credentials(
                parsed.host_str().unwrap_or("").to_owned(),
            ));
        }
        let client = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .timeout(TIMEOUT)
            .connect_timeout(CONNECT_TIMEOUT)
            .build()
            .expect("an HTTP client with rustls");
        Ok(Self {
            // Host and path only: a query may carry a token.
            id: format!(
                "webhook:{}{}",
                parsed.host_str().unwrap_or(""),
                parsed.path()
            ),
            url: parsed,
            secret: secret.map(<[u8]>::to_vec),
            client,
            retry: RetryPolicy {
                max_attempts: 6,
                base: Duration::from_millis(500),
                cap: Duration::from_secs(30),
            },
        })
    }

    /// Retry with this policy instead (tests shorten it).
    pub fn with_retry(mut self, retry: RetryPolicy) -> Self {
        self.retry = retry;
        self
    }

    fn error(&self, retryable: bool, detail: String) -> SinkError {
        SinkError {
            sink: self.id.clone(),
            retryable,
            detail,
        }
    }
}

/// `t=UNIX_SECONDS,v1=HEX`: HMAC-SHA256 of `"{t}.{body}"` under `secret`.
pub fn signature(secret: &[u8], unix_seconds: u64, body: &[u8]) -> String {
    let mut mac = Hmac::<Sha256>::new_from_slice(secret).expect("HMAC takes any key length");
    mac.update(unix_seconds.to_string().as_bytes());
    mac.update(b".");
    mac.update(body);
    let hex: String = mac
        .finalize()
        .into_bytes()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    format!("t={unix_seconds},v1={hex}")
}

#[async_trait::async_trait]
impl Sink for Webhook {
    fn id(&self) -> &str {
        &self.id
    }

    async fn deliver(&self, message: &Message, body: &[u8]) -> Result<(), SinkError> {
        let mut attempt = 1u32;
        loop {
            let now = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_secs());
            let mut req = self
                .client
                .post(self.url.clone())
                .header("content-type", "application/json")
                .header("idempotency-key", &message.idempotency_key)
                .header("x-tilegate-event", &message.kind)
                .body(body.to_vec());
            if let Some(secret) = &self.secret {
                req = req.header("x-tilegate-signature", signature(secret, now, body));
            }
            let (retryable, detail, retry_after) = match req.send().await {
                Ok(resp) if resp.status().is_success() => return Ok(()),
                Ok(resp) => {
                    let status = resp.status();
                    let retry_after = resp
                        .headers()
                        .get("retry-after")
                        .and_then(|v| v.to_str().ok())
                        .and_then(|v| v.trim().parse::<u64>().ok())
                        .map(Duration::from_secs);
                    let retryable = status.is_server_error()
                        || status == reqwest::StatusCode::TOO_MANY_REQUESTS
                        || status == reqwest::StatusCode::REQUEST_TIMEOUT;
                    (retryable, format!("answered HTTP {status}"), retry_after)
                }
                Err(e) => (
                    true,
                    format!(
                        "could not reach {}:{}: {}",
                        self.url.host_str().unwrap_or(""),
                        self.url.port_or_known_default().unwrap_or(0),
                        without_url(&e)
                    ),
                    None,
                ),
            };
            if !retryable || attempt >= self.retry.max_attempts {
                return Err(self.error(
                    retryable,
                    format!(
                        "{detail} (attempt {attempt} of {})",
                        self.retry.max_attempts
                    ),
                ));
            }
            tokio::time::sleep(self.retry.backoff(attempt, retry_after)).await;
            attempt += 1;
        }
    }
}

/// A transport error's description without the URL (which may carry a token in its query).
fn without_url(e: &reqwest::Error) -> String {
    let kind = if e.is_timeout() {
        "timed out"
    } else if e.is_connect() {
        "connection failed"
    } else if e.is_request() {
        "request failed"
    } else {
        "transport error"
    };
    let mut source = std::error::Error::source(e);
    let mut innermost = None;
    while let Some(s) = source {
        innermost = Some(s.to_string());
        source = s.source();
    }
    match innermost {
        Some(cause) => format!("{kind}: {cause}"),
        None => kind.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_shows_neither_the_secret_nor_the_query() {
        let w = Webhook::new(
            "https://hooks.example/in?token=query-secret",
            Some(b"signing-secret"),
        )
        .unwrap();
        let shown = format!("{w:?} {w:#?}");
        assert!(!shown.contains("signing-secret"), "{shown}");
        assert!(!shown.contains("query-secret"), "{shown}");
        assert!(
            !shown.contains(&format!("{:?}", b"signing-secret")),
            "{shown}"
        );
        assert!(shown.contains("<redacted>"), "{shown}");
    }

    #[test]
    fn the_signature_is_hmac_sha256_of_the_timestamp_and_body() {
        // Expected from Python's hmac: hmac.new(b"Jefe", b'1700000000.{"a":1}', sha256).
        assert_eq!(
            signature(b"Jefe", 1_700_000_000, br#"{"a":1}"#),
            "t=1700000000,v1=fa5f6481efc59da48b19c9dc10196c9953e5651f8304b3a318b6b87d70272e0a"
        );
    }

    #[test]
    fn only_https_or_loopback_http_and_no_credentials() {
        assert!(Webhook::new("https://hooks.example.com/x?token=s3cret", None).is_ok());
        assert!(Webhook::new("http://127.0.0.1:8080/hook", None).is_ok());
        assert!(matches!(
            Webhook::new("http://hooks.example.com/x", None),
            Err(WebhookError::NotHttps(_))
        ));
        assert!(matches!(
            Webhook::new("https://user:pw@hooks.example.com/x", None),
            Err(WebhookError::Credentials(_))
        ));
        let w = Webhook::new("https://hooks.example.com/x?token=s3cret", None).unwrap();
        assert_eq!(
            w.id(),
            "webhook:hooks.example.com/x",
            "no query in the name"
        );
    }
}

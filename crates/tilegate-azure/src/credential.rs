//! The account SAS that requests carry when an account is given by its key: signed on an
//! injectable [`Clock`], renewed before it expires, and set on each request by a pipeline
//! policy rather than baked into the client's URL once (which made a process that ran past
//! the signature's seven days fail every request with 403 `AuthenticationFailed`).
//!
//! Modelled on `azure_core`'s `BearerTokenAuthorizationPolicy`, which does the same for Entra
//! ID tokens: the credential is read on every try, renewed in its refresh window by one
//! caller at a time, and a refusal that renewing can cure is sent once more.

use crate::error::{AzureError, renews_sas};
use async_trait::async_trait;
use azure_core::error::ErrorKind;
use azure_core::http::headers::ERROR_CODE;
use azure_core::http::policies::{Policy, PolicyResult};
use azure_core::http::{AsyncRawResponse, Context, Request, StatusCode, Url};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::SystemTime;
use time::{Duration, OffsetDateTime};
use tracing::info;

/// A source of the current time (tests inject one they move on by days).
pub type Clock = Arc<dyn Fn() -> SystemTime + Send + Sync>;

/// The system's wall clock.
pub fn system_clock() -> Clock {
    Arc::new(SystemTime::now)
}

/// A SAS is renewed once less than this is left of its [`crate::sas::VALIDITY`]: well before
/// it expires, so hosts whose clocks differ by hours still agree it is valid.
pub(crate) const RENEW_BEFORE: Duration = Duration::days(1);

/// The query parameters of the account SAS [`crate::sas::account_sas`] signs; none of them is
/// a parameter of a Blob service operation.
const SAS_PARAMETERS: [&str; 8] = ["sv", "ss", "srt", "sp", "st", "se", "spr", "sig"];

/// One signature.
#[derive(Debug, Clone)]
pub(crate) struct Signed {
    /// The SAS query string (no `?`).
    pub(crate) query: String,
    pub(crate) expires: OffsetDateTime,
    /// Counts signatures, so a refusal renews only the SAS it was refused with.
    pub(crate) generation: u64,
}

/// The account SAS of one account key, renewed as it ages.
pub(crate) struct SasCredential {
    account: String,
    key: String,
    /// `spr`: [`crate::Account::sas_protocols`].
    protocols: &'static str,
    clock: Clock,
    current: Mutex<Signed>,
}

impl std::fmt::Debug for SasCredential {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SasCredential")
            .field("account", &self.account)
            .finish_non_exhaustive()
    }
}

impl SasCredential {
    /// Sign the first SAS now (a key that cannot sign one is refused here, not on a request),
    /// for `protocols`.
    pub(crate) fn new(
        account: &str,
        key: &str,
        protocols: &'static str,
        clock: Clock,
    ) -> Result<Self, AzureError> {
        let first = sign(account, key, protocols, OffsetDateTime::from(clock()), 0)?;
        Ok(Self {
            account: account.to_owned(),
            key: key.to_owned(),
            protocols,
            clock,
            current: Mutex::new(first),
        })
    }

    fn now(&self) -> OffsetDateTime {
        OffsetDateTime::from((self.clock)())
    }

    /// The SAS for a request sent now: the current one, or a fresh one when the current one
    /// is within [`RENEW_BEFORE`] of its expiry. Renewal is under the lock, so of many
    /// requests that find the SAS aged, one signs and the others use its signature.
    pub(crate) fn current(&self) -> Result<Signed, AzureError> {
        let now = self.now();
        let mut current = self.current.lock().unwrap_or_else(PoisonError::into_inner);
        if now + RENEW_BEFORE >= current.expires {
            *current = sign(
                &self.account,
                &self.key,
                self.protocols,
                now,
                current.generation + 1,
            )?;
            self.renewed(&current, "aged");
        }
        Ok(current.clone())
    }

    /// The SAS to send again after a request carrying signature `refused` was refused: a
    /// fresh one, unless another request has renewed it since (then that one).
    pub(crate) fn renew(&self, refused: u64) -> Result<Signed, AzureError> {
        let now = self.now();
        let mut current = self.current.lock().unwrap_or_else(PoisonError::into_inner);
        if current.generation == refused {
            *current = sign(&self.account, &self.key, self.protocols, now, refused + 1)?;
            self.renewed(&current, "refused");
        }
        Ok(current.clone())
    }

    /// Log the renewal of the account SAS to `renewed`, for `reason`.
    fn renewed(&self, renewed: &Signed, reason: &'static str) {
        info!(
            store = "azure",
            account = %self.account,
            expires = %renewed.expires,
            reason,
            "renewed the account sas"
        );
    }
}

fn sign(
    account: &str,
    key: &str,
    protocols: &str,
    now: OffsetDateTime,
    generation: u64,
) -> Result<Signed, AzureError> {
    Ok(Signed {
        query: crate::sas::account_sas(account, key, now, protocols)?,
        expires: now + crate::sas::VALIDITY,
        generation,
    })
}

/// `url` with the SAS parameters it carries (from an earlier try) replaced by `sas`; the
/// operation's own parameters are kept as the client encoded them.
fn set_sas(url: &mut Url, sas: &str) {
    let mut query: Vec<&str> = url
        .query()
        .unwrap_or_default()
        .split('&')
        .filter(|kv| {
            let k = kv.split_once('=').map_or(*kv, |(k, _)| k);
            !kv.is_empty() && !SAS_PARAMETERS.contains(&k)
        })
        .collect();
    query.push(sas);
    let query = query.join("&");
    url.set_query(Some(&query));
}

/// The `AuthenticationErrorDetail` of an Azure error body, where it has one.
fn authentication_error_detail(body: &[u8]) -> Option<String> {
    let body = std::str::from_utf8(body).ok()?;
    let (_, rest) = body.split_once("<AuthenticationErrorDetail>")?;
    let (detail, _) = rest.split_once("</AuthenticationErrorDetail>")?;
    Some(detail.to_owned())
}

fn credential_error(e: AzureError) -> azure_core::Error {
    azure_core::Error::new(ErrorKind::Credential, e)
}

/// Sets the account SAS on every try of every request, and sends a request refused for its
/// SAS's time frame once more with a renewed one (see [`renews_sas`]). It runs before
/// [`crate::meter::RequestMeter`], so both transmissions are counted.
#[derive(Debug)]
pub(crate) struct SasPolicy(pub(crate) Arc<SasCredential>);

#[async_trait]
impl Policy for SasPolicy {
    async fn send(
        &self,
        ctx: &Context,
        request: &mut Request,
        next: &[Arc<dyn Policy>],
    ) -> PolicyResult {
        let sas = self.0.current().map_err(credential_error)?;
        set_sas(request.url_mut(), &sas.query);
        let response = next[0].send(ctx, request, &next[1..]).await?;
        let code = response.headers().get_optional_str(&ERROR_CODE);
        if response.status() != StatusCode::Forbidden || code != Some("AuthenticationFailed") {
            return Ok(response);
        }
        // The detail is in the body (a small XML document; a HEAD's answer has none). It is
        // read here and handed on as it was read.
        let code = code.map(str::to_owned);
        let (status, headers, body) = response.deconstruct();
        let body = body.collect().await?;
        let detail = authentication_error_detail(&body);
        let renewed_since =
            self.0.current().map_err(credential_error)?.generation != sas.generation;
        if !renews_sas(
            u16::from(status),
            code.as_deref(),
            detail.as_deref(),
            renewed_since,
        ) {
            return Ok(AsyncRawResponse::from_bytes(status, headers, body));
        }
        info!(
            store = "azure",
            path = %request.url().path(),
            detail = detail.as_deref().unwrap_or("(none)"),
            "azure refused the account sas: renewing it and sending once more"
        );
        let fresh = self.0.renew(sas.generation).map_err(credential_error)?;
        set_sas(request.url_mut(), &fresh.query);
        // Azure authenticates a request before acting on it: a refused one changed nothing, so
        // sending it again is its first attempt, conditional or not.
        request.body_mut().reset().await?;
        next[0].send(ctx, request, &next[1..]).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sas::param;
    use azure_core::http::Method;
    use azure_core::http::headers::Headers;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// 2026-12-02T00:00:00Z.
    fn t0() -> SystemTime {
        SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(1_796_169_600)
    }

    const HOUR: std::time::Duration = std::time::Duration::from_secs(3600);
    const DAY: std::time::Duration = std::time::Duration::from_secs(86_400);

    fn test_clock(t: SystemTime) -> (Arc<Mutex<SystemTime>>, Clock) {
        let now = Arc::new(Mutex::new(t));
        let read = Arc::clone(&now);
        (now, Arc::new(move || *read.lock().unwrap()))
    }

    #[test]
    fn a_sas_is_renewed_in_its_last_day_and_after_it_expired() {
        let (now, clock) = test_clock(t0());
        let cred =
            SasCredential::new("devstoreaccount1", crate::DEV_KEY, "https,http", clock).unwrap();
        let first = cred.current().unwrap();
        assert_eq!(param(&first.query, "se"), "2026-12-09T00%3A00%3A00Z");

        *now.lock().unwrap() = t0() + 5 * DAY;
        assert_eq!(cred.current().unwrap().query, first.query, "not yet");

        *now.lock().unwrap() = t0() + 6 * DAY + HOUR; // 23 hours left
        let renewed = cred.current().unwrap();
        assert_eq!(param(&renewed.query, "se"), "2026-12-15T01%3A00%3A00Z");
        assert_eq!(
            param(&renewed.query, "st"),
            "2026-12-08T00%3A45%3A00Z",
            "15 min back"
        );
        assert_eq!(renewed.generation, 1);

        *now.lock().unwrap() = t0() + 14 * DAY; // past the second expiry too
        let again = cred.current().unwrap();
        assert_eq!(param(&again.query, "se"), "2026-12-23T00%3A00%3A00Z");
        assert_eq!(cred.current().unwrap().generation, again.generation, "once");
    }

    #[test]
    fn concurrent_refusals_of_one_sas_renew_it_once() {
        let (now, clock) = test_clock(t0());
        let cred =
            SasCredential::new("devstoreaccount1", crate::DEV_KEY, "https,http", clock).unwrap();
        *now.lock().unwrap() = t0() + HOUR;
        let a = cred.renew(0).unwrap();
        let b = cred.renew(0).unwrap();
        assert_eq!(a.generation, 1);
        assert_eq!(
            b.query, a.query,
            "the second refusal uses the first's renewal"
        );
        assert_eq!(cred.renew(1).unwrap().generation, 2);
    }

    #[test]
    fn the_sas_replaces_an_earlier_tries_and_keeps_the_operations_parameters() {
        let mut url = Url::parse("http://h/acct/tiles/a%2Fb?comp=block&blockid=YQ%3D%3D").unwrap();
        set_sas(&mut url, "sv=1&se=2&sig=x%2B");
        assert_eq!(
            url.query(),
            Some("comp=block&blockid=YQ%3D%3D&sv=1&se=2&sig=x%2B")
        );
        set_sas(&mut url, "sv=1&se=3&sig=y");
        assert_eq!(
            url.query(),
            Some("comp=block&blockid=YQ%3D%3D&sv=1&se=3&sig=y")
        );
        let mut bare = Url::parse("http://h/acct/tiles").unwrap();
        set_sas(&mut bare, "sv=1&sig=z");
        assert_eq!(bare.query(), Some("sv=1&sig=z"));
    }

    /// A transport that answers each request with the next of `answers` and records the URLs
    /// it was sent.
    #[derive(Debug)]
    struct Scripted {
        answers: Vec<(u16, Option<&'static str>, String)>,
        sent: Mutex<Vec<String>>,
        n: AtomicUsize,
    }

    #[async_trait]
    impl Policy for Scripted {
        async fn send(
            &self,
            _: &Context,
            request: &mut Request,
            _: &[Arc<dyn Policy>],
        ) -> PolicyResult {
            self.sent.lock().unwrap().push(request.url().to_string());
            let (status, code, body) = &self.answers[self.n.fetch_add(1, Ordering::SeqCst)];
            let mut headers = Headers::new();
            if let Some(code) = code {
                headers.insert(ERROR_CODE, *code);
            }
            Ok(AsyncRawResponse::from_bytes(
                StatusCode::from(*status),
                headers,
                body.clone(),
            ))
        }
    }

    fn refused(detail: &str) -> (u16, Option<&'static str>, String) {
        (
            403,
            Some("AuthenticationFailed"),
            format!(
                "<?xml version=\"1.0\" encoding=\"utf-8\"?><Error><Code>AuthenticationFailed\
                 </Code><Message>Server failed to authenticate the request.</Message>\
                 <AuthenticationErrorDetail>{detail}</AuthenticationErrorDetail></Error>"
            ),
        )
    }

    const EXPIRED: &str = "Signature not valid in the specified time frame: Start [Wed, 02 Dec \
        2026 00:00:00 GMT] - Expiry [Wed, 09 Dec 2026 00:00:00 GMT] - Current [Thu, 10 Dec 2026 \
        00:00:00 GMT]";

    /// The policy in front of `answers`, on a clock that moves an hour on between signing
    /// the first SAS and sending: the SAS is not aged, so only a refusal renews it. The
    /// answer and the URLs sent.
    async fn send(
        answers: Vec<(u16, Option<&'static str>, String)>,
    ) -> (u16, Vec<u8>, Vec<String>) {
        let (now, clock) = test_clock(t0());
        let cred = Arc::new(
            SasCredential::new("devstoreaccount1", crate::DEV_KEY, "https,http", clock).unwrap(),
        );
        *now.lock().unwrap() = t0() + HOUR;
        let transport = Arc::new(Scripted {
            answers,
            sent: Mutex::default(),
            n: AtomicUsize::new(0),
        });
        let mut request = Request::new(
            Url::parse("http://127.0.0.1/devstoreaccount1/tiles/a").unwrap(),
            Method::Put,
        );
        let next: [Arc<dyn Policy>; 1] = [transport.clone()];
        let r = SasPolicy(cred)
            .send(&Context::new(), &mut request, &next)
            .await
            .unwrap();
        let (status, _, body) = r.deconstruct();
        let body = body.collect().await.unwrap().to_vec();
        let sent = transport.sent.lock().unwrap().clone();
        (u16::from(status), body, sent)
    }

    #[tokio::test]
    async fn a_time_frame_refusal_is_sent_once_more_with_a_renewed_sas() {
        let (status, _, sent) = send(vec![refused(EXPIRED), (201, None, String::new())]).await;
        assert_eq!(status, 201);
        assert_eq!(sent.len(), 2);
        assert_ne!(param(&sent[0], "sig"), param(&sent[1], "sig"), "{sent:#?}");
        assert_eq!(sent[0].matches("sig=").count(), 1);
        assert_eq!(sent[1].matches("sig=").count(), 1, "replaced, not appended");
    }

    #[tokio::test]
    async fn a_second_refusal_is_handed_on_as_it_came() {
        let (status, body, sent) = send(vec![refused(EXPIRED), refused(EXPIRED)]).await;
        assert_eq!((status, sent.len()), (403, 2));
        assert!(
            String::from_utf8(body).unwrap().contains(EXPIRED),
            "the body is kept"
        );
    }

    #[tokio::test]
    async fn other_refusals_are_not_sent_again() {
        for answer in [
            refused("Signature did not match. String to sign used was x"),
            (403, Some("AuthorizationPermissionMismatch"), String::new()),
            (404, Some("BlobNotFound"), String::new()),
        ] {
            let code = answer.1;
            let (status, _, sent) = send(vec![answer]).await;
            assert_eq!(sent.len(), 1, "{code:?}");
            assert_ne!(status, 201);
        }
    }
}

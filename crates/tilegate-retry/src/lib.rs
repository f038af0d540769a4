//! What a cloud store's answer proves, and the one place a request is repeated — shared by
//! every provider's backend, naming none of them.
//!
//! Each backend classifies its provider's (status, error code) into an [`Answer`] with a pure,
//! cited, tested function of its own; everything after that — which answers are worth
//! repeating for which kind of request, the bounded exponential backoff with full jitter, the
//! provider's `Retry-After` — is here, so that S3, GCS and Azure repeat requests alike and a
//! request is repeated in one place only (the SDKs' own retries are off).

pub mod failure;
pub mod meter;
pub mod record;
pub mod write;

pub use failure::{source_lookup, split_source};
pub use write::{
    Decision, IfMatch, IfNoneMatch, conditional_write, mode_metadata, own_write, read_refusal,
    settle, stamp, verify_completion,
};

/// The key prefix of a store at location prefix `prefix`: `""`, or `"seg/seg/"`, prepended to
/// every key.
pub fn key_prefix(prefix: &str) -> String {
    if prefix.is_empty() {
        String::new()
    } else {
        format!("{prefix}/")
    }
}

use std::future::Future;
use std::hash::{BuildHasher as _, RandomState};
use std::time::Duration;
use tilegate_core::Retry;
use tracing::debug;

/// What one provider answer proves, before an operation maps it onto its outcome.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Answer {
    /// 304 Not Modified: an `If-None-Match` matched. S3 sends it without an error code.
    NotModified,
    /// 412 `PreconditionFailed`: the storage engine evaluated the condition and refused the
    /// request. On a Create this proves an object is in place; on an Update (If-Match) it
    /// proves the object is no longer the version inspected.
    PreconditionFailed,
    /// S3's 409 `ConditionalRequestConflict`: "a conflicting operation occurred" — a concurrent
    /// write or delete of the key was in flight while the conditional request was evaluated.
    /// It proves nothing about what exists: the same conditional request is sent again.
    ConditionalConflict,
    /// DynamoDB's `ConditionalCheckFailedException` (HTTP 400): the row exists / changed.
    ConditionalCheckFailed,
    /// 404 `NoSuchKey` (or a HEAD's bodiless 404): no such object.
    NoSuchKey,
    /// 404 `NoSuchUpload`: the multipart upload was completed or aborted.
    NoSuchUpload,
    /// The bucket, table or queue itself is missing: a deployment that was not initialised.
    MissingResource,
    /// 416 `InvalidRange`: the range starts at or past the end of the object.
    InvalidRange,
    /// SQS `ReceiptHandleIsInvalid` / `MessageNotInflight`: the receipt no longer names an
    /// in-flight message.
    StaleReceipt,
    /// Throttling: S3 503 `SlowDown`, HTTP 429, `ThrottlingException`, `RequestLimitExceeded`,
    /// DynamoDB `ProvisionedThroughputExceededException`, SQS `RequestThrottled`.
    Throttled,
    /// A transient fault: any 5xx, S3's 400 `RequestTimeout`, or no answer at all (network,
    /// timeout, an unreadable response).
    Transient,
    /// Anything else (400 validation, 403 auth, 409 `BucketAlreadyExists`, ...): repeating the
    /// request cannot help.
    Permanent,
}

impl Answer {
    /// The retry classification of this answer when it ends up as an error.
    pub fn retry(self) -> Retry {
        match self {
            Self::ConditionalConflict | Self::Throttled | Self::Transient => Retry::Retryable,
            Self::NotModified
            | Self::PreconditionFailed
            | Self::ConditionalCheckFailed
            | Self::NoSuchKey
            | Self::NoSuchUpload
            | Self::MissingResource
            | Self::InvalidRange
            | Self::StaleReceipt
            | Self::Permanent => Retry::Permanent,
        }
    }
}

/// One failed attempt as the retry loop sees it: what the answer proves, and the provider's
/// hint of when to try again.
pub trait Attempted {
    fn answer(&self) -> Answer;
    /// The provider's `Retry-After`, where it sent one.
    fn retry_after(&self) -> Option<Duration>;
    /// The HTTP status, for logs.
    fn status(&self) -> Option<u16> {
        None
    }
    /// The provider's error code, for logs.
    fn code(&self) -> Option<&str> {
        None
    }
}

/// `Retry-After` as delta-seconds (the form cloud services send, at most 60 s). An HTTP-date
/// is ignored: the exponential backoff applies instead.
pub fn parse_retry_after(v: &str) -> Option<Duration> {
    let secs: f64 = v.trim().parse().ok()?;
    (secs.is_finite() && secs >= 0.0).then(|| Duration::from_secs_f64(secs.min(60.0)))
}

/// Whether sending a request twice has the effect of sending it once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Idempotency {
    /// Conditional writes, reads, deletes, receives: a lost answer may be re-asked.
    Idempotent,
    /// `ADD` on a counter, a send that must not be duplicated needlessly: repeated only when
    /// the provider proved it applied nothing (throttling, conditional conflict).
    NotIdempotent,
    /// A multipart completion (S3 `CompleteMultipartUpload`): safe to re-send after a lost answer, but its 409
    /// `ConditionalRequestConflict` means the upload must be re-initiated, so a conflict is
    /// not repeated in place; it goes back to the caller (the claim gate) as a retryable error.
    CompleteUpload,
}

/// The longest `Retry-After` honoured; a longer hint is the caller's problem (the error is
/// retryable, so the message is redelivered later).
const MAX_RETRY_AFTER: Duration = Duration::from_secs(20);

/// Bounded attempts with exponential backoff and full jitter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Attempts in all, the first included.
    pub max_attempts: u32,
    /// Backoff before the second attempt (doubled per attempt, before jitter).
    pub base: Duration,
    /// Largest backoff.
    pub cap: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self {
            max_attempts: 5,
            base: Duration::from_millis(50),
            cap: Duration::from_secs(5),
        }
    }
}

impl RetryPolicy {
    /// A policy that never sleeps, for tests.
    pub fn immediate(max_attempts: u32) -> Self {
        Self {
            max_attempts,
            base: Duration::ZERO,
            cap: Duration::ZERO,
        }
    }

    /// The pause before attempt `attempt + 1`: the provider's `Retry-After` where it sent
    /// one (at most 20 s), else a uniformly random share of `base · 2^(attempt-1)` (full jitter).
    pub fn backoff(&self, attempt: u32, retry_after: Option<Duration>) -> Duration {
        if let Some(hint) = retry_after {
            return hint.min(MAX_RETRY_AFTER);
        }
        let exp = self
            .base
            .saturating_mul(1u32 << attempt.saturating_sub(1).min(16))
            .min(self.cap);
        let nanos = u64::try_from(exp.as_nanos()).unwrap_or(u64::MAX);
        if nanos == 0 {
            return Duration::ZERO;
        }
        Duration::from_nanos(RandomState::new().hash_one(attempt) % (nanos + 1))
    }
}

/// Whether `answer` may be sent again under `idempotency`.
fn worth_repeating(answer: Answer, idempotency: Idempotency) -> bool {
    match answer {
        Answer::Throttled => true,
        Answer::ConditionalConflict => idempotency != Idempotency::CompleteUpload,
        Answer::Transient => idempotency != Idempotency::NotIdempotent,
        _ => false,
    }
}

/// Run `attempt` (given the 1-based attempt number) until it succeeds, fails with an answer
/// that repeating cannot change, or the policy's attempts are spent. Returns the last answer:
/// the caller classifies it (412 → an outcome value, the rest → a classified error).
pub async fn run<T, E, F, Fut>(
    policy: &RetryPolicy,
    idempotency: Idempotency,
    operation: &'static str,
    key: &str,
    mut attempt: F,
) -> Result<T, E>
where
    E: Attempted,
    F: FnMut(u32) -> Fut,
    Fut: Future<Output = Result<T, E>>,
{
    let mut n = 1;
    loop {
        match attempt(n).await {
            Ok(v) => return Ok(v),
            Err(f) if n < policy.max_attempts && worth_repeating(f.answer(), idempotency) => {
                let pause = policy.backoff(n, f.retry_after());
                debug!(
                    operation,
                    key,
                    attempt = n,
                    answer = ?f.answer(),
                    status = ?f.status(),
                    code = ?f.code(),
                    pause_ms = u64::try_from(pause.as_millis()).unwrap_or(u64::MAX),
                    "repeating request"
                );
                if !pause.is_zero() {
                    tokio::time::sleep(pause).await;
                }
                n += 1;
            }
            Err(f) => return Err(f),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    /// A failed attempt that is nothing but its answer.
    #[derive(Debug)]
    struct Failure {
        answer: Answer,
    }

    impl Attempted for Failure {
        fn answer(&self) -> Answer {
            self.answer
        }
        fn retry_after(&self) -> Option<Duration> {
            None
        }
    }

    fn answer(a: Answer) -> Failure {
        Failure { answer: a }
    }

    #[test]
    fn retry_after_is_delta_seconds_and_bounded() {
        assert_eq!(parse_retry_after(" 2 "), Some(Duration::from_secs(2)));
        assert_eq!(parse_retry_after("0.5"), Some(Duration::from_millis(500)));
        assert_eq!(parse_retry_after("3600"), Some(Duration::from_secs(60)));
        assert_eq!(parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT"), None);
        assert_eq!(parse_retry_after("-1"), None);
    }

    #[test]
    fn backoff_is_bounded_and_honours_retry_after() {
        let p = RetryPolicy::default();
        for attempt in 1..10 {
            assert!(p.backoff(attempt, None) <= p.cap);
        }
        assert!(p.backoff(1, None) <= p.base);
        assert_eq!(
            p.backoff(1, Some(Duration::from_secs(2))),
            Duration::from_secs(2)
        );
        assert!(p.backoff(1, Some(Duration::from_secs(3600))) <= Duration::from_secs(20));
        assert_eq!(RetryPolicy::immediate(3).backoff(4, None), Duration::ZERO);
    }

    #[tokio::test]
    async fn transient_faults_repeat_only_when_idempotent() {
        let p = RetryPolicy::immediate(4);
        let mut calls = 0;
        let r: Result<(), _> = run(&p, Idempotency::NotIdempotent, "t", "k", |_| {
            calls += 1;
            async { Err(answer(Answer::Transient)) }
        })
        .await;
        assert_eq!(r.unwrap_err().answer, Answer::Transient);
        assert_eq!(calls, 1, "a possibly-applied ADD must not be re-sent");

        let mut calls = 0;
        let r: Result<(), _> = run(&p, Idempotency::NotIdempotent, "t", "k", |_| {
            calls += 1;
            async { Err(answer(Answer::Throttled)) }
        })
        .await;
        assert_eq!(r.unwrap_err().answer, Answer::Throttled);
        assert_eq!(
            calls, 4,
            "throttling applied nothing: repeat up to the bound"
        );

        let mut calls = 0;
        let r = run(&p, Idempotency::Idempotent, "t", "k", |n| {
            calls += 1;
            async move {
                if n < 3 {
                    Err(answer(Answer::Transient))
                } else {
                    Ok(n)
                }
            }
        })
        .await;
        assert_eq!(r.unwrap(), 3);
        assert_eq!(calls, 3);
    }

    #[tokio::test]
    async fn permanent_answers_are_not_repeated() {
        let p = RetryPolicy::immediate(5);
        for a in [
            Answer::PreconditionFailed,
            Answer::Permanent,
            Answer::NoSuchKey,
        ] {
            let mut calls = 0;
            let r: Result<(), _> = run(&p, Idempotency::Idempotent, "t", "k", |_| {
                calls += 1;
                async move { Err(answer(a)) }
            })
            .await;
            assert_eq!(r.unwrap_err().answer, a);
            assert_eq!(calls, 1, "{a:?}");
        }
    }
}

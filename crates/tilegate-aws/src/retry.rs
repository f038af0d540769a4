//! The AWS backends repeat requests through the provider-neutral loop of `tilegate-retry`
//! (bounded attempts, exponential backoff with full jitter, `Retry-After` honoured). The SDK's
//! own retries are switched off (see [`crate::config`]) so that this loop is the only place a
//! request is repeated.
//!
//! What is repeated: S3's 409 `ConditionalRequestConflict` (nothing is proven; the same
//! conditional request is sent again) and throttling, always — the provider refused both
//! without applying anything; transient faults (5xx, network, timeout) only for idempotent
//! requests, because such a request may have been applied before its answer was lost.

use crate::error::Failure;
use std::future::Future;
pub use tilegate_retry::{Idempotency, RetryPolicy};

/// [`tilegate_retry::run`] for the AWS backends' [`Failure`]s: run `attempt` until it
/// succeeds, fails with an answer repeating cannot change, or the policy's attempts are spent;
/// the caller classifies the last answer.
pub async fn run<T, F, Fut>(
    policy: &RetryPolicy,
    idempotency: Idempotency,
    operation: &'static str,
    key: &str,
    attempt: F,
) -> Result<T, Failure>
where
    F: FnMut(u32) -> Fut,
    Fut: Future<Output = Result<T, Failure>>,
{
    tilegate_retry::run(policy, idempotency, operation, key, attempt).await
}

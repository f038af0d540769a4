//! The AWS backends repeat requests through the provider-neutral loop of `tilegate-retry`
//! (bounded attempts, exponential backoff with full jitter, `Retry-After` honoured). The SDK's
//! own retries are switched off (see [`crate::config`]) so that this loop is the only place a
//! request is repeated.
//!
//! What is repeated: S3's 409 `ConditionalRequestConflict` (nothing is proven; the same
//! conditional request is sent again) and throttling, always — the provider refused both
//! without applying anything; transient faults (5xx, network, timeout) only for idempotent
//! requests, because such a request may have been applied before its answer was lost.

use crate::error::{Failure, FailureOf as _};
use aws_sdk_s3::error::{ProvideErrorMetadata, SdkError};
use std::error::Error as StdError;
use std::future::Future;
use tilegate_core::StoreResult;
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

/// How one store sends its SDK requests: its service (for classifying failures), its retry
/// policy and whether its requests may be repeated after a lost answer. Every plain SDK call
/// of this crate goes through [`Sdk::send`] (or [`Sdk::send_raw`] where some failures are
/// outcomes), instead of each writing the retry loop, the error conversion and the
/// classification itself.
#[derive(Debug, Clone, Copy)]
pub struct Sdk<'a> {
    pub policy: &'a RetryPolicy,
    pub service: &'static str,
    pub idempotency: Idempotency,
}

impl<'a> Sdk<'a> {
    /// Idempotent requests of `service` under `policy`.
    pub fn new(policy: &'a RetryPolicy, service: &'static str) -> Self {
        Self {
            policy,
            service,
            idempotency: Idempotency::Idempotent,
        }
    }

    /// The same, for requests of the given idempotency.
    pub fn with(self, idempotency: Idempotency) -> Self {
        Self {
            idempotency,
            ..self
        }
    }

    /// One SDK request through [`run`]: `request` builds and sends it afresh for each
    /// attempt, and an SDK error becomes a [`Failure`] of the service. Callers that turn some
    /// answers into outcomes (an existing bucket, a stale receipt) match on the [`Failure`];
    /// the rest use [`Sdk::send`].
    pub async fn send_raw<T, E, F, Fut>(
        self,
        operation: &'static str,
        key: &str,
        mut request: F,
    ) -> Result<T, Failure>
    where
        E: ProvideErrorMetadata + StdError + Send + Sync + 'static,
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, SdkError<E>>>,
    {
        let service = self.service;
        run(self.policy, self.idempotency, operation, key, |_| {
            let sent = request();
            async move { sent.await.map_err(|e| Failure::from_sdk(service, e)) }
        })
        .await
    }

    /// [`Sdk::send_raw`], with the last failure classified as a
    /// [`StoreError`](tilegate_core::StoreError) of `operation` on `key`.
    pub async fn send<T, E, F, Fut>(
        self,
        operation: &'static str,
        key: &str,
        request: F,
    ) -> StoreResult<T>
    where
        E: ProvideErrorMetadata + StdError + Send + Sync + 'static,
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, SdkError<E>>>,
    {
        self.send_raw(operation, key, request)
            .await
            .map_err(|f| f.into_store(operation, key))
    }
}

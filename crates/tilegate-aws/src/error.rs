//! How AWS answers are classified: one pure function from (HTTP status, error code) to what the
//! answer proves ([`Answer`]), the backend's own fault causes ([`AwsError`]), and the
//! [`Failure`] that carries one failed attempt from the SDK to the retry loop and, finally, into
//! a classified [`StoreError`].
//!
//! The SDK's typed errors are not enough: `PutObjectError` has no variant for 412, a 304 on a
//! conditional GET carries no error code at all, and S3's 409 `ConditionalRequestConflict` must
//! not be confused with a 412. So every answer is classified here by its raw status and its
//! `ProvideErrorMetadata::code()`, the same way for S3, DynamoDB and SQS.

use aws_sdk_s3::error::{DisplayErrorContext, ProvideErrorMetadata, SdkError};
use std::error::Error as StdError;
use std::time::Duration;
use tilegate_core::{Retry, StoreError};
use tilegate_retry::parse_retry_after;

pub use tilegate_retry::Answer;

/// Codes that mean "slow down" on S3, DynamoDB or SQS.
const THROTTLING_CODES: &[&str] = &[
    "SlowDown",
    "Throttling",
    "ThrottlingException",
    "ThrottledException",
    "RequestThrottled",
    "RequestThrottledException",
    "TooManyRequestsException",
    "RequestLimitExceeded",
    "ProvisionedThroughputExceededException",
    "BandwidthLimitExceeded",
    "LimitExceededException",
    "PriorRequestNotComplete",
    "EC2ThrottledException",
    "KmsThrottled",
    "AWS.SimpleQueueService.RequestThrottled",
];

/// Codes of transient faults that do not always come with a 5xx status.
const TRANSIENT_CODES: &[&str] = &[
    "InternalError",
    "InternalServerError",
    "InternalFailure",
    "ServiceUnavailable",
    // S3: "Your socket connection to the server was not read from or written to within the
    // timeout period" (HTTP 400).
    "RequestTimeout",
    "RequestTimeoutException",
    // S3 409: "A conflicting conditional operation is currently in progress against this
    // resource. Try again."
    "OperationAborted",
    // DynamoDB: another transaction holds the item.
    "TransactionConflictException",
    "TransactionInProgressException",
];

/// Classify one provider answer by its raw HTTP status (`None`: no response arrived) and its
/// error code (`None`: the response had none, as S3's 304 and HEAD errors do).
///
/// Provider behaviour this normalises (S3 User Guide, "Conditional writes" and "Conditional
/// requests"; DynamoDB and SQS API references, "Common Errors"):
/// - S3 answers a Create (`If-None-Match: *`) on an existing key, and an `If-Match` that no
///   longer matches, with **412 `PreconditionFailed`**.
/// - S3 answers **409 `ConditionalRequestConflict`** when a concurrent conditional write or a
///   delete of the same key was in flight; the guide says to retry the request. It is not a
///   proof that the object exists, so it is classified apart from 412.
/// - A conditional GET whose `If-None-Match` matched is a **304 without an error code**.
/// - DynamoDB refuses a `ConditionExpression` with **400 `ConditionalCheckFailedException`**.
/// - Throttling arrives as 503 `SlowDown` (S3), 400 `ThrottlingException` /
///   `ProvisionedThroughputExceededException` / `RequestLimitExceeded` (DynamoDB), 400
///   `RequestThrottled` (SQS) or a plain 429.
pub fn classify(status: Option<u16>, code: Option<&str>) -> Answer {
    let Some(status) = status else {
        // No response at all: the request may or may not have been applied.
        return Answer::Transient;
    };
    if let Some(code) = code.filter(|c| !c.is_empty()) {
        match code {
            "PreconditionFailed" => return Answer::PreconditionFailed,
            "ConditionalRequestConflict" => return Answer::ConditionalConflict,
            "ConditionalCheckFailedException" => return Answer::ConditionalCheckFailed,
            "NoSuchKey" => return Answer::NoSuchKey,
            "NoSuchUpload" => return Answer::NoSuchUpload,
            "NoSuchBucket"
            | "ResourceNotFoundException"
            | "QueueDoesNotExist"
            | "AWS.SimpleQueueService.NonExistentQueue" => return Answer::MissingResource,
            "InvalidRange" => return Answer::InvalidRange,
            "ReceiptHandleIsInvalid"
            | "AWS.SimpleQueueService.ReceiptHandleIsInvalid"
            | "MessageNotInflight"
            | "AWS.SimpleQueueService.MessageNotInflight" => return Answer::StaleReceipt,
            c if THROTTLING_CODES.contains(&c) => return Answer::Throttled,
            c if TRANSIENT_CODES.contains(&c) => return Answer::Transient,
            _ => {}
        }
    }
    match status {
        304 => Answer::NotModified,
        412 => Answer::PreconditionFailed,
        // A HEAD's 404 has no body, so no code.
        404 if code.is_none_or(|c| c.is_empty() || c == "NotFound") => Answer::NoSuchKey,
        416 => Answer::InvalidRange,
        429 => Answer::Throttled,
        500..=599 => Answer::Transient,
        _ => Answer::Permanent,
    }
}

/// A fault the AWS backends detect or describe themselves. It travels as the `source` of a
/// [`StoreError::Backend`]; its message is a lowercase fragment.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AwsError {
    /// The provider answered with an error.
    #[error("{service} answered HTTP {status} `{code}`: {message}")]
    Service {
        service: &'static str,
        status: u16,
        code: String,
        message: String,
    },
    /// No usable answer arrived (connection, timeout, unreadable response).
    #[error("reach {service}: {detail}")]
    Transport {
        service: &'static str,
        detail: String,
    },
    /// The SDK refused to build the request (a value it cannot send).
    #[error("build the {service} request: {detail}")]
    Construction {
        service: &'static str,
        detail: String,
    },
    /// A backend URL that cannot be used.
    #[error("parse backend url `{url}`: {reason}")]
    InvalidUrl { url: String, reason: String },
    /// Entries of a batch that the provider kept refusing.
    #[error("send {failed} of {total} messages: {detail}")]
    BatchRefused {
        failed: usize,
        total: usize,
        detail: String,
    },
    /// The object changed under a multi-step conditional read every time it was tried.
    #[error("write {what}: the rows changed during each of {attempts} transactions")]
    Contended { what: String, attempts: u32 },
    #[error("read a stable version: the object changed during each of {attempts} attempts")]
    Unstable { attempts: u32 },
    /// A write succeeded, but another replaced the object before it could be read back (only
    /// a multipart completion needs the read: its answer has no size).
    #[error("read back the object written as {e_tag}: it was replaced at once")]
    ReplacedAfterWrite { e_tag: String },
    /// A table or queue exists but is not shaped as tilegate creates it.
    #[error("use {what}: {reason}")]
    Misconfigured { what: String, reason: String },
    /// A resource did not become ready in time.
    #[error("wait for {what} to become {state}: still `{current}` after {waited:?}")]
    NotReady {
        what: String,
        state: &'static str,
        current: String,
        waited: Duration,
    },
}

/// One failed request: its classification and the error behind it (the failure type every
/// cloud store shares, with AWS's error).
pub type Failure = tilegate_retry::failure::Failure<AwsError>;

/// AWS names no missing resource apart: a missing bucket, table or queue is reported as the
/// provider's error, with the service's own message.
impl tilegate_retry::failure::ProviderError for AwsError {}

/// A failure from an error of the AWS SDK.
pub trait FailureOf {
    /// Describe an SDK error of `service`. Construction failures are permanent (the request
    /// itself is unsendable); dispatch, timeout and response errors mean no usable answer
    /// arrived.
    fn from_sdk<E>(service: &'static str, err: SdkError<E>) -> Self
    where
        E: ProvideErrorMetadata + StdError + Send + Sync + 'static;
}

impl FailureOf for Failure {
    fn from_sdk<E>(service: &'static str, err: SdkError<E>) -> Self
    where
        E: ProvideErrorMetadata + StdError + Send + Sync + 'static,
    {
        let detail = DisplayErrorContext(&err).to_string();
        match &err {
            SdkError::ConstructionFailure(_) => Self::own(
                Answer::Permanent,
                AwsError::Construction { service, detail },
            ),
            SdkError::DispatchFailure(d) if d.is_user() => {
                Self::own(Answer::Permanent, AwsError::Transport { service, detail })
            }
            SdkError::TimeoutError(_) | SdkError::DispatchFailure(_) => {
                Self::own(Answer::Transient, AwsError::Transport { service, detail })
            }
            _ => {
                let raw = err.raw_response();
                let status = raw.map(|r| r.status().as_u16());
                let retry_after = raw
                    .and_then(|r| r.headers().get("retry-after"))
                    .and_then(parse_retry_after);
                let code = err.code().map(str::to_owned);
                let message = err.message().unwrap_or_default().to_owned();
                let answer = if matches!(err, SdkError::ResponseError(_)) {
                    // The response could not be parsed: we do not know what it said.
                    Answer::Transient
                } else {
                    classify(status, code.as_deref())
                };
                let error = match status {
                    Some(status) if !matches!(err, SdkError::ResponseError(_)) => {
                        AwsError::Service {
                            service,
                            status,
                            code: code.clone().unwrap_or_else(|| "(no code)".to_owned()),
                            message: if message.is_empty() { detail } else { message },
                        }
                    }
                    _ => AwsError::Transport { service, detail },
                };
                Self {
                    status,
                    code,
                    retry_after,
                    answer,
                    error: Box::new(error),
                }
            }
        }
    }
}

/// A [`StoreError`] for a fault the backend detected itself.
pub(crate) fn own_error(
    operation: &'static str,
    key: &str,
    retry: Retry,
    e: AwsError,
) -> StoreError {
    StoreError::backend(operation, key, retry, e)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classifies_s3_conditional_answers() {
        assert_eq!(
            classify(Some(412), Some("PreconditionFailed")),
            Answer::PreconditionFailed
        );
        assert_eq!(
            classify(Some(409), Some("ConditionalRequestConflict")),
            Answer::ConditionalConflict
        );
        assert_eq!(classify(Some(304), None), Answer::NotModified);
        assert_eq!(classify(Some(404), None), Answer::NoSuchKey);
        assert_eq!(classify(Some(404), Some("NotFound")), Answer::NoSuchKey);
        assert_eq!(classify(Some(404), Some("NoSuchKey")), Answer::NoSuchKey);
        assert_eq!(
            classify(Some(404), Some("NoSuchUpload")),
            Answer::NoSuchUpload
        );
        assert_eq!(
            classify(Some(404), Some("NoSuchBucket")),
            Answer::MissingResource
        );
        assert_eq!(
            classify(Some(416), Some("InvalidRange")),
            Answer::InvalidRange
        );
        // A 409 that is not a conditional conflict proves nothing either way and is not retried
        // in place, except S3's documented "try again" OperationAborted.
        assert_eq!(
            classify(Some(409), Some("BucketAlreadyExists")),
            Answer::Permanent
        );
        assert_eq!(
            classify(Some(409), Some("OperationAborted")),
            Answer::Transient
        );
    }

    #[test]
    fn classifies_throttling_and_faults() {
        for (status, code) in [
            (503, Some("SlowDown")),
            (429, None),
            (400, Some("ThrottlingException")),
            (400, Some("RequestLimitExceeded")),
            (400, Some("ProvisionedThroughputExceededException")),
            (400, Some("RequestThrottled")),
        ] {
            let a = classify(Some(status), code);
            assert_eq!(a, Answer::Throttled, "{status} {code:?}");
            assert_eq!(a.retry(), Retry::Retryable);
        }
        for (status, code) in [
            (Some(500), Some("InternalError")),
            (Some(503), None),
            (Some(502), Some("Weird")),
            (Some(400), Some("RequestTimeout")),
            (None, None),
        ] {
            let a = classify(status, code);
            assert_eq!(a, Answer::Transient, "{status:?} {code:?}");
            assert_eq!(a.retry(), Retry::Retryable);
        }
        for (status, code) in [
            (403, Some("AccessDenied")),
            (400, Some("ValidationException")),
            (400, Some("InvalidArgument")),
            (404, Some("NoSuchBucket")),
            (400, Some("ResourceNotFoundException")),
        ] {
            assert_eq!(
                classify(Some(status), code).retry(),
                Retry::Permanent,
                "{status} {code:?}"
            );
        }
        assert_eq!(
            classify(Some(400), Some("ConditionalCheckFailedException")),
            Answer::ConditionalCheckFailed
        );
        assert_eq!(
            classify(Some(400), Some("ReceiptHandleIsInvalid")),
            Answer::StaleReceipt
        );
    }
}

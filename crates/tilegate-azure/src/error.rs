//! What an Azure Blob answer proves: one pure classifier over (status, `x-ms-error-code`), and
//! the failure the shared retry loop sees.
//!
//! From "Blob service error codes" and "Specifying conditional headers for Blob service
//! operations": a Put Blob / Put Block List with `If-None-Match: *` on an existing blob is
//! answered 409 `BlobAlreadyExists`, and a failed `If-Match` 412 `ConditionNotMet`; a GET
//! whose `If-None-Match` matches is 304; 404 `BlobNotFound` / `ContainerNotFound`; 503
//! `ServerBusy` and 429 are throttling; 500, 503 `OperationTimedOut`, 408 are transient.

use azure_core::error::ErrorKind;
use std::fmt;
use std::time::Duration;
use tilegate_core::StoreError;
use tilegate_retry::{Answer, Attempted};

/// Classify one Azure answer by its status and `x-ms-error-code`.
///
/// A refused create is `PreconditionFailed` under **both** codes it has been seen with:
/// 409 `BlobAlreadyExists` is what the documentation and Azurite answer to
/// `If-None-Match: *` on an existing blob, and 412 `ConditionNotMet` is what Azure front ends
/// have been seen to answer to the same request. Either proves a blob is in place.
pub fn classify(status: Option<u16>, code: Option<&str>) -> Answer {
    let Some(status) = status else {
        // No answer at all: network, timeout, an unreadable body.
        return Answer::Transient;
    };
    match (status, code.unwrap_or_default()) {
        (304, _) => Answer::NotModified,
        (412, _) | (409, "BlobAlreadyExists") => Answer::PreconditionFailed,
        (404, "ContainerNotFound") => Answer::MissingResource,
        (404, _) => Answer::NoSuchKey,
        (416, _) => Answer::InvalidRange,
        (429, _) | (503, "ServerBusy") => Answer::Throttled,
        (408 | 500..=599, _) => Answer::Transient,
        _ => Answer::Permanent,
    }
}

/// The errors this crate names itself.
#[derive(Debug, thiserror::Error)]
pub enum AzureError {
    /// Azure answered with an error.
    #[error("azure blob answered HTTP {status} {code}: {message}")]
    Service {
        status: u16,
        code: String,
        message: String,
    },
    /// No usable answer arrived.
    #[error("reach azure blob: {detail}")]
    Transport { detail: String },
    /// Settings that cannot be used (connection string, SAS, key).
    #[error("configure azure blob: {detail}")]
    Config { detail: String },
    /// An `az://` URL that cannot be used.
    #[error("parse `{url}`: {reason}")]
    InvalidUrl { url: String, reason: String },
    /// An upload record that cannot be read.
    #[error("read the upload record: {detail}")]
    UploadRecord { detail: String },
}

/// One failed request: its classification and the error behind it.
#[derive(Debug)]
pub struct Failure {
    pub answer: Answer,
    pub status: Option<u16>,
    /// `x-ms-error-code`, where the answer had one.
    pub code: Option<String>,
    pub retry_after: Option<Duration>,
    pub error: AzureError,
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.error.fmt(f)
    }
}

impl Failure {
    /// Classify an error of the client.
    pub fn of(e: azure_core::Error) -> Self {
        match e.kind() {
            ErrorKind::HttpResponse {
                status,
                error_code,
                raw_response,
            } => {
                let status = u16::from(*status);
                let code = error_code.clone();
                let retry_after = raw_response.as_ref().and_then(|r| {
                    r.headers()
                        .get_optional_str(&azure_core::http::headers::RETRY_AFTER)
                        .and_then(tilegate_retry::parse_retry_after)
                });
                Self {
                    answer: classify(Some(status), code.as_deref()),
                    status: Some(status),
                    error: AzureError::Service {
                        status,
                        code: code.clone().unwrap_or_else(|| "(no error code)".to_owned()),
                        message: e.to_string(),
                    },
                    code,
                    retry_after,
                }
            }
            ErrorKind::Credential => Self::own(
                Answer::Permanent,
                AzureError::Config {
                    detail: tilegate_core::error::chain(&e),
                },
            ),
            ErrorKind::DataConversion => Self::own(
                Answer::Permanent,
                AzureError::Transport {
                    detail: format!("unreadable answer: {}", tilegate_core::error::chain(&e)),
                },
            ),
            _ => Self::own(
                Answer::Transient,
                AzureError::Transport {
                    detail: tilegate_core::error::chain(&e),
                },
            ),
        }
    }

    /// A failure the store detected itself.
    pub fn own(answer: Answer, error: AzureError) -> Self {
        Self {
            answer,
            status: None,
            code: None,
            retry_after: None,
            error,
        }
    }

    /// Whether the answer carried `code`.
    pub fn is(&self, code: &str) -> bool {
        self.code.as_deref() == Some(code)
    }

    /// The contract's error for this failure of `operation` on `key`.
    pub fn into_store(self, operation: &'static str, key: &str) -> StoreError {
        match self.answer {
            Answer::NoSuchKey => StoreError::NotFound {
                what: "object",
                key: key.to_owned(),
            },
            Answer::MissingResource => StoreError::NotFound {
                what: "azure container (run `tilegate init`)",
                key: key.to_owned(),
            },
            answer => StoreError::backend(operation, key, answer.retry(), self.error),
        }
    }
}

impl Attempted for Failure {
    fn answer(&self) -> Answer {
        self.answer
    }
    fn retry_after(&self) -> Option<Duration> {
        self.retry_after
    }
    fn status(&self) -> Option<u16> {
        self.status
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refused_create_is_already_present_under_both_codes() {
        assert_eq!(
            classify(Some(409), Some("BlobAlreadyExists")),
            Answer::PreconditionFailed
        );
        assert_eq!(
            classify(Some(412), Some("ConditionNotMet")),
            Answer::PreconditionFailed
        );
    }

    #[test]
    fn other_answers() {
        assert_eq!(classify(Some(304), None), Answer::NotModified);
        assert_eq!(classify(Some(404), Some("BlobNotFound")), Answer::NoSuchKey);
        assert_eq!(classify(Some(404), None), Answer::NoSuchKey, "a HEAD's 404");
        assert_eq!(
            classify(Some(404), Some("ContainerNotFound")),
            Answer::MissingResource
        );
        assert_eq!(classify(Some(503), Some("ServerBusy")), Answer::Throttled);
        assert_eq!(classify(Some(429), None), Answer::Throttled);
        for s in [408, 500, 502, 503, 504] {
            assert_eq!(
                classify(Some(s), Some("OperationTimedOut")),
                Answer::Transient
            );
        }
        for (s, c) in [
            (409, "ContainerAlreadyExists"),
            (409, "LeaseIdMissing"),
            (400, "InvalidBlockList"),
            (403, "AuthorizationFailure"),
        ] {
            assert_eq!(classify(Some(s), Some(c)), Answer::Permanent, "{s} {c}");
        }
        assert_eq!(classify(None, None), Answer::Transient);
    }
}

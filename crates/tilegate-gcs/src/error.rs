//! What a GCS answer proves: one pure classifier over (status, reason), and the failure the
//! shared retry loop sees.
//!
//! GCS's JSON API documents its answers by status ("HTTP status and error codes for JSON"):
//! 412 `conditionNotMet` for a failed `ifGenerationMatch`, 304 for a matched
//! `ifGenerationNotMatch`, 404 `notFound`, 429 `rateLimitExceeded`, 408 and 5xx as retryable.
//! fake-gcs-server 1.54 sends other reason strings (`Precondition Failed`), so every class is
//! decided by the status code; the reason only tells a missing bucket from a missing object.

use std::time::Duration;
use tilegate_retry::Answer;

/// Classify one GCS answer. `reason` is the first error item's reason or the message, where
/// the body carried one.
pub fn classify(status: Option<u16>, message: Option<&str>) -> Answer {
    let Some(status) = status else {
        // No answer at all: network, timeout, an unreadable body.
        return Answer::Transient;
    };
    match status {
        304 => Answer::NotModified,
        412 => Answer::PreconditionFailed,
        404 if message.is_some_and(|m| m.to_ascii_lowercase().contains("bucket")) => {
            Answer::MissingResource
        }
        404 => Answer::NoSuchKey,
        416 => Answer::InvalidRange,
        429 => Answer::Throttled,
        408 | 500..=599 => Answer::Transient,
        _ => Answer::Permanent,
    }
}

/// The errors this crate names itself.
#[derive(Debug, thiserror::Error)]
pub enum GcsError {
    /// GCS answered with an error.
    #[error("gcs answered HTTP {status}: {message}")]
    Service { status: u16, message: String },
    /// No usable answer arrived.
    #[error("reach gcs: {detail}")]
    Transport { detail: String },
    /// Credentials could not be found or refreshed.
    #[error("authenticate to gcs: {detail}")]
    Auth { detail: String },
    /// A signed URL asked to live longer than V4 signing allows (7 days: "V4 signing
    /// process", `X-Goog-Expires` at most 604800), or not at all.
    #[error(
        "sign a read URL valid for {asked:?}: a signed URL lives more than no time and at most \
         7 days"
    )]
    UrlLifetime { asked: Duration },
    /// A `gs://` URL that cannot be used.
    #[error("parse `{url}`: {reason}")]
    InvalidUrl { url: String, reason: String },
    /// The object kept changing between reading its metadata and its bytes.
    #[error("read a stable version: the object changed {attempts} times while it was read")]
    Unstable { attempts: u32 },
    /// A resumable session record that cannot be read.
    #[error("read the upload record: {detail}")]
    UploadRecord { detail: String },
    /// A multipart request this store cannot serve (a session is written in order).
    #[error("{detail}")]
    UploadOrder { detail: String },
    /// A resumable session reported its persisted bytes in a way that cannot be resumed from:
    /// fewer than it had already acknowledged, more than it was sent, or no progress on
    /// several requests in a row.
    #[error("resume the upload at byte {offset}: {detail}")]
    Resume { offset: u64, detail: String },
}

/// One failed request: its classification and the error behind it (the failure type every
/// cloud store shares, with GCS's error).
pub type Failure = tilegate_retry::failure::Failure<GcsError>;

impl tilegate_retry::failure::ProviderError for GcsError {}

/// A failure from an error of GCS's client.
pub trait FailureOf {
    /// Classify an error of the client.
    fn of(e: gcloud_storage::http::Error) -> Self;
}

impl FailureOf for Failure {
    fn of(e: gcloud_storage::http::Error) -> Self {
        use gcloud_storage::http::Error as E;
        let (status, error) = match e {
            E::Response(r) => {
                let message = r
                    .errors
                    .first()
                    .map(|i| format!("{} ({})", r.message, i.reason))
                    .unwrap_or(r.message);
                (
                    Some(r.code),
                    GcsError::Service {
                        status: r.code,
                        message,
                    },
                )
            }
            E::HttpClient(e) | E::RawResponse(e, _) => match e.status() {
                Some(s) => (
                    Some(s.as_u16()),
                    GcsError::Service {
                        status: s.as_u16(),
                        message: e.to_string(),
                    },
                ),
                None => (
                    None,
                    GcsError::Transport {
                        detail: tilegate_core::error::chain(&e),
                    },
                ),
            },
            E::HttpMiddleware(e) => (
                None,
                GcsError::Transport {
                    detail: format!("{e:#}"),
                },
            ),
            E::TokenSource(e) => {
                return Self::own(
                    Answer::Permanent,
                    GcsError::Auth {
                        detail: e.to_string(),
                    },
                );
            }
            E::InvalidRangeHeader(h) => {
                return Self::own(
                    Answer::Permanent,
                    GcsError::Transport {
                        detail: format!("unreadable Range header `{h}`"),
                    },
                );
            }
        };
        let message = match &error {
            GcsError::Service { message, .. } => Some(message.as_str()),
            _ => None,
        };
        Self {
            answer: classify(status, message),
            status,
            code: None,
            retry_after: None,
            error: Box::new(error),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classes_are_decided_by_status() {
        // GCS's reason and the emulator's differ; the status decides.
        assert_eq!(
            classify(Some(412), Some("conditionNotMet")),
            Answer::PreconditionFailed
        );
        assert_eq!(
            classify(Some(412), Some("Precondition Failed")),
            Answer::PreconditionFailed
        );
        assert_eq!(classify(Some(304), None), Answer::NotModified);
        assert_eq!(
            classify(Some(404), Some("No such object: b/k")),
            Answer::NoSuchKey
        );
        assert_eq!(
            classify(Some(404), Some("The specified bucket does not exist.")),
            Answer::MissingResource
        );
        assert_eq!(classify(Some(429), None), Answer::Throttled);
        for s in [408, 500, 502, 503, 504] {
            assert_eq!(classify(Some(s), None), Answer::Transient, "{s}");
        }
        for s in [400, 401, 403, 409] {
            assert_eq!(classify(Some(s), None), Answer::Permanent, "{s}");
        }
        assert_eq!(classify(None, None), Answer::Transient);
    }
}

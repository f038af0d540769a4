//! What an Azure Blob answer proves: one pure classifier over (status, `x-ms-error-code`), and
//! the failure the shared retry loop sees.
//!
//! From "Blob service error codes" and "Specifying conditional headers for Blob service
//! operations": a Put Blob / Put Block List with `If-None-Match: *` on an existing blob is
//! answered 409 `BlobAlreadyExists`, and a failed `If-Match` 412 `ConditionNotMet`; a GET
//! whose `If-None-Match` matches is 304; 404 `BlobNotFound` / `ContainerNotFound`; 503
//! `ServerBusy` and 429 are throttling; 500, 503 `OperationTimedOut`, 408 are transient.
//!
//! A request whose SAS is outside its time frame is refused like any other that fails
//! authentication, 403 `AuthenticationFailed` ("Common REST API error codes"), and the body's
//! `AuthenticationErrorDetail` says why: "Signature not valid in the specified time frame:
//! Start [..] - Expiry [..] - Current [..]". The SAS policy renews the SAS and sends once more
//! ([`renews_sas`]); what [`classify`] then sees is final.

use crate::names::Rule;
use azure_core::error::ErrorKind;
use std::time::Duration;
use tilegate_core::Reason;
use tilegate_retry::Answer;

/// Classify one Azure answer by its status and `x-ms-error-code`.
///
/// A refused create is `PreconditionFailed` under **both** codes it has been seen with:
/// 409 `BlobAlreadyExists` is what the documentation and Azurite answer to
/// `If-None-Match: *` on an existing blob, and 412 `ConditionNotMet` is what Azure front ends
/// have been seen to answer to the same request. Either proves a blob is in place.
///
/// A 403 is `Permanent`: one whose SAS renewing could cure has been sent again with a
/// renewed one already (see [`renews_sas`]), and any other (a key Azure does not know, a
/// permission the SAS lacks) is not cured by sending it again.
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

/// The phrase of Azure's `AuthenticationErrorDetail` for a SAS used before its start or
/// after its expiry.
const OUTSIDE_TIME_FRAME: &str = "Signature not valid in the specified time frame";

/// Whether a refused request is sent once more with a renewed account SAS: a 403
/// `AuthenticationFailed` whose detail says the SAS is outside its time frame (expired, or
/// not yet started on the service's clock), or that gives no detail (a HEAD's answer has no
/// body), or that was refused with a SAS another request has `renewed_since`. A detail that
/// names another cause ("Signature did not match": a key Azure does not know) and every other
/// answer are not: renewing cannot cure them.
pub fn renews_sas(
    status: u16,
    code: Option<&str>,
    detail: Option<&str>,
    renewed_since: bool,
) -> bool {
    status == 403
        && code == Some("AuthenticationFailed")
        && (renewed_since || detail.is_none_or(|d| d.contains(OUTSIDE_TIME_FRAME)))
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
    /// An `az://` URL refused before any request is made or any URL built from it, by the
    /// rule it breaks (see [`crate::names`]).
    #[error("refuse `{url}` [{}]: {rule}", rule.name())]
    Forbidden {
        url: String,
        rule: Rule,
        /// The same refusal as the source policy names its refusals, so that every path that
        /// reads sources reports it as `source-forbidden`.
        #[source]
        policy: tilegate_core::source_policy::Forbidden,
    },
    /// A read URL asked to live longer than [`MAX_URL_LIFETIME`], or not at all.
    #[error(
        "sign a read URL valid for {asked:?}: a signed URL lives more than no time and at most \
         7 days"
    )]
    UrlLifetime { asked: Duration },
    /// An upload record that cannot be read.
    #[error("read the upload record: {detail}")]
    UploadRecord { detail: String },
}

impl AzureError {
    /// A stable kebab-case name of what was refused, for a refusal this crate makes itself
    /// (`storage-refused` for every other error: what this crate refuses, it refuses for good).
    pub fn reason_code(&self) -> Reason {
        match self {
            Self::Forbidden { .. } => Reason::SourceForbidden,
            Self::UrlLifetime { asked } if asked.is_zero() => Reason::UrlLifetimeEmpty,
            Self::UrlLifetime { .. } => Reason::UrlLifetimeExceeded,
            _ => Reason::StorageRefused,
        }
    }
}

/// The longest a signed read URL lives: S3's SigV4 and GCS's V4 signatures cannot live longer
/// (7 days), and a service SAS, which Azure does not bound itself, is held to the same.
pub const MAX_URL_LIFETIME: Duration = Duration::from_secs(7 * 24 * 3600);

/// One failed request: its classification and the error behind it (the failure type every
/// cloud store shares, with Azure's error).
pub type Failure = tilegate_retry::failure::Failure<AzureError>;

impl tilegate_retry::failure::ProviderError for AzureError {
    const MISSING_RESOURCE: Option<&'static str> = Some("azure container (run `tilegate init`)");
}

/// A failure from an error of Azure's client.
pub trait FailureOf {
    /// Classify an error of the client.
    fn of(e: azure_core::Error) -> Self;
}

impl FailureOf for Failure {
    fn of(e: azure_core::Error) -> Self {
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
                    error: Box::new(AzureError::Service {
                        status,
                        code: code.clone().unwrap_or_else(|| "(no error code)".to_owned()),
                        message: e.to_string(),
                    }),
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
        assert_eq!(
            classify(Some(403), Some("AuthenticationFailed")),
            Answer::Permanent,
            "final once the SAS policy has renewed and sent again"
        );
    }

    #[test]
    fn a_sas_refused_for_its_time_frame_is_renewed() {
        let expired = "Signature not valid in the specified time frame: Start [Wed, 02 Dec 2026 \
                       00:00:00 GMT] - Expiry [Wed, 09 Dec 2026 00:00:00 GMT] - Current [Thu, \
                       10 Dec 2026 00:00:00 GMT]";
        let mismatch = "Signature did not match. String to sign used was devstoreaccount1";
        let auth = Some("AuthenticationFailed");
        for (status, code, detail, renewed_since, renews) in [
            (403, auth, Some(expired), false, true),
            (403, auth, None, false, true),
            (403, auth, Some(mismatch), false, false),
            (403, auth, Some(mismatch), true, true),
            (
                403,
                Some("AuthorizationFailure"),
                Some(expired),
                false,
                false,
            ),
            (
                403,
                Some("AuthorizationPermissionMismatch"),
                None,
                true,
                false,
            ),
            (403, None, None, false, false),
            (401, auth, Some(expired), false, false),
            (412, Some("ConditionNotMet"), None, true, false),
        ] {
            assert_eq!(
                renews_sas(status, code, detail, renewed_since),
                renews,
                "{status} {code:?} {detail:?} renewed_since={renewed_since}"
            );
        }
    }
}

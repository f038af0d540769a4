//! One failed request of any provider, as every cloud store reports it: what the answer proves
//! ([`Answer`]), the HTTP status and provider code where one arrived, the provider's
//! `Retry-After`, and the provider's own error to report if no retry helps. Each provider keeps
//! only its classifier and the conversion from its client's error; building a failure the
//! store raised itself, telling codes apart, turning a failure into the contract's
//! [`StoreError`] (a missing bucket or container, a source look-up's answer) and handing it to
//! the retry loop are written here once, as is the split of a `scheme://bucket/key` source.

use crate::{Answer, Attempted};
use std::fmt;
use std::time::Duration;
use tilegate_core::{StoreError, StoreResult};

/// A provider's error type, as the failures of its requests carry it.
pub trait ProviderError: std::error::Error + Send + Sync + 'static {
    /// What a `MissingResource` answer names as not found (a bucket, a container, with the
    /// command that creates it); `None`: it is reported as the provider's error, like any other.
    const MISSING_RESOURCE: Option<&'static str> = None;
}

/// One failed request (see the module docs).
#[derive(Debug)]
pub struct Failure<E> {
    pub answer: Answer,
    pub status: Option<u16>,
    /// The provider's error code, where the answer had one.
    pub code: Option<String>,
    /// The provider's `Retry-After`, where it sent one.
    pub retry_after: Option<Duration>,
    /// Boxed: a `Result<_, Failure<E>>` stays small on the happy path.
    pub error: Box<E>,
}

impl<E: fmt::Display> fmt::Display for Failure<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.error.fmt(f)
    }
}

impl<E: ProviderError> Failure<E> {
    /// A failure the store detected itself, with its classification.
    pub fn own(answer: Answer, error: E) -> Self {
        Self {
            answer,
            status: None,
            code: None,
            retry_after: None,
            error: Box::new(error),
        }
    }

    /// Whether the answer carried the provider's error code `code`.
    pub fn is(&self, code: &str) -> bool {
        self.code.as_deref() == Some(code)
    }

    /// The contract's error for this failure of `operation` on `key`, when no outcome value
    /// fits its answer.
    pub fn into_store(self, operation: &'static str, key: &str) -> StoreError {
        let not_found = |what| StoreError::NotFound {
            what,
            key: key.to_owned(),
        };
        match (self.answer, E::MISSING_RESOURCE) {
            (Answer::NoSuchKey, _) => not_found("object"),
            (Answer::NoSuchUpload, _) => not_found("multipart upload"),
            (Answer::MissingResource, Some(what)) => not_found(what),
            (answer, _) => StoreError::backend(operation, key, answer.retry(), *self.error),
        }
    }

    /// The contract's error for a failed check of the store's bucket or container `name`:
    /// `NotFound` naming `what` and `shown` when the answer says it is missing (a 404 of either
    /// kind), else as [`Failure::into_store`] of `operation`.
    pub fn into_check(
        self,
        operation: &'static str,
        name: &str,
        what: &'static str,
        shown: String,
    ) -> StoreError {
        match self.answer {
            Answer::NoSuchKey | Answer::MissingResource => {
                StoreError::NotFound { what, key: shown }
            }
            _ => self.into_store(operation, name),
        }
    }
}

/// A source look-up's last answer (a HEAD of `uri`): what it found, `None` when there is no
/// such object, and otherwise the contract's error of `head source` — `missing` where the
/// answer says the source's bucket or container is missing and the store names that itself.
pub fn source_lookup<T, E: ProviderError>(
    r: Result<T, Failure<E>>,
    uri: &str,
    missing: Option<StoreError>,
) -> StoreResult<Option<T>> {
    match (r, missing) {
        (Ok(found), _) => Ok(Some(found)),
        (Err(f), _) if f.answer == Answer::NoSuchKey => Ok(None),
        (Err(f), Some(missing)) if f.answer == Answer::MissingResource => Err(missing),
        (Err(f), _) => Err(f.into_store("head source", uri)),
    }
}

/// Split a source URI `scheme://bucket/key` into its bucket and key (neither empty).
pub fn split_source<'a>(uri: &'a str, scheme: &str) -> StoreResult<(&'a str, &'a str)> {
    uri.strip_prefix(scheme)
        .and_then(|rest| rest.strip_prefix("://"))
        .and_then(|rest| rest.split_once('/'))
        .filter(|(b, k)| !b.is_empty() && !k.is_empty())
        .ok_or_else(|| StoreError::InvalidKey {
            key: uri.to_owned(),
            reason: format!("expected {scheme}://bucket/key"),
        })
}

impl<E> Attempted for Failure<E> {
    fn answer(&self) -> Answer {
        self.answer
    }
    fn retry_after(&self) -> Option<Duration> {
        self.retry_after
    }
    fn status(&self) -> Option<u16> {
        self.status
    }
    fn code(&self) -> Option<&str> {
        self.code.as_deref()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, thiserror::Error)]
    #[error("provider says no")]
    struct Plain;
    impl ProviderError for Plain {}

    #[derive(Debug, thiserror::Error)]
    #[error("container missing")]
    struct WithMissing;
    impl ProviderError for WithMissing {
        const MISSING_RESOURCE: Option<&'static str> = Some("container (run `tilegate init`)");
    }

    #[test]
    fn answers_become_the_contracts_errors() {
        let e = Failure::own(Answer::NoSuchKey, Plain).into_store("get", "k");
        assert!(matches!(e, StoreError::NotFound { what: "object", .. }));
        let e = Failure::own(Answer::NoSuchUpload, Plain).into_store("complete", "k");
        assert!(matches!(
            e,
            StoreError::NotFound {
                what: "multipart upload",
                ..
            }
        ));
        let e = Failure::own(Answer::MissingResource, Plain).into_store("put", "k");
        assert!(matches!(e, StoreError::Backend { .. }), "{e:?}");
        let e = Failure::own(Answer::MissingResource, WithMissing).into_store("put", "k");
        assert!(matches!(e, StoreError::NotFound { .. }), "{e:?}");
        let e = Failure::own(Answer::Transient, Plain).into_store("put", "k");
        assert!(e.is_retryable());
        let mut f = Failure::own(Answer::Permanent, Plain);
        f.code = Some("AccessDenied".into());
        assert!(f.is("AccessDenied") && !f.is("NoSuchKey"));
        assert_eq!(f.to_string(), "provider says no");
    }

    #[test]
    fn checks_and_source_lookups_name_what_is_missing() {
        let e =
            Failure::own(Answer::NoSuchKey, Plain).into_check("check", "b", "bucket", "b".into());
        assert!(
            matches!(e, StoreError::NotFound { what: "bucket", .. }),
            "{e:?}"
        );
        let e =
            Failure::own(Answer::Permanent, Plain).into_check("check", "b", "bucket", "b".into());
        assert!(matches!(e, StoreError::Backend { .. }), "{e:?}");
        let missing = || {
            Some(StoreError::NotFound {
                what: "bucket",
                key: "b".into(),
            })
        };
        let r = source_lookup::<(), _>(Err(Failure::own(Answer::NoSuchKey, Plain)), "u", missing());
        assert!(matches!(r, Ok(None)));
        let r = source_lookup::<(), _>(
            Err(Failure::own(Answer::MissingResource, Plain)),
            "u",
            missing(),
        );
        assert!(matches!(
            r,
            Err(StoreError::NotFound { what: "bucket", .. })
        ));
        let r =
            source_lookup::<(), _>(Err(Failure::own(Answer::MissingResource, Plain)), "u", None);
        assert!(matches!(r, Err(StoreError::Backend { .. })));
        assert!(matches!(
            source_lookup::<u8, Plain>(Ok(1), "u", None),
            Ok(Some(1))
        ));
    }

    #[test]
    fn a_source_is_scheme_bucket_and_key() {
        assert_eq!(split_source("s3://b/k/x", "s3").unwrap(), ("b", "k/x"));
        for bad in [
            "s3://b", "s3:///k", "s3://b/", "gs://b/k", "s3:/b/k", "s3b/k",
        ] {
            let e = split_source(bad, "s3").unwrap_err();
            assert!(
                e.to_string().contains("expected s3://bucket/key"),
                "{bad}: {e}"
            );
        }
    }
}

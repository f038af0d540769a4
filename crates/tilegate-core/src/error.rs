//! The storage error shared by every contract, with its retry classification.
//!
//! A rejected precondition is never an error here: it is an outcome value (see
//! [`crate::object::PutOutcome`]). Only genuine faults are errors.

use std::error::Error as StdError;

/// Whether repeating the same request may succeed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Retry {
    /// A transient fault (network, throttling, 5xx, lock timeout): try again later.
    Retryable,
    /// Repeating the request cannot help (bad input, missing object, auth).
    Permanent,
}

/// A storage fault. `Display` is a lowercase fragment that reads after "failed to ...";
/// the source is reachable through [`std::error::Error::source`], not repeated in the message.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// The object or row does not exist.
    #[error("find {what} `{key}`")]
    NotFound { what: &'static str, key: String },
    /// The key or name is not acceptable to this backend.
    #[error("accept key `{key}`: {reason}")]
    InvalidKey { key: String, reason: String },
    /// The backend cannot do this; it refuses rather than silently degrading.
    #[error("{operation}: not implemented by {implementer}")]
    NotImplemented {
        operation: &'static str,
        implementer: &'static str,
    },
    /// A stored value could not be decoded (corrupt row, unexpected schema).
    #[error("decode {what} `{key}`: {detail}")]
    Corrupt {
        what: &'static str,
        key: String,
        detail: String,
    },
    /// Any other backend fault, classified.
    #[error("{operation} `{key}`")]
    Backend {
        operation: &'static str,
        key: String,
        retry: Retry,
        #[source]
        source: Box<dyn StdError + Send + Sync>,
    },
}

impl StoreError {
    /// Build a [`StoreError::Backend`].
    pub fn backend(
        operation: &'static str,
        key: impl Into<String>,
        retry: Retry,
        source: impl Into<Box<dyn StdError + Send + Sync>>,
    ) -> Self {
        Self::Backend {
            operation,
            key: key.into(),
            retry,
            source: source.into(),
        }
    }

    /// The retry classification of this fault.
    pub fn retry(&self) -> Retry {
        match self {
            Self::Backend { retry, .. } => *retry,
            Self::NotFound { .. }
            | Self::InvalidKey { .. }
            | Self::NotImplemented { .. }
            | Self::Corrupt { .. } => Retry::Permanent,
        }
    }

    /// True if repeating the request may succeed.
    pub fn is_retryable(&self) -> bool {
        self.retry() == Retry::Retryable
    }
}

/// Result alias for storage operations.
pub type StoreResult<T> = Result<T, StoreError>;

/// Render an error and its whole source chain on one line, for logs and dead-letter reasons,
/// with its secrets redacted ([`crate::redact`]): an HTTP client's error names the URL it
/// sent, and a signed URL carries its signature.
pub fn chain(err: &(dyn StdError + 'static)) -> String {
    let mut out = err.to_string();
    let mut cur = err.source();
    while let Some(e) = cur {
        out.push_str(": ");
        out.push_str(&e.to_string());
        cur = e.source();
    }
    crate::redact::redact(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_chain_names_every_source_and_no_signature() {
        let url = "https://b.s3.amazonaws.com/k?X-Amz-Credential=AKIA%2F1&X-Amz-Signature=0a1b2c";
        let e = StoreError::backend(
            "put",
            "tiles/a.tif",
            Retry::Retryable,
            std::io::Error::other(format!("error sending request for url ({url})")),
        );
        assert_eq!(
            chain(&e),
            "put `tiles/a.tif`: error sending request for url \
             (https://b.s3.amazonaws.com/k?X-Amz-Credential=REDACTED&X-Amz-Signature=REDACTED)"
        );
    }
}

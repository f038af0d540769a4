//! The embedded backend's own fault causes, and how OS and SQLite errors are classified into
//! [`Retry`] before they cross into [`StoreError`].

use rusqlite::ErrorCode;
use std::io;
use std::time::Duration;
use tilegate_core::{Retry, StoreError};

/// A fault detected by the embedded backend itself. It travels as the `source` of a
/// [`StoreError::Backend`]; its message is a lowercase fragment naming what was wrong.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum EmbeddedError {
    /// A range the contract refuses.
    #[error(transparent)]
    Range(#[from] tilegate_core::object::RangeError),
    /// Another writer held the per-key lock for longer than we wait.
    #[error("take the per-key lock within {0:?}: another writer holds it")]
    LockTimeout(Duration),
    /// The key's path is, or passes through, something that is not an object (a directory where
    /// the object should be, or a file where a directory should be).
    #[error("place the object: `{path}` is in the way")]
    KeyConflict { path: String },
    /// The filesystem refuses hard links, which the create-if-absent guard needs.
    #[error("create-if-absent needs link(2), which this filesystem refuses")]
    NoHardLinks(#[source] io::Error),
    /// A multipart part number outside 1..=10000, a missing part or a part whose ETag differs.
    #[error("use part {part_number}: {reason}")]
    InvalidPart {
        part_number: u32,
        reason: &'static str,
    },
    /// A multipart completion naming no parts, or parts out of ascending order.
    #[error("complete the upload: {0}")]
    InvalidPartList(&'static str),
    /// A number that SQLite's signed 64-bit integers cannot hold.
    #[error("store {what}: {value} does not fit in a signed 64-bit integer")]
    OutOfRange { what: &'static str, value: u128 },
    /// The database was written by a newer tilegate.
    #[error("open the database: schema version {found} is newer than this build's {supported}")]
    SchemaTooNew { found: i64, supported: i64 },
    /// SQLite could not switch the database into write-ahead-log mode.
    #[error("switch the database to WAL mode: SQLite kept `{0}`")]
    NoWal(String),
}

/// Classify an OS error: faults that may pass (a full disk being cleaned, an I/O hiccup, an
/// interrupted call, resource exhaustion) are retryable; permission, invalid-argument and
/// everything else that a retry cannot change are permanent.
pub(crate) fn io_retry(e: &io::Error) -> Retry {
    if matches!(
        e.kind(),
        io::ErrorKind::Interrupted | io::ErrorKind::TimedOut | io::ErrorKind::WouldBlock
    ) {
        return Retry::Retryable;
    }
    match e.raw_os_error() {
        Some(
            libc::EIO
            | libc::ENOSPC
            | libc::EDQUOT
            | libc::EAGAIN
            | libc::EBUSY
            | libc::EINTR
            | libc::EMFILE
            | libc::ENFILE
            | libc::ENOMEM
            | libc::ESTALE
            | libc::ETIMEDOUT,
        ) => Retry::Retryable,
        _ => Retry::Permanent,
    }
}

/// Wrap an OS error with the operation and key it failed.
pub(crate) fn io_error(operation: &'static str, key: &str, e: io::Error) -> StoreError {
    let retry = io_retry(&e);
    StoreError::backend(operation, key, retry, e)
}

/// Wrap a fault the backend detected itself.
pub(crate) fn own_error(
    operation: &'static str,
    key: &str,
    retry: Retry,
    e: EmbeddedError,
) -> StoreError {
    StoreError::backend(operation, key, retry, e)
}

/// Classify a SQLite error: a busy or locked database (another process holds the write lock
/// past `busy_timeout`), an I/O error and a full disk are retryable; the rest (constraint,
/// schema, misuse) are permanent.
pub(crate) fn sql_retry(e: &rusqlite::Error) -> Retry {
    match e {
        rusqlite::Error::SqliteFailure(f, _) => match f.code {
            ErrorCode::DatabaseBusy
            | ErrorCode::DatabaseLocked
            | ErrorCode::SystemIoFailure
            | ErrorCode::DiskFull
            | ErrorCode::OperationInterrupted
            | ErrorCode::OutOfMemory => Retry::Retryable,
            _ => Retry::Permanent,
        },
        _ => Retry::Permanent,
    }
}

/// Wrap a SQLite error with the operation and key (row, queue) it failed.
pub(crate) fn sql_error(operation: &'static str, key: &str, e: rusqlite::Error) -> StoreError {
    let retry = sql_retry(&e);
    StoreError::backend(operation, key, retry, e)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classifies_os_errors() {
        for code in [libc::ENOSPC, libc::EIO, libc::EINTR, libc::EAGAIN] {
            assert_eq!(
                io_retry(&io::Error::from_raw_os_error(code)),
                Retry::Retryable,
                "{code}"
            );
        }
        for code in [libc::EACCES, libc::EPERM, libc::EINVAL, libc::ENOTDIR] {
            assert_eq!(
                io_retry(&io::Error::from_raw_os_error(code)),
                Retry::Permanent,
                "{code}"
            );
        }
    }
}

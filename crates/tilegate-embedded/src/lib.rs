//! The embedded backend: objects as files, tables and queue in one SQLite file — tilegate's
//! default when no server is available, correct across threads *and* processes sharing one
//! data directory.
//!
//! - [`LocalObjectStore`]: an [`ObjectStore`](tilegate_core::object::ObjectStore) over a
//!   directory; create-if-absent by `link(2)`, compare-and-swap under a per-key `flock(2)`.
//! - [`SqliteBackend`]: jobs, manifest, claims and counters in one SQLite file (WAL).
//! - [`SqliteQueue`]: an SQS-shaped work queue in the same file, from [`SqliteBackend::queue`].
//!
//! # How the contracts map onto files and SQLite
//!
//! - Objects are ordinary files at `DATA/objects/<key>`; internal state lives in
//!   `DATA/objects/.tilegate/` (a key may not start with that segment). Create = temp file +
//!   fsync + `link(2)` + fsync of the directory; Update, Overwrite and conditional delete hold a
//!   per-key `flock` and rename over. ETag = quoted content hash, cached in a sidecar — an
//!   extended attribute (`user.tilegate.sidecar`) of the file's own inode, or on a filesystem
//!   without user attributes a file in `meta/` named by the inode — written *before* the object
//!   becomes visible, so metadata and object appear together; a sidecar that does not match
//!   key, size and mtime is ignored and the hash recomputed. Only sidecars that carry user
//!   metadata are fsynced: without metadata a sidecar caches nothing the content does not give,
//!   and a lost or torn one only costs a rehash. LastModified is the file's mtime.
//! - Multipart uploads spool parts that arrive in order into one file; completing with exactly
//!   those parts publishes the spool itself (no copy: a second hard link to it, so that a
//!   completion that fails leaves the upload, spool included, completable). Other parts are
//!   staged as separate files and concatenated at completion.
//! - Bytes reach the kernel in `write(2)` calls of at most 1 MiB, and files are hashed from
//!   reads, never a mapping: a larger write lets ext4 allocate 2 MiB page-cache folios, slow to
//!   touch first on a virtual machine that hands free memory back to its host, and a mapping's
//!   pages count in the process's resident set.
//! - Tables and the queue share `DATA/tilegate.db` (SQLite, WAL, `busy_timeout`), so several
//!   processes on one machine coordinate through SQLite's locks; conditional writes are single
//!   statements or `BEGIN IMMEDIATE` transactions.

mod blocking;
pub mod error;
pub mod local;
pub mod sqlite;

pub use error::EmbeddedError;
pub use local::LocalObjectStore;
pub use sqlite::{SqliteBackend, SqliteQueue};

use std::path::Path;
use std::sync::Arc;
use tilegate_core::{Backends, StoreResult};

/// Name of the work queue in a data directory.
pub const QUEUE_NAME: &str = "work";

/// The embedded backend of a data directory: objects under `data/objects`, tables and the
/// work queue in `data/tilegate.db`.
pub fn open_data_dir(data: &Path, max_receive_count: u32) -> StoreResult<Backends> {
    let objects = LocalObjectStore::open(data.join("objects"))?;
    let db = SqliteBackend::open(data.join("tilegate.db"))?;
    let queue = db.queue(QUEUE_NAME, max_receive_count);
    let db = Arc::new(db);
    Ok(Backends {
        objects: Arc::new(objects),
        jobs: db.clone(),
        manifest: db.clone(),
        claims: db.clone(),
        counters: db.clone(),
        ledger: db,
        queue: Arc::new(queue),
        sources: None,
    })
}

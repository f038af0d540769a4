//! The embedded backend: objects as files, tables and queue in one SQLite file — tilegate's
//! default when no server is available, correct across threads *and* processes sharing one
//! data directory.
//!
//! - [`LocalObjectStore`]: an [`ObjectStore`](tilegate_core::object::ObjectStore) over a
//!   directory; create-if-absent by `link(2)`, compare-and-swap under a per-key `flock(2)`.
//! - [`SqliteBackend`]: jobs, manifest, claims and counters in one SQLite file (WAL).
//! - [`SqliteQueue`]: an SQS-shaped work queue in the same file, from [`SqliteBackend::queue`].

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

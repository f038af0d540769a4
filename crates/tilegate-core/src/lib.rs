//! tilegate's identities (job IDs, windows, keys) and storage contracts (objects, tables, queue).
//!
//! Architecture invariant: this crate does no I/O and knows no provider type. Stages depend on
//! the traits here; backends implement them.

pub mod announce;
pub mod arrival;
pub mod backends;
pub mod error;
pub mod etag;
pub mod fuzz;
pub mod grid;
pub mod id;
pub mod keys;
pub mod ledger;
pub mod lifecycle;
pub mod message;
pub mod metrics;
pub mod object;
pub mod product;
pub mod pyramid;
pub mod queue;
pub mod reason;
pub mod recipe;
pub mod redact;
pub mod reference;
pub mod source;
pub mod source_policy;
pub mod stall;
pub mod table;
pub mod time;

pub use backends::Backends;
pub use error::{Retry, StoreError, StoreResult};
pub use etag::{ConditionList, ETag};
pub use grid::{Grid, Window, WindowRect};
pub use id::JobId;
pub use keys::{KeyError, ObjectKey, Prefix, Tenant};
pub use reason::{Exit, Reason};
pub use recipe::{Compression, Recipe};
pub use source::SourceInfo;

/// Milliseconds since the Unix epoch, the time unit of every stored timestamp.
pub type UnixMillis = i64;

/// The current wall-clock time in [`UnixMillis`].
pub fn now_millis() -> UnixMillis {
    let d = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

//! Regeneration of one window as a new attempt: the row first (`uploading`), then the
//! window recomputed from the pinned source, uploaded to the attempt's own immutable key, and
//! — if asked — published by moving the window's pointer. The deterministic tile and the
//! manifest row are never touched; readers switch to the attempt through the pointer.
//!
//! [`start`] writes the row and returns the order a window message carries, so the same
//! attempt can be finished here ([`run`]) or by any worker that receives the message; a
//! redelivery continues the same attempt ([`finish`] is idempotent per attempt ID).

use crate::handle::encode_request;
use bytes::Bytes;
use tilegate_cog::CogError;
use tilegate_core::ledger::{
    AttemptId, AttemptOrder, AttemptRow, PublishOutcome, Retention, Subject,
};
use tilegate_core::table::{JobRecord, Versioned};
use tilegate_core::{Backends, UnixMillis, Window};
use tilegate_ledger::{LedgerError, attempt};
use tilegate_planner::{SourceError, SourceGuard};

/// Why a regeneration could not finish.
#[derive(Debug, thiserror::Error)]
pub enum RegenerateError {
    #[error(transparent)]
    Ledger(#[from] LedgerError),
    #[error(transparent)]
    Source(#[from] SourceError),
    #[error(transparent)]
    Encode(#[from] CogError),
}

impl From<tilegate_core::StoreError> for RegenerateError {
    fn from(e: tilegate_core::StoreError) -> Self {
        Self::Ledger(e.into())
    }
}

impl RegenerateError {
    pub fn reason_code(&self) -> &'static str {
        match self {
            Self::Ledger(e) => e.reason_code(),
            Self::Source(e) => e.reason_code(),
            Self::Encode(e) => e.reason_code(),
        }
    }
}

/// What a regeneration did.
#[derive(Debug, Clone)]
pub struct Regenerated {
    pub row: Versioned<AttemptRow>,
    /// The publish outcome, if publishing was asked for.
    pub published: Option<PublishOutcome>,
}

/// Write the attempt's row (`uploading`) and return the order that finishes it. `id` reuses
/// an attempt (a retry); `None` makes a new one.
pub async fn start(
    b: &Backends,
    job: &JobRecord,
    window: Window,
    id: Option<AttemptId>,
    retention: Retention,
    accept: bool,
    now: UnixMillis,
) -> Result<(Versioned<AttemptRow>, AttemptOrder), RegenerateError> {
    let id = id.unwrap_or_else(attempt::new_id);
    let row = attempt::begin(b, job, Subject::Window(window), id.clone(), retention, now).await?;
    Ok((row, AttemptOrder { id, accept }))
}

/// Recompute the window of `job` (source pinned before and after the read).
pub async fn encode(
    b: &Backends,
    job: &JobRecord,
    window: Window,
) -> Result<Bytes, RegenerateError> {
    let guard = SourceGuard::new();
    tilegate_planner::source::verify(b, &guard, &job.source).await?;
    let req = encode_request(job, window)?;
    let bytes = tokio::task::spawn_blocking(move || tilegate_cog::encode_window(&req))
        .await
        .expect("encoder task panicked")?;
    tilegate_planner::source::verify(b, &guard, &job.source).await?;
    Ok(Bytes::from(bytes))
}

/// Upload `bytes` as the attempt of `order` and publish it if the order says so.
pub async fn finish(
    b: &Backends,
    row: Versioned<AttemptRow>,
    order: &AttemptOrder,
    bytes: Bytes,
    now: UnixMillis,
) -> Result<Regenerated, RegenerateError> {
    let row = attempt::upload(b, row, bytes, now).await?;
    let published = if order.accept {
        match row.row.state {
            // A redelivery of an order that was already published.
            tilegate_core::ledger::AttemptState::Accepted => None,
            _ => Some(
                attempt::accept_current(b, &row.row.job_id, row.row.subject, &order.id, now)
                    .await?,
            ),
        }
    } else {
        None
    };
    Ok(Regenerated { row, published })
}

/// [`start`], [`encode`] and [`finish`] in this process.
pub async fn run(
    b: &Backends,
    job: &JobRecord,
    window: Window,
    id: Option<AttemptId>,
    retention: Retention,
    accept: bool,
    now: impl Fn() -> UnixMillis,
) -> Result<Regenerated, RegenerateError> {
    let (row, order) = start(b, job, window, id, retention, accept, now()).await?;
    let bytes = encode(b, job, window).await?;
    finish(b, row, &order, bytes, now()).await
}

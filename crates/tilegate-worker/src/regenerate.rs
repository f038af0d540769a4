//! Regeneration of one window as a new attempt: the row first (`uploading`), then the
//! window recomputed from the pinned source, uploaded to the attempt's own immutable key, and
//! — if asked — published by moving the window's pointer. The deterministic tile and the
//! manifest row are never touched; readers switch to the attempt through the pointer.
//!
//! [`start`] writes the row and returns the order a window message carries, so the same
//! attempt can be finished here ([`run`]) or by any worker that receives the message; a
//! redelivery continues the same attempt ([`finish`] is idempotent per attempt ID).

use bytes::Bytes;
use tilegate_cog::CogError;
use tilegate_core::Reason;
use tilegate_core::ledger::{
    AttemptId, AttemptOrder, AttemptRow, PublishOutcome, Retention, Subject,
};
use tilegate_core::table::{JobRecord, Versioned};
use tilegate_core::{Backends, UnixMillis, Window};
use tilegate_ledger::{LedgerError, attempt};
use tilegate_source::{SourceError, SourceGuard, SourcePolicy};

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
    pub fn reason_code(&self) -> Reason {
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

impl Regenerated {
    /// Why the accept the order asked for did not move the pointer, if it did not: a stable
    /// name for logs, counters and `--json`.
    pub fn accept_refused(&self) -> Option<&'static str> {
        match self.published.as_ref()? {
            PublishOutcome::Published { .. } | PublishOutcome::AlreadyCurrent { .. } => None,
            PublishOutcome::Outdated { .. } => Some("newer-attempt-published"),
            PublishOutcome::Superseded { .. } => Some("pointer-contended"),
            PublishOutcome::NotPublishable(Some(r)) if r.row.ever_published() => {
                Some("published-before")
            }
            PublishOutcome::NotPublishable(_) => Some("not-publishable"),
        }
    }
}

/// What a regeneration is asked for.
#[derive(Debug, Clone, Default)]
pub struct Request {
    /// Continue this attempt (a retry); `None` makes a new one.
    pub id: Option<AttemptId>,
    pub retention: Retention,
    /// Publish it once uploaded.
    pub accept: bool,
    /// What the job may read (its tenant's source policy).
    pub policy: std::sync::Arc<SourcePolicy>,
}

/// [`start`] the attempt and send its order to the workers' queue: the row, once the order is
/// enqueued.
pub async fn enqueue(
    b: &Backends,
    job: &JobRecord,
    window: Window,
    req: Request,
    now: UnixMillis,
) -> Result<Versioned<AttemptRow>, RegenerateError> {
    let (row, order) = start(b, job, window, req, now).await?;
    let msg = tilegate_core::message::WindowMessage {
        attempt: Some(order),
        ..tilegate_core::message::WindowMessage::for_job(job, window)
    };
    b.queue.send_batch(&[msg.encode()]).await?;
    Ok(row)
}

/// Write the attempt's row (`uploading`, its upload not yet begun: no deadline until a
/// worker takes the order) and return the order that finishes it.
pub async fn start(
    b: &Backends,
    job: &JobRecord,
    window: Window,
    req: Request,
    now: UnixMillis,
) -> Result<(Versioned<AttemptRow>, AttemptOrder), RegenerateError> {
    let id = req.id.unwrap_or_else(attempt::new_id);
    let row = attempt::begin_queued(
        b,
        job,
        Subject::Window(window),
        id.clone(),
        req.retention,
        req.accept,
        now,
    )
    .await?;
    Ok((
        row,
        AttemptOrder {
            id,
            accept: req.accept,
        },
    ))
}

/// Recompute the window of `job` (source pinned before and after the read).
pub async fn encode(
    b: &Backends,
    policy: &std::sync::Arc<SourcePolicy>,
    job: &JobRecord,
    window: Window,
) -> Result<Bytes, RegenerateError> {
    let guard = SourceGuard::new();
    crate::handle::verify_sources(b, policy, &guard, job).await?;
    let encode = crate::handle::blocking_encoder(job, window)?;
    let bytes = tokio::task::spawn_blocking(encode)
        .await
        .expect("encoder task panicked")?;
    crate::handle::verify_sources(b, policy, &guard, job).await?;
    Ok(Bytes::from(bytes))
}

/// Upload `bytes` as the attempt of `order` and publish it if the order says so. The publish
/// is an order's ([`attempt::publish_order`]): a redelivered or re-run order never publishes
/// an attempt again once it was published, nor one older than the newest published — its
/// outcome says so, and [`Regenerated::accept_refused`] names it.
pub async fn finish(
    b: &Backends,
    row: Versioned<AttemptRow>,
    order: &AttemptOrder,
    bytes: Bytes,
    now: UnixMillis,
) -> Result<Regenerated, RegenerateError> {
    let row = attempt::upload(b, row, bytes, now).await?;
    // What the row recorded when the regeneration was asked for decides; the order's copy (a
    // queue message anyone who can send to the queue could forge) only for rows from before.
    let accept = row.row.accept.unwrap_or(order.accept);
    if accept != order.accept {
        tracing::warn!(attempt = %order.id, row_accept = accept, message_accept = order.accept,
            "the order's accept disagrees with its ledger row; the row decides");
    }
    let published = if accept {
        match row.row.state {
            // A redelivery of an order that was already published, and still is.
            tilegate_core::ledger::AttemptState::Accepted => None,
            _ => Some(
                attempt::publish_order(b, &row.row.job_id, row.row.subject, &order.id, now).await?,
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
    req: Request,
    now: impl Fn() -> UnixMillis,
) -> Result<Regenerated, RegenerateError> {
    let policy = std::sync::Arc::clone(&req.policy);
    let (row, order) = start(b, job, window, req, now()).await?;
    let bytes = encode(b, &policy, job, window).await?;
    finish(b, row, &order, bytes, now()).await
}

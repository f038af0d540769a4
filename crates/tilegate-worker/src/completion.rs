//! Noticing that a job is complete, from the window that completes it: after a window's
//! manifest row is recorded (or found recorded, on a redelivery), the worker reads the row
//! counter of that window's manifest partition — one small strongly consistent read, which the
//! row's own create advanced in the same atomic step ([`ManifestTable::put_entry`](tilegate_core::table::ManifestTable::put_entry)) — and only
//! when the partition is full reads every partition's counter (one batch read). When all of
//! the job's rows are there it hands the job to the pool's [`OnComplete`] (the pipeline
//! assembles it) before the window's message is acknowledged.
//!
//! Why no trigger is lost: the reads are linearizable and made after the worker's own row and
//! its count are committed, so of two workers recording the last rows of two partitions at
//! once, the one whose read of every counter comes second sees both. A worker killed anywhere between
//! recording its row and acknowledging its message leaves the message to be delivered again,
//! and its redelivery finds the row present and makes the same check. Duplicate triggers are
//! expected: the claim gate lets one assembler through and the others find the scene held or
//! published.

use crate::handle::Failure;
use crate::pool::Shared;
use std::sync::Arc;
use tilegate_core::Reason;
use tilegate_core::grid::Window;
use tilegate_core::id::JobId;
use tilegate_core::table::{JobRecord, manifest_shard, shard_sizes};

/// What to do with a job whose last window is recorded: assemble it (the pipeline's
/// `AssembleOnComplete`), exactly as `tilegate assemble` would.
#[async_trait::async_trait]
pub trait OnComplete: Send + Sync + std::fmt::Debug {
    /// Called by the worker that noticed, before it acknowledges the window's message: `Ok`
    /// when the scene is published, or being published by another assembler that holds the
    /// claim (and whose own trigger is still unacknowledged); `Err` leaves the message to be
    /// delivered again (retryable) or dead-letters it with the reason (permanent). `delivery`
    /// is the noticing message's receive count (crash tests arm their faults by it).
    async fn job_complete(&self, job: &JobRecord, delivery: u32) -> Result<(), CompletionError>;

    /// Called after a window of `job` is dead-lettered (its `incomplete` announcement is in
    /// the job's outbox by then): deliver it. Failures are the callee's to log; the
    /// announcement stays pending for the next delivery.
    async fn job_incomplete(&self, _job: &JobId) {}
}

/// Why a completed job could not be handed on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CompletionError {
    pub reason: Reason,
    pub retryable: bool,
    pub detail: String,
}

impl From<CompletionError> for Failure {
    fn from(e: CompletionError) -> Self {
        let detail = format!("assembling the completed job: {}", e.detail);
        if e.retryable {
            Failure::retryable(e.reason, detail)
        } else {
            Failure::permanent(e.reason, detail)
        }
    }
}

/// After `window`'s row of `job` is recorded: if the pool assembles on completion and the job
/// is now complete, hand it on. One counter read per window; every partition's counter only
/// when this window's partition is full.
pub(crate) async fn after_record(
    shared: &Shared,
    job: &JobRecord,
    window: Window,
    delivery: u32,
) -> Result<(), Failure> {
    let Some(hook) = &shared.cfg.on_complete else {
        return Ok(());
    };
    let shards = job.manifest_shards.max(1);
    let sizes = shared.shard_sizes(job, || Arc::new(shard_sizes(&job.grid, shards)));
    let shard = manifest_shard(window, shards);
    let recorded = shared.b.manifest.recorded(&job.job_id, shard).await?;
    if recorded < sizes[shard as usize] {
        return Ok(());
    }
    let total: u64 = if shards == 1 {
        recorded
    } else {
        shared
            .b
            .manifest
            .recorded_all(&job.job_id)
            .await?
            .iter()
            .sum()
    };
    if total < job.grid.len() {
        return Ok(());
    }
    tracing::info!(job_id = %job.job_id, "last window recorded: assembling the job");
    hook.job_complete(job, delivery).await?;
    Ok(())
}

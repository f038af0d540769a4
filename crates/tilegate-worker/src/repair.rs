//! Repair (backfill of one window): read the tile's current ETag, recompute, and write with
//! `If-Match` on that ETag — `Written`, or `Superseded` if something rewrote it meanwhile.
//! A newer result is never clobbered.
//!
//! A refused `If-Match` does not by itself prove that somebody else wrote: a write whose answer
//! was lost and whose retry found its own bytes in place is refused too. Each write therefore
//! carries an attempt token in the object's metadata, read back after a refusal.

use bytes::Bytes;
use tilegate_cog::CogError;
use tilegate_core::ObjectKey;
use tilegate_core::Reason;
use tilegate_core::object::{ObjectMeta, PutOptions, PutOutcome, UpdateVersion};
use tilegate_core::table::{JobRecord, ManifestEntry, TileOrigin, UpdateOutcome};
use tilegate_core::{Backends, ETag, JobId, StoreError, Window, now_millis};
use tilegate_source::{SourceError, SourceGuard, SourcePolicy};

/// Why a repair could not run.
#[derive(Debug, thiserror::Error)]
pub enum RepairError {
    #[error("repair: no job {0}")]
    UnknownJob(JobId),
    #[error("repair: window {window} is outside job {job}'s {rows}×{cols} grid")]
    OutsideGrid {
        job: JobId,
        window: Window,
        rows: u32,
        cols: u32,
    },
    #[error("repair: tile `{0}` does not exist (use `backfill --missing` to create missing tiles)")]
    NoTile(String),
    #[error(transparent)]
    Source(#[from] SourceError),
    #[error(transparent)]
    Encode(#[from] CogError),
    #[error("repair: storage")]
    Store(#[from] StoreError),
}

impl RepairError {
    /// A stable kebab-case name (the same names as dead-letter reasons).
    pub fn reason_code(&self) -> Reason {
        match self {
            Self::UnknownJob(_) => Reason::UnknownJob,
            Self::OutsideGrid { .. } => Reason::WindowOutsideScene,
            Self::NoTile(_) => Reason::NoTile,
            Self::Source(e) => e.reason_code(),
            Self::Encode(e) => e.reason_code(),
            Self::Store(e) => Reason::storage(e.is_retryable()),
        }
    }
}

/// A recomputed tile, ready to replace the version it was computed against.
#[derive(Debug, Clone)]
pub struct Prepared {
    pub job: JobRecord,
    pub window: Window,
    pub key: ObjectKey,
    /// The ETag read before recomputing: the write succeeds only if it is still current.
    pub expected: ETag,
    pub bytes: Bytes,
}

/// The result of a repair.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RepairOutcome {
    Written {
        e_tag: ETag,
        size: u64,
    },
    /// The tile changed after its ETag was read; nothing was written.
    Superseded,
}

/// Read the current ETag and recompute the window (its source read as `policy` allows).
pub async fn prepare(
    b: &Backends,
    policy: &std::sync::Arc<SourcePolicy>,
    job_id: &JobId,
    window: Window,
) -> Result<Prepared, RepairError> {
    let job = b
        .jobs
        .get_job(job_id)
        .await?
        .ok_or_else(|| RepairError::UnknownJob(job_id.clone()))?
        .row;
    if !job.grid.contains(window) {
        return Err(RepairError::OutsideGrid {
            job: job.job_id.clone(),
            window,
            rows: job.grid.rows(),
            cols: job.grid.cols(),
        });
    }
    let key = job.prefix.tile_key(&job.job_id, window);
    let current = b
        .objects
        .head(&key)
        .await?
        .ok_or_else(|| RepairError::NoTile(key.to_string()))?;
    let guard = SourceGuard::new();
    crate::handle::verify_sources(b, policy, &guard, &job).await?;
    let encode = crate::handle::blocking_encoder(&job, window)?;
    let bytes = tokio::task::spawn_blocking(encode)
        .await
        .expect("encoder task panicked")?;
    crate::handle::verify_sources(b, policy, &guard, &job).await?;
    Ok(Prepared {
        job,
        window,
        key,
        expected: current.e_tag,
        bytes: Bytes::from(bytes),
    })
}

pub use tilegate_core::object::ATTEMPT_METADATA;

/// Write the recomputed tile with `If-Match` and move the manifest row under its version guard.
pub async fn commit(b: &Backends, p: Prepared) -> Result<RepairOutcome, RepairError> {
    let attempt = uuid::Uuid::new_v4().simple().to_string();
    let opts = PutOptions {
        metadata: [(ATTEMPT_METADATA.to_owned(), attempt.clone())].into(),
        ..PutOptions::update(UpdateVersion::etag(p.expected.clone()))
    };
    let meta = match b.objects.put_opts(&p.key, p.bytes, opts).await? {
        PutOutcome::Written(meta) => meta,
        PutOutcome::Superseded | PutOutcome::AlreadyPresent => {
            match own_write(b, &p.key, &attempt).await? {
                Some(meta) => {
                    tracing::info!(key = %p.key, "repair refused, but the tile in place is this repair's own write (its answer was lost)");
                    meta
                }
                None => {
                    tracing::info!(key = %p.key, outcome = "superseded", "repair refused: tile changed");
                    return Ok(RepairOutcome::Superseded);
                }
            }
        }
    };
    let entry = ManifestEntry {
        job_id: p.job.job_id.clone(),
        window: p.window,
        key: p.key.to_string(),
        size: meta.size,
        e_tag: meta.e_tag.clone(),
        origin: TileOrigin::Repaired,
        recorded_at: now_millis(),
        facts: Default::default(),
    };
    loop {
        match b.manifest.get_entry(&p.job.job_id, p.window).await? {
            None => {
                // The row was never written (crash before it): create it.
                if let tilegate_core::table::CreateOutcome::Created =
                    b.manifest.put_entry(&entry).await?
                {
                    break;
                }
            }
            Some(row) => match b.manifest.update_entry(&entry, row.version).await? {
                UpdateOutcome::Updated { .. } => break,
                UpdateOutcome::Superseded(_) => continue,
            },
        }
    }
    tracing::info!(key = %p.key, outcome = "written", "tile repaired");
    Ok(RepairOutcome::Written {
        e_tag: meta.e_tag,
        size: meta.size,
    })
}

/// The object at `key` if it is the write made with attempt token `attempt`.
async fn own_write(
    b: &Backends,
    key: &ObjectKey,
    attempt: &str,
) -> Result<Option<ObjectMeta>, StoreError> {
    Ok(b.objects
        .head(key)
        .await?
        .filter(|m| m.metadata.get(ATTEMPT_METADATA).map(String::as_str) == Some(attempt)))
}

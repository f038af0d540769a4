//! The assembler: count the job's manifest rows (never list the prefix), check each row against
//! its object, build the scene COG from the tiles' compressed blocks, and publish it exactly once
//! through the claim gate — multipart above a threshold, completed with create-if-absent.
//!
//! Architecture invariant: a claim loser never starts a multipart upload; a holder that finds
//! its lease lost aborts its upload instead of completing it. A scene is recorded (claim done,
//! job row, STAC Item) only if the object the store published has the size that was laid out:
//! a store may keep fewer bytes than it was sent (a GCS session's short `308`), and a
//! create-if-absent key holding the wrong bytes would be permanent, so such an object is
//! deleted by its ETag and the claim released for a retry.
//!
//! [`assemble`] here runs the steps: the manifest count and the claim. `tiles` fetches and
//! checks the tiles, `publish` builds and uploads the scene (`multipart` above the threshold),
//! `record` writes its STAC Item and the job row; `error` holds [`AssembleError`].

mod error;
mod multipart;
pub mod product;
mod publish;
mod pyramid;
mod record;
pub use record::checksum_of;
mod tiles;

pub use error::AssembleError;
pub use pyramid::tilejson;

use publish::{build_and_publish, scene_in_place};
use record::{publish_item, record_scene};
use std::sync::Arc;
use std::time::Duration;
use tilegate_claim::{ClaimGate, ClaimOutcome, LeaseState};
use tilegate_cogwrite::{AssemblyPath, ReducedWindows, Resampling};
use tilegate_core::ObjectKey;
use tilegate_core::metrics::{self as m, Counters};
use tilegate_core::object::PutOptions;
use tilegate_core::{Backends, ETag, JobId, UnixMillis};

/// Default size above which the scene goes up as a multipart upload.
pub const DEFAULT_MULTIPART_THRESHOLD: u64 = 64 * 1024 * 1024;
/// Default size of each part of a multipart scene upload.
pub const DEFAULT_PART_SIZE: u64 = 16 * 1024 * 1024;
/// Hard ceiling of a single PUT (S3's limit).
pub const SINGLE_PUT_CEILING: u64 = 5 * 1024 * 1024 * 1024;

/// How to assemble.
#[derive(Debug, Clone)]
pub struct AssembleOptions {
    /// Claim owner: unique per process and attempt ([`tilegate_claim::unique_owner`]).
    pub owner: String,
    pub lease_ttl: Duration,
    pub multipart_threshold: u64,
    pub part_size: u64,
    pub resampling: Resampling,
    /// Test hook: stop renewing the lease after this many parts, and wait `part_delay`
    /// between parts, so that the lease lapses mid-upload.
    pub pause_renewals_after_parts: Option<u32>,
    pub part_delay: Duration,
    /// First-overview-level reductions the encoders of this process left behind (`run`); used
    /// only for tiles whose ETag is the one each was made for.
    pub reduced: Option<Arc<ReducedWindows>>,
    /// Build the scene as a regeneration attempt: at this key, with this attempt token in its
    /// metadata, claimed under the attempt key, and not recorded on the job row (the attempt's
    /// ledger row records it). `None`: the job's deterministic scene.
    pub attempt: Option<SceneAttempt>,
    /// The receive count of the message whose completion triggered this assembly (1 for a
    /// command): crash tests arm `after-publish` by it (see `tilegate-fault`).
    pub delivery: u32,
    /// The caller's stop signal (`true`: stop): the build is abandoned, an upload aborted
    /// between parts, the claim released, and the assembly ends as
    /// [`AssembleError::Interrupted`]. A single PUT already sent is let finish.
    pub stop: Option<tokio::sync::watch::Receiver<bool>>,
}

/// Where a regenerated scene goes.
#[derive(Debug, Clone)]
pub struct SceneAttempt {
    pub key: String,
    pub token: String,
}

impl AssembleOptions {
    /// The write options of the scene object: create-if-absent, with the attempt token if any.
    pub(crate) fn put_options(&self) -> PutOptions {
        match &self.attempt {
            Some(a) => PutOptions {
                metadata: [(
                    tilegate_core::object::ATTEMPT_METADATA.to_owned(),
                    a.token.clone(),
                )]
                .into(),
                ..PutOptions::create()
            },
            None => PutOptions::create(),
        }
    }
}

impl AssembleOptions {
    pub fn new(owner: String) -> Self {
        Self {
            owner,
            lease_ttl: Duration::from_secs(60),
            multipart_threshold: DEFAULT_MULTIPART_THRESHOLD,
            part_size: 16 * 1024 * 1024,
            resampling: Resampling::Average,
            pause_renewals_after_parts: None,
            part_delay: Duration::ZERO,
            attempt: None,
            reduced: None,
            delivery: 1,
            stop: None,
        }
    }

    /// `Interrupted` if the caller has asked this assembly to stop.
    pub(crate) fn ensure_running(&self, job: &JobId) -> Result<(), AssembleError> {
        if self.stop.as_ref().is_some_and(|s| *s.borrow()) {
            return Err(AssembleError::Interrupted { job: job.clone() });
        }
        Ok(())
    }

    /// `work` unless the caller asks to stop first; then `Interrupted`.
    pub(crate) async fn until_stopped<T>(
        &self,
        job: &JobId,
        work: impl Future<Output = Result<T, AssembleError>>,
    ) -> Result<T, AssembleError> {
        let Some(mut stop) = self.stop.clone() else {
            return work.await;
        };
        tokio::select! {
            done = work => done,
            () = asked_to_stop(&mut stop) => Err(AssembleError::Interrupted { job: job.clone() }),
        }
    }
}

/// Resolves once `stop` says stop; never if its sender is gone without saying it (a dropped
/// sender is nobody asking, not a stop).
pub async fn asked_to_stop(stop: &mut tokio::sync::watch::Receiver<bool>) {
    if stop.wait_for(|s| *s).await.is_err() {
        std::future::pending::<()>().await;
    }
}

/// What became of the scene.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AssembleOutcome {
    /// This assembler published the scene.
    Written,
    /// Another assembler holds the lease; nothing was uploaded.
    HeldBy {
        owner: String,
        expires_at: UnixMillis,
    },
    /// The scene was already published.
    AlreadyDone,
    /// The lease lapsed and was taken over mid-upload; the upload was aborted.
    LeaseLost,
    /// This assembler won the claim and found the scene already published (by a holder that
    /// died before marking the claim done); it recorded it without uploading.
    AlreadyPresent,
}

impl AssembleOutcome {
    pub fn as_str(&self) -> &'static str {
        match self {
            Self::Written => "written",
            Self::HeldBy { .. } => "held_by",
            Self::AlreadyDone => "already_done",
            Self::LeaseLost => "lease_lost",
            Self::AlreadyPresent => "already_present",
        }
    }
}

/// A finished assembly attempt.
#[derive(Debug, Clone)]
pub struct AssembleReport {
    pub job_id: JobId,
    pub outcome: AssembleOutcome,
    pub scene_key: String,
    pub scene_etag: Option<ETag>,
    pub scene_size: Option<u64>,
    pub path: Option<AssemblyPath>,
    pub multipart: bool,
    pub multipart_bytes_uploaded: u64,
    pub build_s: f64,
    pub upload_s: f64,
    /// Windows whose first overview level came from their encoder, not from decoding the tile.
    pub reduced_windows_reused: u64,
}

/// Assemble a job's scene COG and publish it once.
pub async fn assemble(
    b: &Backends,
    job_id: &JobId,
    opts: &AssembleOptions,
    counters: &Counters,
) -> Result<AssembleReport, AssembleError> {
    let job = b
        .jobs
        .get_job(job_id)
        .await?
        .ok_or_else(|| AssembleError::UnknownJob(job_id.clone()))?
        .row;
    let scene_key = match &opts.attempt {
        Some(a) => ObjectKey::checked(&a.key)?,
        None => job.output_key(),
    };
    let record = opts.attempt.is_none();
    let mut report = AssembleReport {
        job_id: job.job_id.clone(),
        outcome: AssembleOutcome::AlreadyDone,
        scene_key: scene_key.to_string(),
        scene_etag: job.scene_output.as_ref().map(|o| o.e_tag.clone()),
        scene_size: job.scene_output.as_ref().map(|o| o.size),
        path: None,
        multipart: false,
        multipart_bytes_uploaded: 0,
        build_s: 0.0,
        upload_s: 0.0,
        reduced_windows_reused: 0,
    };
    if let (Some(scene), true) = (&job.scene_output, record) {
        // A job assembled before scenes had Items gets its Item now (one HEAD otherwise).
        publish_item(b, &job, scene, None).await?;
        product::point(b, &job, scene).await?;
        return Ok(report);
    }
    if !record {
        report.scene_etag = None;
        report.scene_size = None;
    }

    // Count rows, never objects: a stray object under the tiles prefix must not count.
    let want = job.grid.len();
    let have = b.manifest.count_entries(&job.job_id).await?;
    if have < want {
        let entries = b.manifest.list_entries(&job.job_id).await?;
        let done: std::collections::HashSet<_> = entries.iter().map(|e| e.row.window).collect();
        let missing = job.grid.windows().filter(|w| !done.contains(w)).collect();
        return Err(AssembleError::Incomplete {
            job: job.job_id.clone(),
            have,
            want,
            missing,
        });
    }

    let gate = ClaimGate::new(b.claims.clone());
    let mut lease = match gate
        .try_claim(&scene_key, &opts.owner, opts.lease_ttl)
        .await?
    {
        ClaimOutcome::Claimed(lease) => {
            counters.inc(m::CLAIMS_WON);
            tilegate_fault::point("after-claim", opts.delivery);
            lease
        }
        ClaimOutcome::HeldBy { owner, expires_at } => {
            counters.inc(m::CLAIMS_LOST);
            report.outcome = AssembleOutcome::HeldBy { owner, expires_at };
            return Ok(report);
        }
        ClaimOutcome::AlreadyDone { output } => {
            counters.inc(m::CLAIMS_LOST);
            // The claim is done but the job row may not say so: the assembler that completed
            // it can have died (or failed to write the row) between the two. Finish its work.
            let output = match output {
                Some(o) => Some(o),
                None => scene_in_place(b, &scene_key).await?,
            };
            if let Some(o) = &output
                && record
            {
                record_scene(b, &job, o.clone(), None).await?;
            }
            report.scene_etag = output.as_ref().map(|o| o.e_tag.clone());
            report.scene_size = output.as_ref().map(|o| o.size);
            return Ok(report);
        }
    };
    // A scene already in place (an upload that completed before its holder could mark the
    // claim done) is the same deterministic scene: publish it instead of building and
    // uploading it all again only to be refused as present.
    if let Some(output) = scene_in_place(b, &scene_key).await? {
        tracing::info!(job_id = %job.job_id, key = %scene_key, "scene already in place; recording it");
        if gate.complete(&lease, output.clone()).await? == LeaseState::Lost {
            tracing::warn!(job_id = %job.job_id, "lease lost before completion was recorded");
        }
        if record {
            record_scene(b, &job, output.clone(), None).await?;
        }
        report.outcome = AssembleOutcome::AlreadyPresent;
        report.scene_etag = Some(output.e_tag);
        report.scene_size = Some(output.size);
        return Ok(report);
    }
    let keep_alive = gate.keep_alive(&lease);
    let result = build_and_publish(
        b,
        &job,
        &gate,
        &mut lease,
        &keep_alive,
        opts,
        counters,
        &mut report,
    )
    .await;
    keep_alive.stop();
    if let Err(e) = &result {
        // Let another assembler try at once rather than after the lease lapses.
        // The caller reports the error itself; this only records the release.
        tracing::info!(job_id = %job.job_id, error = %e, "assembly failed; releasing the claim");
        let _ = gate.release(&lease).await;
    }
    result.map(|()| report)
}

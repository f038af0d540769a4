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

use bytes::Bytes;
use futures::{StreamExt, TryStreamExt};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tilegate_claim::{ClaimGate, ClaimOutcome, KeepAlive, Lease, LeaseState};
use tilegate_cogwrite::{AssemblyPath, LaidOut, ReducedWindows, Resampling, SceneSpec, TileInput};
use tilegate_core::ledger::Subject;
use tilegate_core::metrics::{self as m, Counters};
use tilegate_core::object::{
    CompletionMismatch, Differs, ObjectStoreExt, PartId, PutMode, PutOptions, PutOutcome,
    withdraw_completed,
};
use tilegate_core::table::{JobRecord, OutputRef, UpdateOutcome};
use tilegate_core::{Backends, ETag, JobId, StoreError, UnixMillis, Window};

/// Default size above which the scene goes up as a multipart upload.
pub const DEFAULT_MULTIPART_THRESHOLD: u64 = 64 * 1024 * 1024;
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
}

/// Where a regenerated scene goes.
#[derive(Debug, Clone)]
pub struct SceneAttempt {
    pub key: String,
    pub token: String,
}

impl AssembleOptions {
    /// The write options of the scene object: create-if-absent, with the attempt token if any.
    fn put_options(&self) -> PutOptions {
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
        }
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

/// Why assembly was refused or failed.
#[derive(Debug, thiserror::Error)]
pub enum AssembleError {
    #[error("assemble job {0}: no such job")]
    UnknownJob(JobId),
    #[error("assemble job {job}: {have} of {want} windows are in the manifest; missing {}", shown(.missing))]
    Incomplete {
        job: JobId,
        have: u64,
        want: u64,
        missing: Vec<Window>,
    },
    #[error(
        "assemble job {job}: tile `{key}` of window {window} is {found} bytes, its manifest row says {recorded}"
    )]
    SizeMismatch {
        job: JobId,
        window: Window,
        key: String,
        recorded: u64,
        found: u64,
    },
    #[error(
        "assemble job {job}: tile `{key}` of window {window} has ETag {found}, its manifest row says {recorded}"
    )]
    ETagMismatch {
        job: JobId,
        window: Window,
        key: String,
        recorded: ETag,
        found: ETag,
    },
    #[error("assemble job {job}: build the scene COG")]
    Build {
        job: JobId,
        #[source]
        source: tilegate_cogwrite::AssembleError,
    },
    /// The object published at the scene key is not the scene laid out (the store kept other
    /// bytes than it was sent, or its own completion check refused them). Nothing was
    /// recorded and the claim was released; the object was deleted by its ETag unless
    /// `mismatch.withdrawn` says otherwise. Retryable when it was: assembling again publishes
    /// the scene afresh.
    #[error("assemble job {job}: publish the scene `{key}` as the {laid_out} bytes laid out")]
    PublishedMismatch {
        job: JobId,
        key: String,
        laid_out: u64,
        #[source]
        mismatch: CompletionMismatch,
    },
    #[error("assemble: storage")]
    Store(#[from] StoreError),
}

fn shown(missing: &[Window]) -> String {
    let mut s: Vec<String> = missing.iter().take(20).map(Window::to_string).collect();
    if missing.len() > 20 {
        s.push(format!("… ({} in all)", missing.len()));
    }
    s.join(" ")
}

impl AssembleError {
    /// A short name of the failure, for scripts.
    pub fn reason_code(&self) -> &'static str {
        match self {
            Self::UnknownJob(_) => "unknown-job",
            Self::Incomplete { .. } => "incomplete",
            Self::SizeMismatch { .. } => "manifest-size-mismatch",
            Self::ETagMismatch { .. } => "manifest-etag-mismatch",
            Self::Build { source, .. } => source.reason_code(),
            Self::PublishedMismatch { .. } => "published-scene-mismatch",
            Self::Store(_) => "storage",
        }
    }

    /// Whether assembling again may succeed: a storage fault classified so, or a wrong scene
    /// that was withdrawn from its key.
    pub fn is_retryable(&self) -> bool {
        match self {
            Self::Store(e) => e.is_retryable(),
            Self::PublishedMismatch { mismatch, .. } => mismatch.withdrawn,
            Self::UnknownJob(_)
            | Self::Incomplete { .. }
            | Self::SizeMismatch { .. }
            | Self::ETagMismatch { .. }
            | Self::Build { .. } => false,
        }
    }
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
        Some(a) => a.key.clone(),
        None => job.prefix.scene_key(&job.job_id),
    };
    let record = opts.attempt.is_none();
    let mut report = AssembleReport {
        job_id: job.job_id.clone(),
        outcome: AssembleOutcome::AlreadyDone,
        scene_key: scene_key.clone(),
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

#[expect(
    clippy::too_many_arguments,
    reason = "one call site; the pieces are distinct"
)]
async fn build_and_publish(
    b: &Backends,
    job: &JobRecord,
    gate: &ClaimGate,
    lease: &mut Lease,
    keep_alive: &KeepAlive,
    opts: &AssembleOptions,
    counters: &Counters,
    report: &mut AssembleReport,
) -> Result<(), AssembleError> {
    let started = Instant::now();
    let (tiles, e_tags) = fetch_tiles(b, job).await?;
    let reduced = opts.reduced.clone();
    if let Some(r) = &reduced {
        r.retain_matching(tiles.iter().map(|t| t.window).zip(&e_tags));
    }
    let spec = SceneSpec {
        grid: job.grid,
        scene: job.scene.clone(),
        resampling: opts.resampling,
        force_bigtiff: false,
    };
    let job_id = job.job_id.clone();
    let cog = tokio::task::spawn_blocking(move || {
        tilegate_cogwrite::assemble_reusing(&spec, tiles, reduced.as_deref())
    })
    .await
    .expect("assembly task panicked")
    .map_err(|source| AssembleError::Build {
        job: job_id,
        source,
    })?;
    report.build_s = started.elapsed().as_secs_f64();
    report.path = Some(cog.path);
    report.reduced_windows_reused = cog.reduced_windows_reused;
    let size = cog.file.len();
    let key = report.scene_key.clone();

    let uploaded = Instant::now();
    // A store's own completion check refusing what it published is the same fault as the
    // check below finding it: the scene is not recorded, and assembling again may publish it.
    let mismatched = |e: AssembleError| match e {
        AssembleError::Store(s) => match CompletionMismatch::of(&s) {
            Some(m) => AssembleError::PublishedMismatch {
                job: job.job_id.clone(),
                key: key.clone(),
                laid_out: size,
                mismatch: m.clone(),
            },
            None => AssembleError::Store(s),
        },
        other => other,
    };
    // The scene's checksum (for its STAC Item), hashed from the bytes as they are sent.
    let mut hasher = blake3::Hasher::new();
    let outcome = if size <= opts.multipart_threshold.min(SINGLE_PUT_CEILING) {
        if gate.renew(lease).await? == LeaseState::Lost {
            report.outcome = AssembleOutcome::LeaseLost;
            return Ok(());
        }
        let bytes = cog.file.to_vec();
        hasher.update(&bytes);
        b.objects
            .put_opts(&key, Bytes::from(bytes), opts.put_options())
            .await?
    } else {
        report.multipart = true;
        match multipart(
            b,
            &key,
            &cog.file,
            gate,
            lease,
            keep_alive,
            opts,
            counters,
            report,
            &mut hasher,
        )
        .await
        .map_err(mismatched)?
        {
            Some(outcome) => outcome,
            None => {
                report.outcome = AssembleOutcome::LeaseLost;
                return Ok(());
            }
        }
    };
    report.upload_s = uploaded.elapsed().as_secs_f64();
    let meta = match outcome {
        // What the store published must be what was laid out before anything records it: the
        // claim done, the job row and the STAC Item would make a wrong scene permanent.
        PutOutcome::Written(meta) if meta.size != size => {
            let differs = Differs::Size {
                meant: size,
                found: meta.size,
            };
            let e = withdraw_completed(&*b.objects, &key, &meta, differs).await;
            let err = mismatched(AssembleError::Store(e));
            tracing::warn!(job_id = %job.job_id, key = %key, laid_out = size, published = meta.size,
                e_tag = %meta.e_tag, error = %tilegate_core::error::chain(&err),
                "published scene is not the one laid out; not recorded");
            return Err(err);
        }
        PutOutcome::Written(meta) => meta,
        // A lapsed holder's upload landed first; its bytes are the same deterministic scene.
        PutOutcome::AlreadyPresent | PutOutcome::Superseded => {
            b.objects.head(&key).await?.ok_or_else(|| {
                StoreError::backend(
                    "publish scene",
                    &key,
                    tilegate_core::Retry::Retryable,
                    "refused as present but not found",
                )
            })?
        }
    };
    let output = OutputRef {
        key: key.clone(),
        e_tag: meta.e_tag.clone(),
        size: meta.size,
    };
    if gate.complete(lease, output.clone()).await? == LeaseState::Lost {
        tracing::warn!(job_id = %job.job_id, "lease lost before completion was recorded");
    }
    if opts.attempt.is_none() {
        let checksum = tilegate_stac::blake3_multihash(hasher.finalize().as_bytes());
        record_scene(b, job, output, Some(checksum)).await?;
    }
    report.outcome = AssembleOutcome::Written;
    report.scene_etag = Some(meta.e_tag);
    report.scene_size = Some(meta.size);
    tracing::info!(job_id = %job.job_id, key = %key, size = meta.size, "scene published");
    Ok(())
}

/// The scene object at `key`, if one is there.
async fn scene_in_place(b: &Backends, key: &str) -> Result<Option<OutputRef>, AssembleError> {
    Ok(b.objects.head(key).await?.map(|meta| OutputRef {
        key: key.to_owned(),
        e_tag: meta.e_tag,
        size: meta.size,
    }))
}

/// Read every window's tile — the accepted attempt where the window's pointer names one,
/// else the tile its manifest row names — checking size and ETag against that row; the tiles
/// with their ETags, in the same order.
async fn fetch_tiles(
    b: &Backends,
    job: &JobRecord,
) -> Result<(Vec<TileInput>, Vec<ETag>), AssembleError> {
    let mut accepted: std::collections::HashMap<Window, OutputRef> = b
        .ledger
        .list_pointers(&job.job_id)
        .await?
        .into_iter()
        .filter_map(|p| match p.row.subject {
            Subject::Window(w) => Some((w, p.row.output)),
            Subject::Scene => None,
        })
        .collect();
    let wanted: Vec<(Window, OutputRef)> = b
        .manifest
        .list_entries(&job.job_id)
        .await?
        .into_iter()
        .map(|e| {
            let w = e.row.window;
            let out = accepted.remove(&w).unwrap_or(OutputRef {
                key: e.row.key,
                e_tag: e.row.e_tag,
                size: e.row.size,
            });
            (w, out)
        })
        .collect();
    futures::stream::iter(wanted)
        .map(|(window, want)| async move {
            let got = b.objects.get_bytes(&want.key).await?;
            if got.meta.size != want.size {
                return Err(AssembleError::SizeMismatch {
                    job: job.job_id.clone(),
                    window,
                    key: want.key.clone(),
                    recorded: want.size,
                    found: got.meta.size,
                });
            }
            if got.meta.e_tag != want.e_tag {
                return Err(AssembleError::ETagMismatch {
                    job: job.job_id.clone(),
                    window,
                    key: want.key.clone(),
                    recorded: want.e_tag.clone(),
                    found: got.meta.e_tag,
                });
            }
            Ok((
                TileInput {
                    window,
                    bytes: got.bytes,
                },
                got.meta.e_tag,
            ))
        })
        .buffer_unordered(16)
        .try_collect::<Vec<_>>()
        .await
        .map(|v| v.into_iter().unzip())
}

/// Upload in parts while the lease holds; `None` if it was lost (the upload is aborted). Each
/// part is cut from the laid-out file as it is sent (and fed to `hasher`): the whole scene
/// never sits in memory.
#[expect(
    clippy::too_many_arguments,
    reason = "one call site; the pieces are distinct"
)]
async fn multipart(
    b: &Backends,
    key: &str,
    file: &LaidOut,
    gate: &ClaimGate,
    lease: &mut Lease,
    keep_alive: &KeepAlive,
    opts: &AssembleOptions,
    counters: &Counters,
    report: &mut AssembleReport,
    hasher: &mut blake3::Hasher,
) -> Result<Option<PutOutcome>, AssembleError> {
    let upload_id = b.objects.create_multipart(key, &opts.put_options()).await?;
    // A failed part upload, renewal or completion aborts the upload at once rather than
    // leaving its parts to `cleanup-uploads` (the store refused nothing: a retry starts afresh).
    let sent = async {
        let part_size = opts.part_size.max(5 * 1024 * 1024);
        let mut parts: Vec<PartId> = Vec::new();
        let mut offset = 0u64;
        let mut n = 0u32;
        while offset < file.len() {
            if keep_alive.is_lost() {
                return abort(b, key, &upload_id).await;
            }
            let end = (offset + part_size).min(file.len());
            n += 1;
            let bytes = file.read(offset, (end - offset) as usize);
            hasher.update(&bytes);
            let part = b
                .objects
                .upload_part(key, &upload_id, n, Bytes::from(bytes))
                .await?;
            let len = end - offset;
            counters.add(m::MULTIPART_BYTES_UPLOADED, len);
            report.multipart_bytes_uploaded += len;
            parts.push(part);
            offset = end;
            if opts.pause_renewals_after_parts == Some(n) {
                keep_alive.pause();
            }
            if !opts.part_delay.is_zero() {
                tokio::time::sleep(opts.part_delay).await;
            }
        }
        // The last word before completing: a guarded renewal proves the lease is still ours.
        if gate.renew(lease).await? == LeaseState::Lost {
            return abort(b, key, &upload_id).await;
        }
        Ok(Some(
            b.objects
                .complete_multipart(key, &upload_id, &parts, &PutMode::Create)
                .await?,
        ))
    }
    .await;
    if sent.is_err() {
        match b.objects.abort_multipart(key, &upload_id).await {
            Ok(()) => {}
            // A completion that published and then refused its object spent the upload.
            Err(StoreError::NotFound { .. }) => {}
            Err(e) => {
                tracing::warn!(key, upload_id, error = %tilegate_core::error::chain(&e),
                    "could not abort a failed multipart upload; cleanup-uploads will");
            }
        }
    }
    sent
}

async fn abort(
    b: &Backends,
    key: &str,
    upload_id: &str,
) -> Result<Option<PutOutcome>, AssembleError> {
    tracing::warn!(
        key,
        upload_id,
        "lease lost mid-upload; aborting the multipart upload"
    );
    b.objects.abort_multipart(key, upload_id).await?;
    Ok(None)
}

/// Publish the scene's STAC Item beside it, with create-if-absent: the Item is a pure
/// function of the job row and the scene's bytes, so whoever writes it writes the same bytes
/// and a refusal is the mechanism succeeding. `checksum` is the scene's multihash when the
/// caller has its bytes; otherwise the scene is read back to hash it (only when no Item is in
/// place yet: an assembler that died between the scene and its Item).
async fn publish_item(
    b: &Backends,
    job: &JobRecord,
    scene: &OutputRef,
    checksum: Option<String>,
) -> Result<(), AssembleError> {
    let key = tilegate_stac::item_key(&scene.key);
    let checksum = match checksum {
        Some(c) => c,
        None => {
            if b.objects.head(&key).await?.is_some() {
                return Ok(());
            }
            // In ranges, pinned to the version recorded: never the whole scene in memory.
            const CHUNK: u64 = 16 << 20;
            let mut h = blake3::Hasher::new();
            let mut at = 0;
            while at < scene.size {
                let range = at..(at + CHUNK).min(scene.size);
                let opts = tilegate_core::object::GetOptions {
                    range: Some(range.clone()),
                    if_match: Some(tilegate_core::ConditionList::one(scene.e_tag.clone())),
                    ..Default::default()
                };
                let part = match b.objects.get_opts(&scene.key, opts).await? {
                    tilegate_core::object::GetOutcome::Found(r) => r.bytes,
                    _ => {
                        return Err(StoreError::backend(
                            "hash the scene for its STAC Item",
                            &scene.key,
                            tilegate_core::Retry::Permanent,
                            "the scene is no longer the version recorded",
                        )
                        .into());
                    }
                };
                h.update(&part);
                at = range.end;
            }
            tilegate_stac::blake3_multihash(h.finalize().as_bytes())
        }
    };
    let item = tilegate_stac::item(job, scene, &checksum);
    let outcome = b
        .objects
        .put_create(&key, Bytes::from(tilegate_stac::to_bytes(&item)))
        .await?;
    let outcome = match outcome {
        PutOutcome::Written(_) => "written",
        PutOutcome::AlreadyPresent | PutOutcome::Superseded => "already-present",
    };
    tracing::info!(job_id = %job.job_id, key = %key, outcome, "STAC item");
    Ok(())
}

/// Publish the scene's Item, then record the scene on the job row under the row's version
/// guard (re-read on a race): a row that names its scene implies the Item is in place.
async fn record_scene(
    b: &Backends,
    job_row: &JobRecord,
    output: OutputRef,
    checksum: Option<String>,
) -> Result<(), AssembleError> {
    publish_item(b, job_row, &output, checksum).await?;
    let job = &job_row.job_id;
    for _ in 0..16 {
        let Some(row) = b.jobs.get_job(job).await? else {
            return Err(AssembleError::UnknownJob(job.clone()));
        };
        if row.row.scene_output.is_some() {
            return Ok(());
        }
        let mut next = row.row.clone();
        next.scene_output = Some(output.clone());
        match b.jobs.update_job(&next, row.version).await? {
            UpdateOutcome::Updated { .. } => return Ok(()),
            UpdateOutcome::Superseded(_) => continue,
        }
    }
    Err(StoreError::backend(
        "record scene output",
        job.as_str(),
        tilegate_core::Retry::Retryable,
        "job row kept changing",
    )
    .into())
}

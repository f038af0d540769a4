//! Building the scene COG and publishing it under the lease: one create-if-absent PUT or a
//! multipart upload, then a check that the store kept the bytes laid out before anything
//! records the scene.

use crate::multipart::multipart;
use crate::record::record_scene;
use crate::tiles::fetch_tiles;
use crate::{AssembleError, AssembleOptions, AssembleOutcome, AssembleReport, SINGLE_PUT_CEILING};
use bytes::Bytes;
use std::time::Instant;
use tilegate_claim::{ClaimGate, KeepAlive, Lease, LeaseState};
use tilegate_cogwrite::SceneSpec;
use tilegate_core::ObjectKey;
use tilegate_core::metrics::Counters;
use tilegate_core::object::{CompletionMismatch, Differs, PutOutcome, withdraw_completed};
use tilegate_core::table::{JobRecord, OutputRef};
use tilegate_core::{Backends, StoreError};

#[expect(
    clippy::too_many_arguments,
    reason = "one call site; the pieces are distinct"
)]
pub(crate) async fn build_and_publish(
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
    // The build reads tiles and lays the scene out: nothing is uploaded yet, so a stop
    // abandons it at once (the blocking layout finishes in the background, unused).
    if let tilegate_core::recipe::Operation::Pyramid(spec) = &job.recipe.operation {
        // A pyramid's "scene" is its archive: the zooms above the windows made from their
        // stored tiles, then every tile in one PMTiles file.
        let file = opts
            .until_stopped(&job.job_id, async {
                let tiles = crate::pyramid::build_tree(b, job, spec, counters).await?;
                if !spec.layout.pmtiles() {
                    // `z/x/y` objects alone: the TileJSON document is what is published.
                    return crate::pyramid::tilejson_bytes(job, spec);
                }
                crate::pyramid::publish_tilejson(b, job, spec).await?;
                crate::pyramid::archive(b, job, spec, tiles).await
            })
            .await?;
        report.build_s = started.elapsed().as_secs_f64();
        let file = tilegate_cogwrite::LaidOut::whole(file, false);
        return upload(
            b, job, gate, lease, keep_alive, opts, counters, report, &file,
        )
        .await;
    }
    let cog = opts
        .until_stopped(&job.job_id, async {
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
            tokio::task::spawn_blocking(move || {
                tilegate_cogwrite::assemble_reusing(&spec, tiles, reduced.as_deref())
            })
            .await
            .expect("assembly task panicked")
            .map_err(|source| AssembleError::Build {
                job: job_id,
                source,
            })
        })
        .await?;
    report.build_s = started.elapsed().as_secs_f64();
    report.path = Some(cog.path);
    report.reduced_windows_reused = cog.reduced_windows_reused;
    upload(
        b, job, gate, lease, keep_alive, opts, counters, report, &cog.file,
    )
    .await
}

/// Publish the laid-out file at the report's key under the lease: one create-if-absent PUT or a
/// multipart upload, checked against the size laid out before anything records it.
#[expect(
    clippy::too_many_arguments,
    reason = "two call sites; the pieces are distinct"
)]
async fn upload(
    b: &Backends,
    job: &JobRecord,
    gate: &ClaimGate,
    lease: &mut Lease,
    keep_alive: &KeepAlive,
    opts: &AssembleOptions,
    counters: &Counters,
    report: &mut AssembleReport,
    file: &tilegate_cogwrite::LaidOut,
) -> Result<(), AssembleError> {
    let size = file.len();
    let key = ObjectKey::checked(&report.scene_key)?;

    let uploaded = Instant::now();
    // A store's own completion check refusing what it published is the same fault as the
    // check below finding it: the scene is not recorded, and assembling again may publish it.
    let mismatched = |e: AssembleError| match e {
        AssembleError::Store(s) => match CompletionMismatch::of(&s) {
            Some(m) => AssembleError::PublishedMismatch {
                job: job.job_id.clone(),
                key: key.to_string(),
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
        let bytes = file.to_vec();
        hasher.update(&bytes);
        b.objects
            .put_opts(&key, Bytes::from(bytes), opts.put_options())
            .await?
    } else {
        report.multipart = true;
        match multipart(
            b,
            &key,
            file,
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
        key: key.to_string(),
        e_tag: meta.e_tag.clone(),
        size: meta.size,
    };
    if gate.complete(lease, output.clone()).await? == LeaseState::Lost {
        tracing::warn!(job_id = %job.job_id, "lease lost before completion was recorded");
    }
    if opts.attempt.is_none() {
        let checksum = tilegate_stac::blake3_multihash(hasher.finalize().as_bytes());
        tilegate_fault::point("after-publish", opts.delivery);
        record_scene(b, job, output, Some(checksum)).await?;
    }
    report.outcome = AssembleOutcome::Written;
    report.scene_etag = Some(meta.e_tag);
    report.scene_size = Some(meta.size);
    tracing::info!(job_id = %job.job_id, key = %key, size = meta.size, "scene published");
    Ok(())
}

/// The scene object at `key`, if one is there.
pub(crate) async fn scene_in_place(
    b: &Backends,
    key: &ObjectKey,
) -> Result<Option<OutputRef>, AssembleError> {
    Ok(b.objects.head(key).await?.map(|meta| OutputRef {
        key: key.to_string(),
        e_tag: meta.e_tag,
        size: meta.size,
    }))
}

//! Recording a published scene: its STAC Item beside it (create-if-absent), then the scene on
//! the job row under the row's version guard.

use crate::AssembleError;
use bytes::Bytes;
use tilegate_core::ObjectKey;
use tilegate_core::announce::Announcement;
use tilegate_core::object::{ObjectStoreExt, PutOutcome};
use tilegate_core::table::{JobRecord, OutputRef, UpdateOutcome};
use tilegate_core::{Backends, StoreError};

/// Publish the scene's STAC Item beside it, with create-if-absent: the Item is a pure
/// function of the job row and the scene's bytes, so whoever writes it writes the same bytes
/// and a refusal is the mechanism succeeding. `checksum` is the scene's multihash when the
/// caller has its bytes; otherwise the scene is read back to hash it (only when no Item is in
/// place yet: an assembler that died between the scene and its Item).
pub(crate) async fn publish_item(
    b: &Backends,
    job: &JobRecord,
    scene: &OutputRef,
    checksum: Option<String>,
) -> Result<(), AssembleError> {
    let key = tilegate_stac::item_key(&scene.key)?;
    let checksum = match checksum {
        Some(c) => c,
        None => {
            if b.objects.head(&key).await?.is_some() {
                return Ok(());
            }
            checksum_of(b, scene).await?
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

/// The `file:checksum` of a published scene (BLAKE3 multihash), read in ranges pinned to the
/// version recorded: never the whole scene in memory.
pub async fn checksum_of(b: &Backends, scene: &OutputRef) -> Result<String, AssembleError> {
    let mut h = blake3::Hasher::new();
    let same = b
        .objects
        .read_version_in_chunks(
            &ObjectKey::checked(&scene.key)?,
            (scene.size, &scene.e_tag),
            16 << 20,
            &mut |part| {
                h.update(part);
                Ok(())
            },
        )
        .await?;
    if !same {
        return Err(StoreError::backend(
            "hash the scene for its STAC Item",
            &scene.key,
            tilegate_core::Retry::Permanent,
            "the scene is no longer the version recorded",
        )
        .into());
    }
    Ok(tilegate_stac::blake3_multihash(h.finalize().as_bytes()))
}

/// Publish the scene's Item, then record the scene on the job row under the row's version
/// guard (re-read on a race): a row that names its scene implies the Item is in place. The
/// same write puts the scene's announcement in the row's outbox ([`tilegate_core::announce`]),
/// so a published scene is never left unannounced.
pub(crate) async fn record_scene(
    b: &Backends,
    job_row: &JobRecord,
    output: OutputRef,
    checksum: Option<String>,
) -> Result<(), AssembleError> {
    publish_item(b, job_row, &output, checksum).await?;
    crate::product::point(b, job_row, &output).await?;
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
        next.record_announcement(Announcement::published(
            job,
            &output,
            tilegate_core::now_millis(),
        ));
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

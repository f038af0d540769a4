//! The scene's multipart upload: parts cut from the laid-out file as they are sent, the lease
//! renewed before completing, and the upload aborted when the lease is lost or a step fails.

use crate::{AssembleError, AssembleOptions, AssembleReport};
use bytes::Bytes;
use tilegate_claim::{ClaimGate, KeepAlive, Lease, LeaseState};
use tilegate_cogwrite::LaidOut;
use tilegate_core::ObjectKey;
use tilegate_core::metrics::{self as m, Counters};
use tilegate_core::object::{PartId, PutMode, PutOutcome};
use tilegate_core::{Backends, StoreError};

/// Upload in parts while the lease holds; `None` if it was lost (the upload is aborted). Each
/// part is cut from the laid-out file as it is sent (and fed to `hasher`): the whole scene
/// never sits in memory.
#[expect(
    clippy::too_many_arguments,
    reason = "one call site; the pieces are distinct"
)]
pub(crate) async fn multipart(
    b: &Backends,
    key: &ObjectKey,
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
            // A stop: the error path below aborts the upload; the caller releases the claim.
            opts.ensure_running(&report.job_id)?;
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
        // A stop before completing publishes nothing: the upload is aborted below.
        opts.ensure_running(&report.job_id)?;
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
                tracing::warn!(key = %key, upload_id, error = %tilegate_core::error::chain(&e),
                    "could not abort a failed multipart upload; cleanup-uploads will");
            }
        }
    }
    sent
}

async fn abort(
    b: &Backends,
    key: &ObjectKey,
    upload_id: &str,
) -> Result<Option<PutOutcome>, AssembleError> {
    tracing::warn!(
        key = %key,
        upload_id,
        "lease lost mid-upload; aborting the multipart upload"
    );
    b.objects.abort_multipart(key, upload_id).await?;
    Ok(None)
}

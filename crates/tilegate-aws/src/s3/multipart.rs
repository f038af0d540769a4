//! Multipart uploads on S3: create, parts, the conditional completion (checked against its
//! parts' sizes and count), abort and the listing of stale uploads, with the emulator's gaps
//! absorbed (an ignored `If-Match` on completion, a 500 for an aborted upload, a placeholder
//! initiation time).

use super::{
    S3Store, SERVICE, check_metadata, conditional_write, expected_etag, preconditions,
    to_system_time,
};
use crate::error::{Answer, Failure, FailureOf as _};
use crate::retry::{self, Idempotency};
use aws_sdk_s3::primitives::ByteStream;
use aws_sdk_s3::types::{CompletedMultipartUpload, CompletedPart};
use bytes::Bytes;
use std::collections::{BTreeMap, HashMap};
use std::sync::PoisonError;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tilegate_core::ObjectKey;
use tilegate_core::keys::check_list_prefix;
use tilegate_core::object::{
    Differs, MultipartUpload, ObjectStore, PartId, PutMode, PutOptions, PutOutcome,
};
use tilegate_core::{ETag, StoreError, StoreResult};
use tilegate_retry::Decision;
use tracing::{debug, info, warn};

/// moto 5.2.5 answers `ListMultipartUploads` with this `Initiated` for every upload (a
/// constant in its response template): it records no initiation time at all.
const MOTO_PLACEHOLDER_INITIATED_SECS: u64 = 1_289_422_113; // 2010-11-10T20:48:33Z

/// Uploads this handle started, remembered for [`MOTO_PLACEHOLDER_INITIATED_SECS`].
const UPLOAD_LEDGER_CAP: usize = 10_000;

/// The part count a multipart object's ETag names against the parts completed: S3 gives a
/// multipart-uploaded object the ETag `"<digest of the parts' digests>-<number of parts>"`
/// (S3 User Guide, "Checking object integrity": "the ETag ... is followed by a hyphen and the
/// number of parts"). An ETag without that suffix (an S3-compatible server's own form) is not
/// compared.
fn check_part_count(e_tag: &ETag, parts: usize) -> Result<(), Differs> {
    let tag = e_tag.as_str().trim_matches('"');
    match tag.rsplit_once('-').map(|(_, n)| n.parse::<usize>()) {
        Some(Ok(n)) if n != parts => Err(Differs::Checksum {
            meant: format!("an ETag of {parts} parts"),
            found: e_tag.as_str().to_owned(),
        }),
        _ => Ok(()),
    }
}

/// A completion of `upload_id` that its condition refused, logged as `outcome` is named.
fn refused(key: &str, upload_id: &str, outcome: PutOutcome) -> StoreResult<PutOutcome> {
    let named = match outcome {
        PutOutcome::AlreadyPresent => "already-present",
        _ => "superseded",
    };
    info!(
        store = "s3",
        key,
        upload_id,
        outcome = named,
        "complete multipart upload"
    );
    Ok(outcome)
}

impl S3Store {
    /// When an upload was initiated: S3's `Initiated`, unless it is moto's placeholder, in
    /// which case the time this handle started it (if it did), else `None` (unknown).
    fn initiated_of(&self, upload_id: &str, reported: SystemTime) -> Option<SystemTime> {
        if reported != UNIX_EPOCH + Duration::from_secs(MOTO_PLACEHOLDER_INITIATED_SECS) {
            return Some(reported);
        }
        self.started
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(upload_id)
            .copied()
    }

    /// Every incomplete upload under the full key prefix `full` (all pages), as (full key,
    /// upload ID, reported initiation time).
    async fn incomplete_uploads(
        &self,
        full: &str,
        shown: &str,
    ) -> StoreResult<Vec<(String, String, SystemTime)>> {
        let mut out = Vec::new();
        let (mut key_marker, mut id_marker): (Option<String>, Option<String>) = (None, None);
        loop {
            let page = self
                .sdk()
                .send_raw("list multipart uploads", full, || {
                    self.client
                        .list_multipart_uploads()
                        .bucket(&self.bucket)
                        .prefix(full)
                        .set_key_marker(key_marker.clone())
                        .set_upload_id_marker(id_marker.clone())
                        .send()
                })
                .await
                .map_err(|f| f.into_store("list multipart uploads", shown))?;
            for u in page.uploads() {
                if let (Some(key), Some(id)) = (u.key(), u.upload_id()) {
                    out.push((key.to_owned(), id.to_owned(), to_system_time(u.initiated())));
                }
            }
            key_marker = page.next_key_marker().map(str::to_owned);
            id_marker = page.next_upload_id_marker().map(str::to_owned);
            if page.is_truncated() != Some(true) || key_marker.is_none() {
                return Ok(out);
            }
        }
    }

    /// Whether the multipart upload is still in progress, by listing the uploads of its exact
    /// key. (`ListParts` would be the direct question, but moto 5.2.5 answers it with a
    /// `ListPartsResponse` root element that the SDK refuses to parse.)
    async fn upload_exists(&self, key: &str, upload_id: &str) -> StoreResult<bool> {
        let full = self.full(key);
        Ok(self
            .incomplete_uploads(&full, key)
            .await?
            .iter()
            .any(|(k, id, _)| *k == full && id == upload_id))
    }

    pub(super) async fn create_upload(
        &self,
        key: &ObjectKey,
        opts: &PutOptions,
    ) -> StoreResult<String> {
        check_metadata(&opts.metadata)?;
        let full = self.full(key);
        let metadata: HashMap<String, String> = opts.metadata.clone().into_iter().collect();
        // A repeated create after a lost answer leaves an orphan upload, which the cleanup of
        // stale uploads (`list_multipart` + `abort_multipart`) removes.
        let out = self
            .sdk()
            .send_raw("create multipart upload", &full, || {
                self.client
                    .create_multipart_upload()
                    .bucket(&self.bucket)
                    .key(&full)
                    .set_metadata(Some(metadata.clone()))
                    .send()
            })
            .await
            .map_err(|f| f.into_store("create multipart upload", key))?;
        let id = out.upload_id().unwrap_or_default().to_owned();
        if id.is_empty() {
            return Err(StoreError::Corrupt {
                what: "multipart upload",
                key: key.to_string(),
                detail: "CreateMultipartUpload answered without an upload ID".to_owned(),
            });
        }
        {
            let mut started = self.started.lock().unwrap_or_else(PoisonError::into_inner);
            if started.len() >= UPLOAD_LEDGER_CAP {
                started.clear();
            }
            started.insert(id.clone(), SystemTime::now());
        }
        debug!(store = "s3", key = %key, upload_id = %id, "multipart upload created");
        Ok(id)
    }

    pub(super) async fn put_part(
        &self,
        key: &ObjectKey,
        upload_id: &str,
        part_number: u32,
        bytes: Bytes,
    ) -> StoreResult<PartId> {
        let n = i32::try_from(part_number)
            .ok()
            .filter(|n| (1..=10_000).contains(n))
            .ok_or_else(|| StoreError::InvalidKey {
                key: format!("{key}#part{part_number}"),
                reason: "S3 part numbers are 1..=10000".to_owned(),
            })?;
        let full = self.full(key);
        // Re-uploading a part number replaces that part: idempotent.
        let out = retry::run(
            &self.retry,
            Idempotency::Idempotent,
            "upload part",
            &full,
            |_| {
                let req = self
                    .client
                    .upload_part()
                    .bucket(&self.bucket)
                    .key(&full)
                    .upload_id(upload_id)
                    .part_number(n)
                    .body(ByteStream::from(bytes.clone()));
                async move {
                    match req.send().await {
                        Ok(out) => Ok(out),
                        // moto 5.2.5 answers a part for an aborted upload with a 500 (S3: 404
                        // NoSuchUpload). Ask once whether the upload is gone before repeating.
                        Err(e) => {
                            let mut f = Failure::from_sdk(SERVICE, e);
                            if f.status == Some(500)
                                && matches!(self.upload_exists(key, upload_id).await, Ok(false))
                            {
                                f.answer = Answer::NoSuchUpload;
                            }
                            Err(f)
                        }
                    }
                }
            },
        )
        .await
        .map_err(|f| f.into_store("upload part", key))?;
        Ok(PartId {
            part_number,
            e_tag: ETag::new(out.e_tag().unwrap_or_default()),
            size: bytes.len() as u64,
        })
    }

    pub(super) async fn complete_upload(
        &self,
        key: &ObjectKey,
        upload_id: &str,
        parts: &[PartId],
        mode: &PutMode,
    ) -> StoreResult<PutOutcome> {
        let expected = expected_etag(mode)?.cloned();
        // Is the upload still there? S3 answers a completion of an aborted upload with 404
        // NoSuchUpload, but moto 5.2.5 fails it with a 500 (a KeyError), which would be retried
        // as transient. One listing answers on both; it reports, it does not guard.
        if !self.upload_exists(key, upload_id).await? {
            return Err(StoreError::NotFound {
                what: "multipart upload",
                key: key.to_string(),
            });
        }
        if let Some(expected) = &expected {
            // A cheap look first, because moto 5.2.5 ignores If-Match on
            // CompleteMultipartUpload; on S3 it also saves a completion that would be refused.
            // It is not the guard: the If-Match below is.
            match self.head(key).await? {
                Some(cur) if cur.e_tag.strong_eq(expected) => {}
                _ => return refused(key, upload_id, PutOutcome::Superseded),
            }
        }
        let completed = CompletedMultipartUpload::builder()
            .set_parts(Some(
                parts
                    .iter()
                    .map(|p| {
                        CompletedPart::builder()
                            .part_number(i32::try_from(p.part_number).unwrap_or(i32::MAX))
                            .e_tag(p.e_tag.as_str())
                            .build()
                    })
                    .collect(),
            ))
            .build();
        let full = self.full(key);
        // S3 refuses a completion whose object would not have this size (400 InvalidRequest,
        // "x-amz-mp-object-size"), before publishing it; the object is checked again below,
        // for the servers that ignore the header (moto 5.2.5 does).
        let meant = i64::try_from(PartId::total(parts)).unwrap_or(i64::MAX);
        let decision = conditional_write(
            &self.retry,
            Idempotency::CompleteUpload,
            mode,
            &full,
            |_| {
                let (if_none_match, if_match) = preconditions(mode, expected.as_ref());
                let req = self
                    .client
                    .complete_multipart_upload()
                    .bucket(&self.bucket)
                    .key(&full)
                    .upload_id(upload_id)
                    .mpu_object_size(meant)
                    .multipart_upload(completed.clone())
                    .set_if_none_match(if_none_match)
                    .set_if_match(if_match);
                async move {
                    req.send()
                        .await
                        .map(|o| o.e_tag().map(str::to_owned))
                        .map_err(|e| Failure::from_sdk(SERVICE, e))
                }
            },
        )
        .await
        .map_err(|f| {
            if f.answer == Answer::ConditionalConflict {
                warn!(
                    store = "s3",
                    key = %key,
                    upload_id,
                    "409 on CompleteMultipartUpload: the upload must be re-initiated"
                );
            }
            f.into_store("complete multipart upload", key)
        })?;
        match decision {
            Decision::Applied(e_tag) => {
                let meta = self
                    .written_meta(key, e_tag, None, &BTreeMap::new())
                    .await?;
                debug!(
                    store = "s3",
                    key = %key,
                    upload_id,
                    outcome = "written",
                    size = meta.size,
                    "complete multipart upload"
                );
                tilegate_retry::verify_completion(
                    "s3",
                    self,
                    (key, upload_id),
                    parts,
                    PutOutcome::Written(meta),
                    |m| check_part_count(&m.e_tag, parts.len()),
                )
                .await
            }
            Decision::AlreadyPresent { .. } => refused(key, upload_id, PutOutcome::AlreadyPresent),
            Decision::Superseded { .. } => refused(key, upload_id, PutOutcome::Superseded),
        }
    }

    pub(super) async fn abort_upload(&self, key: &ObjectKey, upload_id: &str) -> StoreResult<()> {
        let full = self.full(key);
        self.sdk()
            .send_raw("abort multipart upload", &full, || {
                self.client
                    .abort_multipart_upload()
                    .bucket(&self.bucket)
                    .key(&full)
                    .upload_id(upload_id)
                    .send()
            })
            .await
            .map_err(|f| f.into_store("abort multipart upload", key))?;
        debug!(store = "s3", key = %key, upload_id, "multipart upload aborted");
        Ok(())
    }

    pub(super) async fn list_uploads(
        &self,
        prefix: &str,
        older_than: Option<SystemTime>,
    ) -> StoreResult<Vec<MultipartUpload>> {
        check_list_prefix(prefix)?;
        let mut out = Vec::new();
        for (full_key, id, reported) in self.incomplete_uploads(&self.full(prefix), prefix).await? {
            let Some(key) = self.strip(&full_key) else {
                continue;
            };
            let initiated = self.initiated_of(&id, reported);
            // An upload of unknown age is never listed as stale: aborting a live upload would
            // cost more than keeping an old one.
            if older_than.is_some_and(|t| initiated.is_none_or(|i| i >= t)) {
                continue;
            }
            out.push(MultipartUpload {
                key: key.to_owned(),
                upload_id: id,
                initiated: initiated.unwrap_or(reported),
            });
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_multipart_etag_names_its_part_count() {
        let tag = |t: &str| ETag::new(t);
        assert!(check_part_count(&tag("\"0123456789abcdef0123456789abcdef-2\""), 2).is_ok());
        assert!(matches!(
            check_part_count(&tag("\"0123456789abcdef0123456789abcdef-1\""), 2),
            Err(Differs::Checksum { .. })
        ));
        // Not the multipart form: nothing to compare.
        assert!(check_part_count(&tag("\"0123456789abcdef0123456789abcdef\""), 2).is_ok());
    }
}

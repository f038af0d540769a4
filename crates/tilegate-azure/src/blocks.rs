//! Multipart uploads as Azure block lists.
//!
//! Each part is a Put Block whose ID is the upload's random part, the part number and the
//! moment it was staged (every ID of every upload has one length, as Azure requires of the
//! blocks of one blob), so parts may be sent in any order, from any handle, and sent again
//! under their number: completion refuses a part that a later staging of its number replaced.
//! The
//! upload completes with one Put Block List naming the parts in order, under the mode's
//! condition (`If-None-Match: *` for a Create): of two racing large uploads of one key the
//! second commit is refused. A committed list discards every other uncommitted block of that
//! blob name, a racing upload's included, which is why a commit that finds its blocks gone is
//! read as the race it lost; Azure discards uncommitted blocks after a week by itself. Before
//! the commit each named block's size (as Get Block List reports it) is checked against its
//! part's; after it the blob's size against the parts' sum: a blob that differs is deleted
//! (`If-Match` on its ETag) and the completion answers `CompletionMismatch`, never `Written`.
//!
//! Azure lists no uploads in progress, so each upload is recorded at
//! `.tilegate/uploads/<upload-id>` under the store's prefix (its key, its metadata with the
//! attempt token); `list_multipart` reads the records, `abort_multipart` deletes one.

use crate::error::{AzureError, Failure, FailureOf as _};
use crate::store::{AzureStore, conditions, to_azure_metadata};
use azure_core::http::RequestContent;
use azure_storage_blob::models::{
    BlockBlobClientCommitBlockListOptions, BlockListType, BlockLookupList,
};
use bytes::Bytes;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap};
use std::time::{SystemTime, UNIX_EPOCH};
use tilegate_core::object::{
    ATTEMPT_METADATA, CompletionMismatch, MultipartUpload, ObjectStore as _, PartId, PutMode,
    PutOptions, PutOutcome,
};
use tilegate_core::{ETag, ObjectKey, Retry, StoreError, StoreResult};
use tilegate_retry::record::{
    RECORDS, initiated_at, no_upload, parse_upload_id, record_key, upload_id,
};
use tilegate_retry::{Answer, Decision, Idempotency, conditional_write, run};
use tracing::info;

/// What an upload record holds.
#[derive(Debug, Serialize, Deserialize)]
struct Record {
    key: String,
    /// The metadata the committed blob gets (with the attempt token for a conditional mode).
    metadata: BTreeMap<String, String>,
}

/// The random part of an upload ID, if it is one.
fn nonce(id: &str) -> Option<&str> {
    parse_upload_id(id).map(|(_, n)| n)
}

/// The length of every block ID: nonce, part number, staging moment.
const BLOCK_ID_LEN: usize = 32 + 6 + 16;

/// Part `n`'s block ID, staged at `stamp` (ns since the epoch): the upload's nonce, the part
/// number and the stamp in fixed-width hex, [`BLOCK_ID_LEN`] bytes for every part of every
/// upload; the IDs of one part order by their staging.
fn block_id(nonce: &str, n: u32, stamp: u64) -> String {
    format!("{nonce}{n:06}{stamp:016x}")
}

/// The upload nonce and part number a block ID names.
fn block_part(id: &str) -> Option<(&str, &str)> {
    (id.len() == BLOCK_ID_LEN && id.is_ascii()).then(|| (&id[..32], &id[32..38]))
}

/// A completion's permanent error for a part it cannot commit.
fn unusable_part(key: &str, detail: String) -> StoreError {
    StoreError::backend(
        "complete multipart upload",
        key,
        Retry::Permanent,
        AzureError::UploadRecord { detail },
    )
}

fn stamp_now() -> u64 {
    u64::try_from(
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default()
            .as_nanos(),
    )
    .unwrap_or(u64::MAX)
}

impl AzureStore {
    fn live_uploads(&self) -> std::sync::MutexGuard<'_, HashMap<String, String>> {
        self.live
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    async fn read_record(&self, key: &str, id: &str) -> StoreResult<Option<Record>> {
        if nonce(id).is_none() {
            return Ok(None);
        }
        let full = self.full(&record_key(id));
        let blob = self.blob(&full);
        let body = run(
            &self.retry,
            Idempotency::Idempotent,
            "read upload record",
            &full,
            |_| async {
                let r = blob.download(None).await.map_err(Failure::of)?;
                r.body.collect().await.map_err(Failure::of)
            },
        )
        .await;
        let body = match body {
            Ok(b) => b,
            Err(f) if f.answer == Answer::NoSuchKey => return Ok(None),
            Err(f) => return Err(f.into_store("read upload record", key)),
        };
        serde_json::from_slice(&body).map(Some).map_err(|e| {
            StoreError::backend(
                "read upload record",
                key,
                Retry::Permanent,
                AzureError::UploadRecord {
                    detail: format!("{full}: {e}"),
                },
            )
        })
    }

    /// Record a new upload of `key`.
    pub(crate) async fn start_blocks(&self, key: &str, opts: &PutOptions) -> StoreResult<String> {
        let (metadata, _) = tilegate_retry::mode_metadata(opts);
        to_azure_metadata(&metadata)?;
        let id = upload_id();
        let record = Record {
            key: key.to_owned(),
            metadata,
        };
        let body = serde_json::to_vec(&record)
            .map_err(|e| StoreError::backend("record upload", key, Retry::Permanent, e))?;
        let full = self.full(&record_key(&id));
        let create = PutMode::Create;
        let conditions = conditions(&create).unwrap_or_default();
        self.put_blob(
            &full,
            &Bytes::from(body),
            &Default::default(),
            &create,
            &conditions,
        )
        .await
        .map_err(|f| f.into_store("record upload", key))?;
        self.live_uploads().insert(id.clone(), key.to_owned());
        Ok(id)
    }

    /// Put Block for part `n` of upload `id`.
    pub(crate) async fn stage(
        &self,
        key: &str,
        id: &str,
        n: u32,
        bytes: Bytes,
    ) -> StoreResult<PartId> {
        let Some(nonce) = nonce(id) else {
            return Err(no_upload(key));
        };
        let known = self.live_uploads().get(id).map(String::as_str) == Some(key);
        if !known {
            match self.read_record(key, id).await? {
                Some(r) if r.key == key => {
                    self.live_uploads().insert(id.to_owned(), r.key);
                }
                _ => return Err(no_upload(key)),
            }
        }
        let block = block_id(nonce, n, stamp_now());
        let full = self.full(key);
        let blob = self.blob(&full).block_blob_client();
        let len = bytes.len() as u64;
        run(
            &self.retry,
            Idempotency::Idempotent,
            "upload part",
            &full,
            |_| async {
                blob.stage_block(block.as_bytes(), len, bytes.clone().into(), None)
                    .await
                    .map_err(Failure::of)
            },
        )
        .await
        .map_err(|f| f.into_store("upload part", key))?;
        Ok(PartId {
            part_number: n,
            e_tag: ETag::new(block),
            size: len,
        })
    }

    /// Put Block List of `parts` under the mode's condition.
    pub(crate) async fn commit(
        &self,
        key: &ObjectKey,
        id: &str,
        parts: &[PartId],
        mode: &PutMode,
    ) -> StoreResult<PutOutcome> {
        const OP: &str = "complete multipart upload";
        let (Some(nonce), Some(record)) = (nonce(id), self.read_record(key, id).await?) else {
            return Err(no_upload(key));
        };
        if record.key != key.as_str() {
            return Err(no_upload(key));
        }
        let blocks = parts
            .iter()
            .map(|p| {
                let b = p.e_tag.as_str().trim_matches('"');
                if block_part(b).is_some_and(|(n, _)| n == nonce) {
                    Ok(b.to_owned())
                } else {
                    Err(unusable_part(
                        key,
                        format!("part {} is not a block of upload {id}", p.part_number),
                    ))
                }
            })
            .collect::<StoreResult<Vec<String>>>()?;
        self.check_latest(key, &blocks, parts).await?;
        let blocks: Vec<Vec<u8>> = blocks.into_iter().map(String::into_bytes).collect();
        let Some(conditions) = conditions(mode) else {
            return self.finish(key, id, Ok(PutOutcome::Superseded)).await;
        };
        let expected = &conditions.0;
        let metadata = to_azure_metadata(&record.metadata)?;
        // The attempt token is in the metadata of a conditional mode (an Overwrite is never
        // refused, so it needs none).
        let token = record
            .metadata
            .get(ATTEMPT_METADATA)
            .cloned()
            .unwrap_or_default();
        let full = self.full(key);
        let blob = self.blob(&full).block_blob_client();
        let decision = conditional_write(&self.retry, Idempotency::Idempotent, mode, &full, |_| {
            let list = BlockLookupList {
                latest: Some(blocks.clone()),
                ..BlockLookupList::default()
            };
            let options = BlockBlobClientCommitBlockListOptions {
                if_match: conditions.0.clone(),
                if_none_match: conditions.1.clone(),
                metadata: Some(metadata.clone()),
                ..BlockBlobClientCommitBlockListOptions::default()
            };
            let blob = &blob;
            async move {
                let content = RequestContent::try_from(list).map_err(Failure::of)?;
                blob.commit_block_list(content, Some(options))
                    .await
                    .map_err(Failure::of)
            }
        })
        .await;
        let decision = match decision {
            Ok(d) => d,
            // Our blocks are gone: another upload's list was committed first (a commit
            // discards every uncommitted block of the name), or ours was and its answer was
            // lost. Which one is read back; with no blob in place the error stands.
            Err(f) if f.is("InvalidBlockList") && !matches!(mode, PutMode::Overwrite) => {
                let current = self.head(key).await?;
                let changed = current.as_ref().is_some_and(|m| {
                    expected
                        .as_ref()
                        .is_none_or(|t| t.to_string() != m.e_tag.as_str())
                });
                if !changed {
                    return Err(f.into_store(OP, key));
                }
                info!(
                    store = "azure",
                    key = %key,
                    upload_id = id,
                    "the upload's blocks are gone: a list was committed before this one"
                );
                match mode {
                    PutMode::Create => Decision::AlreadyPresent { resent: true },
                    _ => Decision::Superseded { resent: true },
                }
            }
            Err(f) => return Err(f.into_store(OP, key)),
        };
        let outcome = match self
            .settle(key, decision, &token, OP, async |_| {
                self.head(key).await?.ok_or_else(|| no_upload(key))
            })
            .await
        {
            // Put Block List answers no size (its Content-MD5 is of the request's list, not the
            // blob: Blob service REST API, "Put Block List"), so the blob's is read back.
            Ok(o) => {
                tilegate_retry::verify_completion("azure", self, (key, id), parts, o, |_| Ok(()))
                    .await
            }
            Err(e) => Err(e),
        };
        self.finish(key, id, outcome).await
    }

    /// Refuse a part that a later staging of its number replaced (as S3 refuses a replaced
    /// part's ETag): among the uncommitted blocks of the blob, none of the same upload and part
    /// may be newer than the one named; and a named block Azure holds with another size than
    /// its part's was not staged whole. A named block that is no longer uncommitted (a commit
    /// whose answer was lost) is left to the commit's own answer.
    async fn check_latest(&self, key: &str, named: &[String], parts: &[PartId]) -> StoreResult<()> {
        let full = self.full(key);
        let blob = self.blob(&full).block_blob_client();
        let list = run(
            &self.retry,
            Idempotency::Idempotent,
            "list blocks",
            &full,
            |_| async {
                blob.get_block_list(BlockListType::Uncommitted, None)
                    .await
                    .map_err(Failure::of)?
                    .into_model()
                    .map_err(Failure::of)
            },
        )
        .await;
        let (staged, sizes): (Vec<String>, Vec<Option<i64>>) = match list {
            Ok(l) => l
                .uncommitted_blocks
                .unwrap_or_default()
                .into_iter()
                .filter_map(|b| Some((String::from_utf8(b.name?).ok()?, b.size)))
                .unzip(),
            Err(f) if f.answer == Answer::NoSuchKey => (Vec::new(), Vec::new()),
            Err(f) => return Err(f.into_store("list blocks", key)),
        };
        for (id, p) in named.iter().zip(parts) {
            if let Some(Some(size)) = staged.iter().position(|b| b == id).map(|i| sizes[i])
                && u64::try_from(size).ok() != Some(p.size)
            {
                return Err(unusable_part(
                    key,
                    format!(
                        "part {} was staged as {size} bytes, not its {}",
                        p.part_number, p.size
                    ),
                ));
            }
            let part = block_part(id);
            if let Some(newer) = staged
                .iter()
                .filter(|b| block_part(b) == part)
                .find(|b| b.as_str() > id.as_str())
            {
                return Err(unusable_part(
                    key,
                    format!(
                        "part {} was uploaded again after the block named (now {newer})",
                        part.map_or("?", |(_, n)| n)
                    ),
                ));
            }
        }
        Ok(())
    }

    /// Delete the record of a finished upload (a leftover record is harmless: cleanup lists
    /// it and its abort finds nothing to discard).
    async fn finish(
        &self,
        key: &str,
        id: &str,
        outcome: StoreResult<PutOutcome>,
    ) -> StoreResult<PutOutcome> {
        // A list committed and found wrong spent the upload as well.
        if let Err(e) = &outcome
            && CompletionMismatch::of(e).is_none()
        {
            return outcome;
        }
        self.live_uploads().remove(id);
        if let Err(e) = self
            .delete_full(key, &self.full(&record_key(id)), None)
            .await
        {
            info!(store = "azure", key, upload_id = id, error = %e, "upload record left behind");
        }
        outcome
    }

    /// Forget upload `id`: its record is deleted; its uncommitted blocks are discarded by
    /// Azure (at the next commit of the name, or after a week).
    pub(crate) async fn forget(&self, key: &str, id: &str) -> StoreResult<()> {
        if nonce(id).is_none() {
            return Err(no_upload(key));
        }
        self.live_uploads().remove(id);
        self.delete_full(key, &self.full(&record_key(id)), None)
            .await
            .map(|_| ())
    }

    /// The recorded uploads of keys under `prefix`, started before `older_than`.
    pub(crate) async fn recorded_uploads(
        &self,
        prefix: &str,
        older_than: Option<SystemTime>,
    ) -> StoreResult<Vec<MultipartUpload>> {
        let dir = self.full(RECORDS);
        let records = self
            .list_full(&dir)
            .await
            .map_err(|f| f.into_store("list multipart uploads", prefix))?;
        let mut out = Vec::new();
        for m in records {
            let Some(id) = m.key.strip_prefix(&dir) else {
                continue;
            };
            let Some((ms, _)) = parse_upload_id(id) else {
                continue;
            };
            let initiated = initiated_at(ms);
            if older_than.is_some_and(|t| initiated >= t) {
                continue;
            }
            if let Some(r) = self.read_record(prefix, id).await?
                && r.key.starts_with(prefix)
            {
                out.push(MultipartUpload {
                    key: r.key,
                    upload_id: id.to_owned(),
                    initiated,
                });
            }
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn block_ids_have_one_length() {
        let id = upload_id();
        let n = nonce(&id).unwrap();
        let (a, b) = (block_id(n, 1, 1), block_id(n, 99_999, u64::MAX));
        assert_eq!((a.len(), b.len()), (BLOCK_ID_LEN, BLOCK_ID_LEN));
        assert_eq!(block_part(&a), Some((n, "000001")));
        assert!(
            block_id(n, 1, 255) > block_id(n, 1, 16),
            "a later staging orders after"
        );
        assert!(nonce("nope").is_none());
        assert!(nonce("0000000000000-xyz").is_none());
    }
}

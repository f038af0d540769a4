//! Single-request writes and deletes: one Put Blob under the mode's condition headers, its
//! decision settled, and deletes guarded by an ETag.

use super::AzureStore;
use super::headers::{Conditions, conditions, etag_header, time_of, to_azure_metadata};
use crate::error::{Failure, FailureOf as _};
use azure_core::http::{Etag, NoFormat, RequestContent};
use azure_storage_blob::models::{BlobClientDeleteOptions, BlockBlobClientUploadOptions};
use bytes::Bytes;
use std::collections::HashMap;
use std::num::NonZero;
use tilegate_core::object::{
    DeleteOutcome, ObjectMeta, ObjectStore, PutMode, PutOptions, PutOutcome,
};
use tilegate_core::{ETag, ObjectKey, StoreResult};
use tilegate_retry::{Answer, Decision, Idempotency, conditional_write, run};
use tracing::debug;

impl AzureStore {
    /// Write `bytes` at `full` in one Put Blob, under the mode's condition headers.
    pub(crate) async fn put_blob(
        &self,
        full: &str,
        bytes: &Bytes,
        metadata: &HashMap<String, String>,
        mode: &PutMode,
        (if_match, if_none_match): &Conditions,
    ) -> Result<Decision<(Option<Etag>, Option<time::OffsetDateTime>)>, Failure> {
        let blob = self.blob(full).block_blob_client();
        let len = bytes.len() as u64;
        conditional_write(&self.retry, Idempotency::Idempotent, mode, full, |_| {
            let options = BlockBlobClientUploadOptions {
                if_none_match: if_none_match.clone(),
                if_match: if_match.clone(),
                metadata: Some(metadata.clone()),
                // One Put Blob (up to 5000 MiB), never a block list the crate makes itself.
                partition_size: NonZero::new(len.max(1)),
                parallel: NonZero::new(1),
                ..BlockBlobClientUploadOptions::default()
            };
            let body: RequestContent<Bytes, NoFormat> = bytes.clone().into();
            let blob = &blob;
            async move {
                blob.upload(body, Some(options))
                    .await
                    .map(|r| (r.etag, r.last_modified))
                    .map_err(Failure::of)
            }
        })
        .await
    }

    /// Settle a write's decision (see [`tilegate_retry::settle`]).
    pub(crate) async fn settle<T>(
        &self,
        key: &ObjectKey,
        decision: Decision<T>,
        token: &str,
        operation: &'static str,
        applied: impl AsyncFnOnce(T) -> StoreResult<ObjectMeta>,
    ) -> StoreResult<PutOutcome> {
        tilegate_retry::settle(
            "azure",
            key,
            operation,
            decision,
            token,
            self.head(key),
            applied,
        )
        .await
    }

    /// Delete the blob at `full`, only if its ETag is `if_match` where given.
    pub(crate) async fn delete_full(
        &self,
        key: &str,
        full: &str,
        if_match: Option<&ETag>,
    ) -> StoreResult<DeleteOutcome> {
        let blob = self.blob(full);
        match run(&self.retry, Idempotency::Idempotent, "delete", full, |_| {
            let options = BlobClientDeleteOptions {
                if_match: if_match.map(etag_header),
                ..BlobClientDeleteOptions::default()
            };
            let blob = &blob;
            async move { blob.delete(Some(options)).await.map_err(Failure::of) }
        })
        .await
        {
            Ok(_) => Ok(DeleteOutcome::Deleted),
            // Azure answers an If-Match on an absent blob with 412 too: which one is looked up.
            Err(f) if f.answer == Answer::PreconditionFailed => {
                if self
                    .stat(key, full)
                    .await
                    .map_err(|f| f.into_store("delete", key))?
                    .is_none()
                {
                    return Ok(DeleteOutcome::NotFound);
                }
                debug!(store = "azure", key, outcome = "superseded", "delete");
                Ok(DeleteOutcome::Superseded)
            }
            Err(f) if f.answer == Answer::NoSuchKey => Ok(DeleteOutcome::NotFound),
            Err(f) => Err(f.into_store("delete", key)),
        }
    }

    /// [`ObjectStore::put_opts`] of a checked key.
    pub(super) async fn put_object(
        &self,
        key: &ObjectKey,
        bytes: Bytes,
        opts: PutOptions,
    ) -> StoreResult<PutOutcome> {
        let Some(conditions) = conditions(&opts.mode) else {
            return Ok(PutOutcome::Superseded);
        };
        let (metadata, token) = tilegate_retry::mode_metadata(&opts);
        let azure_metadata = to_azure_metadata(&metadata)?;
        let full = self.full(key);
        let decision = self
            .put_blob(&full, &bytes, &azure_metadata, &opts.mode, &conditions)
            .await
            .map_err(|f| f.into_store("put", key))?;
        let size = bytes.len() as u64;
        self.settle(key, decision, &token, "put", async |(e_tag, modified)| {
            Ok(ObjectMeta {
                key: key.to_string(),
                size,
                e_tag: ETag::new(e_tag.map(|t| t.to_string()).unwrap_or_default()),
                last_modified: time_of(modified),
                version: None,
                metadata: metadata.clone(),
            })
        })
        .await
    }
}

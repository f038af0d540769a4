//! Reads: a blob's metadata, ranged and conditional reads (a list of ETags resolved against
//! the current version first), and listing page by page.

use super::AzureStore;
use super::headers::{etag_header, from_azure_name, meta_of_headers, time_of};
use crate::error::{Failure, FailureOf as _};
use azure_core::http::Etag;
use azure_storage_blob::models::{
    BlobClientDownloadOptions, BlobClientGetPropertiesOptions, BlobContainerClientListBlobsOptions,
    ListBlobsIncludeItem,
};
use bytes::Bytes;
use futures::StreamExt as _;
use std::num::NonZero;
use std::ops::Range;
use tilegate_core::object::{GetOptions, GetOutcome, GetResult, ObjectMeta, RangeError};
use tilegate_core::{ETag, StoreError, StoreResult};
use tilegate_retry::{Answer, Idempotency, IfMatch, IfNoneMatch, read_refusal, run};

/// How much one read request asks for; a larger read is split into requests of this size,
/// each pinned to the first answer's ETag.
const READ_PARTITION: usize = 64 << 20;

impl AzureStore {
    /// The metadata of the blob at `full`, if there is one.
    pub(crate) async fn stat(&self, key: &str, full: &str) -> Result<Option<ObjectMeta>, Failure> {
        let blob = self.blob(full);
        match run(
            &self.retry,
            Idempotency::Idempotent,
            "head",
            full,
            |_| async {
                blob.get_properties(Some(BlobClientGetPropertiesOptions::default()))
                    .await
                    .map_err(Failure::of)
            },
        )
        .await
        {
            Ok(r) => Ok(Some(meta_of_headers(key, r.headers(), None))),
            Err(f) if f.answer == Answer::NoSuchKey => Ok(None),
            Err(f) => Err(f),
        }
    }

    /// The metadata of the blob a read is about, or the contract's `NotFound`.
    async fn current(&self, key: &str, full: &str) -> StoreResult<ObjectMeta> {
        self.stat(key, full)
            .await
            .map_err(|f| f.into_store("get", key))?
            .ok_or_else(|| StoreError::NotFound {
                what: "object",
                key: key.to_owned(),
            })
    }

    /// One read: the range of `full` under the given conditions.
    async fn download(
        &self,
        key: &str,
        full: &str,
        range: Option<&Range<u64>>,
        if_match: Option<Etag>,
        if_none_match: Option<Etag>,
    ) -> Result<GetResult, Failure> {
        let blob = self.blob(full);
        run(&self.retry, Idempotency::Idempotent, "get", full, |_| {
            let options = BlobClientDownloadOptions {
                if_match: if_match.clone(),
                if_none_match: if_none_match.clone(),
                range: range.map(|r| r.clone().into()),
                parallel: NonZero::new(4),
                partition_size: NonZero::new(READ_PARTITION),
                ..BlobClientDownloadOptions::default()
            };
            let blob = &blob;
            async move {
                let r = blob.download(Some(options)).await.map_err(Failure::of)?;
                let meta = meta_of_headers(key, &r.headers, None);
                let bytes = r.body.collect().await.map_err(Failure::of)?;
                let start = range.map_or(0, |r| r.start);
                Ok(GetResult {
                    range: start..start + bytes.len() as u64,
                    meta,
                    bytes,
                })
            }
        })
        .await
    }

    /// [`ObjectStore::get_opts`](tilegate_core::object::ObjectStore::get_opts) of a checked key.
    pub(super) async fn get_blob(&self, key: &str, opts: GetOptions) -> StoreResult<GetOutcome> {
        RangeError::check(opts.range.as_ref()).map_err(|e| e.into_store(key))?;
        let full = self.full(key);
        let im = opts.if_match.as_ref().map(IfMatch::of);
        let inm = opts.if_none_match.as_ref().map(IfNoneMatch::of);
        // Conditions Azure evaluates in the request: `*` and one tag. A list of several is
        // resolved against the current version, which the request is then pinned to.
        let mut if_match = match &im {
            None => None,
            Some(IfMatch::Any) => Some(Etag::from("*")),
            Some(IfMatch::One(t)) => Some(etag_header(t)),
            Some(IfMatch::Never) => return Ok(GetOutcome::PreconditionFailed),
            Some(IfMatch::Many(_)) => None,
        };
        let if_none_match = match &inm {
            Some(IfNoneMatch::One(t)) => Some(etag_header(t)),
            _ => None,
        };
        if matches!(im, Some(IfMatch::Many(_)))
            || matches!(inm, Some(IfNoneMatch::Any | IfNoneMatch::Many(_)))
        {
            let current = self.current(key, &full).await?;
            if let Some(refused) = read_refusal(im.as_ref(), inm.as_ref(), &current.e_tag) {
                return Ok(refused);
            }
            if_match = Some(etag_header(&current.e_tag));
        }
        match self
            .download(
                key,
                &full,
                opts.range.as_ref(),
                if_match.clone(),
                if_none_match.clone(),
            )
            .await
        {
            // The crate reads a range past the end of a blob as empty; the contract refuses it.
            Ok(r) => {
                RangeError::serve(opts.range.as_ref(), r.meta.size)
                    .map_err(|e| e.into_store(key))?;
                Ok(GetOutcome::Found(r))
            }
            Err(f) if f.answer == Answer::PreconditionFailed => Ok(GetOutcome::PreconditionFailed),
            Err(f) if f.answer == Answer::NotModified => Ok(GetOutcome::NotModified),
            // A range at or past the end (or any range of an empty blob): learn the size.
            Err(f) if f.answer == Answer::InvalidRange => {
                let want = opts.range.clone().unwrap_or(0..0);
                let meta = self.current(key, &full).await?;
                if let Some(refused) = read_refusal(im.as_ref(), inm.as_ref(), &meta.e_tag) {
                    return Ok(refused);
                }
                let range =
                    RangeError::serve(Some(&want), meta.size).map_err(|e| e.into_store(key))?;
                Ok(GetOutcome::Found(GetResult {
                    meta,
                    range,
                    bytes: Bytes::new(),
                }))
            }
            Err(f) => Err(f.into_store("get", key)),
        }
    }

    /// Every blob whose full name starts with `full_prefix` (keys are full names), page by
    /// page, each page a request of its own.
    pub(crate) async fn list_full(&self, full_prefix: &str) -> Result<Vec<ObjectMeta>, Failure> {
        let mut out = Vec::new();
        let mut marker: Option<String> = None;
        loop {
            let page = run(
                &self.retry,
                Idempotency::Idempotent,
                "list",
                full_prefix,
                |_| {
                    let options = BlobContainerClientListBlobsOptions {
                        prefix: Some(full_prefix.to_owned()),
                        marker: marker.clone(),
                        include: Some(vec![ListBlobsIncludeItem::Metadata]),
                        ..BlobContainerClientListBlobsOptions::default()
                    };
                    async move {
                        let pager = self
                            .container
                            .list_blobs(Some(options))
                            .map_err(Failure::of)?;
                        let first = pager.into_pages().next().await;
                        match first {
                            Some(r) => r.map_err(Failure::of)?.into_model().map_err(Failure::of),
                            None => Ok(Default::default()),
                        }
                    }
                },
            )
            .await?;
            for b in page.blob_items {
                let (Some(name), Some(p)) = (b.name, b.properties) else {
                    continue;
                };
                out.push(ObjectMeta {
                    key: name,
                    size: p.content_length.unwrap_or(0),
                    e_tag: ETag::new(p.etag.map(|t| t.to_string()).unwrap_or_default()),
                    last_modified: time_of(p.last_modified),
                    version: None,
                    metadata: b
                        .metadata
                        .and_then(|m| m.values)
                        .unwrap_or_default()
                        .into_iter()
                        .map(|(k, v)| (from_azure_name(&k), v))
                        .collect(),
                });
            }
            marker = page.next_marker.filter(|m| !m.is_empty());
            if marker.is_none() {
                break;
            }
        }
        Ok(out)
    }
}

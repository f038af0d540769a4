//! Objects in a map: every precondition is evaluated under the store's lock, in the same
//! step as the write it guards, as S3 evaluates `If-None-Match: *` and `If-Match`.

use crate::clock::Clock;
use async_trait::async_trait;
use bytes::{Bytes, BytesMut};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime};
use tilegate_core::etag::ETag;
use tilegate_core::keys::check_list_prefix;
use tilegate_core::object::{
    CompletionMismatch, DeleteOptions, DeleteOutcome, GetOptions, GetOutcome, GetResult,
    MultipartUpload, ObjectMeta, ObjectStore, PartId, PutMode, PutOptions, PutOutcome, RangeError,
    UpdateVersion, check_completed,
};
use tilegate_core::{ObjectKey, Retry, StoreError, StoreResult};

/// The in-memory object store. Clones share the objects.
#[derive(Debug, Clone)]
pub struct MemoryObjectStore {
    state: Arc<Mutex<State>>,
    clock: Arc<dyn Clock>,
}

#[derive(Debug, Default)]
struct State {
    objects: BTreeMap<String, Stored>,
    uploads: BTreeMap<String, Upload>,
    /// Grows on every write: the objects' generations and the uploads' IDs.
    seq: u64,
}

#[derive(Debug, Clone)]
struct Stored {
    meta: ObjectMeta,
    bytes: Bytes,
}

#[derive(Debug)]
struct Upload {
    key: String,
    metadata: BTreeMap<String, String>,
    initiated: SystemTime,
    parts: BTreeMap<u32, (ETag, Bytes)>,
}

/// Why the store refused a request that no precondition decides.
#[derive(Debug, thiserror::Error)]
enum MemoryError {
    #[error("part {0} was not uploaded with the ETag given")]
    InvalidPart(u32),
    #[error("an Update names neither an ETag nor a version")]
    NoVersion,
}

/// The ETag of `bytes`: a strong tag of their content, as S3's is of a single-part object.
fn content_tag(bytes: &[u8]) -> ETag {
    let hash = blake3::hash(bytes).to_hex();
    ETag::new(format!("\"{}\"", &hash[..32]))
}

fn refused(operation: &'static str, key: &str, e: MemoryError) -> StoreError {
    StoreError::backend(operation, key, Retry::Permanent, e)
}

/// An upload that was never started, or was completed or aborted.
fn no_upload(upload_id: &str) -> StoreError {
    StoreError::NotFound {
        what: "multipart upload",
        key: upload_id.to_owned(),
    }
}

/// Whether `current` is the version `expected` names (by ETag, else by generation).
fn is_version(current: &ObjectMeta, expected: &UpdateVersion) -> Option<bool> {
    match (&expected.e_tag, &expected.version) {
        (Some(tag), _) => Some(current.e_tag.strong_eq(tag)),
        (None, Some(v)) => Some(current.version.as_ref() == Some(v)),
        (None, None) => None,
    }
}

impl MemoryObjectStore {
    /// An empty store on `clock`.
    pub fn new(clock: Arc<dyn Clock>) -> Self {
        Self {
            state: Arc::default(),
            clock,
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Every stored object's size summed (what a simulation reports as bytes at rest).
    pub fn stored_bytes(&self) -> u64 {
        self.lock().objects.values().map(|o| o.meta.size).sum()
    }

    /// Evaluate `mode` against what is at `key` and, if it holds, store `bytes` there, in one
    /// step under the lock.
    fn commit(
        &self,
        st: &mut State,
        key: &str,
        bytes: Bytes,
        mode: &PutMode,
        metadata: BTreeMap<String, String>,
        e_tag: ETag,
    ) -> StoreResult<PutOutcome> {
        let current = st.objects.get(key);
        match mode {
            PutMode::Overwrite => {}
            PutMode::Create => {
                if current.is_some() {
                    return Ok(PutOutcome::AlreadyPresent);
                }
            }
            PutMode::Update(expected) => {
                let Some(cur) = current else {
                    return Ok(PutOutcome::Superseded);
                };
                match is_version(&cur.meta, expected) {
                    Some(true) => {}
                    Some(false) => return Ok(PutOutcome::Superseded),
                    None => return Err(refused("put", key, MemoryError::NoVersion)),
                }
            }
        }
        // A rewrite's LastModified is after the previous one's, whatever the clock's grain.
        let mut last_modified = self.clock.now();
        if let Some(cur) = current
            && last_modified <= cur.meta.last_modified
        {
            last_modified = cur.meta.last_modified + Duration::from_millis(1);
        }
        st.seq += 1;
        let meta = ObjectMeta {
            key: key.to_owned(),
            size: bytes.len() as u64,
            e_tag,
            last_modified,
            version: Some(st.seq.to_string()),
            metadata,
        };
        st.objects.insert(
            key.to_owned(),
            Stored {
                meta: meta.clone(),
                bytes,
            },
        );
        Ok(PutOutcome::Written(meta))
    }
}

#[async_trait]
impl ObjectStore for MemoryObjectStore {
    fn name(&self) -> &'static str {
        "memory"
    }

    async fn head(&self, key: &ObjectKey) -> StoreResult<Option<ObjectMeta>> {
        Ok(self
            .lock()
            .objects
            .get(key.as_str())
            .map(|o| o.meta.clone()))
    }

    async fn get_opts(&self, key: &ObjectKey, opts: GetOptions) -> StoreResult<GetOutcome> {
        RangeError::check(opts.range.as_ref()).map_err(|e| e.into_store(key))?;
        let st = self.lock();
        let Some(o) = st.objects.get(key.as_str()) else {
            return Err(StoreError::NotFound {
                what: "object",
                key: key.to_string(),
            });
        };
        if let Some(cond) = &opts.if_match
            && !cond.matches_strong(&o.meta.e_tag)
        {
            return Ok(GetOutcome::PreconditionFailed);
        }
        if let Some(cond) = &opts.if_none_match
            && cond.matches_weak(&o.meta.e_tag)
        {
            return Ok(GetOutcome::NotModified);
        }
        let range =
            RangeError::serve(opts.range.as_ref(), o.meta.size).map_err(|e| e.into_store(key))?;
        let (start, end) = (
            usize::try_from(range.start).expect("in memory"),
            usize::try_from(range.end).expect("in memory"),
        );
        Ok(GetOutcome::Found(GetResult {
            meta: o.meta.clone(),
            bytes: o.bytes.slice(start..end),
            range,
        }))
    }

    async fn put_opts(
        &self,
        key: &ObjectKey,
        bytes: Bytes,
        opts: PutOptions,
    ) -> StoreResult<PutOutcome> {
        let e_tag = content_tag(&bytes);
        let mut st = self.lock();
        self.commit(&mut st, key, bytes, &opts.mode, opts.metadata, e_tag)
    }

    async fn delete_opts(
        &self,
        key: &ObjectKey,
        opts: DeleteOptions,
    ) -> StoreResult<DeleteOutcome> {
        let mut st = self.lock();
        let Some(o) = st.objects.get(key.as_str()) else {
            return Ok(DeleteOutcome::NotFound);
        };
        if let Some(expected) = &opts.if_match
            && !o.meta.e_tag.strong_eq(expected)
        {
            return Ok(DeleteOutcome::Superseded);
        }
        st.objects.remove(key.as_str());
        Ok(DeleteOutcome::Deleted)
    }

    async fn list(&self, prefix: &str) -> StoreResult<Vec<ObjectMeta>> {
        check_list_prefix(prefix)?;
        Ok(self
            .lock()
            .objects
            .range(prefix.to_owned()..)
            .take_while(|(k, _)| k.starts_with(prefix))
            .map(|(_, o)| o.meta.clone())
            .collect())
    }

    async fn create_multipart(&self, key: &ObjectKey, opts: &PutOptions) -> StoreResult<String> {
        let initiated = self.clock.now();
        let mut st = self.lock();
        st.seq += 1;
        let id = format!("upload-{:016x}", st.seq);
        st.uploads.insert(
            id.clone(),
            Upload {
                key: key.to_string(),
                metadata: opts.metadata.clone(),
                initiated,
                parts: BTreeMap::new(),
            },
        );
        Ok(id)
    }

    async fn upload_part(
        &self,
        key: &ObjectKey,
        upload_id: &str,
        part_number: u32,
        bytes: Bytes,
    ) -> StoreResult<PartId> {
        let e_tag = content_tag(&bytes);
        let mut st = self.lock();
        let upload = st
            .uploads
            .get_mut(upload_id)
            .filter(|u| u.key == key.as_str())
            .ok_or_else(|| no_upload(upload_id))?;
        let size = bytes.len() as u64;
        upload.parts.insert(part_number, (e_tag.clone(), bytes));
        Ok(PartId {
            part_number,
            e_tag,
            size,
        })
    }

    async fn complete_multipart(
        &self,
        key: &ObjectKey,
        upload_id: &str,
        parts: &[PartId],
        mode: &PutMode,
    ) -> StoreResult<PutOutcome> {
        let mut st = self.lock();
        let upload = st
            .uploads
            .get(upload_id)
            .filter(|u| u.key == key.as_str())
            .ok_or_else(|| no_upload(upload_id))?;
        let mut whole = BytesMut::new();
        let mut digests = blake3::Hasher::new();
        for p in parts {
            match upload.parts.get(&p.part_number) {
                Some((tag, bytes)) if tag.strong_eq(&p.e_tag) => {
                    whole.extend_from_slice(bytes);
                    digests.update(tag.as_str().as_bytes());
                }
                _ => {
                    return Err(refused(
                        "complete multipart upload",
                        key,
                        MemoryError::InvalidPart(p.part_number),
                    ));
                }
            }
        }
        // The object is assembled here, before anything is published: one whose size is not
        // the parts' is refused without writing it (nothing to withdraw).
        if let Err(differs) = check_completed(parts, whole.len() as u64) {
            return Err(CompletionMismatch {
                differs,
                withdrawn: true,
            }
            .into_store(key));
        }
        let metadata = upload.metadata.clone();
        // S3's multipart ETag: a digest of the parts' tags, and the part count.
        let hash = digests.finalize().to_hex();
        let e_tag = ETag::new(format!("\"{}-{}\"", &hash[..32], parts.len()));
        st.uploads.remove(upload_id);
        self.commit(&mut st, key, whole.freeze(), mode, metadata, e_tag)
    }

    async fn abort_multipart(&self, _key: &ObjectKey, upload_id: &str) -> StoreResult<()> {
        self.lock().uploads.remove(upload_id);
        Ok(())
    }

    async fn list_multipart(
        &self,
        prefix: &str,
        older_than: Option<SystemTime>,
    ) -> StoreResult<Vec<MultipartUpload>> {
        check_list_prefix(prefix)?;
        Ok(self
            .lock()
            .uploads
            .iter()
            .filter(|(_, u)| u.key.starts_with(prefix))
            .filter(|(_, u)| older_than.is_none_or(|t| u.initiated < t))
            .map(|(id, u)| MultipartUpload {
                key: u.key.clone(),
                upload_id: id.clone(),
                initiated: u.initiated,
            })
            .collect())
    }
}

//! The object-store contract: create-if-absent, compare-and-swap, conditional reads and
//! deletes, multipart uploads whose completion honours the same [`PutMode`].
//!
//! Every store's [`ETag`] is the token its own preconditions evaluate, compared strongly: the
//! ETag on S3, Azure and the local disk, the object's generation on GCS (quoted), so a
//! condition taken from an [`ObjectMeta`] means "this very content" on each of them.
//!
//! A rejected precondition is the mechanism succeeding, so it is an outcome value
//! ([`PutOutcome::AlreadyPresent`], [`PutOutcome::Superseded`]), never an error. Backends
//! normalise their provider's answers (S3 412 vs 409, Azure 409 vs 412) into these values.

use crate::error::StoreResult;
use crate::etag::{ConditionList, ETag};
use crate::keys::ObjectKey;
use async_trait::async_trait;
use bytes::Bytes;
use std::collections::BTreeMap;
use std::ops::Range;
use std::time::SystemTime;

/// The user-metadata name of a conditional write's attempt token: read back after a refusal,
/// it tells a write whose answer was lost (the object in place is its own) from a collision.
pub const ATTEMPT_METADATA: &str = "tilegate-attempt";

/// An object's metadata.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjectMeta {
    pub key: String,
    pub size: u64,
    pub e_tag: ETag,
    pub last_modified: SystemTime,
    /// A provider version (GCS generation, S3 version ID) where the backend has one.
    pub version: Option<String>,
    /// User metadata stored with the object.
    pub metadata: BTreeMap<String, String>,
}

/// The version an [`PutMode::Update`] or conditional delete expects to replace. Opaque: an
/// ETag (S3, Azure, local) or a generation number (GCS), as the backend understands.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct UpdateVersion {
    pub e_tag: Option<ETag>,
    pub version: Option<String>,
}

impl UpdateVersion {
    pub fn etag(e_tag: ETag) -> Self {
        Self {
            e_tag: Some(e_tag),
            version: None,
        }
    }
}

impl From<&ObjectMeta> for UpdateVersion {
    fn from(m: &ObjectMeta) -> Self {
        Self {
            e_tag: Some(m.e_tag.clone()),
            version: m.version.clone(),
        }
    }
}

/// How a write treats an existing object.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum PutMode {
    /// Replace whatever is there (never used for deterministic outputs).
    #[default]
    Overwrite,
    /// Create only if absent (`If-None-Match: *`, `link(2)`).
    Create,
    /// Replace only the given version (`If-Match`).
    Update(UpdateVersion),
}

/// What a successful write must learn about the object it wrote.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Describe {
    /// Everything as the store has it, `last_modified` included (S3's PutObject answer has
    /// no Last-Modified: it is read back with a HEAD `If-Match` the written ETag).
    #[default]
    Exact,
    /// What the write's own answer says (size, ETag, version); where the answer has no
    /// modification time, `last_modified` is the time the answer came, and no further request
    /// is made. For writers that record only the ETag and size (a tile's manifest row).
    FromAnswer,
}

/// Options for a write.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PutOptions {
    pub mode: PutMode,
    pub metadata: BTreeMap<String, String>,
    pub describe: Describe,
}

impl PutOptions {
    pub fn create() -> Self {
        Self {
            mode: PutMode::Create,
            ..Self::default()
        }
    }

    pub fn update(v: UpdateVersion) -> Self {
        Self {
            mode: PutMode::Update(v),
            ..Self::default()
        }
    }
}

/// The result of a write that the storage engine evaluated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PutOutcome {
    /// The bytes are in place; the new object's metadata.
    Written(ObjectMeta),
    /// `Create` found an object already there (a duplicate reached the end state first).
    AlreadyPresent,
    /// `Update` found a different version than expected (something rewrote it meanwhile).
    Superseded,
}

/// Options for a read.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct GetOptions {
    /// Half-open byte range; `end` past the object's size is clamped.
    pub range: Option<Range<u64>>,
    /// Serve only if the current ETag strongly matches (else [`GetOutcome::PreconditionFailed`]).
    pub if_match: Option<ConditionList>,
    /// Serve only if the current ETag does not match (else [`GetOutcome::NotModified`]).
    pub if_none_match: Option<ConditionList>,
}

/// An object's bytes (or a range of them) with its metadata.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GetResult {
    pub meta: ObjectMeta,
    pub range: Range<u64>,
    pub bytes: Bytes,
}

/// The result of a conditional read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GetOutcome {
    Found(GetResult),
    /// 304-shaped: `If-None-Match` matched; no body.
    NotModified,
    /// 412-shaped: `If-Match` did not match.
    PreconditionFailed,
}

/// Options for a delete.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct DeleteOptions {
    pub if_match: Option<ETag>,
}

/// The result of a delete.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeleteOutcome {
    Deleted,
    /// Nothing was there.
    NotFound,
    /// `if_match` did not match the current object; it was left alone.
    Superseded,
}

/// A byte range the contract refuses, the same on every store (S3's 416 and an empty request).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RangeError {
    /// The range starts at or past the end of a non-empty object.
    #[error("serve byte range {start}..{end}: the object has only {size} bytes")]
    NotSatisfiable { start: u64, end: u64, size: u64 },
    /// The range's end is not after its start.
    #[error("serve byte range {start}..{end}: the range is empty or reversed")]
    Empty { start: u64, end: u64 },
}

impl RangeError {
    /// Refuse a requested range whose end is not after its start (before any request).
    pub fn check(range: Option<&Range<u64>>) -> Result<(), Self> {
        match range {
            Some(r) if r.end <= r.start => Err(Self::Empty {
                start: r.start,
                end: r.end,
            }),
            _ => Ok(()),
        }
    }

    /// The half-open range to serve from an object of `size` bytes, as S3 serves it: the end
    /// is clamped, any range of an empty object is `0..0`, and a start at or past the end of
    /// a non-empty object is refused.
    pub fn serve(range: Option<&Range<u64>>, size: u64) -> Result<Range<u64>, Self> {
        Self::check(range)?;
        let Some(r) = range else {
            return Ok(0..size);
        };
        if size == 0 {
            return Ok(0..0);
        }
        if r.start >= size {
            return Err(Self::NotSatisfiable {
                start: r.start,
                end: r.end,
                size,
            });
        }
        Ok(r.start..r.end.min(size))
    }

    /// The contract's error for a read of `key` refused so.
    pub fn into_store(self, key: &str) -> crate::StoreError {
        crate::StoreError::backend("get", key, crate::Retry::Permanent, self)
    }
}

/// An upload in progress.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MultipartUpload {
    pub key: String,
    pub upload_id: String,
    pub initiated: SystemTime,
}

/// A part uploaded to a multipart upload. Opaque to callers: they hand it back to
/// [`ObjectStore::complete_multipart`] unchanged.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartId {
    /// 1-based part number.
    pub part_number: u32,
    /// The store's token for the part: S3's part ETag, the local spool's digest, an Azure
    /// block ID, a GCS session offset.
    pub e_tag: ETag,
    /// The part's length in bytes, as the caller handed it to
    /// [`ObjectStore::upload_part`]: a completion checks the object it publishes against the
    /// sum of these (see [`check_completed`]).
    pub size: u64,
}

impl PartId {
    /// The bytes `parts` make together: the size their completed object must have.
    pub fn total(parts: &[PartId]) -> u64 {
        parts.iter().map(|p| p.size).sum()
    }
}

/// How a completed upload differs from what its parts make.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Differs {
    /// The object's size is not the sum of the parts' sizes.
    Size { meant: u64, found: u64 },
    /// The object's checksum (as the store reports it) is not the one its parts make.
    Checksum { meant: String, found: String },
}

impl std::fmt::Display for Differs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Size { meant, found } => {
                write!(f, "the parts make {meant} bytes, the object has {found}")
            }
            Self::Checksum { meant, found } => write!(
                f,
                "the parts make checksum {meant}, the object's is {found}"
            ),
        }
    }
}

/// A multipart completion that published something other than the object its parts make (a
/// provider that kept fewer bytes than it was sent, a part lost on the way): the completion
/// answers this instead of `Written`, as a permanent [`crate::StoreError::Backend`] (the
/// upload is spent; the caller starts another). `withdrawn`: no wrong object is left at the
/// key — the store checked before publishing and published nothing, or deleted the object it
/// had just published (only that version, by `If-Match` on its ETag) — so a create-if-absent
/// key is free again for the retry; `false` if that delete failed or found another version in
/// place (the store logs which).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("publish the uploaded parts: {differs}; {}", if *.withdrawn { "the object was withdrawn" } else { "the object could not be withdrawn" })]
pub struct CompletionMismatch {
    pub differs: Differs,
    pub withdrawn: bool,
}

impl CompletionMismatch {
    /// The mismatch a store error reports, if it is one.
    pub fn of(e: &crate::StoreError) -> Option<&Self> {
        match e {
            crate::StoreError::Backend { source, .. } => source.downcast_ref(),
            _ => None,
        }
    }

    /// The permanent error a completion of `key` answers with.
    pub fn into_store(self, key: &str) -> crate::StoreError {
        crate::StoreError::backend(
            "complete multipart upload",
            key,
            crate::Retry::Permanent,
            self,
        )
    }
}

/// Whether an object of `size` bytes, completed from `parts`, is what they make: its size is
/// their sizes' sum. (A store that can also compare a checksum does so itself.)
pub fn check_completed(parts: &[PartId], size: u64) -> Result<(), Differs> {
    let meant = PartId::total(parts);
    if size == meant {
        Ok(())
    } else {
        Err(Differs::Size { meant, found: size })
    }
}

/// An object store. Keys are [`ObjectKey`]s, checked where they are made, so no store checks
/// one again; a list prefix is a plain string that each store checks
/// ([`crate::keys::check_list_prefix`]).
#[async_trait]
pub trait ObjectStore: Send + Sync + std::fmt::Debug {
    /// A short name for logs and errors (`local`, `s3`).
    fn name(&self) -> &'static str;

    /// The object's metadata, or `None` if absent.
    async fn head(&self, key: &ObjectKey) -> StoreResult<Option<ObjectMeta>>;

    /// Read the whole object or a range, optionally conditional. A missing object is
    /// [`crate::StoreError::NotFound`].
    async fn get_opts(&self, key: &ObjectKey, opts: GetOptions) -> StoreResult<GetOutcome>;

    /// Write an object in one request, honouring `opts.mode` in that same request.
    async fn put_opts(
        &self,
        key: &ObjectKey,
        bytes: Bytes,
        opts: PutOptions,
    ) -> StoreResult<PutOutcome>;

    /// Delete, optionally only if the current ETag matches.
    async fn delete_opts(&self, key: &ObjectKey, opts: DeleteOptions)
    -> StoreResult<DeleteOutcome>;

    /// A URL that reads the object at `key` with no other credential until `expires` from
    /// now. Only for keys that never change (attempt keys), since a URL is not pinned to a
    /// version. A store that cannot sign refuses with [`crate::StoreError::NotImplemented`].
    async fn presign_get(
        &self,
        key: &ObjectKey,
        expires: std::time::Duration,
    ) -> StoreResult<String> {
        let _ = (key, expires);
        Err(crate::StoreError::NotImplemented {
            operation: "sign a read URL",
            implementer: self.name(),
        })
    }

    /// Every object under `prefix` (for reports and reconciliation; never to count outputs).
    async fn list(&self, prefix: &str) -> StoreResult<Vec<ObjectMeta>>;

    /// Start a multipart upload that will be completed under `opts.mode`. Metadata is applied
    /// at completion. A store may fix the upload's precondition here (a GCS resumable session
    /// carries it from its start) and refuse a completion under another mode with
    /// `NotImplemented`.
    async fn create_multipart(&self, key: &ObjectKey, opts: &PutOptions) -> StoreResult<String>;

    /// Upload one part (1-based `part_number`).
    async fn upload_part(
        &self,
        key: &ObjectKey,
        upload_id: &str,
        part_number: u32,
        bytes: Bytes,
    ) -> StoreResult<PartId>;

    /// Complete an upload; `mode` is evaluated here, atomically with publication.
    async fn complete_multipart(
        &self,
        key: &ObjectKey,
        upload_id: &str,
        parts: &[PartId],
        mode: &PutMode,
    ) -> StoreResult<PutOutcome>;

    /// Abandon an upload and free its parts.
    async fn abort_multipart(&self, key: &ObjectKey, upload_id: &str) -> StoreResult<()>;

    /// Incomplete uploads under `prefix`, optionally only those initiated before `older_than`.
    async fn list_multipart(
        &self,
        prefix: &str,
        older_than: Option<SystemTime>,
    ) -> StoreResult<Vec<MultipartUpload>>;
}

/// What [`ObjectStoreExt::create_all`] did: Creates that wrote, and Creates refused because
/// the object was in place (a duplicate's, or an earlier try's).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Created {
    pub written: u64,
    pub present: u64,
}

/// Conveniences over [`ObjectStore`].
#[async_trait]
pub trait ObjectStoreExt: ObjectStore {
    /// Create if absent.
    async fn put_create(&self, key: &ObjectKey, bytes: Bytes) -> StoreResult<PutOutcome> {
        self.put_opts(key, bytes, PutOptions::create()).await
    }

    /// Create each object if absent, `concurrency` at a time; a key given twice is written
    /// once. A Create answered `Superseded` (which no store should answer) is a permanent error.
    async fn create_all(
        &self,
        writes: Vec<(ObjectKey, Bytes)>,
        concurrency: usize,
    ) -> StoreResult<Created> {
        use futures::{StreamExt as _, TryStreamExt as _};
        let mut seen = std::collections::HashSet::new();
        let writes: Vec<_> = writes
            .into_iter()
            .filter(|(k, _)| seen.insert(k.clone()))
            .collect();
        let outcomes: Vec<bool> = futures::stream::iter(writes)
            .map(|(key, bytes)| async move {
                match self.put_opts(&key, bytes, PutOptions::create()).await? {
                    PutOutcome::Written(_) => Ok(true),
                    PutOutcome::AlreadyPresent => Ok(false),
                    PutOutcome::Superseded => Err(crate::error::StoreError::backend(
                        "create object",
                        key.as_str(),
                        crate::error::Retry::Permanent,
                        "the store answered a Create with Superseded",
                    )),
                }
            })
            .buffer_unordered(concurrency.max(1))
            .try_collect()
            .await?;
        let written = outcomes.iter().filter(|w| **w).count() as u64;
        Ok(Created {
            written,
            present: outcomes.len() as u64 - written,
        })
    }

    /// Replace only `version`.
    async fn put_update(
        &self,
        key: &ObjectKey,
        bytes: Bytes,
        version: UpdateVersion,
    ) -> StoreResult<PutOutcome> {
        self.put_opts(key, bytes, PutOptions::update(version)).await
    }

    /// Read a whole object unconditionally.
    async fn get_bytes(&self, key: &ObjectKey) -> StoreResult<GetResult> {
        match self.get_opts(key, GetOptions::default()).await? {
            GetOutcome::Found(r) => Ok(r),
            GetOutcome::NotModified | GetOutcome::PreconditionFailed => {
                Err(crate::StoreError::backend(
                    "get",
                    key,
                    crate::Retry::Permanent,
                    "backend answered an unconditional read with a precondition outcome",
                ))
            }
        }
    }

    /// Read `range` of the version `e_tag` of `key` (`If-Match`): `None` if the object is no
    /// longer that version. For reading a recorded object in pieces, every piece the same one.
    async fn get_range_of(
        &self,
        key: &ObjectKey,
        range: Range<u64>,
        e_tag: &ETag,
    ) -> StoreResult<Option<Bytes>> {
        let opts = GetOptions {
            range: Some(range),
            if_match: Some(ConditionList::one(e_tag.clone())),
            ..GetOptions::default()
        };
        Ok(match self.get_opts(key, opts).await? {
            GetOutcome::Found(r) => Some(r.bytes),
            GetOutcome::NotModified | GetOutcome::PreconditionFailed => None,
        })
    }

    /// Read the version `e_tag` (of `size` bytes) of `key` in pieces of at most `chunk` bytes,
    /// in order, handing each to `each`: never the whole object in memory, every piece from
    /// the same version. `false` (after the pieces read so far) if the object is no longer
    /// that version.
    async fn read_version_in_chunks(
        &self,
        key: &ObjectKey,
        (size, e_tag): (u64, &ETag),
        chunk: u64,
        each: &mut (dyn for<'p> FnMut(&'p [u8]) -> std::io::Result<()> + Send),
    ) -> StoreResult<bool> {
        let mut at = 0;
        while at < size {
            let range = at..(at + chunk.max(1)).min(size);
            let Some(part) = self.get_range_of(key, range.clone(), e_tag).await? else {
                return Ok(false);
            };
            each(&part).map_err(|e| {
                crate::StoreError::backend(
                    "hand on a piece read",
                    key,
                    crate::Retry::Permanent,
                    e.to_string(),
                )
            })?;
            at = range.end;
        }
        Ok(true)
    }

    /// Read a byte range unconditionally.
    async fn get_range(&self, key: &ObjectKey, range: Range<u64>) -> StoreResult<GetResult> {
        let opts = GetOptions {
            range: Some(range),
            ..GetOptions::default()
        };
        match self.get_opts(key, opts).await? {
            GetOutcome::Found(r) => Ok(r),
            GetOutcome::NotModified | GetOutcome::PreconditionFailed => {
                Err(crate::StoreError::backend(
                    "get",
                    key,
                    crate::Retry::Permanent,
                    "backend answered an unconditional read with a precondition outcome",
                ))
            }
        }
    }
}

impl<T: ObjectStore + ?Sized> ObjectStoreExt for T {}

/// The answer of a completion that a store checks after publishing (the provider assembled
/// the object): `outcome` as it is when it is no `Written`, or a `Written` object that is what
/// `parts` make ([`check_completed`], then `also` — a store's own checksum comparison, if
/// any); otherwise the object just published is withdrawn ([`withdraw_completed`]) and the
/// completion answers [`CompletionMismatch`].
pub async fn verify_completed<S: ObjectStore + ?Sized>(
    store: &S,
    key: &ObjectKey,
    parts: &[PartId],
    outcome: PutOutcome,
    also: impl FnOnce(&ObjectMeta) -> Result<(), Differs>,
) -> StoreResult<PutOutcome> {
    let PutOutcome::Written(meta) = &outcome else {
        return Ok(outcome);
    };
    match check_completed(parts, meta.size).and_then(|()| also(meta)) {
        Ok(()) => Ok(outcome),
        Err(differs) => Err(withdraw_completed(store, key, meta, differs).await),
    }
}

/// Delete the object a completion just published at `key` because it is not what was meant —
/// only that version (`If-Match` on its ETag: a later writer's object is left alone) — and the
/// completion's error. A create-if-absent key holding the wrong bytes would be permanent;
/// deleted, the caller's retry publishes the right ones.
pub async fn withdraw_completed<S: ObjectStore + ?Sized>(
    store: &S,
    key: &ObjectKey,
    meta: &ObjectMeta,
    differs: Differs,
) -> crate::StoreError {
    let opts = DeleteOptions {
        if_match: Some(meta.e_tag.clone()),
    };
    let withdrawn = matches!(
        store.delete_opts(key, opts).await,
        Ok(DeleteOutcome::Deleted | DeleteOutcome::NotFound)
    );
    CompletionMismatch { differs, withdrawn }.into_store(key)
}

#[cfg(test)]
mod tests {
    use super::{CompletionMismatch, Differs, PartId, RangeError, check_completed};
    use crate::{ETag, Retry, StoreError};

    #[test]
    fn a_completion_is_checked_against_its_parts_sizes() {
        let part = |n, size| PartId {
            part_number: n,
            e_tag: ETag::new(format!("\"{n}\"")),
            size,
        };
        let parts = [part(1, 5 << 20), part(2, 1234)];
        assert_eq!(PartId::total(&parts), (5 << 20) + 1234);
        assert_eq!(check_completed(&parts, (5 << 20) + 1234), Ok(()));
        assert_eq!(
            check_completed(&parts, 5 << 20),
            Err(Differs::Size {
                meant: (5 << 20) + 1234,
                found: 5 << 20
            })
        );
        let e = CompletionMismatch {
            differs: Differs::Size { meant: 2, found: 1 },
            withdrawn: true,
        }
        .into_store("k");
        assert_eq!(e.retry(), Retry::Permanent);
        assert!(CompletionMismatch::of(&e).is_some_and(|m| m.withdrawn));
        let other = StoreError::backend("put", "k", Retry::Retryable, "x");
        assert!(CompletionMismatch::of(&other).is_none());
        assert_eq!(
            crate::error::chain(&e),
            "complete multipart upload `k`: publish the uploaded parts: the parts make 2 bytes, \
             the object has 1; the object was withdrawn"
        );
    }

    #[test]
    fn ranges_are_served_as_s3_serves_them() {
        let serve = |r: Option<std::ops::Range<u64>>, size| RangeError::serve(r.as_ref(), size);
        assert_eq!(serve(None, 10), Ok(0..10));
        assert_eq!(serve(Some(2..5), 10), Ok(2..5));
        assert_eq!(serve(Some(7..100), 10), Ok(7..10), "the end is clamped");
        assert_eq!(serve(Some(0..5), 0), Ok(0..0), "an empty object");
        assert!(matches!(
            serve(Some(10..12), 10),
            Err(RangeError::NotSatisfiable { size: 10, .. })
        ));
        assert!(matches!(
            serve(Some(4..4), 10),
            Err(RangeError::Empty { .. })
        ));
        assert!(matches!(
            serve(Some(std::ops::Range { start: 5, end: 4 }), 0),
            Err(RangeError::Empty { .. })
        ));
    }
}

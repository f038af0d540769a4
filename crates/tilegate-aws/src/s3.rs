//! [`S3Store`]: the [`ObjectStore`] contract on S3. Create is `PutObject` with
//! `If-None-Match: *`, Update is `If-Match: <etag>`, and multipart completion carries the same
//! header — the storage engine refuses the second copy in the request that would write it.
//!
//! Provider behaviour normalised here (S3 User Guide, "Add preconditions to S3 operations with
//! conditional requests"):
//! - 412 `PreconditionFailed` on a Create means an object is in place → `AlreadyPresent`; on an
//!   Update (If-Match), or a 404 `NoSuchKey` for an If-Match on an absent key, the version is
//!   gone → `Superseded`.
//! - 409 `ConditionalRequestConflict` ("a concurrent write or delete was in flight") proves
//!   nothing; the same conditional request is sent again (bounded, see [`crate::retry`]) and the
//!   final answer is classified. On `CompleteMultipartUpload` a 409 means the upload must be
//!   re-initiated, so it is a retryable error there, for the claim gate to act on.
//! - A 304 on a conditional GET has no error code: it is recognised by its status.
//! - A completion states the object's size (`x-amz-mp-object-size`, which S3 checks before
//!   publishing), and the object it published is checked against its parts' sizes and part
//!   count (the ETag's `-N`): one that differs is deleted (`If-Match` on its ETag) and the
//!   completion answers `CompletionMismatch`, never `Written`.
//! - `DeleteObject` answers 204 whether or not the key existed, so `DeleteOutcome::NotFound` is
//!   learnt from a HEAD beforehand. That HEAD only *reports*; a conditional delete is still
//!   guarded by the `If-Match` sent with the DELETE itself.
//!
//! What it cannot do: an `UpdateVersion` without an ETag (S3 version IDs are not a write
//! precondition) is `NotImplemented`; user-metadata names must be lowercase (S3 returns them
//! lowercased), and values printable ASCII, or the write is refused rather than altered.
//! `list` returns no user metadata (S3's listing does not carry it).
//!
//! Gaps of the emulator (moto 5.2.5) absorbed here, each harmless on S3:
//! - it ignores `If-Match` on `CompleteMultipartUpload`, so an Update completion first HEADs
//!   the key and answers `Superseded` without completing when the ETag already differs (the
//!   If-Match is still sent: on S3 it is the guard);
//! - it answers a part or a completion for an aborted upload with a 500 instead of 404
//!   `NoSuchUpload`, so the upload's existence is checked by listing (before a completion,
//!   and after a 500 on a part);
//! - it reports every incomplete upload as initiated at 2010-11-10T20:48:33Z; for those the
//!   time this handle started the upload is used, and an upload of unknown age is never listed
//!   as older than T.

use crate::config::{load_sdk_config, s3_client};
use crate::error::{Answer, AwsError, Failure, own_error};
use crate::retry::{self, Idempotency, RetryPolicy};
use crate::url::{S3Location, parse_s3};
use async_trait::async_trait;
use aws_sdk_s3::primitives::{ByteStream, DateTime};
use aws_sdk_s3::types::{CompletedMultipartUpload, CompletedPart};
use bytes::Bytes;
use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::ops::Range;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tilegate_core::keys::{check_list_prefix, check_store_key as check_key};
use tilegate_core::object::{
    CompletionMismatch, DeleteOptions, DeleteOutcome, Describe, Differs, GetOptions, GetOutcome,
    GetResult, MultipartUpload, ObjectMeta, ObjectStore, PartId, PutMode, PutOptions, PutOutcome,
    RangeError, verify_completed,
};
use tilegate_core::{ETag, Retry, StoreError, StoreResult};
use tilegate_retry::{Decision, IfMatch, IfNoneMatch};
use tracing::{debug, info, warn};

const SERVICE: &str = "s3";

/// How often a multi-step conditional read re-reads an object that keeps changing.
const STABLE_READ_ATTEMPTS: u32 = 5;

/// moto 5.2.5 answers `ListMultipartUploads` with this `Initiated` for every upload (a
/// constant in its response template): it records no initiation time at all.
const MOTO_PLACEHOLDER_INITIATED_SECS: u64 = 1_289_422_113; // 2010-11-10T20:48:33Z

/// Uploads this handle started, remembered for [`MOTO_PLACEHOLDER_INITIATED_SECS`].
const UPLOAD_LEDGER_CAP: usize = 10_000;

/// An [`ObjectStore`] over one S3 bucket and key prefix. Cheap to clone.
#[derive(Debug, Clone)]
pub struct S3Store {
    client: aws_sdk_s3::Client,
    bucket: String,
    /// `""` or `"seg/seg/"`: prepended to every key.
    key_prefix: String,
    retry: RetryPolicy,
    /// Upload ID → when this handle created it; shared by clones.
    started: Arc<Mutex<HashMap<String, SystemTime>>>,
}

/// [`tilegate_retry::conditional_write`] for the S3 backend's [`Failure`]s.
async fn conditional_write<T, F, Fut>(
    policy: &RetryPolicy,
    idempotency: Idempotency,
    mode: &PutMode,
    key: &str,
    send: F,
) -> Result<Decision<T>, Failure>
where
    F: FnMut(u32) -> Fut,
    Fut: Future<Output = Result<T, Failure>>,
{
    tilegate_retry::conditional_write(policy, idempotency, mode, key, send).await
}

/// The ETag an Update expects, or `NotImplemented` for a version without one.
fn expected_etag(mode: &PutMode) -> StoreResult<Option<&ETag>> {
    match mode {
        PutMode::Overwrite | PutMode::Create => Ok(None),
        PutMode::Update(v) => v
            .e_tag
            .as_ref()
            .map(Some)
            .ok_or(StoreError::NotImplemented {
                operation: "update by provider version without an etag",
                implementer: "s3",
            }),
    }
}

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

/// Refuse user metadata that S3 would not return unchanged: names are sent as
/// `x-amz-meta-<name>` headers and come back lowercased, values must be header-safe ASCII.
fn check_metadata(metadata: &BTreeMap<String, String>) -> StoreResult<()> {
    for (name, value) in metadata {
        let name_ok = !name.is_empty()
            && name
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || matches!(b, b'-' | b'_'));
        let value_ok = value.bytes().all(|b| (0x20..0x7f).contains(&b));
        if !name_ok || !value_ok {
            return Err(StoreError::InvalidKey {
                key: name.chars().take(64).flat_map(char::escape_debug).collect(),
                reason: "S3 user metadata needs lowercase names of a-z, 0-9, `-`, `_` and \
                         printable ASCII values to round-trip"
                    .to_owned(),
            });
        }
    }
    Ok(())
}

fn to_system_time(t: Option<&DateTime>) -> SystemTime {
    t.and_then(|t| SystemTime::try_from(*t).ok())
        .unwrap_or(UNIX_EPOCH)
}

/// The current time, truncated to whole seconds as S3 reports LastModified.
fn now_whole_seconds() -> SystemTime {
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs();
    UNIX_EPOCH + Duration::from_secs(secs)
}

fn size_of(len: Option<i64>) -> u64 {
    len.and_then(|l| u64::try_from(l).ok()).unwrap_or(0)
}

fn metadata_of(m: Option<&HashMap<String, String>>) -> BTreeMap<String, String> {
    m.map(|m| m.iter().map(|(k, v)| (k.clone(), v.clone())).collect())
        .unwrap_or_default()
}

/// Parse `Content-Range: bytes START-END/TOTAL` into (START..END+1, TOTAL).
fn parse_content_range(v: &str) -> Option<(Range<u64>, u64)> {
    let rest = v.trim().strip_prefix("bytes ")?;
    let (span, total) = rest.split_once('/')?;
    let (a, b) = span.split_once('-')?;
    let (a, b): (u64, u64) = (a.trim().parse().ok()?, b.trim().parse().ok()?);
    Some((a..b.checked_add(1)?, total.trim().parse().ok()?))
}

impl S3Store {
    /// A store over `location`, with the given client.
    pub fn new(client: aws_sdk_s3::Client, location: S3Location) -> Self {
        let key_prefix = if location.prefix.is_empty() {
            String::new()
        } else {
            format!("{}/", location.prefix)
        };
        Self {
            client,
            bucket: location.bucket,
            key_prefix,
            retry: RetryPolicy::default(),
            started: Arc::default(),
        }
    }

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

    /// Open `s3://bucket[/prefix]` with the standard AWS configuration.
    pub async fn connect(url: &str) -> StoreResult<Self> {
        let location = parse_s3(url)?;
        let sdk = load_sdk_config().await;
        Ok(Self::new(s3_client(&sdk), location))
    }

    /// Replace the retry policy.
    pub fn with_retry_policy(mut self, policy: RetryPolicy) -> Self {
        self.retry = policy;
        self
    }

    pub fn bucket(&self) -> &str {
        &self.bucket
    }

    /// The key prefix (without a trailing `/`), empty for the bucket's root.
    pub fn prefix(&self) -> &str {
        self.key_prefix.trim_end_matches('/')
    }

    /// The client, for tools that need S3 calls the contract does not cover.
    pub fn client(&self) -> &aws_sdk_s3::Client {
        &self.client
    }

    fn full(&self, key: &str) -> String {
        format!("{}{key}", self.key_prefix)
    }

    fn strip<'a>(&self, full: &'a str) -> Option<&'a str> {
        full.strip_prefix(&self.key_prefix)
    }

    /// Create the bucket if it does not exist. Returns true if this call created it; a bucket
    /// this account already owns is success. `region`: where to create it (`us-east-1` needs no
    /// location constraint).
    pub async fn ensure_bucket(&self, region: Option<&str>) -> StoreResult<bool> {
        let bucket = self.bucket.clone();
        // In us-east-1, CreateBucket on a bucket this account owns answers 200 (a legacy of
        // S3's first region) rather than BucketAlreadyOwnedByYou: look first, to report
        // truthfully. The create itself is idempotent either way.
        if self.bucket_exists().await? {
            debug!(bucket = %self.bucket, outcome = "already-present", "create bucket");
            return Ok(false);
        }
        let r = retry::run(
            &self.retry,
            Idempotency::Idempotent,
            "create bucket",
            &bucket,
            |_| {
                let mut req = self.client.create_bucket().bucket(&bucket);
                if let Some(region) = region.filter(|r| *r != "us-east-1") {
                    use aws_sdk_s3::types::{BucketLocationConstraint, CreateBucketConfiguration};
                    req = req.create_bucket_configuration(
                        CreateBucketConfiguration::builder()
                            .location_constraint(BucketLocationConstraint::from(region))
                            .build(),
                    );
                }
                async move { req.send().await.map_err(|e| Failure::from_sdk(SERVICE, e)) }
            },
        )
        .await;
        match r {
            Ok(_) => {
                info!(bucket = %self.bucket, outcome = "created", "create bucket");
                Ok(true)
            }
            Err(f) if f.code.as_deref() == Some("BucketAlreadyOwnedByYou") => {
                debug!(bucket = %self.bucket, outcome = "already-present", "create bucket");
                Ok(false)
            }
            Err(f) => Err(f.into_store("create bucket", &self.bucket)),
        }
    }

    /// One `HeadBucket`.
    async fn head_bucket(&self) -> Result<(), Failure> {
        retry::run(
            &self.retry,
            Idempotency::Idempotent,
            "check bucket",
            &self.bucket,
            |_| {
                let req = self.client.head_bucket().bucket(&self.bucket);
                async move { req.send().await.map_err(|e| Failure::from_sdk(SERVICE, e)) }
            },
        )
        .await
        .map(|_| ())
    }

    /// True if the bucket exists and is ours to use; false if it is missing or if a 403 leaves
    /// it open (CreateBucket then answers BucketAlreadyOwnedByYou or BucketAlreadyExists).
    async fn bucket_exists(&self) -> StoreResult<bool> {
        match self.head_bucket().await {
            Ok(()) => Ok(true),
            Err(f) if matches!(f.status, Some(403 | 404)) => Ok(false),
            Err(f) => Err(f.into_store("check bucket", &self.bucket)),
        }
    }

    /// Check that the bucket exists (`HeadBucket`): a missing bucket is a permanent error here
    /// rather than every HEAD later answering "no such object" (a HEAD's 404 has no body to
    /// tell the two apart). A 403 cannot tell either (HeadBucket needs `s3:ListBucket`, which a
    /// writer-only role may lack): it is logged and accepted.
    pub async fn check_bucket(&self) -> StoreResult<()> {
        match self.head_bucket().await {
            Ok(()) => Ok(()),
            Err(f) if f.status == Some(403) => {
                warn!(bucket = %self.bucket, "cannot check the bucket (HeadBucket refused with 403); going on");
                Ok(())
            }
            Err(mut f) => {
                if f.status == Some(404) {
                    // HeadBucket's 404 has no body; it is the bucket that is missing.
                    f.answer = Answer::MissingResource;
                }
                Err(f.into_store("check bucket", &self.bucket))
            }
        }
    }

    /// HEAD, optionally `If-Match`. `Ok(None)`: no such object. A refused If-Match is the
    /// failure with [`Answer::PreconditionFailed`].
    async fn head_raw(
        &self,
        key: &str,
        if_match: Option<&ETag>,
    ) -> Result<Option<ObjectMeta>, Failure> {
        let full = self.full(key);
        let r = retry::run(&self.retry, Idempotency::Idempotent, "head", &full, |_| {
            let mut req = self.client.head_object().bucket(&self.bucket).key(&full);
            if let Some(t) = if_match {
                req = req.if_match(t.as_str());
            }
            async move { req.send().await.map_err(|e| Failure::from_sdk(SERVICE, e)) }
        })
        .await;
        match r {
            Ok(out) => Ok(Some(ObjectMeta {
                key: key.to_owned(),
                size: size_of(out.content_length()),
                e_tag: ETag::new(out.e_tag().unwrap_or_default()),
                last_modified: to_system_time(out.last_modified()),
                version: out.version_id().map(str::to_owned),
                metadata: metadata_of(out.metadata()),
            })),
            Err(f) if f.answer == Answer::NoSuchKey => Ok(None),
            Err(f) => Err(f),
        }
    }

    /// The metadata of the object a write just created with ETag `e_tag`: a HEAD pinned to
    /// that ETag (PutObject's answer carries no LastModified). If the object was replaced in
    /// the meantime, the write's own facts are reported, with the current second as
    /// LastModified.
    async fn written_meta(
        &self,
        key: &str,
        e_tag: Option<String>,
        known_size: Option<u64>,
        metadata: &BTreeMap<String, String>,
    ) -> StoreResult<ObjectMeta> {
        let Some(e_tag) = e_tag.map(ETag::new) else {
            // No ETag in the answer (a non-conforming S3): describe whatever is there.
            return self.head(key).await?.ok_or_else(|| StoreError::NotFound {
                what: "object",
                key: key.to_owned(),
            });
        };
        match self.head_raw(key, Some(&e_tag)).await {
            Ok(Some(m)) => Ok(m),
            Ok(None)
            | Err(Failure {
                answer: Answer::PreconditionFailed,
                ..
            }) => {
                let Some(size) = known_size else {
                    return Err(own_error(
                        "describe the completed upload",
                        key,
                        Retry::Permanent,
                        AwsError::ReplacedAfterWrite {
                            e_tag: e_tag.to_string(),
                        },
                    ));
                };
                debug!(store = "s3", key, e_tag = %e_tag, "object replaced right after the write; reporting the write's own metadata");
                Ok(ObjectMeta {
                    key: key.to_owned(),
                    size,
                    e_tag,
                    last_modified: now_whole_seconds(),
                    version: None,
                    metadata: metadata.clone(),
                })
            }
            Err(f) => Err(f.into_store("head", key)),
        }
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
            let page = retry::run(
                &self.retry,
                Idempotency::Idempotent,
                "list multipart uploads",
                full,
                |_| {
                    let req = self
                        .client
                        .list_multipart_uploads()
                        .bucket(&self.bucket)
                        .prefix(full)
                        .set_key_marker(key_marker.clone())
                        .set_upload_id_marker(id_marker.clone());
                    async move { req.send().await.map_err(|e| Failure::from_sdk(SERVICE, e)) }
                },
            )
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

    /// One GET with at most one If-Match and one If-None-Match tag, which S3 evaluates.
    async fn get_once(
        &self,
        key: &str,
        range: Option<Range<u64>>,
        if_match: Option<&ETag>,
        if_none_match: Option<&IfNoneMatch>,
    ) -> StoreResult<GetOutcome> {
        let full = self.full(key);
        let inm_header = match if_none_match {
            Some(IfNoneMatch::One(t)) => Some(t.clone()),
            _ => None,
        };
        let r = retry::run(&self.retry, Idempotency::Idempotent, "get", &full, |_| {
            let mut req = self.client.get_object().bucket(&self.bucket).key(&full);
            if let Some(r) = &range {
                req = req.range(format!("bytes={}-{}", r.start, r.end - 1));
            }
            if let Some(t) = if_match {
                req = req.if_match(t.as_str());
            }
            if let Some(t) = &inm_header {
                req = req.if_none_match(t.as_str());
            }
            async move {
                let out = req
                    .send()
                    .await
                    .map_err(|e| Failure::from_sdk(SERVICE, e))?;
                let total_and_range = out.content_range().and_then(parse_content_range);
                let meta = ObjectMeta {
                    key: String::new(),
                    size: size_of(out.content_length()),
                    e_tag: ETag::new(out.e_tag().unwrap_or_default()),
                    last_modified: to_system_time(out.last_modified()),
                    version: out.version_id().map(str::to_owned),
                    metadata: metadata_of(out.metadata()),
                };
                // Reading the body is part of the attempt: a connection lost mid-body is
                // re-asked (pinned to the same ETag by the caller when that matters).
                let bytes = out.body.collect().await.map_err(|e| {
                    Failure::own(
                        Answer::Transient,
                        AwsError::Transport {
                            service: SERVICE,
                            detail: format!("read the object body: {e}"),
                        },
                    )
                })?;
                Ok((meta, total_and_range, bytes.into_bytes()))
            }
        })
        .await;
        let (mut meta, total_and_range, mut bytes) = match r {
            Ok(v) => v,
            Err(f) => {
                return match f.answer {
                    Answer::NotModified => Ok(GetOutcome::NotModified),
                    Answer::PreconditionFailed => Ok(GetOutcome::PreconditionFailed),
                    Answer::InvalidRange => self.unsatisfiable(key, range).await,
                    _ => Err(f.into_store("get", key)),
                };
            }
        };
        meta.key = key.to_owned();
        let served = match (total_and_range, &range) {
            (Some((served, total)), _) => {
                meta.size = total;
                served
            }
            // A range asked for but the whole object served: cut it here.
            (None, Some(r)) => {
                let size = bytes.len() as u64;
                meta.size = size;
                let start = r.start.min(size);
                let end = r.end.min(size);
                bytes = bytes.slice(
                    usize::try_from(start).unwrap_or(usize::MAX)
                        ..usize::try_from(end).unwrap_or(usize::MAX),
                );
                start..end
            }
            (None, None) => 0..bytes.len() as u64,
        };
        if let Some(inm) = if_none_match
            && inm.matches(&meta.e_tag)
        {
            return Ok(GetOutcome::NotModified);
        }
        Ok(GetOutcome::Found(GetResult {
            meta,
            range: served,
            bytes,
        }))
    }

    /// A 416: served as an empty read for an empty object (as the local store does), else a
    /// permanent error naming the size.
    async fn unsatisfiable(&self, key: &str, range: Option<Range<u64>>) -> StoreResult<GetOutcome> {
        let r = range.unwrap_or(0..0);
        match self.head(key).await? {
            None => Err(StoreError::NotFound {
                what: "object",
                key: key.to_owned(),
            }),
            Some(meta) if meta.size == 0 => Ok(GetOutcome::Found(GetResult {
                meta,
                range: 0..0,
                bytes: Bytes::new(),
            })),
            Some(meta) => Err(RangeError::NotSatisfiable {
                start: r.start,
                end: r.end,
                size: meta.size,
            }
            .into_store(key)),
        }
    }
}

#[async_trait]
impl ObjectStore for S3Store {
    fn name(&self) -> &'static str {
        "s3"
    }

    async fn head(&self, key: &str) -> StoreResult<Option<ObjectMeta>> {
        check_key(key)?;
        self.head_raw(key, None)
            .await
            .map_err(|f| f.into_store("head", key))
    }

    async fn get_opts(&self, key: &str, opts: GetOptions) -> StoreResult<GetOutcome> {
        check_key(key)?;
        RangeError::check(opts.range.as_ref()).map_err(|e| e.into_store(key))?;
        let im = opts.if_match.as_ref().map(IfMatch::of);
        let inm = opts.if_none_match.as_ref().map(IfNoneMatch::of);
        // One request where S3 can evaluate the conditions itself: at most one tag each, and
        // not both (RFC 9110 orders If-Match first; S3 documents no order for the pair).
        match (&im, &inm) {
            (None | Some(IfMatch::Any), None) => {
                return self.get_once(key, opts.range, None, None).await;
            }
            (Some(IfMatch::One(t)), None) => {
                return self.get_once(key, opts.range, Some(t), None).await;
            }
            (None | Some(IfMatch::Any), Some(one @ IfNoneMatch::One(_))) => {
                return self.get_once(key, opts.range, None, Some(one)).await;
            }
            _ => {}
        }
        // Otherwise evaluate the conditions against a HEAD (a refusal is then true of the
        // version that HEAD saw), and read exactly that version with `If-Match: <its ETag>`.
        for _ in 0..STABLE_READ_ATTEMPTS {
            let Some(cur) = self.head(key).await? else {
                return Err(StoreError::NotFound {
                    what: "object",
                    key: key.to_owned(),
                });
            };
            if let Some(refused) =
                tilegate_retry::read_refusal(im.as_ref(), inm.as_ref(), &cur.e_tag)
            {
                return Ok(refused);
            }
            match self
                .get_once(key, opts.range.clone(), Some(&cur.e_tag), None)
                .await?
            {
                // Replaced between the HEAD and the GET: look again.
                GetOutcome::PreconditionFailed => continue,
                other => return Ok(other),
            }
        }
        Err(own_error(
            "get",
            key,
            Retry::Retryable,
            AwsError::Unstable {
                attempts: STABLE_READ_ATTEMPTS,
            },
        ))
    }

    async fn put_opts(&self, key: &str, bytes: Bytes, opts: PutOptions) -> StoreResult<PutOutcome> {
        check_key(key)?;
        check_metadata(&opts.metadata)?;
        let expected = expected_etag(&opts.mode)?.cloned();
        let full = self.full(key);
        let (stamped, token) = tilegate_retry::stamp(&opts);
        let metadata: HashMap<String, String> = match opts.mode {
            PutMode::Overwrite => opts.metadata.clone().into_iter().collect(),
            PutMode::Create | PutMode::Update(_) => stamped.clone().into_iter().collect(),
        };
        let size = bytes.len() as u64;
        let decision = conditional_write(
            &self.retry,
            Idempotency::Idempotent,
            &opts.mode,
            &full,
            |_| {
                let mut req = self
                    .client
                    .put_object()
                    .bucket(&self.bucket)
                    .key(&full)
                    .body(ByteStream::from(bytes.clone()))
                    .set_metadata(Some(metadata.clone()));
                match (&opts.mode, &expected) {
                    (PutMode::Create, _) => req = req.if_none_match("*"),
                    (PutMode::Update(_), Some(t)) => req = req.if_match(t.as_str()),
                    _ => {}
                }
                async move {
                    req.send()
                        .await
                        .map(|o| {
                            (
                                o.e_tag().map(str::to_owned),
                                o.version_id().map(str::to_owned),
                            )
                        })
                        .map_err(|e| Failure::from_sdk(SERVICE, e))
                }
            },
        )
        .await
        .map_err(|f| f.into_store("put", key))?;
        let describe = opts.describe;
        tilegate_retry::settle(
            "s3",
            key,
            "put",
            decision,
            &token,
            self.head(key),
            async |(e_tag, version)| match (describe, e_tag) {
                (Describe::FromAnswer, Some(e_tag)) => Ok(ObjectMeta {
                    key: key.to_owned(),
                    size,
                    e_tag: ETag::new(e_tag),
                    last_modified: SystemTime::now(),
                    version,
                    metadata: stamped.clone(),
                }),
                (_, e_tag) => self.written_meta(key, e_tag, Some(size), &stamped).await,
            },
        )
        .await
    }

    async fn delete_opts(&self, key: &str, opts: DeleteOptions) -> StoreResult<DeleteOutcome> {
        check_key(key)?;
        // DeleteObject answers 204 for an absent key, so absence is learnt from a HEAD. It only
        // reports: the delete itself is guarded by the If-Match it carries.
        let Some(current) = self.head(key).await? else {
            return Ok(DeleteOutcome::NotFound);
        };
        if let Some(expected) = &opts.if_match
            && !current.e_tag.strong_eq(expected)
        {
            debug!(store = "s3", key, outcome = "superseded", "delete");
            return Ok(DeleteOutcome::Superseded);
        }
        let full = self.full(key);
        let r = retry::run(
            &self.retry,
            Idempotency::Idempotent,
            "delete",
            &full,
            |_| {
                let mut req = self.client.delete_object().bucket(&self.bucket).key(&full);
                if let Some(t) = &opts.if_match {
                    req = req.if_match(t.as_str());
                }
                async move { req.send().await.map_err(|e| Failure::from_sdk(SERVICE, e)) }
            },
        )
        .await;
        match r {
            Ok(_) => {
                debug!(store = "s3", key, outcome = "deleted", "delete");
                Ok(DeleteOutcome::Deleted)
            }
            Err(f) if f.answer == Answer::PreconditionFailed => {
                debug!(store = "s3", key, outcome = "superseded", "delete");
                Ok(DeleteOutcome::Superseded)
            }
            // S3 answers an If-Match delete of an absent key with 404 NoSuchKey.
            Err(f) if f.answer == Answer::NoSuchKey => Ok(DeleteOutcome::NotFound),
            Err(f) => Err(f.into_store("delete", key)),
        }
    }

    /// A SigV4 presigned `GetObject`, signed locally with the configured credentials (no
    /// request). SigV4 URLs live at most 7 days; a longer `expires` is refused, not shortened.
    async fn presign_get(&self, key: &str, expires: Duration) -> StoreResult<String> {
        check_key(key)?;
        let full = self.full(key);
        let config =
            aws_sdk_s3::presigning::PresigningConfig::expires_in(expires).map_err(|e| {
                own_error(
                    "sign a read URL",
                    &full,
                    Retry::Permanent,
                    AwsError::Misconfigured {
                        what: format!("a URL valid for {expires:?}"),
                        reason: e.to_string(),
                    },
                )
            })?;
        let req = self
            .client
            .get_object()
            .bucket(&self.bucket)
            .key(&full)
            .presigned(config)
            .await
            .map_err(|e| Failure::from_sdk(SERVICE, e).into_store("sign a read URL", &full))?;
        Ok(req.uri().to_owned())
    }

    async fn list(&self, prefix: &str) -> StoreResult<Vec<ObjectMeta>> {
        check_list_prefix(prefix)?;
        let full = self.full(prefix);
        let mut out = Vec::new();
        let mut token: Option<String> = None;
        loop {
            let page = retry::run(&self.retry, Idempotency::Idempotent, "list", &full, |_| {
                let req = self
                    .client
                    .list_objects_v2()
                    .bucket(&self.bucket)
                    .prefix(&full)
                    .set_continuation_token(token.clone());
                async move { req.send().await.map_err(|e| Failure::from_sdk(SERVICE, e)) }
            })
            .await
            .map_err(|f| f.into_store("list", prefix))?;
            for o in page.contents() {
                let Some(key) = o.key().and_then(|k| self.strip(k)) else {
                    continue;
                };
                out.push(ObjectMeta {
                    key: key.to_owned(),
                    size: size_of(o.size()),
                    e_tag: ETag::new(o.e_tag().unwrap_or_default()),
                    last_modified: to_system_time(o.last_modified()),
                    version: None,
                    metadata: BTreeMap::new(),
                });
            }
            token = page.next_continuation_token().map(str::to_owned);
            if page.is_truncated() != Some(true) || token.is_none() {
                break;
            }
        }
        out.sort_by(|a, b| a.key.cmp(&b.key));
        Ok(out)
    }

    async fn create_multipart(&self, key: &str, opts: &PutOptions) -> StoreResult<String> {
        check_key(key)?;
        check_metadata(&opts.metadata)?;
        let full = self.full(key);
        let metadata: HashMap<String, String> = opts.metadata.clone().into_iter().collect();
        // A repeated create after a lost answer leaves an orphan upload, which the cleanup of
        // stale uploads (`list_multipart` + `abort_multipart`) removes.
        let out = retry::run(
            &self.retry,
            Idempotency::Idempotent,
            "create multipart upload",
            &full,
            |_| {
                let req = self
                    .client
                    .create_multipart_upload()
                    .bucket(&self.bucket)
                    .key(&full)
                    .set_metadata(Some(metadata.clone()));
                async move { req.send().await.map_err(|e| Failure::from_sdk(SERVICE, e)) }
            },
        )
        .await
        .map_err(|f| f.into_store("create multipart upload", key))?;
        let id = out.upload_id().unwrap_or_default().to_owned();
        if id.is_empty() {
            return Err(StoreError::Corrupt {
                what: "multipart upload",
                key: key.to_owned(),
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
        debug!(store = "s3", key, upload_id = %id, "multipart upload created");
        Ok(id)
    }

    async fn upload_part(
        &self,
        key: &str,
        upload_id: &str,
        part_number: u32,
        bytes: Bytes,
    ) -> StoreResult<PartId> {
        check_key(key)?;
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

    async fn complete_multipart(
        &self,
        key: &str,
        upload_id: &str,
        parts: &[PartId],
        mode: &PutMode,
    ) -> StoreResult<PutOutcome> {
        check_key(key)?;
        let expected = expected_etag(mode)?.cloned();
        // Is the upload still there? S3 answers a completion of an aborted upload with 404
        // NoSuchUpload, but moto 5.2.5 fails it with a 500 (a KeyError), which would be retried
        // as transient. One listing answers on both; it reports, it does not guard.
        if !self.upload_exists(key, upload_id).await? {
            return Err(StoreError::NotFound {
                what: "multipart upload",
                key: key.to_owned(),
            });
        }
        if let Some(expected) = &expected {
            // A cheap look first, because moto 5.2.5 ignores If-Match on
            // CompleteMultipartUpload; on S3 it also saves a completion that would be refused.
            // It is not the guard: the If-Match below is.
            match self.head(key).await? {
                Some(cur) if cur.e_tag.strong_eq(expected) => {}
                _ => {
                    info!(
                        store = "s3",
                        key,
                        upload_id,
                        outcome = "superseded",
                        "complete multipart upload"
                    );
                    return Ok(PutOutcome::Superseded);
                }
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
                let mut req = self
                    .client
                    .complete_multipart_upload()
                    .bucket(&self.bucket)
                    .key(&full)
                    .upload_id(upload_id)
                    .mpu_object_size(meant)
                    .multipart_upload(completed.clone());
                match (mode, &expected) {
                    (PutMode::Create, _) => req = req.if_none_match("*"),
                    (PutMode::Update(_), Some(t)) => req = req.if_match(t.as_str()),
                    _ => {}
                }
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
                    key,
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
                    key,
                    upload_id,
                    outcome = "written",
                    size = meta.size,
                    "complete multipart upload"
                );
                let checked = verify_completed(self, key, parts, PutOutcome::Written(meta), |m| {
                    check_part_count(&m.e_tag, parts.len())
                })
                .await;
                if let Err(e) = &checked
                    && let Some(m) = CompletionMismatch::of(e)
                {
                    warn!(store = "s3", key, upload_id, differs = %m.differs, withdrawn = m.withdrawn,
                        "completed upload is not what its parts make; answered as an error, not written");
                }
                checked
            }
            Decision::AlreadyPresent { .. } => {
                info!(
                    store = "s3",
                    key,
                    upload_id,
                    outcome = "already-present",
                    "complete multipart upload"
                );
                Ok(PutOutcome::AlreadyPresent)
            }
            Decision::Superseded { .. } => {
                info!(
                    store = "s3",
                    key,
                    upload_id,
                    outcome = "superseded",
                    "complete multipart upload"
                );
                Ok(PutOutcome::Superseded)
            }
        }
    }

    async fn abort_multipart(&self, key: &str, upload_id: &str) -> StoreResult<()> {
        check_key(key)?;
        let full = self.full(key);
        retry::run(
            &self.retry,
            Idempotency::Idempotent,
            "abort multipart upload",
            &full,
            |_| {
                let req = self
                    .client
                    .abort_multipart_upload()
                    .bucket(&self.bucket)
                    .key(&full)
                    .upload_id(upload_id);
                async move { req.send().await.map_err(|e| Failure::from_sdk(SERVICE, e)) }
            },
        )
        .await
        .map_err(|f| f.into_store("abort multipart upload", key))?;
        debug!(store = "s3", key, upload_id, "multipart upload aborted");
        Ok(())
    }

    async fn list_multipart(
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
    use crate::error::classify;
    use std::sync::atomic::{AtomicU32, Ordering};

    /// A failed attempt as the SDK would report it: status and code, classified by the same
    /// function the store uses.
    fn answered(status: u16, code: &str) -> Failure {
        Failure {
            status: Some(status),
            code: Some(code.to_owned()),
            retry_after: None,
            answer: classify(Some(status), Some(code)),
            error: Box::new(AwsError::Service {
                service: SERVICE,
                status,
                code: code.to_owned(),
                message: "test".to_owned(),
            }),
        }
    }

    /// The S3 classifier feeds the shared conditional write: a 409 is re-sent, a 412 is
    /// AlreadyPresent, a 403 ends at once.
    #[tokio::test]
    async fn s3_answers_drive_the_conditional_write() {
        let script = [
            (409, "ConditionalRequestConflict"),
            (412, "PreconditionFailed"),
        ];
        let attempts = AtomicU32::new(0);
        let r: Result<Decision<()>, _> = conditional_write(
            &RetryPolicy::immediate(5),
            Idempotency::Idempotent,
            &PutMode::Create,
            "k",
            |n| {
                attempts.fetch_add(1, Ordering::SeqCst);
                let (status, code) = script[usize::try_from(n - 1).unwrap()];
                async move { Err(answered(status, code)) }
            },
        )
        .await;
        assert_eq!(r.unwrap(), Decision::AlreadyPresent { resent: false });
        assert_eq!(attempts.load(Ordering::SeqCst), 2);
        let r: Result<Decision<()>, _> = conditional_write(
            &RetryPolicy::immediate(5),
            Idempotency::Idempotent,
            &PutMode::Create,
            "k",
            |_| async { Err(answered(403, "AccessDenied")) },
        )
        .await;
        assert!(!r.unwrap_err().into_store("put", "k").is_retryable());
    }

    #[test]
    fn parses_content_range() {
        assert_eq!(parse_content_range("bytes 2-4/10"), Some((2..5, 10)));
        assert_eq!(parse_content_range("bytes 7-9/10"), Some((7..10, 10)));
        assert_eq!(parse_content_range("bytes */10"), None);
    }

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

    #[test]
    fn metadata_must_round_trip() {
        let mut m = BTreeMap::new();
        m.insert("attempt".to_owned(), "a-1".to_owned());
        assert!(check_metadata(&m).is_ok());
        m.insert("Upper".to_owned(), "x".to_owned());
        assert!(check_metadata(&m).is_err());
        let mut m = BTreeMap::new();
        m.insert("ok".to_owned(), "caf\u{e9}".to_owned());
        assert!(check_metadata(&m).is_err());
    }
}

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

mod bucket;
mod multipart;
mod read;

use crate::config::{load_sdk_config, s3_client};
use crate::error::{Answer, AwsError, Failure, FailureOf as _, own_error};
use crate::retry::{Idempotency, RetryPolicy, Sdk};
use crate::url::{S3Location, parse_s3};
use async_trait::async_trait;
use aws_sdk_s3::primitives::{ByteStream, DateTime};
use bytes::Bytes;
use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tilegate_core::keys::check_list_prefix;
use tilegate_core::object::{
    DeleteOptions, DeleteOutcome, Describe, GetOptions, GetOutcome, MultipartUpload, ObjectMeta,
    ObjectStore, PartId, PutMode, PutOptions, PutOutcome,
};
use tilegate_core::{ETag, ObjectKey, Retry, StoreError, StoreResult};
use tilegate_retry::Decision;
use tracing::debug;

const SERVICE: &str = "s3";

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

/// The precondition headers a write in `mode` sends, as (`If-None-Match`, `If-Match`): `*` for
/// a Create, the expected ETag (from [`expected_etag`]) for an Update, none for an Overwrite.
fn preconditions(mode: &PutMode, expected: Option<&ETag>) -> (Option<String>, Option<String>) {
    match (mode, expected) {
        (PutMode::Create, _) => (Some("*".to_owned()), None),
        (PutMode::Update(_), Some(t)) => (None, Some(t.as_str().to_owned())),
        _ => (None, None),
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

impl S3Store {
    /// This handle's SDK calls: [`SERVICE`] requests under its retry policy.
    fn sdk(&self) -> Sdk<'_> {
        Sdk::new(&self.retry, SERVICE)
    }

    /// A store over `location`, with the given client.
    pub fn new(client: aws_sdk_s3::Client, location: S3Location) -> Self {
        let key_prefix = tilegate_retry::key_prefix(&location.prefix);
        Self {
            client,
            bucket: location.bucket,
            key_prefix,
            retry: RetryPolicy::default(),
            started: Arc::default(),
        }
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

    /// HEAD, optionally `If-Match`. `Ok(None)`: no such object. A refused If-Match is the
    /// failure with [`Answer::PreconditionFailed`].
    async fn head_raw(
        &self,
        key: &str,
        if_match: Option<&ETag>,
    ) -> Result<Option<ObjectMeta>, Failure> {
        let full = self.full(key);
        let r = self
            .sdk()
            .send_raw("head", &full, || {
                let mut req = self.client.head_object().bucket(&self.bucket).key(&full);
                if let Some(t) = if_match {
                    req = req.if_match(t.as_str());
                }
                req.send()
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
        key: &ObjectKey,
        e_tag: Option<String>,
        known_size: Option<u64>,
        metadata: &BTreeMap<String, String>,
    ) -> StoreResult<ObjectMeta> {
        let Some(e_tag) = e_tag.map(ETag::new) else {
            // No ETag in the answer (a non-conforming S3): describe whatever is there.
            return self.head(key).await?.ok_or_else(|| StoreError::NotFound {
                what: "object",
                key: key.to_string(),
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
                debug!(store = "s3", key = %key, e_tag = %e_tag, "object replaced right after the write; reporting the write's own metadata");
                Ok(ObjectMeta {
                    key: key.to_string(),
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
}

#[async_trait]
impl ObjectStore for S3Store {
    fn name(&self) -> &'static str {
        "s3"
    }

    async fn head(&self, key: &ObjectKey) -> StoreResult<Option<ObjectMeta>> {
        self.head_raw(key, None)
            .await
            .map_err(|f| f.into_store("head", key))
    }

    async fn get_opts(&self, key: &ObjectKey, opts: GetOptions) -> StoreResult<GetOutcome> {
        self.read(key, opts).await
    }

    async fn put_opts(
        &self,
        key: &ObjectKey,
        bytes: Bytes,
        opts: PutOptions,
    ) -> StoreResult<PutOutcome> {
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
                let (if_none_match, if_match) = preconditions(&opts.mode, expected.as_ref());
                let req = self
                    .client
                    .put_object()
                    .bucket(&self.bucket)
                    .key(&full)
                    .body(ByteStream::from(bytes.clone()))
                    .set_metadata(Some(metadata.clone()))
                    .set_if_none_match(if_none_match)
                    .set_if_match(if_match);
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
                    key: key.to_string(),
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

    async fn delete_opts(
        &self,
        key: &ObjectKey,
        opts: DeleteOptions,
    ) -> StoreResult<DeleteOutcome> {
        // DeleteObject answers 204 for an absent key, so absence is learnt from a HEAD. It only
        // reports: the delete itself is guarded by the If-Match it carries.
        let Some(current) = self.head(key).await? else {
            return Ok(DeleteOutcome::NotFound);
        };
        if let Some(expected) = &opts.if_match
            && !current.e_tag.strong_eq(expected)
        {
            debug!(store = "s3", key = %key, outcome = "superseded", "delete");
            return Ok(DeleteOutcome::Superseded);
        }
        let full = self.full(key);
        let r = self
            .sdk()
            .send_raw("delete", &full, || {
                let mut req = self.client.delete_object().bucket(&self.bucket).key(&full);
                if let Some(t) = &opts.if_match {
                    req = req.if_match(t.as_str());
                }
                req.send()
            })
            .await;
        match r {
            Ok(_) => {
                debug!(store = "s3", key = %key, outcome = "deleted", "delete");
                Ok(DeleteOutcome::Deleted)
            }
            Err(f) if f.answer == Answer::PreconditionFailed => {
                debug!(store = "s3", key = %key, outcome = "superseded", "delete");
                Ok(DeleteOutcome::Superseded)
            }
            // S3 answers an If-Match delete of an absent key with 404 NoSuchKey.
            Err(f) if f.answer == Answer::NoSuchKey => Ok(DeleteOutcome::NotFound),
            Err(f) => Err(f.into_store("delete", key)),
        }
    }

    /// A SigV4 presigned `GetObject`, signed locally with the configured credentials (no
    /// request). SigV4 URLs live at most 7 days; a longer `expires` is refused, not shortened.
    async fn presign_get(&self, key: &ObjectKey, expires: Duration) -> StoreResult<String> {
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
            let page = self
                .sdk()
                .send_raw("list", &full, || {
                    self.client
                        .list_objects_v2()
                        .bucket(&self.bucket)
                        .prefix(&full)
                        .set_continuation_token(token.clone())
                        .send()
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

    async fn create_multipart(&self, key: &ObjectKey, opts: &PutOptions) -> StoreResult<String> {
        self.create_upload(key, opts).await
    }

    async fn upload_part(
        &self,
        key: &ObjectKey,
        upload_id: &str,
        part_number: u32,
        bytes: Bytes,
    ) -> StoreResult<PartId> {
        self.put_part(key, upload_id, part_number, bytes).await
    }

    async fn complete_multipart(
        &self,
        key: &ObjectKey,
        upload_id: &str,
        parts: &[PartId],
        mode: &PutMode,
    ) -> StoreResult<PutOutcome> {
        self.complete_upload(key, upload_id, parts, mode).await
    }

    async fn abort_multipart(&self, key: &ObjectKey, upload_id: &str) -> StoreResult<()> {
        self.abort_upload(key, upload_id).await
    }

    async fn list_multipart(
        &self,
        prefix: &str,
        older_than: Option<SystemTime>,
    ) -> StoreResult<Vec<MultipartUpload>> {
        self.list_uploads(prefix, older_than).await
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

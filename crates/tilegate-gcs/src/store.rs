//! [`GcsStore`]: single-request operations (head, reads, writes, deletes, listing). The
//! resumable sessions behind multipart uploads are in [`crate::upload`].

use crate::error::{Failure, FailureOf as _, GcsError};
use crate::upload::Sessions;
use crate::{GcsLocation, endpoint};
use async_trait::async_trait;
use bytes::Bytes;
use gcloud_storage::client::{Client, ClientConfig};
use gcloud_storage::http::buckets::get::GetBucketRequest;
use gcloud_storage::http::buckets::insert::{
    BucketCreationConfig, InsertBucketParam, InsertBucketRequest,
};
use gcloud_storage::http::objects::Object;
use gcloud_storage::http::objects::delete::DeleteObjectRequest;
use gcloud_storage::http::objects::download::Range as GcsRange;
use gcloud_storage::http::objects::get::GetObjectRequest;
use gcloud_storage::http::objects::list::ListObjectsRequest;
use gcloud_storage::http::objects::upload::{UploadObjectRequest, UploadType};
use std::collections::{BTreeMap, HashMap};
use std::ops::Range;
use std::time::{SystemTime, UNIX_EPOCH};
use tilegate_core::keys::check_list_prefix;
use tilegate_core::object::{
    DeleteOptions, DeleteOutcome, GetOptions, GetOutcome, GetResult, MultipartUpload, ObjectMeta,
    ObjectStore, PartId, PutMode, PutOptions, PutOutcome, RangeError,
};
use tilegate_core::{ETag, ObjectKey, Retry, StoreError, StoreResult};
use tilegate_retry::record::RESERVED;
use tilegate_retry::{
    Answer, Decision, Idempotency, IfMatch, IfNoneMatch, RetryPolicy, conditional_write, run,
};
use tracing::debug;

/// How often a read re-reads an object that keeps changing under it (its metadata and its
/// bytes are two requests; a writer may replace it in between, and a busy compare-and-swap
/// key is replaced often).
const STABLE_READ_ATTEMPTS: u32 = 16;

/// The project named when an emulator creates a bucket (it ignores it).
const EMULATOR_PROJECT: &str = "tilegate";

/// An [`ObjectStore`] over one GCS bucket and key prefix. Cheap to clone.
#[derive(Clone)]
pub struct GcsStore {
    pub(crate) client: Client,
    pub(crate) bucket: String,
    /// `""` or `"seg/seg/"`: prepended to every key.
    pub(crate) key_prefix: String,
    pub(crate) retry: RetryPolicy,
    project: Option<String>,
    pub(crate) sessions: Sessions,
}

impl std::fmt::Debug for GcsStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GcsStore")
            .field("bucket", &self.bucket)
            .field("key_prefix", &self.key_prefix)
            .finish_non_exhaustive()
    }
}

/// The generation a version token names: the store's ETags are quoted generations.
pub(crate) fn generation_of(e_tag: &ETag) -> Option<i64> {
    e_tag.as_str().trim_matches('"').parse().ok()
}

/// The generation an Update expects (`None`: the token is no generation, so it cannot be
/// the current version).
pub(crate) fn expected_generation(v: &tilegate_core::object::UpdateVersion) -> Option<i64> {
    v.version
        .as_deref()
        .and_then(|g| g.parse().ok())
        .or_else(|| v.e_tag.as_ref().and_then(generation_of))
}

/// A client of the JSON API at `endpoint`, anonymous (emulators, scripted responders) or with
/// Application Default Credentials, and the project those credentials name.
pub(crate) async fn client_for(
    endpoint: &str,
    anonymous: bool,
) -> Result<(Client, Option<String>), GcsError> {
    let config = ClientConfig {
        storage_endpoint: endpoint.trim_end_matches('/').to_owned(),
        // Counts every transmission for the job it serves (`tilegate_retry::meter`).
        http: Some(crate::meter::http_client()),
        ..ClientConfig::default()
    };
    let config = if anonymous {
        ClientConfig {
            project_id: Some(EMULATOR_PROJECT.to_owned()),
            ..config.anonymous()
        }
    } else {
        config.with_auth().await.map_err(|e| GcsError::Auth {
            detail: format!(
                "{e} (set GOOGLE_APPLICATION_CREDENTIALS, run `gcloud auth application-default \
                 login`, or set STORAGE_EMULATOR_HOST)"
            ),
        })?
    };
    let project = config.project_id.clone();
    Ok((Client::new(config), project))
}

pub(crate) fn e_tag_of(generation: i64) -> ETag {
    ETag::new(format!("\"{generation}\""))
}

/// The longest a V4 signed URL lives ("V4 signing process": `X-Goog-Expires` at most 604800).
const MAX_URL_LIFETIME: std::time::Duration = std::time::Duration::from_secs(604_800);

/// Refuse a signed URL's lifetime V4 signing cannot give: none at all (`X-Goog-Expires`
/// counts whole seconds, and 0 is refused) or more than [`MAX_URL_LIFETIME`].
fn check_url_lifetime(expires: std::time::Duration) -> Result<(), GcsError> {
    if expires.as_secs() == 0 || expires > MAX_URL_LIFETIME {
        return Err(GcsError::UrlLifetime { asked: expires });
    }
    Ok(())
}

fn time_of(t: Option<time::OffsetDateTime>) -> SystemTime {
    t.map_or(UNIX_EPOCH, SystemTime::from)
}

/// Refuse user metadata GCS would not return unchanged (it keeps any UTF-8; names must be
/// non-empty and values free of control characters to round-trip through JSON headers).
fn check_metadata(metadata: &BTreeMap<String, String>) -> StoreResult<()> {
    for (name, value) in metadata {
        if name.is_empty() || name.chars().chain(value.chars()).any(char::is_control) {
            return Err(StoreError::InvalidKey {
                key: name.chars().take(64).flat_map(char::escape_debug).collect(),
                reason: "GCS user metadata needs non-empty names and no control characters"
                    .to_owned(),
            });
        }
    }
    Ok(())
}

impl GcsStore {
    /// Open `gs://bucket[/prefix]` with the standard configuration: `STORAGE_EMULATOR_HOST`
    /// (anonymous) or Application Default Credentials. The bucket is not checked here (see
    /// [`GcsStore::check_bucket`]).
    pub async fn connect(url: &str) -> StoreResult<Self> {
        let (endpoint, emulator) = endpoint();
        Self::connect_to(url, &endpoint, emulator).await
    }

    /// Open `url` against the JSON API at `endpoint` (`http://host:port`), anonymously if
    /// `anonymous` (emulators, scripted responders) or with Application Default Credentials.
    pub async fn connect_to(url: &str, endpoint: &str, anonymous: bool) -> StoreResult<Self> {
        let location = GcsLocation::parse(url)?;
        let (client, project) = client_for(endpoint, anonymous)
            .await
            .map_err(|e| StoreError::backend("open objects", url, Retry::Permanent, e))?;
        let key_prefix = tilegate_retry::key_prefix(&location.prefix);
        Ok(Self {
            client,
            bucket: location.bucket,
            key_prefix,
            retry: RetryPolicy::default(),
            project,
            sessions: Sessions::default(),
        })
    }

    /// Replace the retry policy (tests use an immediate one).
    pub fn with_retry_policy(mut self, policy: RetryPolicy) -> Self {
        self.retry = policy;
        self
    }

    pub fn bucket(&self) -> &str {
        &self.bucket
    }

    pub(crate) fn full(&self, key: &str) -> String {
        format!("{}{key}", self.key_prefix)
    }

    fn strip<'a>(&self, full: &'a str) -> Option<&'a str> {
        full.strip_prefix(&self.key_prefix)
    }

    pub(crate) fn meta_of(&self, o: Object) -> ObjectMeta {
        ObjectMeta {
            key: self.strip(&o.name).unwrap_or(&o.name).to_owned(),
            size: u64::try_from(o.size).unwrap_or(0),
            e_tag: e_tag_of(o.generation),
            last_modified: time_of(o.updated.or(o.time_created)),
            version: Some(o.generation.to_string()),
            metadata: o.metadata.unwrap_or_default().into_iter().collect(),
        }
    }

    /// Create the bucket if it is missing; `true` if this call created it.
    pub async fn ensure_bucket(&self) -> StoreResult<bool> {
        let req = InsertBucketRequest {
            name: self.bucket.clone(),
            param: InsertBucketParam {
                project: self.project.clone().unwrap_or_default(),
                ..InsertBucketParam::default()
            },
            bucket: BucketCreationConfig::default(),
        };
        match run(
            &self.retry,
            Idempotency::Idempotent,
            "create bucket",
            &self.bucket,
            |_| async { self.client.insert_bucket(&req).await.map_err(Failure::of) },
        )
        .await
        {
            Ok(_) => Ok(true),
            // 409: the bucket exists (ours, or a name taken by someone else: checked next).
            Err(f) if f.status == Some(409) => self.check_bucket().await.map(|()| false),
            Err(f) => Err(f.into_store("create bucket", &self.bucket)),
        }
    }

    /// A named error if the bucket is missing or cannot be read.
    pub async fn check_bucket(&self) -> StoreResult<()> {
        let req = GetBucketRequest {
            bucket: self.bucket.clone(),
            ..GetBucketRequest::default()
        };
        run(
            &self.retry,
            Idempotency::Idempotent,
            "check bucket",
            &self.bucket,
            |_| async { self.client.get_bucket(&req).await.map_err(Failure::of) },
        )
        .await
        .map(|_| ())
        .map_err(|f| {
            f.into_check(
                "check bucket",
                &self.bucket,
                "gcs bucket (run `tilegate init`)",
                self.bucket.clone(),
            )
        })
    }

    /// The object's metadata at `full`, optionally only if its generation is `if_generation`.
    pub(crate) async fn stat(
        &self,
        full: &str,
        if_generation: Option<i64>,
    ) -> Result<Option<Object>, Failure> {
        let req = GetObjectRequest {
            bucket: self.bucket.clone(),
            object: full.to_owned(),
            if_generation_match: if_generation,
            ..GetObjectRequest::default()
        };
        match run(
            &self.retry,
            Idempotency::Idempotent,
            "head",
            full,
            |_| async { self.client.get_object(&req).await.map_err(Failure::of) },
        )
        .await
        {
            Ok(o) => Ok(Some(o)),
            Err(f) if f.answer == Answer::NoSuchKey => Ok(None),
            Err(f) => Err(f),
        }
    }

    /// Write `bytes` at `full` in one request, under `if_generation` (`Some(0)`: absent).
    pub(crate) async fn upload(
        &self,
        full: &str,
        bytes: &Bytes,
        metadata: &BTreeMap<String, String>,
        mode: &PutMode,
        if_generation: Option<i64>,
    ) -> Result<Decision<Object>, Failure> {
        let req = UploadObjectRequest {
            bucket: self.bucket.clone(),
            if_generation_match: if_generation,
            ..UploadObjectRequest::default()
        };
        let object = Object {
            name: full.to_owned(),
            metadata: Some(metadata.clone().into_iter().collect::<HashMap<_, _>>()),
            ..Object::default()
        };
        let kind = UploadType::Multipart(Box::new(object));
        conditional_write(
            &self.retry,
            Idempotency::Idempotent,
            mode,
            full,
            |_| async {
                self.client
                    .upload_object(&req, bytes.clone(), &kind)
                    .await
                    .map_err(Failure::of)
            },
        )
        .await
    }

    /// Settle a write's decision (see [`tilegate_retry::settle`]).
    pub(crate) async fn settle(
        &self,
        key: &ObjectKey,
        decision: Decision<Object>,
        token: &str,
        operation: &'static str,
    ) -> StoreResult<PutOutcome> {
        tilegate_retry::settle(
            "gcs",
            key,
            operation,
            decision,
            token,
            self.head(key),
            async |o| Ok(self.meta_of(o)),
        )
        .await
    }

    /// Every object whose full name starts with `full` (all pages); a failure is the contract's
    /// error of `operation` on `shown`.
    pub(crate) async fn list_full(
        &self,
        operation: &'static str,
        full: &str,
        shown: &str,
    ) -> StoreResult<Vec<Object>> {
        let mut out = Vec::new();
        let mut page_token: Option<String> = None;
        loop {
            let req = ListObjectsRequest {
                bucket: self.bucket.clone(),
                prefix: Some(full.to_owned()),
                page_token: page_token.clone(),
                ..ListObjectsRequest::default()
            };
            let page = run(
                &self.retry,
                Idempotency::Idempotent,
                operation,
                full,
                |_| async { self.client.list_objects(&req).await.map_err(Failure::of) },
            )
            .await
            .map_err(|f| f.into_store(operation, shown))?;
            out.extend(page.items.unwrap_or_default());
            page_token = page.next_page_token.filter(|t| !t.is_empty());
            if page_token.is_none() {
                return Ok(out);
            }
        }
    }

    /// Read `range` of `full` pinned to `generation`; `None` if that generation is gone.
    async fn download(
        &self,
        full: &str,
        generation: i64,
        range: &Range<u64>,
    ) -> Result<Option<Bytes>, Failure> {
        let req = GetObjectRequest {
            bucket: self.bucket.clone(),
            object: full.to_owned(),
            generation: Some(generation),
            ..GetObjectRequest::default()
        };
        let r = GcsRange(Some(range.start), Some(range.end - 1));
        match run(
            &self.retry,
            Idempotency::Idempotent,
            "get",
            full,
            |_| async {
                self.client
                    .download_object(&req, &r)
                    .await
                    .map_err(Failure::of)
            },
        )
        .await
        {
            Ok(b) => Ok(Some(Bytes::from(b))),
            Err(f) if f.answer == Answer::NoSuchKey => Ok(None),
            Err(f) => Err(f),
        }
    }
}

#[async_trait]
impl ObjectStore for GcsStore {
    fn name(&self) -> &'static str {
        "gcs"
    }

    async fn head(&self, key: &ObjectKey) -> StoreResult<Option<ObjectMeta>> {
        Ok(self
            .stat(&self.full(key), None)
            .await
            .map_err(|f| f.into_store("head", key))?
            .map(|o| self.meta_of(o)))
    }

    async fn get_opts(&self, key: &ObjectKey, opts: GetOptions) -> StoreResult<GetOutcome> {
        RangeError::check(opts.range.as_ref()).map_err(|e| e.into_store(key))?;
        let im = opts.if_match.as_ref().map(IfMatch::of);
        let inm = opts.if_none_match.as_ref().map(IfNoneMatch::of);
        // One tag of If-Match is also GCS's own precondition on the metadata read.
        let if_generation = match &im {
            Some(IfMatch::One(t)) => match generation_of(t) {
                Some(g) => Some(g),
                None => return Ok(GetOutcome::PreconditionFailed),
            },
            _ => None,
        };
        let full = self.full(key);
        for attempt in 1..=STABLE_READ_ATTEMPTS {
            if attempt > 1 {
                tokio::time::sleep(self.retry.backoff(attempt - 1, None)).await;
            }
            let o = match self.stat(&full, if_generation).await {
                Ok(Some(o)) => o,
                Ok(None) => {
                    return Err(StoreError::NotFound {
                        what: "object",
                        key: key.to_string(),
                    });
                }
                Err(f) if f.answer == Answer::PreconditionFailed => {
                    return Ok(GetOutcome::PreconditionFailed);
                }
                Err(f) if f.answer == Answer::NotModified => return Ok(GetOutcome::NotModified),
                Err(f) => return Err(f.into_store("get", key)),
            };
            let meta = self.meta_of(o);
            // The conditions, on the generation whose bytes are read next (pinned).
            if let Some(refused) =
                tilegate_retry::read_refusal(im.as_ref(), inm.as_ref(), &meta.e_tag)
            {
                return Ok(refused);
            }
            let range =
                RangeError::serve(opts.range.as_ref(), meta.size).map_err(|e| e.into_store(key))?;
            if range.is_empty() {
                return Ok(GetOutcome::Found(GetResult {
                    meta,
                    range,
                    bytes: Bytes::new(),
                }));
            }
            let generation = generation_of(&meta.e_tag).unwrap_or_default();
            match self
                .download(&full, generation, &range)
                .await
                .map_err(|f| f.into_store("get", key))?
            {
                Some(bytes) => return Ok(GetOutcome::Found(GetResult { meta, range, bytes })),
                // Replaced between the metadata and the bytes: look again.
                None => continue,
            }
        }
        Err(StoreError::backend(
            "get",
            key,
            Retry::Retryable,
            GcsError::Unstable {
                attempts: STABLE_READ_ATTEMPTS,
            },
        ))
    }

    async fn put_opts(
        &self,
        key: &ObjectKey,
        bytes: Bytes,
        opts: PutOptions,
    ) -> StoreResult<PutOutcome> {
        check_metadata(&opts.metadata)?;
        let if_generation = match &opts.mode {
            PutMode::Overwrite => None,
            PutMode::Create => Some(0),
            PutMode::Update(v) => match expected_generation(v) {
                Some(g) => Some(g),
                // Not a generation: it cannot name the current version.
                None => return Ok(PutOutcome::Superseded),
            },
        };
        let (metadata, token) = tilegate_retry::mode_metadata(&opts);
        let full = self.full(key);
        let decision = self
            .upload(&full, &bytes, &metadata, &opts.mode, if_generation)
            .await
            .map_err(|f| f.into_store("put", key))?;
        self.settle(key, decision, &token, "put").await
    }

    async fn delete_opts(
        &self,
        key: &ObjectKey,
        opts: DeleteOptions,
    ) -> StoreResult<DeleteOutcome> {
        let full = self.full(key);
        // The generation to delete: the expected one, checked against a look first (it
        // reports absence and a mismatch; the ifGenerationMatch sent with the DELETE guards).
        let Some(current) = self
            .stat(&full, None)
            .await
            .map_err(|f| f.into_store("delete", key))?
        else {
            return Ok(DeleteOutcome::NotFound);
        };
        let if_generation = match &opts.if_match {
            None => None,
            Some(expected) if expected.strong_eq(&e_tag_of(current.generation)) => {
                Some(current.generation)
            }
            Some(_) => {
                debug!(store = "gcs", key = %key, outcome = "superseded", "delete");
                return Ok(DeleteOutcome::Superseded);
            }
        };
        let req = DeleteObjectRequest {
            bucket: self.bucket.clone(),
            object: full.clone(),
            if_generation_match: if_generation,
            ..DeleteObjectRequest::default()
        };
        match run(
            &self.retry,
            Idempotency::Idempotent,
            "delete",
            &full,
            |_| async { self.client.delete_object(&req).await.map_err(Failure::of) },
        )
        .await
        {
            Ok(()) => Ok(DeleteOutcome::Deleted),
            Err(f) if f.answer == Answer::PreconditionFailed => Ok(DeleteOutcome::Superseded),
            Err(f) if f.answer == Answer::NoSuchKey => Ok(DeleteOutcome::NotFound),
            Err(f) => Err(f.into_store("delete", key)),
        }
    }

    /// A V4 signed URL (GET), signed by the client's credentials: a service account key
    /// signs locally, other Google credentials through IAM `signBlob`. Anonymous clients (an
    /// emulator) have nothing to sign with and are refused. A V4 signature lives at most 7
    /// days ("V4 signing process": `X-Goog-Expires` at most 604800 seconds); a longer or
    /// empty lifetime is refused by name here, before any credential is asked to sign.
    async fn presign_get(
        &self,
        key: &ObjectKey,
        expires: std::time::Duration,
    ) -> StoreResult<String> {
        use gcloud_storage::sign::{SignedURLMethod, SignedURLOptions};
        let full = self.full(key);
        check_url_lifetime(expires)
            .map_err(|e| StoreError::backend("sign a read URL", &full, Retry::Permanent, e))?;
        self.client
            .signed_url(
                &self.bucket,
                &full,
                None,
                None,
                SignedURLOptions {
                    method: SignedURLMethod::GET,
                    expires,
                    ..SignedURLOptions::default()
                },
            )
            .await
            .map_err(|e| {
                StoreError::backend(
                    "sign a read URL",
                    &full,
                    Retry::Permanent,
                    GcsError::Auth {
                        detail: format!(
                            "{e} (a V4 signature needs a service account key or a credential \
                             that may call IAM signBlob)"
                        ),
                    },
                )
            })
    }

    async fn list(&self, prefix: &str) -> StoreResult<Vec<ObjectMeta>> {
        check_list_prefix(prefix)?;
        let reserved = self.full(&format!("{RESERVED}/"));
        let mut out: Vec<ObjectMeta> = self
            .list_full("list", &self.full(prefix), prefix)
            .await?
            .into_iter()
            .filter(|o| !o.name.starts_with(&reserved) && self.strip(&o.name).is_some())
            .map(|o| self.meta_of(o))
            .collect();
        out.sort_by(|a, b| a.key.cmp(&b.key));
        Ok(out)
    }

    async fn create_multipart(&self, key: &ObjectKey, opts: &PutOptions) -> StoreResult<String> {
        check_metadata(&opts.metadata)?;
        self.start_session(key, opts).await
    }

    async fn upload_part(
        &self,
        key: &ObjectKey,
        upload_id: &str,
        part_number: u32,
        bytes: Bytes,
    ) -> StoreResult<PartId> {
        self.session_part(key, upload_id, part_number, bytes).await
    }

    async fn complete_multipart(
        &self,
        key: &ObjectKey,
        upload_id: &str,
        parts: &[PartId],
        mode: &PutMode,
    ) -> StoreResult<PutOutcome> {
        self.finish_session(key, upload_id, parts, mode).await
    }

    async fn abort_multipart(&self, key: &ObjectKey, upload_id: &str) -> StoreResult<()> {
        self.cancel_session(key, upload_id).await
    }

    async fn list_multipart(
        &self,
        prefix: &str,
        older_than: Option<SystemTime>,
    ) -> StoreResult<Vec<MultipartUpload>> {
        check_list_prefix(prefix)?;
        self.recorded_sessions(prefix, older_than).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tilegate_core::object::UpdateVersion;

    fn object_key(k: impl AsRef<str>) -> ObjectKey {
        ObjectKey::parse(k.as_ref()).expect("a valid key")
    }

    #[tokio::test]
    async fn a_signed_url_lives_at_most_seven_days_and_no_lifetime_panics() {
        use std::time::Duration;
        let day = Duration::from_secs(86_400);
        assert!(check_url_lifetime(Duration::from_secs(1)).is_ok());
        assert!(check_url_lifetime(7 * day).is_ok());
        // Refused before any credential is asked: an anonymous client (which cannot sign at
        // all) names the lifetime, not its missing key.
        let store = GcsStore::connect_to("gs://tg-presign/p", "http://127.0.0.1:9", true)
            .await
            .unwrap();
        for asked in [
            7 * day + Duration::from_secs(1),
            8 * day,
            36_500 * day,
            Duration::from_secs(u64::MAX),
            Duration::MAX,
            Duration::ZERO,
            Duration::from_millis(999),
        ] {
            let err = store
                .presign_get(&object_key("a.tif"), asked)
                .await
                .unwrap_err();
            assert!(!err.is_retryable());
            let StoreError::Backend { source, .. } = &err else {
                panic!("{asked:?}: {err}")
            };
            assert!(
                matches!(source.downcast_ref(), Some(GcsError::UrlLifetime { asked: a }) if *a == asked),
                "{asked:?}: {err}: {source}"
            );
        }
    }

    #[test]
    fn versions_are_generations() {
        assert_eq!(
            generation_of(&e_tag_of(1_733_130_000_000_123)),
            Some(1_733_130_000_000_123)
        );
        assert_eq!(generation_of(&ETag::new("\"0x8D9\"")), None);
        let v = UpdateVersion {
            e_tag: Some(ETag::new("\"7\"")),
            version: Some("8".into()),
        };
        assert_eq!(expected_generation(&v), Some(8), "the version wins");
        assert_eq!(
            expected_generation(&UpdateVersion::etag(ETag::new("\"7\""))),
            Some(7)
        );
    }
}

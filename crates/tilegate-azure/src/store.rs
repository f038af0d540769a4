//! [`AzureStore`]: single-request operations (head, reads, writes, deletes, listing). Block
//! lists behind multipart uploads are in [`crate::blocks`].

use crate::credential::{SasCredential, SasPolicy};
use crate::error::{AzureError, Failure};
use crate::{Account, AzureLocation};
use async_trait::async_trait;
use azure_core::http::headers::Headers;
use azure_core::http::policies::Policy;
use azure_core::http::{ClientOptions, Etag, NoFormat, RequestContent, RetryOptions, Url};
use azure_storage_blob::models::{
    BlobClientDeleteOptions, BlobClientDownloadOptions, BlobClientGetPropertiesOptions,
    BlobContainerClientListBlobsOptions, BlockBlobClientUploadOptions, ListBlobsIncludeItem,
};
use azure_storage_blob::{BlobClient, BlobContainerClient, BlobContainerClientOptions};
use bytes::Bytes;
use futures::StreamExt as _;
use std::collections::{BTreeMap, HashMap};
use std::num::NonZero;
use std::ops::Range;
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};
use tilegate_core::keys::check_list_prefix;
use tilegate_core::object::{
    DeleteOptions, DeleteOutcome, GetOptions, GetOutcome, GetResult, MultipartUpload, ObjectMeta,
    ObjectStore, PartId, PutMode, PutOptions, PutOutcome, RangeError,
};
use tilegate_core::{ETag, Retry, StoreError, StoreResult};
use tilegate_retry::record::{RESERVED, check_key};
use tilegate_retry::{
    Answer, Decision, Idempotency, IfMatch, IfNoneMatch, RetryPolicy, conditional_write,
    read_refusal, run,
};
use tracing::debug;

/// How much one read request asks for; a larger read is split into requests of this size,
/// each pinned to the first answer's ETag.
const READ_PARTITION: usize = 64 << 20;

/// Azure metadata names are C# identifiers, so `-` (as in `tilegate-attempt`) is stored as
/// this, and read back as `-`.
const HYPHEN: &str = "_h_";

/// An [`ObjectStore`] over one Azure Blob container and key prefix. Cheap to clone.
#[derive(Clone)]
pub struct AzureStore {
    pub(crate) container: Arc<BlobContainerClient>,
    pub(crate) account: String,
    pub(crate) container_name: String,
    /// `""` or `"seg/seg/"`: prepended to every key.
    pub(crate) key_prefix: String,
    pub(crate) retry: RetryPolicy,
    /// Uploads this handle and its clones started or have seen recorded (ID → key), so a
    /// part does not read the record again.
    pub(crate) live: Arc<Mutex<HashMap<String, String>>>,
    /// The blob endpoint, account key and `spr` protocols, when the account was given by its
    /// key: what a read URL is signed with. (A SAS or an Entra credential cannot sign one.)
    pub(crate) signer: Option<Signer>,
    /// The clock the account SAS and read URLs are signed on.
    pub(crate) clock: crate::Clock,
}

/// What a read URL is signed with.
#[derive(Clone)]
pub(crate) struct Signer {
    pub(crate) endpoint: String,
    pub(crate) key: String,
    pub(crate) protocols: &'static str,
}

impl std::fmt::Debug for AzureStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AzureStore")
            .field("account", &self.account)
            .field("container", &self.container_name)
            .field("key_prefix", &self.key_prefix)
            .finish_non_exhaustive()
    }
}

/// A client of `container` in `account`, authorised by a SAS in its URL (one given), an
/// account SAS set on each request and renewed on `clock` (an account key), or Entra ID
/// tokens; the crate's own retries are off (every request is repeated by `tilegate-retry`, in
/// one place).
pub(crate) fn container_client(
    account: &Account,
    container: &str,
    clock: &crate::Clock,
) -> Result<BlobContainerClient, AzureError> {
    let mut url = Url::parse(&format!("{}/{container}", account.blob_endpoint)).map_err(|e| {
        AzureError::Config {
            detail: format!("blob endpoint `{}`: {e}", account.blob_endpoint),
        }
    })?;
    let mut per_try_policies: Vec<Arc<dyn Policy>> = Vec::new();
    let mut credential = None;
    match &account.auth {
        crate::Auth::Sas(sas) => url.set_query(Some(sas)),
        crate::Auth::Key(key) => {
            per_try_policies.push(Arc::new(SasPolicy(Arc::new(SasCredential::new(
                &account.name,
                key,
                account.sas_protocols(),
                Arc::clone(clock),
            )?))))
        }
        crate::Auth::Entra(source) => credential = Some(crate::entra::credential(*source)?),
    }
    // Counts every transmission for the job it serves (`tilegate_retry::meter`), after the
    // SAS policy, which may send a request twice.
    per_try_policies.push(Arc::new(crate::meter::RequestMeter));
    let options = BlobContainerClientOptions {
        client_options: ClientOptions {
            retry: RetryOptions::none(),
            per_try_policies,
            ..ClientOptions::default()
        },
        ..BlobContainerClientOptions::default()
    };
    BlobContainerClient::new(url, credential, Some(options)).map_err(|e| AzureError::Config {
        detail: e.to_string(),
    })
}

/// User metadata as Azure stores it: names of ASCII letters, digits, `_` and `-` (stored as
/// [`HYPHEN`]), not starting with a digit; values of printable ASCII (they travel as
/// `x-ms-meta-*` headers).
pub(crate) fn to_azure_metadata(
    metadata: &BTreeMap<String, String>,
) -> StoreResult<HashMap<String, String>> {
    let mut out = HashMap::new();
    for (name, value) in metadata {
        let name_ok = !name.is_empty()
            && !name.starts_with(|c: char| c.is_ascii_digit())
            && name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
            && !name.contains(HYPHEN);
        let value_ok = value.chars().all(|c| c == ' ' || c.is_ascii_graphic());
        if !name_ok || !value_ok {
            return Err(StoreError::InvalidKey {
                key: name.chars().take(64).flat_map(char::escape_debug).collect(),
                reason: "Azure user metadata needs names of ASCII letters, digits, `_` and `-` \
                         (not starting with a digit) and printable ASCII values"
                    .to_owned(),
            });
        }
        out.insert(name.replace('-', HYPHEN), value.clone());
    }
    Ok(out)
}

fn from_azure_name(name: &str) -> String {
    name.replace(HYPHEN, "-")
}

fn time_of(t: Option<time::OffsetDateTime>) -> SystemTime {
    t.map_or(UNIX_EPOCH, SystemTime::from)
}

fn etag_header(t: &ETag) -> Etag {
    Etag::from(t.as_str().to_owned())
}

/// A write's condition headers for `mode`, as (`If-Match`, `If-None-Match`); `None` when an
/// Update names no ETag, which cannot be the current version.
pub(crate) type Conditions = (Option<Etag>, Option<Etag>);

pub(crate) fn conditions(mode: &PutMode) -> Option<Conditions> {
    match mode {
        PutMode::Overwrite => Some((None, None)),
        PutMode::Create => Some((None, Some(Etag::from("*")))),
        PutMode::Update(v) => v.e_tag.as_ref().map(|t| (Some(etag_header(t)), None)),
    }
}

/// An object's metadata from the headers of a HEAD or GET answer.
pub(crate) fn meta_of_headers(key: &str, h: &Headers, size: Option<u64>) -> ObjectMeta {
    let get = |n: &str| {
        h.iter()
            .find(|(k, _)| k.as_str().eq_ignore_ascii_case(n))
            .map(|(_, v)| v.as_str().to_owned())
    };
    // A ranged answer's total is after the `/` of `Content-Range: bytes a-b/total`.
    let total = get("content-range")
        .and_then(|r| r.rsplit_once('/').and_then(|(_, t)| t.parse().ok()))
        .or(size)
        .or_else(|| get("content-length").and_then(|l| l.parse().ok()))
        .unwrap_or(0);
    let metadata = h
        .iter()
        .filter_map(|(k, v)| {
            let k = k.as_str().to_ascii_lowercase();
            k.strip_prefix("x-ms-meta-")
                .map(|n| (from_azure_name(n), v.as_str().to_owned()))
        })
        .collect();
    ObjectMeta {
        key: key.to_owned(),
        size: total,
        e_tag: ETag::new(get("etag").unwrap_or_default()),
        last_modified: time_of(
            get("last-modified").and_then(|t| azure_core::time::parse_rfc7231(&t).ok()),
        ),
        version: None,
        metadata,
    }
}

impl AzureStore {
    /// Open `az://account/container[/prefix]` with the standard configuration
    /// ([`Account::for_objects`]: the configured account, which the URL must name). The
    /// container is not checked here (see [`AzureStore::check_container`]).
    pub async fn connect(url: &str) -> StoreResult<Self> {
        let location = AzureLocation::parse(url)?;
        let account = Account::for_objects(url, &location.account)
            .map_err(|e| StoreError::backend("open objects", url, Retry::Permanent, e))?;
        Self::connect_with(url, &account)
    }

    /// Open `url` with `account`'s endpoint and credentials (tests point it at a proxy or a
    /// scripted responder); `url` must name `account`.
    pub fn connect_with(url: &str, account: &Account) -> StoreResult<Self> {
        Self::connect_with_clock(url, account, crate::system_clock())
    }

    /// [`AzureStore::connect_with`], signing SAS on `clock` (tests move it on by days).
    pub fn connect_with_clock(
        url: &str,
        account: &Account,
        clock: crate::Clock,
    ) -> StoreResult<Self> {
        let location = AzureLocation::parse(url)?;
        let account = account
            .clone()
            .only(url, &location.account)
            .map_err(|e| StoreError::backend("open objects", url, Retry::Permanent, e))?;
        let account = &account;
        let container = container_client(account, &location.container, &clock)
            .map_err(|e| StoreError::backend("open objects", url, Retry::Permanent, e))?;
        let key_prefix = if location.prefix.is_empty() {
            String::new()
        } else {
            format!("{}/", location.prefix)
        };
        Ok(Self {
            container: Arc::new(container),
            account: location.account,
            container_name: location.container,
            key_prefix,
            retry: RetryPolicy::default(),
            live: Arc::default(),
            signer: match &account.auth {
                crate::Auth::Key(k) => Some(Signer {
                    endpoint: account.blob_endpoint.clone(),
                    key: k.clone(),
                    protocols: account.sas_protocols(),
                }),
                _ => None,
            },
            clock,
        })
    }

    /// Replace the retry policy (tests use an immediate one).
    pub fn with_retry_policy(mut self, policy: RetryPolicy) -> Self {
        self.retry = policy;
        self
    }

    pub fn container(&self) -> &str {
        &self.container_name
    }

    pub(crate) fn full(&self, key: &str) -> String {
        format!("{}{key}", self.key_prefix)
    }

    pub(crate) fn blob(&self, full: &str) -> BlobClient {
        self.container.blob_client(full)
    }

    /// Create the container if it is missing; `true` if this call created it.
    pub async fn ensure_container(&self) -> StoreResult<bool> {
        let name = &self.container_name;
        match run(
            &self.retry,
            Idempotency::Idempotent,
            "create container",
            name,
            |_| async { self.container.create(None).await.map_err(Failure::of) },
        )
        .await
        {
            Ok(_) => Ok(true),
            Err(f) if f.is("ContainerAlreadyExists") => Ok(false),
            Err(f) => Err(f.into_store("create container", name)),
        }
    }

    /// A named error if the container is missing or cannot be read.
    pub async fn check_container(&self) -> StoreResult<()> {
        let name = &self.container_name;
        match run(
            &self.retry,
            Idempotency::Idempotent,
            "check container",
            name,
            |_| async {
                self.container
                    .get_properties(None)
                    .await
                    .map_err(Failure::of)
            },
        )
        .await
        {
            Ok(_) => Ok(()),
            Err(f) if matches!(f.answer, Answer::NoSuchKey | Answer::MissingResource) => {
                Err(StoreError::NotFound {
                    what: "azure container (run `tilegate init`)",
                    key: format!("{}/{name}", self.account),
                })
            }
            Err(f) => Err(f.into_store("check container", name)),
        }
    }

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
        key: &str,
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
}

#[async_trait]
impl ObjectStore for AzureStore {
    fn name(&self) -> &'static str {
        "azure"
    }

    async fn head(&self, key: &str) -> StoreResult<Option<ObjectMeta>> {
        check_key(key)?;
        self.stat(key, &self.full(key))
            .await
            .map_err(|f| f.into_store("head", key))
    }

    async fn get_opts(&self, key: &str, opts: GetOptions) -> StoreResult<GetOutcome> {
        check_key(key)?;
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

    async fn put_opts(&self, key: &str, bytes: Bytes, opts: PutOptions) -> StoreResult<PutOutcome> {
        check_key(key)?;
        let Some(conditions) = conditions(&opts.mode) else {
            return Ok(PutOutcome::Superseded);
        };
        let (stamped, token) = tilegate_retry::stamp(&opts);
        let metadata = match &opts.mode {
            PutMode::Overwrite => &opts.metadata,
            _ => &stamped,
        };
        let azure_metadata = to_azure_metadata(metadata)?;
        let full = self.full(key);
        let decision = self
            .put_blob(&full, &bytes, &azure_metadata, &opts.mode, &conditions)
            .await
            .map_err(|f| f.into_store("put", key))?;
        let size = bytes.len() as u64;
        self.settle(key, decision, &token, "put", async |(e_tag, modified)| {
            Ok(ObjectMeta {
                key: key.to_owned(),
                size,
                e_tag: ETag::new(e_tag.map(|t| t.to_string()).unwrap_or_default()),
                last_modified: time_of(modified),
                version: None,
                metadata: metadata.clone(),
            })
        })
        .await
    }

    async fn delete_opts(&self, key: &str, opts: DeleteOptions) -> StoreResult<DeleteOutcome> {
        check_key(key)?;
        self.delete_full(key, &self.full(key), opts.if_match.as_ref())
            .await
    }

    /// A URL with a service SAS that reads this one blob (`sr=b`, `sp=r`), signed locally with
    /// the account key; an account opened with a SAS or Entra ID cannot sign one. It lives at
    /// most [`crate::MAX_URL_LIFETIME`] (a longer or empty lifetime is refused, not
    /// shortened), and is signed for HTTPS only unless the endpoint is plain HTTP.
    async fn presign_get(&self, key: &str, expires: std::time::Duration) -> StoreResult<String> {
        check_key(key)?;
        let Some(signer) = &self.signer else {
            return Err(StoreError::NotImplemented {
                operation: "sign a read URL without the account key",
                implementer: "azure",
            });
        };
        let full = self.full(key);
        let sas = crate::sas::blob_read_sas(
            &self.account,
            &signer.key,
            (&self.container_name, &full),
            (self.clock)().into(),
            expires,
            signer.protocols,
        )
        .map_err(|e| StoreError::backend("sign a read URL", &full, Retry::Permanent, e))?;
        Ok(format!(
            "{}/{}/{}?{sas}",
            signer.endpoint,
            self.container_name,
            crate::sas::blob_path(&full)
        ))
    }

    async fn list(&self, prefix: &str) -> StoreResult<Vec<ObjectMeta>> {
        check_list_prefix(prefix)?;
        let reserved = self.full(&format!("{RESERVED}/"));
        let mut out: Vec<ObjectMeta> = self
            .list_full(&self.full(prefix))
            .await
            .map_err(|f| f.into_store("list", prefix))?
            .into_iter()
            .filter(|m| !m.key.starts_with(&reserved))
            .filter_map(|mut m| {
                m.key = m.key.strip_prefix(&self.key_prefix)?.to_owned();
                Some(m)
            })
            .collect();
        out.sort_by(|a, b| a.key.cmp(&b.key));
        Ok(out)
    }

    async fn create_multipart(&self, key: &str, opts: &PutOptions) -> StoreResult<String> {
        check_key(key)?;
        self.start_blocks(key, opts).await
    }

    async fn upload_part(
        &self,
        key: &str,
        upload_id: &str,
        part_number: u32,
        bytes: Bytes,
    ) -> StoreResult<PartId> {
        check_key(key)?;
        self.stage(key, upload_id, part_number, bytes).await
    }

    async fn complete_multipart(
        &self,
        key: &str,
        upload_id: &str,
        parts: &[PartId],
        mode: &PutMode,
    ) -> StoreResult<PutOutcome> {
        check_key(key)?;
        self.commit(key, upload_id, parts, mode).await
    }

    async fn abort_multipart(&self, key: &str, upload_id: &str) -> StoreResult<()> {
        check_key(key)?;
        self.forget(key, upload_id).await
    }

    async fn list_multipart(
        &self,
        prefix: &str,
        older_than: Option<SystemTime>,
    ) -> StoreResult<Vec<MultipartUpload>> {
        check_list_prefix(prefix)?;
        self.recorded_uploads(prefix, older_than).await
    }
}

impl AzureStore {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metadata_names_round_trip_through_identifiers() {
        let m: BTreeMap<String, String> = [
            ("tilegate-attempt".to_owned(), "abc".to_owned()),
            ("owner".to_owned(), "worker-7".to_owned()),
        ]
        .into();
        let a = to_azure_metadata(&m).unwrap();
        assert_eq!(a["tilegate_h_attempt"], "abc");
        assert_eq!(from_azure_name("tilegate_h_attempt"), "tilegate-attempt");
        for bad in ["", "1x", "a b", "x_h_y", "é"] {
            let m = [(bad.to_owned(), "v".to_owned())].into();
            assert!(to_azure_metadata(&m).is_err(), "{bad:?}");
        }
        let m = [("k".to_owned(), "line\nbreak".to_owned())].into();
        assert!(to_azure_metadata(&m).is_err());
    }

    #[test]
    fn an_entra_client_carries_no_sas_and_needs_https() {
        let account = Account {
            name: "acct1".into(),
            blob_endpoint: "https://acct1.blob.core.windows.net".into(),
            auth: crate::Auth::Entra(crate::entra::Source::DeveloperTools),
        };
        let c = container_client(&account, "tiles", &crate::system_clock()).unwrap();
        assert_eq!(
            c.url().as_str(),
            "https://acct1.blob.core.windows.net/tiles"
        );
        let plain = Account {
            blob_endpoint: "http://127.0.0.1:10000/acct1".into(),
            ..account
        };
        assert!(
            container_client(&plain, "tiles", &crate::system_clock()).is_err(),
            "a token over plain HTTP"
        );
        let keyed = Account {
            auth: crate::Auth::Key(crate::DEV_KEY.into()),
            ..plain
        };
        let c = container_client(&keyed, "tiles", &crate::system_clock()).unwrap();
        assert_eq!(
            c.url().query(),
            None,
            "an account key's SAS is set on each request, not in the URL"
        );
        let given = Account {
            auth: crate::Auth::Sas("sv=1&sig=x".into()),
            ..keyed
        };
        let c = container_client(&given, "tiles", &crate::system_clock()).unwrap();
        assert_eq!(c.url().query(), Some("sv=1&sig=x"));
    }

    fn keyed(endpoint: &str) -> Account {
        Account {
            name: "acct1".into(),
            blob_endpoint: endpoint.into(),
            auth: crate::Auth::Key(crate::DEV_KEY.into()),
        }
    }

    #[test]
    fn a_blob_name_is_one_literal_path_segment() {
        let c = container_client(
            &keyed("http://127.0.0.1:10000/acct1"),
            "tiles",
            &crate::system_clock(),
        )
        .unwrap();
        // `?`, `#` and `%` are the name's own characters, `/` a character of the one segment
        // (Azure decodes `%2F`): nothing in a blob name becomes a query, fragment or escape.
        assert_eq!(
            c.blob_client("a?b#c%2Fd/e@f:g").url().as_str(),
            "http://127.0.0.1:10000/acct1/tiles/a%3Fb%23c%252Fd%2Fe@f:g"
        );
    }

    #[test]
    fn a_store_url_must_name_its_accounts_account() {
        let err =
            AzureStore::connect_with("az://other1/tiles", &keyed("http://h/acct1")).unwrap_err();
        let StoreError::Backend { source, .. } = &err else {
            panic!("{err}")
        };
        let e = source.downcast_ref::<AzureError>().unwrap();
        assert_eq!(e.reason_code(), "source-forbidden", "{e}");
        assert!(e.to_string().contains("[other-account]"), "{e}");
    }

    #[tokio::test]
    async fn a_read_url_is_https_only_for_an_https_endpoint_and_lives_at_most_a_week() {
        use std::time::Duration;
        let day = Duration::from_secs(86_400);
        for (endpoint, spr) in [
            ("https://acct1.blob.core.windows.net", "https"),
            ("http://127.0.0.1:10000/acct1", "https,http"),
        ] {
            let store = AzureStore::connect_with("az://acct1/tiles/p", &keyed(endpoint)).unwrap();
            let url = store
                .presign_get("a.tif", Duration::from_secs(3600))
                .await
                .unwrap();
            assert!(
                url.starts_with(&format!("{endpoint}/tiles/p/a.tif?")),
                "{url}"
            );
            assert!(url.contains(&format!("&spr={spr}&")), "{url}");
            assert!(store.presign_get("a.tif", 7 * day).await.is_ok());
            for (asked, reason) in [
                (8 * day, "url-lifetime-exceeded"),
                (36_500 * day, "url-lifetime-exceeded"),
                (Duration::from_secs(u64::MAX), "url-lifetime-exceeded"),
                (Duration::MAX, "url-lifetime-exceeded"),
                (Duration::ZERO, "url-lifetime-empty"),
            ] {
                let err = store.presign_get("a.tif", asked).await.unwrap_err();
                assert!(!err.is_retryable());
                let StoreError::Backend { source, .. } = &err else {
                    panic!("{asked:?}: {err}")
                };
                let e = source.downcast_ref::<AzureError>().unwrap();
                assert_eq!(e.reason_code(), reason, "{asked:?}: {e}");
            }
        }
    }
}

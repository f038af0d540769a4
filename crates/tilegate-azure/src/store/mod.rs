//! [`AzureStore`]: one Azure Blob container and key prefix as an [`ObjectStore`]: opening it,
//! the container's administration, and the contract's operations, each checked here and done
//! by a module of its own.
//!
//! * `client`: the container client and how each request is authorised;
//! * `headers`: user metadata names, condition headers and metadata read from headers;
//! * `read`: head, ranged and conditional reads, listing;
//! * `write`: single-request writes and deletes.
//!
//! Block lists behind multipart uploads are in [`crate::blocks`].

mod client;
mod headers;
mod read;
mod write;

pub(crate) use client::container_client;
pub(crate) use headers::{conditions, meta_of_headers, to_azure_metadata};

use crate::error::{Failure, FailureOf as _};
use crate::{Account, AzureLocation};
use async_trait::async_trait;
use azure_storage_blob::{BlobClient, BlobContainerClient};
use bytes::Bytes;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::SystemTime;
use tilegate_core::keys::check_list_prefix;
use tilegate_core::object::{
    DeleteOptions, DeleteOutcome, GetOptions, GetOutcome, MultipartUpload, ObjectMeta, ObjectStore,
    PartId, PutMode, PutOptions, PutOutcome,
};
use tilegate_core::{ObjectKey, Retry, StoreError, StoreResult};
use tilegate_retry::record::RESERVED;
use tilegate_retry::{Idempotency, RetryPolicy, run};

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
        let key_prefix = tilegate_retry::key_prefix(&location.prefix);
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
        run(
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
        .map(|_| ())
        .map_err(|f| {
            f.into_check(
                "check container",
                name,
                "azure container (run `tilegate init`)",
                format!("{}/{name}", self.account),
            )
        })
    }
}

#[async_trait]
impl ObjectStore for AzureStore {
    fn name(&self) -> &'static str {
        "azure"
    }

    async fn head(&self, key: &ObjectKey) -> StoreResult<Option<ObjectMeta>> {
        self.stat(key, &self.full(key))
            .await
            .map_err(|f| f.into_store("head", key))
    }

    async fn get_opts(&self, key: &ObjectKey, opts: GetOptions) -> StoreResult<GetOutcome> {
        self.get_blob(key, opts).await
    }

    async fn put_opts(
        &self,
        key: &ObjectKey,
        bytes: Bytes,
        opts: PutOptions,
    ) -> StoreResult<PutOutcome> {
        self.put_object(key, bytes, opts).await
    }

    async fn delete_opts(
        &self,
        key: &ObjectKey,
        opts: DeleteOptions,
    ) -> StoreResult<DeleteOutcome> {
        self.delete_full(key, &self.full(key), opts.if_match.as_ref())
            .await
    }

    /// A URL with a service SAS that reads this one blob (`sr=b`, `sp=r`), signed locally with
    /// the account key; an account opened with a SAS or Entra ID cannot sign one. It lives at
    /// most [`crate::MAX_URL_LIFETIME`] (a longer or empty lifetime is refused, not
    /// shortened), and is signed for HTTPS only unless the endpoint is plain HTTP.
    async fn presign_get(
        &self,
        key: &ObjectKey,
        expires: std::time::Duration,
    ) -> StoreResult<String> {
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

    async fn create_multipart(&self, key: &ObjectKey, opts: &PutOptions) -> StoreResult<String> {
        self.start_blocks(key, opts).await
    }

    async fn upload_part(
        &self,
        key: &ObjectKey,
        upload_id: &str,
        part_number: u32,
        bytes: Bytes,
    ) -> StoreResult<PartId> {
        self.stage(key, upload_id, part_number, bytes).await
    }

    async fn complete_multipart(
        &self,
        key: &ObjectKey,
        upload_id: &str,
        parts: &[PartId],
        mode: &PutMode,
    ) -> StoreResult<PutOutcome> {
        self.commit(key, upload_id, parts, mode).await
    }

    async fn abort_multipart(&self, key: &ObjectKey, upload_id: &str) -> StoreResult<()> {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::AzureError;

    fn object_key(k: impl AsRef<str>) -> ObjectKey {
        ObjectKey::parse(k.as_ref()).expect("a valid key")
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
                .presign_get(&object_key("a.tif"), Duration::from_secs(3600))
                .await
                .unwrap();
            assert!(
                url.starts_with(&format!("{endpoint}/tiles/p/a.tif?")),
                "{url}"
            );
            assert!(url.contains(&format!("&spr={spr}&")), "{url}");
            assert!(
                store
                    .presign_get(&object_key("a.tif"), 7 * day)
                    .await
                    .is_ok()
            );
            for (asked, reason) in [
                (8 * day, "url-lifetime-exceeded"),
                (36_500 * day, "url-lifetime-exceeded"),
                (Duration::from_secs(u64::MAX), "url-lifetime-exceeded"),
                (Duration::MAX, "url-lifetime-exceeded"),
                (Duration::ZERO, "url-lifetime-empty"),
            ] {
                let err = store
                    .presign_get(&object_key("a.tif"), asked)
                    .await
                    .unwrap_err();
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

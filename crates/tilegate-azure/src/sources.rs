//! Sources on Azure Blob: `az://account/container/blob` pinned by the blob's ETag. Any
//! container, any blob — source keys belong to the user, so they are not held to tilegate's
//! output-key rules — but only in the configured account ([`Account::for_source`]), and only
//! names Azure allows ([`crate::names`]): a source URI is input, and the account it names
//! must never steer where the deployment's credentials go. GDAL reads a source through
//! `/vsiaz/container/blob`, which names no account: it reads the configured one
//! ([`crate::gdal_az_config`]), so the blob the pin checked is the blob GDAL reads.

use crate::Account;
use crate::error::{AzureError, Failure, FailureOf as _};
use crate::names::BlobUri;
use crate::store::{container_client, meta_of_headers};
use async_trait::async_trait;
use azure_storage_blob::BlobContainerClient;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use tilegate_core::source::SourceObjects;
use tilegate_core::{ETag, Retry, StoreError, StoreResult};
use tilegate_retry::{Idempotency, RetryPolicy, run, source_lookup};
use tracing::warn;

/// Looks `az://` sources up; credentials are read when a source is first looked up, so a
/// deployment that reads only local files never needs Azure settings. One client per
/// container, kept: a source is looked up again for every window, and an Entra ID
/// credential caches its token in its client.
#[derive(Default)]
pub struct AzureSources {
    retry: RetryPolicy,
    clients: Mutex<HashMap<(String, String), Arc<BlobContainerClient>>>,
}

impl std::fmt::Debug for AzureSources {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AzureSources").finish_non_exhaustive()
    }
}

impl AzureSources {
    pub fn new() -> Self {
        Self::default()
    }

    /// The client of `source`'s container, made only once its account is known to be the
    /// configured one.
    fn client(&self, uri: &str, source: &BlobUri) -> Result<Arc<BlobContainerClient>, AzureError> {
        let account = Account::for_source(uri, &source.account)?;
        let mut clients = self.clients.lock().unwrap_or_else(PoisonError::into_inner);
        let k = (source.account.clone(), source.container.clone());
        if let Some(c) = clients.get(&k) {
            return Ok(Arc::clone(c));
        }
        let c = Arc::new(container_client(
            &account,
            &source.container,
            &crate::system_clock(),
        )?);
        clients.insert(k, Arc::clone(&c));
        Ok(c)
    }
}

/// Split `az://account/container/blob` into its parts, every one checked by Azure's naming
/// rules ([`BlobUri::parse`]); a refusal names the rule.
fn split_source(uri: &str) -> StoreResult<BlobUri> {
    BlobUri::parse(uri).map_err(|e| refused(uri, e))
}

/// A source refused before any request: permanent, named ([`AzureError::reason_code`]).
fn refused(uri: &str, e: AzureError) -> StoreError {
    warn!(
        store = "azure",
        uri = %crate::names::shown(uri),
        reason = %e.reason_code(),
        error = %e,
        "source refused"
    );
    StoreError::backend("head source", crate::names::shown(uri), Retry::Permanent, e)
}

#[async_trait]
impl SourceObjects for AzureSources {
    fn schemes(&self) -> &'static [&'static str] {
        &["az"]
    }

    async fn head_source(&self, uri: &str) -> StoreResult<Option<(ETag, u64)>> {
        let source = split_source(uri)?;
        let client = self.client(uri, &source).map_err(|e| match e {
            e @ AzureError::Forbidden { .. } => refused(uri, e),
            e => StoreError::backend("head source", uri, Retry::Permanent, e),
        })?;
        let key = source.blob.as_str();
        let blob = client.blob_client(key);
        let r = run(
            &self.retry,
            Idempotency::Idempotent,
            "head source",
            uri,
            |_| async { blob.get_properties(None).await.map_err(Failure::of) },
        )
        .await;
        let missing = StoreError::NotFound {
            what: "azure container",
            key: format!("{}/{}", source.account, source.container),
        };
        Ok(source_lookup(r, uri, Some(missing))?.map(|r| {
            let m = meta_of_headers(key, r.headers(), None);
            (m.e_tag, m.size)
        }))
    }
}

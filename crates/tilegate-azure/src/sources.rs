//! Sources on Azure Blob: `az://account/container/key` pinned by the blob's ETag. Any
//! container, any key — source keys belong to the user, so they are not held to tilegate's
//! output-key rules. GDAL reads them through `/vsiaz/container/key`, and finds the same
//! settings (`AZURE_STORAGE_CONNECTION_STRING`, `AZURE_STORAGE_SAS_TOKEN`) in the environment
//! itself.

use crate::Account;
use crate::error::{AzureError, Failure};
use crate::store::{container_client, meta_of_headers};
use async_trait::async_trait;
use azure_storage_blob::BlobContainerClient;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use tilegate_core::source::SourceObjects;
use tilegate_core::{ETag, Retry, StoreError, StoreResult};
use tilegate_retry::{Answer, Idempotency, RetryPolicy, run};

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

    fn client(
        &self,
        account: &str,
        container: &str,
    ) -> Result<Arc<BlobContainerClient>, AzureError> {
        let mut clients = self.clients.lock().unwrap_or_else(PoisonError::into_inner);
        let k = (account.to_owned(), container.to_owned());
        if let Some(c) = clients.get(&k) {
            return Ok(Arc::clone(c));
        }
        let c = Arc::new(container_client(&Account::from_env(account)?, container)?);
        clients.insert(k, Arc::clone(&c));
        Ok(c)
    }
}

/// Split `az://account/container/key` into its parts.
pub fn split_source(uri: &str) -> StoreResult<(&str, &str, &str)> {
    let bad = || StoreError::InvalidKey {
        key: uri.to_owned(),
        reason: "expected az://account/container/key".into(),
    };
    let rest = uri.strip_prefix("az://").ok_or_else(bad)?;
    let mut parts = rest.splitn(3, '/');
    match (parts.next(), parts.next(), parts.next()) {
        (Some(a), Some(c), Some(k)) if !a.is_empty() && !c.is_empty() && !k.is_empty() => {
            Ok((a, c, k))
        }
        _ => Err(bad()),
    }
}

#[async_trait]
impl SourceObjects for AzureSources {
    fn schemes(&self) -> &'static [&'static str] {
        &["az"]
    }

    async fn head_source(&self, uri: &str) -> StoreResult<Option<(ETag, u64)>> {
        let (account, container, key) = split_source(uri)?;
        let client = self
            .client(account, container)
            .map_err(|e| StoreError::backend("head source", uri, Retry::Permanent, e))?;
        let blob = client.blob_client(key);
        match run(
            &self.retry,
            Idempotency::Idempotent,
            "head source",
            uri,
            |_| async { blob.get_properties(None).await.map_err(Failure::of) },
        )
        .await
        {
            Ok(r) => {
                let m = meta_of_headers(key, r.headers(), None);
                Ok(Some((m.e_tag, m.size)))
            }
            Err(f) if f.answer == Answer::NoSuchKey => Ok(None),
            Err(f) if f.answer == Answer::MissingResource => Err(StoreError::NotFound {
                what: "azure container",
                key: format!("{account}/{container}"),
            }),
            Err(f) => Err(f.into_store("head source", uri)),
        }
    }
}

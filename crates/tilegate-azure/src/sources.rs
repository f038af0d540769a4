//! Sources on Azure Blob: `az://account/container/key` pinned by the blob's ETag. Any
//! container, any key — source keys belong to the user, so they are not held to tilegate's
//! output-key rules. GDAL reads them through `/vsiaz/container/key` with the same settings
//! (see [`crate::gdal_az_config`]).

use crate::Account;
use crate::error::Failure;
use crate::store::{container_client, meta_of_headers};
use async_trait::async_trait;
use tilegate_core::source::SourceObjects;
use tilegate_core::{ETag, Retry, StoreError, StoreResult};
use tilegate_retry::{Answer, Idempotency, RetryPolicy, run};

/// Looks `az://` sources up; credentials are read when a source is first looked up, so a
/// deployment that reads only local files never needs Azure settings.
#[derive(Debug, Default)]
pub struct AzureSources {
    retry: RetryPolicy,
}

impl AzureSources {
    pub fn new() -> Self {
        Self::default()
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
        let client = Account::from_env(account)
            .and_then(|a| container_client(&a, container))
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

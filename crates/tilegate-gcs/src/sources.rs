//! Sources on GCS: `gs://bucket/key` pinned by the object's generation (as the store's ETags
//! are). Any bucket, any key — source keys belong to the user, so they are not held to
//! tilegate's output-key rules. GDAL reads them through `/vsigs/` (see [`crate::gdal_gs_config`]).

use crate::error::{Failure, FailureOf as _};
use crate::store::{client_for, e_tag_of};
use async_trait::async_trait;
use gcloud_storage::client::Client;
use gcloud_storage::http::objects::get::GetObjectRequest;
use tilegate_core::source::SourceObjects;
use tilegate_core::{ETag, Retry, StoreError, StoreResult};
use tilegate_retry::{Idempotency, RetryPolicy, run, source_lookup};
use tokio::sync::OnceCell;

/// Looks `gs://` sources up. The client (and its credentials) is made on first use, so a
/// deployment that reads only local files never looks for Google credentials.
#[derive(Default)]
pub struct GcsSources {
    client: OnceCell<Client>,
    retry: RetryPolicy,
}

impl std::fmt::Debug for GcsSources {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GcsSources").finish_non_exhaustive()
    }
}

impl GcsSources {
    pub fn new() -> Self {
        Self::default()
    }
}

/// Split `gs://bucket/key` into its parts.
pub fn split_source(uri: &str) -> StoreResult<(&str, &str)> {
    tilegate_retry::split_source(uri, "gs")
}

#[async_trait]
impl SourceObjects for GcsSources {
    fn schemes(&self) -> &'static [&'static str] {
        &["gs"]
    }

    async fn head_source(&self, uri: &str) -> StoreResult<Option<(ETag, u64)>> {
        let (bucket, key) = split_source(uri)?;
        let client = self
            .client
            .get_or_try_init(|| async {
                let (endpoint, emulator) = crate::endpoint();
                client_for(&endpoint, emulator).await.map(|(c, _)| c)
            })
            .await
            .map_err(|e| StoreError::backend("head source", uri, Retry::Permanent, e))?;
        let req = GetObjectRequest {
            bucket: bucket.to_owned(),
            object: key.to_owned(),
            ..GetObjectRequest::default()
        };
        let r = run(
            &self.retry,
            Idempotency::Idempotent,
            "head source",
            uri,
            |_| async { client.get_object(&req).await.map_err(Failure::of) },
        )
        .await;
        let missing = StoreError::NotFound {
            what: "gcs bucket",
            key: bucket.to_owned(),
        };
        Ok(source_lookup(r, uri, Some(missing))?
            .map(|o| (e_tag_of(o.generation), u64::try_from(o.size).unwrap_or(0))))
    }
}

//! Sources on S3: `s3://bucket/key` pinned by `HeadObject`'s ETag. Any bucket, any key — source
//! keys belong to the user, so they are not held to tilegate's output-key rules.

use crate::config::{load_sdk_config, s3_client};
use crate::retry::{RetryPolicy, Sdk};
use async_trait::async_trait;
use tilegate_core::source::SourceObjects;
use tilegate_core::{ETag, Retry, StoreError, StoreResult};
use tokio::sync::OnceCell;

const SERVICE: &str = "s3";

/// HEADs `s3://` sources. The SDK configuration is loaded on first use, so a deployment that
/// reads only local files never touches AWS configuration.
#[derive(Debug, Default)]
pub struct S3Sources {
    client: OnceCell<aws_sdk_s3::Client>,
    retry: RetryPolicy,
}

impl S3Sources {
    /// This handle's SDK calls: [`SERVICE`] requests under its retry policy.
    fn sdk(&self) -> Sdk<'_> {
        Sdk::new(&self.retry, SERVICE)
    }

    pub fn new() -> Self {
        Self::default()
    }

    async fn client(&self) -> &aws_sdk_s3::Client {
        self.client
            .get_or_init(|| async { s3_client(&load_sdk_config().await) })
            .await
    }
}

/// Split `s3://bucket/key` into its parts.
pub fn split_source(uri: &str) -> StoreResult<(&str, &str)> {
    tilegate_retry::split_source(uri, "s3")
}

#[async_trait]
impl SourceObjects for S3Sources {
    fn schemes(&self) -> &'static [&'static str] {
        &["s3"]
    }

    async fn head_source(&self, uri: &str) -> StoreResult<Option<(ETag, u64)>> {
        let (bucket, key) = split_source(uri)?;
        let client = self.client().await;
        let r = self
            .sdk()
            .send_raw("head source", uri, || {
                client.head_object().bucket(bucket).key(key).send()
            })
            .await;
        // AWS names no missing bucket apart: it is reported as the provider's error.
        let Some(out) = tilegate_retry::source_lookup(r, uri, None)? else {
            return Ok(None);
        };
        let etag = out.e_tag().map(ETag::new).ok_or_else(|| {
            StoreError::backend(
                "head source",
                uri,
                Retry::Permanent,
                "no ETag in HeadObject",
            )
        })?;
        let size = out
            .content_length()
            .and_then(|n| u64::try_from(n).ok())
            .unwrap_or(0);
        Ok(Some((etag, size)))
    }
}

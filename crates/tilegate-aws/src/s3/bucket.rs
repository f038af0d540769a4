//! Bucket administration: creating the bucket idempotently ([`S3Store::ensure_bucket`]) and
//! checking that it exists before use ([`S3Store::check_bucket`]).

use super::S3Store;
use crate::error::{Answer, Failure};
use tilegate_core::StoreResult;
use tracing::{debug, info, warn};

impl S3Store {
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
        let r = self
            .sdk()
            .send_raw("create bucket", &bucket, || {
                let mut req = self.client.create_bucket().bucket(&bucket);
                if let Some(region) = region.filter(|r| *r != "us-east-1") {
                    use aws_sdk_s3::types::{BucketLocationConstraint, CreateBucketConfiguration};
                    req = req.create_bucket_configuration(
                        CreateBucketConfiguration::builder()
                            .location_constraint(BucketLocationConstraint::from(region))
                            .build(),
                    );
                }
                req.send()
            })
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
        self.sdk()
            .send_raw("check bucket", &self.bucket, || {
                self.client.head_bucket().bucket(&self.bucket).send()
            })
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
}

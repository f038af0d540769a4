#![doc = include_str!("../README.md")]

pub mod announce;
pub mod config;
pub mod dynamo;
pub mod error;
pub mod meter;
pub mod retry;
pub mod s3;
pub mod sources;
pub mod sqs;
pub mod url;

/// The SDK crates, for callers that build their own clients without a version skew.
pub use {aws_config, aws_sdk_dynamodb, aws_sdk_eventbridge, aws_sdk_s3, aws_sdk_sns, aws_sdk_sqs};

pub use dynamo::DynamoTables;
pub use error::{Answer, AwsError, classify};
pub use retry::RetryPolicy;
pub use s3::S3Store;
pub use sources::S3Sources;
pub use sqs::SqsQueue;
pub use url::S3Location;

use std::sync::Arc;
pub use tilegate_core::backends::InitReport;
use tilegate_core::{Backends, StoreResult};

/// Opening and initialising a whole AWS deployment.
#[derive(Debug, Clone, Copy)]
pub struct AwsBackends;

impl AwsBackends {
    /// Open the three stores from their URLs (one SDK configuration for all). The bucket, the
    /// queue and its dead-letter queue must exist (see [`AwsBackends::init`]); the tables are
    /// not checked here (a missing table is a permanent `ResourceNotFoundException` on first
    /// use).
    pub async fn connect(
        objects: &str,
        tables: &str,
        queue: &str,
        max_receive_count: u32,
    ) -> StoreResult<Backends> {
        let location = url::parse_s3(objects)?;
        let prefix = url::parse_dynamodb(tables)?;
        let queue_name = url::parse_sqs(queue)?;
        let sdk = config::load_sdk_config().await;
        let objects = S3Store::new(config::s3_client(&sdk), location);
        objects.check_bucket().await?;
        let tables = DynamoTables::new(config::dynamodb_client(&sdk), &prefix);
        let queue =
            SqsQueue::open(config::sqs_client(&sdk), &queue_name, max_receive_count).await?;
        Ok(backends(objects, tables, queue))
    }

    /// The stores of a worker function, opened without any request (its role may read and
    /// write objects, rows and messages, but not list buckets or look queues up): objects at
    /// `s3://bucket/prefix`, tables at `dynamodb://prefix`, the work queue and its dead-letter
    /// queue by URL.
    pub async fn for_function(
        objects: &str,
        tables: &str,
        queue_url: &str,
        dlq_url: &str,
        max_receive_count: u32,
    ) -> StoreResult<Backends> {
        let location = url::parse_s3(objects)?;
        let prefix = url::parse_dynamodb(tables)?;
        let sdk = config::load_sdk_config().await;
        let tables = DynamoTables::new(config::dynamodb_client(&sdk), &prefix);
        let queue = SqsQueue::from_urls(
            config::sqs_client(&sdk),
            queue_url,
            dlq_url,
            max_receive_count,
        );
        let objects = S3Store::new(config::s3_client(&sdk), location);
        Ok(backends(objects, tables, queue))
    }

    /// A second queue of a Lambda function's deployment (the arrivals queue of the ingest
    /// function), by its URL and its dead-letter queue's URL.
    pub async fn queue_for_function(
        queue_url: &str,
        dlq_url: &str,
        max_receive_count: u32,
    ) -> SqsQueue {
        let sdk = config::load_sdk_config().await;
        SqsQueue::from_urls(
            config::sqs_client(&sdk),
            queue_url,
            dlq_url,
            max_receive_count,
        )
    }

    /// Create what a deployment needs, idempotently ("already exists" is success): the bucket
    /// if `create_bucket` (otherwise it is only checked, when `objects` is given), the four
    /// DynamoDB tables (on-demand, waited for until ACTIVE), and the queue with its
    /// dead-letter queue and `RedrivePolicy`.
    pub async fn init(
        objects: Option<&str>,
        tables: &str,
        queue: &str,
        create_bucket: bool,
        max_receive_count: u32,
    ) -> StoreResult<InitReport> {
        let location = objects.map(url::parse_s3).transpose()?;
        let prefix = url::parse_dynamodb(tables)?;
        let queue_name = url::parse_sqs(queue)?;
        let sdk = config::load_sdk_config().await;
        let mut report = InitReport::default();
        if let Some(location) = location {
            let bucket = location.bucket.clone();
            let store = S3Store::new(config::s3_client(&sdk), location);
            if create_bucket {
                let region = sdk.region().map(|r| r.as_ref().to_owned());
                let created = store.ensure_bucket(region.as_deref()).await?;
                report.note(created, format!("s3 bucket {bucket}"));
            } else {
                store.check_bucket().await?;
                report.note(false, format!("s3 bucket {bucket}"));
            }
        }
        let t = DynamoTables::new(config::dynamodb_client(&sdk), &prefix);
        for (name, created) in t.ensure_tables().await? {
            report.note(created, format!("dynamodb table {name}"));
        }
        ensure_queue(&sdk, &queue_name, max_receive_count, &mut report).await?;
        Ok(report)
    }

    /// Create one more queue and its dead-letter queue, idempotently (`ingest`'s arrivals
    /// queue, `sqs://name`).
    pub async fn init_queue(queue: &str, max_receive_count: u32) -> StoreResult<InitReport> {
        let queue_name = url::parse_sqs(queue)?;
        let sdk = config::load_sdk_config().await;
        let mut report = InitReport::default();
        ensure_queue(&sdk, &queue_name, max_receive_count, &mut report).await?;
        Ok(report)
    }
}

async fn ensure_queue(
    sdk: &aws_config::SdkConfig,
    queue_name: &str,
    max_receive_count: u32,
    report: &mut InitReport,
) -> StoreResult<()> {
    let created = SqsQueue::ensure(&config::sqs_client(sdk), queue_name, max_receive_count).await?;
    report.note(
        created,
        format!(
            "sqs queue {queue_name} (dead letters: {})",
            sqs::dead_letter_queue_name(queue_name)
        ),
    );
    Ok(())
}

/// A deployment's stores: objects on S3, every table on DynamoDB, the queue on SQS, and `s3://`
/// sources.
fn backends(objects: S3Store, tables: DynamoTables, queue: SqsQueue) -> Backends {
    let tables = Arc::new(tables);
    Backends {
        objects: Arc::new(objects),
        jobs: tables.clone(),
        manifest: tables.clone(),
        claims: tables.clone(),
        counters: tables.clone(),
        ledger: tables,
        queue: Arc::new(queue),
        sources: Some(Arc::new(S3Sources::new())),
    }
}

/// GDAL configuration options for reading sources through `/vsis3/` with the same endpoint,
/// region and credentials as the SDK: `AWS_S3_ENDPOINT` (host:port) from
/// `AWS_ENDPOINT_URL_S3` or `AWS_ENDPOINT_URL`, `AWS_HTTPS=NO` for an `http://` endpoint,
/// `AWS_VIRTUAL_HOSTING=FALSE` for a custom endpoint (path-style, as emulators need), and the
/// region and credential variables passed through.
pub fn gdal_s3_config() -> Vec<(String, String)> {
    gdal_s3_config_from(|k| std::env::var(k).ok().filter(|v| !v.is_empty()))
}

fn gdal_s3_config_from(get: impl Fn(&str) -> Option<String>) -> Vec<(String, String)> {
    let mut out = Vec::new();
    if let Some(endpoint) = get("AWS_ENDPOINT_URL_S3").or_else(|| get("AWS_ENDPOINT_URL")) {
        let (scheme, rest) = endpoint.split_once("://").unwrap_or(("https", &endpoint));
        let host = rest.split('/').next().unwrap_or(rest);
        out.push(("AWS_S3_ENDPOINT".to_owned(), host.to_owned()));
        if scheme.eq_ignore_ascii_case("http") {
            out.push(("AWS_HTTPS".to_owned(), "NO".to_owned()));
        }
        out.push(("AWS_VIRTUAL_HOSTING".to_owned(), "FALSE".to_owned()));
    }
    if let Some(region) = get("AWS_REGION").or_else(|| get("AWS_DEFAULT_REGION")) {
        out.push(("AWS_REGION".to_owned(), region));
    }
    for k in [
        "AWS_ACCESS_KEY_ID",
        "AWS_SECRET_ACCESS_KEY",
        "AWS_SESSION_TOKEN",
        "AWS_PROFILE",
        "AWS_NO_SIGN_REQUEST",
    ] {
        if let Some(v) = get(k) {
            out.push((k.to_owned(), v));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    #[test]
    fn gdal_config_for_an_emulator() {
        let env = HashMap::from([
            ("AWS_ENDPOINT_URL", "http://127.0.0.1:5599"),
            ("AWS_REGION", "us-east-1"),
            ("AWS_ACCESS_KEY_ID", "testing"),
            ("AWS_SECRET_ACCESS_KEY", "secret"),
        ]);
        let got = gdal_s3_config_from(|k| env.get(k).map(|v| (*v).to_owned()));
        let got: HashMap<&str, &str> = got.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        assert_eq!(got["AWS_S3_ENDPOINT"], "127.0.0.1:5599");
        assert_eq!(got["AWS_HTTPS"], "NO");
        assert_eq!(got["AWS_VIRTUAL_HOSTING"], "FALSE");
        assert_eq!(got["AWS_REGION"], "us-east-1");
        assert_eq!(got["AWS_SECRET_ACCESS_KEY"], "secret");
    }

    #[test]
    fn gdal_config_prefers_the_s3_endpoint_and_keeps_https() {
        let env = HashMap::from([
            ("AWS_ENDPOINT_URL", "http://127.0.0.1:1"),
            ("AWS_ENDPOINT_URL_S3", "https://s3.example.com:9000/ignored"),
        ]);
        let got = gdal_s3_config_from(|k| env.get(k).map(|v| (*v).to_owned()));
        assert!(got.contains(&("AWS_S3_ENDPOINT".into(), "s3.example.com:9000".into())));
        assert!(!got.iter().any(|(k, _)| k == "AWS_HTTPS"));
        assert!(gdal_s3_config_from(|_| None).is_empty());
    }
}

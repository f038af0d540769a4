//! The conformance suite run against the AWS backends against the local emulator: S3 and
//! DynamoDB on moto's single-threaded server (`AWS_ENDPOINT_URL`), SQS on its threaded server
//! (`AWS_ENDPOINT_URL_SQS`) — a fresh bucket, table prefix and queue names per test.
//!
//! Why two servers: the race tests (32 concurrent Creates → exactly one `Written`, the CAS
//! counter exact, 16 concurrent claim acquires → one holder) prove that the storage engine
//! evaluates each precondition atomically with its write. Real S3 and DynamoDB do; moto's
//! default threaded server does not (concurrent conditional writes there produced several
//! winners), so S3 and DynamoDB are served one request at a time, which is atomic. SQS stays on
//! a threaded server because a single-threaded one would block every S3 and DynamoDB request
//! behind an SQS long poll. `.ci/aws-emulator start` sets both up.
//!
//! Without the emulator (`TILEGATE_AWS_EMULATOR` unset) the suite fails loudly in CI (`CI`
//! set) and is skipped with a message elsewhere.

use async_trait::async_trait;
use std::sync::Arc;
use std::time::Duration;
use tilegate_aws::{DynamoTables, S3Location, S3Store, SqsQueue, config};
use tilegate_conformance::{
    Capabilities, ChildUrls, Harness, ObjectHarness, conformance_suite, unique,
};
use tilegate_core::object::ObjectStore;
use tilegate_core::queue::WorkQueue;
use tilegate_core::table::{ClaimTable, CounterTable, JobTable, ManifestTable};

struct Aws {
    objects: S3Store,
    tables: DynamoTables,
    sqs: aws_sdk_sqs::Client,
}

fn no_emulator() -> ! {
    tilegate_conformance::no_emulator("aws", "eval \"$(bash .ci/aws-emulator start)\"")
}

/// A fresh bucket and table prefix on the emulator.
async fn harness() -> Arc<dyn Harness> {
    if std::env::var_os("TILEGATE_AWS_EMULATOR").is_none() {
        no_emulator();
    }
    let sdk = config::load_sdk_config().await;
    // Bucket names: lowercase, digits and `-`, 3-63 characters; `unique` gives ~35.
    let bucket = unique("tg");
    let objects = S3Store::new(
        config::s3_client(&sdk),
        S3Location {
            bucket,
            prefix: "conformance".to_owned(),
        },
    );
    let region = sdk.region().map(|r| r.as_ref().to_owned());
    objects
        .ensure_bucket(region.as_deref())
        .await
        .expect("create the test bucket on the emulator");
    let tables = DynamoTables::new(config::dynamodb_client(&sdk), &unique("tg"));
    tables
        .ensure_tables()
        .await
        .expect("create the test tables on the emulator");
    Arc::new(Aws {
        objects,
        tables,
        sqs: config::sqs_client(&sdk),
    })
}

#[async_trait]
impl ObjectHarness for Aws {
    fn caps(&self) -> Capabilities {
        Capabilities {
            // The child helper opens only file:// and sqlite:// stores.
            cross_process: false,
            // S3 reports LastModified in whole seconds.
            last_modified_resolution: Duration::from_secs(1),
            min_part_size: 5 * 1024 * 1024,
            // SQS standard queues deliver at least once (and threaded moto may hand one
            // message to two receivers at once).
            exclusive_receive: false,
            parts_in_any_order: true,
            // moto ignores If-Match on CompleteMultipartUpload; the store looks first, and
            // If-None-Match: * is enforced.
            completion_unenforced: None,
        }
    }

    fn objects(&self) -> Arc<dyn ObjectStore> {
        Arc::new(self.objects.clone())
    }

    fn child_urls(&self) -> Option<ChildUrls> {
        None
    }

    fn upstream(&self) -> Result<String, &'static str> {
        std::env::var("AWS_ENDPOINT_URL").map_err(|_| "AWS_ENDPOINT_URL is unset")
    }

    async fn objects_via(&self, endpoint: &str) -> Arc<dyn ObjectStore> {
        let sdk = config::load_sdk_config().await;
        let client = aws_sdk_s3::Client::from_conf(
            aws_sdk_s3::config::Builder::from(&sdk)
                .endpoint_url(endpoint)
                .force_path_style(true)
                .build(),
        );
        Arc::new(S3Store::new(
            client,
            S3Location {
                bucket: self.objects.bucket().to_owned(),
                prefix: self.objects.prefix().to_owned(),
            },
        ))
    }
}

#[async_trait]
impl Harness for Aws {
    fn jobs(&self) -> Arc<dyn JobTable> {
        Arc::new(self.tables.clone())
    }

    fn manifest(&self) -> Arc<dyn ManifestTable> {
        Arc::new(self.tables.clone())
    }

    fn claims(&self) -> Arc<dyn ClaimTable> {
        Arc::new(self.tables.clone())
    }

    fn counters(&self) -> Arc<dyn CounterTable> {
        Arc::new(self.tables.clone())
    }

    fn ledger(&self) -> Arc<dyn tilegate_core::ledger::LedgerTable> {
        Arc::new(self.tables.clone())
    }

    async fn queue(&self, name: &str, max_receive_count: u32) -> Arc<dyn WorkQueue> {
        SqsQueue::ensure(&self.sqs, name, max_receive_count)
            .await
            .expect("create the test queue on the emulator");
        Arc::new(
            SqsQueue::open(self.sqs.clone(), name, max_receive_count)
                .await
                .expect("open the test queue"),
        )
    }
}

conformance_suite!(harness);

/// `AwsBackends::init` and `connect`, outside the shared suite: init is idempotent, keys land
/// under the URL's prefix, and a queue that was never initialised is a permanent error.
mod deployment {
    use super::{no_emulator, unique};
    use bytes::Bytes;
    use std::time::Duration;
    use tilegate_aws::{AwsBackends, S3Store};
    use tilegate_conformance::object_key;
    use tilegate_core::object::{ObjectStore as _, ObjectStoreExt as _, PutOutcome};
    use tilegate_core::queue::{AckOutcome, ReceiveOptions};

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn init_is_idempotent_and_connect_opens_every_store() {
        if std::env::var_os("TILEGATE_AWS_EMULATOR").is_none() {
            no_emulator();
        }
        let bucket = unique("tg-init");
        let objects = format!("s3://{bucket}/out/run-1");
        let tables = format!("dynamodb://{}", unique("tg-init"));
        let queue = format!("sqs://{}", unique("q-init"));

        let first = AwsBackends::init(Some(&objects), &tables, &queue, true, 4)
            .await
            .expect("first init");
        assert_eq!(
            first.created.len(),
            7,
            "bucket, five tables, queue: {first:?}"
        );
        assert!(first.existing.is_empty(), "{first:?}");
        let again = AwsBackends::init(Some(&objects), &tables, &queue, true, 4)
            .await
            .expect("second init");
        assert!(again.created.is_empty(), "{again:?}");
        assert_eq!(again.existing.len(), 7, "{again:?}");

        let b = AwsBackends::connect(&objects, &tables, &queue, 4)
            .await
            .expect("connect");
        assert_eq!(b.queue.max_receive_count(), 4);
        assert!(matches!(
            b.objects
                .put_create(&object_key("tiles/a.tif"), Bytes::from_static(b"a"))
                .await
                .unwrap(),
            PutOutcome::Written(_)
        ));
        // The key is stored under the URL's prefix.
        let root = S3Store::connect(&format!("s3://{bucket}")).await.unwrap();
        let listed: Vec<String> = root
            .list("out/")
            .await
            .unwrap()
            .into_iter()
            .map(|m| m.key)
            .collect();
        assert_eq!(listed, vec!["out/run-1/tiles/a.tif".to_owned()]);

        b.queue.send_batch(&["hello".to_owned()]).await.unwrap();
        let got = b
            .queue
            .receive(ReceiveOptions {
                max: 10,
                wait: Duration::from_secs(2),
                visibility: Duration::from_secs(30),
            })
            .await
            .unwrap();
        assert_eq!(got.len(), 1);
        assert_eq!(
            b.queue.ack(&got[0].receipt).await.unwrap(),
            AckOutcome::Deleted
        );
        assert_eq!(
            b.counters
                .get_counters(&tilegate_core::JobId::derive("u", "e", "r", "p"))
                .await
                .unwrap()
                .len(),
            0
        );

        let err = AwsBackends::connect(
            &objects,
            &tables,
            &format!("sqs://{}", unique("q-never")),
            4,
        )
        .await
        .unwrap_err();
        assert!(!err.is_retryable(), "{err:?}");
        let err = AwsBackends::connect(&format!("s3://{}", unique("tg-never")), &tables, &queue, 4)
            .await
            .unwrap_err();
        assert!(!err.is_retryable(), "{err:?}");
    }
}

/// A manifest row whose transaction's answer is lost: the resend is cancelled by the row the
/// first send created, which is recognised as its own, and the partition's counter — in the
/// same transaction as the row — counts it once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_manifest_row_whose_answer_is_lost_is_created_and_counted_once() {
    use tilegate_conformance::tables::{entry, new_job};
    use tilegate_core::grid::Window;
    use tilegate_core::table::CreateOutcome;
    if std::env::var_os("TILEGATE_AWS_EMULATOR").is_none() {
        no_emulator();
    }
    let upstream = std::env::var("AWS_ENDPOINT_URL").expect("the emulator's endpoint");
    let proxy = tilegate_conformance::lossy::LossyProxy::start(&upstream).await;
    let sdk = config::load_sdk_config().await;
    let client = aws_sdk_dynamodb::Client::from_conf(
        aws_sdk_dynamodb::config::Builder::from(&sdk)
            .endpoint_url(&proxy.url)
            .build(),
    );
    let tables = DynamoTables::new(client, &unique("tg"));
    tables.ensure_tables().await.expect("tables");
    let job = new_job("manifest-lost");
    tables.create_job(&job).await.unwrap();
    let row = entry(&job.job_id, Window::new(1, 2), 5);
    // Also reads (and keeps) the job's shard count, so that the next POST is the transaction.
    assert_eq!(tables.recorded(&job.job_id, 0).await.unwrap(), 0);

    proxy.lose_next_writes(1);
    assert_eq!(
        tables.put_entry(&row).await.unwrap(),
        CreateOutcome::Created,
        "the resend finds its own row"
    );
    assert_eq!(proxy.lost(), 1, "the first answer was lost");
    assert_eq!(tables.recorded(&job.job_id, 0).await.unwrap(), 1);
    assert!(matches!(
        tables.put_entry(&row).await.unwrap(),
        CreateOutcome::AlreadyExists(_)
    ));
    assert_eq!(
        tables.recorded(&job.job_id, 0).await.unwrap(),
        1,
        "counted once after a lost answer and a duplicate"
    );
    let transactions = proxy
        .requests()
        .iter()
        .filter(|(_, target)| {
            target
                .as_deref()
                .is_some_and(|t| t.ends_with("TransactWriteItems"))
        })
        .count();
    assert_eq!(
        transactions, 3,
        "the lost one, its resend and the duplicate"
    );
}

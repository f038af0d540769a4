//! The AWS emulator's wiring: per-test bucket, table and queue names, and `tilegate` run against
//! them.

use crate::tilegate_bin;
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, Output};

/// S3, DynamoDB and SQS names unique to one test, on the emulator the README's test command
/// starts (S3 and DynamoDB single-threaded for atomic preconditions, SQS threaded).
#[derive(Debug, Clone)]
pub struct Aws {
    pub objects: String,
    pub tables: String,
    pub queue: String,
}

impl Aws {
    /// Names for `test`, or `None` (with a printed reason) without an emulator outside CI. In
    /// CI a missing emulator fails the test instead.
    pub fn for_test(test: &str) -> Option<Self> {
        use std::sync::atomic::{AtomicU64, Ordering};
        if std::env::var_os("TILEGATE_AWS_EMULATOR").is_none() {
            assert!(
                std::env::var_os("CI").is_none(),
                "{test}: no AWS emulator in CI: run through .ci/test, which starts it"
            );
            println!(
                "SKIPPED {test}: no AWS emulator (run eval \"$(bash .ci/aws-emulator start)\")"
            );
            return None;
        }
        static N: AtomicU64 = AtomicU64::new(0);
        let id = format!(
            "tg{}-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::SeqCst),
            tilegate_core::now_millis() % 100_000
        );
        Some(Self {
            objects: format!("s3://{id}/out"),
            tables: format!("dynamodb://{id}"),
            queue: format!("sqs://{id}"),
        })
    }

    /// The backend flags of every command.
    pub fn args<'a>(&'a self, data: &'a Path) -> Vec<&'a str> {
        vec![
            "--data",
            data.to_str().unwrap(),
            "--objects",
            &self.objects,
            "--tables",
            &self.tables,
            "--queue",
            &self.queue,
        ]
    }

    pub fn run(&self, data: &Path, args: &[&str], env: &[(&str, &str)]) -> Output {
        let mut cmd = Command::new(tilegate_bin());
        cmd.args(self.args(data)).args(args);
        for (k, v) in env {
            cmd.env(k, v);
        }
        cmd.output().expect("run tilegate")
    }

    pub fn json(&self, data: &Path, args: &[&str]) -> Value {
        let mut a = vec!["--json"];
        a.extend_from_slice(args);
        let out = self.run(data, &a, &[]);
        assert!(
            out.status.success(),
            "tilegate {args:?} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).expect("json output")
    }

    /// Every tile object: key → (ETag, LastModified).
    pub fn tiles(
        &self,
        job: &str,
    ) -> BTreeMap<String, (tilegate_core::ETag, std::time::SystemTime)> {
        use tilegate_core::object::ObjectStore;
        let rt = tokio::runtime::Runtime::new().unwrap();
        let store = rt
            .block_on(tilegate_aws::S3Store::connect(&self.objects))
            .unwrap();
        let list = rt
            .block_on(store.list(&format!("tilegate/tiles/{job}/")))
            .unwrap();
        list.into_iter()
            .map(|m| (m.key, (m.e_tag, m.last_modified)))
            .collect()
    }
}

/// The emulator's SNS and EventBridge endpoint: moto serves them on the SQS server, where the
/// queues they deliver to live.
pub fn sns_endpoint() -> String {
    std::env::var("AWS_ENDPOINT_URL_SQS")
        .or_else(|_| std::env::var("AWS_ENDPOINT_URL"))
        .expect("the emulator's endpoint")
}

/// SNS and EventBridge clients that reach the emulator's (a client's own endpoint: the
/// environment's AWS_ENDPOINT_URL, S3's server, would win over one set on the SDK config).
pub fn sns_clients(
    sdk: &tilegate_aws::aws_config::SdkConfig,
) -> (
    tilegate_aws::aws_sdk_sns::Client,
    tilegate_aws::aws_sdk_eventbridge::Client,
) {
    use tilegate_aws::{aws_sdk_eventbridge as eb, aws_sdk_sns as sns};
    let url = sns_endpoint();
    (
        sns::Client::from_conf(sns::config::Builder::from(sdk).endpoint_url(&url).build()),
        eb::Client::from_conf(eb::config::Builder::from(sdk).endpoint_url(&url).build()),
    )
}

/// Create the SQS queue `name`: its URL and ARN.
pub async fn queue_with_arn(
    sqs: &tilegate_aws::aws_sdk_sqs::Client,
    name: &str,
) -> (String, String) {
    let url = sqs
        .create_queue()
        .queue_name(name)
        .send()
        .await
        .unwrap()
        .queue_url
        .unwrap();
    let arn = sqs
        .get_queue_attributes()
        .queue_url(&url)
        .attribute_names(tilegate_aws::aws_sdk_sqs::types::QueueAttributeName::QueueArn)
        .send()
        .await
        .unwrap()
        .attributes
        .unwrap()
        .values()
        .next()
        .unwrap()
        .clone();
    (url, arn)
}

/// An SNS topic `name` with an SQS subscription to read it by: (topic ARN, queue URL).
pub async fn topic_with_queue(
    sdk: &tilegate_aws::aws_config::SdkConfig,
    name: &str,
) -> (String, String) {
    let sqs = tilegate_aws::config::sqs_client(sdk);
    let (sns, _) = sns_clients(sdk);
    let (url, arn) = queue_with_arn(&sqs, &format!("{name}-sns")).await;
    let topic = sns
        .create_topic()
        .name(name)
        .send()
        .await
        .unwrap()
        .topic_arn
        .unwrap();
    sns.subscribe()
        .topic_arn(&topic)
        .protocol("sqs")
        .endpoint(&arn)
        .send()
        .await
        .unwrap();
    (topic, url)
}

/// The bodies of every message on the queue at `url` (three one-second long polls).
pub async fn drain(sqs: &tilegate_aws::aws_sdk_sqs::Client, url: &str) -> Vec<String> {
    let mut bodies = Vec::new();
    for _ in 0..3 {
        let got = sqs
            .receive_message()
            .queue_url(url)
            .max_number_of_messages(10)
            .wait_time_seconds(1)
            .send()
            .await
            .unwrap();
        bodies.extend(
            got.messages
                .unwrap_or_default()
                .into_iter()
                .filter_map(|m| m.body),
        );
    }
    bodies
}

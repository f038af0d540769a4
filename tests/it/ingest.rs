//! The unattended pipeline: a scene lands and, with nobody typing a command after the upload,
//! it is planned (`tilegate ingest`), tiled and assembled (`work --assemble`) and announced
//! (`--announce`) — on the embedded backend with a watched directory, and on the AWS emulator
//! with an S3 notification on an arrivals queue — and the same under chaos.

use serde_json::Value;
use std::path::Path;
use std::process::{Child, Command};
use std::time::{Duration, Instant};
use tilegate_tests::webhook::{Delivery, WebhookReceiver};
use tilegate_tests::{
    Aws, assert_scene_matches_source, sample, tempdir, tg_json, tilegate_bin, validate_stac,
};

/// Long-running processes, stopped (SIGTERM, then SIGKILL) when dropped; each one's output
/// goes to `NAME.log` in the artifacts directory, for a failure to be read.
#[derive(Default)]
struct Procs(Vec<(String, Child)>);

impl Procs {
    fn spawn(&mut self, name: &str, mut cmd: Command) {
        let log = tilegate_tests::artifacts_dir().join(format!(
            "{}-{name}.log",
            std::thread::current()
                .name()
                .unwrap_or("test")
                .rsplit("::")
                .next()
                .unwrap_or("test")
        ));
        let file = std::fs::File::create(&log).expect("a log file");
        let child = cmd
            .env("TILEGATE_LOG", "info")
            .stdout(file.try_clone().expect("the log file"))
            .stderr(file)
            .spawn()
            .expect("spawn tilegate");
        self.0.push((name.to_owned(), child));
    }

    /// Stop every process: SIGTERM, up to 30 s to finish, then SIGKILL.
    fn stop(&mut self) {
        for (_, c) in &self.0 {
            // SAFETY: kill(2) on a child's PID has no memory-safety preconditions.
            unsafe {
                libc::kill(c.id() as i32, libc::SIGTERM);
            }
        }
        let deadline = Instant::now() + Duration::from_secs(30);
        for (_, c) in &mut self.0 {
            while Instant::now() < deadline && matches!(c.try_wait(), Ok(None)) {
                std::thread::sleep(Duration::from_millis(50));
            }
            let _ = c.kill();
            let _ = c.wait();
        }
        self.0.clear();
    }
}

impl Drop for Procs {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Wait up to `secs` for `done`, polling.
fn wait_for(secs: u64, what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(secs);
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn published(got: &[Delivery]) -> Vec<Value> {
    got.iter()
        .map(Delivery::json)
        .filter(|m| m["type"] == "tilegate.job.published")
        .collect()
}

/// The announced STAC Item passes stac-validator.
fn assert_valid_item(dir: &Path, message: &Value, name: &str) {
    let item = dir.join(format!("{name}.json"));
    std::fs::write(&item, serde_json::to_vec(&message["item"]).unwrap()).unwrap();
    validate_stac(&item).unwrap();
}

fn embedded(data: &Path, args: &[&str]) -> Command {
    let mut cmd = Command::new(tilegate_bin());
    cmd.arg("--data").arg(data).args(args);
    cmd.env("TILEGATE_WEBHOOK_SECRET", "s3cret")
        .env("TILEGATE_TEST_WEBHOOK_BACKOFF_MS", "20");
    cmd
}

/// On one machine: `ingest --watch` on an inbox directory and two `work --assemble
/// --announce` pools are started, then a scene is copied into the inbox. It is planned once,
/// tiled, assembled once and announced once to a signed webhook with its STAC Item; a file the
/// filters leave out and a link that leads out of the inbox are not planned.
#[test]
fn a_scene_dropped_in_a_watched_directory_is_published_and_announced() {
    let tmp = tempdir();
    let data = tmp.path().join("data");
    let inbox = tmp.path().join("inbox");
    std::fs::create_dir_all(&inbox).unwrap();
    let scene = tmp.path().join("scene.tif");
    sample(&data, &scene, 256, 41);
    let hook = WebhookReceiver::start();
    let mut procs = Procs::default();
    let inbox_s = inbox.to_str().unwrap();
    let ingest = [
        "ingest",
        "--watch",
        inbox_s,
        "--key-suffix",
        ".tif",
        "--window",
        "64",
        "--poll-s",
        "0.2",
    ];
    procs.spawn("ingest", embedded(&data, &ingest));
    for i in 0..2 {
        let work = [
            "work",
            "--assemble",
            "--announce",
            hook.url.as_str(),
            "--threads",
            "1",
        ];
        procs.spawn(&format!("work-{i}"), embedded(&data, &work));
    }
    // The upload: nobody types anything after it.
    std::fs::write(inbox.join("notes.txt"), "not a scene").unwrap();
    std::os::unix::fs::symlink(&scene, inbox.join("elsewhere.tif")).unwrap();
    std::fs::copy(&scene, inbox.join("scene one.tif")).unwrap();
    wait_for(180, "the published scene's announcement", || {
        !published(&hook.received()).is_empty()
    });
    // Nothing else is on its way: no second announcement, no second job.
    std::thread::sleep(Duration::from_secs(2));
    procs.stop();

    let got = hook.received();
    assert_eq!(got.len(), 1, "one announcement: {got:?}");
    let message = got[0].json();
    let job = message["job_id"].as_str().unwrap().to_owned();
    assert!(
        message["idempotency_key"]
            .as_str()
            .unwrap()
            .starts_with(&format!("{job}:published:")),
        "{message}"
    );
    assert!(
        message["source"]
            .as_str()
            .unwrap()
            .ends_with("inbox/scene one.tif"),
        "{message}"
    );
    assert!(got[0].header("x-tilegate-signature").is_some());
    assert_valid_item(tmp.path(), &message, "announced");

    // One job: the link and the notes planned nothing.
    let jobs = std::fs::read_dir(data.join("objects/tilegate/tiles"))
        .unwrap()
        .count();
    assert_eq!(jobs, 1);
    let st = tg_json(&data, &["status", &job]);
    assert_eq!(st["lifecycle"], "published", "{st}");
    assert_eq!(st["manifest_rows"], 16, "{st}");
    assert_eq!(st["queue"]["dead"], 0, "{st}");
    let key = st["scene_output"]["key"].as_str().unwrap();
    assert_scene_matches_source(&data.join("objects").join(key), &scene);
}

/// S3's event notification for a created object, as documented
/// (notification-content-structure.html): the key URL-encoded, a space as `+`. The emulator
/// runs S3 and SQS as separate servers, so S3's own notification cannot reach the queue the
/// pipeline reads; the test sends this document there, as S3 would.
fn s3_event(bucket: &str, key: &str, size: u64) -> String {
    let encoded: String = key
        .bytes()
        .map(|b| match b {
            b' ' => "+".to_owned(),
            b if b.is_ascii_alphanumeric() || b"-_./".contains(&b) => (b as char).to_string(),
            b => format!("%{b:02X}"),
        })
        .collect();
    serde_json::json!({"Records": [{
        "eventVersion": "2.1", "eventSource": "aws:s3", "awsRegion": "us-east-1",
        "eventTime": "2026-12-06T00:00:00.000Z", "eventName": "ObjectCreated:Put",
        "userIdentity": {"principalId": "AWS:EXAMPLE"},
        "requestParameters": {"sourceIPAddress": "127.0.0.1"},
        "responseElements": {"x-amz-request-id": "EXAMPLE", "x-amz-id-2": "EXAMPLE"},
        "s3": {"s3SchemaVersion": "1.0", "configurationId": "tilegate-arrivals",
            "bucket": {"name": bucket, "ownerIdentity": {"principalId": "EXAMPLE"},
                "arn": format!("arn:aws:s3:::{bucket}")},
            "object": {"key": encoded, "size": size, "eTag": "0", "sequencer": "0A1B2C3D4E5F678901"}}
    }]})
    .to_string()
}

/// An AWS deployment's pieces on the emulator: a source bucket, an arrivals queue, an SNS topic
/// read through an SQS subscription, and a webhook.
struct Deployment {
    aws: Aws,
    source_bucket: String,
    arrivals: String,
    topic: String,
    topic_queue: String,
    rt: tokio::runtime::Runtime,
    sqs: tilegate_aws::aws_sdk_sqs::Client,
    s3: tilegate_aws::aws_sdk_s3::Client,
}

impl Deployment {
    fn new(aws: Aws, data: &Path) -> Self {
        aws.json(data, &["init", "--create-bucket"]);
        let id = aws.queue.trim_start_matches("sqs://").to_owned();
        let arrivals = format!("sqs://{id}-arrivals");
        // `init` with the arrivals queue as --queue creates it and its dead-letter queue.
        let out = Command::new(tilegate_bin())
            .args(["--data", data.to_str().unwrap(), "--objects", &aws.objects])
            .args(["--tables", &aws.tables, "--queue", &arrivals, "init"])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let rt = tokio::runtime::Runtime::new().unwrap();
        let source_bucket = format!("{id}-src");
        let (s3, sqs, topic, topic_queue) = rt.block_on(async {
            let sdk = tilegate_aws::config::load_sdk_config().await;
            let s3 = tilegate_aws::config::s3_client(&sdk);
            s3.create_bucket()
                .bucket(&source_bucket)
                .send()
                .await
                .unwrap();
            let (topic, topic_queue) =
                tilegate_tests::aws::topic_with_queue(&sdk, &format!("{id}-scenes")).await;
            (
                s3,
                tilegate_aws::config::sqs_client(&sdk),
                topic,
                topic_queue,
            )
        });
        Self {
            aws,
            source_bucket,
            arrivals,
            topic,
            topic_queue,
            rt,
            sqs,
            s3,
        }
    }

    fn command(&self, data: &Path, args: &[&str]) -> Command {
        let mut cmd = Command::new(tilegate_bin());
        cmd.args(self.aws.args(data)).args(args);
        let sns = tilegate_tests::aws::sns_endpoint();
        cmd.env("AWS_ENDPOINT_URL_SNS", &sns)
            .env("TILEGATE_WEBHOOK_SECRET", "s3cret")
            .env("TILEGATE_TEST_WEBHOOK_BACKOFF_MS", "20");
        cmd
    }

    /// Upload `scene` as `key` of the source bucket.
    fn upload(&self, scene: &Path, key: &str) -> u64 {
        let bytes = std::fs::read(scene).unwrap();
        let size = bytes.len() as u64;
        self.rt.block_on(async {
            self.s3
                .put_object()
                .bucket(&self.source_bucket)
                .key(key)
                .body(bytes.into())
                .send()
                .await
                .unwrap();
        });
        size
    }

    /// Send a message to the arrivals queue.
    fn notify(&self, body: &str) {
        let name = self.arrivals.trim_start_matches("sqs://");
        self.rt.block_on(async {
            let url = self
                .sqs
                .get_queue_url()
                .queue_name(name)
                .send()
                .await
                .unwrap()
                .queue_url
                .unwrap();
            self.sqs
                .send_message()
                .queue_url(url)
                .message_body(body)
                .send()
                .await
                .unwrap();
        });
    }

    /// The messages the SNS topic delivered to its subscribed queue.
    fn topic_messages(&self) -> Vec<Value> {
        self.rt
            .block_on(tilegate_tests::aws::drain(&self.sqs, &self.topic_queue))
            .iter()
            .map(|b| {
                let envelope: Value = serde_json::from_str(b).unwrap();
                serde_json::from_str(envelope["Message"].as_str().unwrap()).unwrap()
            })
            .collect()
    }
}

/// On the AWS emulator: `ingest` on the arrivals queue and two `work --assemble --announce`
/// pools are started; a scene is uploaded to the source bucket and S3's notification of it
/// arrives twice (at-least-once delivery). The scene is planned once (the second notification
/// is absorbed by the job ID), tiled, assembled once, and announced once on the SNS topic and
/// once on the webhook, each with a STAC Item that passes stac-validator.
#[test]
fn a_scene_uploaded_to_s3_is_published_and_announced() {
    let Some(aws) = Aws::for_test("a_scene_uploaded_to_s3_is_published_and_announced") else {
        return;
    };
    let tmp = tempdir();
    let data = tmp.path();
    let d = Deployment::new(aws, data);
    let scene = data.join("scene.tif");
    sample(data, &scene, 512, 42);
    let hook = WebhookReceiver::start();
    let mut procs = Procs::default();
    let bucket = format!("s3://{}", d.source_bucket);
    procs.spawn(
        "ingest",
        d.command(
            data,
            &[
                "ingest",
                "--arrivals",
                &d.arrivals,
                "--bucket",
                &bucket,
                "--key-suffix",
                ".tif",
                "--window",
                "256",
            ],
        ),
    );
    let sinks = format!("sns:{},{}", d.topic, hook.url);
    for i in 0..2 {
        procs.spawn(
            &format!("work-{i}"),
            d.command(
                data,
                &["work", "--assemble", "--announce", &sinks, "--threads", "1"],
            ),
        );
    }
    let key = "incoming/scene one.tif";
    let size = d.upload(&scene, key);
    let event = s3_event(&d.source_bucket, key, size);
    d.notify(&event);
    d.notify(&event);
    wait_for(240, "the published scene's announcement", || {
        !published(&hook.received()).is_empty()
    });
    std::thread::sleep(Duration::from_secs(2));
    procs.stop();

    let got = hook.received();
    assert_eq!(got.len(), 1, "one webhook announcement: {got:?}");
    let message = got[0].json();
    let job = message["job_id"].as_str().unwrap().to_owned();
    assert_eq!(
        message["source"],
        format!("s3://{}/{key}", d.source_bucket),
        "{message}"
    );
    assert_valid_item(data, &message, "webhook");
    let via_sns = d.topic_messages();
    assert_eq!(via_sns.len(), 1, "one SNS announcement: {via_sns:?}");
    assert_eq!(via_sns[0]["idempotency_key"], message["idempotency_key"]);
    assert_valid_item(data, &via_sns[0], "sns");

    let st = d.aws.json(data, &["status", &job]);
    assert_eq!(st["lifecycle"], "published", "{st}");
    assert_eq!(st["manifest_rows"], 4, "{st}");
    assert_eq!(st["queue"]["dead"], 0, "{st}");
    assert_eq!(st["counters"]["claims_won_total"], 1, "{st}");
    // Planned once: the duplicate notification enqueued nothing, so every window was
    // delivered once (no `already present` tile).
    let counter = |name: &str| st["counters"][name].as_u64().unwrap_or(0);
    assert_eq!(counter("tiles_written_total"), 4, "{st}");
    assert_eq!(
        counter("duplicate_encodes_skipped_total")
            + counter("conditional_write_precondition_failed_total"),
        0,
        "{st}"
    );
    assert_eq!(d.aws.tiles(&job).len(), 4);
}

/// The same on the Lambda functions: the ingest handler is fed the SQS batch holding S3's
/// notification (twice: a duplicate delivery), the worker handler — assembling and announcing,
/// as deploy/aws/template.yaml configures it — the batches of window messages the ingest
/// enqueued. The scene is planned once, assembled by the handler that records the last
/// window, and announced once on the SNS topic and once on the webhook.
#[test]
fn the_lambda_functions_take_an_uploaded_scene_to_its_announcement() {
    use std::sync::Arc;
    use tilegate_pipeline::ingest::{Ingest, IngestConfig, Ingested};
    let Some(aws) =
        Aws::for_test("the_lambda_functions_take_an_uploaded_scene_to_its_announcement")
    else {
        return;
    };
    let tmp = tempdir();
    let data = tmp.path();
    let d = Deployment::new(aws.clone(), data);
    let scene = data.join("scene.tif");
    sample(data, &scene, 512, 43);
    let hook = WebhookReceiver::start();
    let key = "incoming/lambda scene.tif";
    let size = d.upload(&scene, key);
    let event = s3_event(&d.source_bucket, key, size);
    d.notify(&event);
    d.notify(&event);
    let rt = &d.rt;
    // GDAL reads the source through the emulator, as the function's main sets it up.
    tilegate_cog::set_config_options(tilegate_aws::gdal_s3_config());
    let b = rt.block_on(tilegate_tests::Target::Aws(aws).backends(data));
    let arrivals: Arc<dyn tilegate_core::queue::WorkQueue> = Arc::new(
        rt.block_on(tilegate_aws::SqsQueue::connect(
            &d.arrivals,
            tilegate_core::queue::DEFAULT_MAX_RECEIVE_COUNT,
        ))
        .unwrap(),
    );
    let cfg = IngestConfig {
        buckets: vec![format!("s3://{}", d.source_bucket)],
        key_suffixes: vec![".tif".to_owned()],
        recipe: tilegate_core::Recipe {
            window: 256,
            ..tilegate_core::Recipe::copy_all()
        },
        ..IngestConfig::default()
    };
    let ingest = tilegate_lambda::IngestHandler::new(
        Ingest::new(b.clone(), cfg, Arc::default()),
        arrivals.clone(),
    );
    // The two notifications, as the event source mapping hands them over.
    let mut notes = Vec::new();
    for _ in 0..10 {
        let opts = tilegate_core::queue::ReceiveOptions {
            max: 10,
            wait: Duration::from_secs(1),
            visibility: Duration::from_secs(60),
        };
        notes.extend(rt.block_on(arrivals.receive(opts)).unwrap());
        if notes.len() == 2 {
            break;
        }
    }
    assert_eq!(notes.len(), 2);
    let batch = rt.block_on(ingest.handle(crate::lambda::event(&notes)));
    assert!(batch.response.batch_item_failures.is_empty(), "{batch:?}");
    assert!(batch.dead_lettered.is_empty(), "{batch:?}");
    let outcomes: Vec<&Ingested> = batch.outcomes.iter().flat_map(|(_, i)| i).collect();
    assert!(
        matches!(
            outcomes[..],
            [
                Ingested::Planned { enqueued: 4, .. },
                Ingested::Duplicate { .. }
            ]
        ),
        "{outcomes:?}"
    );

    // The worker function, assembling and announcing.
    let sdk = rt.block_on(tilegate_aws::config::load_sdk_config());
    let (sns, _) = tilegate_tests::aws::sns_clients(&sdk);
    let sinks: Vec<Arc<dyn tilegate_core::announce::Sink>> = vec![
        Arc::new(tilegate_aws::announce::SnsTopic::with_client(sns, &d.topic)),
        Arc::new(tilegate_webhook::Webhook::new(&hook.url, Some(b"s3cret")).unwrap()),
    ];
    let on_complete = tilegate_pipeline::complete::AssembleOnComplete::new(
        b.clone(),
        tilegate_assembler::AssembleOptions::new("lambda-test".into()),
    )
    .announcing(tilegate_pipeline::announce::Announcer::new(
        b.clone(),
        sinks,
    ));
    let worker = tilegate_lambda::Handler::new(
        b.clone(),
        tilegate_lambda::HandlerConfig {
            visibility: Duration::from_secs(60),
            on_complete: Some(Arc::new(on_complete)),
            ..tilegate_lambda::HandlerConfig::default()
        },
    );
    let windows = rt.block_on(crate::lambda::receive_all(&b, 4));
    assert_eq!(
        windows.len(),
        4,
        "the duplicate notification enqueued nothing"
    );
    // Two batches, as two concurrent invocations would get them.
    for part in windows.chunks(2) {
        let r = rt.block_on(worker.handle(crate::lambda::event(part)));
        assert!(
            r.response.batch_item_failures.is_empty(),
            "{:?}",
            r.outcomes
        );
    }

    let got = hook.received();
    assert_eq!(got.len(), 1, "one webhook announcement: {got:?}");
    let message = got[0].json();
    assert_eq!(message["type"], "tilegate.job.published");
    assert_valid_item(data, &message, "webhook");
    let via_sns = d.topic_messages();
    assert_eq!(via_sns.len(), 1, "one SNS announcement: {via_sns:?}");
    assert_eq!(via_sns[0]["idempotency_key"], message["idempotency_key"]);
    let job = message["job_id"].as_str().unwrap();
    let st = d.aws.json(data, &["status", job]);
    assert_eq!(st["lifecycle"], "published", "{st}");
    assert_eq!(st["counters"]["claims_won_total"], 1, "{st}");
    let published = data.join("published.tif");
    let key = st["scene_output"]["key"].as_str().unwrap();
    let bytes = rt
        .block_on(tilegate_core::object::ObjectStoreExt::get_bytes(
            b.objects.as_ref(),
            &tilegate_tests::object_key(key),
        ))
        .unwrap()
        .bytes;
    std::fs::write(&published, &bytes).unwrap();
    assert_scene_matches_source(&published, &scene);
}

//! The unattended pipeline: a scene lands and, with nobody typing a command after the upload,
//! it is planned (`tilegate ingest`), tiled and assembled (`work --assemble`) and announced
//! (`--announce`) — on the embedded backend with a watched directory, and on the AWS emulator
//! with an S3 notification on an arrivals queue — and the same under chaos.

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};
use tilegate_tests::webhook::{Delivery, WebhookReceiver};
use tilegate_tests::{
    Aws, assert_scene_matches_source, sample, tempdir, tg_json, tilegate_bin, validate_stac,
};

/// Long-running processes, stopped (SIGTERM, then SIGKILL) when dropped; each one's output
/// goes to its own `TEST-NAME.log` in the artifacts directory, for a failure to be read.
#[derive(Default)]
struct Procs(Vec<Child>);

impl Procs {
    /// Start `cmd`; returns the path of its log.
    fn spawn(&mut self, name: &str, cmd: Command) -> PathBuf {
        let (child, log) = logged(name, cmd);
        self.0.push(child);
        log
    }

    /// Stop every process: SIGTERM, up to 30 s to finish, then SIGKILL.
    fn stop(&mut self) {
        for c in &self.0 {
            // SAFETY: kill(2) on a child's PID has no memory-safety preconditions.
            unsafe {
                libc::kill(c.id() as i32, libc::SIGTERM);
            }
        }
        let deadline = Instant::now() + Duration::from_secs(30);
        for c in &mut self.0 {
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

/// Start `cmd`, its output going to `TEST-NAME.log` in the artifacts directory (TEST the
/// running test's name; give each process of a test its own NAME), for a failure to be read.
/// Returns the child and the log's path.
fn logged(name: &str, mut cmd: Command) -> (Child, PathBuf) {
    let test = std::thread::current()
        .name()
        .unwrap_or("test")
        .rsplit("::")
        .next()
        .unwrap_or("test")
        .to_owned();
    let log = tilegate_tests::artifacts_dir().join(format!("{test}-{name}.log"));
    let file = std::fs::File::create(&log).expect("a log file");
    let child = cmd
        .env("TILEGATE_LOG", "info")
        .stdout(file.try_clone().expect("the log file"))
        .stderr(file)
        .spawn()
        .expect("spawn tilegate");
    (child, log)
}

/// Wait up to `secs` for `done`, polling.
fn wait_for(secs: u64, what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(secs);
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Wait up to `secs` for the published scene's announcement, give anything else two seconds to
/// arrive (nothing should: no second announcement, no second job), stop the processes, and
/// return the one delivery the webhook received.
fn the_one_announcement(hook: &WebhookReceiver, procs: &mut Procs, secs: u64) -> Delivery {
    wait_for(secs, "the published scene's announcement", || {
        !published(&hook.received()).is_empty()
    });
    std::thread::sleep(Duration::from_secs(2));
    procs.stop();
    let got = hook.received();
    assert_eq!(got.len(), 1, "one webhook announcement: {got:?}");
    got[0].clone()
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
        // Files arrive whole here (a copy in one step): a second's stillness is enough.
        "--settle",
        "1",
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
    let delivery = the_one_announcement(&hook, &mut procs, 180);
    let message = delivery.json();
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
    assert!(delivery.header("x-tilegate-signature").is_some());
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

/// Another process's hold on an SQLite database's write lock, released when dropped. In WAL
/// mode a writer must first take the `WAL_WRITE_LOCK`, a POSIX advisory lock on byte 120 of the
/// `-shm` file (sqlite.org/walformat.html, "2.3.1 How the locks are used"); holding it makes
/// every writer of the database wait `busy_timeout`, then fail with `SQLITE_BUSY` — the
/// embedded backend's retryable "database busy", as when a long transaction of another process
/// holds it.
struct SqliteWriteLock {
    _shm: std::fs::File,
}

impl SqliteWriteLock {
    /// Take the write lock of the database whose shared-memory file is `shm` (waiting while a
    /// writer holds it).
    fn hold(shm: &Path) -> Self {
        use std::os::fd::AsRawFd;
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(shm)
            .expect("the database's -shm file");
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            // SAFETY: a zeroed `flock` is a valid value; its fields are set below.
            let mut lock: libc::flock = unsafe { std::mem::zeroed() };
            lock.l_type = libc::F_WRLCK as _;
            lock.l_whence = libc::SEEK_SET as _;
            lock.l_start = 120;
            lock.l_len = 1;
            // SAFETY: fcntl(2) F_SETLK with a valid descriptor and a pointer to a live `flock`.
            let rc = unsafe { libc::fcntl(file.as_raw_fd(), libc::F_SETLK, &raw const lock) };
            if rc == 0 {
                return Self { _shm: file };
            }
            assert!(
                Instant::now() < deadline,
                "the database's write lock stays held"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// A file whose planning meets a fault that may pass — the table busy because another process
/// holds the database's write lock longer than the busy timeout — is tried again by a later
/// scan once its backoff is over, and planned once, without restarting `ingest --watch`; a
/// refusal (a link that leads out of the inbox) is still said once.
#[test]
fn a_watched_file_whose_planning_meets_a_passing_fault_is_planned_by_a_later_scan() {
    let tmp = tempdir();
    let data = tmp.path().join("data");
    let inbox = tmp.path().join("inbox");
    std::fs::create_dir_all(&inbox).unwrap();
    let scene = tmp.path().join("scene.tif");
    sample(&data, &scene, 256, 43);
    let mut procs = Procs::default();
    let ingest = [
        "ingest",
        "--watch",
        inbox.to_str().unwrap(),
        "--key-suffix",
        ".tif",
        "--window",
        "64",
        "--poll-s",
        "0.2",
        // Files arrive whole here (a copy in one step): a second's stillness is enough.
        "--settle",
        "1",
    ];
    let log = procs.spawn("ingest", embedded(&data, &ingest));
    let shm = data.join("tilegate.db-shm");
    wait_for(30, "ingest to open the database", || shm.exists());
    let lock = SqliteWriteLock::hold(&shm);
    std::os::unix::fs::symlink(&scene, inbox.join("elsewhere.tif")).unwrap();
    std::fs::copy(&scene, inbox.join("scene.tif")).unwrap();
    let read = || std::fs::read_to_string(&log).unwrap_or_default();
    let lines_with = |text: &str, needles: &[&str]| {
        text.lines()
            .filter(|l| needles.iter().all(|n| l.contains(n)))
            .count()
    };
    // The scene's planning waits the busy timeout (15 s), then fails.
    wait_for(
        60,
        "the scene's planning to fail while the lock is held",
        || lines_with(&read(), &["not planned", "inbox/scene.tif"]) > 0,
    );
    drop(lock);
    wait_for(60, "a later scan to plan the scene", || {
        lines_with(&read(), &["planned    ", "inbox/scene.tif"]) > 0
    });
    // Two more rounds of scans: nothing is planned or refused again.
    std::thread::sleep(Duration::from_secs(1));
    procs.stop();
    let text = read();
    assert_eq!(
        lines_with(&text, &["planned    ", "inbox/scene.tif"]),
        1,
        "{text}"
    );
    assert_eq!(
        lines_with(&text, &["refused    ", "inbox/scene.tif"]),
        0,
        "{text}"
    );
    assert_eq!(
        lines_with(&text, &["refused    ", "elsewhere.tif"]),
        1,
        "the refusal said once: {text}"
    );
    assert!(
        text.contains("1 planned") && text.contains("1 refused"),
        "the summary: {text}"
    );
    let job = text
        .lines()
        .find_map(|l| l.split("→ job ").nth(1))
        .and_then(|rest| rest.split(':').next())
        .unwrap()
        .to_owned();
    let st = tg_json(&data, &["status", &job]);
    assert_eq!(st["lifecycle"], "planned", "{st}");
    assert_eq!(st["queue"]["visible"], 16, "every window enqueued: {st}");
}

/// A writer copies a GeoTIFF into the watched inbox, writes half of it, pauses longer than many
/// scans (but less than `--settle`), then writes the rest: the scene is planned once, from the
/// whole file, every window written, none dead-lettered, and announced once, published.
/// Before, two scans that agreed on the half planned it: its windows were dead-lettered, the
/// job announced incomplete, and the whole file planned as a second job.
#[test]
fn a_file_still_being_written_is_planned_once_it_is_whole() {
    use std::io::Write as _;
    let tmp = tempdir();
    let data = tmp.path().join("data");
    let inbox = tmp.path().join("inbox");
    std::fs::create_dir_all(&inbox).unwrap();
    let scene = tmp.path().join("scene.tif");
    sample(&data, &scene, 256, 47);
    let hook = WebhookReceiver::start();
    let mut procs = Procs::default();
    let ingest = [
        "ingest",
        "--watch",
        inbox.to_str().unwrap(),
        "--key-suffix",
        ".tif",
        "--window",
        "64",
        "--poll-s",
        "0.2",
        "--settle",
        "8",
    ];
    let log = procs.spawn("ingest", embedded(&data, &ingest));
    let work = [
        "work",
        "--assemble",
        "--announce",
        hook.url.as_str(),
        "--threads",
        "1",
    ];
    procs.spawn("work", embedded(&data, &work));
    wait_for(30, "the processes to open the database", || {
        data.join("tilegate.db-shm").exists()
    });
    // The writer: half the file, a pause of many scans, the rest.
    let bytes = std::fs::read(&scene).unwrap();
    let mut file = std::fs::File::create(inbox.join("scene.tif")).unwrap();
    file.write_all(&bytes[..bytes.len() / 2]).unwrap();
    file.flush().unwrap();
    std::thread::sleep(Duration::from_secs(3));
    file.write_all(&bytes[bytes.len() / 2..]).unwrap();
    drop(file);
    let delivery = the_one_announcement(&hook, &mut procs, 180);
    let message = delivery.json();
    assert_eq!(message["type"], "tilegate.job.published", "{message}");
    let job = message["job_id"].as_str().unwrap().to_owned();
    let jobs = std::fs::read_dir(data.join("objects/tilegate/tiles"))
        .unwrap()
        .count();
    assert_eq!(jobs, 1, "one job: the half was never planned");
    let st = tg_json(&data, &["status", &job]);
    assert_eq!(st["lifecycle"], "published", "{st}");
    assert_eq!(st["manifest_rows"], 16, "every window written: {st}");
    assert_eq!(st["queue"]["dead"], 0, "{st}");
    let key = st["scene_output"]["key"].as_str().unwrap();
    assert_scene_matches_source(&data.join("objects").join(key), &scene);
    let text = std::fs::read_to_string(&log).unwrap();
    let planned = text
        .lines()
        .filter(|l| l.starts_with("planned ") && l.contains("inbox/scene.tif"))
        .count();
    assert_eq!(planned, 1, "{text}");
    assert!(!text.contains("refused "), "{text}");
}

/// Files that are not rasters dropped into the watched inbox — a text file named `.tif`, and a
/// GeoTIFF cut short that stays so (its directory first, as a COG's: GDAL opens it) — are
/// refused, each said once with its reason (`corrupt-raster`) however many scans see it, and
/// nothing is planned, so no window is dead-lettered; `--json` carries the refusals. Before,
/// the cut TIFF was planned and each of its windows dead-lettered.
#[test]
fn a_file_that_is_not_a_raster_is_refused_and_said_once() {
    let tmp = tempdir();
    let data = tmp.path().join("data");
    let inbox = tmp.path().join("inbox");
    std::fs::create_dir_all(&inbox).unwrap();
    let scene = tmp.path().join("scene.tif");
    sample(&data, &scene, 256, 53);
    let bytes = std::fs::read(&scene).unwrap();
    std::fs::write(inbox.join("notes.tif"), "not a scene").unwrap();
    std::fs::write(inbox.join("cut.tif"), &bytes[..bytes.len() / 2]).unwrap();
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
        "--settle",
        "0.5",
    ];
    let mut procs = Procs::default();
    let log = procs.spawn("ingest", embedded(&data, &ingest));
    let read = || std::fs::read_to_string(&log).unwrap_or_default();
    let said = |text: &str, file: &str| -> Vec<String> {
        text.lines()
            .filter(|l| l.starts_with("refused ") && l.contains(file))
            .map(str::to_owned)
            .collect()
    };
    wait_for(60, "both refusals", || {
        let text = read();
        !said(&text, "inbox/notes.tif").is_empty() && !said(&text, "inbox/cut.tif").is_empty()
    });
    // Ten more scans: nothing is said again.
    std::thread::sleep(Duration::from_secs(2));
    procs.stop();
    let text = read();
    for file in ["inbox/notes.tif", "inbox/cut.tif"] {
        let lines = said(&text, file);
        assert_eq!(lines.len(), 1, "{file} refused once: {text}");
        assert!(lines[0].contains("corrupt-raster"), "{}", lines[0]);
        assert!(
            lines[0].matches("as a raster").count() <= 1,
            "the cause said once: {}",
            lines[0]
        );
    }
    assert!(
        said(&text, "inbox/cut.tif")[0].contains("a TIFF cut short"),
        "{text}"
    );
    assert!(
        text.contains("0 planned") && text.contains("2 refused"),
        "the summary: {text}"
    );
    assert!(
        !data.join("objects/tilegate/tiles").exists(),
        "nothing planned, no window to dead-letter"
    );

    // `--json`: the one-off round's document carries each refusal, named.
    let args = [
        "--json",
        "ingest",
        "--watch",
        inbox_s,
        "--key-suffix",
        ".tif",
        "--settle",
        "0",
        "--poll-s",
        "0.1",
        "--until-idle",
    ];
    let out = tilegate_tests::tg(&data, &args, &[]);
    assert_eq!(
        out.status.code(),
        Some(1),
        "a round that refused: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["planned"], 0, "{doc}");
    assert_eq!(doc["refused"], 2, "{doc}");
    for file in ["inbox/notes.tif", "inbox/cut.tif"] {
        let refusals: Vec<&Value> = doc["arrivals"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|a| a["arrival"].as_str().unwrap().ends_with(file))
            .collect();
        assert_eq!(refusals.len(), 1, "{doc}");
        assert_eq!(refusals[0]["outcome"], "refused", "{doc}");
        assert_eq!(refusals[0]["reason"], "corrupt-raster", "{doc}");
    }
    assert!(
        !data.join("objects/tilegate/tiles").exists(),
        "nothing planned"
    );
}

/// A settle time that is not a number of seconds (negative, not finite) is the command
/// line's mistake, named, before anything is opened.
#[test]
fn a_settle_time_that_is_not_seconds_is_refused() {
    let tmp = tempdir();
    let inbox = tmp.path().join("inbox");
    std::fs::create_dir_all(&inbox).unwrap();
    for bad in ["--settle=-1", "--settle=inf", "--settle=NaN"] {
        let out = tilegate_tests::tg(
            &tmp.path().join("data"),
            &[
                "ingest",
                "--watch",
                inbox.to_str().unwrap(),
                bad,
                "--until-idle",
            ],
            &[],
        );
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{bad}: {stderr}");
        assert!(stderr.contains("error[bad-option]"), "{bad}: {stderr}");
        assert!(stderr.contains("--settle"), "{bad}: {stderr}");
    }
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
pub(crate) struct Deployment {
    aws: Aws,
    source_bucket: String,
    arrivals: String,
    /// The arrivals queue's URL, where the notifications are sent.
    arrivals_url: String,
    topic: String,
    topic_queue: String,
    rt: tokio::runtime::Runtime,
    sqs: tilegate_aws::aws_sdk_sqs::Client,
    s3: tilegate_aws::aws_sdk_s3::Client,
}

impl Deployment {
    pub(crate) fn new(aws: Aws, data: &Path) -> Self {
        let id = aws.queue.trim_start_matches("sqs://").to_owned();
        let arrivals = format!("sqs://{id}-arrivals");
        let init = aws.json(data, &["init", "--create-bucket", "--arrivals", &arrivals]);
        assert!(
            init["created"].as_array().unwrap().iter().any(|c| c
                .as_str()
                .unwrap()
                .starts_with(&format!("sqs queue {id}-arrivals "))),
            "{init}"
        );
        let rt = tokio::runtime::Runtime::new().unwrap();
        let source_bucket = format!("{id}-src");
        let (s3, sqs, arrivals_url, topic, topic_queue) = rt.block_on(async {
            let sdk = tilegate_aws::config::load_sdk_config().await;
            let s3 = tilegate_aws::config::s3_client(&sdk);
            s3.create_bucket()
                .bucket(&source_bucket)
                .send()
                .await
                .unwrap();
            let (topic, topic_queue) =
                tilegate_tests::aws::topic_with_queue(&sdk, &format!("{id}-scenes")).await;
            let sqs = tilegate_aws::config::sqs_client(&sdk);
            let arrivals_url = sqs
                .get_queue_url()
                .queue_name(arrivals.trim_start_matches("sqs://"))
                .send()
                .await
                .unwrap()
                .queue_url
                .unwrap();
            (s3, sqs, arrivals_url, topic, topic_queue)
        });
        Self {
            aws,
            source_bucket,
            arrivals,
            arrivals_url,
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
        self.rt.block_on(async {
            self.sqs
                .send_message()
                .queue_url(&self.arrivals_url)
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
    let message = the_one_announcement(&hook, &mut procs, 240).json();
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
    let batch = rt.block_on(ingest.handle(crate::pipeline::lambda::event(&notes)));
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
    let windows = rt.block_on(crate::pipeline::lambda::receive_all(&b, 4));
    assert_eq!(
        windows.len(),
        4,
        "the duplicate notification enqueued nothing"
    );
    // Two batches, as two concurrent invocations would get them.
    for part in windows.chunks(2) {
        let r = rt.block_on(worker.handle(crate::pipeline::lambda::event(part)));
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
    tilegate_tests::Target::Aws(d.aws.clone()).copy_object(data, key, &published);
    assert_scene_matches_source(&published, &scene);
}

/// A notification delivered twice at once: the second planner finds the row the first one
/// wrote and has not yet marked enqueued. It enqueues nothing (the first is enqueueing; before
/// this it enqueued the windows not yet recorded a second time, each then encoded twice). A
/// row left unmarked for longer than a planner takes is a dead planner's: the next delivery
/// enqueues its windows and marks it.
#[test]
fn a_duplicate_arrival_during_planning_enqueues_nothing() {
    use tilegate_core::Recipe;
    use tilegate_core::queue::ReceiveOptions;
    use tilegate_planner::{Enqueue, PlanOptions, plan_with};
    use tilegate_source::Origin;
    let tmp = tempdir();
    let data = tmp.path();
    let scene = data.join("scene.tif");
    sample(data, &scene, 256, 44);
    let source = scene.to_str().unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let b = rt.block_on(tilegate_tests::Target::Embedded.backends(data));
    let opts = PlanOptions {
        recipe: Recipe {
            window: 128,
            ..Recipe::copy_all()
        },
        ..PlanOptions::default()
    };
    // The first planner, between its row and its enqueue.
    let (row, _) = rt
        .block_on(tilegate_planner::derive(&b, source, &opts))
        .unwrap();
    rt.block_on(b.jobs.create_job(&row)).unwrap();
    let once = || {
        rt.block_on(plan_with(
            &b,
            source,
            &opts,
            Enqueue::Once,
            Origin::Operator,
        ))
        .unwrap()
    };
    let queued = || {
        rt.block_on(b.queue.receive(ReceiveOptions {
            max: 10,
            wait: Duration::ZERO,
            visibility: Duration::from_secs(60),
        }))
        .unwrap()
        .len()
    };
    let second = once();
    assert!(!second.newly_planned);
    assert_eq!(second.enqueued, 0, "the duplicate enqueued windows");
    assert_eq!(queued(), 0);
    // The first planner died: its row is older than a planner takes.
    let stale = tilegate_core::now_millis() - tilegate_core::stall::STALL_AFTER_MS - 1_000;
    rt.block_on(tilegate_core::announce::change_job(
        b.jobs.as_ref(),
        &row.job_id,
        "age the row",
        |r| !std::mem::replace(&mut r.created_at, stale).eq(&stale),
    ))
    .unwrap();
    let later = once();
    assert_eq!(
        later.enqueued, 4,
        "a dead planner's windows were not enqueued"
    );
    assert_eq!(queued(), 4);
    let marked = rt.block_on(b.jobs.get_job(&row.job_id)).unwrap().unwrap();
    assert!(marked.row.windows_enqueued);
    assert_eq!(once().enqueued, 0, "enqueued again after the mark");
}

/// Where the chaos runs: the embedded backend (arrivals: files dropped into a watched inbox) or
/// the AWS emulator (arrivals: uploads, each notified twice on the arrivals queue).
pub(crate) enum Flow {
    Embedded { data: PathBuf, inbox: PathBuf },
    Aws(Box<Deployment>, PathBuf),
}

impl Flow {
    pub(crate) fn target(&self) -> tilegate_tests::Target {
        match self {
            Self::Embedded { .. } => tilegate_tests::Target::Embedded,
            Self::Aws(d, _) => tilegate_tests::Target::Aws(d.aws.clone()),
        }
    }

    pub(crate) fn data(&self) -> &Path {
        match self {
            Self::Embedded { data, .. } | Self::Aws(_, data) => data,
        }
    }

    pub(crate) fn command(&self, args: &[&str]) -> Command {
        match self {
            Self::Embedded { data, .. } => embedded(data, args),
            Self::Aws(d, data) => d.command(data, args),
        }
    }

    pub(crate) fn ingest(&self) -> Command {
        match self {
            Self::Embedded { inbox, .. } => self.command(&[
                "ingest",
                "--watch",
                inbox.to_str().unwrap(),
                "--key-suffix",
                ".tif",
                "--window",
                "64",
                "--poll-s",
                "0.2",
                "--settle",
                "1",
            ]),
            Self::Aws(d, _) => self.command(&[
                "ingest",
                "--arrivals",
                &d.arrivals,
                "--bucket",
                &format!("s3://{}", d.source_bucket),
                "--key-suffix",
                ".tif",
                "--window",
                "64",
            ]),
        }
    }

    /// The scene lands (twice notified on AWS: at-least-once delivery).
    fn land(&self, scene: &Path, name: &str) {
        match self {
            Self::Embedded { inbox, .. } => {
                std::fs::copy(scene, inbox.join(name)).unwrap();
            }
            Self::Aws(d, _) => {
                let key = format!("incoming/{name}");
                let size = d.upload(scene, &key);
                let event = s3_event(&d.source_bucket, &key, size);
                d.notify(&event);
                d.notify(&event);
            }
        }
    }

    pub(crate) fn status(&self, job: &str) -> Value {
        match self {
            Self::Embedded { data, .. } => tg_json(data, &["status", job]),
            Self::Aws(d, data) => d.aws.json(data, &["status", job]),
        }
    }

    /// The arrivals queue's dead letters (on the embedded backend, the `arrivals` queue in
    /// DATA/tilegate.db, which a watched directory leaves empty).
    fn arrival_dead_letters(&self) -> Vec<tilegate_core::queue::DeadLetter> {
        let urls = tilegate_backends::Urls {
            data: self.data().to_owned(),
            objects: None,
            tables: None,
            queue: None,
        };
        let url = match self {
            Self::Embedded { .. } => None,
            Self::Aws(d, _) => Some(d.arrivals.clone()),
        };
        let rt = tokio::runtime::Runtime::new().unwrap();
        rt.block_on(async {
            let arrivals = tilegate_backends::open_arrivals(&urls, url.as_deref())
                .await
                .expect("the arrivals queue");
            arrivals
                .list_dead_letters(1000)
                .await
                .expect("the arrivals queue's dead letters")
        })
    }

    /// The job's tile objects.
    pub(crate) fn tiles(&self, job: &str) -> usize {
        match self {
            Self::Embedded { data, .. } => {
                std::fs::read_dir(data.join("objects/tilegate/tiles").join(job))
                    .map_or(0, |d| d.count())
            }
            Self::Aws(d, _) => d.aws.tiles(job).len(),
        }
    }
}

/// The crash points armed in the workers, one per worker in turn (then unarmed ones): right
/// after recording a row (the last one, when it falls so), after winning the scene's claim,
/// after creating the scene before recording it (and its announcement) on the job row, after
/// recording it before delivering the announcement, and the window's own points.
const FLOW_POINTS: [&str; 8] = [
    "after-publish",
    "before-announce",
    "after-manifest",
    "after-claim",
    "before-ack",
    "after-commit",
    "before-encode",
    "after-manifest",
];

/// The processes' logs of one chaos run, and its seed: said on stderr if the run fails, so
/// that every process's log (each its own file, restarted ones included) can be read and the
/// run replayed.
struct ChaosLogs {
    seed: u64,
    logs: Vec<PathBuf>,
}

impl Drop for ChaosLogs {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!(
                "chaos[unattended] seed {} failed (TILEGATE_CHAOS_SEED={} replays it); the processes' logs:",
                self.seed, self.seed
            );
            for log in &self.logs {
                eprintln!("  {}", log.display());
            }
        }
    }
}

/// Processes that run beside the flow for its whole length as its safety net, named for their
/// logs: the level-triggered reconciler (`tilegate reconcile-jobs --every 2`), for what the
/// edges lose — an arrival dead-lettered after its job row (three ingest kills against the
/// arrivals queue's `maxReceiveCount`), a trigger lost with a killed pool, an announcement
/// left pending. Its grace (5 s) is longer than a planner of these small scenes takes.
fn safety_net(flow: &Flow, hook: &str) -> Vec<(&'static str, Command)> {
    vec![(
        "reconcile",
        flow.command(&[
            "reconcile-jobs",
            "--every",
            "2",
            "--grace",
            "5",
            "--lease-ttl-ms",
            "10000",
            "--announce",
            hook,
        ]),
    )]
}

/// The unattended flow under chaos: three scenes land; two `ingest` processes race on every
/// arrival (each notification delivered twice on AWS), one of them SIGKILLed once and
/// restarted; three `work --assemble --announce` pools race to assemble, each armed to SIGKILL
/// itself at one crash point in turn (on first deliveries only, so no message is cut short
/// three times) and restarted, two more killed from outside; [`safety_net`]'s processes run
/// beside them. Then [`after_the_flow`] checks the outcome.
fn unattended_flow_under_chaos(flow: &Flow) {
    const SCENES: usize = 3;
    let tmp = tempdir();
    let scenes: Vec<_> = (0..SCENES)
        .map(|i| {
            let p = tmp.path().join(format!("scene-{i}.tif"));
            sample(flow.data(), &p, 256, 50 + i as u64);
            p
        })
        .collect();
    let landing: Vec<(&Path, String)> = scenes
        .iter()
        .enumerate()
        .map(|(i, s)| (s.as_path(), format!("scene {i}.tif")))
        .collect();
    let run = flow_under_chaos(flow, &|| flow.ingest(), &landing, &mut |hook| {
        let keys: std::collections::BTreeSet<String> = published(&hook.received())
            .iter()
            .map(|m| m["idempotency_key"].as_str().unwrap().to_owned())
            .collect();
        keys.len() == SCENES
    });
    after_the_flow(flow, run.seed, &run.hook, &scenes, tmp.path());
}

/// A chaos run of the unattended flow, its processes stopped: its seed, the webhook that took
/// its announcements, and its processes' logs (said on stderr if what follows panics).
pub(crate) struct ChaosRun {
    pub seed: u64,
    pub hook: WebhookReceiver,
    _logs: ChaosLogs,
}

/// The unattended flow under chaos until `done`: the scenes of `landing` land (file, name);
/// two `ingest` processes (`ingest()`) race on every arrival (each notification delivered
/// twice on AWS), one of them SIGKILLed once and restarted; three `work --assemble
/// --announce` pools race to assemble, each armed to SIGKILL itself at one crash point in
/// turn (on first deliveries only, so no message is cut short three times) and restarted, two
/// more killed from outside; [`safety_net`]'s processes run beside them. `done` is asked
/// every second, with the webhook that takes the announcements.
pub(crate) fn flow_under_chaos(
    flow: &Flow,
    ingest: &dyn Fn() -> Command,
    landing: &[(&Path, String)],
    done: &mut dyn FnMut(&WebhookReceiver) -> bool,
) -> ChaosRun {
    let seed = crate::faults::chaos::seed();
    let mut rng = crate::faults::chaos::Rng(seed);
    println!("chaos[unattended] seed {seed} (TILEGATE_CHAOS_SEED replays it)");
    let mut logs = ChaosLogs {
        seed,
        logs: Vec::new(),
    };
    let hook = WebhookReceiver::start();
    let mut ingests = Procs::default();
    for i in 0..2 {
        logs.logs
            .push(ingests.spawn(&format!("ingest-{i}"), ingest()));
    }
    let mut net = Procs::default();
    for (name, cmd) in safety_net(flow, &hook.url) {
        logs.logs.push(net.spawn(name, cmd));
    }
    let mut points: std::collections::VecDeque<&str> = FLOW_POINTS.into_iter().collect();
    let mut slots: Vec<Option<(Child, Option<&str>)>> = (0..3).map(|_| None).collect();
    let mut crashed: Vec<&str> = Vec::new();
    let kill_at: Vec<Duration> = (0..2)
        .map(|_| Duration::from_millis(rng.range(800, 2600)))
        .collect();
    let mut outside_kills = 0;
    let mut spawned = 0;
    let ingest_kill_at = Duration::from_millis(rng.range(200, 1500));
    let mut ingest_killed = false;
    let t0 = Instant::now();
    for (scene, name) in landing {
        flow.land(scene, name);
    }
    let mut dlq_checked = Instant::now();
    let mut asked = Instant::now();
    loop {
        if asked.elapsed() >= Duration::from_secs(1) {
            asked = Instant::now();
            if done(&hook) {
                break;
            }
        }
        assert_making_progress(flow, seed, t0, &crashed, &hook, &mut dlq_checked);
        keep_pools(
            flow,
            &hook.url,
            seed,
            &mut rng,
            Pools {
                slots: &mut slots,
                points: &mut points,
                crashed: &mut crashed,
                spawned: &mut spawned,
                logs: &mut logs.logs,
            },
        );
        // Kills from outside, before any message could have come back (visibility 10 s):
        // they cut short first deliveries only.
        if outside_kills < kill_at.len() && t0.elapsed() >= kill_at[outside_kills] {
            let i = rng.below(slots.len() as u64) as usize;
            if let Some((child, armed)) = &mut slots[i] {
                let _ = child.kill();
                let _ = child.wait();
                // An armed point that did not fire goes to the next pool.
                if let Some(p) = armed.take() {
                    points.push_front(p);
                }
                slots[i] = None;
            }
            outside_kills += 1;
        }
        // One ingest is killed, once, and restarted (its own log).
        if !ingest_killed && t0.elapsed() >= ingest_kill_at {
            ingest_killed = true;
            let mut child = ingests.0.remove(0);
            let _ = child.kill();
            let _ = child.wait();
            logs.logs
                .push(ingests.spawn("ingest-0-restarted", ingest()));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    // Whatever is still on its way has a moment to arrive.
    std::thread::sleep(Duration::from_secs(2));
    for (child, _) in slots.iter_mut().flatten() {
        // SAFETY: kill(2) on a child's PID has no memory-safety preconditions.
        unsafe {
            libc::kill(child.id() as i32, libc::SIGTERM);
        }
        let _ = child.wait();
    }
    ingests.stop();
    net.stop();
    println!(
        "chaos[unattended] seed {seed}: crashed at {crashed:?}, {outside_kills} kills from outside, \
         one ingest killed"
    );
    ChaosRun {
        seed,
        hook,
        _logs: logs,
    }
}

/// The `work --assemble --announce` command line of a pool in the unattended chaos.
fn pool(hook: &str) -> Vec<String> {
    vec![
        "work".to_owned(),
        "--assemble".into(),
        "--announce".into(),
        hook.to_owned(),
        "--threads".into(),
        "1".into(),
        "--concurrency".into(),
        "2".into(),
        "--visibility".into(),
        "10".into(),
        "--lease-ttl-ms".into(),
        "10000".into(),
    ]
}

/// No dead letter (it would leave a job incomplete for good: say so at once, with why, checked
/// every 5 s), and not past 300 s.
fn assert_making_progress(
    flow: &Flow,
    seed: u64,
    t0: Instant,
    crashed: &[&str],
    hook: &WebhookReceiver,
    dlq_checked: &mut Instant,
) {
    // A dead letter would leave a job incomplete for good: say so at once, with why.
    if dlq_checked.elapsed() > Duration::from_secs(5) {
        *dlq_checked = Instant::now();
        let out = flow.command(&["--json", "dlq", "list"]).output().unwrap();
        let dead: Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
        assert!(
            dead["dead_letters"].as_array().is_none_or(Vec::is_empty),
            "chaos[unattended] seed {seed}: dead letters: {dead}"
        );
    }
    assert!(
        t0.elapsed() < Duration::from_secs(300),
        "chaos[unattended] seed {seed}: not done after 300 s; crashed at {crashed:?}; \
         announced {:?}; arrivals dead-lettered {:?}",
        published(&hook.received())
            .iter()
            .map(|m| m["idempotency_key"].clone())
            .collect::<Vec<_>>(),
        flow.arrival_dead_letters()
            .iter()
            .map(|d| &d.reason)
            .collect::<Vec<_>>(),
    );
}

/// The pools' state in the unattended chaos.
struct Pools<'a> {
    slots: &'a mut Vec<Option<(Child, Option<&'static str>)>>,
    points: &'a mut std::collections::VecDeque<&'static str>,
    crashed: &'a mut Vec<&'static str>,
    spawned: &'a mut usize,
    logs: &'a mut Vec<PathBuf>,
}

/// Reap each pool that died (only ever SIGKILLed: a crash point or a kill from outside) and
/// start another in its place, armed with the next crash point.
fn keep_pools(
    flow: &Flow,
    hook_url: &str,
    seed: u64,
    rng: &mut crate::faults::chaos::Rng,
    pools: Pools,
) {
    for slot in pools.slots.iter_mut() {
        if let Some((child, armed)) = slot
            && let Some(status) = child.try_wait().unwrap()
        {
            use std::os::unix::process::ExitStatusExt as _;
            assert_eq!(
                status.signal(),
                Some(libc::SIGKILL),
                "chaos[unattended] seed {seed}: a pool exited on its own: {status}"
            );
            if let Some(p) = armed {
                pools.crashed.push(p);
            }
            *slot = None;
        }
        if slot.is_none() {
            let mut cmd = flow.command(
                &pool(hook_url)
                    .iter()
                    .map(String::as_str)
                    .collect::<Vec<_>>(),
            );
            let armed = pools.points.pop_front();
            if let Some(p) = armed {
                let skip =
                    if p.starts_with("after-") && p != "after-commit" && p != "after-manifest" {
                        0
                    } else {
                        rng.range(0, 6)
                    };
                cmd.env("TILEGATE_FAULT", p)
                    .env("TILEGATE_FAULT_SKIP", skip.to_string())
                    .env("TILEGATE_FAULT_MAX_ATTEMPT", "1");
            }
            *pools.spawned += 1;
            let (child, log) = logged(&format!("work-{}", pools.spawned), cmd);
            pools.logs.push(log);
            *slot = Some((child, armed));
        }
    }
}

/// The end of the unattended flow, every process stopped: every scene published once and equal
/// to its source, every tile written once (no more successful creates than windows), exactly
/// one announcement key per scene, delivered at least once and always with the same body, none
/// for an incomplete job, no dead letters on the work queue, and none on the arrivals queue
/// but for a scene that was published all the same.
fn after_the_flow(flow: &Flow, seed: u64, hook: &WebhookReceiver, scenes: &[PathBuf], tmp: &Path) {
    let got = hook.received();
    let mut by_key: std::collections::BTreeMap<String, Vec<&Delivery>> = Default::default();
    for d in &got {
        let m = d.json();
        assert_eq!(m["type"], "tilegate.job.published", "seed {seed}: {m}");
        by_key
            .entry(m["idempotency_key"].as_str().unwrap().to_owned())
            .or_default()
            .push(d);
    }
    assert_eq!(
        by_key.len(),
        scenes.len(),
        "seed {seed}: {:?}",
        by_key.keys()
    );
    let mut sources_seen = Vec::new();
    for (key, deliveries) in &by_key {
        assert!(
            deliveries.iter().all(|d| d.body == deliveries[0].body),
            "seed {seed}: {key} delivered with different bodies"
        );
        let m = deliveries[0].json();
        let job = m["job_id"].as_str().unwrap();
        assert!(
            key.starts_with(&format!("{job}:published:")),
            "seed {seed}: {key}"
        );
        let st = flow.status(job);
        assert_eq!(st["lifecycle"], "published", "seed {seed}: {st}");
        assert_eq!(st["manifest_rows"], 16, "seed {seed}: {st}");
        assert_eq!(st["queue"]["dead"], 0, "seed {seed}: {st}");
        assert_eq!(flow.tiles(job), 16, "seed {seed}: job {job}");
        assert!(
            st["counters"]["tiles_written_total"].as_u64().unwrap_or(0) <= 16,
            "seed {seed}: more creates than windows: {st}"
        );
        assert_eq!(
            st["scene_output"]["e_tag"], m["scene"]["e_tag"],
            "seed {seed}: the announced scene is the recorded one"
        );
        let source = m["source"].as_str().unwrap().to_owned();
        let i: usize = source
            .rsplit("scene ")
            .next()
            .and_then(|s| s.trim_end_matches(".tif").parse().ok())
            .unwrap_or_else(|| panic!("seed {seed}: source {source}"));
        sources_seen.push(i);
        let published = tmp.join(format!("published-{i}.tif"));
        let key = st["scene_output"]["key"].as_str().unwrap();
        flow.target().copy_object(flow.data(), key, &published);
        assert_scene_matches_source(&published, &scenes[i]);
    }
    sources_seen.sort_unstable();
    assert_eq!(
        sources_seen,
        (0..scenes.len()).collect::<Vec<_>>(),
        "seed {seed}"
    );
    // An arrival the queue dead-lettered is accounted for only by its scene's publication
    // (asserted above for every scene): it must name one of them.
    for d in flow.arrival_dead_letters() {
        let names_a_scene = (0..scenes.len()).any(|i| {
            d.body.contains(&format!("scene+{i}.tif")) || d.body.contains(&format!("scene {i}.tif"))
        });
        assert!(
            names_a_scene,
            "seed {seed}: an arrival dead-lettered that names no scene of the flow: {}: {}",
            d.reason, d.body
        );
        println!(
            "chaos[unattended] seed {seed}: an arrival was dead-lettered ({}), its scene published all the same",
            d.reason
        );
    }
}

#[test]
fn the_unattended_flow_survives_chaos_embedded() {
    let tmp = tempdir();
    let inbox = tmp.path().join("inbox");
    std::fs::create_dir_all(&inbox).unwrap();
    unattended_flow_under_chaos(&Flow::Embedded {
        data: tmp.path().join("data"),
        inbox,
    });
}

#[test]
fn the_unattended_flow_survives_chaos_aws() {
    let Some(aws) = Aws::for_test("the_unattended_flow_survives_chaos_aws") else {
        return;
    };
    let tmp = tempdir();
    let data = tmp.path().to_path_buf();
    let d = Deployment::new(aws, &data);
    unattended_flow_under_chaos(&Flow::Aws(Box::new(d), data));
}

/// Arrivals are input: a notification from a bucket `ingest` was not given, a STAC Item whose
/// hrefs name the worker's files and the deployment's other bucket, and a message that is no
/// arrival at all are each dead-lettered with their reason; nothing is planned and nothing of
/// theirs is read. A removal event is skipped.
#[test]
fn hostile_arrivals_are_dead_lettered_and_plan_nothing() {
    let tmp = tempdir();
    let data = tmp.path().join("data");
    let urls = tilegate_backends::Urls {
        data: data.clone(),
        objects: None,
        tables: None,
        queue: None,
    };
    let rt = tokio::runtime::Runtime::new().unwrap();
    let arrivals = rt
        .block_on(tilegate_backends::open_arrivals(&urls, None))
        .unwrap();
    let item = serde_json::json!({"type": "Feature", "stac_version": "1.0.0", "id": "evil",
        "collection": "c", "assets": {
            "a": {"href": "file:///root/.aws/credentials"},
            "b": {"href": "s3://deployment-secrets/x.tif"}}});
    let removed =
        s3_event("scenes", "a.tif", 1).replace("ObjectCreated:Put", "ObjectRemoved:Delete");
    let bodies = [
        s3_event("someone-elses-bucket", "scene.tif", 1),
        item.to_string(),
        "{\"hello\": \"world\"}".to_owned(),
        removed,
    ];
    rt.block_on(arrivals.send_batch(&bodies)).unwrap();
    let out = embedded(
        &data,
        &[
            "--json",
            "ingest",
            "--bucket",
            "s3://scenes",
            "--assets",
            "a,b",
            "--until-idle",
        ],
    )
    .output()
    .unwrap();
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["planned"], 0, "{report}");
    assert_eq!(report["refused"], 3, "{report}");
    assert_eq!(report["skipped"], 1, "{report}");
    let dead = rt.block_on(arrivals.list_dead_letters(10)).unwrap();
    let mut reasons: Vec<&str> = dead
        .iter()
        .map(|d| d.reason.split(':').next().unwrap())
        .collect();
    reasons.sort_unstable();
    assert_eq!(
        reasons,
        ["bad-arrival", "source-forbidden", "source-forbidden"],
        "{dead:?}"
    );
    let item_refusal = dead.iter().find(|d| d.body.contains("evil")).unwrap();
    assert!(
        item_refusal.reason.contains("local-file-from-message"),
        "{}",
        item_refusal.reason
    );
    assert!(!data.join("objects/tilegate/tiles").exists());
}

//! The faults a close reading found, each pinned by a test that failed before its fix: a panic
//! inside one window, a stop during a receive, a queue fault beside windows in flight, a
//! repair whose answer was lost, a done claim whose scene the job row never got, a scene
//! already in place, a failed multipart upload, a prefix too long for its keys, and two
//! output prefixes asking for the same source. Each runs on both backends where the fault is
//! backend-neutral (the AWS runs need the emulator the README's test command starts).

use crate::per_backend::per_backend;
use async_trait::async_trait;
use bytes::Bytes;
use serde_json::Value;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;
use tilegate_claim::{ClaimGate, ClaimOutcome};
use tilegate_core::metrics::{self as m, Counters};
use tilegate_core::object::{ObjectStoreExt, PutMode, PutOutcome};
use tilegate_core::queue::{
    AckOutcome, DeadLetter, QueueDepth, ReceiveOptions, Received, WorkQueue,
};
use tilegate_core::table::{ManifestEntry, OutputRef, TileOrigin};
use tilegate_core::{
    Backends, ETag, JobId, Prefix, Recipe, Retry, StoreError, StoreResult, Window,
};
use tilegate_tests::{ScriptedStore, StoreScript, Target, sample, tempdir};
use tilegate_worker::repair::{self, RepairOutcome};
use tilegate_worker::{StopWhen, Worker, WorkerConfig};

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Runtime::new().unwrap()
}

/// A 1024² scene in 256-pixel windows: 16 windows.
fn scene(dir: &Path) -> std::path::PathBuf {
    let src = dir.join("scene.tif");
    sample(dir, &src, 1024, 5);
    src
}

async fn plan16(b: &Backends, src: &Path) -> JobId {
    let opts = tilegate_planner::PlanOptions {
        recipe: Recipe {
            window: 256,
            ..Recipe::copy_all()
        },
        ..Default::default()
    };
    let plan = tilegate_planner::plan(b, src.to_str().unwrap(), &opts)
        .await
        .unwrap();
    assert_eq!(plan.windows, 16);
    plan.job.job_id
}

fn worker(b: Backends, stop: StopWhen, counters: Arc<Counters>) -> Worker {
    let cfg = WorkerConfig {
        concurrency: 2,
        threads: 1,
        visibility: Duration::from_secs(30),
        wait: Duration::from_millis(200),
        stop,
        shutdown_grace: Duration::from_secs(30),
        ..WorkerConfig::default()
    };
    Worker::new(b, cfg, counters)
}

fn never_stop() -> tokio::sync::watch::Receiver<bool> {
    let (tx, rx) = tokio::sync::watch::channel(false);
    std::mem::forget(tx);
    rx
}

// ---------------------------------------------------------------------------------------------
// A queue that delays or fails its receives.

#[derive(Debug)]
struct ScriptedQueue {
    inner: Arc<dyn WorkQueue>,
    /// Hold each receive's messages this long before returning them.
    delay_after_receive: Duration,
    /// Fail the receive with this number (1-based) with this classification.
    fail_receive: Option<(u32, Retry)>,
    receives: AtomicU32,
}

impl ScriptedQueue {
    fn new(inner: Arc<dyn WorkQueue>) -> Self {
        Self {
            inner,
            delay_after_receive: Duration::ZERO,
            fail_receive: None,
            receives: AtomicU32::new(0),
        }
    }
}

#[async_trait]
impl WorkQueue for ScriptedQueue {
    fn name(&self) -> &'static str {
        "scripted"
    }
    fn max_receive_count(&self) -> u32 {
        self.inner.max_receive_count()
    }
    async fn send_batch(&self, bodies: &[String]) -> StoreResult<()> {
        self.inner.send_batch(bodies).await
    }
    async fn receive(&self, opts: ReceiveOptions) -> StoreResult<Vec<Received>> {
        let n = self.receives.fetch_add(1, Ordering::SeqCst) + 1;
        if let Some((at, retry)) = self.fail_receive
            && at == n
        {
            return Err(StoreError::backend(
                "receive",
                "scripted",
                retry,
                "injected receive fault",
            ));
        }
        let got = self.inner.receive(opts).await?;
        if !got.is_empty() {
            tokio::time::sleep(self.delay_after_receive).await;
        }
        Ok(got)
    }
    async fn ack(&self, receipt: &str) -> StoreResult<AckOutcome> {
        self.inner.ack(receipt).await
    }
    async fn change_visibility(&self, receipt: &str, timeout: Duration) -> StoreResult<AckOutcome> {
        self.inner.change_visibility(receipt, timeout).await
    }
    async fn dead_letter(&self, msg: &Received, reason: &str) -> StoreResult<()> {
        self.inner.dead_letter(msg, reason).await
    }
    async fn list_dead_letters(&self, max: usize) -> StoreResult<Vec<DeadLetter>> {
        self.inner.list_dead_letters(max).await
    }
    async fn redrive(&self, ids: Option<&[String]>) -> StoreResult<u64> {
        self.inner.redrive(ids).await
    }
    async fn purge_dead_letters(&self, ids: &[String]) -> StoreResult<u64> {
        self.inner.purge_dead_letters(ids).await
    }
    async fn depth(&self) -> StoreResult<QueueDepth> {
        self.inner.depth().await
    }
}

fn with_queue(b: &Backends, q: ScriptedQueue) -> Backends {
    Backends {
        queue: Arc::new(q),
        ..b.clone()
    }
}

/// Messages visible and in flight, once the emulator's approximate counts settle.
async fn depth_of(b: &Backends) -> QueueDepth {
    b.queue.depth().await.unwrap()
}

/// Item 2: a stop that arrives while a receive is in progress must not strand what the
/// receive brought. Before the fix the receive future was dropped: the messages stayed hidden
/// for their whole visibility timeout.
fn stop_during_a_receive_hands_its_messages_back(target: Target) {
    let tmp = tempdir();
    let rt = rt();
    let b = rt.block_on(target.backends(tmp.path()));
    let bodies: Vec<String> = (0..5)
        .map(|i| format!("{{\"not-a-window\": {i}}}"))
        .collect();
    rt.block_on(b.queue.send_batch(&bodies)).unwrap();
    let mut q = ScriptedQueue::new(b.queue.clone());
    q.delay_after_receive = Duration::from_millis(1500);
    let w = worker(
        with_queue(&b, q),
        StopWhen::Signal,
        Arc::new(Counters::new()),
    );
    let (tx, rx) = tokio::sync::watch::channel(false);
    let report = rt.block_on(async {
        let stopper = async {
            // The receive has its messages and is in its delay now.
            tokio::time::sleep(Duration::from_millis(700)).await;
            tx.send(true).unwrap();
        };
        let (report, ()) = tokio::join!(w.run(rx), stopper);
        report.unwrap()
    });
    assert_eq!(report.handled, 0, "{}: {report:?}", target.name());
    // The pool asks for as many as it has room for (concurrency 2).
    assert_eq!(report.released, 2, "{}: {report:?}", target.name());
    let d = rt.block_on(depth_of(&b));
    assert_eq!(
        (d.visible, d.in_flight),
        (5, 0),
        "{}: every received message is visible again at once",
        target.name()
    );
}

per_backend!(stop_during_a_receive_hands_its_messages_back);

/// Item 2: a transient receive fault is ridden out (the windows in flight carry on and the job
/// completes); a permanent one stops receiving, lets the windows in flight finish, and is
/// returned. Before the fix both returned at once and dropped every window in flight.
fn queue_faults_do_not_abort_windows_in_flight(target: Target) {
    let tmp = tempdir();
    let src = scene(tmp.path());
    let rt = rt();
    let b = rt.block_on(target.backends(tmp.path()));
    let job = rt.block_on(plan16(&b, &src));

    // Transient: the second receive (windows are in flight by then) fails.
    let mut q = ScriptedQueue::new(b.queue.clone());
    q.fail_receive = Some((2, Retry::Retryable));
    let w = worker(
        with_queue(&b, q),
        StopWhen::JobComplete(job.clone()),
        Arc::new(Counters::new()),
    );
    let report = rt.block_on(w.run(never_stop())).unwrap();
    assert_eq!(report.queue_faults, 1, "{}: {report:?}", target.name());
    assert_eq!(
        rt.block_on(b.manifest.count_entries(&job)).unwrap(),
        16,
        "{}",
        target.name()
    );

    // Permanent, on a fresh job: the windows already received finish and are acknowledged.
    let tmp2 = tempdir();
    let src2 = scene(tmp2.path());
    let b2 = rt.block_on(target.backends(tmp2.path()));
    let job2 = rt.block_on(plan16(&b2, &src2));
    let mut q = ScriptedQueue::new(b2.queue.clone());
    q.fail_receive = Some((2, Retry::Permanent));
    let w = worker(
        with_queue(&b2, q),
        StopWhen::JobComplete(job2.clone()),
        Arc::new(Counters::new()),
    );
    let err = rt.block_on(w.run(never_stop())).unwrap_err();
    assert!(err.to_string().contains("receive"), "{err}");
    let rows = rt.block_on(b2.manifest.count_entries(&job2)).unwrap();
    assert!(
        rows >= 1,
        "{}: the first receive's windows finished",
        target.name()
    );
    let d = rt.block_on(depth_of(&b2));
    assert_eq!(
        (d.visible + rows, d.in_flight),
        (16, 0),
        "{}: nothing left hidden in flight",
        target.name()
    );
}

per_backend!(queue_faults_do_not_abort_windows_in_flight);

// ---------------------------------------------------------------------------------------------
// An object store that loses answers or fails parts.

/// The faults the store tests inject.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Inject {
    /// An `Update` is written, and then answered `Superseded` (its answer lost, the retry
    /// refused by its own write).
    LoseUpdateAnswer,
    /// Every part upload fails (a retryable fault).
    FailParts,
}

impl StoreScript for Inject {
    fn before_write(&self, operation: &'static str, key: &str) -> StoreResult<()> {
        if *self == Self::FailParts && operation == "upload part" {
            return Err(StoreError::backend(
                "upload part",
                key,
                Retry::Retryable,
                "injected part fault",
            ));
        }
        Ok(())
    }

    fn answer_put(&self, mode: &PutMode, answer: PutOutcome) -> PutOutcome {
        if *self == Self::LoseUpdateAnswer && matches!(mode, PutMode::Update(_)) {
            assert!(matches!(answer, PutOutcome::Written(_)), "{answer:?}");
            return PutOutcome::Superseded;
        }
        answer
    }
}

fn with_store(b: &Backends, script: Inject) -> Backends {
    Backends {
        objects: Arc::new(ScriptedStore {
            inner: b.objects.clone(),
            script,
        }),
        ..b.clone()
    }
}

/// A 16-window job whose tiles (not its scene) `tilegate run` made on `target`, and the same
/// stores opened here.
struct TilesJob {
    tmp: tempfile::TempDir,
    job: JobId,
    rt: tokio::runtime::Runtime,
    b: Backends,
}

fn tiles_job(target: &Target) -> TilesJob {
    let tmp = tempdir();
    let data = tmp.path();
    let src = scene(data);
    let job = tiles_only(target, data, &src);
    let rt = rt();
    let b = rt.block_on(target.backends(data));
    TilesJob { tmp, job, rt, b }
}

/// `tilegate run SOURCE --window 256 --no-assemble` on `target`: the job ID.
fn tiles_only(target: &Target, data: &Path, src: &Path) -> JobId {
    let run = target.json(
        data,
        &[
            "run",
            src.to_str().unwrap(),
            "--window",
            "256",
            "--no-assemble",
        ],
    );
    assert_eq!(run["complete"], true, "{run}");
    JobId::parse(run["job_id"].as_str().unwrap()).unwrap()
}

/// Item 3: a repair whose If-Match write landed but whose answer was lost (the retry refused
/// by the write itself) is `Written`, and the manifest row follows — so `assemble` accepts the
/// job. Before the fix it was `Superseded`, the row kept the old ETag, and assembly failed
/// with `manifest-etag-mismatch`.
fn repair_with_a_lost_answer_is_recognised_as_its_own_write(target: Target) {
    let TilesJob { tmp, job, rt, b } = tiles_job(&target);
    let data = tmp.path();
    let w = Window::new(1, 2);
    let prepared = rt
        .block_on(repair::prepare(&b, &Default::default(), &job, w))
        .unwrap();
    let key = prepared.key.clone();
    let lossy = with_store(&b, Inject::LoseUpdateAnswer);
    let out = rt.block_on(repair::commit(&lossy, prepared)).unwrap();
    let now = rt.block_on(b.objects.head(&key)).unwrap().unwrap();
    assert_eq!(
        out,
        RepairOutcome::Written {
            e_tag: now.e_tag.clone(),
            size: now.size
        },
        "{}",
        target.name()
    );
    let row = rt.block_on(b.manifest.get_entry(&job, w)).unwrap().unwrap();
    assert_eq!(row.row.e_tag, now.e_tag, "{}", target.name());
    assert_eq!(row.row.origin, TileOrigin::Repaired);
    let done = target.json(data, &["assemble", job.as_str()]);
    assert_eq!(done["outcome"], "written", "{}: {done}", target.name());
}

per_backend!(repair_with_a_lost_answer_is_recognised_as_its_own_write);

/// Item 4: a claim completed by an assembler that died before writing the job row leaves
/// every later `assemble` at `already_done` — and now the job row records the scene too.
fn a_done_claim_records_the_scene_on_the_job_row(target: Target) {
    let TilesJob { tmp, job, rt, b } = tiles_job(&target);
    let data = tmp.path();
    let scene_key = Prefix::default().scene_key(&job);
    // An assembler publishes and completes the claim by hand, then "dies".
    let gate = ClaimGate::new(b.claims.clone());
    let ClaimOutcome::Claimed(lease) = rt
        .block_on(gate.try_claim(&scene_key, "by-hand", Duration::from_secs(60)))
        .unwrap()
    else {
        panic!("claim");
    };
    let PutOutcome::Written(meta) = rt
        .block_on(
            b.objects
                .put_create(&scene_key, Bytes::from_static(b"scene")),
        )
        .unwrap()
    else {
        panic!("put scene");
    };
    let output = OutputRef {
        key: scene_key.to_string(),
        e_tag: meta.e_tag.clone(),
        size: meta.size,
    };
    rt.block_on(gate.complete(&lease, output.clone())).unwrap();
    assert!(
        rt.block_on(b.jobs.get_job(&job))
            .unwrap()
            .unwrap()
            .row
            .scene_output
            .is_none()
    );

    let doc = target.json(data, &["assemble", job.as_str()]);
    assert_eq!(doc["outcome"], "already_done", "{}: {doc}", target.name());
    let row = rt.block_on(b.jobs.get_job(&job)).unwrap().unwrap().row;
    assert_eq!(row.scene_output, Some(output), "{}", target.name());
    let status = target.json(data, &["status", job.as_str()]);
    assert_eq!(status["scene_output"]["e_tag"], meta.e_tag.as_str());
}

per_backend!(a_done_claim_records_the_scene_on_the_job_row);

/// Risk: a scene that landed before its holder could mark the claim done is found by the next
/// claimant with one HEAD, recorded, and not built or uploaded again.
fn a_scene_already_in_place_is_recorded_without_an_upload(target: Target) {
    let TilesJob { tmp, job, rt, b } = tiles_job(&target);
    let data = tmp.path();
    let scene_key = Prefix::default().scene_key(&job);
    let PutOutcome::Written(meta) = rt
        .block_on(
            b.objects
                .put_create(&scene_key, Bytes::from_static(b"landed")),
        )
        .unwrap()
    else {
        panic!("put scene");
    };
    let doc = target.json(
        data,
        &["assemble", job.as_str(), "--multipart-threshold", "1"],
    );
    assert_eq!(
        doc["outcome"],
        "already_present",
        "{}: {doc}",
        target.name()
    );
    assert_eq!(doc["multipart_bytes_uploaded_total"], 0);
    assert_eq!(doc["scene_etag"], meta.e_tag.as_str());
    let row = rt.block_on(b.jobs.get_job(&job)).unwrap().unwrap().row;
    assert_eq!(row.scene_output.map(|o| o.e_tag), Some(meta.e_tag.clone()));
    let again = target.json(data, &["assemble", job.as_str()]);
    assert_eq!(again["outcome"], "already_done");
    assert_eq!(
        rt.block_on(b.objects.head(&scene_key)).unwrap().unwrap(),
        meta,
        "{}: the scene in place was not touched",
        target.name()
    );
}

per_backend!(a_scene_already_in_place_is_recorded_without_an_upload);

/// Risk: a multipart upload whose parts fail is aborted at once, not left for the hourly
/// cleanup.
fn a_failed_multipart_upload_is_aborted_at_once(target: Target) {
    let TilesJob { tmp, job, rt, b } = tiles_job(&target);
    let data = tmp.path();
    let failing = with_store(&b, Inject::FailParts);
    let mut opts = tilegate_assembler::AssembleOptions::new(tilegate_claim::unique_owner("t"));
    opts.multipart_threshold = 1;
    let err = rt
        .block_on(tilegate_assembler::assemble(
            &failing,
            &job,
            &opts,
            &Counters::new(),
        ))
        .unwrap_err();
    assert!(
        tilegate_core::error::chain(&err).contains("injected part fault"),
        "{err}"
    );
    let left = rt.block_on(b.objects.list_multipart("", None)).unwrap();
    assert!(left.is_empty(), "{}: {left:?}", target.name());
    // And the claim was released: the next assembler publishes at once.
    let doc = target.json(data, &["assemble", job.as_str()]);
    assert_eq!(doc["outcome"], "written", "{}: {doc}", target.name());
}

per_backend!(a_failed_multipart_upload_is_aborted_at_once);

// ---------------------------------------------------------------------------------------------
// Through the binary.

/// Item 1: a panic inside one window's encoder stays in that window. The poison window is
/// retried, then dead-lettered with `encoder-panicked` after its last receive; the process and
/// every other window carry on. Before the fix rayon aborted the whole process on the first
/// panic.
fn an_encoder_panic_stays_inside_its_window(target: Target) {
    let tmp = tempdir();
    let data = tmp.path();
    let src = scene(data);
    let plan = target.json(data, &["plan", src.to_str().unwrap(), "--window", "256"]);
    let job = plan["job_id"].as_str().unwrap().to_owned();
    let out = target
        .command(data)
        .args([
            "--json",
            "work",
            "--until-empty",
            "--visibility",
            "2",
            "--threads",
            "2",
        ])
        .env("TILEGATE_PANIC_WINDOWS", "0001_0002")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "{}: {}\n{stderr}",
        target.name(),
        out.status
    );
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["dead_lettered"], 1, "{}: {report}", target.name());
    let status = target.json(data, &["status", &job]);
    assert_eq!(status["manifest_rows"], 15, "{}: {status}", target.name());
    assert_eq!(
        status["counters"][m::WINDOW_PANICS],
        3,
        "{}: {status}",
        target.name()
    );
    let dlq = target.json(data, &["dlq", "list"]);
    let letters = dlq["dead_letters"].as_array().unwrap();
    assert_eq!(letters.len(), 1, "{}: {dlq}", target.name());
    let reason = letters[0]["reason"].as_str().unwrap();
    assert!(reason.starts_with("encoder-panicked: "), "{reason}");
    assert!(reason.contains("0001_0002"), "{reason}");
    assert_eq!(letters[0]["window"], "0001_0002", "{dlq}");
}

per_backend!(an_encoder_panic_stays_inside_its_window);

/// Item 6: a prefix of valid segments whose keys would pass 1,024 bytes is refused when
/// planning, with a named reason, and nothing is planned. Before the fix it planned, and every
/// window was dead-lettered at work time.
fn a_prefix_too_long_for_its_keys_is_refused_at_plan(target: Target) {
    let tmp = tempdir();
    let data = tmp.path();
    let src = scene(data);
    let long = vec!["p".repeat(128); 8].join("/");
    let out = target
        .command(data)
        .args(["plan", src.to_str().unwrap(), "--prefix", &long])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{}: planned", target.name());
    assert!(stderr.contains("error[unsafe-key-segment]"), "{stderr}");
    assert!(stderr.contains("1024-byte"), "{stderr}");
    let rt = rt();
    let b = rt.block_on(target.backends(data));
    let d = rt.block_on(depth_of(&b));
    assert_eq!(
        (d.visible, d.in_flight),
        (0, 0),
        "{}: nothing enqueued",
        target.name()
    );
    assert!(
        rt.block_on(b.jobs.list_jobs(10)).unwrap().is_empty(),
        "{}: no job row",
        target.name()
    );
}

per_backend!(a_prefix_too_long_for_its_keys_is_refused_at_plan);

/// Item 7: the same source and recipe asked for under two prefixes are two jobs, each with its
/// own tiles and scene. Before the fix the second run reported `already_done` and named the
/// first prefix's scene.
fn two_output_prefixes_are_two_jobs(target: Target) {
    let tmp = tempdir();
    let data = tmp.path();
    let src = scene(data);
    let run = |prefix: &str| {
        target.json(
            data,
            &[
                "run",
                src.to_str().unwrap(),
                "--window",
                "256",
                "--prefix",
                prefix,
            ],
        )
    };
    let a = run("tenant-a");
    let b_run = run("tenant-b");
    let name = target.name();
    assert_ne!(a["job_id"], b_run["job_id"], "{name}");
    for (doc, prefix) in [(&a, "tenant-a"), (&b_run, "tenant-b")] {
        assert_eq!(doc["tiles_written"], 16, "{name}: {doc}");
        assert_eq!(doc["scene"]["outcome"], "written", "{name}: {doc}");
        let key = doc["scene"]["scene_key"].as_str().unwrap();
        assert!(
            key.starts_with(&format!("{prefix}/scenes/")),
            "{name}: {key}"
        );
    }
    let rt = rt();
    let b = rt.block_on(target.backends(data));
    for (doc, prefix) in [(&a, "tenant-a"), (&b_run, "tenant-b")] {
        let job = JobId::parse(doc["job_id"].as_str().unwrap()).unwrap();
        let tiles = rt
            .block_on(
                b.objects
                    .list(&Prefix::parse(prefix).unwrap().tiles_dir(&job)),
            )
            .unwrap();
        assert_eq!(tiles.len(), 16, "{name}: {prefix}");
    }
    // A rerun under the first prefix writes nothing.
    let again = run("tenant-a");
    assert_eq!(again["job_id"], a["job_id"]);
    assert_eq!(again["tiles_written"], 0, "{name}: {again}");
    assert_eq!(again["scene"]["outcome"], "already_done", "{name}: {again}");
}

per_backend!(two_output_prefixes_are_two_jobs);

/// Risk: a manifest row that disagrees with the tile in place is counted and named
/// (`manifest_mismatch_total`) when a worker records its window.
#[test]
fn a_manifest_row_that_disagrees_with_its_tile_is_counted() {
    let tmp = tempdir();
    let src = scene(tmp.path());
    let rt = rt();
    let b = rt.block_on(Target::Embedded.backends(tmp.path()));
    let job = rt.block_on(plan16(&b, &src));
    let w = Window::new(0, 0);
    let wrong = ManifestEntry {
        job_id: job.clone(),
        window: w,
        key: String::from(Prefix::default().tile_key(&job, w)),
        size: 1,
        e_tag: ETag::new("\"not-the-tile\""),
        origin: TileOrigin::Written,
        recorded_at: tilegate_core::now_millis(),
        facts: Default::default(),
    };
    rt.block_on(b.manifest.put_entry(&wrong)).unwrap();
    let counters = Arc::new(Counters::new());
    let report = rt
        .block_on(worker(b.clone(), StopWhen::QueueDrained, counters.clone()).run(never_stop()))
        .unwrap();
    assert_eq!(report.written, 16);
    assert_eq!(counters.get(m::MANIFEST_MISMATCH), 1);
}

/// The second afternoon, item 2: sending a job's missing windows again. A queue that lists
/// what it holds (embedded) is asked, and a window whose message still waits is not sent twice;
/// one that cannot (SQS; here the embedded queue behind a wrapper that does not say) gets the
/// copies, and they look for the tile before encoding — only a job's first sending skips that
/// look. Before: a resumed plan sent every unrecorded window again, and the copies skipped the
/// look too, so both were encoded.
#[test]
fn sending_missing_windows_again_sends_none_twice_where_the_queue_can_say() {
    let tmp = tempdir();
    let src = scene(tmp.path());
    let rt = rt();
    let b = rt.block_on(Target::Embedded.backends(tmp.path()));
    let blind = with_queue(&b, ScriptedQueue::new(b.queue.clone()));
    let job = rt.block_on(plan16(&blind, &src));
    let row = rt.block_on(b.jobs.get_job(&job)).unwrap().unwrap().row;
    assert!(row.windows_enqueued);

    // The embedded queue says all 16 are waiting: nothing is sent.
    let sent = rt
        .block_on(tilegate_planner::enqueue_windows(&b, &row, true))
        .unwrap();
    assert_eq!((sent.enqueued, sent.queued), (0, 16), "{sent:?}");
    // Blind: all 16 again, and these copies look first.
    let sent = rt
        .block_on(tilegate_planner::enqueue_windows(&blind, &row, true))
        .unwrap();
    assert_eq!((sent.enqueued, sent.queued), (16, 0), "{sent:?}");
    let mut flags = Vec::new();
    while flags.len() < 32 {
        let got = rt
            .block_on(b.queue.receive(ReceiveOptions {
                max: 10,
                wait: Duration::from_millis(100),
                visibility: Duration::from_secs(60),
            }))
            .unwrap();
        assert!(!got.is_empty(), "only {} messages", flags.len());
        for m in got {
            let wm = tilegate_core::message::WindowMessage::decode(&m.body).unwrap();
            flags.push(wm.unrecorded);
        }
    }
    assert_eq!(flags.iter().filter(|u| **u).count(), 16, "{flags:?}");
    assert!(
        flags[..16].iter().all(|u| *u) && flags[16..].iter().all(|u| !*u),
        "{flags:?}"
    );
}

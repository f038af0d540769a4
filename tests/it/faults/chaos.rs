//! The chaos harness: one 400-window job under every fault at once, on the embedded backend and
//! on the AWS emulator —
//!
//! - duplicate delivery: a third of the windows enqueued again, the first batch while their
//!   originals are still queued or in flight;
//! - crashes: worker processes SIGKILLed at each crash point (`before-encode`, `after-commit`,
//!   `after-manifest`, `before-ack`, through the `TILEGATE_FAULT` hook) and at random moments
//!   from outside, and restarted;
//! - a backfill of the whole job started beside live work;
//! - two assemblers racing for the scene, one of them with a lease made to lapse mid-upload
//!   (a third takes it over);
//! - a reader range-reading tiles, each read pinned with `If-Match` to the ETag it first saw;
//! - encoder panics: a handful of windows whose encoder panics on their first delivery
//!   (`TILEGATE_PANIC_WINDOWS`), which must stay inside the window — retried, never taking a
//!   worker process or the windows beside it down.
//!
//! No message is cut short by more than one injected fault, so that "no dead letters" is a real
//! check (three strandings of one message would rightly dead-letter it): the crash points fire
//! only on a message's first delivery (`TILEGATE_FAULT_MAX_ATTEMPT=1`), and the kills from
//! outside all fall within the workers' first visibility timeout, before any message can have
//! been delivered a second time. (A window whose first delivery panicked comes back after a
//! two-second backoff, so a kill from outside may cut its second delivery short too: two
//! strandings, still within the three receives a message has.)
//!
//! Then it asserts what DESIGN.md §6 promises, from the storage's own record of writes — the
//! embedded store's directory events (inotify sees every `link`, rename or modification of a
//! name) and S3's object versions (the bucket is versioned, so every write that landed is a
//! version) — not from the workers' word: every tile and the scene written exactly once, 400
//! manifest rows, no dead letters, refused Creates counted, claim losers uploaded nothing, the
//! lapsed upload aborted, the scene a valid COG equal to the source, the reader never saw an
//! ETag change. It prints one line of figures; a failure names each key and the writes seen.
//!
//! The scene is 2560×2560 UInt16 with 128-pixel windows — 400 windows, the same fan-out as
//! 10240² with 512-pixel windows and the same code paths, in a fraction of CI's time.
//!
//! The seed is printed; `TILEGATE_CHAOS_SEED=N` replays a run's choices (which windows are
//! duplicated, which points crash and when, which workers encode duplicates). Process timing
//! still varies from run to run: the invariants must hold for every interleaving.

use crate::per_backend::per_backend;
use serde_json::Value;
use std::collections::{BTreeMap, VecDeque};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};
use tilegate_core::etag::ConditionList;
use tilegate_core::message::WindowMessage;
use tilegate_core::object::{GetOptions, GetOutcome, ObjectStore, ObjectStoreExt};
use tilegate_core::table::ClaimState;
use tilegate_core::{Backends, ETag, JobId, Window, now_millis};
use tilegate_tests::object_key;
use tilegate_tests::{Aws, Target, assert_scene_matches_source, sample, tempdir};

const SIZE: u32 = 2560;
const WINDOW: u32 = 128;
const WINDOWS: u64 = 400;
const WORKERS: usize = 3;
/// Crashes at the four named points, cycled (each point at least three times).
const POINT_CRASHES: usize = 12;
/// Windows whose encoder panics on their first delivery.
const PANIC_WINDOWS: usize = 8;
/// Kills from outside at random moments (within the first visibility timeout).
const EXTERNAL_KILLS: usize = 4;
/// The workers' visibility timeout, in seconds: long enough that the kills from outside, all
/// made within the first one, land while the workers are busy on every backend.
const VISIBILITY_S: u64 = 10;
/// A kill from outside due later than this (inside the first visibility timeout) is dropped.
const KILLS_BEFORE: Duration = Duration::from_millis(VISIBILITY_S * 1000 - 100);
const POINTS: [&str; 4] = [
    "before-encode",
    "after-commit",
    "after-manifest",
    "before-ack",
];
/// Give up (and report what was seen) after this long.
const DEADLINE: Duration = Duration::from_secs(600);

// On GCS and Azure too (their emulators keep no object versions, so the write log is the final
// listing: a second write shows as a changed version against the monitor's first sighting, the
// readers' pinned reads and the manifest rows).
per_backend!(heavy_chaos: [embedded, aws, gcs, azure]);

/// The recipe of a run, by seed (`TILEGATE_CHAOS_RECIPE=copy|warp` chooses): `copy`, or a
/// `warp` onto the source's own grid (same CRS, resolution and alignment, nearest), whose scene
/// must equal the source pixel for pixel just the same — the warper's path under every fault.
/// `expr`, `ndvi` and registered recipes run the same worker path as each other; they are not
/// in the rotation because their scenes differ from the source by design (a declared nodata,
/// another type), which the end check compares against; their faults are covered in
/// `recipes.rs` (a killed worker and duplicates under a registered recipe).
fn chaos_recipe(seed: u64) -> (&'static str, &'static [&'static str]) {
    const WARP: &[&str] = &[
        "--recipe",
        "warp",
        "--t-srs",
        "EPSG:32633",
        "--tr",
        "10",
        "--tap",
    ];
    let name = std::env::var("TILEGATE_CHAOS_RECIPE").unwrap_or_else(|_| {
        if seed.is_multiple_of(2) {
            "copy"
        } else {
            "warp"
        }
        .to_owned()
    });
    match name.as_str() {
        "copy" => ("copy", &[]),
        "warp" => ("warp", WARP),
        other => panic!("TILEGATE_CHAOS_RECIPE={other}: expected copy or warp"),
    }
}

/// splitmix64: small, seedable, good enough to pick windows and moments.
pub(crate) struct Rng(pub(crate) u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    pub(crate) fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    pub(crate) fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.below(hi - lo + 1)
    }

    fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }

    fn shuffle<T>(&mut self, v: &mut [T]) {
        for i in (1..v.len()).rev() {
            v.swap(i, self.below(i as u64 + 1) as usize);
        }
    }
}

pub(crate) fn seed() -> u64 {
    match std::env::var("TILEGATE_CHAOS_SEED") {
        Ok(s) => s
            .parse()
            .unwrap_or_else(|_| panic!("TILEGATE_CHAOS_SEED={s} is not a number")),
        Err(_) => {
            SystemTime::now()
                .duration_since(SystemTime::UNIX_EPOCH)
                .unwrap()
                .as_nanos() as u64
                % 1_000_000
        }
    }
}

/// Problems found, each naming its key; reported all together at the end.
#[derive(Default)]
struct Violations(Mutex<Vec<String>>);

impl Violations {
    fn add(&self, v: String) {
        self.0.lock().unwrap().push(v);
    }
    fn take(&self) -> Vec<String> {
        std::mem::take(&mut self.0.lock().unwrap())
    }
}

/// One chaos run: set up, schedule the faults, drive the pool through them, then judge what
/// the storage recorded.
fn heavy_chaos(target: Target) {
    let seed = seed();
    println!(
        "chaos[{}]: seed {seed} (replay with TILEGATE_CHAOS_SEED={seed})",
        target.name()
    );
    let mut rng = Rng(seed);
    let started = Instant::now();
    let run = Run::set_up(target, seed);
    let observers = Observers::start(&run, seed);
    let schedule = Schedule::draw(&run, &mut rng);
    let driven = Driver::new(&run, schedule).drive(&observers.violations, &mut rng);
    let observed = observers.finish(&run);
    let Assembly::Done(docs) = &driven.assembly else {
        unreachable!()
    };
    let [a, b_doc, c_doc] = &docs[..] else {
        unreachable!()
    };

    // ---- What must hold. ----
    let status = run.target.json(&run.data, &["status", &run.job]);
    let mut judged = Judged {
        problems: observed.violations.clone(),
        ..Judged::default()
    };
    judge_storage(&run, &driven, &observed, &status, &mut judged);
    judge_faults(&run, &driven, &observed, &status, &mut judged);
    judge_assemblers(&run, [a, b_doc, c_doc], &status, &mut judged);
    report(&run, &driven, &observed, &status, &judged, started);

    // The scene is a valid COG, pixel for pixel the source.
    let local_scene = match &run.target {
        Target::Embedded => run.data.join("objects").join(&run.scene_key),
        Target::Aws(_) | Target::Objects(_) => {
            let path = run.data.join("scene-downloaded.tif");
            let got = run
                .rt
                .block_on(run.b.objects.get_bytes(&object_key(&run.scene_key)))
                .unwrap();
            std::fs::write(&path, &got.bytes).unwrap();
            path
        }
    };
    assert_scene_matches_source(&local_scene, &run.scene);
}

/// What a chaos run works on: its backend, data directory, runtime, scene and planned job.
struct Run {
    target: Target,
    seed: u64,
    flavor: &'static str,
    data: PathBuf,
    logs: PathBuf,
    rt: tokio::runtime::Runtime,
    scene: PathBuf,
    recipe: (&'static str, &'static [&'static str]),
    job: String,
    job_id: JobId,
    tiles_prefix: String,
    scene_key: String,
    b: Backends,
    _tmp: tempfile::TempDir,
}

impl Run {
    /// The stores initialised (S3 versioned, so that every write is a version), the scene
    /// made and the job planned: 400 windows.
    fn set_up(target: Target, seed: u64) -> Self {
        let flavor = target.name();
        let tmp = tempdir();
        let data = tmp.path().to_path_buf();
        let logs = data.join("logs");
        std::fs::create_dir_all(&logs).unwrap();
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();

        match &target {
            Target::Aws(aws) => {
                target.json(&data, &["init", "--create-bucket"]);
                rt.block_on(enable_versioning(aws));
            }
            Target::Objects(_) => {
                target.json(&data, &["init", "--create-bucket"]);
            }
            Target::Embedded => {}
        }
        let scene = data.join("scene.tif");
        sample(&data, &scene, SIZE, seed % 1000);
        let recipe = chaos_recipe(seed);
        let window = WINDOW.to_string();
        let mut plan_args = vec!["plan", scene.to_str().unwrap(), "--window", &window];
        plan_args.extend(recipe.1.iter().copied());
        let plan = target.json(&data, &plan_args);
        assert_eq!(plan["windows"], WINDOWS);
        let job = plan["job_id"].as_str().unwrap().to_owned();
        let job_id = JobId::parse(&job).unwrap();
        let tiles_prefix = format!("tilegate/tiles/{job}/");
        let scene_key = format!("tilegate/scenes/{job}.tif");
        let b = rt.block_on(target.backends(&data));
        Self {
            target,
            seed,
            flavor,
            data,
            logs,
            rt,
            scene,
            recipe,
            job,
            job_id,
            tiles_prefix,
            scene_key,
            b,
            _tmp: tmp,
        }
    }
}

/// Who watches the run besides the workers: the storage's write log, the monitor that
/// records each tile's first sighting, and the reader whose reads are pinned to it.
struct Observers {
    write_log: WriteLog,
    violations: Arc<Violations>,
    stop: Arc<AtomicBool>,
    seen: Arc<Mutex<BTreeMap<String, (ETag, SystemTime)>>>,
    reads: Arc<AtomicU64>,
    monitor: tokio::task::JoinHandle<()>,
    reader: tokio::task::JoinHandle<()>,
}

/// What the observers saw, once the run settled.
struct Observed {
    writes: BTreeMap<String, Vec<String>>,
    first_seen: BTreeMap<String, (ETag, SystemTime)>,
    violations: Vec<String>,
    reads: u64,
}

impl Observers {
    fn start(run: &Run, seed: u64) -> Self {
        let b = &run.b;
        let write_log = WriteLog::start(
            &run.target,
            &b.objects,
            &run.data,
            &run.tiles_prefix,
            &run.scene_key,
        );
        let violations = Arc::new(Violations::default());
        let stop = Arc::new(AtomicBool::new(false));
        let seen: Arc<Mutex<BTreeMap<String, (ETag, SystemTime)>>> = Arc::default();
        // The emulator serves S3 one request at a time: observe it more gently than a local disk.
        let (poll, pause) = match run.target {
            Target::Embedded => (Duration::from_millis(50), Duration::from_millis(5)),
            Target::Aws(_) | Target::Objects(_) => {
                (Duration::from_millis(300), Duration::from_millis(30))
            }
        };
        let monitor = run.rt.spawn(monitor(
            b.objects.clone(),
            run.tiles_prefix.clone(),
            seen.clone(),
            violations.clone(),
            stop.clone(),
            poll,
        ));
        let reads = Arc::new(AtomicU64::new(0));
        let reader = run.rt.spawn(reader(
            b.objects.clone(),
            seen.clone(),
            violations.clone(),
            stop.clone(),
            reads.clone(),
            seed,
            pause,
        ));
        Self {
            write_log,
            violations,
            stop,
            seen,
            reads,
            monitor,
            reader,
        }
    }

    /// Let the reader and monitor see the settled state once more, then stop them.
    fn finish(self, run: &Run) -> Observed {
        std::thread::sleep(Duration::from_millis(400));
        self.stop.store(true, Ordering::SeqCst);
        run.rt.block_on(self.monitor).unwrap();
        run.rt.block_on(self.reader).unwrap();
        let writes = self.write_log.finish(&run.rt);
        let first_seen = self.seen.lock().unwrap().clone();
        Observed {
            writes,
            first_seen,
            violations: self.violations.take(),
            reads: self.reads.load(Ordering::SeqCst),
        }
    }
}

/// What happens when: duplicates (a first batch among the earliest windows, so their
/// originals are still queued or in flight, then a second anywhere), a backfill of the whole
/// job, kills from outside, the crash points to arm and the windows whose encoder panics.
struct Schedule {
    grid_windows: Vec<Window>,
    dup_batches: VecDeque<(Duration, Vec<Window>)>,
    duplicates: usize,
    panics: String,
    backfill_at: Duration,
    kill_times: VecDeque<Duration>,
    points: VecDeque<&'static str>,
}

impl Schedule {
    fn draw(run: &Run, rng: &mut Rng) -> Self {
        let grid_windows: Vec<Window> = {
            let row = run
                .rt
                .block_on(run.b.jobs.get_job(&run.job_id))
                .unwrap()
                .unwrap()
                .row;
            row.grid.windows().collect()
        };
        let mut early: Vec<Window> = grid_windows[..100].to_vec();
        rng.shuffle(&mut early);
        let mut later: Vec<Window> = grid_windows[100..].to_vec();
        rng.shuffle(&mut later);
        let dup_batches: Vec<(Duration, Vec<Window>)> = vec![
            (
                Duration::from_millis(rng.range(100, 400)),
                early[..60].to_vec(),
            ),
            (
                Duration::from_millis(rng.range(800, 2500)),
                later[..75].to_vec(),
            ),
        ];
        let duplicates: usize = dup_batches.iter().map(|(_, w)| w.len()).sum();
        // A panic on a first delivery cuts that delivery short, as a crash point does, and no
        // more.
        let panics: String = later[75..75 + PANIC_WINDOWS]
            .iter()
            .map(Window::to_string)
            .collect::<Vec<_>>()
            .join(",");
        let backfill_at = Duration::from_millis(rng.range(500, 3000));
        // Every message a worker holds before the first visibility timeout has run out
        // (counted from before the first worker started) is on its first delivery: a kill from
        // outside then strands only first deliveries, as the armed points do.
        let kill_times: VecDeque<Duration> = {
            let mut v: Vec<Duration> = (0..EXTERNAL_KILLS)
                .map(|_| {
                    Duration::from_millis(rng.range(300, KILLS_BEFORE.as_millis() as u64 - 200))
                })
                .collect();
            v.sort();
            v.into()
        };
        let points: VecDeque<&'static str> = (0..POINT_CRASHES).map(|i| POINTS[i % 4]).collect();
        Self {
            grid_windows,
            dup_batches: dup_batches.into(),
            duplicates,
            panics,
            backfill_at,
            kill_times,
            points,
        }
    }
}

/// The pool under faults, step by step: workers reaped and replaced, duplicates, backfill and
/// kills injected when due, the assemblers started once the manifest is complete.
struct Driver<'r> {
    run: &'r Run,
    schedule: Schedule,
    slots: Vec<Option<WorkerProc>>,
    spawned: usize,
    crashes: BTreeMap<&'static str, u64>,
    external_kills: u64,
    kills_dropped: usize,
    backfill: Option<Child>,
    backfilled: Option<u64>,
    assembly: Assembly,
    manifest_rows: u64,
    complete_at: Option<Duration>,
    assembled_at: Option<Duration>,
    last_count: Instant,
    t0: Instant,
}

impl<'r> Driver<'r> {
    fn new(run: &'r Run, schedule: Schedule) -> Self {
        Self {
            run,
            schedule,
            slots: (0..WORKERS).map(|_| None).collect(),
            spawned: 0,
            crashes: BTreeMap::new(),
            external_kills: 0,
            kills_dropped: 0,
            backfill: None,
            backfilled: None,
            assembly: Assembly::NotStarted,
            manifest_rows: 0,
            complete_at: None,
            assembled_at: None,
            last_count: Instant::now() - Duration::from_secs(1),
            t0: Instant::now(),
        }
    }

    /// Until the pool is idle, the queue drained, every injection made, the manifest complete
    /// and the scene assembled.
    fn drive(mut self, violations: &Violations, rng: &mut Rng) -> Self {
        let (flavor, seed) = (self.run.flavor, self.run.seed);
        loop {
            let now = self.t0.elapsed();
            assert!(
                now < DEADLINE,
                "chaos[{flavor}] seed {seed}: not done after {DEADLINE:?}: manifest {}, \
                 assembly {:?}, violations so far {:?}",
                self.manifest_rows,
                self.assembly,
                violations.take()
            );
            self.reap();
            self.inject(now, rng);
            // The manifest, and the assemblers once it is complete.
            if self.last_count.elapsed() >= Duration::from_millis(200) {
                self.manifest_rows = self
                    .run
                    .rt
                    .block_on(self.run.b.manifest.count_entries(&self.run.job_id))
                    .unwrap();
                self.last_count = Instant::now();
            }
            if self.manifest_rows == WINDOWS {
                self.complete_at.get_or_insert(now);
                let r = self.run;
                self.assembly.step(
                    &r.target,
                    &r.data,
                    &r.job,
                    &r.scene_key,
                    &r.b,
                    &r.rt,
                    &r.logs,
                );
            }
            let (drained, injections_done) = self.keep_strength(rng);
            let idle = self.slots.iter().all(Option::is_none);
            if self.assembly.done() {
                self.assembled_at.get_or_insert(now);
            }
            if idle
                && drained
                && injections_done
                && self.assembly.done()
                && self.manifest_rows == WINDOWS
            {
                return self;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Reap finished workers: count each crash at its point or each kill from outside, and
    /// hand a point that was never reached to the next worker.
    fn reap(&mut self) {
        let (flavor, seed) = (self.run.flavor, self.run.seed);
        for slot in &mut self.slots {
            let Some(w) = slot else { continue };
            let Some(status) = w.child.try_wait().unwrap() else {
                continue;
            };
            let w = slot.take().unwrap();
            if status.signal() == Some(libc::SIGKILL) {
                if w.killed_from_outside {
                    self.external_kills += 1;
                    // Killed before its point fired: the next worker takes the point.
                    self.schedule.points.extend(w.armed);
                } else {
                    *self
                        .crashes
                        .entry(w.armed.expect("only armed workers die"))
                        .or_default() += 1;
                }
            } else {
                assert!(
                    status.success(),
                    "chaos[{flavor}] seed {seed}: worker {} failed ({status}): {}",
                    w.id,
                    std::fs::read_to_string(&w.stderr).unwrap_or_default()
                );
                if let Some(p) = w.armed {
                    // Its point was never reached: arm the next worker with it.
                    self.schedule.points.push_front(p);
                }
            }
        }
    }

    /// Duplicates, backfill, kills from outside, each when its time has come.
    fn inject(&mut self, now: Duration, rng: &mut Rng) {
        let r = self.run;
        if self
            .schedule
            .dup_batches
            .front()
            .is_some_and(|(at, _)| now >= *at)
        {
            let (_, windows) = self.schedule.dup_batches.pop_front().unwrap();
            r.rt.block_on(enqueue_again(&r.b, &r.job_id, &windows));
        }
        if self.backfill.is_none() && self.backfilled.is_none() && now >= self.schedule.backfill_at
        {
            self.backfill = Some(
                r.target
                    .command(&r.data)
                    .args(["--json", "backfill", &r.job])
                    .stdout(Stdio::piped())
                    .stderr(Stdio::piped())
                    .spawn()
                    .unwrap(),
            );
        }
        if let Some(child) = self.backfill.as_mut()
            && child.try_wait().unwrap().is_some()
        {
            let out = self.backfill.take().unwrap().wait_with_output().unwrap();
            assert!(
                out.status.success(),
                "backfill failed: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
            self.backfilled = Some(doc["enqueued"].as_u64().unwrap());
        }
        if self
            .schedule
            .kill_times
            .front()
            .is_some_and(|at| now >= *at)
        {
            let live: Vec<usize> = (0..WORKERS)
                .filter(|&i| {
                    self.slots[i]
                        .as_ref()
                        .is_some_and(|w| !w.killed_from_outside)
                })
                .collect();
            if self.t0.elapsed() >= KILLS_BEFORE {
                // A kill that could not be made in time (no live worker) is dropped, not made
                // late: late, it could strand a redelivery.
                self.kills_dropped += self.schedule.kill_times.len();
                self.schedule.kill_times.clear();
            } else if !live.is_empty() {
                self.schedule.kill_times.pop_front();
                let w = self.slots[live[rng.below(live.len() as u64) as usize]]
                    .as_mut()
                    .unwrap();
                w.killed_from_outside = true;
                let _ = w.child.kill();
            }
        }
    }

    /// Keep the pool at strength while anything is left to do; returns (queue drained,
    /// injections done).
    fn keep_strength(&mut self, rng: &mut Rng) -> (bool, bool) {
        let r = self.run;
        let injections_done = self.schedule.dup_batches.is_empty() && self.backfilled.is_some();
        let depth = r.rt.block_on(r.b.queue.depth()).unwrap();
        let drained = depth.visible == 0 && depth.in_flight == 0;
        for (i, slot) in self.slots.iter_mut().enumerate() {
            if slot.is_none() && !(drained && injections_done && self.manifest_rows == WINDOWS) {
                let armed = self.schedule.points.pop_front();
                self.spawned += 1;
                // The first slot's workers always encode duplicates, so that the store's
                // refusal is exercised whatever the seed; the others by chance.
                let encode_duplicates = i == 0 || rng.chance(50);
                *slot = Some(WorkerProc::spawn(
                    &r.target,
                    &r.data,
                    &r.logs,
                    self.spawned,
                    Arms {
                        point: armed,
                        encode_duplicates,
                        panics: &self.schedule.panics,
                    },
                    rng,
                ));
            }
        }
        (drained, injections_done)
    }
}

/// The judgement of a run: each problem found, and the figures the summary line prints.
#[derive(Default)]
struct Judged {
    problems: Vec<String>,
    tiles_listed: usize,
    manifest_rows: usize,
    refused: u64,
    panicked: usize,
    loser_bytes: u64,
}

/// Storage: 400 tiles and manifest rows, exactly one write per tile (and of the scene and its
/// STAC Item) by the storage's own record, each row naming what is in place, and every tile
/// still what the monitor first saw.
fn judge_storage(run: &Run, driven: &Driver, observed: &Observed, status: &Value, j: &mut Judged) {
    let (tiles_prefix, scene_key) = (&run.tiles_prefix, &run.scene_key);
    let writes = &observed.writes;
    let tiles = run.rt.block_on(run.b.objects.list(tiles_prefix)).unwrap();
    let rows = run
        .rt
        .block_on(run.b.manifest.list_entries(&run.job_id))
        .unwrap();
    j.tiles_listed = tiles.len();
    j.manifest_rows = rows.len();
    let problems = &mut j.problems;
    if tiles.len() as u64 != WINDOWS {
        problems.push(format!("{} tile objects, expected {WINDOWS}", tiles.len()));
    }
    if rows.len() as u64 != WINDOWS || status["manifest_rows"] != WINDOWS {
        problems.push(format!(
            "{} manifest rows (status says {}), expected {WINDOWS}",
            rows.len(),
            status["manifest_rows"]
        ));
    }
    // Exactly one write per tile, by the storage's own record.
    let mut expected_keys: Vec<String> = driven
        .schedule
        .grid_windows
        .iter()
        .map(|w| format!("{tiles_prefix}{:04}_{:04}.tif", w.row, w.col))
        .collect();
    expected_keys.push(scene_key.clone());
    // The scene's STAC Item, written once beside it like the scene.
    expected_keys.push(tilegate_stac::item_key(scene_key).unwrap().into_string());
    for key in &expected_keys {
        let seen_writes = writes.get(key).map_or(&[][..], Vec::as_slice);
        if seen_writes.len() != 1 {
            problems.push(format!(
                "`{key}` was written {} times; writes seen: {seen_writes:?}",
                seen_writes.len()
            ));
        }
    }
    for (key, w) in writes {
        if !expected_keys.contains(key) {
            problems.push(format!("unexpected object `{key}`; writes seen: {w:?}"));
        }
    }
    // The manifest records what is in place, and the monitor's first sighting still stands.
    for r in &rows {
        let now = tiles.iter().find(|t| t.key == r.row.key);
        match now {
            Some(t) if t.e_tag == r.row.e_tag && t.size == r.row.size => {}
            Some(t) => problems.push(format!(
                "`{}`: manifest row says {} ({} bytes), the object is {} ({} bytes); writes \
                 seen: {:?}",
                r.row.key,
                r.row.e_tag,
                r.row.size,
                t.e_tag,
                t.size,
                writes.get(&r.row.key)
            )),
            None => problems.push(format!("`{}`: manifest row without object", r.row.key)),
        }
    }
    for t in &tiles {
        match observed.first_seen.get(&t.key) {
            Some((e, lm)) if *e == t.e_tag && *lm == t.last_modified => {}
            Some((e, lm)) => problems.push(format!(
                "`{}` changed since first seen: {e} @ {lm:?} → {} @ {:?}; writes seen: {:?}",
                t.key,
                t.e_tag,
                t.last_modified,
                writes.get(&t.key)
            )),
            None => problems.push(format!("`{}` was never seen by the monitor", t.key)),
        }
    }
}

/// The faults were all made and all survived: no dead letters, the store refused Creates, a
/// worker crashed at every point, the reader read, an encoder panic was caught.
fn judge_faults(run: &Run, driven: &Driver, observed: &Observed, status: &Value, j: &mut Judged) {
    let problems = &mut j.problems;
    if status["queue"]["dead"] != 0 {
        let dlq = run.target.json(&run.data, &["dlq", "list"]);
        for d in dlq["dead_letters"].as_array().into_iter().flatten() {
            let window = d["window"].as_str().unwrap_or("?");
            problems.push(format!(
                "dead letter of window {window}: {d}\n    what the workers logged about it:\n      {}",
                log_lines(&run.logs, &[&format!("window={window}"), d["message_id"].as_str().unwrap_or("?")])
                    .join("\n      ")
            ));
        }
    }
    j.refused = status["counters"]["conditional_write_precondition_failed_total"]
        .as_u64()
        .unwrap_or(0);
    if j.refused == 0 {
        problems.push("the store never refused a Create: the gate went untested".into());
    }
    for p in POINTS {
        if driven.crashes.get(p).copied().unwrap_or(0) == 0 {
            problems.push(format!(
                "no worker crashed at `{p}`: the harness missed a point"
            ));
        }
    }
    if observed.reads == 0 {
        problems.push("the reader read nothing".into());
    }
    // Judged by the workers' logs (a SIGKILLed worker's last second of counters is lost): a
    // panic was caught, and the worker that caught it carried on (no worker exits non-zero,
    // asserted as each is reaped).
    j.panicked = log_lines(&run.logs, &["encoder panicked"]).len();
    if j.panicked == 0 {
        problems.push(format!(
            "no encoder panic was caught: the panic windows {} were never encoded",
            driven.schedule.panics
        ));
    }
}

/// The assemblers: A's lease lapsed mid-upload and its upload was aborted; of B and C exactly
/// one wrote the scene, the other lost the claim and uploaded nothing; the scene object and
/// the job row's scene output are the winner's.
fn judge_assemblers(run: &Run, [a, b_doc, c_doc]: [&Value; 3], status: &Value, j: &mut Judged) {
    let problems = &mut j.problems;
    if a["outcome"] != "lease_lost" || a["multipart_bytes_uploaded_total"].as_u64() == Some(0) {
        problems.push(format!(
            "the lapsing assembler should lose its lease mid-upload: {a}"
        ));
    }
    let winners: Vec<&Value> = [b_doc, c_doc]
        .into_iter()
        .filter(|d| d["outcome"] == "written")
        .collect();
    let mut loser_bytes = 0;
    if winners.len() != 1 {
        problems.push(format!(
            "expected one assembler to write the scene: {b_doc} / {c_doc}"
        ));
    }
    for d in [b_doc, c_doc]
        .into_iter()
        .filter(|d| d["outcome"] != "written")
    {
        loser_bytes += d["multipart_bytes_uploaded_total"]
            .as_u64()
            .unwrap_or(u64::MAX);
        if !(d["outcome"] == "held_by" || d["outcome"] == "already_done") {
            problems.push(format!("a claim loser ended oddly: {d}"));
        }
    }
    if loser_bytes != 0 {
        problems.push(format!("claim losers uploaded {loser_bytes} bytes"));
    }
    j.loser_bytes = loser_bytes;
    let cleanup = run
        .target
        .json(&run.data, &["cleanup-uploads", "--older-than-s", "0"]);
    if cleanup["aborted"] != 0 {
        problems.push(format!("an upload was left incomplete: {cleanup}"));
    }
    let scene_meta = run
        .rt
        .block_on(run.b.objects.head(&object_key(&run.scene_key)))
        .unwrap();
    match (&scene_meta, winners.first()) {
        (Some(m), Some(w)) if w["scene_etag"] == m.e_tag.as_str() => {}
        _ => problems.push(format!(
            "the scene object {scene_meta:?} is not the winner's {winners:?}"
        )),
    }
    if status["scene_output"]["e_tag"] != scene_meta.as_ref().map_or("", |m| m.e_tag.as_str()) {
        problems.push(format!(
            "the job row's scene output {} is not the object",
            status["scene_output"]
        ));
    }
}

/// One line of figures, then every problem found (the run fails if there is any).
fn report(
    run: &Run,
    driven: &Driver,
    observed: &Observed,
    status: &Value,
    j: &Judged,
    started: Instant,
) {
    let (flavor, seed) = (run.flavor, run.seed);
    let counter = |name: &str| status["counters"][name].as_u64().unwrap_or(0);
    let Assembly::Done(docs) = &driven.assembly else {
        unreachable!()
    };
    println!(
        "chaos[{flavor}] seed={seed} recipe={} windows={WINDOWS} duplicates={} backfill={} \
         workers={} crashes={{{}}} external_kills={} kills_dropped={} \
         encoder_panics_caught={} \
         tiles_written_counted={} precondition_failed={} \
         encodes_skipped={} manifest_rows={} dead={} reader_reads={} etag_changes_seen=0 \
         assemblers=[{}, {}, {}] loser_bytes={} manifest_complete_at={:.1}s \
         assembled_at={:.1}s drained_at={:.1}s elapsed={:.1}s problems={}",
        run.recipe.0,
        driven.schedule.duplicates,
        driven.backfilled.unwrap_or(0),
        driven.spawned,
        driven
            .crashes
            .iter()
            .map(|(k, v)| format!("{k}:{v}"))
            .collect::<Vec<_>>()
            .join(","),
        driven.external_kills,
        driven.kills_dropped,
        j.panicked,
        counter("tiles_written_total"),
        j.refused,
        counter("duplicate_encodes_skipped_total"),
        j.manifest_rows,
        status["queue"]["dead"],
        observed.reads,
        docs[0]["outcome"],
        docs[1]["outcome"],
        docs[2]["outcome"],
        j.loser_bytes,
        driven.complete_at.unwrap_or_default().as_secs_f64(),
        driven.assembled_at.unwrap_or_default().as_secs_f64(),
        driven.t0.elapsed().as_secs_f64(),
        started.elapsed().as_secs_f64(),
        j.problems.len(),
    );
    assert!(
        j.problems.is_empty(),
        "chaos[{flavor}] seed {seed} (replay with TILEGATE_CHAOS_SEED={seed}):\n  {}",
        j.problems.join("\n  ")
    );
}

/// Every line of the run's logs that mentions one of `needles`, prefixed with its file's name.
fn log_lines(logs: &Path, needles: &[&str]) -> Vec<String> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(logs)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    files
        .iter()
        .flat_map(|f| {
            let name = f.file_name().unwrap().to_string_lossy().into_owned();
            std::fs::read_to_string(f)
                .unwrap_or_default()
                .lines()
                .filter(|l| needles.iter().any(|n| l.contains(n)))
                .map(|l| format!("{name}: {l}"))
                .collect::<Vec<_>>()
        })
        .collect()
}

/// One `tilegate work` process of the pool.
struct WorkerProc {
    id: usize,
    child: Child,
    armed: Option<&'static str>,
    killed_from_outside: bool,
    stderr: PathBuf,
}

/// The faults one worker process is armed with.
struct Arms<'a> {
    /// The crash point it dies at, if any.
    point: Option<&'static str>,
    /// Encode duplicates too (no skip-if-present HEAD), so the store itself refuses them.
    encode_duplicates: bool,
    /// The windows whose encoder panics on a first delivery.
    panics: &'a str,
}

impl WorkerProc {
    fn spawn(
        target: &Target,
        data: &Path,
        logs: &Path,
        id: usize,
        arms: Arms<'_>,
        rng: &mut Rng,
    ) -> Self {
        let Arms {
            point: armed,
            encode_duplicates,
            panics,
        } = arms;
        let stdout = logs.join(format!("worker-{id}.json"));
        let stderr = logs.join(format!("worker-{id}.log"));
        let mut cmd = target.command(data);
        // Every window's outcome in the log, so that a failure can tell its story.
        cmd.env("TILEGATE_LOG", "info,aws=warn,hyper=warn");
        cmd.args([
            "--json",
            "work",
            "--until-empty",
            "--threads",
            "1",
            "--visibility",
            &VISIBILITY_S.to_string(),
        ]);
        // An armed worker takes one message at a time, so its crash strands exactly one
        // delivery, and only a first one (three strandings of one message would dead-letter
        // it).
        cmd.args(["--concurrency", if armed.is_some() { "1" } else { "2" }]);
        if encode_duplicates {
            // Encode duplicates too, so the store itself refuses their Creates.
            cmd.arg("--no-skip-existing");
        }
        cmd.env("TILEGATE_PANIC_WINDOWS", panics)
            .env("TILEGATE_PANIC_MAX_ATTEMPT", "1");
        if let Some(point) = armed {
            cmd.env("TILEGATE_FAULT", point)
                .env("TILEGATE_FAULT_SKIP", rng.range(2, 12).to_string())
                .env("TILEGATE_FAULT_MAX_ATTEMPT", "1");
        }
        let child = cmd
            .stdout(std::fs::File::create(&stdout).unwrap())
            .stderr(std::fs::File::create(&stderr).unwrap())
            .spawn()
            .expect("start a worker");
        Self {
            id,
            child,
            armed,
            killed_from_outside: false,
            stderr,
        }
    }
}

/// The scene stage: A (lease forced to lapse mid-upload), then B while A holds the claim,
/// then C once A's lease has lapsed.
#[derive(Debug)]
enum Assembly {
    NotStarted,
    AStarted(ChildDoc),
    BStarted(ChildDoc, ChildDoc),
    CStarted(ChildDoc, ChildDoc, ChildDoc),
    Done(Vec<Value>),
}

/// A running assembler whose JSON document arrives on exit.
#[derive(Debug)]
struct ChildDoc(Child);

impl ChildDoc {
    fn spawn(target: &Target, data: &Path, job: &str, extra: &[&str], log: PathBuf) -> Self {
        let child = target
            .command(data)
            .args([
                "--json",
                "assemble",
                job,
                "--multipart-threshold",
                "1048576",
                "--part-size",
                "5242880",
            ])
            .args(extra)
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(log).unwrap())
            .spawn()
            .expect("start an assembler");
        Self(child)
    }

    fn finish(self) -> Value {
        tilegate_tests::assembler_doc(&self.0.wait_with_output().unwrap())
    }
}

impl Assembly {
    fn done(&self) -> bool {
        matches!(self, Self::Done(_))
    }

    #[expect(clippy::too_many_arguments, reason = "test plumbing, one call site")]
    fn step(
        &mut self,
        target: &Target,
        data: &Path,
        job: &str,
        scene_key: &str,
        b: &Backends,
        rt: &tokio::runtime::Runtime,
        logs: &Path,
    ) {
        let claim = || rt.block_on(b.claims.get_claim(scene_key)).unwrap();
        *self = match std::mem::replace(self, Self::NotStarted) {
            Self::NotStarted => Self::AStarted(ChildDoc::spawn(
                target,
                data,
                job,
                &[
                    "--lease-ttl-ms",
                    "1500",
                    "--test-pause-renewals-after-parts",
                    "1",
                    "--test-part-delay-ms",
                    "2500",
                ],
                logs.join("assemble-a.log"),
            )),
            Self::AStarted(a) => {
                if claim().is_some_and(|c| c.row.state == ClaimState::Held) {
                    let b = ChildDoc::spawn(target, data, job, &[], logs.join("assemble-b.log"));
                    Self::BStarted(a, b)
                } else {
                    Self::AStarted(a)
                }
            }
            Self::BStarted(a, b_child) => {
                // C goes once A's lease has lapsed mid-upload (or B, started late, took over
                // and finished). Mid-upload: A's multipart upload is open, and the lease is a
                // second past its end — a renewal late by a moment on a loaded machine (while
                // A still builds, its renewals running) is no lapse, and a C started then
                // would find A's lease renewed and leave, with nobody left to take over.
                let uploading = || {
                    !rt.block_on(b.objects.list_multipart(scene_key, None))
                        .unwrap()
                        .is_empty()
                };
                let lapsed_or_done = claim().is_some_and(|c| {
                    c.row.state == ClaimState::Done
                        || (c.row.expires_at + 1000 < now_millis() && uploading())
                });
                if lapsed_or_done {
                    let c = ChildDoc::spawn(target, data, job, &[], logs.join("assemble-c.log"));
                    Self::CStarted(a, b_child, c)
                } else {
                    Self::BStarted(a, b_child)
                }
            }
            Self::CStarted(mut a, mut b_child, mut c) => {
                let all_done = [&mut a, &mut b_child, &mut c]
                    .iter_mut()
                    .all(|x| x.0.try_wait().unwrap().is_some());
                if all_done {
                    Self::Done(vec![a.finish(), b_child.finish(), c.finish()])
                } else {
                    Self::CStarted(a, b_child, c)
                }
            }
            done @ Self::Done(_) => done,
        };
    }
}

/// Enqueue the windows' messages again, as a duplicate delivery would.
async fn enqueue_again(b: &Backends, job: &JobId, windows: &[Window]) {
    let row = b.jobs.get_job(job).await.unwrap().unwrap().row;
    let bodies: Vec<String> = windows
        .iter()
        .map(|w| WindowMessage::for_job(&row, *w).encode())
        .collect();
    b.queue.send_batch(&bodies).await.unwrap();
}

/// Poll the tiles prefix: remember each object's first (ETag, LastModified) and report any
/// change.
async fn monitor(
    objects: Arc<dyn ObjectStore>,
    prefix: String,
    seen: Arc<Mutex<BTreeMap<String, (ETag, SystemTime)>>>,
    violations: Arc<Violations>,
    stop: Arc<AtomicBool>,
    period: Duration,
) {
    loop {
        let last = stop.load(Ordering::SeqCst);
        for m in objects.list(&prefix).await.unwrap() {
            let mut seen = seen.lock().unwrap();
            match seen.get(&m.key) {
                None => {
                    seen.insert(m.key.clone(), (m.e_tag, m.last_modified));
                }
                Some((e, lm)) if *e == m.e_tag && *lm == m.last_modified => {}
                Some((e, lm)) => {
                    violations.add(format!(
                        "monitor: `{}` changed: {e} @ {lm:?} → {} @ {:?}",
                        m.key, m.e_tag, m.last_modified
                    ));
                    seen.insert(m.key.clone(), (m.e_tag, m.last_modified));
                }
            }
        }
        if last {
            return;
        }
        tokio::time::sleep(period).await;
    }
}

/// Range-read tiles during the storm, each read pinned with `If-Match` to the ETag the reader
/// saw first: a tile rewritten under a reader would answer 412 (or other bytes).
async fn reader(
    objects: Arc<dyn ObjectStore>,
    seen: Arc<Mutex<BTreeMap<String, (ETag, SystemTime)>>>,
    violations: Arc<Violations>,
    stop: Arc<AtomicBool>,
    reads: Arc<AtomicU64>,
    seed: u64,
    pause: Duration,
) {
    let mut rng = Rng(seed ^ 0x5EED);
    let mut pinned: BTreeMap<String, ETag> = BTreeMap::new();
    while !stop.load(Ordering::SeqCst) {
        let key = {
            let seen = seen.lock().unwrap();
            if seen.is_empty() {
                None
            } else {
                let i = rng.below(seen.len() as u64) as usize;
                seen.keys().nth(i).cloned()
            }
        };
        let Some(key) = key else {
            tokio::time::sleep(Duration::from_millis(20)).await;
            continue;
        };
        let Some(meta) = objects.head(&object_key(&key)).await.unwrap() else {
            violations.add(format!("reader: `{key}` vanished"));
            continue;
        };
        let etag = pinned
            .entry(key.clone())
            .or_insert(meta.e_tag.clone())
            .clone();
        let quarter = meta.size.div_ceil(4).max(1);
        let mut offset = 0;
        while offset < meta.size {
            let opts = GetOptions {
                range: Some(offset..(offset + quarter).min(meta.size)),
                if_match: Some(ConditionList::Tags(vec![etag.clone()])),
                if_none_match: None,
            };
            match objects.get_opts(&object_key(&key), opts).await {
                Ok(GetOutcome::Found(r)) if r.meta.e_tag == etag => {
                    reads.fetch_add(1, Ordering::Relaxed);
                }
                other => {
                    violations.add(format!(
                        "reader: `{key}` pinned to {etag} answered {:?}",
                        other.map(|o| match o {
                            GetOutcome::Found(r) => format!("found with ETag {}", r.meta.e_tag),
                            GetOutcome::NotModified => "not modified".into(),
                            GetOutcome::PreconditionFailed =>
                                "precondition failed (ETag changed)".into(),
                        })
                    ));
                    break;
                }
            }
            offset += quarter;
            tokio::time::sleep(pause).await;
        }
    }
}

/// Turn on versioning of the test's bucket: from then on every write that lands is an object
/// version, and S3 itself keeps the write log.
pub(crate) async fn enable_versioning(aws: &Aws) {
    use tilegate_aws::aws_sdk_s3::types::{BucketVersioningStatus, VersioningConfiguration};
    let store = tilegate_aws::S3Store::connect(&aws.objects).await.unwrap();
    store
        .client()
        .put_bucket_versioning()
        .bucket(store.bucket())
        .versioning_configuration(
            VersioningConfiguration::builder()
                .status(BucketVersioningStatus::Enabled)
                .build(),
        )
        .send()
        .await
        .expect("enable bucket versioning");
}

/// The storage's own record of writes, per key: each entry one write that landed.
enum WriteLog {
    /// inotify on the tiles and scenes directories of the embedded store: a `link` (Create)
    /// shows as IN_CREATE, a rename over (Update, Overwrite) as IN_MOVED_TO, a rewrite in
    /// place as IN_MODIFY, a removal as IN_DELETE. Temp files live elsewhere.
    Inotify(inotify::Watch),
    /// S3 object versions of a versioned bucket, listed at the end.
    Versions(Aws, Vec<String>),
    /// The objects under the prefixes at the end, one entry each (the GCS and Azure
    /// emulators keep no versions; see `heavy_chaos_gcs`).
    Listed(Arc<dyn ObjectStore>, Vec<String>),
}

impl WriteLog {
    fn start(
        target: &Target,
        objects: &Arc<dyn ObjectStore>,
        data: &Path,
        tiles_prefix: &str,
        scene_key: &str,
    ) -> Self {
        match target {
            Target::Embedded => {
                let objects = data.join("objects");
                let scenes_prefix = scene_key.rsplit_once('/').unwrap().0.to_owned() + "/";
                let dirs: Vec<(PathBuf, String)> = [tiles_prefix.to_owned(), scenes_prefix]
                    .into_iter()
                    .map(|p| {
                        let dir = objects.join(&p);
                        std::fs::create_dir_all(&dir).unwrap();
                        (dir, p)
                    })
                    .collect();
                Self::Inotify(inotify::Watch::start(&dirs))
            }
            Target::Aws(aws) => Self::Versions(aws.clone(), watched(tiles_prefix, scene_key)),
            Target::Objects(_) => Self::Listed(objects.clone(), watched(tiles_prefix, scene_key)),
        }
    }

    fn finish(self, rt: &tokio::runtime::Runtime) -> BTreeMap<String, Vec<String>> {
        match self {
            Self::Inotify(w) => w.finish(),
            Self::Versions(aws, prefixes) => rt.block_on(versions(&aws, &prefixes)),
            Self::Listed(objects, prefixes) => rt.block_on(async {
                let mut out: BTreeMap<String, Vec<String>> = BTreeMap::new();
                for p in &prefixes {
                    for m in objects.list(p).await.unwrap() {
                        out.entry(m.key).or_default().push(m.e_tag.to_string());
                    }
                }
                out
            }),
        }
    }
}

/// The prefixes a cloud write log reads: the tiles, the scene and the scene's STAC Item.
fn watched(tiles_prefix: &str, scene_key: &str) -> Vec<String> {
    vec![
        tiles_prefix.to_owned(),
        scene_key.to_owned(),
        tilegate_stac::item_key(scene_key).unwrap().into_string(),
    ]
}

/// Every version and delete marker under `prefixes`, by key (without the store's prefix).
pub(crate) async fn versions(aws: &Aws, prefixes: &[String]) -> BTreeMap<String, Vec<String>> {
    let store = tilegate_aws::S3Store::connect(&aws.objects).await.unwrap();
    let root = format!("{}/", store.prefix());
    let mut out: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for p in prefixes {
        let (mut key_marker, mut version_marker) = (None::<String>, None::<String>);
        loop {
            let page = store
                .client()
                .list_object_versions()
                .bucket(store.bucket())
                .prefix(format!("{root}{p}"))
                .set_key_marker(key_marker.take())
                .set_version_id_marker(version_marker.take())
                .send()
                .await
                .expect("list object versions");
            for v in page.versions() {
                let key = v
                    .key()
                    .unwrap_or_default()
                    .trim_start_matches(&root)
                    .to_owned();
                out.entry(key).or_default().push(format!(
                    "version {} {} {:?}",
                    v.version_id().unwrap_or("-"),
                    v.e_tag().unwrap_or("-"),
                    v.last_modified()
                ));
            }
            for d in page.delete_markers() {
                let key = d
                    .key()
                    .unwrap_or_default()
                    .trim_start_matches(&root)
                    .to_owned();
                out.entry(key)
                    .or_default()
                    .push(format!("delete marker {}", d.version_id().unwrap_or("-")));
            }
            if page.is_truncated() != Some(true) {
                break;
            }
            key_marker = page.next_key_marker().map(str::to_owned);
            version_marker = page.next_version_id_marker().map(str::to_owned);
        }
    }
    out
}

mod inotify {
    //! A minimal inotify reader: the kernel's record of every name created, renamed over,
    //! modified or removed in the watched directories.

    use std::collections::{BTreeMap, HashMap};
    use std::ffi::CString;
    use std::os::unix::ffi::OsStrExt;
    use std::path::PathBuf;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::thread::JoinHandle;
    use std::time::Instant;

    const WRITES: u32 = libc::IN_CREATE
        | libc::IN_MOVED_TO
        | libc::IN_MODIFY
        | libc::IN_CLOSE_WRITE
        | libc::IN_DELETE
        | libc::IN_MOVED_FROM;

    pub struct Watch {
        stop: Arc<AtomicBool>,
        thread: JoinHandle<BTreeMap<String, Vec<String>>>,
    }

    fn describe(mask: u32) -> String {
        let names = [
            (libc::IN_CREATE, "create"),
            (libc::IN_MOVED_TO, "renamed-over"),
            (libc::IN_MODIFY, "modify"),
            (libc::IN_CLOSE_WRITE, "close-write"),
            (libc::IN_DELETE, "delete"),
            (libc::IN_MOVED_FROM, "renamed-away"),
        ];
        names
            .iter()
            .filter(|(m, _)| mask & m != 0)
            .map(|(_, n)| *n)
            .collect::<Vec<_>>()
            .join("|")
    }

    impl Watch {
        /// Watch each directory; names in it are reported as `key_prefix + name`.
        pub fn start(dirs: &[(PathBuf, String)]) -> Self {
            // SAFETY: plain syscalls on a descriptor this function owns.
            let fd = unsafe { libc::inotify_init1(libc::IN_CLOEXEC | libc::IN_NONBLOCK) };
            assert!(
                fd >= 0,
                "inotify_init1: {}",
                std::io::Error::last_os_error()
            );
            let mut wds = HashMap::new();
            for (dir, prefix) in dirs {
                let c = CString::new(dir.as_os_str().as_bytes()).unwrap();
                // SAFETY: `c` is a valid NUL-terminated path; `fd` is an inotify descriptor.
                let wd = unsafe { libc::inotify_add_watch(fd, c.as_ptr(), WRITES) };
                assert!(wd >= 0, "inotify_add_watch {}", dir.display());
                wds.insert(wd, prefix.clone());
            }
            let stop = Arc::new(AtomicBool::new(false));
            let stop2 = stop.clone();
            let thread = std::thread::spawn(move || {
                let started = Instant::now();
                let mut log: BTreeMap<String, Vec<String>> = BTreeMap::new();
                let mut buf = vec![0u8; 64 * 1024];
                loop {
                    let stopping = stop2.load(Ordering::SeqCst);
                    let mut pfd = libc::pollfd {
                        fd,
                        events: libc::POLLIN,
                        revents: 0,
                    };
                    // SAFETY: one valid pollfd.
                    unsafe { libc::poll(&mut pfd, 1, 50) };
                    // SAFETY: `buf` is writable for its length.
                    let n = unsafe { libc::read(fd, buf.as_mut_ptr().cast(), buf.len()) };
                    if n <= 0 {
                        if stopping {
                            break;
                        }
                        continue;
                    }
                    let mut off = 0usize;
                    while off < n as usize {
                        // SAFETY: the kernel wrote whole events; read the header unaligned.
                        let ev: libc::inotify_event =
                            unsafe { std::ptr::read_unaligned(buf[off..].as_ptr().cast()) };
                        let name_start = off + size_of::<libc::inotify_event>();
                        let name = &buf[name_start..name_start + ev.len as usize];
                        let name = String::from_utf8_lossy(name)
                            .trim_end_matches('\0')
                            .to_owned();
                        off = name_start + ev.len as usize;
                        if ev.mask & libc::IN_Q_OVERFLOW != 0 {
                            log.entry("<inotify queue overflow>".into())
                                .or_default()
                                .push("events were lost".into());
                            continue;
                        }
                        if ev.mask & WRITES == 0 || name.is_empty() {
                            continue;
                        }
                        let Some(prefix) = wds.get(&ev.wd) else {
                            continue;
                        };
                        log.entry(format!("{prefix}{name}"))
                            .or_default()
                            .push(format!(
                                "{} at +{:.3}s",
                                describe(ev.mask),
                                started.elapsed().as_secs_f64()
                            ));
                    }
                }
                // SAFETY: closing the descriptor this thread owns.
                unsafe { libc::close(fd) };
                log
            });
            Self { stop, thread }
        }

        pub fn finish(self) -> BTreeMap<String, Vec<String>> {
            self.stop.store(true, Ordering::SeqCst);
            self.thread.join().expect("inotify thread")
        }
    }
}

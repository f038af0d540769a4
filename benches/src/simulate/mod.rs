//! `tilegate-benches simulate`: the real planner, `Worker` and assembler on the in-memory
//! backend behind a model of the cloud services ([`model`]), with N workers, duplicate
//! deliveries, crashes and a backfill, on a paused Tokio clock: simulated time advances only
//! while every task waits, so a 100,000-window job on 1,000 workers runs in minutes, and the
//! same seed gives the same report. Encoding is replaced by a timed stand-in ([`standin`]);
//! everything else a window goes through is the worker's own code.

pub mod compare;
pub mod model;
mod standin;

use anyhow::Context as _;
use model::{Latency, Model, Modelled, ServiceModel, Tally};
use serde::Serialize;
use standin::{StandIn, Tiles};
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, UNIX_EPOCH};
use tilegate_core::metrics::Counters;
use tilegate_core::table::{ClaimTable as _, CounterTable as _, JobTable as _, ManifestTable as _};
use tilegate_core::{Backends, Prefix, Recipe, Tenant};
use tilegate_memory::{MemoryBackend, TokioClock};
use tilegate_planner::PlanOptions;
use tilegate_worker::{StopWhen, WorkReport, Worker, WorkerConfig};
use tokio::sync::Notify;

/// What to simulate.
#[derive(Debug, Clone, Serialize)]
pub struct SimConfig {
    /// Windows wanted (the scene is the smallest near-square grid holding them).
    pub windows: u64,
    pub window: u32,
    pub workers: u32,
    /// Messages each worker handles at once.
    pub concurrency: usize,
    /// Fraction of messages delivered twice.
    pub duplicates: f64,
    /// Chance that a worker crashes while encoding a window (per receive).
    pub crashes: f64,
    /// Re-enqueue every window without a manifest row once this fraction of the windows is
    /// recorded (a backfill racing the workers).
    pub backfill_at: Option<f64>,
    pub manifest_shards: u32,
    pub seed: u64,
    /// Encode time of one window (read and encode), median and 99th percentile.
    pub encode: Latency,
    pub visibility_s: u64,
    /// Long-poll wait of a receive.
    pub wait_s: u64,
    pub skip_existing: bool,
    /// Workers started per 10 s (Lambda's per-function scaling: 1,000 every 10 s).
    pub ramp_per_10s: u32,
    /// A worker's start-up time (a Lambda cold start, a pod's start).
    pub cold_start: Latency,
    /// How often each worker adds its counters to the job's counter row.
    pub counter_flush_s: f64,
    /// Time before a crashed worker's replacement receives.
    pub restart_s: u64,
    /// Assemblers racing to build the scene (0: no assembly).
    pub assemblers: u32,
    /// Workers assemble the job when they record its last window (`work --assemble`); the
    /// racing assemblers are then not started.
    pub assemble_on_completion: bool,
    pub multipart_threshold: u64,
    pub part_size: u64,
    pub model: ServiceModel,
    /// Scratch directory (the simulated scene's VRT).
    #[serde(skip)]
    pub work: PathBuf,
}

impl Default for SimConfig {
    fn default() -> Self {
        Self {
            windows: 400,
            window: 512,
            workers: 2,
            concurrency: 4,
            duplicates: 0.0,
            crashes: 0.0,
            backfill_at: None,
            manifest_shards: 1,
            seed: 1,
            // 6.71 s of CPU for 400 windows in BENCHMARKS.md's tile stage: ~17 ms a window.
            encode: Latency::new(17.0, 45.0),
            visibility_s: 120,
            wait_s: 20,
            skip_existing: true,
            ramp_per_10s: 1000,
            cold_start: Latency::new(400.0, 1500.0),
            counter_flush_s: 1.0,
            restart_s: 1,
            assemblers: 1,
            assemble_on_completion: false,
            multipart_threshold: 64 << 20,
            part_size: 16 << 20,
            model: ServiceModel::default(),
            work: PathBuf::from(".ci-cache/bench/simulate"),
        }
    }
}

/// What a simulation came to.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub config: SimConfig,
    pub windows: u64,
    pub job_id: String,
    /// Simulated seconds until the manifest held every window.
    pub tiles_done_s: Option<f64>,
    /// Simulated seconds until the last worker stopped.
    pub workers_done_s: f64,
    /// Simulated seconds the assembly took (its CPU is not modelled, only its requests).
    pub assemble_s: Option<f64>,
    /// With assembly on completion: simulated seconds until the scene was published (seen on
    /// the job row, checked four times a second), and how long after the last row that was.
    pub published_s: Option<f64>,
    pub assembled_after_last_row_s: Option<f64>,
    /// When the scene's claim was first held (the assembly began), after the last row; both
    /// are seen by a watcher polling every 250 ms.
    pub assembly_started_after_last_row_s: Option<f64>,
    pub manifest_rows: u64,
    pub written: u64,
    /// Encodes whose create-if-absent write was refused (a duplicate had written the tile).
    pub wasted_encodes: u64,
    /// Duplicates that found the tile in place and skipped encoding.
    pub skipped: u64,
    pub encodes: u64,
    pub crashes: u64,
    /// Windows left for redelivery after a retryable fault (throttling exhausted), counted by
    /// the worker runs that ended (a crashed run's are lost with it).
    pub retried: u64,
    pub dead_letters: u64,
    pub duplicated_messages: u64,
    pub backfill_enqueued: Option<u64>,
    pub scene_uploads: u64,
    /// Bytes uploaded by assemblers (the winner's; losers stopped at the claim gate).
    pub scene_bytes_uploaded: u64,
    pub scene_size: Option<u64>,
    pub requests: u64,
    pub requests_per_window: f64,
    pub requests_by_service: BTreeMap<String, u64>,
    pub throttled_by_service: BTreeMap<String, u64>,
    /// The five partitions throttled most.
    pub hottest_partitions: Vec<(String, u64)>,
    pub throttle_retries: u64,
    pub throttle_exhausted: u64,
    pub peak_units_per_s: BTreeMap<String, f64>,
    pub usd: f64,
    pub usd_per_window: f64,
    pub tally: Tally,
}

/// A scene of `windows` windows as a source-less VRT (it reads as zeros).
fn scene_vrt(work: &Path, windows: u64, window: u32) -> anyhow::Result<PathBuf> {
    let cols = (windows as f64).sqrt().ceil().max(1.0) as u64;
    let rows = windows.div_ceil(cols);
    let (w, h) = (cols * u64::from(window), rows * u64::from(window));
    std::fs::create_dir_all(work)?;
    let path = work.join(format!("sim-{w}x{h}.vrt"));
    let vrt = format!(
        "<VRTDataset rasterXSize=\"{w}\" rasterYSize=\"{h}\">\n  <SRS>EPSG:32633</SRS>\n  \
         <GeoTransform>500000, 10, 0, 5000000, 0, -10</GeoTransform>\n  \
         <VRTRasterBand dataType=\"UInt16\" band=\"1\"/>\n</VRTDataset>\n"
    );
    std::fs::write(&path, vrt)?;
    Ok(path)
}

/// A real tile for each window size of the job's grid.
fn stand_in_tiles(job: &tilegate_core::table::JobRecord) -> anyhow::Result<Tiles> {
    let mut tiles = HashMap::new();
    for w in job.grid.windows() {
        let rect = job.grid.rect(w).expect("a window of the grid");
        if tiles.contains_key(&(rect.width, rect.height)) {
            continue;
        }
        let req = tilegate_cog::EncodeRequest {
            path: tilegate_source::gdal_path(&job.source)?,
            cache_key: job.source.etag.to_string(),
            scene: job.scene.clone(),
            recipe: job.recipe.clone(),
            rect,
        };
        let tile = tilegate_cog::encode_window(&req).context("encode a stand-in tile")?;
        tiles.insert((rect.width, rect.height), bytes::Bytes::from(tile));
    }
    Ok(tiles)
}

fn plan_options(cfg: &SimConfig) -> PlanOptions {
    let mut recipe = Recipe::copy_all();
    recipe.window = cfg.window;
    PlanOptions {
        recipe,
        prefix: Prefix::default(),
        tenant: Tenant::default(),
        resume: false,
        assets: Vec::new(),
        manifest_shards: cfg.manifest_shards,
        policy: Default::default(),
    }
}

fn assemble_options(cfg: &SimConfig, owner: String) -> tilegate_assembler::AssembleOptions {
    tilegate_assembler::AssembleOptions {
        multipart_threshold: cfg.multipart_threshold,
        part_size: cfg.part_size,
        ..tilegate_assembler::AssembleOptions::new(owner)
    }
}

fn worker_config(cfg: &SimConfig) -> WorkerConfig {
    WorkerConfig {
        concurrency: cfg.concurrency.max(1),
        threads: 1,
        visibility: Duration::from_secs(cfg.visibility_s.max(1)),
        wait: Duration::from_secs(cfg.wait_s),
        skip_existing: cfg.skip_existing,
        stop: StopWhen::QueueDrained,
        shutdown_grace: Duration::ZERO,
        reduce_into: None,
        counter_flush: Duration::from_secs_f64(cfg.counter_flush_s),
        stand_in: None,
        sources: Arc::default(),
        on_complete: None,
    }
}

/// A stop signal nobody sends.
fn never() -> tokio::sync::watch::Receiver<bool> {
    let (tx, rx) = tokio::sync::watch::channel(false);
    std::mem::forget(tx);
    rx
}

/// What one worker slot did: its runs' reports and its crashes.
#[derive(Default)]
struct Slot {
    reports: Vec<WorkReport>,
    crashes: u64,
}

/// One worker slot: started after the ramp and a cold start, restarted after each crash.
async fn slot(
    b: Backends,
    cfg: Arc<SimConfig>,
    tiles: Arc<Tiles>,
    encodes: Arc<AtomicU64>,
    counters: Arc<Counters>,
    index: u32,
) -> anyhow::Result<Slot> {
    let step = index / cfg.ramp_per_10s.max(1);
    let z = model::hashed_unit(cfg.seed ^ 0xc01d, &[u64::from(index)]);
    let cold = cfg.cold_start.draw(inverse_normal(z));
    tokio::time::sleep(Duration::from_secs(10 * u64::from(step)) + cold).await;
    let mut out = Slot::default();
    loop {
        let crash = Arc::new(Notify::new());
        let mut wc = worker_config(&cfg);
        if cfg.assemble_on_completion {
            let opts = assemble_options(&cfg, format!("simulated-worker-{index}"));
            wc.on_complete = Some(Arc::new(
                tilegate_pipeline::complete::AssembleOnComplete::new(b.clone(), opts),
            ));
        }
        wc.stand_in = Some(Arc::new(StandIn {
            tiles: Arc::clone(&tiles),
            seed: cfg.seed,
            encode: cfg.encode,
            crash_rate: cfg.crashes,
            crash: Arc::clone(&crash),
            encodes: Arc::clone(&encodes),
        }));
        let worker = Arc::new(Worker::new(b.clone(), wc, Arc::clone(&counters)));
        let mut run = tokio::spawn(async move { worker.run(never()).await });
        tokio::select! {
            biased;
            done = &mut run => {
                out.reports.push(done??);
                return Ok(out);
            }
            () = crash.notified() => {
                // The process dies: its windows in flight are neither finished, released nor
                // extended; they come back when their visibility lapses.
                run.abort();
                let _ = run.await;
                out.crashes += 1;
                tokio::time::sleep(Duration::from_secs(cfg.restart_s)).await;
            }
        }
    }
}

/// The standard normal quantile of `p` (Acklam's rational approximation; plenty for latencies).
fn inverse_normal(p: f64) -> f64 {
    let p = p.clamp(1e-12, 1.0 - 1e-12);
    let a = [
        -3.969_683_028_665_376e1,
        2.209_460_984_245_205e2,
        -2.759_285_104_469_687e2,
        1.383_577_518_672_69e2,
        -3.066_479_806_614_716e1,
        2.506_628_277_459_239,
    ];
    let b = [
        -5.447_609_879_822_406e1,
        1.615_858_368_580_409e2,
        -1.556_989_798_598_866e2,
        6.680_131_188_771_972e1,
        -1.328_068_155_288_572e1,
    ];
    let c = [
        -7.784_894_002_430_293e-3,
        -3.223_964_580_411_365e-1,
        -2.400_758_277_161_838,
        -2.549_732_539_343_734,
        4.374_664_141_464_968,
        2.938_163_982_698_783,
    ];
    let d = [
        7.784_695_709_041_462e-3,
        3.224_671_290_700_398e-1,
        2.445_134_137_142_996,
        3.754_408_661_907_416,
    ];
    let tail = |q: f64| {
        (((((c[0] * q + c[1]) * q + c[2]) * q + c[3]) * q + c[4]) * q + c[5])
            / ((((d[0] * q + d[1]) * q + d[2]) * q + d[3]) * q + 1.0)
    };
    if p < 0.02425 {
        tail((-2.0 * p.ln()).sqrt())
    } else if p > 1.0 - 0.02425 {
        -tail((-2.0 * (1.0 - p).ln()).sqrt())
    } else {
        let q = p - 0.5;
        let r = q * q;
        (((((a[0] * r + a[1]) * r + a[2]) * r + a[3]) * r + a[4]) * r + a[5]) * q
            / (((((b[0] * r + b[1]) * r + b[2]) * r + b[3]) * r + b[4]) * r + 1.0)
    }
}

/// Run one simulation.
pub fn simulate(cfg: &SimConfig) -> anyhow::Result<Report> {
    let vrt = scene_vrt(&cfg.work, cfg.windows, cfg.window)?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()?;
    rt.block_on(run(cfg, &vrt))
}

async fn run(cfg: &SimConfig, vrt: &Path) -> anyhow::Result<Report> {
    let clock = TokioClock::starting_at(UNIX_EPOCH + Duration::from_secs(1_767_225_600));
    let mem = MemoryBackend::new(Arc::new(clock));
    let queue = mem.queue("simulate", 3);
    let model = Model::new(cfg.model.clone(), cfg.seed);
    let (b, modelled) = Modelled::wrap(
        mem.backends(queue),
        Arc::clone(&model),
        cfg.duplicates,
        cfg.seed,
    );
    let opts = plan_options(cfg);
    let plan = tilegate_planner::plan(&b, vrt.to_str().context("a UTF-8 path")?, &opts).await?;
    let job = plan.job;
    let windows = job.grid.len();
    let tiles = Arc::new(stand_in_tiles(&job)?);
    let cfg = Arc::new(cfg.clone());
    let encodes = Arc::new(AtomicU64::new(0));
    // Shared by every worker, so a crashed worker's windows are still counted.
    let counters = Arc::new(Counters::new());
    let mut slots = tokio::task::JoinSet::new();
    for i in 0..cfg.workers.max(1) {
        slots.spawn(slot(
            b.clone(),
            Arc::clone(&cfg),
            Arc::clone(&tiles),
            Arc::clone(&encodes),
            Arc::clone(&counters),
            i,
        ));
    }
    // Watches the (unbilled) inner manifest four times a simulated second: when the tiles are done,
    // and when to backfill.
    let stopped = Arc::new(AtomicBool::new(false));
    let watcher = {
        let (mem, b, job, cfg, stopped) = (
            mem.clone(),
            b.clone(),
            job.clone(),
            Arc::clone(&cfg),
            Arc::clone(&stopped),
        );
        tokio::spawn(async move {
            let mut done_at = None;
            let mut published_at = None;
            let mut claimed_at = None;
            let mut backfill = None;
            let watch_scene = cfg.assemble_on_completion;
            let scene_key = job.prefix.scene_key(&job.job_id).to_string();
            while !stopped.load(Ordering::Relaxed)
                && (done_at.is_none() || (watch_scene && published_at.is_none()))
            {
                tokio::time::sleep(Duration::from_millis(250)).await;
                if watch_scene
                    && claimed_at.is_none()
                    && mem.tables.get_claim(&scene_key).await?.is_some()
                {
                    claimed_at = Some(clock.elapsed().as_secs_f64());
                }
                if watch_scene
                    && published_at.is_none()
                    && mem
                        .tables
                        .get_job(&job.job_id)
                        .await?
                        .is_some_and(|j| j.row.scene_output.is_some())
                {
                    published_at = Some(clock.elapsed().as_secs_f64());
                }
                if done_at.is_some() {
                    continue;
                }
                let rows = mem.tables.count_entries(&job.job_id).await?;
                if let Some(f) = cfg.backfill_at
                    && backfill.is_none()
                    && rows as f64 >= f * windows as f64
                {
                    let sent = tilegate_planner::enqueue_windows(&b, &job, true).await?;
                    backfill = Some(sent.enqueued);
                }
                if rows >= windows {
                    done_at = Some(clock.elapsed().as_secs_f64());
                }
            }
            anyhow::Ok((done_at, published_at, claimed_at, backfill))
        })
    };
    let mut crashes = 0;
    let mut total = WorkReport::default();
    while let Some(done) = slots.join_next().await {
        let s = done??;
        crashes += s.crashes;
        for r in s.reports {
            total.retried += r.retried;
        }
    }
    let workers_done_s = clock.elapsed().as_secs_f64();
    stopped.store(true, Ordering::Relaxed);
    let (tiles_done_s, published_s, claimed_s, backfill_enqueued) = watcher.await??;

    let mut assemble_s = None;
    let (mut scene_uploads, mut scene_bytes_uploaded, mut scene_size) = (0, 0, None);
    if cfg.assemblers > 0 && !cfg.assemble_on_completion {
        let started = clock.elapsed();
        let mut racers = tokio::task::JoinSet::new();
        for i in 0..cfg.assemblers {
            let (b, job_id, cfg) = (b.clone(), job.job_id.clone(), Arc::clone(&cfg));
            racers.spawn(async move {
                let opts = assemble_options(&cfg, format!("simulated-assembler-{i}"));
                tilegate_assembler::assemble(&b, &job_id, &opts, &Counters::new()).await
            });
        }
        while let Some(done) = racers.join_next().await {
            let r = done?.context("assemble the simulated scene")?;
            if matches!(r.outcome, tilegate_assembler::AssembleOutcome::Written) {
                scene_uploads += 1;
                scene_bytes_uploaded += if r.multipart {
                    r.multipart_bytes_uploaded
                } else {
                    r.scene_size.unwrap_or(0)
                };
            } else {
                // A loser that got past the gate would have uploaded parts before its
                // completion was refused; the gate keeps this at zero.
                scene_bytes_uploaded += r.multipart_bytes_uploaded;
            }
            scene_size = scene_size.or(r.scene_size);
        }
        assemble_s = Some((clock.elapsed() - started).as_secs_f64());
    }

    if cfg.assemble_on_completion {
        // Each won claim is an upload; the losers stopped at the gate.
        scene_uploads = mem
            .tables
            .get_counters(&job.job_id)
            .await?
            .get(tilegate_core::metrics::CLAIMS_WON)
            .copied()
            .unwrap_or(0);
        scene_size = mem
            .tables
            .get_job(&job.job_id)
            .await?
            .and_then(|j| j.row.scene_output)
            .map(|o| o.size);
        scene_bytes_uploaded = scene_size.unwrap_or(0) * scene_uploads;
    }
    let tally = model.tally();
    let manifest_rows = mem.tables.count_entries(&job.job_id).await?;
    use tilegate_core::metrics as m;
    let prices = tilegate_report::cost::PriceTable::default();
    let mut usd = 0.0;
    let mut by_service: BTreeMap<String, u64> = BTreeMap::new();
    for (name, n) in &tally.requests {
        let (service, op) = name.split_once(' ').unwrap_or((name, ""));
        *by_service.entry(service.to_owned()).or_default() += n;
        usd += prices.per_request(service, op).unwrap_or(0.0) * *n as f64;
    }
    let mut hottest: Vec<(String, u64)> = tally
        .throttled_partitions
        .iter()
        .map(|(k, v)| (k.clone(), *v))
        .collect();
    hottest.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    hottest.truncate(5);
    let requests = tally.total_requests();
    Ok(Report {
        config: (*cfg).clone(),
        windows,
        job_id: job.job_id.to_string(),
        tiles_done_s,
        workers_done_s,
        assemble_s,
        published_s,
        assembled_after_last_row_s: published_s.zip(tiles_done_s).map(|(p, t)| p - t),
        assembly_started_after_last_row_s: claimed_s.zip(tiles_done_s).map(|(c, t)| c - t),
        manifest_rows,
        written: counters.get(m::TILES_WRITTEN),
        wasted_encodes: counters.get(m::PRECONDITION_FAILED),
        skipped: counters.get(m::DUPLICATE_ENCODES_SKIPPED),
        encodes: encodes.load(Ordering::Relaxed),
        crashes,
        retried: total.retried,
        dead_letters: counters.get(m::DEAD_LETTERED),
        duplicated_messages: modelled.duplicated(),
        backfill_enqueued,
        scene_uploads,
        scene_bytes_uploaded,
        scene_size,
        requests,
        requests_per_window: requests as f64 / windows as f64,
        requests_by_service: by_service,
        throttled_by_service: tally.throttled.clone(),
        hottest_partitions: hottest,
        throttle_retries: tally.retries,
        throttle_exhausted: tally.exhausted,
        peak_units_per_s: tally.peak_units_per_s.clone(),
        usd,
        usd_per_window: usd / windows as f64,
        tally,
    })
}

/// The report as text.
pub fn render(r: &Report) -> String {
    let c = &r.config;
    let mut out = format!(
        "simulate: {} windows × {} workers (concurrency {}), seed {}, manifest shards {}, \
         duplicates {:.0} %, crashes {:.1} %{}\n",
        r.windows,
        c.workers,
        c.concurrency,
        c.seed,
        c.manifest_shards,
        c.duplicates * 100.0,
        c.crashes * 100.0,
        c.backfill_at
            .map(|f| format!(", backfill at {:.0} %", f * 100.0))
            .unwrap_or_default()
    );
    out.push_str(&format!(
        "  tiles done at {} s, workers stopped at {:.1} s{} (simulated time)\n",
        r.tiles_done_s
            .map_or_else(|| "never".to_owned(), |t| format!("{t:.0}")),
        r.workers_done_s,
        r.assemble_s
            .map(|a| format!(", assembly {a:.1} s"))
            .unwrap_or_default()
    ));
    if c.assemble_on_completion {
        out.push_str(&format!(
            "  assembled on completion: started {} after the last row, scene published at {} \
             s, {} after the last row, {} claim(s) won\n",
            r.assembly_started_after_last_row_s
                .map_or_else(|| "-".to_owned(), |t| format!("{:.1} s", t.max(0.0))),
            r.published_s
                .map_or_else(|| "never".to_owned(), |t| format!("{t:.1}")),
            r.assembled_after_last_row_s
                .map_or_else(|| "-".to_owned(), |t| format!("{t:.1} s")),
            r.scene_uploads
        ));
    }
    out.push_str(&format!(
        "  windows: {} rows, {} written, {} encodes ({} refused after encoding), {} skipped, \
         {} retried, {} dead letters; {} crashes, {} duplicate deliveries{}\n",
        r.manifest_rows,
        r.written,
        r.encodes,
        r.wasted_encodes,
        r.skipped,
        r.retried,
        r.dead_letters,
        r.crashes,
        r.duplicated_messages,
        r.backfill_enqueued
            .map(|n| format!(", backfill enqueued {n}"))
            .unwrap_or_default()
    ));
    out.push_str(&format!(
        "  requests: {} ({:.2} per window): {}\n",
        r.requests,
        r.requests_per_window,
        r.requests_by_service
            .iter()
            .map(|(s, n)| format!("{s} {n}"))
            .collect::<Vec<_>>()
            .join(", ")
    ));
    if r.throttled_by_service.is_empty() {
        out.push_str("  throttled: none\n");
    } else {
        out.push_str(&format!(
            "  throttled: {} ({} retries, {} still throttled after the last attempt); hottest: {}\n",
            r.throttled_by_service
                .iter()
                .map(|(s, n)| format!("{s} {n}"))
                .collect::<Vec<_>>()
                .join(", "),
            r.throttle_retries,
            r.throttle_exhausted,
            r.hottest_partitions
                .iter()
                .map(|(p, n)| format!("{p} ({n})"))
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    out.push_str(&format!(
        "  peak units per second in one partition: {}\n",
        r.peak_units_per_s
            .iter()
            .map(|(s, n)| format!("{s} {n:.0}"))
            .collect::<Vec<_>>()
            .join(", ")
    ));
    if let Some(size) = r.scene_size {
        out.push_str(&format!(
            "  scene: {size} bytes, {} upload(s), {} bytes uploaded by {} assembler(s)\n",
            r.scene_uploads, r.scene_bytes_uploaded, c.assemblers
        ));
    }
    out.push_str(&format!(
        "  cost: ${:.4} in requests (${:.7} per window), default price table\n",
        r.usd, r.usd_per_window
    ));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn small(work: &Path) -> SimConfig {
        SimConfig {
            windows: 64,
            window: 128,
            workers: 8,
            work: work.to_path_buf(),
            ..SimConfig::default()
        }
    }

    /// Duplicates, crashes, a backfill and racing assemblers: the same seed replays the same
    /// run, and every window's tile and the scene are written exactly once.
    #[test]
    fn the_same_seed_gives_the_same_report() {
        let dir = tempfile::tempdir().unwrap();
        let cfg = SimConfig {
            duplicates: 0.3,
            crashes: 0.05,
            backfill_at: Some(0.5),
            assemblers: 3,
            seed: 3,
            ..small(dir.path())
        };
        let a = simulate(&cfg).unwrap();
        let b = simulate(&cfg).unwrap();
        assert_eq!(
            serde_json::to_string(&a).unwrap(),
            serde_json::to_string(&b).unwrap()
        );
        assert_eq!(a.manifest_rows, a.windows);
        assert_eq!(a.written, a.windows, "a tile written twice or not at all");
        assert!(a.crashes > 0 && a.duplicated_messages > 0, "{}", render(&a));
        assert_eq!(a.scene_uploads, 1);
        assert_eq!(a.scene_bytes_uploaded, a.scene_size.unwrap());
        let other = simulate(&SimConfig { seed: 4, ..cfg }).unwrap();
        assert_ne!(
            serde_json::to_string(&other.tally).unwrap(),
            serde_json::to_string(&a.tally).unwrap(),
            "the seed changes nothing"
        );
    }

    /// A scaled-down partition limit (200 write units a second): one manifest partition is
    /// throttled, sixteen shards are not.
    #[test]
    fn sharding_the_manifest_removes_its_hot_partition() {
        let dir = tempfile::tempdir().unwrap();
        let run = |shards| {
            let mut cfg = SimConfig {
                windows: 400,
                workers: 50,
                manifest_shards: shards,
                assemblers: 0,
                counter_flush_s: 30.0,
                ..small(dir.path())
            };
            cfg.model.dynamo_writes_per_partition = 200.0;
            simulate(&cfg).unwrap()
        };
        let manifest_throttles = |r: &Report| -> u64 {
            r.tally
                .throttled_partitions
                .iter()
                .filter(|(k, _)| k.starts_with("dynamodb write ") && !k.contains("counters/"))
                .map(|(_, n)| n)
                .sum()
        };
        let one = run(1);
        let sharded = run(16);
        assert!(manifest_throttles(&one) > 0, "{}", render(&one));
        assert_eq!(manifest_throttles(&sharded), 0, "{}", render(&sharded));
        assert_eq!(sharded.manifest_rows, sharded.windows);
    }

    /// The simulation's request count is within 25 % of a real embedded run's.
    #[test]
    fn simulated_requests_match_an_embedded_run() {
        let dir = tempfile::tempdir().unwrap();
        let cfg = SimConfig {
            windows: 100,
            window: 256,
            workers: 2,
            wait_s: 1,
            ..small(dir.path())
        };
        let sim = simulate(&cfg).unwrap();
        let c = compare::compare(&cfg, &sim).unwrap();
        assert!((0.75..=1.25).contains(&c.ratio), "{}", compare::render(&c));
    }
}

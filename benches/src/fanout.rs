//! The 400-window fan-out benchmark: tilegate against the tools a user would pick instead, run
//! interleaved (every contender once per round, rounds repeated) so that drift in the machine
//! hits all of them alike, each figure a ratio to the reference measured in the same run.

use crate::measure::{Sample, run, run_all, spread};
use anyhow::{Context, bail};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;
use tilegate_core::message::WindowMessage;
use tilegate_core::table::{ManifestEntry, TileOrigin};
use tilegate_core::{Backends, ETag, JobId, Window, now_millis};

/// What to run.
#[derive(Debug, Clone)]
pub struct Config {
    pub rounds: u32,
    /// Scene width and height.
    pub size: u32,
    pub window: u32,
    /// Window size of the many-window plan (10240 / 32 = 320² = 102,400 windows).
    pub plan_window: u32,
    /// Where the `tilegate` binary is.
    pub bin: PathBuf,
    /// Scratch and cache directory.
    pub work: PathBuf,
    /// Include the rasterio peers (installed into a virtual environment).
    pub python: bool,
    /// Also measure the three-band Byte imagery scene.
    pub imagery: bool,
    /// `tilegate work` process counts measured on one data directory.
    pub procs: Vec<u32>,
    pub cores: usize,
    /// Run only these contenders (`tilegate_manifest_count_many`, …); empty for all.
    pub only: Vec<String>,
    /// Remove a contender's earlier output just before it runs (the warm condition), instead
    /// of moving it aside until the benchmark ends (the cold one, the default).
    pub remove_just_before: bool,
    /// Write the counted manifest rows without their window facts, as rows were before they
    /// carried them (the A side of the count's comparison).
    pub bare_rows: bool,
}

/// The scenes measured.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scene {
    /// `tilegate sample-scene --seed 7`: one UInt16 band of smooth terrain (compresses ~1.5:1).
    Terrain,
    /// `benches/peers/imagery_scene.py`: three Byte bands (RGB) with texture and sensor noise.
    Imagery,
}

impl Scene {
    /// The prefix of its contenders' names (none for the terrain, the table's first scene).
    fn prefix(self) -> &'static str {
        match self {
            Scene::Terrain => "",
            Scene::Imagery => "imagery_",
        }
    }
}

/// The contenders of the terrain scene, in the order each round runs them. Each tilegate
/// figure with a target runs right after the one it is divided by, so a pair shares the
/// machine's state of the moment.
const TERRAIN: [&str; 13] = [
    "reference",
    "tilegate_run",
    "peer_tiles_cog",
    "tilegate_tiles",
    "tilegate_assemble",
    "peer_tiles_rasterio",
    "peer_tiles_xargs",
    "peer_mosaic",
    "tilegate_work_clean",
    "tilegate_work_duplicates",
    "tilegate_noop_work",
    "tilegate_plan_many",
    "tilegate_manifest_count_many",
];

/// The contenders of the imagery scene: the ones with targets.
const IMAGERY: [&str; 5] = [
    "reference",
    "tilegate_run",
    "peer_tiles_cog",
    "tilegate_tiles",
    "tilegate_assemble",
];

/// Every contender of a run, in order: (scene, contender, its name in the table).
fn order(c: &Config) -> Vec<(Scene, &'static str, String)> {
    let mut v: Vec<_> = TERRAIN
        .iter()
        .map(|n| (Scene::Terrain, *n, (*n).to_owned()))
        .collect();
    // After the clean run's duplicates, before the many-window plan.
    let at = v.len() - 2;
    for (i, p) in c.procs.iter().enumerate() {
        v.insert(
            at + i,
            (Scene::Terrain, "tilegate_work_procs", procs_name(*p)),
        );
    }
    if c.imagery {
        v.extend(
            IMAGERY
                .iter()
                .map(|n| (Scene::Imagery, *n, format!("imagery_{n}"))),
        );
    }
    v
}

fn procs_name(n: u32) -> String {
    format!("tilegate_work_procs_{n}")
}

/// What a contender's paired ratio divides by: the tile stage by the fastest Python peer of
/// the same scene, everything else by the reference of the same scene.
fn partner(name: &str) -> String {
    let (prefix, base) = match name.strip_prefix("imagery_") {
        Some(b) => ("imagery_", b),
        None => ("", name),
    };
    match base {
        "tilegate_tiles" => format!("{prefix}peer_tiles_cog"),
        _ => format!("{prefix}reference"),
    }
}

/// How each contender is described in the table.
fn describe(name: &str, c: &Config) -> String {
    let windows = (c.size.div_ceil(c.window)).pow(2);
    let many = (c.size.div_ceil(c.plan_window)).pow(2);
    let (scene, base) = match name.strip_prefix("imagery_") {
        Some(b) => ("3-band Byte imagery: ", b),
        None => ("", name),
    };
    let what = match base {
        "reference" => "gdal_translate -of COG (DEFLATE, ALL_CPUS), whole scene".into(),
        "peer_tiles_xargs" => format!("{windows} × gdal_translate -srcwin, xargs -P {}", c.cores),
        "peer_tiles_rasterio" => format!("rasterio + rio-cogeo, multiprocessing.Pool({})", c.cores),
        "peer_tiles_cog" => format!(
            "rasterio writing GDAL's COG driver, multiprocessing.Pool({})",
            c.cores
        ),
        "peer_mosaic" => "gdalbuildvrt + gdal_translate -of COG over the peer tiles".into(),
        "tilegate_run" => "tilegate run: plan, queue, encode, commit, manifest, assemble".into(),
        "tilegate_tiles" => "tilegate run --no-assemble (tiles only)".into(),
        "tilegate_assemble" => "tilegate assemble (scene COG from the tiles)".into(),
        "tilegate_work_clean" => format!("tilegate work, {windows} windows once"),
        "tilegate_work_duplicates" => format!(
            "tilegate work, 30% of the {windows} windows delivered again after the clean run"
        ),
        "tilegate_noop_work" => format!("tilegate work, {windows} noop windows (orchestration)"),
        "tilegate_plan_many" => format!("tilegate plan, {many} windows (plan + enqueue)"),
        "tilegate_manifest_count_many" => format!("manifest count of {many} rows"),
        b => match b.strip_prefix("tilegate_work_procs_") {
            Some(n) => format!("{n} × tilegate work on one data directory, {windows} windows"),
            None => b.into(),
        },
    };
    format!("{scene}{what}")
}

/// Everything measured, by contender.
#[derive(Debug, Default)]
pub struct Results {
    pub samples: BTreeMap<String, Vec<Sample>>,
    /// Extra figures reported by tilegate itself (last round), by contender.
    pub notes: BTreeMap<String, Value>,
    pub skipped: BTreeMap<String, String>,
    /// The contenders in the order they ran.
    pub order: Vec<String>,
}

pub fn run_benchmark(c: &Config) -> anyhow::Result<Results> {
    std::fs::create_dir_all(&c.work)?;
    empty_trash(c)?;
    let r = measure(c);
    empty_trash(c)?;
    r
}

fn measure(c: &Config) -> anyhow::Result<Results> {
    let terrain = scene(c, Scene::Terrain)?;
    let imagery = if c.imagery {
        Some(scene(c, Scene::Imagery)?)
    } else {
        None
    };
    let venv = if c.python {
        python_peer(c).map_err(|e| e.to_string())
    } else {
        Err("not asked for (--python)".into())
    };
    let plan = order(c);
    let mut r = Results {
        order: plan.iter().map(|(_, _, n)| n.clone()).collect(),
        ..Results::default()
    };
    if let Err(why) = &venv {
        for (_, base, name) in &plan {
            if base.starts_with("peer_tiles_rasterio") || *base == "peer_tiles_cog" {
                r.skipped.insert(name.clone(), why.clone());
            }
        }
    }
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let count_job = prepare_manifest_count(c, &terrain, &rt)?;
    for round in 1..=c.rounds {
        eprintln!("fanout: round {round} of {}", c.rounds);
        for (kind, base, name) in &plan {
            if r.skipped.contains_key(name) || (!c.only.is_empty() && !c.only.contains(name)) {
                continue;
            }
            let src = match kind {
                Scene::Terrain => &terrain,
                Scene::Imagery => imagery.as_ref().expect("imagery asked for"),
            };
            let p = kind.prefix();
            let started = Instant::now();
            let (sample, note) = match *base {
                "reference" => reference(c, src, p)?,
                "peer_tiles_xargs" => peer_xargs(c, src)?,
                "peer_tiles_rasterio" => {
                    peer_rasterio(c, src, venv.as_ref().unwrap(), p, "rio-cogeo")?
                }
                "peer_tiles_cog" => peer_rasterio(c, src, venv.as_ref().unwrap(), p, "cog")?,
                "peer_mosaic" => peer_mosaic(c)?,
                "tilegate_run" => tilegate_run(c, src, p, false)?,
                "tilegate_tiles" => tilegate_run(c, src, p, true)?,
                "tilegate_assemble" => tilegate_assemble(c, p)?,
                "tilegate_work_clean" => tilegate_work(c, src)?,
                "tilegate_work_duplicates" => tilegate_duplicates(c, 0.3, &rt)?,
                "tilegate_work_procs" => {
                    let n = name["tilegate_work_procs_".len()..].parse()?;
                    tilegate_work_procs(c, src, n)?
                }
                "tilegate_noop_work" => tilegate_noop(c, src)?,
                "tilegate_plan_many" => tilegate_plan_many(c, src)?,
                "tilegate_manifest_count_many" => manifest_count(c, &count_job, &rt)?,
                _ => unreachable!(),
            };
            eprintln!(
                "  {name:<30} {:>8.3} s wall {:>8.3} s cpu ({:.3} sys) {:>8.0} MB  ({:.1} s with setup)",
                sample.wall_s,
                sample.cpu_s,
                sample.sys_s,
                sample.max_rss_mb,
                started.elapsed().as_secs_f64()
            );
            r.samples.entry(name.clone()).or_default().push(sample);
            if !note.is_null() {
                r.notes.insert(name.clone(), note);
            }
        }
    }
    Ok(r)
}

fn tilegate(c: &Config, data: &Path) -> Command {
    let mut cmd = Command::new(c.bin.join("tilegate"));
    cmd.arg("--data").arg(data).arg("--json");
    cmd
}

/// A fresh, empty directory under the work directory. An earlier one is moved aside into
/// `trash/`, emptied only when the benchmark ends: deleting a round's 400 tiles just before the
/// next contender starts would bill that contender for it, because ext4 without a journal (as
/// this machine's root filesystem is) steps over every inode freed in the last 30 s when it
/// allocates one (`recently_deleted` in `perf`: 3 % of the tile stage's CPU).
fn fresh(c: &Config, name: &str) -> anyhow::Result<PathBuf> {
    let d = c.work.join(name);
    if d.exists() && c.remove_just_before {
        std::fs::remove_dir_all(&d).with_context(|| format!("clear {}", d.display()))?;
    } else if d.exists() {
        // Numbered, since one name is moved aside once per round.
        let trash = c.work.join(TRASH);
        std::fs::create_dir_all(&trash)?;
        static ASIDE: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let n = ASIDE.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let aside = trash.join(format!("{name}-{n}"));
        std::fs::rename(&d, &aside).with_context(|| format!("move {} aside", d.display()))?;
    }
    std::fs::create_dir_all(&d)?;
    Ok(d)
}

/// Where [`fresh`] moves earlier directories.
const TRASH: &str = "trash";

/// Remove the directories [`fresh`] moved aside.
fn empty_trash(c: &Config) -> anyhow::Result<()> {
    let trash = c.work.join(TRASH);
    if trash.exists() {
        std::fs::remove_dir_all(&trash).with_context(|| format!("empty {}", trash.display()))?;
    }
    Ok(())
}

/// The cached scene of `kind`: the terrain from `tilegate sample-scene --seed 7` (UInt16, one
/// band), the imagery from `benches/peers/imagery_scene.py` (Debian's Python with GDAL's
/// bindings).
fn scene(c: &Config, kind: Scene) -> anyhow::Result<PathBuf> {
    let path = c.work.join(match kind {
        Scene::Terrain => format!("scene-{}.tif", c.size),
        Scene::Imagery => format!("imagery-{}.tif", c.size),
    });
    if !path.exists() {
        eprintln!(
            "fanout: generating {} (cached for later runs)",
            path.display()
        );
        let tmp = c.work.join("scene.tmp.tif");
        match kind {
            Scene::Terrain => {
                let mut cmd = tilegate(c, &c.work.join("scene-data"));
                cmd.args([
                    "sample-scene",
                    tmp.to_str().unwrap(),
                    "--size",
                    &c.size.to_string(),
                ])
                .args(["--seed", "7"]);
                run(&mut cmd)?;
            }
            Scene::Imagery => {
                crate::measure::imagery_scene(&tmp, c.size)?;
            }
        }
        std::fs::rename(&tmp, &path)?;
    }
    Ok(path)
}

fn reference(c: &Config, scene: &Path, prefix: &str) -> anyhow::Result<(Sample, Value)> {
    let out = fresh(c, &format!("{prefix}reference"))?.join("scene-cog.tif");
    let (s, _) = run(Command::new("gdal_translate")
        .args([
            "-q",
            "-of",
            "COG",
            "-co",
            "COMPRESS=DEFLATE",
            "-co",
            "NUM_THREADS=ALL_CPUS",
        ])
        .arg(scene)
        .arg(&out))?;
    Ok((s, json!({"bytes": std::fs::metadata(&out)?.len()})))
}

fn windows(c: &Config) -> Vec<(u32, u32, u32, u32)> {
    let n = c.size.div_ceil(c.window);
    (0..n)
        .flat_map(|r| (0..n).map(move |col| (r, col)))
        .map(|(r, col)| {
            let (x, y) = (col * c.window, r * c.window);
            (
                r,
                col,
                (c.size - x).min(c.window),
                (c.size - y).min(c.window),
            )
        })
        .collect()
}

fn peer_xargs(c: &Config, scene: &Path) -> anyhow::Result<(Sample, Value)> {
    let dir = fresh(c, "peer-tiles")?;
    let list: String = windows(c)
        .iter()
        .map(|&(r, col, w, h)| {
            format!(
                "-srcwin {} {} {w} {h} {} {}\n",
                col * c.window,
                r * c.window,
                scene.display(),
                dir.join(format!("{r:04}_{col:04}.tif")).display()
            )
        })
        .collect();
    let args = dir.join("args.txt");
    std::fs::write(&args, list)?;
    let (s, _) = run(Command::new("xargs")
        .args([
            "-a",
            args.to_str().unwrap(),
            "-P",
            &c.cores.to_string(),
            "-L",
            "1",
        ])
        .args([
            "gdal_translate",
            "-q",
            "-of",
            "COG",
            "-co",
            "COMPRESS=DEFLATE",
        ]))?;
    std::fs::remove_file(&args)?;
    Ok((s, Value::Null))
}

fn peer_mosaic(c: &Config) -> anyhow::Result<(Sample, Value)> {
    let tiles = c.work.join("peer-tiles");
    let out = fresh(c, "peer-mosaic")?;
    let script = format!(
        "gdalbuildvrt -q {vrt} {tiles}/*.tif && gdal_translate -q -of COG -co COMPRESS=DEFLATE \
         -co NUM_THREADS=ALL_CPUS {vrt} {cog}",
        vrt = out.join("mosaic.vrt").display(),
        tiles = tiles.display(),
        cog = out.join("scene-cog.tif").display()
    );
    let (s, _) = run(Command::new("sh").args(["-c", &script]))?;
    Ok((s, Value::Null))
}

/// A virtual environment with rasterio and rio-cogeo (their wheels bundle their own GDAL).
fn python_peer(c: &Config) -> anyhow::Result<PathBuf> {
    crate::measure::venv(
        &c.work.join("peer-venv"),
        "import rasterio, rio_cogeo",
        &["rasterio==1.4.4", "rio-cogeo==7.0.4"],
        "fanout",
    )
}

/// The rasterio peers: `writer` is `rio-cogeo` (`cog_translate` from a `MemoryFile`) or `cog`
/// (each window written straight through GDAL's COG driver).
fn peer_rasterio(
    c: &Config,
    scene: &Path,
    python: &Path,
    prefix: &str,
    writer: &str,
) -> anyhow::Result<(Sample, Value)> {
    let dir = fresh(c, &format!("{prefix}peer-tiles-{writer}"))?;
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("peers/rasterio_tiles.py");
    let (s, _) = run(Command::new(python)
        .arg(script)
        .arg(scene)
        .arg(&dir)
        .arg(c.window.to_string())
        .arg(c.cores.to_string())
        .arg(writer))?;
    Ok((s, Value::Null))
}

fn tilegate_run(
    c: &Config,
    scene: &Path,
    prefix: &str,
    tiles_only: bool,
) -> anyhow::Result<(Sample, Value)> {
    let data = fresh(
        c,
        &format!("{prefix}{}", if tiles_only { "tg-tiles" } else { "tg-run" }),
    )?;
    let mut cmd = tilegate(c, &data);
    cmd.args([
        "run",
        scene.to_str().unwrap(),
        "--window",
        &c.window.to_string(),
    ]);
    if tiles_only {
        cmd.arg("--no-assemble");
    }
    let (s, out) = run(&mut cmd)?;
    let doc: Value = serde_json::from_slice(&out)?;
    if doc["complete"] != true {
        bail!("tilegate run did not complete: {doc}");
    }
    Ok((
        s,
        json!({"elapsed_s": doc["elapsed_s"], "scene": doc.get("scene")}),
    ))
}

/// Assemble the tiles `tilegate_tiles` made in this round (a fresh data directory, so no
/// claim or scene exists yet).
fn tilegate_assemble(c: &Config, prefix: &str) -> anyhow::Result<(Sample, Value)> {
    let data = c.work.join(format!("{prefix}tg-tiles"));
    let (s, out) = run(tilegate(c, &data).arg("assemble"))?;
    let doc: Value = serde_json::from_slice(&out)?;
    if doc["outcome"] != "written" {
        bail!("assemble did not write the scene: {doc}");
    }
    Ok((
        s,
        json!({"build_s": doc["build_s"], "upload_s": doc["upload_s"], "scene_size": doc["scene_size"]}),
    ))
}

/// `tilegate work` over a freshly planned job: every window encoded once.
fn tilegate_work(c: &Config, scene: &Path) -> anyhow::Result<(Sample, Value)> {
    let data = fresh(c, "tg-clean")?;
    run(tilegate(c, &data).args([
        "plan",
        scene.to_str().unwrap(),
        "--window",
        &c.window.to_string(),
    ]))?;
    let (s, out) = run(tilegate(c, &data).args(["work", "--until-empty"]))?;
    let doc: Value = serde_json::from_slice(&out)?;
    Ok((
        s,
        json!({"handled": doc["handled"], "written": doc["written"]}),
    ))
}

/// `n` `tilegate work --until-empty` processes at once on one freshly planned data directory
/// (SQLite's queue and tables shared through its locks): every window encoded once.
fn tilegate_work_procs(c: &Config, scene: &Path, n: u32) -> anyhow::Result<(Sample, Value)> {
    let data = fresh(c, "tg-procs")?;
    let (_, out) = run(tilegate(c, &data).args([
        "plan",
        scene.to_str().unwrap(),
        "--window",
        &c.window.to_string(),
    ]))?;
    let plan: Value = serde_json::from_slice(&out)?;
    let job = plan["job_id"].as_str().context("job_id")?.to_owned();
    let mut cmds: Vec<Command> = (0..n)
        .map(|_| {
            let mut cmd = tilegate(c, &data);
            cmd.args(["work", "--until-empty"]);
            cmd
        })
        .collect();
    let started = now_millis();
    let (s, _) = run_all(&mut cmds)?;
    let (_, out) = run(tilegate(c, &data).args(["status", &job]))?;
    let doc: Value = serde_json::from_slice(&out)?;
    let rows = doc["manifest_rows"].as_f64().unwrap_or(f64::NAN);
    if doc["counters"]["tiles_written_total"].as_f64() != Some(rows) {
        bail!("{n} processes: tiles written and manifest rows differ: {doc}");
    }
    // When the last window was recorded: the work itself, without the processes' exit (each
    // waits for the queue to drain, the others' windows included, then for its last poll).
    let b = tilegate_embedded::open_data_dir(&data, 3)?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let last = rt
        .block_on(b.manifest.list_entries(&JobId::parse(&job)?))?
        .iter()
        .map(|e| e.row.recorded_at)
        .max()
        .unwrap_or(started);
    let last_row_s = (last - started) as f64 / 1e3;
    Ok((
        s,
        json!({"processes": n, "manifest_rows": rows, "last_row_s": last_row_s,
               "windows_per_s": rows / last_row_s}),
    ))
}

/// The cost of duplicate deliveries: `fraction` of the clean run's windows delivered again
/// (as SQS redelivers, after the originals) to a `tilegate work` over the same data. Its CPU
/// time against the clean run's is the extra that duplicates cost.
fn tilegate_duplicates(
    c: &Config,
    fraction: f64,
    rt: &tokio::runtime::Runtime,
) -> anyhow::Result<(Sample, Value)> {
    let data = c.work.join("tg-clean");
    let b = tilegate_embedded::open_data_dir(&data, 3)?;
    let job = rt
        .block_on(b.jobs.list_jobs(1))?
        .first()
        .context("the clean run's job")?
        .row
        .job_id
        .clone();
    rt.block_on(enqueue_again(&b, &job, fraction))?;
    let (s, out) = run(tilegate(c, &data).args(["work", "--until-empty"]))?;
    let doc: Value = serde_json::from_slice(&out)?;
    Ok((
        s,
        json!({"handled": doc["handled"], "written": doc["written"], "skipped": doc["skipped"],
               "already_present": doc["already_present"]}),
    ))
}

/// Enqueue every `1/fraction`-th window of `job` again, spread over the grid.
async fn enqueue_again(b: &Backends, job: &JobId, fraction: f64) -> anyhow::Result<()> {
    let row = b.jobs.get_job(job).await?.context("job row")?.row;
    let all: Vec<Window> = row.grid.windows().collect();
    let n = (all.len() as f64 * fraction).round() as usize;
    let bodies: Vec<String> = (0..n)
        .map(|i| all[i * all.len() / n])
        .map(|w| WindowMessage::for_job(&row, w).encode())
        .collect();
    b.queue.send_batch(&bodies).await?;
    Ok(())
}

fn tilegate_noop(c: &Config, scene: &Path) -> anyhow::Result<(Sample, Value)> {
    let data = fresh(c, "tg-noop")?;
    let window = c.window.to_string();
    run(tilegate(c, &data)
        .args(["plan", scene.to_str().unwrap(), "--recipe", "noop"])
        .args(["--window", &window]))?;
    let (s, out) = run(tilegate(c, &data).args(["work", "--until-empty"]))?;
    let doc: Value = serde_json::from_slice(&out)?;
    let handled = doc["handled"].as_f64().unwrap_or(f64::NAN);
    Ok((
        s,
        json!({"windows": handled, "ms_per_window_process": s.wall_s * 1e3 / handled,
               // The receive loop alone, without the process's start and stop.
               "ms_per_window_loop": doc["elapsed_s"].as_f64().unwrap_or(f64::NAN) * 1e3 / handled}),
    ))
}

fn tilegate_plan_many(c: &Config, scene: &Path) -> anyhow::Result<(Sample, Value)> {
    let data = fresh(c, "tg-plan-many")?;
    let (s, out) = run(tilegate(c, &data).args([
        "plan",
        scene.to_str().unwrap(),
        "--window",
        &c.plan_window.to_string(),
    ]))?;
    let doc: Value = serde_json::from_slice(&out)?;
    Ok((
        s,
        json!({"windows": doc["windows"], "timings": doc["timings"]}),
    ))
}

/// A job of the many-window plan with a manifest row for every window (made once, unmeasured).
fn prepare_manifest_count(
    c: &Config,
    scene: &Path,
    rt: &tokio::runtime::Runtime,
) -> anyhow::Result<(PathBuf, JobId)> {
    let data = fresh(c, "tg-count")?;
    let (_, out) = run(tilegate(c, &data).args([
        "plan",
        scene.to_str().unwrap(),
        "--window",
        &c.plan_window.to_string(),
        "--recipe",
        "noop",
    ]))?;
    let plan: Value = serde_json::from_slice(&out)?;
    let job = JobId::parse(plan["job_id"].as_str().context("job_id")?)?;
    let b = tilegate_embedded::open_data_dir(&data, 3)?;
    let row = rt.block_on(b.jobs.get_job(&job))?.context("job row")?.row;
    eprintln!(
        "fanout: writing {} manifest rows for the count",
        row.grid.len()
    );
    rt.block_on(async {
        let entries = row.grid.windows().map(|w| ManifestEntry {
            job_id: job.clone(),
            window: w,
            key: String::from(row.prefix.tile_key(&job, w)),
            size: 1,
            e_tag: ETag::new("\"x\""),
            origin: TileOrigin::Written,
            recorded_at: now_millis(),
            // What a worker records on a row (receive, worker, step times): the count must
            // stay fast with them.
            facts: if c.bare_rows {
                tilegate_core::table::WindowFacts::default()
            } else {
                tilegate_core::table::WindowFacts {
                    attempt: 1,
                    worker: "ip-10-0-12-34:123456".to_owned(),
                    encode_skipped: false,
                    wait_ms: Some(12_345),
                    read_ms: Some(35),
                    encode_ms: Some(120),
                    commit_ms: Some(8),
                }
            },
        });
        futures::stream::iter(entries)
            .map(|e| {
                let b = b.clone();
                async move { b.manifest.put_entry(&e).await }
            })
            .buffer_unordered(64)
            .collect::<Vec<_>>()
            .await
            .into_iter()
            .collect::<Result<Vec<_>, _>>()
    })?;
    Ok((data, job))
}

fn manifest_count(
    _c: &Config,
    (data, job): &(PathBuf, JobId),
    rt: &tokio::runtime::Runtime,
) -> anyhow::Result<(Sample, Value)> {
    // In-process: the count query itself, through the contract, on a freshly opened backend.
    let b = tilegate_embedded::open_data_dir(data, 3)?;
    let started = Instant::now();
    let n = rt.block_on(b.manifest.count_entries(job))?;
    let wall_s = started.elapsed().as_secs_f64();
    Ok((
        Sample {
            wall_s,
            cpu_s: wall_s,
            sys_s: 0.0,
            max_rss_mb: 0.0,
        },
        json!({"rows": n}),
    ))
}

use futures::StreamExt as _;

/// The median over rounds of `name`'s wall time divided by its partner's in the same round.
fn paired_ratio(r: &Results, name: &str, partner: &str) -> Option<f64> {
    let a = r.samples.get(name)?;
    let b = r.samples.get(partner)?;
    if name == partner || a.len() != b.len() {
        return None;
    }
    let ratios: Vec<f64> = a.iter().zip(b).map(|(x, y)| x.wall_s / y.wall_s).collect();
    Some(spread(&ratios).0)
}

/// The median of one figure of `name`'s samples.
fn median_of(r: &Results, name: &str, f: fn(&Sample) -> f64) -> Option<f64> {
    r.samples
        .get(name)
        .map(|s| spread(&s.iter().map(f).collect::<Vec<_>>()).0)
}

/// The results as a Markdown table and as JSON.
pub fn report(c: &Config, r: &Results) -> (String, Value) {
    let mut md = String::from(
        "| contender | what | wall, median (min–max) | paired ratio, median | CPU, median | of which system | peak RSS |\n\
         |---|---|---|---|---|---|---|\n",
    );
    let mut rows = Vec::new();
    for name in &r.order {
        let name = name.as_str();
        if let Some(why) = r.skipped.get(name) {
            md.push_str(&format!(
                "| {name} | {} | skipped: {why} | | | | |\n",
                describe(name, c)
            ));
            rows.push(json!({"name": name, "skipped": why}));
            continue;
        }
        let Some(s) = r.samples.get(name) else {
            continue;
        };
        let (med, min, max) = spread(&s.iter().map(|x| x.wall_s).collect::<Vec<_>>());
        let cpu = median_of(r, name, |x| x.cpu_s).unwrap_or(f64::NAN);
        let sys = median_of(r, name, |x| x.sys_s).unwrap_or(f64::NAN);
        let rss = s.iter().map(|x| x.max_rss_mb).fold(0.0, f64::max);
        let partner = partner(name);
        let paired = paired_ratio(r, name, &partner);
        let of_medians = median_of(r, &partner, |x| x.wall_s).map(|p| med / p);
        let wall = if med < 0.1 {
            format!("{:.2} ms ({:.2}–{:.2})", med * 1e3, min * 1e3, max * 1e3)
        } else {
            format!("{med:.2} s ({min:.2}–{max:.2})")
        };
        let ratio = match paired {
            Some(p) => format!("{p:.3}× {partner}"),
            None if name == partner => "1.000×".into(),
            None => "—".into(),
        };
        md.push_str(&format!(
            "| {name} | {} | {wall} | {ratio} | {cpu:.2} s | {sys:.2} s | {} |\n",
            describe(name, c),
            if rss > 0.0 {
                format!("{rss:.0} MB")
            } else {
                "—".into()
            }
        ));
        rows.push(json!({
            "name": name, "what": describe(name, c),
            "wall_s": {"median": med, "min": min, "max": max},
            "paired_with": partner, "paired_ratio_median": paired,
            "ratio_of_medians": of_medians,
            "cpu_s_median": cpu, "sys_s_median": sys, "max_rss_mb": rss,
            "samples": s, "note": r.notes.get(name),
        }));
    }
    let doc = json!({
        "rounds": c.rounds, "size": c.size, "window": c.window, "plan_window": c.plan_window,
        "cores": c.cores,
        "reference_wall_s": median_of(r, "reference", |x| x.wall_s),
        "contenders": rows,
        "derived": derived(r),
    });
    (md, doc)
}

/// The figures the targets are stated in.
fn derived(r: &Results) -> Value {
    let med = |name: &str, f: fn(&Sample) -> f64| median_of(r, name, f);
    let clean = med("tilegate_work_clean", |s| s.cpu_s);
    let dup = med("tilegate_work_duplicates", |s| s.cpu_s);
    json!({
        "duplicates_extra_cpu_percent": clean.zip(dup).map(|(c, d)| d / c * 100.0),
        "noop_ms_per_window_loop": r.notes.get("tilegate_noop_work").map(|n| n["ms_per_window_loop"].clone()),
        "noop_ms_per_window_process": r.notes.get("tilegate_noop_work").map(|n| n["ms_per_window_process"].clone()),
        "plan_many_s": med("tilegate_plan_many", |s| s.wall_s),
        "manifest_count_many_ms": med("tilegate_manifest_count_many", |s| s.wall_s).map(|s| s * 1e3),
        "peak_rss_mb": r.samples.iter().filter(|(k, _)| k.contains("tilegate")).flat_map(|(_, v)| v.iter().map(|s| s.max_rss_mb)).fold(0.0, f64::max),
        // Windows per second to the last manifest row (last round), by process count.
        "processes_windows_per_s": r.samples.keys().filter_map(|k| {
            let n = k.strip_prefix("tilegate_work_procs_")?;
            Some((n.to_owned(), r.notes.get(k)?["windows_per_s"].clone()))
        }).collect::<BTreeMap<_, _>>(),
    })
}

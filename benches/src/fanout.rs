//! The 400-window fan-out benchmark: tilegate against the tools a user would pick instead, run
//! interleaved (every contender once per round, rounds repeated) so that drift in the machine
//! hits all of them alike, each figure a ratio to the reference measured in the same run.

use crate::measure::{Sample, run, spread};
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
    /// Include the rasterio + rio-cogeo peer (installed into a virtual environment).
    pub python: bool,
    pub cores: usize,
    /// Run only this contender (`tilegate_manifest_count_many`, …).
    pub only: Option<String>,
    /// Write the counted manifest rows without their window facts, as rows were before they
    /// carried them (the A side of the count's comparison).
    pub bare_rows: bool,
}

/// The contenders, in the order each round runs them.
const ORDER: [&str; 12] = [
    "reference",
    "peer_tiles_xargs",
    "peer_tiles_rasterio",
    "peer_mosaic",
    "tilegate_run",
    "tilegate_tiles",
    "tilegate_assemble",
    "tilegate_work_clean",
    "tilegate_work_duplicates",
    "tilegate_noop_work",
    "tilegate_plan_many",
    "tilegate_manifest_count_many",
];

/// How each contender is described in the table.
fn describe(name: &str, c: &Config) -> String {
    let windows = (c.size.div_ceil(c.window)).pow(2);
    let many = (c.size.div_ceil(c.plan_window)).pow(2);
    match name {
        "reference" => "gdal_translate -of COG (DEFLATE, ALL_CPUS), whole scene".into(),
        "peer_tiles_xargs" => format!("{windows} × gdal_translate -srcwin, xargs -P {}", c.cores),
        "peer_tiles_rasterio" => format!("rasterio + rio-cogeo, multiprocessing.Pool({})", c.cores),
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
        _ => name.into(),
    }
}

/// Everything measured, by contender.
#[derive(Debug, Default)]
pub struct Results {
    pub samples: BTreeMap<&'static str, Vec<Sample>>,
    /// Extra figures reported by tilegate itself (last round), by contender.
    pub notes: BTreeMap<&'static str, Value>,
    pub skipped: BTreeMap<&'static str, String>,
}

pub fn run_benchmark(c: &Config) -> anyhow::Result<Results> {
    std::fs::create_dir_all(&c.work)?;
    let scene = scene(c)?;
    let venv = if c.python {
        python_peer(c).map_err(|e| e.to_string())
    } else {
        Err("not asked for (--python)".into())
    };
    let mut r = Results::default();
    if let Err(why) = &venv {
        r.skipped.insert("peer_tiles_rasterio", why.clone());
    }
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let count_job = prepare_manifest_count(c, &scene, &rt)?;
    for round in 1..=c.rounds {
        eprintln!("fanout: round {round} of {}", c.rounds);
        for name in ORDER {
            if r.skipped.contains_key(name) || c.only.as_deref().is_some_and(|o| o != name) {
                continue;
            }
            let started = Instant::now();
            let (sample, note) = match name {
                "reference" => reference(c, &scene)?,
                "peer_tiles_xargs" => peer_xargs(c, &scene)?,
                "peer_tiles_rasterio" => peer_rasterio(c, &scene, venv.as_ref().unwrap())?,
                "peer_mosaic" => peer_mosaic(c)?,
                "tilegate_run" => tilegate_run(c, &scene, false)?,
                "tilegate_tiles" => tilegate_run(c, &scene, true)?,
                "tilegate_assemble" => tilegate_assemble(c)?,
                "tilegate_work_clean" => tilegate_work(c, &scene)?,
                "tilegate_work_duplicates" => tilegate_duplicates(c, 0.3, &rt)?,
                "tilegate_noop_work" => tilegate_noop(c, &scene)?,
                "tilegate_plan_many" => tilegate_plan_many(c, &scene)?,
                "tilegate_manifest_count_many" => manifest_count(c, &count_job, &rt)?,
                _ => unreachable!(),
            };
            eprintln!(
                "  {name:<30} {:>8.3} s wall {:>8.3} s cpu {:>8.0} MB  ({:.1} s with setup)",
                sample.wall_s,
                sample.cpu_s,
                sample.max_rss_mb,
                started.elapsed().as_secs_f64()
            );
            r.samples.entry(name).or_default().push(sample);
            if !note.is_null() {
                r.notes.insert(name, note);
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

/// A fresh, empty directory under the work directory.
fn fresh(c: &Config, name: &str) -> anyhow::Result<PathBuf> {
    let d = c.work.join(name);
    if d.exists() {
        std::fs::remove_dir_all(&d).with_context(|| format!("clear {}", d.display()))?;
    }
    std::fs::create_dir_all(&d)?;
    Ok(d)
}

/// The cached sample scene: `tilegate sample-scene --size N --seed 7` (UInt16, one band).
fn scene(c: &Config) -> anyhow::Result<PathBuf> {
    let path = c.work.join(format!("scene-{}.tif", c.size));
    if !path.exists() {
        eprintln!(
            "fanout: generating {} (cached for later runs)",
            path.display()
        );
        let tmp = c.work.join("scene.tmp.tif");
        let mut cmd = tilegate(c, &c.work.join("scene-data"));
        cmd.args([
            "sample-scene",
            tmp.to_str().unwrap(),
            "--size",
            &c.size.to_string(),
        ])
        .args(["--seed", "7"]);
        run(&mut cmd)?;
        std::fs::rename(&tmp, &path)?;
    }
    Ok(path)
}

fn reference(c: &Config, scene: &Path) -> anyhow::Result<(Sample, Value)> {
    let out = fresh(c, "reference")?.join("scene-cog.tif");
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
    let venv = c.work.join("peer-venv");
    let python = venv.join("bin/python");
    let ok = |p: &Path| {
        Command::new(p)
            .args(["-c", "import rasterio, rio_cogeo"])
            .status()
            .is_ok_and(|s| s.success())
    };
    if !ok(&python) {
        eprintln!(
            "fanout: installing rasterio and rio-cogeo into {}",
            venv.display()
        );
        let st = Command::new("python3")
            .args(["-m", "venv"])
            .arg(&venv)
            .status()?;
        if !st.success() {
            bail!("python3 -m venv failed");
        }
        let st = Command::new(venv.join("bin/pip"))
            .args(["install", "-q", "rasterio==1.4.4", "rio-cogeo==7.0.4"])
            .status()?;
        if !st.success() || !ok(&python) {
            bail!("pip install rasterio rio-cogeo failed");
        }
    }
    Ok(python)
}

fn peer_rasterio(c: &Config, scene: &Path, python: &Path) -> anyhow::Result<(Sample, Value)> {
    let dir = fresh(c, "peer-tiles-rasterio")?;
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("peers/rasterio_tiles.py");
    let (s, _) = run(Command::new(python)
        .arg(script)
        .arg(scene)
        .arg(&dir)
        .arg(c.window.to_string())
        .arg(c.cores.to_string()))?;
    Ok((s, Value::Null))
}

fn tilegate_run(c: &Config, scene: &Path, tiles_only: bool) -> anyhow::Result<(Sample, Value)> {
    let data = fresh(c, if tiles_only { "tg-tiles" } else { "tg-run" })?;
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
fn tilegate_assemble(c: &Config) -> anyhow::Result<(Sample, Value)> {
    let data = c.work.join("tg-tiles");
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
            key: row.prefix.tile_key(&job, w),
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
            max_rss_mb: 0.0,
        },
        json!({"rows": n}),
    ))
}

use futures::StreamExt as _;

/// The results as a Markdown table and as JSON.
pub fn report(c: &Config, r: &Results) -> (String, Value) {
    let reference = r
        .samples
        .get("reference")
        .map(|s| spread(&s.iter().map(|x| x.wall_s).collect::<Vec<_>>()).0)
        .unwrap_or(f64::NAN);
    let mut md = String::from(
        "| contender | what | wall, median (min–max) | ratio to reference | CPU, median | peak RSS |\n\
         |---|---|---|---|---|---|\n",
    );
    let mut rows = Vec::new();
    for name in ORDER {
        if let Some(why) = r.skipped.get(name) {
            md.push_str(&format!(
                "| {name} | {} | skipped: {why} | | | |\n",
                describe(name, c)
            ));
            rows.push(json!({"name": name, "skipped": why}));
            continue;
        }
        let Some(s) = r.samples.get(name) else {
            continue;
        };
        let (med, min, max) = spread(&s.iter().map(|x| x.wall_s).collect::<Vec<_>>());
        let (cpu, _, _) = spread(&s.iter().map(|x| x.cpu_s).collect::<Vec<_>>());
        let rss = s.iter().map(|x| x.max_rss_mb).fold(0.0, f64::max);
        let wall = if med < 0.1 {
            format!("{:.2} ms ({:.2}–{:.2})", med * 1e3, min * 1e3, max * 1e3)
        } else {
            format!("{med:.2} s ({min:.2}–{max:.2})")
        };
        md.push_str(&format!(
            "| {name} | {} | {wall} | {:.3}× | {cpu:.2} s | {} |\n",
            describe(name, c),
            med / reference,
            if rss > 0.0 {
                format!("{rss:.0} MB")
            } else {
                "—".into()
            }
        ));
        rows.push(json!({
            "name": name, "what": describe(name, c),
            "wall_s": {"median": med, "min": min, "max": max},
            "ratio_to_reference": med / reference,
            "cpu_s_median": cpu, "max_rss_mb": rss,
            "samples": s, "note": r.notes.get(name),
        }));
    }
    let doc = json!({
        "rounds": c.rounds, "size": c.size, "window": c.window, "plan_window": c.plan_window,
        "cores": c.cores, "reference_wall_s": reference, "contenders": rows,
        "derived": derived(r),
    });
    (md, doc)
}

/// The figures the targets are stated in.
fn derived(r: &Results) -> Value {
    let med = |name: &str, f: fn(&Sample) -> f64| {
        r.samples
            .get(name)
            .map(|s| spread(&s.iter().map(f).collect::<Vec<_>>()).0)
    };
    let clean = med("tilegate_work_clean", |s| s.cpu_s);
    let dup = med("tilegate_work_duplicates", |s| s.cpu_s);
    json!({
        "duplicates_extra_cpu_percent": clean.zip(dup).map(|(c, d)| d / c * 100.0),
        "noop_ms_per_window_loop": r.notes.get("tilegate_noop_work").map(|n| n["ms_per_window_loop"].clone()),
        "noop_ms_per_window_process": r.notes.get("tilegate_noop_work").map(|n| n["ms_per_window_process"].clone()),
        "plan_many_s": med("tilegate_plan_many", |s| s.wall_s),
        "manifest_count_many_ms": med("tilegate_manifest_count_many", |s| s.wall_s).map(|s| s * 1e3),
        "peak_rss_mb": r.samples.iter().filter(|(k, _)| k.starts_with("tilegate")).flat_map(|(_, v)| v.iter().map(|s| s.max_rss_mb)).fold(0.0, f64::max),
    })
}

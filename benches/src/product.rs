//! The product benchmark: a per-pixel median composite of overlapping scenes on a UTM tile
//! grid, `tilegate product plan … --recipe composite --stat median` then `tilegate work
//! --assemble --until-empty`, against what a user writes instead with GDAL and NumPy
//! (`peers/product_median.py`: each scene `gdal.Warp`ed onto each tile, `numpy.nanmedian`).
//! Interleaved rounds (tilegate, then the peer), each tilegate figure a paired ratio; wall
//! time, CPU and peak resident memory (tilegate's: the larger of its two processes). After
//! the rounds, the last round's tiles are compared pixel by pixel (`peers/product_compare.py`,
//! not timed).

use crate::measure::{Sample, run, spread};
use anyhow::{Context, bail};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::process::Command;

/// What to run.
#[derive(Debug, Clone)]
pub struct Config {
    pub rounds: u32,
    /// Scenes composited.
    pub scenes: u32,
    /// Each scene's width and height in 10 m pixels.
    pub size: u32,
    /// The grid (`utm:SIZE@RES`).
    pub grid: String,
    /// Where the `tilegate` binary is.
    pub bin: PathBuf,
    /// Scratch and cache directory (the scenes are cached here).
    pub work: PathBuf,
}

/// Everything measured.
#[derive(Debug, Default)]
pub struct Results {
    pub tilegate: Vec<Sample>,
    pub peer: Vec<Sample>,
    /// Tiles planned, and their total pixels.
    pub tiles: usize,
    pub tile_pixels: u64,
    /// `product_compare.py`'s document.
    pub compare: Value,
}

fn peers() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("peers")
}

/// The cached scenes, made when missing.
fn scenes(c: &Config) -> anyhow::Result<Vec<PathBuf>> {
    let dir = c
        .work
        .join(format!("product-scenes-{}x{}", c.scenes, c.size));
    let all: Vec<PathBuf> = (1..=c.scenes)
        .map(|i| dir.join(format!("b{i}.tif")))
        .collect();
    if !all.iter().all(|p| p.exists()) {
        eprintln!(
            "product: writing {} scenes of {}² to {}",
            c.scenes,
            c.size,
            dir.display()
        );
        let status = Command::new("/usr/bin/python3")
            .arg(peers().join("product_scenes.py"))
            .arg(&dir)
            .arg(c.scenes.to_string())
            .arg(c.size.to_string())
            .status()?;
        if !status.success() {
            bail!("product_scenes.py failed: {status}");
        }
    }
    Ok(all)
}

/// One tilegate round in a fresh data directory: the plan report and the sample (wall and
/// CPU summed over plan and work, peak RSS the larger).
fn tilegate(c: &Config, data: &Path, list: &Path) -> anyhow::Result<(Value, Sample)> {
    if data.exists() {
        std::fs::remove_dir_all(data)?;
    }
    let tg = c.bin.join("tilegate");
    let (planned, out) = run(Command::new(&tg)
        .arg("--data")
        .arg(data)
        .args(["--json", "product", "plan", "bench", "--grid", &c.grid])
        .args(["--recipe", "composite", "--stat", "median", "--from"])
        .arg(list))?;
    let report: Value = serde_json::from_slice(&out).context("product plan's report")?;
    let (worked, _) = run(Command::new(&tg).arg("--data").arg(data).args([
        "work",
        "--assemble",
        "--until-empty",
    ]))?;
    let sample = Sample {
        wall_s: planned.wall_s + worked.wall_s,
        cpu_s: planned.cpu_s + worked.cpu_s,
        sys_s: planned.sys_s + worked.sys_s,
        max_rss_mb: planned.max_rss_mb.max(worked.max_rss_mb),
    };
    Ok((report, sample))
}

/// The peer's tiles document from tilegate's plan report: each tile's CRS, bounds and size.
fn tiles_doc(grid: &str, report: &Value) -> anyhow::Result<(Value, u64)> {
    let g = tilegate_core::product::UtmGrid::parse(grid)?;
    let side = (g.size / g.resolution).round() as u64;
    let mut doc = serde_json::Map::new();
    for t in report["tiles"].as_array().context("tiles")? {
        let code = t["tile"].as_str().context("tile")?;
        let tile = tilegate_core::product::GridTile::parse(code)?;
        let (col, row) = (f64::from(tile.col), f64::from(tile.row));
        doc.insert(
            code.to_owned(),
            json!({
                "epsg": tile.epsg(),
                "bounds": [col * g.size, row * g.size, (col + 1.0) * g.size, (row + 1.0) * g.size],
                "size": side,
            }),
        );
    }
    let pixels = doc.len() as u64 * side * side;
    Ok((Value::Object(doc), pixels))
}

pub fn run_benchmark(c: &Config) -> anyhow::Result<Results> {
    std::fs::create_dir_all(&c.work)?;
    let scenes = scenes(c)?;
    let list = c.work.join("product-scenes.txt");
    let text: Vec<String> = scenes.iter().map(|p| p.display().to_string()).collect();
    std::fs::write(&list, text.join("\n"))?;
    let data = c.work.join("product-tilegate");
    let peer_out = c.work.join("product-peer");
    let tiles_path = c.work.join("product-tiles.json");
    let mut r = Results::default();
    let mut last_report = Value::Null;
    for round in 1..=c.rounds {
        let (report, s) = tilegate(c, &data, &list)?;
        eprintln!(
            "product round {round}: tilegate {:.2} s, {:.0} MB",
            s.wall_s, s.max_rss_mb
        );
        r.tilegate.push(s);
        let (doc, pixels) = tiles_doc(&c.grid, &report)?;
        std::fs::write(&tiles_path, serde_json::to_vec(&doc)?)?;
        r.tiles = doc.as_object().map_or(0, serde_json::Map::len);
        r.tile_pixels = pixels;
        if peer_out.exists() {
            std::fs::remove_dir_all(&peer_out)?;
        }
        let (s, _) = run(Command::new("/usr/bin/python3")
            .arg(peers().join("product_median.py"))
            .arg(&tiles_path)
            .arg(&peer_out)
            .args(&scenes))?;
        eprintln!(
            "product round {round}: peer {:.2} s, {:.0} MB",
            s.wall_s, s.max_rss_mb
        );
        r.peer.push(s);
        last_report = report;
    }
    // The last round's tiles, pixel by pixel.
    let mut pairs = Vec::new();
    for t in last_report["tiles"].as_array().context("tiles")? {
        let code = t["tile"].as_str().context("tile")?;
        let job = t["job_id"].as_str().context("job_id")?;
        pairs.push(json!([
            data.join(format!("objects/tilegate/scenes/{job}.tif")),
            peer_out.join(format!("{code}.tif")),
        ]));
    }
    let pairs_path = c.work.join("product-pairs.json");
    std::fs::write(&pairs_path, serde_json::to_vec(&pairs)?)?;
    let out = Command::new("/usr/bin/python3")
        .arg(peers().join("product_compare.py"))
        .arg(&pairs_path)
        .output()?;
    if !out.status.success() {
        bail!(
            "product_compare.py failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    r.compare = serde_json::from_slice(&out.stdout)?;
    Ok(r)
}

fn median(xs: &[f64]) -> f64 {
    spread(xs).0
}

/// The Markdown table and the JSON document of the results.
pub fn report(c: &Config, r: &Results) -> (String, Value) {
    let of = |s: &[Sample], f: fn(&Sample) -> f64| median(&s.iter().map(f).collect::<Vec<_>>());
    let wall = |s: &[Sample]| of(s, |s| s.wall_s);
    let cpu = |s: &[Sample]| of(s, |s| s.cpu_s);
    let rss = |s: &[Sample]| of(s, |s| s.max_rss_mb);
    // Each round's tilegate figure over the peer's of the same round.
    let paired = |f: fn(&Sample) -> f64| {
        let ratios: Vec<f64> = (r.tilegate.iter().zip(&r.peer))
            .map(|(t, p)| f(t) / f(p))
            .collect();
        spread(&ratios)
    };
    let (ratio, lo, hi) = paired(|s| s.wall_s);
    let (rss_ratio, _, _) = paired(|s| s.max_rss_mb);
    let mut s = format!(
        "Median composite of {} scenes of {}² (10 m, UInt16) on `{}`: {} tiles, {:.0} Mpx; \
         {} round(s), medians\n\n",
        c.scenes,
        c.size,
        c.grid,
        r.tiles,
        r.tile_pixels as f64 / 1e6,
        r.tilegate.len()
    );
    s.push_str("| | wall | CPU | peak RSS |\n|---|---|---|---|\n");
    s.push_str(&format!(
        "| GDAL + NumPy (`product_median.py`) | {:.2} s | {:.2} s | {:.0} MB |\n",
        wall(&r.peer),
        cpu(&r.peer),
        rss(&r.peer)
    ));
    s.push_str(&format!(
        "| tilegate (`product plan` + `work --assemble`) | {:.2} s | {:.2} s | {:.0} MB |\n",
        wall(&r.tilegate),
        cpu(&r.tilegate),
        rss(&r.tilegate)
    ));
    s.push_str(&format!(
        "| tilegate ÷ peer (paired) | {ratio:.3} ({lo:.3}–{hi:.3}) | | {rss_ratio:.3} |\n\n\
         Pixels: {}",
        r.compare
    ));
    let doc = json!({
        "scenes": c.scenes, "size": c.size, "grid": c.grid, "tiles": r.tiles,
        "tile_pixels": r.tile_pixels,
        "tilegate": r.tilegate, "peer": r.peer,
        "wall_ratio": { "median": ratio, "min": lo, "max": hi },
        "rss_ratio": rss_ratio,
        "compare": r.compare,
    });
    (s, doc)
}

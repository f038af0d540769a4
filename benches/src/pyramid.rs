//! The web-pyramid benchmark: `tilegate run --pyramid WebMercatorQuad` against the two tools a
//! user would run instead — GDAL's `gdal2tiles.py` (z/x/y PNG tiles) and rio-pmtiles'
//! `rio pmtiles` (one PMTiles archive) — on the 3-band Byte imagery and on the terrain scaled
//! to Byte, in interleaved rounds (every contender once per round, outputs of the round
//! before moved aside first), each tilegate figure a paired ratio to each peer. After the
//! rounds, the last round's tiles are counted per zoom and compared pixel by pixel
//! (`peers/compare_tiles.py`, not timed).

use crate::measure::{Sample, run, spread};
use anyhow::{Context, bail};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

/// What to run.
#[derive(Debug, Clone)]
pub struct Config {
    pub rounds: u32,
    /// Scene width and height in pixels.
    pub size: u32,
    /// The zooms, inclusive.
    pub zooms: (u32, u32),
    /// Where the `tilegate` binary is.
    pub bin: PathBuf,
    /// Scratch and cache directory (the scenes are cached here, beside the fan-out's).
    pub work: PathBuf,
    /// The virtual environment of rio-pmtiles and the comparison (made when missing).
    pub venv: PathBuf,
    /// The peers' process count (`--processes`, `-j`).
    pub cores: usize,
}

/// The scenes measured, in the order each round runs them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Scene {
    /// `benches/peers/imagery_scene.py`: three Byte bands (RGB), UTM zone 33N, 10 m.
    Imagery,
    /// `tilegate sample-scene --seed 7` (UInt16 terrain) scaled to Byte over its range and
    /// repeated in three bands: PNG tiles are 8-bit and `rio pmtiles` needs three bands.
    Terrain,
}

impl Scene {
    fn name(self) -> &'static str {
        match self {
            Scene::Imagery => "imagery",
            Scene::Terrain => "terrain",
        }
    }
}

const SCENES: [Scene; 2] = [Scene::Imagery, Scene::Terrain];

/// The contenders of each scene, in the order a round runs them: tilegate between its two
/// peers, so each pair runs back to back.
const CONTENDERS: [&str; 3] = ["gdal2tiles", "tilegate", "rio_pmtiles"];

/// Everything measured.
#[derive(Debug, Default)]
pub struct Results {
    /// By (scene, contender), one sample per round.
    pub samples: BTreeMap<(Scene, &'static str), Vec<Sample>>,
    /// Tiles per zoom written by a z/x/y contender, by (scene, contender), per round.
    pub tiles: BTreeMap<(Scene, &'static str), Vec<BTreeMap<u32, u64>>>,
    /// tilegate's JSON document of the last round, by scene.
    pub tilegate_doc: BTreeMap<Scene, Value>,
    /// `compare_tiles.py`'s document, by scene.
    pub compare: BTreeMap<Scene, Value>,
    /// Why the rio-pmtiles peer did not run, when it did not.
    pub skipped: Option<String>,
}

pub fn run_benchmark(c: &Config) -> anyhow::Result<Results> {
    std::fs::create_dir_all(&c.work)?;
    let trash = c.work.join(TRASH);
    let r = measure(c);
    if trash.exists() {
        std::fs::remove_dir_all(&trash).with_context(|| format!("empty {}", trash.display()))?;
    }
    r
}

fn measure(c: &Config) -> anyhow::Result<Results> {
    let scenes: Vec<(Scene, PathBuf)> = SCENES
        .iter()
        .map(|&s| Ok((s, scene(c, s)?)))
        .collect::<anyhow::Result<_>>()?;
    let mut r = Results::default();
    let venv = venv(c).map_err(|e| format!("{e:#}"));
    if let Err(why) = &venv {
        r.skipped = Some(why.clone());
    }
    for round in 1..=c.rounds {
        eprintln!("pyramid: round {round} of {}", c.rounds);
        for (kind, src) in &scenes {
            for &name in &CONTENDERS {
                let (sample, tiles) = match name {
                    "gdal2tiles" => gdal2tiles(c, *kind, src)?,
                    "tilegate" => {
                        let (s, tiles, doc) = tilegate(c, *kind, src)?;
                        r.tilegate_doc.insert(*kind, doc);
                        (s, tiles)
                    }
                    "rio_pmtiles" => match &venv {
                        Ok(python) => rio_pmtiles(c, *kind, src, python)?,
                        Err(_) => continue,
                    },
                    _ => unreachable!(),
                };
                eprintln!(
                    "  {:<8} {name:<12} {:>8.2} s wall {:>8.2} s cpu {:>7.0} MB{}",
                    kind.name(),
                    sample.wall_s,
                    sample.cpu_s,
                    sample.max_rss_mb,
                    tiles
                        .as_ref()
                        .map(|t| format!("  {} tiles", t.values().sum::<u64>()))
                        .unwrap_or_default()
                );
                r.samples.entry((*kind, name)).or_default().push(sample);
                if let Some(t) = tiles {
                    r.tiles.entry((*kind, name)).or_default().push(t);
                }
            }
        }
    }
    // The last round's pyramids, compared (not timed).
    for (kind, _) in &scenes {
        let mut args = vec![
            format!("tilegate={}", tilegate_tiles(c, *kind)?.display()),
            format!(
                "gdal2tiles={}",
                c.work.join(out_name(*kind, "gdal2tiles")).display()
            ),
        ];
        if venv.is_ok() {
            let dir = c.work.join(out_name(*kind, "rio_pmtiles"));
            args.push(format!("rio_pmtiles={}", dir.join("out.pmtiles").display()));
        }
        args.push(format!(
            "tilegate_pmtiles={}",
            tilegate_archive(c, *kind)?.display()
        ));
        let python = match &venv {
            Ok(p) => p.clone(),
            Err(_) => {
                eprintln!("pyramid: no virtual environment, no pixel comparison");
                continue;
            }
        };
        eprintln!("pyramid: comparing the {} pyramids' tiles", kind.name());
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("peers/compare_tiles.py");
        let (_, out) = run(Command::new(python).arg(script).args(&args))?;
        r.compare.insert(*kind, serde_json::from_slice(&out)?);
    }
    Ok(r)
}

/// Where [`fresh`] moves the outputs of the round before.
const TRASH: &str = "pyramid-trash";

fn out_name(kind: Scene, contender: &str) -> String {
    format!("pyramid-{}-{contender}", kind.name())
}

/// A fresh, empty directory for `contender`'s output on `kind`. The round before's is moved
/// aside (emptied when the benchmark ends), so that no contender is billed for deleting
/// another's thousands of files, nor for allocating inodes among ones freed a moment ago.
fn fresh(c: &Config, kind: Scene, contender: &str) -> anyhow::Result<PathBuf> {
    let name = out_name(kind, contender);
    let d = c.work.join(&name);
    if d.exists() {
        let trash = c.work.join(TRASH);
        std::fs::create_dir_all(&trash)?;
        static ASIDE: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let n = ASIDE.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        std::fs::rename(&d, trash.join(format!("{name}-{n}")))
            .with_context(|| format!("move {} aside", d.display()))?;
    }
    std::fs::create_dir_all(&d)?;
    Ok(d)
}

/// The cached scene of `kind`. The imagery and the UInt16 terrain are the fan-out's (same
/// paths, same generators); the terrain's Byte copy is made from it with `gdal_translate`.
fn scene(c: &Config, kind: Scene) -> anyhow::Result<PathBuf> {
    let imagery = c.work.join(format!("imagery-{}.tif", c.size));
    let terrain = c.work.join(format!("scene-{}.tif", c.size));
    let tmp = c.work.join("pyramid-scene.tmp.tif");
    match kind {
        Scene::Imagery if !imagery.exists() => {
            eprintln!("pyramid: generating {} (cached)", imagery.display());
            crate::measure::imagery_scene(&tmp, c.size)?;
            std::fs::rename(&tmp, &imagery)?;
        }
        Scene::Imagery => {}
        Scene::Terrain => {
            let byte = c.work.join(format!("terrain-byte-{}.tif", c.size));
            if byte.exists() {
                return Ok(byte);
            }
            if !terrain.exists() {
                eprintln!("pyramid: generating {} (cached)", terrain.display());
                run(Command::new(c.bin.join("tilegate"))
                    .arg("--data")
                    .arg(c.work.join("scene-data"))
                    .args(["--json", "sample-scene"])
                    .arg(&tmp)
                    .args(["--size", &c.size.to_string(), "--seed", "7"]))?;
                std::fs::rename(&tmp, &terrain)?;
            }
            eprintln!("pyramid: scaling {} to Byte (cached)", terrain.display());
            run(Command::new("gdal_translate")
                .args([
                    "-q", "-ot", "Byte", "-scale", "-b", "1", "-b", "1", "-b", "1",
                ])
                .args(["-colorinterp", "red,green,blue"])
                .args([
                    "-co",
                    "TILED=YES",
                    "-co",
                    "BLOCKXSIZE=512",
                    "-co",
                    "BLOCKYSIZE=512",
                ])
                .args(["-co", "COMPRESS=DEFLATE", "-co", "PHOTOMETRIC=RGB"])
                .arg(&terrain)
                .arg(&tmp))?;
            std::fs::rename(&tmp, &byte)?;
            return Ok(byte);
        }
    }
    Ok(imagery)
}

/// A virtual environment with rasterio, rio-pmtiles and pmtiles (the archive reader of the
/// comparison), pinned.
fn venv(c: &Config) -> anyhow::Result<PathBuf> {
    let check = "import importlib.metadata as m, sys\n\
                 sys.exit(0 if [m.version(p) for p in ('rasterio', 'rio-pmtiles', 'pmtiles')] \
                 == ['1.4.4', '1.2.2', '3.8.1'] else 1)";
    crate::measure::venv(
        &c.venv,
        check,
        &["rasterio==1.4.4", "rio-pmtiles==1.2.2", "pmtiles==3.8.1"],
        "pyramid",
    )
}

fn zooms(c: &Config, sep: &str) -> String {
    format!("{}{sep}{}", c.zooms.0, c.zooms.1)
}

/// Tiles per zoom under a `z/x/y.png` directory.
fn count_tiles(dir: &Path) -> anyhow::Result<BTreeMap<u32, u64>> {
    let mut per = BTreeMap::new();
    for z in std::fs::read_dir(dir)? {
        let z = z?;
        let Some(zoom) = z.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        let mut n = 0;
        for x in std::fs::read_dir(z.path())? {
            let x = x?;
            if x.file_type()?.is_dir() {
                n += std::fs::read_dir(x.path())?
                    .filter(|e| {
                        e.as_ref()
                            .is_ok_and(|e| e.path().extension().is_some_and(|x| x == "png"))
                    })
                    .count() as u64;
            }
        }
        per.insert(zoom, n);
    }
    Ok(per)
}

/// `gdal2tiles.py --xyz -r average -w none --exclude`: GDAL 3.6 writes a tile for every tile
/// position of the source's bounding box, fully transparent ones included, unless
/// `--exclude`; tilegate and rio-pmtiles write none.
fn gdal2tiles(
    c: &Config,
    kind: Scene,
    src: &Path,
) -> anyhow::Result<(Sample, Option<BTreeMap<u32, u64>>)> {
    let out = fresh(c, kind, "gdal2tiles")?;
    let (s, _) = run(Command::new("gdal2tiles.py")
        .args([
            "--xyz",
            &format!("--processes={}", c.cores),
            "-r",
            "average",
        ])
        .args(["-z", &zooms(c, "-"), "-w", "none", "--exclude", "-q"])
        .arg(src)
        .arg(&out))?;
    Ok((s, Some(count_tiles(&out)?)))
}

/// `rio pmtiles --tile-size 256 --rgba`: 512-pixel tiles are its default, and without `--rgba`
/// its PNG tiles are RGB with nodata 0 (a `tRNS` chunk), so that every black pixel of the
/// scene (the terrain's lowest) would be transparent too; with it they have an alpha band, as
/// gdal2tiles' and tilegate's do.
fn rio_pmtiles(
    c: &Config,
    kind: Scene,
    src: &Path,
    python: &Path,
) -> anyhow::Result<(Sample, Option<BTreeMap<u32, u64>>)> {
    let out = fresh(c, kind, "rio_pmtiles")?.join("out.pmtiles");
    let rio = python.with_file_name("rio");
    let (s, _) = run(Command::new(rio)
        .arg("pmtiles")
        .arg(src)
        .arg(&out)
        .args(["--zoom-levels", &zooms(c, "..")])
        .args(["-j", &c.cores.to_string(), "--resampling", "average"])
        .args([
            "--format",
            "PNG",
            "--tile-size",
            "256",
            "--rgba",
            "--silent",
        ]))?;
    Ok((s, None))
}

/// A contender's measurement, its tiles per zoom where it says them, and its JSON document.
type Measured = (Sample, Option<BTreeMap<u32, u64>>, Value);

/// `tilegate run --pyramid WebMercatorQuad --layout both` into a fresh data directory.
fn tilegate(c: &Config, kind: Scene, src: &Path) -> anyhow::Result<Measured> {
    let data = fresh(c, kind, "tilegate")?;
    let (s, out) = run(Command::new(c.bin.join("tilegate"))
        .arg("--data")
        .arg(&data)
        .args(["--json", "run"])
        .arg(src)
        .args(["--pyramid", "WebMercatorQuad", "--zoom", &zooms(c, "..")])
        .args(["--warp-resampling", "average", "--layout", "both"]))?;
    let doc: Value = serde_json::from_slice(&out).context("tilegate run's JSON")?;
    if doc.get("complete").is_some_and(|v| v != true) {
        bail!("tilegate run did not complete: {doc}");
    }
    let tiles = count_tiles(&tilegate_tiles(c, kind)?)?;
    Ok((s, Some(tiles), doc))
}

/// The job's directory of the last tilegate run on `kind`.
fn tilegate_job(c: &Config, kind: Scene) -> anyhow::Result<PathBuf> {
    let dir = c
        .work
        .join(out_name(kind, "tilegate"))
        .join("objects/tilegate/pyramids");
    for e in std::fs::read_dir(&dir).with_context(|| format!("read {}", dir.display()))? {
        let p = e?.path();
        if p.is_dir() {
            return Ok(p);
        }
    }
    bail!("no pyramid under {}", dir.display())
}

fn tilegate_tiles(c: &Config, kind: Scene) -> anyhow::Result<PathBuf> {
    tilegate_job(c, kind)
}

fn tilegate_archive(c: &Config, kind: Scene) -> anyhow::Result<PathBuf> {
    Ok(tilegate_job(c, kind)?.with_extension("pmtiles"))
}

/// The median over rounds of tilegate's wall time divided by `peer`'s in the same round.
fn paired_ratio(r: &Results, kind: Scene, peer: &str) -> Option<f64> {
    let a = r.samples.get(&(kind, "tilegate"))?;
    let b = r.samples.get(&(kind, peer))?;
    if a.len() != b.len() {
        return None;
    }
    let ratios: Vec<f64> = a.iter().zip(b).map(|(x, y)| x.wall_s / y.wall_s).collect();
    Some(spread(&ratios).0)
}

/// Each tool's tiles per zoom (the comparison's count, from the last round's output).
fn per_zoom(r: &Results, kind: Scene, name: &str) -> Option<BTreeMap<u32, u64>> {
    if let Some(doc) = r.compare.get(&kind) {
        let z = doc["pyramids"][name]["per_zoom"].as_object()?;
        return Some(
            z.iter()
                .filter_map(|(k, v)| Some((k.parse().ok()?, v.as_u64()?)))
                .collect(),
        );
    }
    r.tiles.get(&(kind, name))?.last().cloned()
}

fn describe(name: &str, c: &Config) -> String {
    match name {
        "gdal2tiles" => format!(
            "gdal2tiles.py --xyz --processes={} -r average -z {} -w none --exclude",
            c.cores,
            zooms(c, "-")
        ),
        "rio_pmtiles" => format!(
            "rio pmtiles --zoom-levels {} -j {} --resampling average --format PNG \
             --tile-size 256 --rgba",
            zooms(c, ".."),
            c.cores
        ),
        _ => format!(
            "tilegate run --pyramid WebMercatorQuad --zoom {} --warp-resampling average \
             --layout both",
            zooms(c, "..")
        ),
    }
}

/// The results as Markdown tables and as JSON.
pub fn report(c: &Config, r: &Results) -> (String, Value) {
    let zs: Vec<u32> = (c.zooms.0..=c.zooms.1).collect();
    let mut md = format!(
        "Rounds: {}, scenes {size}² (UTM 33N, 10 m), zooms {}, {} cores.\n\n\
         | scene | contender | wall, median (min–max) | tilegate / this, paired median | CPU, median | peak RSS | tiles |\n\
         |---|---|---|---|---|---|---|\n",
        c.rounds,
        zooms(c, "–"),
        c.cores,
        size = c.size,
    );
    let mut rows = Vec::new();
    for kind in SCENES {
        for name in CONTENDERS {
            let Some(s) = r.samples.get(&(kind, name)) else {
                if let (true, Some(why)) = (name == "rio_pmtiles", &r.skipped) {
                    md.push_str(&format!(
                        "| {} | {name} | skipped: {why} | | | | |\n",
                        kind.name()
                    ));
                }
                continue;
            };
            let (med, min, max) = spread(&s.iter().map(|x| x.wall_s).collect::<Vec<_>>());
            let cpu = spread(&s.iter().map(|x| x.cpu_s).collect::<Vec<_>>()).0;
            let rss = s.iter().map(|x| x.max_rss_mb).fold(0.0, f64::max);
            let ratio = if name == "tilegate" {
                None
            } else {
                paired_ratio(r, kind, name)
            };
            let tiles = per_zoom(r, kind, name);
            let total = tiles.as_ref().map(|t| t.values().sum::<u64>());
            md.push_str(&format!(
                "| {} | {name} | {med:.2} s ({min:.2}–{max:.2}) | {} | {cpu:.2} s | {rss:.0} MB | {} |\n",
                kind.name(),
                ratio.map_or("—".into(), |x| format!("{x:.3}×")),
                total.map_or("—".into(), |t| t.to_string()),
            ));
            rows.push(json!({
                "scene": kind.name(), "name": name, "what": describe(name, c),
                "wall_s": {"median": med, "min": min, "max": max},
                "tilegate_over_this_paired_median": ratio,
                "cpu_s_median": cpu, "max_rss_mb": rss,
                "tiles": total, "tiles_per_zoom": tiles,
                "tiles_per_zoom_per_round": r.tiles.get(&(kind, name)),
                "samples": s,
            }));
        }
    }
    md.push_str("\nTiles per zoom:\n\n| scene | contender |");
    for z in &zs {
        md.push_str(&format!(" z{z} |"));
    }
    md.push_str(" total |\n|---|---|");
    md.push_str(&"---|".repeat(zs.len() + 1));
    md.push('\n');
    for kind in SCENES {
        for name in CONTENDERS.iter().chain(&["tilegate_pmtiles"]) {
            let Some(t) = per_zoom(r, kind, name) else {
                continue;
            };
            md.push_str(&format!("| {} | {name} |", kind.name()));
            for z in &zs {
                md.push_str(&format!(" {} |", t.get(z).copied().unwrap_or(0)));
            }
            md.push_str(&format!(" {} |\n", t.values().sum::<u64>()));
        }
    }
    md.push_str(
        "\nPixels compared (tiles in both; identical: equal RGBA after decoding; MAD: mean \
         absolute difference of R, G, B over pixels valid in both; validity differs: pixels \
         valid in one only):\n\n\
         | scene | pair | zoom | tiles in both | only in a / b | identical | MAD | validity differs |\n\
         |---|---|---|---|---|---|---|---|\n",
    );
    for kind in SCENES {
        let Some(doc) = r.compare.get(&kind) else {
            continue;
        };
        for pair in doc["pairs"].as_array().into_iter().flatten() {
            let (a, b) = (
                pair["a"].as_str().unwrap_or(""),
                pair["b"].as_str().unwrap_or(""),
            );
            let Some(zs) = pair["per_zoom"].as_object() else {
                continue;
            };
            // By zoom, then over all zooms; only the latter for two forms of one pyramid.
            let mut keys: Vec<&String> = zs
                .keys()
                .filter(|z| *z == "all" || !b.starts_with(&format!("{a}_")))
                .collect();
            keys.sort_by_key(|z| z.parse::<u32>().unwrap_or(u32::MAX));
            for (z, p) in keys.into_iter().map(|z| (z, &zs[z])) {
                md.push_str(&format!(
                    "| {} | {a} / {b} | {z} | {} | {} / {} | {} | {} | {} |\n",
                    kind.name(),
                    p["in_both"],
                    p[format!("only_{a}")],
                    p[format!("only_{b}")],
                    p["identical_fraction"]
                        .as_f64()
                        .map_or("—".into(), |f| format!("{:.1} %", f * 100.0)),
                    p["mean_abs_diff_rgb"]
                        .as_f64()
                        .map_or("—".into(), |m| format!("{m:.3}")),
                    p["pixels_validity_differs"],
                ));
            }
        }
    }
    let doc = json!({
        "rounds": c.rounds, "size": c.size, "zooms": [c.zooms.0, c.zooms.1], "cores": c.cores,
        "contenders": rows,
        "tilegate_last_round": r.tilegate_doc.iter().map(|(k, v)| (k.name(), v)).collect::<BTreeMap<_, _>>(),
        "compare": r.compare.iter().map(|(k, v)| (k.name(), v)).collect::<BTreeMap<_, _>>(),
        "rio_pmtiles_skipped": r.skipped,
    });
    (md, doc)
}

/// `MIN..MAX` as a pair of zooms.
pub fn parse_zooms(s: &str) -> anyhow::Result<(u32, u32)> {
    let (a, b) = s.split_once("..").context("zooms: MIN..MAX")?;
    let (a, b) = (a.trim().parse()?, b.trim().parse()?);
    if a > b {
        bail!("zooms: {a} > {b}");
    }
    Ok((a, b))
}

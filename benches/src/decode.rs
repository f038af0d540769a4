//! Decode amplification: how many bytes of the source a job's window reads pull through GDAL,
//! against the source's size. A strip-organised source (strips of a few full-width rows) and
//! a source tiled in 256-pixel blocks are both read by windows that do not line up with their
//! blocks; without a block cache, every window would decode every strip it touches across the
//! whole scene width.
//!
//! Measured in-process: every window is encoded by the workers' encoder
//! (`tilegate_cog::encode_windows_parallel`: rayon over the row-major window list, one dataset
//! handle per thread, GDAL's block cache) and the source bytes read are the process's `rchar`
//! over the encoding (`/proc/self/io`: bytes returned by read syscalls; the encoder's own
//! output goes to `/vsimem/`, which makes none). GDAL decodes a block each time it reads it, so
//! bytes read ÷ source size is the decode amplification, and times a window's raw size the
//! bytes decoded per window.

use anyhow::Context as _;
use serde_json::json;
use std::path::Path;
use std::process::Command;
use tilegate_core::Grid;
use tilegate_core::recipe::{Compression, Operation, Recipe};

fn rchar() -> anyhow::Result<u64> {
    let io = std::fs::read_to_string("/proc/self/io").context("read /proc/self/io")?;
    io.lines()
        .find_map(|l| l.strip_prefix("rchar: "))
        .context("no rchar in /proc/self/io")?
        .trim()
        .parse()
        .context("parse rchar")
}

/// How the windows are handed to the encoder threads.
#[derive(Clone, Copy)]
enum Order {
    /// rayon over the row-major list: each thread takes long contiguous runs.
    Contiguous,
    /// Thread `t` of `n` takes windows `t`, `t + n`, … — neighbours on different threads at
    /// once, as a queue hands them out.
    Interleaved,
}

impl Order {
    fn name(self) -> &'static str {
        match self {
            Self::Contiguous => "contiguous",
            Self::Interleaved => "interleaved",
        }
    }
}

/// One layout's figures.
struct Figures {
    layout: &'static str,
    order: Order,
    source_bytes: u64,
    read_bytes: u64,
    elapsed_s: f64,
    windows: u64,
    window_raw_bytes: u64,
}

fn measure(
    layout: &'static str,
    order: Order,
    path: &Path,
    window: u32,
) -> anyhow::Result<Figures> {
    let p = path.to_str().context("utf-8 path")?;
    let meta = tilegate_cog::probe(p)?;
    let grid = Grid::new(meta.width, meta.height, window)?;
    let recipe = Recipe {
        operation: Operation::Copy { bands: None },
        compression: Compression::Deflate,
        window,
    };
    let reqs: Vec<_> = grid
        .windows()
        .map(|w| tilegate_cog::EncodeRequest {
            path: p.to_owned(),
            cache_key: format!("decode-{layout}"),
            scene: meta.clone(),
            recipe: recipe.clone(),
            rect: grid.rect(w).expect("window in grid"),
        })
        .collect();
    let before = rchar()?;
    let started = std::time::Instant::now();
    match order {
        Order::Contiguous => {
            for r in tilegate_cog::encode_windows_parallel(&reqs) {
                r?;
            }
        }
        Order::Interleaved => {
            let n = std::thread::available_parallelism().map_or(2, |n| n.get());
            std::thread::scope(|s| -> anyhow::Result<()> {
                let handles: Vec<_> = (0..n)
                    .map(|t| {
                        let reqs = &reqs;
                        s.spawn(move || -> anyhow::Result<()> {
                            // The thread's own handles close when it ends; clearing here would
                            // also drop the process's shared ones under the other threads.
                            for r in reqs.iter().skip(t).step_by(n) {
                                tilegate_cog::encode_window(r)?;
                            }
                            Ok(())
                        })
                    })
                    .collect();
                for h in handles {
                    h.join().expect("encoder thread")?;
                }
                Ok(())
            })?;
        }
    }
    let read_bytes = rchar()? - before;
    let elapsed_s = started.elapsed().as_secs_f64();
    let sample_bytes = tilegate_cog::Dtype::from_name(&meta.dtype).map_or(0, |d| d.size()) as u64;
    Ok(Figures {
        layout,
        order,
        source_bytes: std::fs::metadata(path)?.len(),
        read_bytes,
        elapsed_s,
        windows: grid.len(),
        window_raw_bytes: u64::from(window)
            * u64::from(window)
            * u64::from(meta.bands)
            * sample_bytes,
    })
}

/// Close the sources every rayon thread holds open.
fn rayon_clear() {
    rayon::broadcast(|_| tilegate_cog::clear_thread_cache());
}

pub fn run(size: u32, window: u32, work: &Path, json: bool) -> anyhow::Result<()> {
    std::fs::create_dir_all(work)?;
    let base = work.join(format!("decode-scene-{size}.tif"));
    if !base.exists() {
        tilegate_cog::sample_scene(
            &base,
            &tilegate_cog::SampleOptions {
                width: size,
                height: size,
                bands: 1,
                dtype: "UInt16".into(),
                nodata: None,
                seed: 1,
            },
        )?;
    }
    let mut rows = Vec::new();
    for (layout, options) in [
        (
            "strips",
            &["-co", "BLOCKYSIZE=4", "-co", "COMPRESS=DEFLATE"][..],
        ),
        (
            "tiles-256",
            &[
                "-co",
                "TILED=YES",
                "-co",
                "BLOCKXSIZE=256",
                "-co",
                "BLOCKYSIZE=256",
                "-co",
                "COMPRESS=DEFLATE",
            ][..],
        ),
    ] {
        let path = work.join(format!("decode-{layout}-{size}.tif"));
        if !path.exists() {
            let st = Command::new("gdal_translate")
                .args(["-q"])
                .args(options)
                .arg(&base)
                .arg(&path)
                .status()
                .context("run gdal_translate")?;
            anyhow::ensure!(st.success(), "gdal_translate {layout} failed");
        }
        for order in [Order::Contiguous, Order::Interleaved] {
            // Fresh handles (and so empty block caches) on every rayon thread.
            rayon_clear();
            rows.push(measure(layout, order, &path, window)?);
        }
    }
    let docs: Vec<_> = rows
        .iter()
        .map(|f| {
            let amplification = f.read_bytes as f64 / f.source_bytes as f64;
            json!({
                "layout": f.layout,
                "order": f.order.name(),
                "windows": f.windows,
                "source_bytes": f.source_bytes,
                "source_bytes_read": f.read_bytes,
                "read_per_window_bytes": f.read_bytes / f.windows.max(1),
                "share_per_window_bytes": f.source_bytes / f.windows.max(1),
                "decode_amplification": amplification,
                "encode_s": f.elapsed_s,
                "decoded_per_window_bytes": (amplification * f.window_raw_bytes as f64) as u64,
                "window_raw_bytes": f.window_raw_bytes,
            })
        })
        .collect();
    if json {
        println!("{}", serde_json::to_string_pretty(&docs)?);
    } else {
        println!(
            "| source layout | window order | windows | source bytes | read | read per window | decoded per window (est.) | window size (raw) | ratio | encode s |"
        );
        println!("|---|---|---|---|---|---|---|---|---|---|");
        for d in &docs {
            println!(
                "| {} | {} | {} | {} | {} | {} | {} | {} | {:.2}× | {:.2} |",
                d["layout"].as_str().unwrap_or(""),
                d["order"].as_str().unwrap_or(""),
                d["windows"],
                d["source_bytes"],
                d["source_bytes_read"],
                d["read_per_window_bytes"],
                d["decoded_per_window_bytes"],
                d["window_raw_bytes"],
                d["decode_amplification"].as_f64().unwrap_or(0.0),
                d["encode_s"].as_f64().unwrap_or(0.0)
            );
        }
    }
    Ok(())
}

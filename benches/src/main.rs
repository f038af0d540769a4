//! tilegate's benchmarks. `tilegate-benches fanout` measures the 400-window fan-out against
//! the tools a user would pick instead (BENCHMARKS.md has the latest table and how to read
//! it); `tilegate-benches decode` measures how many source bytes window reads decode on
//! sources whose blocks do not line up with the windows; `tilegate-benches ledger` measures GC
//! and reconciliation over a large ledger; the criterion micro-benchmarks of the
//! hot paths are in `benches/hot_paths.rs`.

mod decode;
mod fanout;
mod ledger;
mod measure;

use clap::{Parser, Subcommand};
use std::path::PathBuf;

#[derive(Debug, Parser)]
#[command(name = "tilegate-benches")]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Debug, Subcommand)]
enum Cmd {
    /// The fan-out benchmark: reference gdal_translate, peer tilers and mosaic, and tilegate's
    /// end to end run, stages, duplicates, orchestration overhead and many-window plan, in
    /// interleaved rounds. Prints a Markdown table (or JSON) with ratios to the reference.
    Fanout {
        /// Rounds (each runs every contender once, in the same order).
        #[arg(long, default_value_t = 3)]
        rounds: u32,
        /// Scene width and height in pixels.
        #[arg(long, default_value_t = 10240)]
        size: u32,
        /// Window size (400 windows on the default scene).
        #[arg(long, default_value_t = 512)]
        window: u32,
        /// Window size of the many-window plan (102,400 windows on the default scene).
        #[arg(long, default_value_t = 32)]
        plan_window: u32,
        /// Directory holding the `tilegate` binary [default: this binary's directory].
        #[arg(long)]
        bin: Option<PathBuf>,
        /// Scratch and cache directory (the sample scene is cached here).
        #[arg(long, default_value = ".ci-cache/bench")]
        work: PathBuf,
        /// Skip the rasterio + rio-cogeo peer (it needs a virtual environment from PyPI).
        #[arg(long)]
        no_python: bool,
        /// A seconds-long configuration for CI: a 1024² scene, one round, no Python peer.
        #[arg(long)]
        smoke: bool,
        /// Print the results as JSON instead of a table.
        #[arg(long)]
        json: bool,
        /// Run only this contender (e.g. `tilegate_manifest_count_many`).
        #[arg(long)]
        only: Option<String>,
        /// Count manifest rows written without window facts (rows as they were before they
        /// carried them), to compare the count's cost on one machine.
        #[arg(long)]
        bare_manifest_rows: bool,
    },
    /// Source bytes read (and so decoded) per window, against each window's share of the
    /// source, on a strip-organised and a 256-pixel-block copy of the benchmark scene: every
    /// window encoded in-process by the workers' encoder on all cores, in queue order.
    Decode {
        /// Scene width and height in pixels.
        #[arg(long, default_value_t = 10240)]
        size: u32,
        /// Window size.
        #[arg(long, default_value_t = 512)]
        window: u32,
        /// Scratch and cache directory.
        #[arg(long, default_value = ".ci-cache/bench")]
        work: PathBuf,
        /// Print the results as JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// GC (mark + sweep) and reconcile over one job's ledger on the embedded backend:
    /// `attempts` attempts of each of `windows` windows, all but the last of each retired and
    /// due. Prints rows per second.
    Ledger {
        #[arg(long, default_value_t = 40_000)]
        windows: u32,
        #[arg(long, default_value_t = 3)]
        attempts: u32,
        /// Scratch directory.
        #[arg(long, default_value = ".ci-cache/bench")]
        work: PathBuf,
        /// Print the results as JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
}

fn main() -> anyhow::Result<()> {
    let command = Cli::parse().command;
    if let Cmd::Ledger {
        windows,
        attempts,
        work,
        json,
    } = command
    {
        return ledger::run(windows, attempts, &work, json);
    }
    if let Cmd::Decode {
        size,
        window,
        work,
        json,
    } = command
    {
        return decode::run(size, window, &work, json);
    }
    let Cmd::Fanout {
        rounds,
        size,
        window,
        plan_window,
        bin,
        work,
        no_python,
        smoke,
        json,
        only,
        bare_manifest_rows,
    } = command
    else {
        unreachable!("decode and ledger returned above")
    };
    let bin = match bin {
        Some(b) => b,
        None => std::env::current_exe()?
            .parent()
            .map(PathBuf::from)
            .unwrap_or_default(),
    };
    let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
    let cfg = if smoke {
        fanout::Config {
            rounds: 1,
            size: 1024,
            window: 256,
            plan_window: 16,
            bin,
            work: work.join("smoke"),
            python: false,
            cores,
            only,
            bare_rows: bare_manifest_rows,
        }
    } else {
        fanout::Config {
            rounds: rounds.max(1),
            size,
            window,
            plan_window,
            bin,
            work,
            python: !no_python && only.is_none(),
            cores,
            only,
            bare_rows: bare_manifest_rows,
        }
    };
    let results = fanout::run_benchmark(&cfg)?;
    let (table, doc) = fanout::report(&cfg, &results);
    if json {
        println!("{}", serde_json::to_string_pretty(&doc)?);
    } else {
        println!("{table}");
        println!("derived: {}", doc["derived"]);
    }
    Ok(())
}

//! tilegate's benchmarks. `tilegate-benches fanout` measures the 400-window fan-out against
//! the tools a user would pick instead (BENCHMARKS.md has the latest table and how to read
//! it); `tilegate-benches decode` measures how many source bytes window reads decode on
//! sources whose blocks do not line up with the windows; `tilegate-benches ledger` measures GC
//! and reconciliation over a large ledger; `tilegate-benches simulate` runs the real worker,
//! planner and assembler against a model of the cloud services on a simulated clock
//! (CAPACITY.md); `tilegate-benches scope` counts the store requests one tenant's service call
//! sends beside other tenants' jobs and dead letters; the criterion micro-benchmarks of the hot paths are in
//! `benches/hot_paths.rs`.

mod decode;
mod fanout;
mod ledger;
mod measure;
mod product;
mod pyramid;
mod reconcile;
mod requests;
mod scope;
mod serve;
mod simulate;

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
        /// Skip the rasterio peers (they need a virtual environment from PyPI).
        #[arg(long)]
        no_python: bool,
        /// Skip the three-band Byte imagery scene (terrain only).
        #[arg(long)]
        no_imagery: bool,
        /// `tilegate work` process counts to measure on one data directory (comma-separated;
        /// `0` for none).
        #[arg(long, value_delimiter = ',', default_value = "1,2,4,8")]
        procs: Vec<u32>,
        /// A seconds-long configuration for CI: a 1024² scene, one round, no Python peer.
        #[arg(long)]
        smoke: bool,
        /// Print the results as JSON instead of a table.
        #[arg(long)]
        json: bool,
        /// Run only these contenders (comma-separated, e.g. `reference,tilegate_run`).
        #[arg(long, value_delimiter = ',')]
        only: Vec<String>,
        /// Remove each contender's earlier output just before it runs (the warm condition:
        /// it reuses the page cache its last round freed, and creates files among inodes
        /// freed a moment ago), instead of moving it aside until the benchmark ends (cold).
        #[arg(long)]
        remove_just_before: bool,
        /// Count manifest rows written without window facts (rows as they were before they
        /// carried them), to compare the count's cost on one machine.
        #[arg(long)]
        bare_manifest_rows: bool,
    },
    /// The web-pyramid benchmark: `tilegate run --pyramid WebMercatorQuad` against
    /// gdal2tiles.py and rio-pmtiles on the 3-band Byte imagery and the terrain scaled to
    /// Byte, in interleaved rounds; paired ratios, CPU, peak RSS, tiles per zoom, and the last
    /// round's tiles compared pixel by pixel. Prints Markdown tables (or JSON).
    Pyramid {
        /// Rounds (each runs every contender once, in the same order).
        #[arg(long, default_value_t = 3)]
        rounds: u32,
        /// Scene width and height in pixels.
        #[arg(long, default_value_t = 10240)]
        size: u32,
        /// The zooms, `MIN..MAX`.
        #[arg(long, default_value = "6..12")]
        zooms: String,
        /// Directory holding the `tilegate` binary [default: this binary's directory].
        #[arg(long)]
        bin: Option<PathBuf>,
        /// Scratch and cache directory (the scenes are cached here).
        #[arg(long, default_value = ".ci-cache/bench")]
        work: PathBuf,
        /// A short configuration for CI: 1024² scenes, zooms 8–12, one round.
        #[arg(long)]
        smoke: bool,
        /// Print the results as JSON instead of tables.
        #[arg(long)]
        json: bool,
    },
    /// The product benchmark: a median composite of overlapping scenes on a UTM grid,
    /// `product plan` + `work --assemble` against GDAL + NumPy (`peers/product_median.py`),
    /// in interleaved rounds; paired wall-time ratios, CPU, peak RSS, and the last round's
    /// tiles compared pixel by pixel. Prints a Markdown table (or JSON).
    Product {
        /// Rounds (tilegate, then the peer, each round).
        #[arg(long, default_value_t = 5)]
        rounds: u32,
        /// Scenes composited.
        #[arg(long, default_value_t = 6)]
        scenes: u32,
        /// Each scene's width and height in 10 m pixels.
        #[arg(long, default_value_t = 6000)]
        size: u32,
        /// The grid.
        #[arg(long, default_value = "utm:40km@10m")]
        grid: String,
        /// Directory holding the `tilegate` binary [default: this binary's directory].
        #[arg(long)]
        bin: Option<PathBuf>,
        /// Scratch and cache directory (the scenes are cached here).
        #[arg(long, default_value = ".ci-cache/bench")]
        work: PathBuf,
        /// A short configuration for CI: three 1024² scenes on utm:5km@10m, one round.
        #[arg(long)]
        smoke: bool,
        /// Print the results as JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Requests per window on AWS (against the emulator `.ci/aws-emulator` starts): a scene on
    /// S3 planned and worked by `tilegate work` processes; the work stage's requests counted by
    /// service and operation and divided by the windows.
    Requests {
        /// Scene width and height in pixels.
        #[arg(long, default_value_t = 2560)]
        size: u32,
        /// Window size (400 windows on the default scene).
        #[arg(long, default_value_t = 128)]
        window: u32,
        /// `tilegate work` processes.
        #[arg(long, default_value_t = 1)]
        workers: u32,
        /// Directory holding the `tilegate` binary [default: this binary's directory].
        #[arg(long)]
        bin: Option<PathBuf>,
        #[arg(long, default_value = ".ci-cache/bench")]
        work: PathBuf,
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// `tilegate serve` under concurrent clients on loopback: `GET /v1/jobs/{id}` on keep-alive
    /// connections, the event stream opened and read to its first event, and `GET` again while
    /// 256 streams are held open; requests per second and latency percentiles.
    Serve {
        /// Concurrent clients per row (comma-separated).
        #[arg(long, value_delimiter = ',', default_value = "1,16,64")]
        clients: Vec<usize>,
        /// Seconds per row.
        #[arg(long, default_value_t = 10)]
        seconds: u64,
        /// Directory holding the `tilegate` binary [default: this binary's directory].
        #[arg(long)]
        bin: Option<PathBuf>,
        #[arg(long, default_value = ".ci-cache/bench")]
        work: PathBuf,
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// The store requests one reconciler pass sends with OPEN open jobs, alone and beside
    /// FINISHED settled jobs, against the AWS emulator (`.ci/aws-emulator`): a pass reads the
    /// open jobs' index, so it should not grow with the finished ones.
    Reconcile {
        /// Open jobs.
        #[arg(long, default_value_t = 10)]
        open: usize,
        /// Finished (settled) jobs beside them.
        #[arg(long, default_value_t = 10_000)]
        finished: usize,
        /// Directory holding the `tilegate` binary [default: this binary's directory].
        #[arg(long)]
        bin: Option<PathBuf>,
        #[arg(long, default_value = ".ci-cache/bench")]
        work: PathBuf,
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// The store requests one tenant's service calls send (a status call, a listing, one look
    /// of an event stream), alone and beside other tenants' jobs and dead letters, against the
    /// AWS emulator (`.ci/aws-emulator`): what the tenant costs should not grow with them.
    Scope {
        /// Other tenants' jobs.
        #[arg(long, default_value_t = 10_000)]
        others: usize,
        /// Dead letters of theirs.
        #[arg(long, default_value_t = 1_000)]
        dead: usize,
        /// Directory holding the `tilegate` binary [default: this binary's directory].
        #[arg(long)]
        bin: Option<PathBuf>,
        #[arg(long, default_value = ".ci-cache/bench")]
        work: PathBuf,
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
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
    /// Simulate a job on N workers against a model of S3, DynamoDB and SQS (latencies,
    /// per-partition limits and throttling, tilegate's retries) on a simulated clock: the real
    /// planner, worker and assembler, with a timed stand-in for the encoder. Deterministic:
    /// the same seed gives the same report. CAPACITY.md has the scenarios and how to read them.
    Simulate(SimArgs),
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

#[derive(Debug, clap::Args)]
struct SimArgs {
    /// Windows in the job (the scene is the smallest near-square grid that holds them).
    #[arg(long, default_value_t = 400)]
    windows: u64,
    /// Window size in pixels.
    #[arg(long, default_value_t = 512)]
    window: u32,
    /// Workers (Lambda functions or pods), each handling `--concurrency` messages at once.
    #[arg(long, default_value_t = 2)]
    workers: u32,
    #[arg(long, default_value_t = 4)]
    concurrency: usize,
    /// Fraction of messages the queue delivers twice (0.3: 30 %).
    #[arg(long, default_value_t = 0.0)]
    duplicates: f64,
    /// Chance that a worker crashes while encoding a window, per receive (0.05: 5 %).
    #[arg(long, default_value_t = 0.0)]
    crashes: f64,
    /// Re-enqueue the windows without a manifest row once this fraction is recorded.
    #[arg(long, value_name = "FRACTION")]
    backfill_at: Option<f64>,
    /// Manifest partitions (`plan --manifest-shards`).
    #[arg(long, default_value_t = 1)]
    manifest_shards: u32,
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// A window's read + encode time: median and 99th percentile in milliseconds.
    #[arg(long, value_delimiter = ',', num_args = 2, value_name = "MEDIAN,P99", default_values_t = [17.0, 45.0])]
    encode_ms: Vec<f64>,
    /// Visibility timeout of a received message, seconds.
    #[arg(long, default_value_t = 120)]
    visibility: u64,
    /// Long-poll wait of a receive, seconds (SQS allows up to 20).
    #[arg(long, default_value_t = 20)]
    wait: u64,
    /// Workers started per 10 s (Lambda scales a function by 1,000 every 10 s).
    #[arg(long, default_value_t = 1000)]
    ramp_per_10s: u32,
    /// Assemblers racing to build the scene once the tiles are in (0: do not assemble).
    #[arg(long, default_value_t = 1)]
    assemblers: u32,
    /// Every worker assembles the job when it records (or finds recorded) the last window, as
    /// `tilegate work --assemble` does, instead of the racing assemblers after the workers.
    #[arg(long)]
    assemble_on_completion: bool,
    /// Scenes larger than this go up as multipart uploads.
    #[arg(long, default_value_t = 64 << 20)]
    multipart_threshold: u64,
    #[arg(long, default_value_t = 16 << 20)]
    part_size: u64,
    /// How often each worker adds its counters to the job's counter row, seconds.
    #[arg(long, default_value_t = 1.0)]
    counter_flush_s: f64,
    /// DynamoDB write units per second per partition (the service's limit: 1,000).
    #[arg(long, default_value_t = 1000.0)]
    dynamo_writes_per_partition: f64,
    /// Also run the job for real on the embedded backend (GDAL's encoder, SQLite, local
    /// files), count its calls as AWS requests, and compare with the simulation.
    #[arg(long)]
    compare_embedded: bool,
    /// Scratch directory.
    #[arg(long, default_value = ".ci-cache/bench/simulate")]
    work: PathBuf,
    /// Print the report as JSON.
    #[arg(long)]
    json: bool,
}

fn simulate_cmd(a: SimArgs) -> anyhow::Result<()> {
    let cfg = simulate::SimConfig {
        windows: a.windows,
        window: a.window,
        workers: a.workers,
        concurrency: a.concurrency,
        duplicates: a.duplicates,
        crashes: a.crashes,
        backfill_at: a.backfill_at,
        manifest_shards: a.manifest_shards,
        seed: a.seed,
        encode: simulate::model::Latency::new(a.encode_ms[0], a.encode_ms[1]),
        visibility_s: a.visibility,
        wait_s: a.wait,
        ramp_per_10s: a.ramp_per_10s,
        counter_flush_s: a.counter_flush_s,
        assemblers: a.assemblers,
        assemble_on_completion: a.assemble_on_completion,
        multipart_threshold: a.multipart_threshold,
        part_size: a.part_size,
        model: simulate::model::ServiceModel {
            dynamo_writes_per_partition: a.dynamo_writes_per_partition,
            ..Default::default()
        },
        work: a.work,
        ..Default::default()
    };
    let report = simulate::simulate(&cfg)?;
    let comparison = if a.compare_embedded {
        Some(simulate::compare::compare(&cfg, &report)?)
    } else {
        None
    };
    if a.json {
        let mut doc = serde_json::to_value(&report)?;
        if let Some(c) = &comparison {
            doc["compare_embedded"] = serde_json::to_value(c)?;
        }
        println!("{}", serde_json::to_string_pretty(&doc)?);
    } else {
        print!("{}", simulate::render(&report));
        if let Some(c) = &comparison {
            print!("{}", simulate::compare::render(c));
        }
    }
    Ok(())
}

/// Where the `tilegate` binary is: as given, or this binary's directory.
fn bin_dir(bin: Option<PathBuf>) -> anyhow::Result<PathBuf> {
    Ok(match bin {
        Some(b) => b,
        None => std::env::current_exe()?
            .parent()
            .map(PathBuf::from)
            .unwrap_or_default(),
    })
}

/// Print `doc` as JSON, or as its table.
fn print<T: serde::Serialize>(doc: &T, json: bool, table: fn(&T) -> String) -> anyhow::Result<()> {
    if json {
        println!("{}", serde_json::to_string_pretty(doc)?);
    } else {
        println!("{}", table(doc));
    }
    Ok(())
}

fn main() -> anyhow::Result<()> {
    let command = Cli::parse().command;
    if let Cmd::Simulate(a) = command {
        return simulate_cmd(a);
    }
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
    if let Cmd::Reconcile {
        open,
        finished,
        bin,
        work,
        json,
    } = command
    {
        let doc = reconcile::run(&bin_dir(bin)?.join("tilegate"), &work, open, finished)?;
        return print(&doc, json, reconcile::table);
    }
    if let Cmd::Scope {
        others,
        dead,
        bin,
        work,
        json,
    } = command
    {
        let doc = scope::run(&bin_dir(bin)?.join("tilegate"), &work, others, dead)?;
        return print(&doc, json, scope::table);
    }
    if let Cmd::Serve {
        clients,
        seconds,
        bin,
        work,
        json,
    } = command
    {
        let doc = serve::run(&serve::Config {
            bin: bin_dir(bin)?,
            work,
            clients,
            seconds,
        })?;
        return print(&doc, json, serve::table);
    }
    if let Cmd::Product {
        rounds,
        scenes,
        size,
        grid,
        bin,
        work,
        smoke,
        json,
    } = command
    {
        let cfg = product::Config {
            rounds: if smoke { 1 } else { rounds.max(1) },
            scenes: if smoke { 3 } else { scenes.max(1) },
            size: if smoke { 1024 } else { size },
            grid: if smoke {
                "utm:5km@10m".to_owned()
            } else {
                grid
            },
            bin: bin_dir(bin)?,
            work: if smoke { work.join("smoke") } else { work },
        };
        let results = product::run_benchmark(&cfg)?;
        let (table, doc) = product::report(&cfg, &results);
        if json {
            println!("{}", serde_json::to_string_pretty(&doc)?);
        } else {
            println!("{table}");
        }
        return Ok(());
    }
    if let Cmd::Pyramid {
        rounds,
        size,
        zooms,
        bin,
        work,
        smoke,
        json,
    } = command
    {
        let cfg = pyramid::Config {
            rounds: if smoke { 1 } else { rounds.max(1) },
            size: if smoke { 1024 } else { size },
            zooms: if smoke {
                (8, 12)
            } else {
                pyramid::parse_zooms(&zooms)?
            },
            bin: bin_dir(bin)?,
            venv: work.join("pyramid-venv"),
            work: if smoke { work.join("smoke") } else { work },
            cores: std::thread::available_parallelism().map_or(2, |n| n.get()),
        };
        let results = pyramid::run_benchmark(&cfg)?;
        let (table, doc) = pyramid::report(&cfg, &results);
        if json {
            println!("{}", serde_json::to_string_pretty(&doc)?);
        } else {
            println!("{table}");
        }
        return Ok(());
    }
    if let Cmd::Requests {
        size,
        window,
        workers,
        bin,
        work,
        json,
    } = command
    {
        let doc = requests::run_requests(&requests::Config {
            bin: bin_dir(bin)?,
            work,
            size,
            window,
            workers,
        })?;
        return print(&doc, json, requests::table);
    }
    let Cmd::Fanout {
        rounds,
        size,
        window,
        plan_window,
        bin,
        work,
        no_python,
        no_imagery,
        procs,
        smoke,
        json,
        only,
        remove_just_before,
        bare_manifest_rows,
    } = command
    else {
        unreachable!("every other command returned above")
    };
    let bin = bin_dir(bin)?;
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
            imagery: false,
            procs: vec![2],
            cores,
            only,
            remove_just_before,
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
            python: !no_python
                && (only.is_empty()
                    || only.iter().any(|o| {
                        o.contains("peer_tiles_rasterio") || o.contains("peer_tiles_cog")
                    })),
            imagery: !no_imagery,
            procs: procs.into_iter().filter(|&p| p > 0).collect(),
            cores,
            only,
            remove_just_before,
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

//! The `tilegate` command line: plan a scene, run workers, watch a job, handle dead letters.
//!
//! A worker binary of one's own is this command line with more recipes registered:
//!
//! ```no_run
//! fn main() -> std::process::ExitCode {
//!     // tilegate_cog::recipes::register(std::sync::Arc::new(MyRecipe));
//!     tilegate_cli::main()
//! }
//! ```

mod args;
mod backends;
mod batch;
mod commands;
mod errors;
mod http;
mod ledger;
mod look;
mod output;
mod recipes;

use clap::Parser;
use std::process::ExitCode;

/// Run the command line with the process's arguments, and the recipes registered so far.
pub fn main() -> ExitCode {
    tune_allocator();
    let cli = args::Cli::parse();
    let json = cli.global.json;
    init_tracing(cli.global.verbose);
    // GDAL reads s3:// sources through /vsis3/ with the same endpoint and credentials as the
    // AWS SDK (AWS_ENDPOINT_URL, AWS_REGION, ...).
    tilegate_cog::set_config_options(tilegate_backends::gdal_config());
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("start the async runtime");
    match runtime.block_on(commands::dispatch(cli)) {
        Ok(code) => code,
        Err(e) => {
            // One line, led by the reason code scripts can match on.
            let reason = errors::reason_of(&e);
            let message = format!("{e:#}").replace(['\n', '\r'], " ");
            if json {
                println!(
                    "{}",
                    serde_json::json!({"error": {"reason": reason, "message": message}})
                );
            }
            eprintln!("tilegate: error[{reason}]: {message}");
            ExitCode::from(1)
        }
    }
}

fn init_tracing(verbose: u8) {
    use tracing_subscriber::EnvFilter;
    let default = match verbose {
        0 => "warn",
        1 => "info",
        _ => "debug",
    };
    let filter =
        EnvFilter::try_from_env("TILEGATE_LOG").unwrap_or_else(|_| EnvFilter::new(default));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        // Colours only on a terminal: logs redirected to a file stay greppable.
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_writer(std::io::stderr)
        .with_target(false)
        .init();
}

/// Keep freed pixel buffers in the heap. Every window allocates a few buffers of a block's
/// size (0.5 MiB at 512² UInt16) on encoder threads; by default glibc gives such memory back
/// to the kernel (mmap'd chunks, heap trimming) and the next window pays page faults to zero it
/// again — about a tenth of a run's CPU time, measured with perf. The heap stays bounded by
/// the working set (threads × buffers in flight).
fn tune_allocator() {
    // SAFETY: mallopt only adjusts allocator parameters; called before any thread exists.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 64 << 20);
        libc::mallopt(libc::M_TRIM_THRESHOLD, 512 << 20);
    }
}

/// Return the heap's free memory to the kernel (after a stage whose buffers are done with).
pub(crate) fn release_free_memory() {
    // SAFETY: malloc_trim only releases free heap memory.
    unsafe {
        libc::malloc_trim(0);
    }
}

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
mod commands;
mod ctx;
mod dispatch;
mod errors;
mod output;
mod recipes;
mod reports;

use clap::Parser as _;
use std::process::ExitCode;
use tilegate_core::Exit;

/// Run the command line with the process's arguments, and the recipes registered so far.
pub fn main() -> ExitCode {
    tune_allocator();
    end_quietly_on_a_closed_pipe();
    let cli = match dispatch::Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => return usage(e),
    };
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
    match runtime.block_on(dispatch::dispatch(cli)) {
        Ok(code) => code,
        Err(e) => {
            // One line, led by the reason code scripts can match on, its secrets redacted.
            let reason = errors::reason_of(&e);
            let message = errors::one_line(&e);
            if json {
                let doc = output::Failed {
                    error: commands::error_doc(&e),
                };
                println!("{}", serde_json::to_string(&doc).expect("serialises"));
            }
            eprintln!("tilegate: error[{reason}]: {message}");
            Exit::Failed.into()
        }
    }
}

/// A command line clap refuses: with `--json` anywhere in it, the error document on stdout
/// as for any failure (reason `usage`); then clap's own message and exit status (2). Help and
/// version requests print as clap prints them.
fn usage(e: clap::Error) -> ExitCode {
    use clap::error::ErrorKind;
    let asked = matches!(
        e.kind(),
        ErrorKind::DisplayHelp
            | ErrorKind::DisplayVersion
            | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand
    );
    if !asked && std::env::args_os().any(|a| a == "--json") {
        let rendered = e.render().to_string();
        let first = rendered
            .lines()
            .next()
            .unwrap_or("the command line is not one tilegate reads");
        let message =
            tilegate_core::redact::redact(first.trim_start_matches("error: ")).into_owned();
        let doc = output::Failed {
            error: output::ErrorDoc {
                reason: tilegate_core::Reason::Usage,
                message,
            },
        };
        println!("{}", serde_json::to_string(&doc).expect("serialises"));
    }
    let code = e.exit_code();
    let _ = e.print();
    ExitCode::from(u8::try_from(code).unwrap_or(2))
}

/// The log filter's directives for `-v` counted `verbose` times, when `TILEGATE_LOG` is not
/// set: warnings from every crate, and more only from tilegate's own (`tilegate` matches every
/// `tilegate_*` target). Third-party crates (HTTP clients, SDKs, TLS) log request URLs and
/// headers at debug; they are turned up only by naming them in `TILEGATE_LOG`
/// (`TILEGATE_LOG=warn,tilegate=debug,reqwest=debug`).
fn log_directives(verbose: u8) -> &'static str {
    match verbose {
        0 => "warn",
        1 => "warn,tilegate=info",
        _ => "warn,tilegate=debug",
    }
}

fn init_tracing(verbose: u8) {
    use tracing_subscriber::util::SubscriberInitExt as _;
    let filter = tracing_subscriber::EnvFilter::try_from_env("TILEGATE_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(log_directives(verbose)))
        // The service's audit lines (URLs issued, jobs planned, accepts) are always written.
        .add_directive("tilegate::audit=info".parse().expect("a directive"));
    // Colours only on a terminal: logs redirected to a file stay greppable.
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    subscriber(filter, ansi, std::io::stderr).init();
}

use tilegate_pipeline::logging::subscriber;

/// Keep freed pixel buffers in the heap. Every window allocates a few buffers of a block's
/// size (0.5 MiB at 512² UInt16) on encoder threads; by default glibc gives such memory back
/// to the kernel (mmap'd chunks, heap trimming) and the next window pays page faults to zero it
/// again — about a tenth of a run's CPU time, measured with perf. The heap stays bounded by
/// the working set (threads × buffers in flight).
/// A reader that goes away (`tilegate status | head -3`) ends the process as it ends any Unix
/// tool — quietly, by SIGPIPE, the shell reporting 141 — rather than a panic in `println!`
/// (Rust ignores SIGPIPE by default, so the write fails and printing panics). Sockets are not
/// affected: the standard library's and tokio's socket writes pass `MSG_NOSIGNAL`, and libcurl
/// (GDAL's HTTP) guards its own. Nothing is lost by dying here: every write tilegate makes is
/// safe to cut off at any point, as after a SIGKILL.
fn end_quietly_on_a_closed_pipe() {
    // SAFETY: restores the default disposition of one signal before any thread exists.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
}

fn tune_allocator() {
    // SAFETY: mallopt only adjusts allocator parameters; called before any thread exists.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 64 << 20);
        libc::mallopt(libc::M_TRIM_THRESHOLD, 512 << 20);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex, PoisonError};

    /// A writer into a shared buffer.
    struct Sink(Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for Sink {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    /// What the command line's subscriber writes for `-v` given `verbose` times while `emit`
    /// logs.
    fn logged(verbose: u8, emit: impl FnOnce()) -> String {
        let buf = Arc::new(Mutex::new(Vec::new()));
        let sink = Arc::clone(&buf);
        let filter = tracing_subscriber::EnvFilter::new(log_directives(verbose));
        let s = subscriber(filter, false, move || Sink(Arc::clone(&sink)));
        tracing::subscriber::with_default(s, emit);
        let bytes = buf.lock().unwrap_or_else(PoisonError::into_inner).clone();
        String::from_utf8(bytes).unwrap()
    }

    fn emit() {
        tracing::debug!(target: "tilegate_worker::handle", "own debug");
        tracing::info!(target: "tilegate_cli", "own info");
        tracing::debug!(target: "reqwest::connect", "third-party debug");
        tracing::info!(target: "typespec_client_core::http", "third-party info");
        tracing::warn!(target: "hyper_util::client", "third-party warning");
        tracing::warn!(
            target: "tilegate_azure::store",
            url = "http://h/c/a?comp=block&sv=2018-11-09&se=x&sig=AbC%2Bd",
            error = "error sending request for url (http://h/c/a?sig=AbC%2Bd)",
            "put failed"
        );
    }

    #[test]
    fn verbosity_turns_up_tilegates_crates_only() {
        let quiet = logged(0, emit);
        let v = logged(1, emit);
        let vv = logged(2, emit);
        for (log, own_info, own_debug) in
            [(&quiet, false, false), (&v, true, false), (&vv, true, true)]
        {
            assert_eq!(log.contains("own info"), own_info, "{log}");
            assert_eq!(log.contains("own debug"), own_debug, "{log}");
            assert!(!log.contains("third-party debug"), "{log}");
            assert!(!log.contains("third-party info"), "{log}");
            assert!(log.contains("third-party warning"), "{log}");
        }
    }

    #[test]
    fn every_line_is_redacted() {
        let log = logged(2, emit);
        assert!(log.contains("put failed"), "{log}");
        assert!(!log.contains("AbC"), "{log}");
        assert!(log.contains("sig=REDACTED"), "{log}");
    }
}

//! Fault injection for crash tests. Off unless the variables are set; the check is one atomic
//! load per point after the first.
//!
//! Kills: `TILEGATE_FAULT=<point>` makes the process SIGKILL itself at that point
//! (`TILEGATE_FAULT_SKIP=N` lets the first N passes through). Points: the worker's
//! `before-encode`, `after-images` (a pyramid window's tile images written, its index not yet),
//! `after-commit`, `after-manifest`, `before-ack`, and `attempt-after-put` (a
//! regeneration's object written, its row not yet updated); the assembler's `after-claim`
//! (the claim won, nothing uploaded) and `after-publish`
//! (the scene object created, the job row — with the scene's announcement — not yet written);
//! the pipeline's `before-announce` (the row written, its announcement not yet delivered); the
//! planner's `after-job-row` (the job row written, no window enqueued). `TILEGATE_FAULT_MAX_ATTEMPT=N` arms it only
//! for deliveries received at most N times; later deliveries pass uncounted. With `1`, a fault
//! never cuts short a redelivery, so a harness that injects many faults can bound how often one
//! message is stranded (three strandings would dead-letter it).
//!
//! Panics: `TILEGATE_PANIC_WINDOWS=0001_0002,0003_0000` makes the encoder panic (on its rayon
//! thread) for those windows — a stand-in for a bug in the encoder or a library under it.
//! `TILEGATE_PANIC_MAX_ATTEMPT=N` limits it to deliveries received at most N times (a window
//! that panics once and then succeeds); without it the windows are poison, panicking on every
//! delivery.
//!
//! Slowness: `TILEGATE_SLOW_WINDOW_MS=N` makes every window wait N ms before it is encoded (a
//! slow encoder, so that a test's Ctrl-C or second process lands while a job is half done).

use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};

struct Kill {
    point: String,
    skip: u64,
    max_attempt: u32,
    seen: AtomicU64,
}

struct Panic {
    windows: Vec<String>,
    max_attempt: u32,
}

fn number<T: std::str::FromStr>(name: &str) -> Option<T> {
    std::env::var(name).ok().and_then(|s| s.parse().ok())
}

fn kill() -> Option<&'static Kill> {
    static KILL: OnceLock<Option<Kill>> = OnceLock::new();
    KILL.get_or_init(|| {
        Some(Kill {
            point: std::env::var("TILEGATE_FAULT").ok()?,
            skip: number("TILEGATE_FAULT_SKIP").unwrap_or(0),
            max_attempt: number("TILEGATE_FAULT_MAX_ATTEMPT").unwrap_or(u32::MAX),
            seen: AtomicU64::new(0),
        })
    })
    .as_ref()
}

fn panic() -> Option<&'static Panic> {
    static PANIC: OnceLock<Option<Panic>> = OnceLock::new();
    PANIC
        .get_or_init(|| {
            let windows = std::env::var("TILEGATE_PANIC_WINDOWS").ok()?;
            Some(Panic {
                windows: windows.split(',').map(|w| w.trim().to_owned()).collect(),
                max_attempt: number("TILEGATE_PANIC_MAX_ATTEMPT").unwrap_or(u32::MAX),
            })
        })
        .as_ref()
}

/// Panic here if the encoder of `window` is armed to panic on this delivery (`attempt` is the
/// message's receive count).
pub fn encoder_panic(window: &str, attempt: u32) {
    let Some(p) = panic() else { return };
    if attempt <= p.max_attempt && p.windows.iter().any(|w| w == window) {
        panic!("fault injected: encoder panic in window {window}");
    }
}

/// Die here, abruptly, if the fault is armed for `point` and for this delivery (`attempt` is
/// the message's receive count).
pub fn point(point: &str, attempt: u32) {
    let Some(f) = kill() else { return };
    if f.point != point || attempt > f.max_attempt || f.seen.fetch_add(1, Ordering::SeqCst) < f.skip
    {
        return;
    }
    // Logged inside the caller's span, so the log names the window that was cut short.
    tracing::warn!(point, "fault injected: killing the process");
    // SAFETY: getpid and kill have no memory-safety preconditions; SIGKILL ends the process
    // at once, which is the point: no destructor, flush or acknowledgement runs.
    unsafe {
        libc::kill(libc::getpid(), libc::SIGKILL);
    }
}

/// How long each window waits before it is encoded (`TILEGATE_SLOW_WINDOW_MS`); none unset.
pub fn window_delay() -> Option<std::time::Duration> {
    static DELAY: OnceLock<Option<u64>> = OnceLock::new();
    DELAY
        .get_or_init(|| number("TILEGATE_SLOW_WINDOW_MS"))
        .map(std::time::Duration::from_millis)
}

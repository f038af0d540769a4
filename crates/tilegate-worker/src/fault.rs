//! Fault injection for crash tests: `TILEGATE_FAULT=<point>` makes the process SIGKILL itself
//! at that point (`TILEGATE_FAULT_SKIP=N` lets the first N passes through). Points:
//! `before-encode`, `after-commit`, `after-manifest`, `before-ack`.
//! `TILEGATE_FAULT_MAX_ATTEMPT=N` arms it only for deliveries received at most N times; later
//! deliveries pass uncounted. With `1`, a fault never cuts short a redelivery, so a harness that
//! injects many faults can bound how often one message is stranded (three strandings would
//! dead-letter it).
//!
//! Off unless the variable is set; the check is one atomic load per point after the first.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};

struct Fault {
    point: String,
    skip: u64,
    max_attempt: u32,
    seen: AtomicU64,
}

fn fault() -> Option<&'static Fault> {
    static FAULT: OnceLock<Option<Fault>> = OnceLock::new();
    FAULT
        .get_or_init(|| {
            let point = std::env::var("TILEGATE_FAULT").ok()?;
            let number = |name: &str| std::env::var(name).ok().and_then(|s| s.parse().ok());
            Some(Fault {
                point,
                skip: number("TILEGATE_FAULT_SKIP").unwrap_or(0),
                max_attempt: number("TILEGATE_FAULT_MAX_ATTEMPT")
                    .map_or(u32::MAX, |n: u64| u32::try_from(n).unwrap_or(u32::MAX)),
                seen: AtomicU64::new(0),
            })
        })
        .as_ref()
}

/// Die here, abruptly, if the fault is armed for `point` and for this delivery (`attempt` is
/// the message's receive count).
pub fn point(point: &str, attempt: u32) {
    let Some(f) = fault() else { return };
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

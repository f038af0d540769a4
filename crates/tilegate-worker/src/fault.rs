//! Fault injection for crash tests: `TILEGATE_FAULT=<point>` makes the process SIGKILL itself
//! at that point (`TILEGATE_FAULT_SKIP=N` lets the first N passes through). Points:
//! `before-encode`, `after-commit`, `after-manifest`, `before-ack`.
//!
//! Off unless the variable is set; the check is one atomic load per point after the first.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};

struct Fault {
    point: String,
    skip: u64,
    seen: AtomicU64,
}

fn fault() -> Option<&'static Fault> {
    static FAULT: OnceLock<Option<Fault>> = OnceLock::new();
    FAULT
        .get_or_init(|| {
            let point = std::env::var("TILEGATE_FAULT").ok()?;
            let skip = std::env::var("TILEGATE_FAULT_SKIP")
                .ok()
                .and_then(|s| s.parse().ok())
                .unwrap_or(0);
            Some(Fault {
                point,
                skip,
                seen: AtomicU64::new(0),
            })
        })
        .as_ref()
}

/// Die here, abruptly, if the fault is armed for `point`.
pub fn point(point: &str) {
    let Some(f) = fault() else { return };
    if f.point != point || f.seen.fetch_add(1, Ordering::SeqCst) < f.skip {
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

//! The time the in-memory stores stamp and expire by.

use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tilegate_core::UnixMillis;

/// A source of the current time.
pub trait Clock: Send + Sync + std::fmt::Debug {
    /// Now, as a wall-clock instant.
    fn now(&self) -> SystemTime;

    /// Now, in milliseconds since the Unix epoch.
    fn now_millis(&self) -> UnixMillis {
        let d = self.now().duration_since(UNIX_EPOCH).unwrap_or_default();
        i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
    }
}

/// The system's wall clock.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> SystemTime {
        SystemTime::now()
    }
}

/// Tokio's clock, read as wall time from a fixed epoch: on a runtime started paused it
/// advances only when every task sleeps, so simulated hours pass in seconds and two runs from
/// the same start read the same times.
#[derive(Debug, Clone, Copy)]
pub struct TokioClock {
    epoch: SystemTime,
    start: tokio::time::Instant,
}

impl TokioClock {
    /// A clock that reads `epoch` now (call it inside the runtime).
    pub fn starting_at(epoch: SystemTime) -> Self {
        Self {
            epoch,
            start: tokio::time::Instant::now(),
        }
    }

    /// Time since the clock started.
    pub fn elapsed(&self) -> Duration {
        self.start.elapsed()
    }
}

impl Clock for TokioClock {
    fn now(&self) -> SystemTime {
        self.epoch + self.start.elapsed()
    }
}

//! The in-memory backend: every contract of [`tilegate_core`] (objects, jobs, manifest,
//! claims, counters, ledger, queue) kept in ordered maps behind one lock per store, on an
//! injectable [`Clock`].
//!
//! It passes the same conformance suite as the embedded and cloud backends, so the worker,
//! planner, claim gate and assembler run on it unchanged. Its purpose is simulation: with a
//! [`TokioClock`] on a paused Tokio runtime, time advances only when every task waits, so a
//! run of hours takes seconds and comes out the same for the same inputs. The service model
//! that puts the clouds' limits (latency, per-partition throughput, throttling) in front of it
//! lives in `tilegate-benches`' simulator, as a wrapper over these traits.
//!
//! Nothing is persisted: a backend lives as long as its last handle.

mod clock;
mod ledger;
mod objects;
mod queue;
mod tables;

pub use clock::{Clock, SystemClock, TokioClock};
pub use objects::MemoryObjectStore;
pub use queue::MemoryQueue;
pub use tables::MemoryTables;

use std::sync::Arc;
use tilegate_core::Backends;

/// The stores of one in-memory deployment, sharing one clock.
#[derive(Debug, Clone)]
pub struct MemoryBackend {
    pub objects: MemoryObjectStore,
    pub tables: MemoryTables,
    clock: Arc<dyn Clock>,
}

impl MemoryBackend {
    /// Empty stores on `clock`.
    pub fn new(clock: Arc<dyn Clock>) -> Self {
        Self {
            objects: MemoryObjectStore::new(Arc::clone(&clock)),
            tables: MemoryTables::new(),
            clock,
        }
    }

    /// Empty stores on the system clock.
    pub fn system() -> Self {
        Self::new(Arc::new(SystemClock))
    }

    /// A new, empty queue on this backend's clock.
    pub fn queue(&self, name: &str, max_receive_count: u32) -> MemoryQueue {
        MemoryQueue::new(name, max_receive_count, Arc::clone(&self.clock))
    }

    /// The backend's clock.
    pub fn clock(&self) -> &Arc<dyn Clock> {
        &self.clock
    }

    /// Every store as the pipeline takes them, with `queue`; no remote sources.
    pub fn backends(&self, queue: MemoryQueue) -> Backends {
        Backends {
            objects: Arc::new(self.objects.clone()),
            jobs: Arc::new(self.tables.clone()),
            manifest: Arc::new(self.tables.clone()),
            claims: Arc::new(self.tables.clone()),
            counters: Arc::new(self.tables.clone()),
            ledger: Arc::new(self.tables.clone()),
            queue: Arc::new(queue),
            sources: None,
        }
    }
}

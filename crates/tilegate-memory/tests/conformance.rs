//! The conformance suite run against the in-memory backend (on the system clock, as the
//! suite measures time with it): a fresh backend per test.

use async_trait::async_trait;
use std::sync::Arc;
use std::time::Duration;
use tilegate_conformance::{Capabilities, ChildUrls, Harness, ObjectHarness, conformance_suite};
use tilegate_core::ledger::LedgerTable;
use tilegate_core::object::ObjectStore;
use tilegate_core::queue::WorkQueue;
use tilegate_core::table::{ClaimTable, CounterTable, JobTable, ManifestTable};
use tilegate_memory::MemoryBackend;

/// A fresh in-memory backend.
async fn harness() -> Arc<dyn Harness> {
    Arc::new(Memory(MemoryBackend::system()))
}

struct Memory(MemoryBackend);

#[async_trait]
impl ObjectHarness for Memory {
    fn caps(&self) -> Capabilities {
        Capabilities {
            cross_process: false,
            // A rewrite's LastModified is pushed past the previous one's.
            last_modified_resolution: Duration::ZERO,
            min_part_size: 0,
            exclusive_receive: true,
            parts_in_any_order: true,
            completion_unenforced: None,
        }
    }

    fn objects(&self) -> Arc<dyn ObjectStore> {
        Arc::new(self.0.objects.clone())
    }

    fn child_urls(&self) -> Option<ChildUrls> {
        None
    }

    fn upstream(&self) -> Result<String, &'static str> {
        Err("the in-memory store answers in this process: no answer travels that could be lost")
    }
}

#[async_trait]
impl Harness for Memory {
    fn jobs(&self) -> Arc<dyn JobTable> {
        Arc::new(self.0.tables.clone())
    }

    fn manifest(&self) -> Arc<dyn ManifestTable> {
        Arc::new(self.0.tables.clone())
    }

    fn claims(&self) -> Arc<dyn ClaimTable> {
        Arc::new(self.0.tables.clone())
    }

    fn counters(&self) -> Arc<dyn CounterTable> {
        Arc::new(self.0.tables.clone())
    }

    fn ledger(&self) -> Arc<dyn LedgerTable> {
        Arc::new(self.0.tables.clone())
    }

    async fn queue(&self, name: &str, max_receive_count: u32) -> Arc<dyn WorkQueue> {
        Arc::new(self.0.queue(name, max_receive_count))
    }
}

conformance_suite!(harness);

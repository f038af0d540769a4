//! The counters of tilegate's observability contract, with the same names in every exporter.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};

pub const TILES_WRITTEN: &str = "tiles_written_total";
pub const PRECONDITION_FAILED: &str = "conditional_write_precondition_failed_total";
pub const DUPLICATE_ENCODES_SKIPPED: &str = "duplicate_encodes_skipped_total";
pub const MANIFEST_ROWS_WRITTEN: &str = "manifest_rows_written_total";
pub const CLAIMS_WON: &str = "claims_won_total";
pub const CLAIMS_LOST: &str = "claims_lost_total";
pub const MULTIPART_BYTES_UPLOADED: &str = "multipart_bytes_uploaded_total";
pub const DEAD_LETTERED: &str = "dead_lettered_total";
pub const SOURCE_CHANGED: &str = "source_changed_total";

/// Every counter name, in reporting order.
pub const ALL: [&str; 9] = [
    TILES_WRITTEN,
    PRECONDITION_FAILED,
    DUPLICATE_ENCODES_SKIPPED,
    MANIFEST_ROWS_WRITTEN,
    CLAIMS_WON,
    CLAIMS_LOST,
    MULTIPART_BYTES_UPLOADED,
    DEAD_LETTERED,
    SOURCE_CHANGED,
];

/// The name under which dead letters of one reason are counted: `dead_lettered_total{reason="x"}`.
pub fn dead_lettered_by(reason: &str) -> String {
    format!("{DEAD_LETTERED}{{reason=\"{reason}\"}}")
}

/// A process's counters. Cheap to bump from any thread.
#[derive(Debug, Default)]
pub struct Counters {
    values: [AtomicU64; ALL.len()],
    by_reason: std::sync::Mutex<BTreeMap<String, u64>>,
}

impl Counters {
    pub fn new() -> Self {
        Self::default()
    }

    fn index(name: &str) -> usize {
        ALL.iter()
            .position(|n| *n == name)
            .unwrap_or_else(|| panic!("unknown counter {name}"))
    }

    pub fn add(&self, name: &str, n: u64) {
        self.values[Self::index(name)].fetch_add(n, Ordering::Relaxed);
    }

    pub fn inc(&self, name: &str) {
        self.add(name, 1);
    }

    /// Count a dead letter under its reason (and in the total).
    pub fn dead_lettered(&self, reason: &str) {
        self.inc(DEAD_LETTERED);
        *self
            .by_reason
            .lock()
            .expect("counter lock")
            .entry(dead_lettered_by(reason))
            .or_default() += 1;
    }

    pub fn get(&self, name: &str) -> u64 {
        self.values[Self::index(name)].load(Ordering::Relaxed)
    }

    /// Every counter (zeros included) and the per-reason dead-letter counts.
    pub fn snapshot(&self) -> BTreeMap<String, u64> {
        let mut m: BTreeMap<String, u64> =
            ALL.iter().map(|n| ((*n).to_owned(), self.get(n))).collect();
        m.extend(
            self.by_reason
                .lock()
                .expect("counter lock")
                .iter()
                .map(|(k, v)| (k.clone(), *v)),
        );
        m
    }
}

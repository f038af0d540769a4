//! What a person looks at: a job's status ([`status`]: one model behind `status --json`, the
//! live view and the report, so they agree on every count), its self-contained HTML report
//! ([`html`]) and its cost from the requests its stores counted ([`cost`]). The scene's STAC
//! Item is `tilegate-stac`'s (the assembler publishes it).
//!
//! Architecture invariant: everything here is built from stored rows (job row, manifest rows,
//! counters, dead letters), never from logs; and every function but [`status::gather`] is a
//! pure function of what it is given (no I/O), so the same rows give the same bytes.

pub mod cost;
pub mod html;
mod png;
pub mod status;

pub use cost::{CostEstimate, PriceTable};
pub use status::{Gathered, JobStatus, StateCounts, WindowState};

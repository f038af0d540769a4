//! The planner: source metadata and recipe in, job row and window messages out.
//!
//! Architecture invariant: the job ID and the window list are pure functions of the source's
//! identity (canonical URI + ETag) and the recipe; planning twice yields the same job and
//! enqueues duplicates, which the workers absorb.

pub mod http;
pub mod plan;
pub mod source;
pub mod stac;

pub use plan::{Plan, PlanError, PlanOptions, PlanTimings, enqueue_windows, plan};
pub use source::{SourceError, SourceGuard, resolve_source};

//! The planner: source metadata and recipe in, job row and window messages out.
//!
//! Architecture invariant: the job ID and the window list are pure functions of the source's
//! identity (canonical URI + ETag) and the recipe; planning twice yields the same job and
//! enqueues duplicates, which the workers absorb. The source is resolved through
//! `tilegate-source` under the tenant's source policy before anything is enqueued.

pub mod plan;
pub mod product;

pub use plan::{
    Enqueue, Plan, PlanError, PlanOptions, PlanTimings, Sent, derive, enqueue_windows, plan,
    plan_record, plan_resolved, plan_with,
};
pub use tilegate_source::{SourceError, SourcePolicy};

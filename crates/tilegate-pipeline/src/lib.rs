//! The pipeline: compositions of stages. A stage (planner, worker, assembler) never names
//! another; what runs one after another lives here, and the command line, the Lambda function
//! and the benches call it.
//!
//! Architecture invariant: this is the only crate that depends on more than one stage.

pub mod announce;
pub mod batch;
pub mod complete;
pub mod estimate;
pub mod ingest;
pub mod logging;
pub mod product_index;
pub mod reconcile;
pub mod regenerate;
pub mod run;

pub use run::{RunError, RunOptions, RunOutcome, Until, run};

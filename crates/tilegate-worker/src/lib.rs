//! The worker: receive, validate, encode, commit once, record, acknowledge.
//!
//! Architecture invariant: the worker never decides that a tile is absent; it asks the store to
//! create it, and the store refuses the second copy in the same request. A HEAD before encoding
//! only saves work; it is never the guard.

mod acks;
pub mod completion;
pub use tilegate_fault as fault;
mod handle;
mod here;
pub mod pool;
mod pyramid;
pub mod regenerate;
pub mod repair;

pub use completion::{CompletionError, OnComplete};
pub use handle::{WindowOutcome, encode_request};
pub use pool::{StandInEncoder, StopWhen, WorkReport, Worker, WorkerConfig, worker_name};

//! The pipeline end to end through the `tilegate` binary and the Lambda handler: plan, work,
//! assemble and publish on the embedded backend, on the AWS emulator and on the other clouds'
//! object stores; regenerated outputs and the ledger; recipes; the unattended flow from an
//! upload to its announcement, and the reconciler that finishes what a lost trigger left.
//!
//! `cargo nextest run -p tilegate-tests pipeline` runs them all.

mod aws_pipeline;
mod clouds;
mod completion;
mod embedded;
mod ingest;
mod lambda;
mod ledger;
mod product;
mod pyramid;
mod recipes;
mod reconcile;
mod scene;

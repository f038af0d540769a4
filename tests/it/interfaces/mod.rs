//! What a person or a program meets: the command line and its reasons, every `--json` document
//! against its schema, the job report as Chromium renders it, and the job service's HTTP API.
//!
//! `cargo nextest run -p tilegate-tests interfaces` runs them all.

mod cli;
mod json_schemas;
mod lifecycle;
mod quiet;
mod report;
pub(crate) mod service;

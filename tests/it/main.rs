//! tilegate integration tests: one binary, one module per area.

mod assemble;
mod aws_pipeline;
mod azure_sas;
mod bad_input;
mod chaos;
mod cli;
mod clouds;
mod cog;
mod conformance;
mod crash;
mod fidelity;
mod fuzz_inputs;
mod hardening;
mod lambda;
mod layering;
mod ledger;
mod per_backend;
mod pipeline;
mod recipes;
mod report;
mod scene;
mod scripted_azure;
mod scripted_gcs;
mod security;
mod short_uploads;
mod shutdown;

//! tilegate integration tests: one binary, a folder per kind of proof — `contracts` (what the
//! stores and formats promise beyond the conformance suite), `pipeline` (end to end through the
//! binary), `faults` (what it survives), `security` (the trust boundary, attacked) and
//! `interfaces` (the CLI, the JSON documents, the report, the HTTP API) — and `layering` (the
//! crates' dependencies against the architecture's map). The store contracts' conformance suite
//! runs from each backend's crate (`tilegate-conformance`).

mod contracts;
mod faults;
mod interfaces;
mod layering;
mod per_backend;
mod pipeline;
mod security;

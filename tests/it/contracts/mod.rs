//! What the stores and the formats promise beyond the shared conformance suite (which each
//! backend runs from its own crate, through `tilegate-conformance`): the requests a cloud store
//! sends and its reading of answers the emulators do not give, against scripted responders;
//! uploads completed short; tiles and scenes equal to what GDAL writes and valid COGs; the fuzz
//! targets' properties.
//!
//! `cargo nextest run -p tilegate-tests contracts` runs them all.

mod assemble;
mod azure_sas;
mod cog;
mod fidelity;
mod fuzz_inputs;
mod scripted_azure;
mod scripted_gcs;
mod short_uploads;

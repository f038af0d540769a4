//! The faults the pipeline must survive, each injected on purpose: every fault at once (the
//! chaos harness), writers killed mid-put, an assembly interrupted, the faults a close reading
//! found, a pool whose queue fails for good, and the catalogue of bad input with the reason
//! each must end in.
//!
//! `cargo nextest run -p tilegate-tests faults` runs them all.

mod bad_input;
pub(crate) mod chaos;
mod crash;
mod hardening;
mod interrupt;
mod shutdown;

//! The trust boundary, tried as an attacker would: everything that does not come from the
//! operator's own command line is input — a source's bytes, the references a document makes,
//! queue messages, tenants' parameters. Each test is one attack; each refusal is named, and
//! nothing of the forbidden content reaches any output.
//!
//! `cargo nextest run -p tilegate-tests security` runs them all.

mod azure;
mod gdal;
mod inputs;
mod metrics_endpoint;
mod references;
mod risks;
mod secrets;
mod service_scope;

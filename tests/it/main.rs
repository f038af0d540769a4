//! tilegate integration tests: one binary, one module per area.

mod cog;
mod conformance;

//! tilegate integration tests: one binary, one module per area.

mod assemble;
mod cog;
mod conformance;
mod pipeline;
mod scene;

//! tilegate integration tests: one binary, one module per area.

mod assemble;
mod aws_pipeline;
mod cog;
mod conformance;
mod pipeline;
mod scene;

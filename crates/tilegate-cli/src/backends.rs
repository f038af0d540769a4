//! Opening the backends a command works against — the only place that picks implementations.

use anyhow::Context;
use std::path::Path;
use tilegate_core::Backends;
use tilegate_core::queue::DEFAULT_MAX_RECEIVE_COUNT;

/// The embedded backend in `data` (created if absent).
pub fn open_embedded(data: &Path) -> anyhow::Result<Backends> {
    std::fs::create_dir_all(data)
        .with_context(|| format!("create data directory {}", data.display()))?;
    tilegate_embedded::open_data_dir(data, DEFAULT_MAX_RECEIVE_COUNT)
        .with_context(|| format!("open the embedded backend in {}", data.display()))
}

//! Window reads and COG encoding through GDAL, and synthetic sample scenes.
//!
//! * [`probe`] reads a source's [`SceneMeta`](tilegate_core::source::SceneMeta).
//! * Every source is opened with only the GDAL drivers its path allows ([`SourceDrivers`]: a
//!   remote source is a GeoTIFF, a VRT only from the operator's disk and never with raw
//!   bands), under GDAL options hardened once per process.
//! * [`encode_window`] turns one window into a single-block COG tile (bytes in memory), reading
//!   through one GDAL dataset handle per thread; [`encode_windows_parallel`] fans out on rayon.
//! * [`read_raster`] and [`tiff_layout`] read pixels and layout back, for checks.
//! * [`sample_scene`] writes a deterministic terrain-like GeoTIFF for tests and benchmarks.
//!
//! Everything is synchronous; callers on an async runtime use a blocking pool.

mod drivers;
mod dtype;
mod encode;
mod error;
mod ffi;
mod hardening;
mod place;
mod probe;
mod pyramid;
mod rawband;
mod read;
pub mod recipes;
mod sample;
mod semantics;
mod stack;
mod thumb;
mod touch;
mod warp;
mod warp_average;

pub use drivers::SourceDrivers;
pub use dtype::Dtype;
pub use encode::{
    EncodeRequest, NDVI_NODATA, ProductSource, StepTimes, clear_thread_cache,
    encode_product_window, encode_window, encode_window_reducing, encode_window_with_gdal,
    encode_windows_parallel, last_step_times, ndvi, shifted_geotransform, source_opens,
    vsimem_leftovers,
};
pub use error::{CogError, GdalSaid, RectDisplay};
pub use place::{placement, tiff_datetime_rfc3339};
pub use probe::{cloud_cover, probe};
pub use pyramid::{PyramidTile, encode_pyramid_window, pyramid_grid};
pub use read::{RasterData, TiffLayout, read_raster, tiff_layout};
pub use sample::{SAMPLE_BLOCK, SAMPLE_EPSG, SAMPLE_GEOTRANSFORM, SampleOptions, sample_scene};
pub use stack::stack_vrt;
pub use thumb::thumbnail_png;
pub use tilegate_cogwrite::{ReducedWindow, ReducedWindows, Resampling};
pub use touch::{tile_scene, tiles_touched};
pub use warp::warp_grid;

/// The most GDAL's block cache holds, in bytes: GDAL's default (5 % of RAM) or `GDAL_CACHEMAX`
/// until a source is opened for encoding, then fitted to the windows (see the encoder).
pub fn block_cache_limit() -> u64 {
    ffi::ensure_registered();
    ffi::block_cache_limit()
}

/// Give back the decoded source blocks GDAL's block cache holds, when the windows that read
/// them are done with (before a scene is assembled in the same process).
pub fn release_block_cache() {
    let bytes = ffi::flush_block_cache();
    tracing::debug!(bytes, "GDAL block cache flushed");
}

/// Set process-wide GDAL configuration options (how `/vsis3/` reaches S3, say); one that
/// cannot be set is logged and skipped, and so is one that would undo tilegate's hardening
/// (`GDAL_VRT_ENABLE_RAWRASTERBAND` is always `NO`).
pub fn set_config_options(options: impl IntoIterator<Item = (String, String)>) {
    ffi::ensure_registered();
    for (key, value) in options {
        if let Some(kept) = hardening::locked(&key)
            && !value.eq_ignore_ascii_case(kept)
        {
            tracing::warn!(key, kept, "refused to change a GDAL hardening option");
            continue;
        }
        if let Err(e) = gdal::config::set_config_option(&key, &value) {
            tracing::warn!(key, error = %e, "could not set a GDAL configuration option");
        }
    }
}

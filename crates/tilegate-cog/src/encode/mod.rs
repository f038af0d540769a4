//! The COG tile encoder: read one window through a per-thread GDAL handle, apply the recipe,
//! and encode the result as a single-block Cloud Optimized GeoTIFF in memory.
//!
//! A tile is exactly one `recipe.window`-sized block (padded where the window is partial), no
//! overviews and no statistics, so that the assembler can copy each tile's compressed block
//! into the scene COG byte for byte.
//!
//! * [`cache`] keeps each thread's open source datasets (and the shared handles of strip
//!   sources);
//! * [`pixels`] reads a window's pixels as each recipe asks;
//! * [`write`] writes them as a tile, natively or through GDAL's COG driver.

mod cache;
mod pixels;
mod product;
mod write;

use crate::error::CogError;
use crate::ffi;
use rayon::prelude::*;
use std::time::{Duration, Instant};
use tilegate_cogwrite::{ReducedWindow, Resampling};
use tilegate_core::WindowRect;
use tilegate_core::recipe::{Operation, Recipe};
use tilegate_core::source::SceneMeta;

pub use cache::source_opens;
pub use product::ProductSource;
pub use write::vsimem_leftovers;

/// The nodata value of an NDVI tile: written where either input is nodata (or NaN) or where
/// `nir + red == 0`.
pub use tilegate_core::recipe::NDVI_NODATA;

/// One window to encode.
#[derive(Debug, Clone, PartialEq)]
pub struct EncodeRequest {
    /// GDAL path of the source: a plain path or e.g. `/vsis3/bucket/key.tif`.
    pub path: String,
    /// Identifies the source's content (e.g. its ETag). When it changes for the same path,
    /// each thread's cached dataset is closed and the source reopened.
    pub cache_key: String,
    /// The planned scene; the opened source must still match its size, bands and type.
    pub scene: SceneMeta,
    pub recipe: Recipe,
    /// The window, in scene pixels.
    pub rect: WindowRect,
}

/// Encode one window as a COG tile and return the file's bytes.
///
/// * `copy`: the selected bands (all by default), same type and per-band nodata as the source.
/// * `ndvi`: one Float32 band `(nir - red) / (nir + red)`, computed in f64 from the two bands
///   and rounded once; [`NDVI_NODATA`] where either input is its band's nodata or NaN, or
///   where `nir + red == 0`.
///
/// The tile's geotransform is the scene's with its origin moved to the window's top-left
/// corner (left as GDAL's default where the scene has none); its CRS is the scene's.
pub fn encode_window(req: &EncodeRequest) -> Result<Vec<u8>, CogError> {
    Ok(encode(req, true, None, &[])?.0)
}

/// A product tile's window (`req.recipe` a product's, `req.scene` the tile's grid) from its
/// `inputs`, in the order of the recipe's inputs: each warped onto the window and combined
/// (see [`tilegate_core::product`]), then encoded as [`encode_window`] encodes a tile.
pub fn encode_product_window(
    req: &EncodeRequest,
    inputs: &[ProductSource],
) -> Result<Vec<u8>, CogError> {
    Ok(encode(req, true, None, inputs)?.0)
}

/// [`encode_window`], and with `reduce` the window reduced 2× — its share of the scene's first
/// overview level — where the native tile writer encoded it and its size is even (`None`
/// otherwise: the assembler then decodes the tile).
pub fn encode_window_reducing(
    req: &EncodeRequest,
    reduce: Option<Resampling>,
) -> Result<(Vec<u8>, Option<ReducedWindow>), CogError> {
    encode(req, true, reduce, &[])
}

/// [`encode_window`] through GDAL's COG driver for every window, never the native tile writer:
/// the reference the native writer is tested against.
pub fn encode_window_with_gdal(req: &EncodeRequest) -> Result<Vec<u8>, CogError> {
    Ok(encode(req, false, None, &[])?.0)
}

fn encode(
    req: &EncodeRequest,
    native: bool,
    reduce: Option<Resampling>,
    inputs: &[ProductSource],
) -> Result<(Vec<u8>, Option<ReducedWindow>), CogError> {
    let _gdal_log = ffi::ErrorScope::new();
    LAST_STEP_TIMES.with(|c| c.set(StepTimes::default()));
    let rect = req.rect;
    let _span = tracing::debug_span!(
        "encode_window",
        path = %req.path,
        x = rect.x,
        y = rect.y,
        width = rect.width,
        height = rect.height
    )
    .entered();
    let bands = req.recipe.input_bands(req.scene.bands)?;
    check_window(req)?;
    if req.recipe.operation == Operation::Noop {
        return Ok((
            format!("tilegate noop {},{}\n", rect.x, rect.y).into_bytes(),
            None,
        ));
    }
    let started = Instant::now();
    let pixels = match &req.recipe.operation {
        Operation::Product(spec) => product::read(req, spec, inputs),
        _ => cache::with_source(req, |src| pixels::read(src, req, &bands)),
    };
    let tile = pixels
        .and_then(|pixels| {
            let read = started.elapsed();
            let _times = StepTimesGuard { read, started };
            if native && let Some(writer) = write::tile_writer(req, &pixels)? {
                match writer.encode(
                    &pixels.bytes,
                    rect.width,
                    rect.height,
                    (rect.x, rect.y),
                    &req.scene.geotransform,
                    reduce,
                ) {
                    Ok(encoded) => return Ok(encoded),
                    Err(e) => tracing::warn!(error = %e, "native tile encoding failed; using GDAL"),
                }
            }
            Ok((write::write_tile(req, pixels)?, None))
        })
        .inspect_err(|e| {
            if matches!(e, CogError::Read { .. } | CogError::CorruptWindow { .. }) {
                // A retry must not reuse a handle that failed mid-read.
                cache::evict(&req.path);
            }
        })?;
    tracing::debug!(bytes = tile.0.len(), "encoded tile");
    Ok(tile)
}

/// `req`'s window as a pyramid's tile values (warped onto the base zoom), read through the
/// thread's cached source with the same checks as [`encode_window`].
pub(crate) fn pyramid_pixels(
    req: &EncodeRequest,
    encoding: tilegate_pmtiles::PixelEncoding,
) -> Result<tilegate_pmtiles::TileData, CogError> {
    let _gdal_log = ffi::ErrorScope::new();
    let bands = req.recipe.input_bands(req.scene.bands)?;
    check_window(req)?;
    cache::with_source(req, |src| pixels::read(src, req, &bands))
        .inspect_err(|e| {
            if matches!(e, CogError::Read { .. } | CogError::CorruptWindow { .. }) {
                cache::evict(&req.path);
            }
        })
        .map(|p| p.tile_data(req.rect, encoding))
}

/// Where one window's encoding spent its time: reading the source, then writing the tile.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StepTimes {
    pub read: Duration,
    pub encode: Duration,
}

thread_local! {
    static LAST_STEP_TIMES: std::cell::Cell<StepTimes> = const {
        std::cell::Cell::new(StepTimes { read: Duration::ZERO, encode: Duration::ZERO })
    };
}

/// The step times of the last window this thread encoded (read them on the same thread,
/// right after [`encode_window`] or [`encode_window_reducing`] returns).
pub fn last_step_times() -> StepTimes {
    LAST_STEP_TIMES.with(std::cell::Cell::get)
}

/// Records the step times when the tile is written (or its writing fails).
struct StepTimesGuard {
    read: Duration,
    started: Instant,
}

impl Drop for StepTimesGuard {
    fn drop(&mut self) {
        let times = StepTimes {
            read: self.read,
            encode: self.started.elapsed().saturating_sub(self.read),
        };
        LAST_STEP_TIMES.with(|c| c.set(times));
    }
}

/// Encode every request on rayon's pool; results are in request order.
pub fn encode_windows_parallel(reqs: &[EncodeRequest]) -> Vec<Result<Vec<u8>, CogError>> {
    reqs.par_iter().map(encode_window).collect()
}

/// Close every source the calling thread holds open, and the process's shared handles of
/// strip-organised sources; free the thread's kept warp buffers.
pub fn clear_thread_cache() {
    cache::clear();
    write::clear();
    crate::warp_average::release();
}

fn check_window(req: &EncodeRequest) -> Result<(), CogError> {
    let (r, s) = (req.rect, &req.scene);
    let inside = r.width > 0
        && r.height > 0
        && u64::from(r.x) + u64::from(r.width) <= u64::from(s.width)
        && u64::from(r.y) + u64::from(r.height) <= u64::from(s.height);
    if !inside {
        return Err(CogError::WindowOutside {
            path: req.path.clone(),
            rect: r,
            width: s.width,
            height: s.height,
        });
    }
    let w = req.recipe.window;
    let reason = if w == 0 || !w.is_multiple_of(16) {
        Some(format!("window size {w} must be a positive multiple of 16"))
    } else if r.width > w || r.height > w {
        Some(format!(
            "the window is larger than the {w}-pixel tile block"
        ))
    } else {
        None
    };
    match reason {
        Some(reason) => Err(CogError::BadWindow {
            path: req.path.clone(),
            rect: r,
            reason,
        }),
        None => Ok(()),
    }
}

/// NDVI of two bands with their nodata values; see [`encode_window`].
pub fn ndvi(
    red: &[f64],
    nir: &[f64],
    nodata_red: Option<f64>,
    nodata_nir: Option<f64>,
) -> Vec<f32> {
    let is_nd = |v: f64, nd: Option<f64>| v.is_nan() || nd.is_some_and(|n| n == v);
    red.iter()
        .zip(nir)
        .map(|(&r, &n)| {
            let sum = n + r;
            if is_nd(r, nodata_red) || is_nd(n, nodata_nir) || sum == 0.0 {
                NDVI_NODATA as f32
            } else {
                ((n - r) / sum) as f32
            }
        })
        .collect()
}

/// The scene's geotransform with its origin moved to the window's top-left pixel.
pub fn shifted_geotransform(gt: &[f64; 6], rect: WindowRect) -> [f64; 6] {
    let (x, y) = (f64::from(rect.x), f64::from(rect.y));
    [
        gt[0] + x * gt[1] + y * gt[2],
        gt[1],
        gt[2],
        gt[3] + x * gt[4] + y * gt[5],
        gt[4],
        gt[5],
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ndvi_rules() {
        let red = [10.0, 0.0, 5.0, 0.0, f64::NAN, 3.0];
        let nir = [30.0, 0.0, 5.0, 7.0, 1.0, 65535.0];
        let got = ndvi(&red, &nir, Some(3.0), Some(65535.0));
        let nd = NDVI_NODATA as f32;
        // (30-10)/40; sum zero; equal bands; red zero is valid; NaN; nodata in both.
        assert_eq!(got, vec![0.5, nd, 0.0, 1.0, nd, nd]);
        let got = ndvi(&[1.0, -2.0], &[3.0, 2.0], None, None);
        assert_eq!(got, vec![0.5, nd]);
    }

    #[test]
    fn geotransform_moves_to_the_window() {
        let gt = [500_000.0, 10.0, 0.0, 5_000_000.0, 0.0, -10.0];
        let rect = WindowRect {
            x: 512,
            y: 1024,
            width: 512,
            height: 100,
        };
        assert_eq!(
            shifted_geotransform(&gt, rect),
            [505_120.0, 10.0, 0.0, 4_989_760.0, 0.0, -10.0]
        );
    }
}

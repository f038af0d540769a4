//! Assembles one scene Cloud Optimized GeoTIFF from the per-window COG tiles, without
//! re-encoding the full resolution: bytes in, bytes out, no I/O.
//!
//! [`assemble`] parses every tile (classic TIFF or BigTIFF, either byte order), checks that
//! the tiles can share one IFD, copies each tile's compressed block(s) byte for byte into the
//! scene's full-resolution IFD, decodes them once to build the overview levels, encodes only
//! those, and writes GDAL's COG layout (see `layout`). Tiles that are valid but cannot be
//! block-copied take [`assemble_with_gdal`] instead ([`AssemblyPath::GdalFallback`], with the
//! reason in [`SceneCog::fallback_reason`]): never a wrong file.
//!
//! **Native path** (`CopiedBlocks`): every tile tiled with one block of `grid.window` pixels
//! per plane; the same byte order, compression, predictor, sample format, bit depth, planar
//! configuration, photometric and extra samples as window (0,0); no internal mask; compression
//! none, DEFLATE, LZW or ZSTD (overviews re-encoded with the same codec, at GDAL's default
//! levels: DEFLATE 6, ZSTD 9); predictor none, 2 (horizontal) or 3 (floating point, Float32/Float64);
//! samples Byte, Int8, (U)Int16, (U)Int32, Float32 or Float64; no palette, no alpha band.
//! Anything else (LERC, JPEG, WEBP, LZMA, other block sizes, mixed tiles, …) → fallback.
//!
//! **Overviews, as GDAL 3.6's COG driver makes them** (measured with `gdal_translate -of COG
//! -co RESAMPLING=AVERAGE|NEAREST` on random data; exact match):
//! * sizes: halve with rounding *down* (never below 1) while either side exceeds the block
//!   size — 1300×900 on 256 blocks gives 650×450, 325×225, 162×112 ([`overview_sizes`]);
//! * each level is computed from the previous (rounded) level, not from full resolution;
//! * average: output pixel `i` covers source `[i·r, (i+1)·r)`, `r = src/dst`, each source pixel
//!   weighted by its overlap (a plain 2×2 box when the size is even); nodata pixels are
//!   excluded (NaN too when nodata is NaN; otherwise a NaN input makes the output NaN), an
//!   output with no valid input is nodata; integers round half away from zero;
//! * nearest: source pixel `⌊0.5 + i·r⌋`.
//!
//! Metadata: georeferencing (ModelPixelScale/Tiepoint/Transformation, GeoKeys and their
//! params), descriptive tags and GDAL_METADATA (minus per-tile `STATISTICS_*` items) come from
//! window (0,0), whose origin is the scene's; GDAL_NODATA goes on every IFD, as GDAL does.
//!
//! Memory: the native path holds the tiles, the first overview level (a quarter of the scene's
//! uncompressed size; for an odd-sized scene the whole decoded scene) and the encoded
//! overviews. The output is a [`LaidOut`] file — header and IFDs plus the blocks where they go —
//! that is read part by part for an upload rather than copied whole.

/// `Some($body)` with `$T` the sample type of a GDAL data type name (`$dtype`, an
/// `Option<&str>` as [`tile::Format::gdal_dtype`] gives it); `None` for a type the native path
/// does not handle.
macro_rules! with_sample_type {
    ($dtype:expr, $T:ident => $body:expr) => {
        with_sample_type!(@each $dtype, $T, $body, [
            "Byte" u8, "Int8" i8, "UInt16" u16, "Int16" i16,
            "UInt32" u32, "Int32" i32, "Float32" f32, "Float64" f64,
        ])
    };
    (@each $dtype:expr, $T:ident, $body:expr, [$($name:literal $ty:ty),* $(,)?]) => {
        match $dtype {
            $(Some($name) => Some({
                type $T = $ty;
                $body
            }),)*
            _ => None,
        }
    };
}

mod codec;
mod error;
mod fallback;
mod layout;
mod native;
mod overview;
mod reduced;
mod tiff;
mod tile;
mod tilewrite;

pub use error::{AssembleError, GdalSaid};
pub use fallback::{assemble_with_gdal, has_dataset_mask};
pub use layout::LaidOut;
pub use overview::overview_sizes;
pub use reduced::{ReducedWindow, ReducedWindows};
pub use tilewrite::TileWriter;

use bytes::Bytes;
use rayon::prelude::*;
use tilegate_core::source::SceneMeta;
use tilegate_core::{Grid, Window};

/// One window's tile: a whole single-block COG as produced by GDAL's COG driver.
#[derive(Debug, Clone)]
pub struct TileInput {
    pub window: Window,
    pub bytes: Bytes,
}

/// Overview resampling.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Resampling {
    /// Area-weighted average that skips nodata pixels; GDAL's `AVERAGE`.
    #[default]
    Average,
    /// GDAL's `NEAREST`.
    Nearest,
}

/// What to assemble: the window grid, the scene as planned, and how.
#[derive(Debug, Clone, PartialEq)]
pub struct SceneSpec {
    pub grid: Grid,
    /// The source scene as planned. Its size must be the grid's; the GDAL fallback takes the
    /// geotransform and CRS from it. Bands, data type and nodata come from the tiles, which
    /// must all agree with window (0,0): a recipe may change them (band selection, NDVI).
    pub scene: SceneMeta,
    pub resampling: Resampling,
    /// Write BigTIFF even when classic TIFF would do (for tests; the writer otherwise picks
    /// BigTIFF exactly when the file reaches 4 GiB).
    pub force_bigtiff: bool,
}

impl SceneSpec {
    /// Average resampling, BigTIFF only when needed.
    pub fn new(grid: Grid, scene: SceneMeta) -> Self {
        Self {
            grid,
            scene,
            resampling: Resampling::default(),
            force_bigtiff: false,
        }
    }
}

/// How the scene was assembled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AssemblyPath {
    /// Full-resolution blocks copied from the tiles; only overviews encoded.
    CopiedBlocks,
    /// GDAL's COG driver re-encoded everything from a VRT of the tiles.
    GdalFallback,
}

/// The assembled scene COG.
#[derive(Debug, Clone)]
pub struct SceneCog {
    /// The file, laid out: read it in parts ([`LaidOut::read`]) or whole
    /// ([`LaidOut::to_vec`]).
    pub file: LaidOut,
    pub overview_levels: u32,
    pub path: AssemblyPath,
    /// Why [`assemble`] fell back to GDAL, when it did.
    pub fallback_reason: Option<String>,
    /// Windows whose first overview level came from their encoder ([`assemble_reusing`])
    /// instead of decoding their tile.
    pub reduced_windows_reused: u64,
}

impl SceneCog {
    /// Whether the file is BigTIFF (exactly when classic TIFF's 32-bit offsets cannot hold it).
    pub fn bigtiff(&self) -> bool {
        self.file.bigtiff
    }
}

/// Put tiles in grid order (row-major), refusing windows outside the grid, duplicates and
/// holes: a scene is assembled from exactly one tile per window.
pub(crate) fn order_tiles<'a>(
    spec: &SceneSpec,
    tiles: impl Iterator<Item = &'a TileInput>,
) -> Result<Vec<TileInput>, AssembleError> {
    let g = spec.grid;
    let mut slots: Vec<Option<TileInput>> = vec![None; g.len() as usize];
    for t in tiles {
        if !g.contains(t.window) {
            return Err(AssembleError::OutsideGrid {
                window: t.window,
                rows: g.rows(),
                cols: g.cols(),
            });
        }
        let slot = &mut slots[(t.window.row * g.cols() + t.window.col) as usize];
        if slot.is_some() {
            return Err(AssembleError::DuplicateWindow { window: t.window });
        }
        *slot = Some(t.clone());
    }
    let missing = slots.iter().filter(|s| s.is_none()).count() as u64;
    if let Some(w) = g
        .windows()
        .zip(&slots)
        .find_map(|(w, s)| s.is_none().then_some(w))
    {
        return Err(AssembleError::MissingWindow { window: w, missing });
    }
    Ok(slots.into_iter().flatten().collect())
}

fn check_spec(spec: &SceneSpec) -> Result<(), AssembleError> {
    let (g, s) = (spec.grid, &spec.scene);
    if (g.width, g.height) != (s.width, s.height) {
        return Err(AssembleError::BadSpec {
            detail: format!(
                "the grid is {}×{} pixels, the scene {}×{}",
                g.width, g.height, s.width, s.height
            ),
        });
    }
    Ok(())
}

/// Assemble the scene COG from one tile per window of `spec.grid`.
///
/// Errors name the window at fault: a tile that is not a TIFF, is corrupt, does not match its
/// window or the scene, a missing, duplicate or out-of-grid window. Valid tiles that cannot be
/// block-copied are assembled by GDAL instead.
pub fn assemble(spec: &SceneSpec, tiles: Vec<TileInput>) -> Result<SceneCog, AssembleError> {
    assemble_reusing(spec, tiles, None)
}

/// [`assemble`], taking the first overview level of the windows found in `reduced` from there
/// rather than decoding their tiles. The caller vouches that each reduction was made from the
/// pixels of the very tile given for its window ([`ReducedWindows::retain_matching`]).
pub fn assemble_reusing(
    spec: &SceneSpec,
    tiles: Vec<TileInput>,
    reduced: Option<&ReducedWindows>,
) -> Result<SceneCog, AssembleError> {
    check_spec(spec)?;
    let tiles = order_tiles(spec, tiles.iter())?;
    let layouts: Vec<Result<tile::TileLayout, AssembleError>> = tiles
        .par_iter()
        .map(|t| tile::read_layout(t.window, &t.bytes))
        .collect();
    // The first failure in grid order, so the error does not depend on thread timing.
    let layouts: Vec<tile::TileLayout> = layouts.into_iter().collect::<Result<_, _>>()?;
    for l in &layouts {
        let rect = spec
            .grid
            .rect(l.window)
            .expect("ordered tiles lie in the grid");
        tile::check_against_window(l, rect)?;
        tile::check_against_origin(l, &layouts[0])?;
    }
    let origin = &layouts[0].format;
    let obstacle = layouts
        .iter()
        .find_map(|l| tile::copy_obstacle(l, origin, spec.grid.window))
        .or_else(|| tile::overview_obstacle(origin));
    if let Some(reason) = obstacle {
        tracing::info!(
            reason = %reason,
            tiles = tiles.len(),
            "scene assembly falls back to GDAL"
        );
        let mut cog = assemble_with_gdal(spec, &tiles)?;
        cog.fallback_reason = Some(reason);
        return Ok(cog);
    }
    native::assemble(spec, &tiles, &layouts, reduced)
}

//! Plain reads of a raster's pixels and of its TIFF layout, for tests, checks and the
//! assembler.

use crate::GdalSaid;
use crate::dtype::Dtype;
use crate::error::CogError;
use crate::ffi::{self, Layout};
use crate::probe;
use gdal::Metadata;
use gdal::errors::GdalError;
use tilegate_core::WindowRect;

/// Pixels of some bands of a window, with the raster's georeferencing.
#[derive(Debug, Clone, PartialEq)]
pub struct RasterData {
    pub width: u32,
    pub height: u32,
    pub bands: u32,
    /// GDAL type name (`UInt16`, ...).
    pub dtype: String,
    /// Band-sequential, native-endian samples of `dtype`'s width.
    pub bytes: Vec<u8>,
    /// The nodata value of the first band read.
    pub nodata: Option<f64>,
    /// The raster's geotransform (not shifted to the window).
    pub geotransform: [f64; 6],
    /// The CRS as WKT; empty if none.
    pub crs_wkt: String,
}

impl RasterData {
    /// The bytes of one band (0-based among the bands read).
    pub fn band_bytes(&self, band: usize) -> &[u8] {
        let n = self.width as usize * self.height as usize * self.sample_size();
        &self.bytes[band * n..(band + 1) * n]
    }

    /// One band's samples as `f64` (exact for every supported type).
    pub fn band_f64(&self, band: usize) -> Vec<f64> {
        self.dtype()
            .map(|d| d.decode_f64(self.band_bytes(band)))
            .unwrap_or_default()
    }

    fn dtype(&self) -> Option<Dtype> {
        Dtype::from_name(&self.dtype)
    }

    fn sample_size(&self) -> usize {
        self.dtype().map_or(1, Dtype::size)
    }
}

/// Read `rect` (the whole raster if `None`) of `bands` (1-based; all if `None`) in the
/// raster's own type.
pub fn read_raster(
    path: &str,
    rect: Option<WindowRect>,
    bands: Option<&[u32]>,
) -> Result<RasterData, CogError> {
    let _gdal_log = ffi::ErrorScope::new();
    let ds = ffi::open_raster(path)?;
    let meta = probe::scene_meta(&ds, path)?;
    let dtype = probe::dataset_dtype(&ds)?;
    let rect = rect.unwrap_or(WindowRect {
        x: 0,
        y: 0,
        width: meta.width,
        height: meta.height,
    });
    let inside = rect.width > 0
        && rect.height > 0
        && u64::from(rect.x) + u64::from(rect.width) <= u64::from(meta.width)
        && u64::from(rect.y) + u64::from(rect.height) <= u64::from(meta.height);
    if !inside {
        return Err(CogError::WindowOutside {
            path: path.to_owned(),
            rect,
            width: meta.width,
            height: meta.height,
        });
    }
    let all: Vec<u32> = (1..=meta.bands).collect();
    let bands = bands.unwrap_or(&all);
    if bands.is_empty() {
        return Err(tilegate_core::recipe::RecipeError::NoBands.into());
    }
    if let Some(&band) = bands.iter().find(|&&b| b == 0 || b > meta.bands) {
        return Err(tilegate_core::recipe::RecipeError::NoSuchBand {
            band,
            bands: meta.bands,
        }
        .into());
    }
    let mut bytes =
        vec![0u8; rect.width as usize * rect.height as usize * bands.len() * dtype.size()];
    ffi::raster_io(
        &ds,
        false,
        rect,
        bands,
        dtype,
        Layout::BandSequential,
        &mut bytes,
    )
    .map_err(|source| CogError::CorruptWindow {
        path: path.to_owned(),
        rect,
        source: GdalSaid(source),
    })?;
    let nodata = probe::band_nodata(&ds, path)?[bands[0] as usize - 1];
    Ok(RasterData {
        width: rect.width,
        height: rect.height,
        bands: u32::try_from(bands.len()).unwrap_or(u32::MAX),
        dtype: dtype.name().to_owned(),
        bytes,
        nodata,
        geotransform: meta.geotransform,
        crs_wkt: meta.crs_wkt,
    })
}

/// How a (GeoTIFF) raster is laid out on disk, as GDAL reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TiffLayout {
    pub width: u32,
    pub height: u32,
    pub bands: u32,
    pub block_width: u32,
    pub block_height: u32,
    /// Blocks of band 1 with data on disk (from the TIFF domain's `BLOCK_OFFSET_x_y`).
    pub blocks_present: u32,
    pub overviews: u32,
    /// `IMAGE_STRUCTURE` items, e.g. `COMPRESSION=DEFLATE`, `LAYOUT=COG`, `INTERLEAVE=PIXEL`.
    pub image_structure: Vec<String>,
    /// Default-domain metadata of the dataset and of every band (statistics would show here).
    pub metadata: Vec<String>,
}

/// Inspect a raster's block layout and metadata.
pub fn tiff_layout(path: &str) -> Result<TiffLayout, CogError> {
    let _gdal_log = ffi::ErrorScope::new();
    let ds = ffi::open_raster(path)?;
    let meta = probe::scene_meta(&ds, path)?;
    let corrupt = |source: GdalError| CogError::Corrupt {
        path: path.to_owned(),
        source: GdalSaid(source),
    };
    let band = ds.rasterband(1).map_err(corrupt)?;
    let (bw, bh) = band.block_size();
    let to_u32 = |v: usize| u32::try_from(v).unwrap_or(u32::MAX);
    let (bw, bh) = (to_u32(bw), to_u32(bh));
    let mut blocks_present = 0;
    for by in 0..meta.height.div_ceil(bh.max(1)) {
        for bx in 0..meta.width.div_ceil(bw.max(1)) {
            if band
                .metadata_item(&format!("BLOCK_OFFSET_{bx}_{by}"), "TIFF")
                .is_some()
            {
                blocks_present += 1;
            }
        }
    }
    let overviews = band
        .overview_count()
        .map_err(corrupt)?
        .try_into()
        .unwrap_or(0);
    let image_structure = ds.metadata_domain("IMAGE_STRUCTURE").unwrap_or_default();
    let mut metadata = ds.metadata_domain("").unwrap_or_default();
    for i in 1..=ds.raster_count() {
        let b = ds.rasterband(i).map_err(corrupt)?;
        metadata.extend(b.metadata_domain("").unwrap_or_default());
    }
    Ok(TiffLayout {
        width: meta.width,
        height: meta.height,
        bands: meta.bands,
        block_width: bw,
        block_height: bh,
        blocks_present,
        overviews,
        image_structure,
        metadata,
    })
}

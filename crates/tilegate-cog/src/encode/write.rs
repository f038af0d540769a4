//! Writing a window's pixels as a single-block COG tile: natively, by a writer learned once
//! per job from a GDAL-written prototype, or through GDAL's COG driver.

use super::cache::Recent;
use super::pixels::Pixels;
use super::{EncodeRequest, shifted_geotransform};
use crate::GdalSaid;
use crate::error::CogError;
use crate::ffi::{self, ConfigGuard, Layout, VsiMemFile};
use crate::semantics;
use gdal::DriverManager;
use gdal::errors::GdalError;
use std::cell::RefCell;
use std::sync::Arc;
use tilegate_cogwrite::TileWriter;
use tilegate_core::WindowRect;

/// Below this block size GDAL's COG option list warns (it still writes a valid COG).
const COG_LISTED_MIN_BLOCK: u32 = 128;

thread_local! {
    /// Per thread, per job: the native tile writer learned from a GDAL-written prototype of
    /// the job's tiles, or `None` where the job's tiles need GDAL.
    static WRITERS: RefCell<Recent<Option<Arc<TileWriter>>>> = const { RefCell::new(Recent::new()) };
}

/// The native tile writer for `req`'s job, made on first use from a prototype tile that GDAL's
/// COG driver writes for window (0,0) with zero pixels of the same type, bands and nodata.
pub(super) fn tile_writer(
    req: &EncodeRequest,
    like: &Pixels,
) -> Result<Option<Arc<TileWriter>>, CogError> {
    let key = format!(
        "{}|{}|{}|{}",
        req.path,
        req.cache_key,
        req.recipe.fingerprint(),
        like.dtype.name()
    );
    WRITERS.with(|cell| {
        cell.borrow_mut()
            .get_or_try_insert(&key, || learn_tile_writer(req, like))
            .cloned()
    })
}

/// Have GDAL's COG driver write the job's window (0,0) with zero pixels of `like`'s type, bands
/// and nodata, and learn the native writer from it (`None` if it cannot reproduce it).
fn learn_tile_writer(
    req: &EncodeRequest,
    like: &Pixels,
) -> Result<Option<Arc<TileWriter>>, CogError> {
    let origin = WindowRect {
        x: 0,
        y: 0,
        width: req.recipe.window.min(req.scene.width),
        height: req.recipe.window.min(req.scene.height),
    };
    let proto_req = EncodeRequest {
        rect: origin,
        ..req.clone()
    };
    let zeros = Pixels {
        dtype: like.dtype,
        bands: like.bands,
        nodata: like.nodata.clone(),
        semantics: like.semantics.clone(),
        metadata: like.metadata.clone(),
        mask: like
            .mask
            .as_ref()
            .map(|_| vec![0u8; origin.width as usize * origin.height as usize]),
        bytes: vec![
            0u8;
            origin.width as usize
                * origin.height as usize
                * like.bands as usize
                * like.dtype.size()
        ],
    };
    let prototype = write_tile(&proto_req, zeros)?;
    Ok(
        match TileWriter::from_prototype(&prototype, req.recipe.window) {
            Ok(w) => Some(Arc::new(w)),
            Err(reason) => {
                tracing::debug!(reason, "this job's tiles are encoded by GDAL");
                None
            }
        },
    )
}

/// `/vsimem/` files left behind by this crate in this process (always empty unless a tile
/// leaked; for leak checks).
pub fn vsimem_leftovers() -> Vec<String> {
    gdal::vsi::read_dir(ffi::VSIMEM_DIR, true)
        .unwrap_or_default()
        .into_iter()
        .map(|p| p.display().to_string())
        .collect()
}

/// Forget the calling thread's native tile writers.
pub(super) fn clear() {
    WRITERS.with(|w| w.borrow_mut().clear());
}

pub(super) fn write_tile(req: &EncodeRequest, mut px: Pixels) -> Result<Vec<u8>, CogError> {
    let encode_err = |source: GdalError| CogError::Encode {
        path: req.path.clone(),
        rect: req.rect,
        source: GdalSaid(source),
    };
    let r = req.rect;
    let mem_driver = DriverManager::get_driver_by_name("MEM").map_err(encode_err)?;
    let cog_driver = DriverManager::get_driver_by_name("COG").map_err(encode_err)?;
    let mut mem = ffi::create(&mem_driver, "", r.width, r.height, px.bands, px.dtype, &[])
        .map_err(encode_err)?;
    if req.scene.geotransform != [0.0, 1.0, 0.0, 0.0, 0.0, 1.0] {
        mem.set_geo_transform(&shifted_geotransform(&req.scene.geotransform, r))
            .map_err(encode_err)?;
    }
    if !req.scene.crs_wkt.is_empty() {
        mem.set_projection(&req.scene.crs_wkt).map_err(encode_err)?;
    }
    for (i, nd) in px.nodata.iter().enumerate() {
        if nd.is_some() {
            mem.rasterband(i + 1)
                .and_then(|mut b| b.set_no_data_value(*nd))
                .map_err(encode_err)?;
        }
    }
    semantics::apply(&mut mem, &px.semantics, &px.metadata).map_err(encode_err)?;
    if let Some(mask) = px.mask.take() {
        // One mask for all bands, written by the COG driver as the tile's internal mask.
        let size = (r.width as usize, r.height as usize);
        let mut buf = gdal::raster::Buffer::new(size, mask);
        mem.rasterband(1)
            .and_then(|mut b| {
                b.create_mask_band(true)?;
                b.open_mask_band()?.write((0, 0), size, &mut buf)
            })
            .map_err(encode_err)?;
    }
    let all: Vec<u32> = (1..=px.bands).collect();
    let whole = WindowRect { x: 0, y: 0, ..r };
    ffi::raster_io(
        &mem,
        true,
        whole,
        &all,
        px.dtype,
        Layout::BandSequential,
        &mut px.bytes,
    )
    .map_err(encode_err)?;

    let options = [
        ("COMPRESS", req.recipe.compression.gdal_name().to_owned()),
        // YES: GDAL picks 2 (horizontal) for integers and 3 (floating point) for floats.
        ("PREDICTOR", "YES".to_owned()),
        ("BLOCKSIZE", req.recipe.window.to_string()),
        ("OVERVIEWS", "NONE".to_owned()),
        ("NUM_THREADS", "1".to_owned()),
        ("SPARSE_OK", "FALSE".to_owned()),
    ];
    let mut opts = gdal::raster::RasterCreationOptions::new();
    for (k, v) in &options {
        opts.set_name_value(k, v).map_err(encode_err)?;
    }
    let file = VsiMemFile::new(&format!("w{}_{}", r.x, r.y));
    {
        // No side-car .aux.xml in /vsimem/ (statistics or metadata GDAL could not store).
        let mut config = vec![("GDAL_PAM_ENABLED", "NO")];
        if req.recipe.window < COG_LISTED_MIN_BLOCK {
            // Small blocks are valid TIFF and COG; only the option list's advice says 128.
            config.push(("GDAL_VALIDATE_CREATION_OPTIONS", "NO"));
        }
        let _cfg = ConfigGuard::set(&config).map_err(encode_err)?;
        let out = mem
            .create_copy(&cog_driver, file.name(), &opts)
            .map_err(encode_err)?;
        drop(out);
    }
    drop(mem);
    file.take().map_err(encode_err)
}

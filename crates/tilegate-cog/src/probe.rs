//! `probe`: what the planner learns about a source with GDAL (size, bands, type, CRS,
//! geotransform, nodata), refusing rasters tilegate cannot tile.

use crate::GdalSaid;
use crate::dtype::Dtype;
use crate::error::CogError;
use crate::ffi;
use gdal::Dataset;
use gdal::Metadata as _;
use tilegate_core::source::SceneMeta;

/// The identity geotransform GDAL reports for a raster without georeferencing.
const NO_GEOTRANSFORM: [f64; 6] = [0.0, 1.0, 0.0, 0.0, 0.0, 1.0];

/// Open `path` (a plain path or any GDAL path such as `/vsis3/bucket/key.tif`) and read its
/// [`SceneMeta`]. Refuses a zero-sized raster ([`CogError::EmptyRaster`]) and unsupported or
/// mixed pixel types ([`CogError::UnsupportedDtype`]).
pub fn probe(path: &str) -> Result<SceneMeta, CogError> {
    let _gdal_log = ffi::ErrorScope::new();
    let ds = ffi::open_raster(path)?;
    let meta = scene_meta(&ds, path)?;
    tracing::debug!(
        path,
        width = meta.width,
        height = meta.height,
        bands = meta.bands,
        dtype = %meta.dtype,
        "probed source"
    );
    Ok(meta)
}

/// Metadata items a scene's cloud cover is found under, in percent: STAC's name, Landsat's
/// and Sentinel-2's.
const CLOUD_COVER_ITEMS: [&str; 3] = ["eo:cloud_cover", "CLOUD_COVER", "CLOUDY_PIXEL_PERCENTAGE"];

/// The scene's cloud cover in percent (0–100), from its dataset metadata (default domain),
/// or `None` where it says none or nothing sensible.
pub fn cloud_cover(path: &str) -> Option<f64> {
    let _gdal_log = ffi::ErrorScope::new();
    let ds = ffi::open_raster(path).ok()?;
    CLOUD_COVER_ITEMS.iter().find_map(|name| {
        let v: f64 = ds.metadata_item(name, "")?.trim().parse().ok()?;
        (0.0..=100.0).contains(&v).then_some(v)
    })
}

/// The facts of an open dataset, checked.
pub(crate) fn scene_meta(ds: &Dataset, path: &str) -> Result<SceneMeta, CogError> {
    scene_meta_for(ds, path, false)
}

/// [`scene_meta`], accepting a raster placed only by ground control points when `gcps_ok`
/// (a source the `warp` recipe reprojects: the warper uses its GCPs).
pub(crate) fn scene_meta_for(
    ds: &Dataset,
    path: &str,
    gcps_ok: bool,
) -> Result<SceneMeta, CogError> {
    let (w, h) = ds.raster_size();
    let bands = ds.raster_count();
    let to_u32 = |v: usize| u32::try_from(v).unwrap_or(u32::MAX);
    let (width, height, bands) = (to_u32(w), to_u32(h), to_u32(bands));
    if width == 0 || height == 0 || bands == 0 {
        return Err(CogError::EmptyRaster {
            path: path.to_owned(),
            width,
            height,
            bands,
        });
    }
    let dtype = dataset_dtype(ds)?;
    let geotransform = match ds.geo_transform() {
        Ok(gt) => gt,
        // Ground control points place the raster by a fitted warp, not an affine transform a
        // window can be composed with: tiles would carry none of it. Refused, not degraded.
        Err(_) => match gcp_count(ds) {
            0 => NO_GEOTRANSFORM,
            _ if gcps_ok => NO_GEOTRANSFORM,
            gcps => {
                return Err(CogError::UnsupportedGeoreferencing {
                    path: path.to_owned(),
                    reason: format!(
                        "{gcps} ground control points and no geotransform; warp it to a grid first (gdalwarp) and plan the result"
                    ),
                });
            }
        },
    };
    let nodata = band_nodata(ds, path)?.first().copied().flatten();
    let crs_wkt = ds.projection();
    let placement = crate::place::placement(&crs_wkt, &geotransform, width, height);
    // When the scene was acquired: a TIFF DateTime, or the CF/ACDD `time_coverage_start` that
    // GOES-R and other NetCDF products carry (kept as `NC_GLOBAL#…` by a conversion).
    let datetime = ds
        .metadata_item("TIFFTAG_DATETIME", "")
        .and_then(|t| crate::place::tiff_datetime_rfc3339(&t))
        .or_else(|| {
            ["time_coverage_start", "NC_GLOBAL#time_coverage_start"]
                .iter()
                .find_map(|k| ds.metadata_item(k, ""))
                .and_then(|t| crate::place::utc_rfc3339(&t))
        });
    Ok(SceneMeta {
        width,
        height,
        bands,
        dtype: dtype.name().to_owned(),
        crs_wkt,
        geotransform,
        nodata,
        placement,
        datetime,
    })
}

fn gcp_count(ds: &Dataset) -> i32 {
    // SAFETY: the dataset handle is valid for the borrow.
    unsafe { gdal_sys::GDALGetGCPCount(ds.c_dataset()) }
}

/// The shared, supported pixel type of every band.
pub(crate) fn dataset_dtype(ds: &Dataset) -> Result<Dtype, CogError> {
    ffi::dataset_dtype(ds).map_err(|dtype| CogError::UnsupportedDtype { dtype })
}

/// Each band's nodata value, in band order.
pub(crate) fn band_nodata(ds: &Dataset, path: &str) -> Result<Vec<Option<f64>>, CogError> {
    (1..=ds.raster_count())
        .map(|i| {
            ds.rasterband(i)
                .map(|b| b.no_data_value())
                .map_err(|source| CogError::Corrupt {
                    path: path.to_owned(),
                    source: GdalSaid(source),
                })
        })
        .collect()
}

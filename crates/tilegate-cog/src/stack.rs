//! Several single-band rasters read as one multi-band raster: a VRT in GDAL's memory file
//! system, made with `GDALBuildVRT -separate -resolution highest` (the library behind
//! `gdalbuildvrt`), each band described by its name. Used for the assets of a STAC Item.

use crate::error::CogError;
use crate::ffi;
use gdal::Metadata as _;
use gdal::errors::GdalError;
use gdal_sys::CPLErr;
use std::ffi::{CString, c_int};
use std::ptr;

/// Where stacked sources live; names under `net-` read over the network.
pub(crate) const STACK_DIR: &str = "/vsimem/tilegate-stac";

/// Make (or remake) the VRT `id` stacking the first band of each of `inputs` (GDAL paths) as
/// one band each, described by `names`, on the finest input's grid; return its path.
/// `remote` marks it as read over the network (its read failures are then retryable).
pub fn stack_vrt(
    id: &str,
    inputs: &[String],
    names: &[String],
    remote: bool,
) -> Result<String, CogError> {
    let _gdal_log = ffi::ErrorScope::new();
    ffi::ensure_registered();
    let path = format!("{STACK_DIR}/{}{id}.vrt", if remote { "net-" } else { "" });
    let gdal_err = |source| CogError::Gdal {
        operation: "stack the item's assets (GDALBuildVRT)",
        source,
    };
    let mut argv = gdal::cpl::CslStringList::new();
    for a in ["-separate", "-resolution", "highest", "-b", "1"] {
        argv.add_string(a).map_err(gdal_err)?;
    }
    let c_inputs: Vec<CString> = inputs
        .iter()
        .map(|p| CString::new(p.as_str()))
        .collect::<Result<_, _>>()
        .map_err(|e| gdal_err(GdalError::from(e)))?;
    let ptrs: Vec<*const std::ffi::c_char> = c_inputs.iter().map(|c| c.as_ptr()).collect();
    let c_path = CString::new(path.as_str()).map_err(|e| gdal_err(GdalError::from(e)))?;
    let count = c_int::try_from(inputs.len()).map_err(|e| gdal_err(GdalError::from(e)))?;
    ffi::reset_error();
    // SAFETY: a NULL-terminated argument list, input names and an output name that all
    // outlive the calls; GDAL copies what it keeps. The returned handle is ours to close.
    let handle = unsafe {
        let opts = gdal_sys::GDALBuildVRTOptionsNew(argv.as_ptr(), ptr::null_mut());
        if opts.is_null() {
            return Err(gdal_err(ffi::last_error(CPLErr::CE_Failure)));
        }
        let mut usage: c_int = 0;
        let h = gdal_sys::GDALBuildVRT(
            c_path.as_ptr(),
            count,
            ptr::null_mut(),
            ptrs.as_ptr(),
            opts,
            &mut usage,
        );
        gdal_sys::GDALBuildVRTOptionsFree(opts);
        h
    };
    if handle.is_null() {
        return Err(gdal_err(ffi::last_error(CPLErr::CE_Failure)));
    }
    // SAFETY: a fresh handle from GDALBuildVRT; closing the Dataset writes the VRT.
    let ds = unsafe { gdal::Dataset::from_c_dataset(handle) };
    for (i, name) in names.iter().enumerate() {
        ds.rasterband(i + 1)
            .and_then(|mut b| b.set_description(name))
            .map_err(gdal_err)?;
    }
    drop(ds);
    ffi::check_error().map_err(gdal_err)?;
    Ok(path)
}

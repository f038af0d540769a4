//! Several single-band rasters read as one multi-band raster: a VRT made with
//! `GDALBuildVRT -separate -resolution highest -b 1` (the library behind `gdalbuildvrt`), each
//! band described by its name. Used for the assets of a STAC Item.
//!
//! The VRT is built in memory, per open, from the assets' datasets — each opened as a source of
//! its own, under its own driver rule (`drivers`): a remote asset is a GeoTIFF or nothing.
//! GDAL's VRT driver never opens an asset by name (it would, with any driver: a remote asset
//! that turned into a VRT after planning could then read local files), and the VRT is never
//! written anywhere to be reopened. Its path (`/vsimem/tilegate-stac/…`) only names the
//! registered recipe.

use crate::GdalSaid;
use crate::drivers::SourceDrivers;
use crate::error::CogError;
use crate::ffi;
use gdal::Dataset;
use gdal::Metadata as _;
use gdal::errors::GdalError;
use gdal_sys::CPLErr;
use std::collections::HashMap;
use std::ffi::c_int;
use std::ptr;
use std::sync::{Arc, LazyLock, Mutex, PoisonError};

/// Where stacked sources are named; names under `net-` read over the network.
pub(crate) const STACK_DIR: &str = "/vsimem/tilegate-stac";

/// What a stack is made of: its inputs (GDAL paths) and their band names.
struct Stack {
    inputs: Vec<String>,
    names: Vec<String>,
}

/// The stacks this process knows, by path.
static STACKS: LazyLock<Mutex<HashMap<String, Arc<Stack>>>> = LazyLock::new(Default::default);

/// Make (or remake) the stack `id` of the first band of each of `inputs` (GDAL paths) as one
/// band each, described by `names`, on the finest input's grid; return its path. Every input
/// is opened (and so checked) once here. `remote` marks it as read over the network (its read
/// failures are then retryable).
pub fn stack_vrt(
    id: &str,
    inputs: &[String],
    names: &[String],
    remote: bool,
) -> Result<String, CogError> {
    let _gdal_log = ffi::ErrorScope::new();
    ffi::ensure_registered();
    let path = format!("{STACK_DIR}/{}{id}.vrt", if remote { "net-" } else { "" });
    // A stack of stacks would be a VRT opened by name.
    if let Some(nested) = inputs
        .iter()
        .find(|i| SourceDrivers::for_path(i) == SourceDrivers::Stack)
    {
        return Err(CogError::SourceFormatForbidden {
            path: nested.clone(),
            driver: "VRT".to_owned(),
            origin: SourceDrivers::Stack.origin(),
        });
    }
    let stack = Arc::new(Stack {
        inputs: inputs.to_vec(),
        names: names.to_vec(),
    });
    registry().insert(path.clone(), stack.clone());
    if let Err(e) = build(&stack) {
        registry().remove(&path);
        return Err(e);
    }
    Ok(path)
}

fn registry() -> std::sync::MutexGuard<'static, HashMap<String, Arc<Stack>>> {
    STACKS.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Open the stack registered at `path`: its inputs opened as sources, stacked in memory.
pub(crate) fn open(path: &str) -> Result<Dataset, CogError> {
    let stack = registry()
        .get(path)
        .cloned()
        .ok_or_else(|| CogError::Missing {
            path: path.to_owned(),
        })?;
    build(&stack)
}

fn build(stack: &Stack) -> Result<Dataset, CogError> {
    let gdal_err = |source: GdalError| CogError::Gdal {
        operation: "stack the item's assets (GDALBuildVRT)",
        source: GdalSaid(source),
    };
    let sources = stack
        .inputs
        .iter()
        .map(|p| ffi::open_raster(p))
        .collect::<Result<Vec<Dataset>, CogError>>()?;
    // GDALBuildVRT uses a dataset it is handed as the VRT's source — rather than a proxy that
    // reopens it by name with any driver — only when the dataset has no name.
    for s in &sources {
        // SAFETY: a live dataset handle and a static empty C string that GDAL copies.
        unsafe { gdal_sys::GDALSetDescription(s.c_dataset(), c"".as_ptr()) };
    }
    let mut argv = gdal::cpl::CslStringList::new();
    for a in ["-separate", "-resolution", "highest", "-b", "1"] {
        argv.add_string(a).map_err(gdal_err)?;
    }
    let mut handles: Vec<gdal_sys::GDALDatasetH> = sources.iter().map(Dataset::c_dataset).collect();
    let count = c_int::try_from(handles.len()).map_err(|e| gdal_err(GdalError::from(e)))?;
    ffi::reset_error();
    // SAFETY: a NULL-terminated argument list and `count` live dataset handles that outlive
    // the calls; the output name is an empty C string (an in-memory VRT). The returned
    // handle is ours to close; the VRT takes a reference on each source dataset it uses.
    let handle = unsafe {
        let opts = gdal_sys::GDALBuildVRTOptionsNew(argv.as_ptr(), ptr::null_mut());
        if opts.is_null() {
            return Err(gdal_err(ffi::last_error(CPLErr::CE_Failure)));
        }
        let mut usage: c_int = 0;
        let h = gdal_sys::GDALBuildVRT(
            c"".as_ptr(),
            count,
            handles.as_mut_ptr(),
            ptr::null(),
            opts,
            &mut usage,
        );
        gdal_sys::GDALBuildVRTOptionsFree(opts);
        h
    };
    if handle.is_null() {
        return Err(gdal_err(ffi::last_error(CPLErr::CE_Failure)));
    }
    // SAFETY: a fresh handle from GDALBuildVRT, owned by the returned Dataset.
    let ds = unsafe { Dataset::from_c_dataset(handle) };
    // Hand each source to the VRT: drop this function's reference without closing the dataset
    // (GDALClose would delete it under the VRT); the VRT's own reference keeps it alive until
    // the VRT is closed. A source the VRT did not take is deleted here.
    for s in sources {
        let h = s.c_dataset();
        std::mem::forget(s);
        // SAFETY: `h` is a live dataset whose Rust owner was forgotten just above, so this is
        // the one release of this function's reference.
        unsafe { gdal_sys::GDALReleaseDataset(h) };
    }
    for (i, name) in stack.names.iter().enumerate() {
        ds.rasterband(i + 1)
            .and_then(|mut b| b.set_description(name))
            .map_err(gdal_err)?;
    }
    Ok(ds)
}

//! The `warp` recipe: the output grid of a reprojection, computed once when planning, and one
//! window of it warped from the source with GDAL's warper.
//!
//! Both go through `GDALWarp` (the library behind `gdalwarp`) with the same options, so the
//! job's grid is exactly the grid `gdalwarp -t_srs … -tr … -tap` would make, and each window is
//! what `gdalwarp` writes for those pixels. The transformer is exact (`-et 0`): GDAL's default
//! approximation interpolates the transform linearly over each chunk it warps, so its result
//! would depend on where the chunks fall — and a window is a chunk of its own. A pyramid's base
//! zoom resampled other than `near` takes the approximation ([`Transformer::Approximate`]):
//! its tiles are then within GDAL's own tolerance of `gdalwarp` of each tile, not equal to it,
//! and the warp takes less than half the time.
//!
//! The warper reads the source region under the window's footprint plus its kernel's margin
//! (`GDALWarpOperation` computes it per call), so adjacent windows agree at their seams.

use crate::error::CogError;
use crate::ffi;
use crate::probe;
use gdal::Dataset;
use gdal::errors::GdalError;
use gdal_sys::CPLErr;
use std::ffi::{CString, c_int};
use std::ptr;
use tilegate_core::recipe::WarpSpec;
use tilegate_core::source::SceneMeta;

/// How the warper maps each target pixel to the source.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Transformer {
    /// Every pixel through the exact transform (`-et 0`): a window equals `gdalwarp -et 0` of
    /// the same pixels, wherever the windows fall.
    Exact,
    /// GDAL's default: the transform interpolated linearly along each chunk's rows, within an
    /// eighth of a pixel (`-et 0.125`).
    Approximate,
}

impl Transformer {
    /// The largest error GDAL's approximation allows, in target pixels (`gdalwarp`'s default).
    pub(crate) const APPROXIMATE_ERROR: f64 = 0.125;

    pub(crate) fn error_threshold(self) -> f64 {
        match self {
            Self::Exact => 0.0,
            Self::Approximate => Self::APPROXIMATE_ERROR,
        }
    }
}

/// The warper's options shared by planning and per-window warps.
fn common_args(spec: &WarpSpec, transformer: Transformer) -> Vec<String> {
    let mut args: Vec<String> = ["-t_srs", &spec.t_srs, "-r", &spec.resampling, "-et"]
        .iter()
        .map(|s| (*s).to_owned())
        .collect();
    args.push(transformer.error_threshold().to_string());
    // One thread per warp: the workers already run one window per core.
    args.extend(["-wo", "NUM_THREADS=1"].map(str::to_owned));
    args
}

/// Run `GDALWarp` from `src` into the existing `dst`, or (with `dst` `None`) into a new
/// dataset at `dest` made by the `-of` driver in `args`.
fn gdal_warp(
    dest: &str,
    dst: Option<&Dataset>,
    src: &Dataset,
    args: &[String],
) -> Result<Option<Dataset>, GdalError> {
    let mut argv = gdal::cpl::CslStringList::new();
    for a in args {
        argv.add_string(a)?;
    }
    ffi::reset_error();
    // SAFETY: a NULL-terminated argument list that outlives the call; GDAL copies it.
    let opts = unsafe { gdal_sys::GDALWarpAppOptionsNew(argv.as_ptr(), ptr::null_mut()) };
    if opts.is_null() {
        return Err(ffi::last_error(CPLErr::CE_Failure));
    }
    let c_dest = CString::new(dest).map_err(GdalError::from)?;
    let mut src_handle = src.c_dataset();
    let mut usage: c_int = 0;
    // SAFETY: valid options, a valid source handle array of one, and either a valid
    // destination handle (borrowed: GDALWarp returns it without transferring ownership) or a
    // destination name for GDALWarp to create (the new handle is then ours).
    let out = unsafe {
        let h = gdal_sys::GDALWarp(
            if dst.is_some() {
                ptr::null()
            } else {
                c_dest.as_ptr()
            },
            dst.map_or(ptr::null_mut(), Dataset::c_dataset),
            1,
            &mut src_handle,
            opts,
            &mut usage,
        );
        gdal_sys::GDALWarpAppOptionsFree(opts);
        h
    };
    if out.is_null() {
        return Err(ffi::last_error(CPLErr::CE_Failure));
    }
    if dst.is_some() {
        ffi::check_error()?;
        return Ok(None);
    }
    // SAFETY: a fresh handle GDALWarp created for `dest`; the returned Dataset owns it.
    Ok(Some(unsafe { Dataset::from_c_dataset(out) }))
}

/// The output grid of warping the raster at `path` with `spec`: size, geotransform, CRS, bands
/// and type, as `gdalwarp` with the same options would make it. A target grid's `origin`
/// snaps the extent outwards onto `origin + k × resolution`.
pub fn warp_grid(path: &str, spec: &WarpSpec) -> Result<SceneMeta, CogError> {
    let _gdal_log = ffi::ErrorScope::new();
    let src = ffi::open_raster(path)?;
    let datetime = gdal::Metadata::metadata_item(&src, "TIFFTAG_DATETIME", "")
        .and_then(|t| crate::place::tiff_datetime_rfc3339(&t));
    let bad = |reason: String| CogError::BadWarp {
        path: path.to_owned(),
        reason,
    };
    let mut args = common_args(spec, Transformer::Exact);
    args.extend(["-of", "VRT"].map(str::to_owned));
    if let Some([x, y]) = spec.tr {
        if !(x > 0.0 && y > 0.0 && x.is_finite() && y.is_finite()) {
            return Err(bad(format!("resolution {x},{y} must be positive")));
        }
        args.extend(["-tr".to_owned(), x.to_string(), y.to_string()]);
    }
    let plan = |args: &[String]| {
        let file = ffi::VsiMemFile::new("grid");
        let ds = gdal_warp(file.name(), None, &src, args)
            .map_err(|e| bad(crate::GdalSaid(e).to_string()))?
            .expect("a created dataset");
        let meta = probe::scene_meta(&ds, path)?;
        drop(ds);
        drop(file);
        Ok::<_, CogError>(meta)
    };
    let mut meta = match (spec.origin, spec.tap) {
        (Some(_), true) => return Err(bad("give either --tap or --target-origin".into())),
        (Some(_), false) if spec.tr.is_none() => {
            return Err(bad("a target origin needs a resolution (--tr)".into()));
        }
        (Some([ox, oy]), false) => {
            let free = plan(&args)?;
            let [xres, yres] = spec.tr.expect("checked above");
            let gt = free.geotransform;
            let (minx, maxy) = (gt[0], gt[3]);
            let maxx = minx + f64::from(free.width) * gt[1];
            let miny = maxy + f64::from(free.height) * gt[5];
            let snap_down = |v: f64, o: f64, r: f64| o + ((v - o) / r).floor() * r;
            let snap_up = |v: f64, o: f64, r: f64| o + ((v - o) / r).ceil() * r;
            args.extend([
                "-te".to_owned(),
                snap_down(minx, ox, xres).to_string(),
                snap_down(miny, oy, yres).to_string(),
                snap_up(maxx, ox, xres).to_string(),
                snap_up(maxy, oy, yres).to_string(),
            ]);
            plan(&args)?
        }
        (None, true) if spec.tr.is_none() => {
            return Err(bad("--tap needs a resolution (--tr)".into()));
        }
        (None, true) => {
            args.push("-tap".to_owned());
            plan(&args)?
        }
        (None, false) => plan(&args)?,
    };
    meta.datetime = datetime;
    Ok(meta)
}

/// Warp the window of `dst`'s grid from `src` into `dst` (a MEM dataset with the window's
/// geotransform and the target CRS, whose bands the caller prepared): with `nodata` the
/// source's nodata marks invalid pixels in and out; with `alpha` the last band of `dst`
/// receives the warper's validity (the source's mask or alpha band where it has one).
pub(crate) fn warp_window(
    src: &Dataset,
    dst: &Dataset,
    spec: &WarpSpec,
    transformer: Transformer,
    nodata: Option<&[f64]>,
    src_alpha: bool,
    dst_alpha: bool,
) -> Result<(), GdalError> {
    let mut args = common_args(spec, transformer);
    match nodata {
        Some(values) => {
            let list: Vec<String> = values.iter().map(|v| nodata_arg(*v)).collect();
            args.extend(["-dstnodata".to_owned(), list.join(" ")]);
            args.extend(["-wo", "INIT_DEST=NO_DATA"].map(str::to_owned));
        }
        None => args.extend(["-wo", "INIT_DEST=0"].map(str::to_owned)),
    }
    if src_alpha {
        args.push("-srcalpha".to_owned());
    }
    if dst_alpha {
        args.push("-dstalpha".to_owned());
    }
    gdal_warp("", Some(dst), src, &args).map(|_| ())
}

/// Warp every band of `src` (but an alpha band, with `src_alpha`) into the first bands of
/// `dst` and the warper's validity into its last band (0 where no valid source pixel reached):
/// a product input's pixels. With `ignore_nodata` the source's nodata values are not the
/// warper's (`-srcnodata None`), so that its mask decides validity; the caller then tests
/// the values against nodata itself.
pub(crate) fn warp_validity(
    src: &Dataset,
    dst: &Dataset,
    spec: &WarpSpec,
    transformer: Transformer,
    src_alpha: bool,
    ignore_nodata: bool,
) -> Result<(), GdalError> {
    let mut args = common_args(spec, transformer);
    args.extend(["-wo", "INIT_DEST=0", "-dstalpha"].map(str::to_owned));
    if ignore_nodata {
        args.extend(["-srcnodata", "None"].map(str::to_owned));
    }
    if src_alpha {
        args.push("-srcalpha".to_owned());
    }
    gdal_warp("", Some(dst), src, &args).map(|_| ())
}

/// A nodata value as `gdalwarp` reads it (`nan` for NaN).
fn nodata_arg(v: f64) -> String {
    if v.is_nan() {
        "nan".to_owned()
    } else {
        v.to_string()
    }
}

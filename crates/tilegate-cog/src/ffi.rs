//! Thin, checked wrappers over the few raw GDAL calls the `gdal` crate does not offer in the
//! form needed here: opening a source with only the drivers its path allows and the error
//! number kept, bulk `GDALDatasetRasterIO` of many bands through a byte buffer, creating a
//! dataset of a runtime type, thread-local config options, and `/vsimem/` files that are
//! always unlinked.

use crate::GdalSaid;
use crate::drivers::SourceDrivers;
use crate::dtype::Dtype;
use crate::error::CogError;
use gdal::Dataset;
use gdal::errors::GdalError;
use gdal_sys::{CPLErr, GDALDataType, GDALRWFlag};
use std::ffi::{CStr, CString, c_char, c_int};
use std::path::Path;
use std::ptr;
use std::sync::Once;
use std::sync::atomic::{AtomicU64, Ordering};
use tilegate_core::WindowRect;

// Error numbers from cpl_error.h (macros, so not in the prebuilt bindings).
const CPLE_HTTP_RESPONSE: c_int = 11;
const CPLE_AWS_BUCKET_NOT_FOUND: c_int = 12;
const CPLE_AWS_OBJECT_NOT_FOUND: c_int = 13;
// Flags from gdal.h and cpl_vsi.h.
const GDAL_OF_RASTER: u32 = 0x02;
const GDAL_OF_VERBOSE_ERROR: u32 = 0x40;
const VSI_STAT_EXISTS_FLAG: c_int = 0x1;
const VSI_STAT_SET_ERROR_FLAG: c_int = 0x8;

/// Harden GDAL (`hardening`) and register its drivers, once per process, before anything is
/// opened.
pub(crate) fn ensure_registered() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        crate::hardening::harden();
        gdal::DriverManager::register_all();
    });
}

/// True for GDAL virtual-file-system paths (`/vsis3/…`, `/vsicurl/…`, `/vsimem/…`).
pub(crate) fn is_virtual(path: &str) -> bool {
    path.starts_with("/vsi")
}

/// True for virtual file systems that go over the network, where a failure may be transient.
pub(crate) fn is_network(path: &str) -> bool {
    const NETWORK: [&str; 9] = [
        "/vsis3",
        "/vsicurl",
        "/vsigs",
        "/vsiaz",
        "/vsiadls",
        "/vsioss",
        "/vsiswift",
        "/vsiwebhdfs",
        "/vsihdfs",
    ];
    NETWORK.iter().any(|p| path.starts_with(p))
        || path.starts_with(&format!("{}/net-", crate::stack::STACK_DIR))
}

fn c_string(s: &str) -> Result<CString, GdalError> {
    CString::new(s).map_err(GdalError::from)
}

/// The calling thread's last GDAL error as a [`GdalError`], number kept; resets it.
pub(crate) fn last_error(class: CPLErr::Type) -> GdalError {
    // SAFETY: CPLGetLastErrorNo/Msg read GDAL's thread-local error state; the message pointer
    // is valid until the next CPL call on this thread, and we copy it out before resetting.
    unsafe {
        let number = gdal_sys::CPLGetLastErrorNo();
        let msg_ptr = gdal_sys::CPLGetLastErrorMsg();
        let msg = if msg_ptr.is_null() {
            String::new()
        } else {
            CStr::from_ptr(msg_ptr).to_string_lossy().into_owned()
        };
        gdal_sys::CPLErrorReset();
        GdalError::CplError { class, number, msg }
    }
}

/// Reset the calling thread's GDAL error state.
pub(crate) fn reset_error() {
    // SAFETY: resets thread-local state; no pointers involved.
    unsafe { gdal_sys::CPLErrorReset() };
}

/// Fail if GDAL recorded an error on this thread since the last reset (for calls such as
/// `GDALClose` that return nothing in GDAL 3.6).
pub(crate) fn check_error() -> Result<(), GdalError> {
    // SAFETY: reads thread-local error state.
    let class = unsafe { gdal_sys::CPLGetLastErrorType() };
    if class == CPLErr::CE_Failure || class == CPLErr::CE_Fatal {
        Err(last_error(class))
    } else {
        Ok(())
    }
}

/// While alive, GDAL's messages on this thread go to `tracing` instead of GDAL's default
/// stderr printer (failures are also returned as errors, so they log at DEBUG; warnings at
/// WARN). The last-error state that [`last_error`] reads is kept either way.
pub(crate) struct ErrorScope(std::marker::PhantomData<*const ()>);

impl ErrorScope {
    pub(crate) fn new() -> Self {
        // SAFETY: pushes onto this thread's handler stack; popped by Drop on the same thread
        // (the guard is neither Send nor Sync because of the raw-pointer marker below).
        unsafe { gdal_sys::CPLPushErrorHandler(Some(gdal_to_tracing)) };
        Self(std::marker::PhantomData)
    }
}

impl Drop for ErrorScope {
    fn drop(&mut self) {
        // SAFETY: pops the handler this guard pushed, on the thread that pushed it.
        unsafe { gdal_sys::CPLPopErrorHandler() };
    }
}

unsafe extern "C" fn gdal_to_tracing(class: CPLErr::Type, number: c_int, msg: *const c_char) {
    let msg = if msg.is_null() {
        std::borrow::Cow::Borrowed("")
    } else {
        // SAFETY: GDAL passes a NUL-terminated message valid for the duration of the call.
        unsafe { CStr::from_ptr(msg) }.to_string_lossy()
    };
    match class {
        CPLErr::CE_Warning => tracing::warn!(gdal_error = number, message = %msg, "gdal warning"),
        CPLErr::CE_Debug => tracing::trace!(message = %msg, "gdal debug"),
        _ => tracing::debug!(gdal_error = number, message = %msg, "gdal error"),
    }
}

/// Thread-local GDAL config options, restored to their previous values on drop.
pub(crate) struct ConfigGuard {
    saved: Vec<(CString, Option<CString>)>,
}

impl ConfigGuard {
    /// Set each `(key, value)` for the calling thread only.
    pub(crate) fn set(options: &[(&str, &str)]) -> Result<Self, GdalError> {
        let mut guard = Self { saved: Vec::new() };
        for (k, v) in options {
            let key = c_string(k)?;
            let value = c_string(v)?;
            // SAFETY: `key` is a valid C string; the returned pointer (if any) is owned by
            // GDAL and copied before the option is changed.
            let prev = unsafe {
                let p = gdal_sys::CPLGetThreadLocalConfigOption(key.as_ptr(), ptr::null());
                (!p.is_null()).then(|| CStr::from_ptr(p).to_owned())
            };
            // SAFETY: both arguments are valid C strings that GDAL copies.
            unsafe { gdal_sys::CPLSetThreadLocalConfigOption(key.as_ptr(), value.as_ptr()) };
            guard.saved.push((key, prev));
        }
        Ok(guard)
    }
}

impl Drop for ConfigGuard {
    fn drop(&mut self) {
        for (key, prev) in self.saved.drain(..).rev() {
            let value = prev.as_ref().map_or(ptr::null(), |v| v.as_ptr());
            // SAFETY: `key` is a valid C string; a null value unsets the thread-local option.
            unsafe { gdal_sys::CPLSetThreadLocalConfigOption(key.as_ptr(), value) };
        }
    }
}

/// Open a source read-only with only the drivers its path allows ([`SourceDrivers`]), and
/// classify a failure: a format not allowed there, missing, corrupt, or (remote only) possibly
/// transient. A VRT is first checked for raw bands (`rawband`); a stacked item is built from its
/// assets (`stack`), never opened by name.
pub(crate) fn open_raster(path: &str) -> Result<Dataset, CogError> {
    ensure_registered();
    let drivers = SourceDrivers::for_path(path);
    if drivers == SourceDrivers::Stack {
        return crate::stack::open(path);
    }
    if drivers.allows("VRT")
        && let Err(feature) = crate::rawband::check(path)
    {
        tracing::debug!(path, feature = %feature, "refused a VRT source");
        return Err(CogError::VrtForbidden {
            path: path.to_owned(),
            feature,
        });
    }
    let c_path = c_string(path).map_err(|source| CogError::Corrupt {
        path: path.to_owned(),
        source: GdalSaid(source),
    })?;
    // Opening must not list a remote "directory" (a bucket prefix) looking for side-cars.
    let config: &[(&str, &str)] = if is_network(path) {
        &[("GDAL_DISABLE_READDIR_ON_OPEN", "EMPTY_DIR")]
    } else {
        &[]
    };
    let _cfg = ConfigGuard::set(config).map_err(|source| CogError::Gdal {
        operation: "set GDAL config options",
        source: GdalSaid(source),
    })?;
    let allowed = CStrList::new(drivers.drivers().iter().copied());
    reset_error();
    // SAFETY: `c_path` is a valid C string and `allowed` a NULL-terminated list of C strings,
    // both alive for the call; null option and sibling lists are allowed.
    let handle = unsafe {
        gdal_sys::GDALOpenEx(
            c_path.as_ptr(),
            GDAL_OF_RASTER | GDAL_OF_VERBOSE_ERROR,
            allowed.as_ptr(),
            ptr::null(),
            ptr::null(),
        )
    };
    if !handle.is_null() {
        // SAFETY: a fresh, non-null handle from GDALOpenEx, owned by the returned Dataset.
        return Ok(unsafe { Dataset::from_c_dataset(handle) });
    }
    let source = last_error(CPLErr::CE_Failure);
    if let Some(driver) = identify_elsewhere(&c_path, drivers) {
        tracing::debug!(
            path,
            driver,
            origin = drivers.origin(),
            "refused a source's format"
        );
        return Err(CogError::SourceFormatForbidden {
            path: path.to_owned(),
            driver,
            origin: drivers.origin(),
        });
    }
    Err(classify_open_failure(path, &c_path, source))
}

/// An owned NULL-terminated list of C strings, for GDAL's `char**` parameters.
struct CStrList {
    _strings: Vec<CString>,
    ptrs: Vec<*const c_char>,
}

impl CStrList {
    /// The list of `items`; one with an interior NUL is left out.
    fn new<'a>(items: impl IntoIterator<Item = &'a str>) -> Self {
        let strings: Vec<CString> = items
            .into_iter()
            .filter_map(|s| CString::new(s).ok())
            .collect();
        let ptrs = strings
            .iter()
            .map(|s| s.as_ptr())
            .chain(std::iter::once(ptr::null()))
            .collect();
        Self {
            _strings: strings,
            ptrs,
        }
    }

    fn as_ptr(&self) -> *const *const c_char {
        self.ptrs.as_ptr()
    }
}

/// After an open with `drivers` failed: the driver GDAL identifies the existing source as, if
/// that driver is not among them. Every registered driver may identify it but `HTTP`, which
/// would download a URL-like name to look at it. (GDAL tries each driver's Identify, then, for
/// drivers without one, an open that is closed at once: header and side-car reads, no pixels.)
fn identify_elsewhere(c_path: &CStr, drivers: SourceDrivers) -> Option<String> {
    if !exists(c_path) {
        return None;
    }
    static IDENTIFIERS: std::sync::OnceLock<Vec<String>> = std::sync::OnceLock::new();
    let names = IDENTIFIERS.get_or_init(|| {
        // SAFETY: the driver manager is initialised (`ensure_registered`).
        let count = unsafe { gdal_sys::GDALGetDriverCount() };
        (0..count)
            // SAFETY: an index below the driver count; a null handle is handled by the callee.
            .filter_map(|i| driver_name(unsafe { gdal_sys::GDALGetDriver(i) }))
            .filter(|n| n != "HTTP")
            .collect()
    });
    let list = CStrList::new(names.iter().map(String::as_str));
    // SAFETY: a valid C string and a NULL-terminated list, alive for the call.
    let driver = unsafe {
        gdal_sys::GDALIdentifyDriverEx(c_path.as_ptr(), GDAL_OF_RASTER, list.as_ptr(), ptr::null())
    };
    reset_error();
    driver_name(driver).filter(|name| !drivers.allows(name))
}

/// A driver's short name (`GTiff`, `VRT`); `None` for a null handle.
fn driver_name(driver: gdal_sys::GDALDriverH) -> Option<String> {
    if driver.is_null() {
        return None;
    }
    // SAFETY: a non-null driver handle from GDAL's driver manager, whose drivers live as long
    // as the process; the short name is a C string owned by the driver.
    let name = unsafe { gdal_sys::GDALGetDriverShortName(driver) };
    // SAFETY: checked non-null; copied out at once.
    (!name.is_null()).then(|| {
        unsafe { CStr::from_ptr(name) }
            .to_string_lossy()
            .into_owned()
    })
}

/// True if the virtual file system finds `c_path` (a file or an object).
fn exists(c_path: &CStr) -> bool {
    let mut stat = StatBuf([0; 512]);
    // SAFETY: `stat` is a writable buffer larger than any `struct stat64` (see `StatBuf`);
    // `c_path` is a valid C string.
    let found = unsafe {
        gdal_sys::VSIStatExL(
            c_path.as_ptr(),
            (&raw mut stat).cast::<gdal_sys::VSIStatBufL>(),
            VSI_STAT_EXISTS_FLAG,
        ) == 0
    };
    reset_error();
    found
}

/// gdal-sys declares `VSIStatBufL` (glibc's `struct stat64`, 144 bytes on x86_64) as an
/// opaque zero-sized type, so a `VSIStatBufL` on the stack is no buffer at all: GDAL would
/// write past it. Hand it a zeroed, suitably aligned buffer larger than any `stat64`.
#[repr(C, align(16))]
struct StatBuf([u8; 512]);

fn classify_open_failure(path: &str, c_path: &CStr, source: GdalError) -> CogError {
    let path_s = path.to_owned();
    if let Some(empty) = zero_sized(path, &source) {
        return empty;
    }
    if !is_virtual(path) {
        return match std::fs::File::open(Path::new(path)) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                CogError::Missing { path: path_s }
            }
            // Exists (readable or not, e.g. permissions) but is no raster GDAL can open:
            // repeating the request cannot help.
            _ => CogError::Corrupt {
                path: path_s,
                source: GdalSaid(source),
            },
        };
    }
    if let GdalError::CplError { number, .. } = &source
        && matches!(
            *number,
            CPLE_AWS_OBJECT_NOT_FOUND | CPLE_AWS_BUCKET_NOT_FOUND
        )
    {
        return CogError::Missing { path: path_s };
    }
    // Ask the virtual file system whether the object exists, with errors recorded.
    let mut stat = StatBuf([0; 512]);
    // SAFETY: `stat` is 512 writable bytes, aligned for `struct stat64`, which GDAL fills in as
    // plain data; `c_path` is a valid NUL-terminated C string.
    let exists = unsafe {
        gdal_sys::VSIStatExL(
            c_path.as_ptr(),
            (&raw mut stat).cast::<gdal_sys::VSIStatBufL>(),
            VSI_STAT_EXISTS_FLAG | VSI_STAT_SET_ERROR_FLAG,
        ) == 0
    };
    if exists {
        return CogError::Corrupt {
            path: path_s,
            source: GdalSaid(source),
        };
    }
    let stat_err = last_error(CPLErr::CE_Failure);
    let not_found = match &stat_err {
        GdalError::CplError { number, msg, .. } => {
            matches!(
                *number,
                CPLE_AWS_OBJECT_NOT_FOUND | CPLE_AWS_BUCKET_NOT_FOUND
            ) || (*number == CPLE_HTTP_RESPONSE && msg.contains("404"))
                || (*number == 0 && !is_network(path))
        }
        _ => false,
    };
    if not_found {
        CogError::Missing { path: path_s }
    } else {
        CogError::Open {
            path: path_s,
            source: GdalSaid(source),
        }
    }
}

/// GDAL refuses zero-sized rasters while opening them (`GDALCheckDatasetDimensions`,
/// `GDALCheckBandCount`); name that failure instead of calling the file corrupt.
fn zero_sized(path: &str, source: &GdalError) -> Option<CogError> {
    let GdalError::CplError { msg, .. } = source else {
        return None;
    };
    let numbers = |s: &str| -> Vec<u32> {
        s.split(|c: char| !c.is_ascii_digit())
            .filter_map(|t| t.parse().ok())
            .collect()
    };
    let (width, height, bands) = if let Some(rest) = msg.strip_prefix("Invalid dataset dimensions")
    {
        match numbers(rest)[..] {
            [w, h, ..] if w == 0 || h == 0 => (w, h, 1),
            _ => return None,
        }
    } else if let Some(rest) = msg.strip_prefix("Invalid band count") {
        match numbers(rest)[..] {
            [0, ..] => (0, 0, 0),
            _ => return None,
        }
    } else {
        return None;
    };
    Some(CogError::EmptyRaster {
        path: path.to_owned(),
        width,
        height,
        bands,
    })
}

/// Create a dataset of a runtime pixel type with `driver`.
pub(crate) fn create(
    driver: &gdal::Driver,
    path: &str,
    width: u32,
    height: u32,
    bands: u32,
    dtype: Dtype,
    options: &[(&str, String)],
) -> Result<Dataset, GdalError> {
    let c_path = c_string(path)?;
    let mut opts = gdal::cpl::CslStringList::new();
    for (k, v) in options {
        opts.set_name_value(k, v)?;
    }
    let dim = |v: u32| c_int::try_from(v).map_err(GdalError::from);
    reset_error();
    // SAFETY: valid driver handle, C string and NULL-terminated option list that outlive the
    // call; GDAL copies what it keeps.
    let handle = unsafe {
        gdal_sys::GDALCreate(
            driver.c_driver(),
            c_path.as_ptr(),
            dim(width)?,
            dim(height)?,
            dim(bands)?,
            dtype.gdal(),
            opts.as_ptr(),
        )
    };
    if handle.is_null() {
        return Err(last_error(CPLErr::CE_Failure));
    }
    // SAFETY: a fresh, non-null handle from GDALCreate, owned by the returned Dataset.
    Ok(unsafe { Dataset::from_c_dataset(handle) })
}

/// Buffer layout for [`raster_io`]: band-sequential unless a row-interleaved layout is
/// requested (all bands of a row, then the next row).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Layout {
    BandSequential,
    RowInterleaved,
}

/// Read or write `bands` (1-based) of `rect` in one `GDALDatasetRasterIO` call, converting
/// to or from `buf_type`. `buf` must hold exactly `width × height × bands × size` bytes.
pub(crate) fn raster_io(
    ds: &Dataset,
    write: bool,
    rect: WindowRect,
    bands: &[u32],
    buf_type: Dtype,
    layout: Layout,
    buf: &mut [u8],
) -> Result<(), GdalError> {
    let size = buf_type.size();
    let (w, h) = (rect.width as usize, rect.height as usize);
    let need = w * h * bands.len() * size;
    if buf.len() != need {
        return Err(GdalError::BadArgument(format!(
            "raster buffer is {} bytes, the window needs {need}",
            buf.len()
        )));
    }
    let int = |v: usize| c_int::try_from(v).map_err(GdalError::from);
    let mut band_map = bands
        .iter()
        .map(|&b| c_int::try_from(b).map_err(GdalError::from))
        .collect::<Result<Vec<c_int>, _>>()?;
    let (pixel, line, band) = match layout {
        Layout::BandSequential => (size, size * w, size * w * h),
        Layout::RowInterleaved => (size, size * w * bands.len(), size * w),
    };
    let flag = if write {
        GDALRWFlag::GF_Write
    } else {
        GDALRWFlag::GF_Read
    };
    reset_error();
    // SAFETY: `buf` holds exactly w×h×bands samples of `buf_type` in the layout described by
    // the pixel/line/band spacings; `band_map` has `bands.len()` entries; the dataset handle is
    // live for the borrow of `ds` and used by this thread only.
    let rv = unsafe {
        gdal_sys::GDALDatasetRasterIO(
            ds.c_dataset(),
            flag,
            int(rect.x as usize)?,
            int(rect.y as usize)?,
            int(w)?,
            int(h)?,
            buf.as_mut_ptr().cast(),
            int(w)?,
            int(h)?,
            buf_type.gdal(),
            int(bands.len())?,
            band_map.as_mut_ptr(),
            int(pixel)?,
            int(line)?,
            int(band)?,
        )
    };
    if rv != CPLErr::CE_None {
        return Err(last_error(rv));
    }
    Ok(())
}

/// The pixel type shared by every band, or the offending GDAL type name.
pub(crate) fn dataset_dtype(ds: &Dataset) -> Result<Dtype, String> {
    let mut found: Option<GDALDataType::Type> = None;
    for i in 1..=ds.raster_count() {
        let band = ds.rasterband(i).map_err(|e| e.to_string())?;
        // SAFETY: a live band handle of a live dataset.
        let t = unsafe { gdal_sys::GDALGetRasterDataType(band.c_rasterband()) };
        match found {
            None => found = Some(t),
            Some(f) if f != t => {
                return Err(format!("mixed {} and {}", type_name(f), type_name(t)));
            }
            Some(_) => {}
        }
    }
    let t = found.unwrap_or(GDALDataType::GDT_Unknown);
    Dtype::from_gdal(t).ok_or_else(|| type_name(t))
}

/// GDAL's name for a type code.
pub(crate) fn type_name(t: GDALDataType::Type) -> String {
    // SAFETY: returns a static string or null.
    let p = unsafe { gdal_sys::GDALGetDataTypeName(t) };
    if p.is_null() {
        return format!("type {t}");
    }
    // SAFETY: non-null static C string from GDAL.
    unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
}

/// Where this crate's in-memory tiles live.
pub(crate) const VSIMEM_DIR: &str = "/vsimem/tilegate-cog";

/// A `/vsimem/` file name unique per process, thread and call, unlinked on drop unless its
/// bytes were taken.
pub(crate) struct VsiMemFile {
    name: String,
    taken: bool,
}

impl VsiMemFile {
    pub(crate) fn new(label: &str) -> Self {
        static SEQ: AtomicU64 = AtomicU64::new(0);
        let n = SEQ.fetch_add(1, Ordering::Relaxed);
        let name = format!(
            "{VSIMEM_DIR}/{}/{:?}/{label}-{n}.tif",
            std::process::id(),
            std::thread::current().id()
        )
        .replace(['(', ')'], "");
        Self { name, taken: false }
    }

    pub(crate) fn name(&self) -> &str {
        &self.name
    }

    /// Take the bytes out of GDAL's memory file system (which unlinks the file).
    pub(crate) fn take(mut self) -> Result<Vec<u8>, GdalError> {
        let bytes = gdal::vsi::get_vsi_mem_file_bytes_owned(&self.name);
        if bytes.is_ok() {
            self.taken = true;
        }
        bytes
    }
}

impl Drop for VsiMemFile {
    fn drop(&mut self) {
        if !self.taken {
            // Error paths: the file may or may not exist; unlink quietly either way.
            if let Ok(c) = CString::new(self.name.as_str()) {
                // SAFETY: a valid C string; VSIUnlink of a missing file just returns -1.
                unsafe { gdal_sys::VSIUnlink(c.as_ptr()) };
            }
            reset_error();
        }
    }
}

/// The least GDAL's block cache is fitted down to.
const BLOCK_CACHE_FLOOR: u64 = 64 << 20;

/// The most any source opened so far asked of the block cache (0 before the first).
static BLOCK_CACHE_FITTED: AtomicU64 = AtomicU64::new(0);

/// Fit GDAL's block cache to what windows share of a source: the source rows one row of
/// windows spans (a block row more, where blocks straddle it), for two rows of windows in
/// flight. A window reads each block it covers once, so a cache larger than that only keeps
/// decoded blocks no one reads again: GDAL's default (5 % of RAM, 1.2 GB here) let a
/// 10240² three-band scene's tile stage hold 300 MB of them, every page faulted in fresh.
/// Only ever lowers the default, grows with the largest source seen, and leaves a
/// `GDAL_CACHEMAX` the user set alone.
pub(crate) fn fit_block_cache(row_bytes: u64, window_height: u32, block_height: u32) {
    static DEFAULT: std::sync::OnceLock<Option<u64>> = std::sync::OnceLock::new();
    let Some(default) = *DEFAULT.get_or_init(|| {
        // GDAL's own lookup, which sees the environment as well as options set in-process.
        let set = gdal::config::get_config_option("GDAL_CACHEMAX", "").is_ok_and(|v| !v.is_empty());
        (!set).then(block_cache_limit)
    }) else {
        return;
    };
    let rows = u64::from(window_height) + u64::from(block_height.max(1));
    let need = (2 * rows * row_bytes).max(BLOCK_CACHE_FLOOR);
    let before = BLOCK_CACHE_FITTED.fetch_max(need, Ordering::Relaxed);
    if need > before {
        let bytes = need.min(default);
        // SAFETY: sets GDAL's global cache size, which GDAL guards itself.
        unsafe { gdal_sys::GDALSetCacheMax64(i64::try_from(bytes).unwrap_or(i64::MAX)) };
        tracing::debug!(bytes, "GDAL block cache fitted to the windows");
    }
}

/// GDAL's block cache limit, in bytes.
pub(crate) fn block_cache_limit() -> u64 {
    // SAFETY: reads GDAL's global cache size.
    u64::try_from(unsafe { gdal_sys::GDALGetCacheMax64() }).unwrap_or(0)
}

/// Drop every block in GDAL's block cache; the bytes it held, in use before.
pub(crate) fn flush_block_cache() -> u64 {
    // SAFETY: GDAL's cache calls guard themselves; flushing a block only drops cached pixels.
    let used = u64::try_from(unsafe { gdal_sys::GDALGetCacheUsed64() }).unwrap_or(0);
    // SAFETY: as above; returns 0 once no block is left to flush.
    while unsafe { gdal_sys::GDALFlushCacheBlock() } != 0 {}
    used
}

//! The COG tile encoder: read one window through a per-thread GDAL handle, apply the recipe,
//! and encode the result as a single-block Cloud Optimized GeoTIFF in memory.
//!
//! A tile is exactly one `recipe.window`-sized block (padded where the window is partial), no
//! overviews and no statistics, so that the assembler can copy each tile's compressed block
//! into the scene COG byte for byte.

use crate::dtype::Dtype;
use crate::error::CogError;
use crate::ffi::{self, ConfigGuard, Layout, VsiMemFile};
use crate::probe;
use crate::semantics::{self, BandSemantics, Semantics};
use gdal::errors::GdalError;
use gdal::{Dataset, DriverManager};
use rayon::prelude::*;
use std::cell::RefCell;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};
use tilegate_cogwrite::{ReducedWindow, Resampling, TileWriter};
use tilegate_core::WindowRect;
use tilegate_core::recipe::{Operation, Recipe};
use tilegate_core::source::SceneMeta;

/// The nodata value of an NDVI tile: written where either input is nodata (or NaN) or where
/// `nir + red == 0`.
pub use tilegate_core::recipe::NDVI_NODATA;

/// Below this block size GDAL's COG option list warns (it still writes a valid COG).
const COG_LISTED_MIN_BLOCK: u32 = 128;

/// How many sources each thread keeps open (least recently used is closed first).
const CACHE_CAPACITY: usize = 4;

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
    Ok(encode(req, true, None)?.0)
}

/// [`encode_window`], and with `reduce` the window reduced 2× — its share of the scene's first
/// overview level — where the native tile writer encoded it and its size is even (`None`
/// otherwise: the assembler then decodes the tile).
pub fn encode_window_reducing(
    req: &EncodeRequest,
    reduce: Option<Resampling>,
) -> Result<(Vec<u8>, Option<ReducedWindow>), CogError> {
    encode(req, true, reduce)
}

/// [`encode_window`] through GDAL's COG driver for every window, never the native tile writer:
/// the reference the native writer is tested against.
pub fn encode_window_with_gdal(req: &EncodeRequest) -> Result<Vec<u8>, CogError> {
    Ok(encode(req, false, None)?.0)
}

fn encode(
    req: &EncodeRequest,
    native: bool,
    reduce: Option<Resampling>,
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
    let tile = with_source(req, |src| match &req.recipe.operation {
        Operation::Copy { .. } => read_copy(src, req, &bands),
        Operation::Ndvi { red, nir } => {
            // NDVI is the expression (nir - red) / (nir + red), Float32, nodata -9999.
            let program =
                tilegate_expr::Program::parse(&format!("(b{nir}-b{red})/(b{nir}+b{red})"))
                    .expect("the NDVI expression parses");
            read_expr(
                src,
                req,
                &program,
                Dtype::Float32,
                NDVI_NODATA,
                Some("NDVI"),
            )
        }
        Operation::Warp(spec) => read_warp(src, req, spec),
        Operation::Expr { expr, ot, nodata } => {
            let bad = |reason: String| {
                CogError::Recipe(tilegate_core::recipe::RecipeError::BadExpression(reason))
            };
            let program = tilegate_expr::Program::parse(expr).map_err(|e| bad(e.to_string()))?;
            let ot =
                Dtype::from_name(ot).ok_or_else(|| bad(format!("unknown output type `{ot}`")))?;
            read_expr(src, req, &program, ot, *nodata, None)
        }
        Operation::Custom {
            name,
            params,
            fingerprint,
            output,
        } => read_custom(src, req, name, params, fingerprint, output.as_ref()),
        Operation::Noop => unreachable!("a noop window reads nothing"),
    })
    .and_then(|pixels| {
        let read = started.elapsed();
        let _times = StepTimesGuard { read, started };
        if native && let Some(writer) = tile_writer(req, &pixels)? {
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
        Ok((write_tile(req, pixels)?, None))
    })
    .inspect_err(|e| {
        if matches!(e, CogError::Read { .. } | CogError::CorruptWindow { .. }) {
            // A retry must not reuse a handle that failed mid-read.
            evict(&req.path);
        }
    })?;
    tracing::debug!(bytes = tile.0.len(), "encoded tile");
    Ok(tile)
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

/// A small per-thread cache by key, most recently used last; when it holds [`CACHE_CAPACITY`]
/// entries, the least recently used goes first.
struct Recent<V> {
    entries: Vec<(String, V)>,
}

impl<V> Recent<V> {
    const fn new() -> Self {
        Self {
            entries: Vec::new(),
        }
    }

    /// The entry for `key`, made by `make` if there is none; it becomes the most recent.
    fn get_or_try_insert<E>(
        &mut self,
        key: &str,
        make: impl FnOnce() -> Result<V, E>,
    ) -> Result<&V, E> {
        match self.entries.iter().position(|(k, _)| k == key) {
            Some(i) => {
                let hit = self.entries.remove(i);
                self.entries.push(hit);
            }
            None => {
                let v = make()?;
                if self.entries.len() >= CACHE_CAPACITY {
                    self.entries.remove(0);
                }
                self.entries.push((key.to_owned(), v));
            }
        }
        Ok(&self.entries.last().expect("just pushed").1)
    }

    fn contains(&self, key: &str) -> bool {
        self.entries.iter().any(|(k, _)| k == key)
    }

    /// Remove the entry for `key` and hand it over.
    fn take(&mut self, key: &str) -> Option<V> {
        let i = self.entries.iter().position(|(k, _)| k == key)?;
        Some(self.entries.remove(i).1)
    }

    fn retain(&mut self, mut keep: impl FnMut(&str, &V) -> bool) {
        self.entries.retain(|(k, v)| keep(k, v));
    }

    fn clear(&mut self) {
        self.entries.clear();
    }
}

thread_local! {
    /// Per thread, per job: the native tile writer learned from a GDAL-written prototype of
    /// the job's tiles, or `None` where the job's tiles need GDAL.
    static WRITERS: RefCell<Recent<Option<Arc<TileWriter>>>> = const { RefCell::new(Recent::new()) };
}

/// The native tile writer for `req`'s job, made on first use from a prototype tile that GDAL's
/// COG driver writes for window (0,0) with zero pixels of the same type, bands and nodata.
fn tile_writer(req: &EncodeRequest, like: &Pixels) -> Result<Option<Arc<TileWriter>>, CogError> {
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

/// Encode every request on rayon's pool; results are in request order.
pub fn encode_windows_parallel(reqs: &[EncodeRequest]) -> Vec<Result<Vec<u8>, CogError>> {
    reqs.par_iter().map(encode_window).collect()
}

/// Close every source the calling thread holds open, and the process's shared handles of
/// strip-organised sources.
pub fn clear_thread_cache() {
    SOURCES.with(|s| s.borrow_mut().clear());
    WRITERS.with(|w| w.borrow_mut().clear());
    SHARED.lock().expect("shared sources lock").clear();
}

/// How many times this process has opened a source for encoding (each thread opens each
/// source once while its cache key stays the same).
pub fn source_opens() -> u64 {
    OPENS.load(Ordering::Relaxed)
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

static OPENS: AtomicU64 = AtomicU64::new(0);

/// A source opened by one thread (cached by its path), with the facts checked against the plan.
struct CachedSource {
    cache_key: String,
    ds: Dataset,
    dtype: Dtype,
    nodata: Vec<Option<f64>>,
    semantics: Semantics,
    /// The source's blocks span the scene's width and more than one window (strips): its
    /// reads go through the process's one shared handle, so that each strip is decoded once
    /// per process rather than once per thread whose windows touch it.
    shared_reads: bool,
}

/// A handle every thread of the process reads a strip-organised source through.
type SharedSource = Arc<std::sync::Mutex<CachedSource>>;

/// The shared handles, by path, each with its cache key (kept beside the handle so that a
/// lookup never waits for a read in progress on it).
static SHARED: std::sync::LazyLock<
    std::sync::Mutex<std::collections::HashMap<String, (String, SharedSource)>>,
> = std::sync::LazyLock::new(Default::default);

/// The process's shared handle of `req`'s source, if a thread has shared one for this cache key.
fn shared_source(req: &EncodeRequest) -> Option<SharedSource> {
    let map = SHARED.lock().expect("shared sources lock");
    map.get(&req.path)
        .filter(|(key, _)| *key == req.cache_key)
        .map(|(_, s)| s.clone())
}

/// Make `opened` the process's shared handle of `req`'s source — or, if another thread shared
/// one for the same cache key first, use that one and close this.
fn share(req: &EncodeRequest, opened: CachedSource) -> SharedSource {
    let mut map = SHARED.lock().expect("shared sources lock");
    match map.get(&req.path) {
        Some((key, s)) if *key == req.cache_key => s.clone(),
        _ => {
            let s = Arc::new(std::sync::Mutex::new(opened));
            map.insert(req.path.clone(), (req.cache_key.clone(), s.clone()));
            s
        }
    }
}

thread_local! {
    /// One dataset handle per source per thread: `Dataset` is `Send` but not `Sync`, and
    /// rayon's `map_init` runs per split rather than per thread.
    static SOURCES: RefCell<Recent<CachedSource>> = const { RefCell::new(Recent::new()) };
}

fn with_source<T>(
    req: &EncodeRequest,
    f: impl FnOnce(&CachedSource) -> Result<T, CogError>,
) -> Result<T, CogError> {
    SOURCES.with(|cell| {
        let mut cache = cell.borrow_mut();
        cache.retain(|path, s| {
            let changed = path == req.path && s.cache_key != req.cache_key;
            if changed {
                tracing::debug!(path = %req.path, cache_key = %req.cache_key, "source changed, reopening");
            }
            !changed
        });
        if !cache.contains(&req.path)
            && let Some(shared) = shared_source(req)
        {
            drop(cache);
            return f(&shared.lock().expect("shared source lock"));
        }
        let local = cache.get_or_try_insert(&req.path, || open_checked(req))?;
        if !local.shared_reads {
            return f(local);
        }
        // A strip source: the handle this thread just opened becomes the process's shared one
        // (the thread keeps none of its own), so it is opened once, not once more per thread.
        let opened = cache.take(&req.path).expect("just opened");
        drop(cache);
        let shared = share(req, opened);
        let src = shared.lock().expect("shared source lock");
        f(&src)
    })
}

fn evict(path: &str) {
    SOURCES.with(|cell| cell.borrow_mut().retain(|p, _| p != path));
    SHARED.lock().expect("shared sources lock").remove(path);
}

fn open_checked(req: &EncodeRequest) -> Result<CachedSource, CogError> {
    let ds = ffi::open_raster(&req.path)?;
    OPENS.fetch_add(1, Ordering::Relaxed);
    // A warp job's grid is the target's: only the source's bands and type are planned.
    let warped = matches!(req.recipe.operation, Operation::Warp(_));
    let found = probe::scene_meta_for(&ds, &req.path, warped)?;
    let plan = &req.scene;
    let size = |m: &SceneMeta| if warped { (0, 0) } else { (m.width, m.height) };
    if (size(&found), found.bands, found.dtype.as_str())
        != (size(plan), plan.bands, plan.dtype.as_str())
    {
        let show = |m: &SceneMeta| format!("{}x{} {}-band {}", m.width, m.height, m.bands, m.dtype);
        return Err(CogError::SceneMismatch {
            path: req.path.clone(),
            planned: show(plan),
            found: show(&found),
        });
    }
    let dtype = probe::dataset_dtype(&ds)?;
    let nodata = probe::band_nodata(&ds, &req.path)?;
    let semantics = semantics::read(&ds).map_err(|source| CogError::Corrupt {
        path: req.path.clone(),
        source,
    })?;
    let (block_w, block_h) =
        ds.rasterband(1)
            .map(|b| b.block_size())
            .map_err(|source| CogError::Corrupt {
                path: req.path.clone(),
                source,
            })?;
    let shared_reads = block_w as u64 >= u64::from(plan.width) && plan.width > req.recipe.window;
    if !warped {
        let row_bytes = u64::from(found.width) * u64::from(found.bands) * dtype.size() as u64;
        ffi::fit_block_cache(row_bytes, req.recipe.window, block_h as u32);
    }
    tracing::debug!(path = %req.path, cache_key = %req.cache_key, shared_reads, "opened source for this thread");
    Ok(CachedSource {
        cache_key: req.cache_key.clone(),
        ds,
        dtype,
        nodata,
        semantics,
        shared_reads,
    })
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

/// A window's output pixels, band-sequential, native-endian, with what the bands mean.
struct Pixels {
    dtype: Dtype,
    bands: u32,
    nodata: Vec<Option<f64>>,
    /// One per band, shared with the source's (nothing is copied per window).
    semantics: Vec<Arc<BandSemantics>>,
    /// Dataset metadata kept on the tile.
    metadata: Arc<[(String, String)]>,
    /// The window of the source's per-dataset mask (0 masked out, 255 valid), if it has one.
    mask: Option<Vec<u8>>,
    bytes: Vec<u8>,
}

fn read_err(req: &EncodeRequest, source: GdalError) -> CogError {
    let (path, rect) = (req.path.clone(), req.rect);
    if ffi::is_network(&req.path) {
        CogError::Read { path, rect, source }
    } else {
        CogError::CorruptWindow { path, rect, source }
    }
}

fn read_bands(
    src: &CachedSource,
    req: &EncodeRequest,
    bands: &[u32],
    dtype: Dtype,
) -> Result<Vec<u8>, CogError> {
    let r = req.rect;
    let mut buf = vec![0u8; r.width as usize * r.height as usize * bands.len() * dtype.size()];
    ffi::raster_io(
        &src.ds,
        false,
        r,
        bands,
        dtype,
        Layout::BandSequential,
        &mut buf,
    )
    .map_err(|e| read_err(req, e))?;
    Ok(buf)
}

/// The window of the source's per-dataset mask, if it has one.
fn read_mask(src: &CachedSource, req: &EncodeRequest) -> Result<Option<Vec<u8>>, CogError> {
    if !src.semantics.dataset_mask {
        return Ok(None);
    }
    let r = req.rect;
    let size = (r.width as usize, r.height as usize);
    let mask = src
        .ds
        .rasterband(1)
        .and_then(|b| {
            b.open_mask_band()?
                .read_as::<u8>((r.x as isize, r.y as isize), size, size, None)
        })
        .map_err(|e| read_err(req, e))?;
    Ok(Some(mask.into_shape_and_vec().1))
}

fn read_copy(src: &CachedSource, req: &EncodeRequest, bands: &[u32]) -> Result<Pixels, CogError> {
    let bytes = read_bands(src, req, bands, src.dtype)?;
    Ok(Pixels {
        dtype: src.dtype,
        bands: u32::try_from(bands.len()).unwrap_or(u32::MAX),
        nodata: bands.iter().map(|&b| src.nodata[b as usize - 1]).collect(),
        semantics: bands
            .iter()
            .map(|&b| Arc::clone(&src.semantics.bands[b as usize - 1]))
            .collect(),
        metadata: src.semantics.metadata.clone(),
        mask: read_mask(src, req)?,
        bytes,
    })
}

/// Samples of some bands over a window grown by a margin (clipped at the scene's edges), as
/// `f64`, with the source's mask over the same region.
struct Region {
    width: usize,
    height: usize,
    /// Where the window starts inside the region.
    window_x: usize,
    window_y: usize,
    /// One per band read, in the order asked for.
    bands: Vec<Vec<f64>>,
    mask: Option<Vec<u8>>,
}

fn read_region(
    src: &CachedSource,
    req: &EncodeRequest,
    bands: &[u32],
    margin: u32,
) -> Result<Region, CogError> {
    let r = req.rect;
    let x0 = r.x.saturating_sub(margin);
    let y0 = r.y.saturating_sub(margin);
    let x1 = (r.x + r.width).saturating_add(margin).min(req.scene.width);
    let y1 = (r.y + r.height)
        .saturating_add(margin)
        .min(req.scene.height);
    let grown = EncodeRequest {
        rect: WindowRect {
            x: x0,
            y: y0,
            width: x1 - x0,
            height: y1 - y0,
        },
        ..req.clone()
    };
    // Float64 is exact for every supported input type, so nodata compares exactly.
    let bytes = if bands.is_empty() {
        Vec::new()
    } else {
        read_bands(src, &grown, bands, Dtype::Float64)?
    };
    let values = Dtype::Float64.decode_f64(&bytes);
    let n = grown.rect.width as usize * grown.rect.height as usize;
    Ok(Region {
        width: grown.rect.width as usize,
        height: grown.rect.height as usize,
        window_x: (r.x - x0) as usize,
        window_y: (r.y - y0) as usize,
        bands: values.chunks(n.max(1)).map(<[f64]>::to_vec).collect(),
        mask: read_mask(src, &grown)?,
    })
}

/// Computed output bands (`f64`, window-sized) as a tile's pixels of `dtype`: `nodata` where
/// `invalid(band, pixel)` or the value is not finite, otherwise the value converted.
fn computed_pixels(
    src: &CachedSource,
    dtype: Dtype,
    nodata: Option<f64>,
    outputs: Vec<Vec<f64>>,
    invalid: impl Fn(usize, usize) -> bool,
    descriptions: Vec<String>,
) -> Pixels {
    let mut bytes = Vec::new();
    for (b, values) in outputs.iter().enumerate() {
        let converted: Vec<f64> = values
            .iter()
            .enumerate()
            .map(|(p, &v)| match nodata {
                Some(nd) if invalid(b, p) || !v.is_finite() => nd,
                _ => dtype.convert(v),
            })
            .collect();
        dtype.encode_f64(&converted, &mut bytes);
    }
    Pixels {
        dtype,
        bands: u32::try_from(outputs.len()).unwrap_or(u32::MAX),
        nodata: vec![nodata; outputs.len()],
        semantics: descriptions
            .iter()
            .map(|d| Arc::new(BandSemantics::plain(d)))
            .collect(),
        metadata: src.semantics.metadata.clone(),
        mask: None,
        bytes,
    }
}

/// Whether a source sample is nodata: NaN, its band's nodata value, or masked out.
fn is_nodata(v: f64, nodata: Option<f64>, mask: Option<&[u8]>, i: usize) -> bool {
    v.is_nan() || nodata == Some(v) || mask.is_some_and(|m| m[i] == 0)
}

/// Evaluate an expression program over the window: one output band per expression, `nodata`
/// wherever a band the expression reads is nodata, NaN or masked out, or the result is not
/// finite (a division by zero).
fn read_expr(
    src: &CachedSource,
    req: &EncodeRequest,
    program: &tilegate_expr::Program,
    dtype: Dtype,
    nodata: f64,
    name: Option<&str>,
) -> Result<Pixels, CogError> {
    let bands = program.bands();
    if let Some(&band) = bands.iter().find(|&&b| b == 0 || b > req.scene.bands) {
        return Err(tilegate_core::recipe::RecipeError::NoSuchBand {
            band,
            bands: req.scene.bands,
        }
        .into());
    }
    let region = read_region(src, req, &bands, 0)?;
    let n = region.width * region.height;
    let slot = |b: u32| {
        bands
            .iter()
            .position(|&x| x == b)
            .expect("a band the program reads")
    };
    let mut outputs = Vec::with_capacity(program.outputs());
    let mut invalid = Vec::with_capacity(program.outputs());
    for i in 0..program.outputs() {
        let band = |b: u32| region.bands[slot(b)].as_slice();
        outputs.push(program.eval(i, n, &band));
        let mut bad = vec![false; n];
        for b in program.output_bands(i) {
            let nd = src.nodata[b as usize - 1];
            for (p, &v) in region.bands[slot(b)].iter().enumerate() {
                bad[p] |= is_nodata(v, nd, None, p);
            }
        }
        if let Some(mask) = &region.mask {
            for (p, &m) in mask.iter().enumerate() {
                bad[p] |= m == 0;
            }
        }
        invalid.push(bad);
    }
    let canonical = program.canonical();
    let descriptions = match name {
        Some(n) => vec![n.to_owned()],
        None => canonical.split(';').map(|e| e.trim().to_owned()).collect(),
    };
    Ok(computed_pixels(
        src,
        dtype,
        Some(nodata),
        outputs,
        |b, p| invalid[b][p],
        descriptions,
    ))
}

/// Run a recipe registered by the binary (see [`crate::recipes`]) over the window and its
/// margin.
fn read_custom(
    src: &CachedSource,
    req: &EncodeRequest,
    name: &str,
    params: &crate::recipes::Params,
    fingerprint: &str,
    output: Option<&tilegate_core::recipe::OutputSpec>,
) -> Result<Pixels, CogError> {
    let mismatch = |reason: String| CogError::RecipeMismatch {
        name: name.to_owned(),
        reason,
    };
    let recipe = crate::recipes::get(name)
        .ok_or_else(|| mismatch("this worker binary has no recipe of that name".into()))?;
    let mine = recipe.fingerprint(params).map_err(&mismatch)?;
    if mine != fingerprint {
        return Err(mismatch(format!(
            "the job was planned as `{fingerprint}`, this worker computes `{mine}`"
        )));
    }
    let output = output.ok_or_else(|| mismatch("the job row has no planned output".into()))?;
    let dtype = Dtype::from_name(&output.dtype)
        .ok_or_else(|| mismatch(format!("unknown output type `{}`", output.dtype)))?;
    let all: Vec<u32> = (1..=req.scene.bands).collect();
    let region = read_region(src, req, &all, recipe.margin(params))?;
    let input = crate::recipes::InputWindow {
        width: region.width,
        height: region.height,
        window_x: region.window_x,
        window_y: region.window_y,
        window_width: req.rect.width as usize,
        window_height: req.rect.height as usize,
        bands: region.bands.iter().map(Vec::as_slice).collect(),
        nodata: &src.nodata,
        mask: region.mask.as_deref(),
    };
    let failed = |message: String| CogError::RecipeFailed {
        name: name.to_owned(),
        rect: req.rect,
        message,
    };
    let outputs = recipe.apply(params, &input).map_err(failed)?;
    let n = input.window_width * input.window_height;
    if outputs.len() != output.bands as usize || outputs.iter().any(|o| o.len() != n) {
        return Err(failed(format!(
            "returned {} bands of {:?} values; declared {} bands of {n}",
            outputs.len(),
            outputs.iter().map(Vec::len).collect::<Vec<_>>(),
            output.bands
        )));
    }
    let descriptions = (1..=output.bands).map(|b| format!("{name} {b}")).collect();
    Ok(computed_pixels(
        src,
        dtype,
        output.nodata,
        outputs,
        |_, _| false,
        descriptions,
    ))
}

/// Warp the window from the source (see [`crate::warp`]): every band, in the source's type and
/// nodata. A source with an alpha band keeps it (warped as alpha); one with neither nodata nor
/// alpha gets a per-dataset mask of where the warper found source pixels (its mask honoured),
/// so that the area outside the source's footprint is masked out rather than black.
fn read_warp(
    src: &CachedSource,
    req: &EncodeRequest,
    spec: &tilegate_core::recipe::WarpSpec,
) -> Result<Pixels, CogError> {
    let r = req.rect;
    let bands = u32::try_from(src.semantics.bands.len()).unwrap_or(u32::MAX);
    let nodata: Option<Vec<f64>> = src.nodata.iter().copied().collect();
    let has_alpha = src
        .semantics
        .bands
        .last()
        .is_some_and(|b| b.color == gdal_sys::GDALColorInterp::GCI_AlphaBand);
    let mask_band = nodata.is_none() && !has_alpha;
    let warp_err = |source| CogError::Warp {
        path: req.path.clone(),
        rect: r,
        source,
    };
    let mem_driver = DriverManager::get_driver_by_name("MEM").map_err(warp_err)?;
    let dst_bands = bands + u32::from(mask_band);
    let mem = ffi::create(
        &mem_driver,
        "",
        r.width,
        r.height,
        dst_bands,
        src.dtype,
        &[],
    )
    .map_err(warp_err)?;
    let mut mem = mem;
    mem.set_geo_transform(&shifted_geotransform(&req.scene.geotransform, r))
        .map_err(warp_err)?;
    mem.set_projection(&req.scene.crs_wkt).map_err(warp_err)?;
    if let Some(values) = &nodata {
        for (i, v) in values.iter().enumerate() {
            mem.rasterband(i + 1)
                .and_then(|mut b| b.set_no_data_value(Some(*v)))
                .map_err(warp_err)?;
        }
    }
    crate::warp::warp_window(
        &src.ds,
        &mem,
        spec,
        nodata.as_deref(),
        has_alpha,
        has_alpha || mask_band,
    )
    .map_err(warp_err)?;
    let pixels = r.width as usize * r.height as usize;
    let mut bytes = vec![0u8; pixels * bands as usize * src.dtype.size()];
    let all: Vec<u32> = (1..=bands).collect();
    let whole = WindowRect { x: 0, y: 0, ..r };
    ffi::raster_io(
        &mem,
        false,
        whole,
        &all,
        src.dtype,
        Layout::BandSequential,
        &mut bytes,
    )
    .map_err(warp_err)?;
    let mask = if mask_band {
        let mut alpha = vec![0u8; pixels];
        ffi::raster_io(
            &mem,
            false,
            whole,
            &[dst_bands],
            Dtype::Byte,
            Layout::BandSequential,
            &mut alpha,
        )
        .map_err(warp_err)?;
        for a in &mut alpha {
            *a = if *a == 0 { 0 } else { 255 };
        }
        Some(alpha)
    } else {
        None
    };
    Ok(Pixels {
        dtype: src.dtype,
        bands,
        nodata: src.nodata.clone(),
        semantics: src.semantics.bands.clone(),
        metadata: src.semantics.metadata.clone(),
        mask,
        bytes,
    })
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

fn write_tile(req: &EncodeRequest, mut px: Pixels) -> Result<Vec<u8>, CogError> {
    let encode_err = |source| CogError::Encode {
        path: req.path.clone(),
        rect: req.rect,
        source,
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

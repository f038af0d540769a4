//! Deterministic synthetic sample scenes: terrain-like multi-octave value noise written as a
//! tiled, DEFLATE-compressed GeoTIFF in UTM zone 33N, for tests and benchmarks.
//!
//! The terrain is a sum of eight octaves of smooth value noise (cells of 1024 down to 8
//! pixels, amplitude halving per octave) plus a little per-pixel noise, all hashed from the
//! seed; each band is a different transform of it. The same options give a byte-identical
//! file: rows are generated in parallel but each from its own coordinates only, and the file
//! is written one full block row at a time, flushed in block order.

use crate::GdalSaid;
use crate::dtype::Dtype;
use crate::error::CogError;
use crate::ffi::{self, Layout};
use gdal::DriverManager;
use gdal::errors::GdalError;
use rayon::prelude::*;
use std::path::Path;
use std::time::{Duration, Instant};
use tilegate_core::WindowRect;
use tilegate_core::source::SceneMeta;

/// EPSG code of every sample scene's CRS (WGS 84 / UTM zone 33N).
pub const SAMPLE_EPSG: u32 = 32633;
/// The geotransform of every sample scene: origin (500000, 5000000), 10 m pixels.
pub const SAMPLE_GEOTRANSFORM: [f64; 6] = [500_000.0, 10.0, 0.0, 5_000_000.0, 0.0, -10.0];
/// Block size of a sample scene's tiles.
pub const SAMPLE_BLOCK: u32 = 512;

/// Amplitude of the per-pixel noise, as a fraction of the value range. Tuned so that a
/// UInt16 scene compresses about 1.5:1 with DEFLATE and the horizontal predictor.
const PIXEL_NOISE: f32 = 0.0015;
/// Float scenes are elevations in metres: `0 ..= FLOAT_RANGE_M`.
const FLOAT_RANGE_M: f64 = 4000.0;

/// What to generate.
#[derive(Debug, Clone, PartialEq)]
pub struct SampleOptions {
    pub width: u32,
    pub height: u32,
    pub bands: u32,
    /// One of the supported GDAL type names (`Byte`, `UInt16`, ... `Float64`).
    pub dtype: String,
    /// If set, the top-left corner triangle (`x + y < min(width, height) / 4`) of every band
    /// is nodata, and no other pixel takes this value.
    pub nodata: Option<f64>,
    pub seed: u64,
}

impl SampleOptions {
    /// A one-band UInt16 scene without nodata, seed 0.
    pub fn new(width: u32, height: u32) -> Self {
        Self {
            width,
            height,
            bands: 1,
            dtype: "UInt16".to_owned(),
            nodata: None,
            seed: 0,
        }
    }

    /// True if pixel `(x, y)` lies in the nodata triangle (when nodata is set).
    pub fn in_nodata_region(&self, x: u32, y: u32) -> bool {
        self.nodata.is_some()
            && u64::from(x) + u64::from(y) < u64::from(self.width.min(self.height) / 4)
    }
}

impl Default for SampleOptions {
    fn default() -> Self {
        Self::new(1024, 1024)
    }
}

/// Write a sample scene to `path` (replacing it) and return its [`SceneMeta`].
pub fn sample_scene(path: &Path, opts: &SampleOptions) -> Result<SceneMeta, CogError> {
    let _gdal_log = ffi::ErrorScope::new();
    let bad = |reason: String| CogError::BadSample { reason };
    let dtype = Dtype::from_name(&opts.dtype).ok_or_else(|| CogError::UnsupportedDtype {
        dtype: opts.dtype.clone(),
    })?;
    if opts.width == 0 || opts.height == 0 || opts.bands == 0 {
        return Err(bad(format!(
            "{}x{} with {} bands is empty",
            opts.width, opts.height, opts.bands
        )));
    }
    if let Some(nd) = opts.nodata
        && !dtype.represents(nd)
    {
        return Err(bad(format!("nodata {nd} is not a {dtype} value")));
    }
    let path_s = path
        .to_str()
        .ok_or_else(|| bad(format!("path {} is not UTF-8", path.display())))?;
    let started = Instant::now();
    let tmp = format!("{path_s}.partial-{}", std::process::id());
    let result = match dtype {
        Dtype::Byte => write_scene::<u8>(&tmp, opts, dtype),
        Dtype::UInt16 => write_scene::<u16>(&tmp, opts, dtype),
        Dtype::Int16 => write_scene::<i16>(&tmp, opts, dtype),
        Dtype::UInt32 => write_scene::<u32>(&tmp, opts, dtype),
        Dtype::Int32 => write_scene::<i32>(&tmp, opts, dtype),
        Dtype::Float32 => write_scene::<f32>(&tmp, opts, dtype),
        Dtype::Float64 => write_scene::<f64>(&tmp, opts, dtype),
    };
    let write_err = |source| CogError::Write {
        path: path_s.to_owned(),
        source,
    };
    let meta = match result {
        Ok(meta) => meta,
        Err(e) => {
            let _ = std::fs::remove_file(&tmp);
            return Err(write_err(GdalSaid(e)));
        }
    };
    std::fs::rename(&tmp, path).map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        write_err(GdalSaid(GdalError::BadArgument(format!(
            "rename {tmp}: {e}"
        ))))
    })?;
    tracing::info!(
        path = path_s,
        width = opts.width,
        height = opts.height,
        bands = opts.bands,
        dtype = %dtype,
        seed = opts.seed,
        elapsed_ms = started.elapsed().as_millis() as u64,
        "wrote sample scene"
    );
    Ok(meta)
}

/// Plain numeric sample types a generated row can hold.
trait Sample: Copy + Send + Sync + Default + 'static {
    fn from_f64(v: f64) -> Self;
    /// Add noise to terrain values, scale them to the type, round, keep them off nodata and
    /// store them. One call per row, with the loop monomorphic and free of iterator adaptors:
    /// the tests run unoptimised builds, where every iterator step is a function call.
    fn fill(v: &[f32], rng_seed: u64, scale: &Scale, out: &mut [Self]);
}

macro_rules! sample_impl {
    ($($t:ty),*) => {$(
        impl Sample for $t {
            fn from_f64(v: f64) -> Self {
                // Saturating for integers; values are already rounded and in range.
                v as $t
            }

            fn fill(v: &[f32], rng_seed: u64, scale: &Scale, out: &mut [Self]) {
                let (lo, span, integer) = (scale.lo, scale.span, scale.integer);
                let (has_nd, nd, nudged) = match scale.nodata {
                    Some(nd) => (true, nd, scale.nudged),
                    None => (false, 0.0, 0.0),
                };
                let k = 2.0 * PIXEL_NOISE / 16_777_216.0;
                let mut x = rng_seed;
                let n = out.len().min(v.len());
                let mut i = 0;
                while i < n {
                    // xorshift64: uniform noise in [-PIXEL_NOISE, PIXEL_NOISE).
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    let s = v[i] + ((x >> 40) as f32) * k - PIXEL_NOISE;
                    let s = if s < 0.0 { 0.0 } else if s > 1.0 { 1.0 } else { s };
                    let off = s as f64 * span;
                    // Integers round half up (`off` is non-negative, so truncation floors).
                    let mut val = if integer { lo + ((off + 0.5) as u64) as f64 } else { lo + off };
                    if has_nd && (val == nd || (val as f32) as f64 == nd) {
                        val = nudged;
                    }
                    out[i] = val as $t;
                    i += 1;
                }
            }
        }
    )*};
}
sample_impl!(u8, u16, i16, u32, i32, f32, f64);

/// View a slice of plain numbers as its bytes.
fn as_bytes_mut<T: Sample>(v: &mut [T]) -> &mut [u8] {
    let len = size_of_val(v);
    // SAFETY: `T` is one of the primitive numeric types above (the trait is private): no
    // padding, every byte initialised, alignment of u8 is 1, and the borrow is unique.
    unsafe { std::slice::from_raw_parts_mut(v.as_mut_ptr().cast::<u8>(), len) }
}

/// Everything that decides a pixel's value; shared read-only by the generating threads.
struct Generator<'a> {
    terrain: Terrain,
    scale: Scale,
    opts: &'a SampleOptions,
}

impl Generator<'_> {
    /// Fill `buf` with block row starting at `y0` (`rows` rows; row-interleaved bands).
    fn strip<T: Sample>(&self, y0: u32, rows: u32, buf: &mut Vec<T>) {
        let row_len = self.opts.width as usize * self.opts.bands as usize;
        buf.clear();
        buf.resize(row_len * rows as usize, T::default());
        buf.par_chunks_mut(row_len)
            .enumerate()
            .for_each(|(i, row)| {
                let y = y0 + u32::try_from(i).unwrap_or(u32::MAX);
                self.row(y, row);
            });
    }

    /// One row, all bands, band after band.
    fn row<T: Sample>(&self, y: u32, row: &mut [T]) {
        let opts = self.opts;
        let w = opts.width as usize;
        let mut t = vec![0f32; w];
        let mut scratch = Vec::new();
        self.terrain.row(y, &mut t, &mut scratch);
        let nd_until = if opts.nodata.is_some() {
            // Pixels x < nd_until of this row are in the nodata triangle.
            let lim = u64::from(opts.width.min(opts.height) / 4);
            usize::try_from(lim.saturating_sub(u64::from(y)))
                .unwrap_or(usize::MAX)
                .min(w)
        } else {
            0
        };
        let mut v = vec![0f32; w];
        for (b, out) in row.chunks_exact_mut(w).enumerate() {
            v.copy_from_slice(&t);
            band_transform(b, &mut v);
            let rng = splitmix(
                opts.seed
                    ^ splitmix((b as u64).wrapping_add(0x5151))
                    ^ splitmix(u64::from(y) ^ 0xa5a5_0000),
            ) | 1;
            T::fill(&v, rng, &self.scale, out);
            if let Some(nd) = opts.nodata {
                out[..nd_until].fill(T::from_f64(nd));
            }
        }
    }
}

fn write_scene<T: Sample>(
    tmp: &str,
    opts: &SampleOptions,
    dtype: Dtype,
) -> Result<SceneMeta, GdalError> {
    ffi::ensure_registered();
    let driver = DriverManager::get_driver_by_name("GTiff")?;
    let predictor = if dtype.is_float() { "3" } else { "2" };
    let threads = rayon::current_num_threads().max(1).to_string();
    let options = [
        ("TILED", "YES".to_owned()),
        ("BLOCKXSIZE", SAMPLE_BLOCK.to_string()),
        ("BLOCKYSIZE", SAMPLE_BLOCK.to_string()),
        ("COMPRESS", "DEFLATE".to_owned()),
        // The fastest level: a sample is an input, its own size hardly matters.
        ("ZLEVEL", "1".to_owned()),
        ("PREDICTOR", predictor.to_owned()),
        ("BIGTIFF", "IF_SAFER".to_owned()),
        ("NUM_THREADS", threads),
    ];
    let (w, h, nb) = (opts.width, opts.height, opts.bands);
    let mut ds = ffi::create(&driver, tmp, w, h, nb, dtype, &options)?;
    let wkt = gdal::spatial_ref::SpatialRef::from_epsg(SAMPLE_EPSG)?.to_wkt()?;
    ds.set_projection(&wkt)?;
    ds.set_geo_transform(&SAMPLE_GEOTRANSFORM)?;
    for b in 1..=nb as usize {
        ds.rasterband(b)?.set_no_data_value(opts.nodata)?;
    }

    let generator = Generator {
        terrain: Terrain::new(opts.seed, w),
        scale: Scale::new(dtype, opts.nodata),
        opts,
    };
    let all_bands: Vec<u32> = (1..=nb).collect();
    let strip_rows = |y0: u32| SAMPLE_BLOCK.min(h - y0);
    let started = Instant::now();
    let mut write_time = Duration::ZERO;
    let mut cur: Vec<T> = Vec::new();
    generator.strip(0, strip_rows(0), &mut cur);
    let mut next: Vec<T> = Vec::new();
    for y0 in (0..h).step_by(SAMPLE_BLOCK as usize) {
        let y1 = y0 + strip_rows(y0);
        // Generate the next block row on the pool while this thread compresses and writes
        // the current one.
        let written = std::thread::scope(|scope| {
            let ahead = (y1 < h).then(|| {
                let (generator, next) = (&generator, &mut next);
                scope.spawn(move || generator.strip(y1, strip_rows(y1), next))
            });
            let t = Instant::now();
            let res = write_strip(&ds, w, y0, strip_rows(y0), &all_bands, dtype, &mut cur);
            write_time += t.elapsed();
            if let Some(handle) = ahead
                && let Err(panic) = handle.join()
            {
                std::panic::resume_unwind(panic);
            }
            res
        });
        written?;
        std::mem::swap(&mut cur, &mut next);
    }
    let t = Instant::now();
    ffi::reset_error();
    ds.close()?;
    ffi::check_error()?;
    write_time += t.elapsed();
    tracing::debug!(
        total_ms = started.elapsed().as_millis() as u64,
        write_ms = write_time.as_millis() as u64,
        "sample scene timings"
    );
    let placement = crate::place::placement(&wkt, &SAMPLE_GEOTRANSFORM, w, h);
    Ok(SceneMeta {
        width: w,
        height: h,
        bands: nb,
        dtype: dtype.name().to_owned(),
        crs_wkt: wkt,
        geotransform: SAMPLE_GEOTRANSFORM,
        nodata: opts.nodata,
        placement,
        datetime: None,
    })
}

/// Write one block row and flush it, in block order, so the file layout never depends on
/// when GDAL's (process-wide) block cache would have evicted it.
fn write_strip<T: Sample>(
    ds: &gdal::Dataset,
    width: u32,
    y0: u32,
    rows: u32,
    bands: &[u32],
    dtype: Dtype,
    buf: &mut [T],
) -> Result<(), GdalError> {
    let rect = WindowRect {
        x: 0,
        y: y0,
        width,
        height: rows,
    };
    ffi::raster_io(
        ds,
        true,
        rect,
        bands,
        dtype,
        Layout::RowInterleaved,
        as_bytes_mut(buf),
    )?;
    for &b in bands {
        let band = ds.rasterband(b as usize)?;
        // SAFETY: a live band handle of a dataset only this thread uses.
        let rv = unsafe { gdal_sys::GDALFlushRasterCache(band.c_rasterband()) };
        if rv != gdal_sys::CPLErr::CE_None {
            return Err(ffi::last_error(rv));
        }
    }
    Ok(())
}

/// Each band is a different transform of the terrain value `t` in [0, 1].
fn band_transform(band: usize, v: &mut [f32]) {
    let mut i = 0;
    match band {
        0 => {}
        1 => {
            while i < v.len() {
                v[i] = 1.0 - v[i];
                i += 1;
            }
        }
        2 => {
            while i < v.len() {
                v[i] *= v[i];
                i += 1;
            }
        }
        3 => {
            while i < v.len() {
                v[i] = v[i].sqrt();
                i += 1;
            }
        }
        _ => {
            let k = std::f32::consts::TAU * (band as f32 / 4.0);
            while i < v.len() {
                v[i] = 0.5 + 0.5 * (k * v[i]).sin();
                i += 1;
            }
        }
    }
}

/// Maps [0, 1] to the type's values, keeping generated pixels off the nodata value.
struct Scale {
    lo: f64,
    span: f64,
    integer: bool,
    nodata: Option<f64>,
    /// What a generated pixel equal to nodata becomes: one unit towards the range's middle.
    nudged: f64,
}

impl Scale {
    fn new(dtype: Dtype, nodata: Option<f64>) -> Self {
        let (lo, hi) = if dtype.is_float() {
            (0.0, FLOAT_RANGE_M)
        } else {
            dtype.range()
        };
        let nd = nodata.unwrap_or(0.0);
        Self {
            lo,
            span: hi - lo,
            integer: !dtype.is_float(),
            nodata,
            nudged: if nd < (lo + hi) / 2.0 {
                nd + 1.0
            } else {
                nd - 1.0
            },
        }
    }
}

fn splitmix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Knot spacing for the coarse octaves: they are evaluated every `KNOT` pixels of a row and
/// linearly interpolated in between (they are smooth at that scale).
const KNOT: usize = 8;
/// Octaves with cells at least this large are evaluated at the knots only.
const COARSE_CELL: u32 = 32;

/// Multi-octave value noise over the scene's columns.
struct Terrain {
    seed: u64,
    octaves: Vec<Octave>,
    width: usize,
    norm: f32,
    /// Linear weights `i / KNOT`.
    knot_weights: Vec<f32>,
}

struct Octave {
    cell: u32,
    amp: f32,
    salt: u64,
    /// Smoothstep weights for each offset inside a cell.
    weights: Vec<f32>,
}

impl Terrain {
    fn new(seed: u64, width: u32) -> Self {
        let mut octaves = Vec::new();
        let mut cell = 1024u32;
        let mut amp = 1.0f32;
        let mut k = 0u64;
        while cell >= 8 {
            let weights = (0..cell)
                .map(|i| {
                    let f = i as f32 / cell as f32;
                    f * f * (3.0 - 2.0 * f)
                })
                .collect();
            octaves.push(Octave {
                cell,
                amp,
                salt: splitmix(seed ^ (k << 32)),
                weights,
            });
            cell /= 2;
            amp *= 0.5;
            k += 1;
        }
        let norm = octaves.iter().map(|o| o.amp).sum();
        Self {
            seed,
            octaves,
            width: width as usize,
            norm,
            knot_weights: (0..KNOT).map(|i| i as f32 / KNOT as f32).collect(),
        }
    }

    fn lattice(&self, salt: u64, i: u64, j: u64) -> f32 {
        let h = splitmix(self.seed ^ salt ^ i.wrapping_mul(0x9e37_79b9) ^ (j << 32));
        (h >> 40) as f32 / 16_777_216.0
    }

    /// One octave's lattice row `y` blended vertically, scaled by its amplitude.
    fn blend(&self, o: &Octave, y: u32, blend: &mut Vec<f32>) {
        let j = u64::from(y / o.cell);
        let fy = o.weights[(y % o.cell) as usize];
        // Enough cells to cover the row and the last knot past its end.
        let n = (self.width + KNOT) / o.cell as usize + 2;
        blend.clear();
        blend.extend((0..n as u64).map(|i| {
            let a = self.lattice(o.salt, i, j);
            let b = self.lattice(o.salt, i, j + 1);
            (a + (b - a) * fy) * o.amp
        }));
    }

    /// Terrain values in [0, 1] for row `y`.
    fn row(&self, y: u32, out: &mut [f32], blend: &mut Vec<f32>) {
        // Coarse octaves at the knots.
        let nk = self.width / KNOT + 2;
        let mut knots_buf = vec![0f32; nk];
        let knots = &mut knots_buf[..];
        for o in self.octaves.iter().filter(|o| o.cell >= COARSE_CELL) {
            self.blend(o, y, blend);
            let (c, b, w) = (o.cell as usize, &blend[..], &o.weights[..]);
            let mut k = 0;
            while k < nk {
                let x = k * KNOT;
                let (i, off) = (x / c, x % c);
                knots[k] += b[i] + (b[i + 1] - b[i]) * w[off];
                k += 1;
            }
        }
        spread(knots, KNOT, &self.knot_weights, out, false);
        // Fine octaves at every pixel.
        for o in self.octaves.iter().filter(|o| o.cell < COARSE_CELL) {
            self.blend(o, y, blend);
            spread(blend, o.cell as usize, &o.weights, out, true);
        }
        stretch(out, self.norm);
    }
}

/// Value-noise sums cluster around the middle of `0..norm`: map to [0, 1] with a stretch.
#[expect(
    clippy::manual_clamp,
    reason = "no call per pixel in unoptimised builds"
)]
fn stretch(out: &mut [f32], norm: f32) {
    let inv = 2.2 / norm;
    let mid = 0.5 * norm;
    let mut x = 0;
    while x < out.len() {
        let v = 0.5 + (out[x] - mid) * inv;
        out[x] = if v < 0.0 {
            0.0
        } else if v > 1.0 {
            1.0
        } else {
            v
        };
        x += 1;
    }
}

/// Interpolate `values` (one per `cell` pixels) across `out` with per-offset `weights`,
/// adding to `out` or replacing it. Plain `while` loops: see [`Sample::fill`].
fn spread(values: &[f32], cell: usize, weights: &[f32], out: &mut [f32], add: bool) {
    let mut x = 0;
    let mut i = 0;
    while x < out.len() {
        let v0 = values[i];
        let d = values[i + 1] - v0;
        let end = (x + cell).min(out.len());
        let mut k = 0;
        if add {
            while x < end {
                out[x] += v0 + d * weights[k];
                x += 1;
                k += 1;
            }
        } else {
            while x < end {
                out[x] = v0 + d * weights[k];
                x += 1;
                k += 1;
            }
        }
        i += 1;
    }
}

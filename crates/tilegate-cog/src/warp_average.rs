//! `-r average` of one window computed here, for the cases where it is GDAL's warper's own
//! arithmetic on pixels GDAL reads: an integer source, with nodata or with every pixel valid,
//! warped through GDAL's approximate transformer.
//!
//! GDAL 3.6's warper spends ~350 ns a target pixel of three bands on an average (its general
//! kernel fetches each source pixel through a per-type, per-band accessor); this spends ~110,
//! every band in one pass over the pixel's box. The
//! arithmetic is the warper's (`GWKAverageOrMode`): each target pixel's top-left and
//! bottom-right corners mapped to the source, the source pixels of that box weighted by the
//! fraction of each that the box covers, per band over the pixels valid in that band (not its
//! nodata), rounded half up. A box narrower than a pixel takes the one pixel it starts in, at
//! the source's edge too. Corners come from GDAL's approximate transformer (within an eighth
//! of a pixel, as `gdalwarp -et 0.125`), a row of corners at a time.
//!
//! Where the warper would do something this does not (a transform that fails, a box wider
//! than [`MAX_BOX`] source pixels as near a pole or across a wrap, a float source, an alpha
//! band or a mask), [`average_window`] returns `None` and the caller warps with GDAL.

use crate::dtype::Dtype;
use crate::ffi::{self, Layout};
use gdal::Dataset;
use gdal::errors::GdalError;
use std::ffi::c_int;
use std::ptr;
use tilegate_core::WindowRect;

/// The widest box (in source pixels, either side) computed here; wider ones go to GDAL.
const MAX_BOX: f64 = 64.0;

/// The most bands averaged here (gray, gray + alpha, RGB, RGBA: what a tile holds).
const MAX_BANDS: usize = 4;

/// The most bytes of source (all bands) one window may read here; GDAL's warper, which reads
/// in chunks, takes larger regions (a base zoom far coarser than the source).
const MAX_SOURCE_BYTES: usize = 512 << 20;

/// The largest source region a thread keeps for its next window.
const KEPT_SOURCE_BYTES: usize = 128 << 20;

thread_local! {
    /// The source region of the thread's last window, kept for the next one (a window's
    /// region is the same size as its neighbours'; allocating it afresh each time costs a page
    /// fault every 4 KiB), unless larger than [`KEPT_SOURCE_BYTES`].
    static REGION: std::cell::Cell<Vec<u64>> = const { std::cell::Cell::new(Vec::new()) };
}

/// Free the calling thread's kept source region.
pub(crate) fn release() {
    REGION.take();
}

/// One window averaged: its bands in the source's type, band after band, invalid pixels at the
/// band's nodata (or 0), and where each pixel had a valid source pixel in some band.
pub(crate) struct Averaged {
    pub bytes: Vec<u8>,
    pub valid: Vec<bool>,
}

/// The source pixel/line of a target grid's corner points, a row at a time: GDAL's exact
/// transformer from `dst`'s pixels to `src`'s under its approximation, with the row buffers.
struct Corners {
    approx: *mut std::ffi::c_void,
    /// The row's corners: x and y (source pixel/line after [`Corners::row`]), z, success.
    xs: Vec<f64>,
    ys: Vec<f64>,
    zs: Vec<f64>,
    ok: Vec<c_int>,
}

impl Corners {
    /// Corners of a grid `width` pixels wide (`width + 1` points a row).
    fn new(src: &Dataset, dst: &Dataset, width: usize) -> Result<Self, GdalError> {
        ffi::reset_error();
        // SAFETY: valid dataset handles; GDAL returns a new transformer or NULL.
        let exact = unsafe {
            gdal_sys::GDALCreateGenImgProjTransformer2(
                src.c_dataset(),
                dst.c_dataset(),
                ptr::null_mut(),
            )
        };
        if exact.is_null() {
            return Err(ffi::last_error(gdal_sys::CPLErr::CE_Failure));
        }
        // SAFETY: `exact` is a GenImgProj transformer; the approximation takes ownership of
        // it, so that destroying the approximation destroys both.
        let approx = unsafe {
            let a = gdal_sys::GDALCreateApproxTransformer(
                Some(gdal_sys::GDALGenImgProjTransform),
                exact,
                crate::warp::Transformer::APPROXIMATE_ERROR,
            );
            if a.is_null() {
                gdal_sys::GDALDestroyGenImgProjTransformer(exact);
            } else {
                gdal_sys::GDALApproxTransformerOwnsSubtransformer(a, 1);
            }
            a
        };
        if approx.is_null() {
            return Err(ffi::last_error(gdal_sys::CPLErr::CE_Failure));
        }
        let n = width + 1;
        Ok(Self {
            approx,
            xs: vec![0.0; n],
            ys: vec![0.0; n],
            zs: vec![0.0; n],
            ok: vec![0; n],
        })
    }

    /// The source pixel/line of the target's corner points `(0..=width, row)` into `xs` and
    /// `ys`; `false` if any point failed.
    fn row(&mut self, row: u32) -> bool {
        for (i, ((x, y), z)) in self
            .xs
            .iter_mut()
            .zip(self.ys.iter_mut())
            .zip(self.zs.iter_mut())
            .enumerate()
        {
            (*x, *y, *z) = (i as f64, f64::from(row), 0.0);
        }
        let n = c_int::try_from(self.xs.len()).unwrap_or(c_int::MAX);
        // SAFETY: four arrays of `n` elements each; the transformer is alive.
        let all = unsafe {
            gdal_sys::GDALApproxTransform(
                self.approx,
                1,
                n,
                self.xs.as_mut_ptr(),
                self.ys.as_mut_ptr(),
                self.zs.as_mut_ptr(),
                self.ok.as_mut_ptr(),
            )
        };
        all != 0 && self.ok.iter().all(|s| *s != 0)
    }
}

impl Drop for Corners {
    fn drop(&mut self) {
        // SAFETY: created in `new`; it owns the exact transformer.
        unsafe { gdal_sys::GDALDestroyApproxTransformer(self.approx) };
    }
}

/// `floor(v)` as an integer, without the `floor` call the baseline x86-64 target makes.
#[inline]
fn floor_i64(v: f64) -> i64 {
    let t = v as i64;
    if (t as f64) > v { t - 1 } else { t }
}

/// `ceil(v)` as an integer.
#[inline]
fn ceil_i64(v: f64) -> i64 {
    let t = v as i64;
    if (t as f64) < v { t + 1 } else { t }
}

/// A source sample type the kernel reads in place.
trait Sample: Copy + Default + PartialEq + 'static {
    fn value(self) -> f64;
    /// `v`, one of the type's values ([`Dtype::represents`]), as this type.
    fn from_value(v: f64) -> Self;
    /// `v` rounded half up and clamped to the type, as native-endian bytes into `out`.
    fn store(v: f64, out: &mut [u8]);
}

macro_rules! sample {
    ($t:ty) => {
        impl Sample for $t {
            #[inline]
            fn value(self) -> f64 {
                f64::from(self)
            }
            fn from_value(v: f64) -> Self {
                v as $t
            }
            #[inline]
            fn store(v: f64, out: &mut [u8]) {
                let r = floor_i64(v + 0.5).clamp(i64::from(<$t>::MIN), i64::from(<$t>::MAX));
                out.copy_from_slice(&(r as $t).to_ne_bytes());
            }
        }
    };
}
sample!(u8);
sample!(u16);
sample!(i16);
sample!(u32);
sample!(i32);

/// Average the window of `dst`'s grid (a MEM dataset with its geotransform and CRS) from
/// `src`'s `bands`, or `None` where GDAL's warper must do it (see the module's notes).
pub(crate) fn average_window(
    src: &Dataset,
    dst: &Dataset,
    rect: WindowRect,
    dtype: Dtype,
    bands: u32,
    nodata: Option<&[f64]>,
) -> Result<Option<Averaged>, GdalError> {
    if bands == 0 || bands as usize > MAX_BANDS {
        return Ok(None);
    }
    match dtype {
        Dtype::Byte => average::<u8>(src, dst, rect, dtype, bands, nodata),
        Dtype::UInt16 => average::<u16>(src, dst, rect, dtype, bands, nodata),
        Dtype::Int16 => average::<i16>(src, dst, rect, dtype, bands, nodata),
        Dtype::UInt32 => average::<u32>(src, dst, rect, dtype, bands, nodata),
        Dtype::Int32 => average::<i32>(src, dst, rect, dtype, bands, nodata),
        Dtype::Float32 | Dtype::Float64 => Ok(None),
    }
}

fn average<T: Sample>(
    src: &Dataset,
    dst: &Dataset,
    rect: WindowRect,
    dtype: Dtype,
    bands: u32,
    nodata: Option<&[f64]>,
) -> Result<Option<Averaged>, GdalError> {
    let (w, h) = (rect.width as usize, rect.height as usize);
    let (sw, sh) = src.raster_size();
    let (sw, sh) = (sw as f64, sh as f64);
    let mut c = Corners::new(src, dst, w)?;
    let n = w + 1;
    // First pass: the source region every box lies in, and whether each box is one this
    // kernel computes as the warper does. `p…`: the row of corners above.
    let (mut x0, mut y0, mut x1, mut y1) = (f64::MAX, f64::MAX, f64::MIN, f64::MIN);
    let (mut pxs, mut pys) = (vec![0.0; n], vec![0.0; n]);
    for r in 0..=h as u32 {
        if !c.row(r) {
            return Ok(None);
        }
        let (xs, ys) = (&c.xs, &c.ys);
        for i in 0..n {
            x0 = x0.min(xs[i]);
            x1 = x1.max(xs[i]);
            y0 = y0.min(ys[i]);
            y1 = y1.max(ys[i]);
            if r > 0 && i > 0 {
                let bw = (xs[i] - pxs[i - 1]).abs();
                let bh = (ys[i] - pys[i - 1]).abs();
                if !(bw <= MAX_BOX && bh <= MAX_BOX) {
                    return Ok(None);
                }
            }
        }
        std::mem::swap(&mut c.xs, &mut pxs);
        std::mem::swap(&mut c.ys, &mut pys);
    }
    let clamp = |v: f64, hi: f64| v.clamp(0.0, hi);
    let (rx0, ry0) = (clamp((x0 - 1.0).floor(), sw), clamp((y0 - 1.0).floor(), sh));
    let (rx1, ry1) = (clamp((x1 + 1.0).ceil(), sw), clamp((y1 + 1.0).ceil(), sh));
    let (rw, rh) = ((rx1 - rx0) as usize, (ry1 - ry0) as usize);
    let size = dtype.size();
    let mut out = vec![0u8; w * h * bands as usize * size];
    let mut valid = vec![false; w * h];
    if let Some(values) = nodata {
        for (b, v) in values.iter().enumerate().take(bands as usize) {
            for o in out[b * w * h * size..(b + 1) * w * h * size].chunks_exact_mut(size) {
                T::store(*v, o);
            }
        }
    }
    if rw == 0 || rh == 0 {
        return Ok(Some(Averaged { bytes: out, valid }));
    }
    if rw * rh * bands as usize * size > MAX_SOURCE_BYTES {
        return Ok(None);
    }
    let plane = rw * rh;
    let nb = bands as usize;
    // The region's samples, in a buffer each thread keeps between windows (8-aligned, so
    // that it can be viewed as any sample type), filled by GDAL.
    let mut region_buf = REGION.take();
    let words = (plane * nb * size).div_ceil(8);
    region_buf.resize(words, 0);
    let result = (|| {
        // SAFETY: the buffer is 8-aligned and holds at least `plane × bands` samples of `T`
        // (at most 8 bytes each); every bit pattern is a valid integer.
        let data: &mut [T] = unsafe {
            std::slice::from_raw_parts_mut(region_buf.as_mut_ptr().cast::<T>(), plane * nb)
        };
        {
            // SAFETY: the same samples viewed as bytes (alignment 1) for GDAL to fill.
            let raw = unsafe {
                std::slice::from_raw_parts_mut(data.as_mut_ptr().cast::<u8>(), data.len() * size)
            };
            let region = WindowRect {
                x: rx0 as u32,
                y: ry0 as u32,
                width: rw as u32,
                height: rh as u32,
            };
            let all: Vec<u32> = (1..=bands).collect();
            ffi::raster_io(src, false, region, &all, dtype, Layout::BandSequential, raw)?;
        }
        let data: &[T] = data;
        // A nodata value the type cannot hold marks no pixel.
        let nodata: Vec<Option<T>> = (0..nb)
            .map(|b| {
                nodata
                    .and_then(|v| v.get(b).copied())
                    .filter(|v| dtype.represents(*v))
                    .map(T::from_value)
            })
            .collect();
        let region = Region {
            data,
            plane,
            width: rw,
            origin: (rx0 as i64, ry0 as i64),
            source: (sw as i64, sh as i64),
        };
        // Second pass: rows of corners again (the first row into `p…`), a target row at a time.
        if !c.row(0) {
            return Ok(false);
        }
        std::mem::swap(&mut c.xs, &mut pxs);
        std::mem::swap(&mut c.ys, &mut pys);
        let mut rows = Rows {
            corners: &mut c,
            above: (&mut pxs, &mut pys),
            width: w,
            height: h,
            out: &mut out,
            valid: &mut valid,
        };
        let any_nodata = nodata.iter().any(Option::is_some);
        macro_rules! rows {
            ($nb:literal) => {
                if any_nodata {
                    rows.average::<T, $nb, true>(&region, &nodata)
                } else {
                    rows.average::<T, $nb, false>(&region, &nodata)
                }
            };
        }
        Ok::<_, GdalError>(match nb {
            1 => rows!(1),
            2 => rows!(2),
            3 => rows!(3),
            _ => rows!(4),
        })
    })();
    if region_buf.capacity() * 8 <= KEPT_SOURCE_BYTES {
        REGION.set(region_buf);
    }
    if !result? {
        return Ok(None);
    }
    Ok(Some(Averaged { bytes: out, valid }))
}

/// A window's source region: its samples band after band, where it lies in the source, and
/// the source's size.
struct Region<'a, T> {
    data: &'a [T],
    plane: usize,
    width: usize,
    origin: (i64, i64),
    source: (i64, i64),
}

/// The second pass over a window: corners a row at a time, the row above kept, and the
/// window's output.
struct Rows<'a> {
    corners: &'a mut Corners,
    above: (&'a mut Vec<f64>, &'a mut Vec<f64>),
    width: usize,
    height: usize,
    out: &'a mut [u8],
    valid: &'a mut [bool],
}

impl Rows<'_> {
    /// Every target pixel averaged from `region`: `NB` bands, `NODATA` whether some band has
    /// a nodata value (without one, every pixel of a box counts and its weight is the box's).
    /// `false` if a row of corners failed to transform.
    fn average<T: Sample, const NB: usize, const NODATA: bool>(
        &mut self,
        region: &Region<T>,
        nodata: &[Option<T>],
    ) -> bool {
        let (w, h) = (self.width, self.height);
        let size = size_of::<T>();
        let nd: [Option<T>; NB] = std::array::from_fn(|b| nodata[b]);
        let (ox, oy) = region.origin;
        let (isw, ish) = region.source;
        let mut wx = Vec::with_capacity(MAX_BOX as usize + 2);
        let mut wy = Vec::with_capacity(MAX_BOX as usize + 2);
        for r in 0..h {
            if !self.corners.row(r as u32 + 1) {
                return false;
            }
            let (pxs, pys) = (&*self.above.0, &*self.above.1);
            let (xs, ys) = (&self.corners.xs, &self.corners.ys);
            for i in 0..w {
                // The box between the pixel's top-left and bottom-right corners, in source
                // pixels.
                let (ax, bx) = (pxs[i].min(xs[i + 1]), pxs[i].max(xs[i + 1]));
                let (ay, by) = (pys[i].min(ys[i + 1]), pys[i].max(ys[i + 1]));
                let (sx0, sx1) = span(ax, bx, isw);
                let (sy0, sy1) = span(ay, by, ish);
                if sx1 <= sx0 || sy1 <= sy0 {
                    continue;
                }
                weigh(sx0, sx1, ax, bx, &mut wx);
                weigh(sy0, sy1, ay, by, &mut wy);
                let first = (sx0 - ox) as usize;
                let cols = wx.len();
                // Without nodata every pixel counts: a row's weight is the x weights' sum.
                let row_weight = if NODATA {
                    0.0
                } else {
                    wx.iter().fold(0.0, |a, v| a + v)
                };
                // GDAL weighs each source pixel by (x coverage × y coverage); here a row's
                // x-weighted sum is taken first, then weighted by its y coverage.
                let (mut sum, mut weight) = ([0.0f64; NB], [0.0f64; NB]);
                for (sy, wyv) in (sy0..sy1).zip(&wy) {
                    let at = (sy - oy) as usize * region.width + first;
                    for b in 0..NB {
                        let start = b * region.plane + at;
                        let row = &region.data[start..start + cols];
                        let (mut acc, mut accw) = (0.0f64, 0.0f64);
                        for (v, wxv) in row.iter().zip(&wx) {
                            if !NODATA || nd[b] != Some(*v) {
                                acc += v.value() * wxv;
                                if NODATA {
                                    accw += wxv;
                                }
                            }
                        }
                        sum[b] += acc * wyv;
                        weight[b] += if NODATA { accw } else { row_weight } * wyv;
                    }
                }
                let p = r * w + i;
                for b in 0..NB {
                    if weight[b] > 0.0 {
                        self.valid[p] = true;
                        let o = (b * w * h + p) * size;
                        T::store(sum[b] / weight[b], &mut self.out[o..o + size]);
                    }
                }
            }
            std::mem::swap(&mut self.corners.xs, self.above.0);
            std::mem::swap(&mut self.corners.ys, self.above.1);
        }
        true
    }
}

/// The source pixels `[lo, hi)` a box edge-to-edge from `a` to `b` touches on an axis of `n`
/// pixels; a box narrower than a pixel takes the one it starts in.
#[inline]
fn span(a: f64, b: f64, n: i64) -> (i64, i64) {
    let lo = floor_i64(a + 1e-10).max(0);
    let mut hi = ceil_i64(b - 1e-10).min(n);
    if lo == hi && hi < n {
        hi += 1;
    }
    (lo, hi)
}

/// How much of each pixel of `[lo, hi)` the box from `a` to `b` covers (1 for a lone pixel).
#[inline]
fn weigh(lo: i64, hi: i64, a: f64, b: f64, out: &mut Vec<f64>) {
    out.clear();
    if hi - lo == 1 {
        out.push(1.0);
    } else {
        out.extend((lo..hi).map(|k| {
            let k = k as f64;
            (k + 1.0).min(b) - k.max(a)
        }));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::warp::{Transformer, warp_window};
    use gdal::DriverManager;
    use gdal::spatial_ref::{AxisMappingStrategy, CoordTransform, SpatialRef as SpatialReference};
    use tilegate_core::recipe::WarpSpec;

    const SRC: (usize, usize) = (400, 300);
    const DST: u32 = 192;

    /// A UTM 33N scene of three Byte bands: texture and noise, a corner of nodata (0) in every
    /// band and single-band holes, or (`nodata` false) no nodata at all.
    fn source(nodata: bool) -> Dataset {
        let mem = DriverManager::get_driver_by_name("MEM").unwrap();
        let (w, h) = SRC;
        let mut ds = ffi::create(&mem, "", w as u32, h as u32, 3, Dtype::Byte, &[]).unwrap();
        ds.set_geo_transform(&[500_000.0, 10.0, 0.0, 5_000_000.0, 0.0, -10.0])
            .unwrap();
        ds.set_projection(
            &SpatialReference::from_epsg(32633)
                .unwrap()
                .to_wkt()
                .unwrap(),
        )
        .unwrap();
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        let mut bytes = vec![0u8; w * h * 3];
        for b in 0..3 {
            for y in 0..h {
                for x in 0..w {
                    state ^= state << 13;
                    state ^= state >> 7;
                    state ^= state << 17;
                    let smooth = ((x / 7 + y / 5) * (b + 3)) % 200;
                    let mut v = (1 + smooth + (state % 50) as usize) as u8;
                    if nodata && ((x < 60 && y < 60) || (b == 1 && state.is_multiple_of(31))) {
                        v = 0;
                    }
                    bytes[(b * h + y) * w + x] = v;
                }
            }
        }
        let rect = WindowRect {
            x: 0,
            y: 0,
            width: w as u32,
            height: h as u32,
        };
        ffi::raster_io(
            &ds,
            true,
            rect,
            &[1, 2, 3],
            Dtype::Byte,
            Layout::BandSequential,
            &mut bytes,
        )
        .unwrap();
        if nodata {
            for b in 1..=3 {
                ds.rasterband(b)
                    .unwrap()
                    .set_no_data_value(Some(0.0))
                    .unwrap();
            }
        }
        ds
    }

    /// A Web Mercator grid of 25 m pixels whose top-left lies outside the scene, so that its
    /// windows meet the scene's edges and its nodata corner.
    fn target(bands: u32) -> Dataset {
        let mem = DriverManager::get_driver_by_name("MEM").unwrap();
        let mut ds = ffi::create(&mem, "", DST, DST, bands, Dtype::Byte, &[]).unwrap();
        let mut utm = SpatialReference::from_epsg(32633).unwrap();
        let mut merc = SpatialReference::from_epsg(3857).unwrap();
        utm.set_axis_mapping_strategy(AxisMappingStrategy::TraditionalGisOrder);
        merc.set_axis_mapping_strategy(AxisMappingStrategy::TraditionalGisOrder);
        let t = CoordTransform::new(&utm, &merc).unwrap();
        let (mut x, mut y) = ([500_000.0], [5_000_000.0]);
        t.transform_coords(&mut x, &mut y, &mut []).unwrap();
        ds.set_geo_transform(&[x[0] - 300.0, 25.0, 0.0, y[0] + 200.0, 0.0, -25.0])
            .unwrap();
        ds.set_projection(&merc.to_wkt().unwrap()).unwrap();
        ds
    }

    /// Pixels whose 3×3 neighbourhood holds both valid and invalid pixels.
    fn edge(valid: &[bool], n: usize) -> Vec<bool> {
        (0..n * n)
            .map(|p| {
                let (x, y) = ((p % n) as i64, (p / n) as i64);
                let near: Vec<bool> = (-1..=1)
                    .flat_map(|dy| (-1..=1).map(move |dx| (x + dx, y + dy)))
                    .filter(|(x, y)| (0..n as i64).contains(x) && (0..n as i64).contains(y))
                    .map(|(x, y)| valid[(y as usize) * n + x as usize])
                    .collect();
                near.iter().any(|v| *v) && !near.iter().all(|v| *v)
            })
            .collect()
    }

    fn read(ds: &Dataset, bands: &[u32]) -> Vec<u8> {
        let rect = WindowRect {
            x: 0,
            y: 0,
            width: DST,
            height: DST,
        };
        let mut out = vec![0u8; (DST * DST) as usize * bands.len()];
        ffi::raster_io(
            ds,
            false,
            rect,
            bands,
            Dtype::Byte,
            Layout::BandSequential,
            &mut out,
        )
        .unwrap();
        out
    }

    #[test]
    fn an_average_equals_the_warpers_within_its_own_tolerance() {
        let n = DST as usize;
        let rect = WindowRect {
            x: 0,
            y: 0,
            width: DST,
            height: DST,
        };
        for nodata in [true, false] {
            let src = source(nodata);
            let values = [0.0; 3];
            let dst = target(3);
            let ours = average_window(
                &src,
                &dst,
                rect,
                Dtype::Byte,
                3,
                nodata.then_some(&values[..]),
            )
            .unwrap()
            .expect("computed here");
            // The warper's exact result: with nodata, each band at its nodata where invalid;
            // without, an alpha band of where it found source pixels.
            let reference = target(if nodata { 3 } else { 4 });
            if nodata {
                for b in 1..=3 {
                    let mut band = reference.rasterband(b).unwrap();
                    band.set_no_data_value(Some(0.0)).unwrap();
                }
            }
            let spec = WarpSpec {
                t_srs: reference.projection(),
                tr: None,
                tap: false,
                origin: None,
                resampling: "average".into(),
            };
            let nd = nodata.then_some(&values[..]);
            warp_window(
                &src,
                &reference,
                &spec,
                Transformer::Exact,
                nd,
                false,
                !nodata,
            )
            .unwrap();
            let want = read(&reference, &[1, 2, 3]);
            // GDAL's own tolerance: how far its approximate warp strays from its exact one.
            let approx = target(if nodata { 3 } else { 4 });
            if nodata {
                for b in 1..=3 {
                    let mut band = approx.rasterband(b).unwrap();
                    band.set_no_data_value(Some(0.0)).unwrap();
                }
            }
            warp_window(
                &src,
                &approx,
                &spec,
                Transformer::Approximate,
                nd,
                false,
                !nodata,
            )
            .unwrap();
            let gdal_own = read(&approx, &[1, 2, 3])
                .iter()
                .zip(&want)
                .filter(|(a, b)| **a != 0 && **b != 0)
                .map(|(a, b)| (i32::from(*a) - i32::from(*b)).abs())
                .max()
                .unwrap_or(0);
            let alpha = (!nodata).then(|| read(&reference, &[4]));
            let (mut compared, mut largest) = (0usize, 0i32);
            for b in 0..3 {
                let plane = |v: &[u8]| v[b * n * n..(b + 1) * n * n].to_vec();
                let (got, want) = (plane(&ours.bytes), plane(&want));
                let want_valid: Vec<bool> = match &alpha {
                    Some(a) => a.iter().map(|v| *v != 0).collect(),
                    None => want.iter().map(|v| *v != 0).collect(),
                };
                let got_valid: Vec<bool> = if nodata {
                    got.iter().map(|v| *v != 0).collect()
                } else {
                    ours.valid.clone()
                };
                let edge = edge(&want_valid, n);
                for p in 0..n * n {
                    assert!(
                        got_valid[p] == want_valid[p] || edge[p],
                        "nodata {nodata}, band {b}, pixel {p}: validity {} against {}",
                        got_valid[p],
                        want_valid[p]
                    );
                    if got_valid[p] && want_valid[p] {
                        compared += 1;
                        largest = largest.max((i32::from(got[p]) - i32::from(want[p])).abs());
                    }
                }
            }
            // Most of the grid lies on the scene; the approximation strays as GDAL's does.
            assert!(compared > n * n * 3 / 2, "{compared}");
            assert!(
                largest <= gdal_own.max(1),
                "nodata {nodata}: largest difference {largest}, GDAL's own {gdal_own}"
            );
        }
    }
}

//! Overview levels the way GDAL 3.6's COG driver builds them, measured against
//! `gdal_translate -of COG` (see the crate docs for the rules): sizes, 2× reduction from the
//! previous level, area-weighted nodata-aware average or nearest, and block encoding.

use crate::Resampling;
use crate::codec::{BlockShape, Codec};
use crate::tiff::Endian;
use crate::tile::Format;
use rayon::prelude::*;

/// Overview sizes for a `width × height` image on `block`-pixel blocks, like GDAL 3.6's COG
/// driver: halve, rounding down but never below 1, while either dimension exceeds the block.
/// (`gdaladdo` rounds up instead; NOTES.md.) Checked against GDAL: 1300×900/256 →
/// 650×450, 325×225, 162×112; 1025²/256 → 512², 256²; 1000×3/256 → 500×1, 250×1.
pub fn overview_sizes(width: u32, height: u32, block: u32) -> Vec<(u32, u32)> {
    let (mut w, mut h) = (width, height);
    let mut out = Vec::new();
    while w > block || h > block {
        w = (w / 2).max(1);
        h = (h / 2).max(1);
        out.push((w, h));
    }
    out
}

/// A sample type the native path handles.
pub(crate) trait Sample: Copy + Send + Sync + PartialEq + Default + 'static {
    const BYTES: usize;
    fn read(e: Endian, b: &[u8]) -> Self;
    fn write(self, e: Endian, b: &mut [u8]);
    fn to_f64(self) -> f64;
    /// An average back to the sample type: integers round half away from zero (GDAL 3.6's
    /// average does, measured on Int16) and saturate; floats are cast.
    fn from_mean(v: f64) -> Self;
    /// The nodata value in this type, if it is representable (GDAL compares in the band's
    /// type: an Int16 band with nodata 1.5 has no nodata pixels).
    fn from_nodata(v: f64) -> Option<Self>;
    fn is_nan(self) -> bool;
    /// Two's-complement addition on the sample's bits: predictor 2 (TIFF 6.0 §14) adds
    /// samples as unsigned words of their width, wrapping.
    fn wrapping_add(self, o: Self) -> Self;
    fn wrapping_sub(self, o: Self) -> Self;
    /// What an output pixel with no valid input becomes when there is no nodata.
    fn empty() -> Self;
    /// The average of a 2×2 box, nodata excluded (`fill` when nothing is valid): the mean of
    /// the valid samples through [`Sample::from_mean`]. Integer types compute it exactly in
    /// integers, with the same rounding.
    fn box4(v: [Self; 4], validity: Validity<Self>) -> Self {
        let mut sum = 0.0;
        let mut n = 0u32;
        for x in v {
            if validity.valid(x) {
                sum += x.to_f64();
                n += 1;
            }
        }
        if n > 0 {
            Self::from_mean(sum / f64::from(n))
        } else {
            validity.fill()
        }
    }
}

macro_rules! int_sample {
    ($t:ty) => {
        impl Sample for $t {
            const BYTES: usize = std::mem::size_of::<$t>();
            fn read(e: Endian, b: &[u8]) -> Self {
                let mut a = [0u8; Self::BYTES];
                a.copy_from_slice(&b[..Self::BYTES]);
                match e {
                    Endian::Little => <$t>::from_le_bytes(a),
                    Endian::Big => <$t>::from_be_bytes(a),
                }
            }
            fn write(self, e: Endian, b: &mut [u8]) {
                b[..Self::BYTES].copy_from_slice(&match e {
                    Endian::Little => self.to_le_bytes(),
                    Endian::Big => self.to_be_bytes(),
                });
            }
            fn to_f64(self) -> f64 {
                f64::from(self)
            }
            fn from_mean(v: f64) -> Self {
                // `as` saturates; `round` is half away from zero.
                v.round() as $t
            }
            fn from_nodata(v: f64) -> Option<Self> {
                let t = v as $t;
                (f64::from(t) == v).then_some(t)
            }
            fn is_nan(self) -> bool {
                false
            }
            fn wrapping_add(self, o: Self) -> Self {
                <$t>::wrapping_add(self, o)
            }
            fn wrapping_sub(self, o: Self) -> Self {
                <$t>::wrapping_sub(self, o)
            }
            fn empty() -> Self {
                0
            }
            fn box4(v: [Self; 4], validity: Validity<Self>) -> Self {
                let (mut sum, mut n) = (0i64, 0i64);
                for x in v {
                    if validity.valid(x) {
                        sum += i64::from(x);
                        n += 1;
                    }
                }
                if n == 0 {
                    return validity.fill();
                }
                // round(sum / n), half away from zero, exactly: ⌊(2·sum + n) / 2n⌋ for a
                // non-negative sum, mirrored for a negative one. The mean of samples of this
                // type is within its range.
                let q = if sum >= 0 {
                    (2 * sum + n) / (2 * n)
                } else {
                    -((-2 * sum + n) / (2 * n))
                };
                q as $t
            }
        }
    };
}

macro_rules! float_sample {
    ($t:ty, $bits:ty) => {
        impl Sample for $t {
            const BYTES: usize = std::mem::size_of::<$t>();
            fn read(e: Endian, b: &[u8]) -> Self {
                let mut a = [0u8; Self::BYTES];
                a.copy_from_slice(&b[..Self::BYTES]);
                <$t>::from_bits(match e {
                    Endian::Little => <$bits>::from_le_bytes(a),
                    Endian::Big => <$bits>::from_be_bytes(a),
                })
            }
            fn write(self, e: Endian, b: &mut [u8]) {
                let bits = self.to_bits();
                b[..Self::BYTES].copy_from_slice(&match e {
                    Endian::Little => bits.to_le_bytes(),
                    Endian::Big => bits.to_be_bytes(),
                });
            }
            fn to_f64(self) -> f64 {
                f64::from(self)
            }
            fn from_mean(v: f64) -> Self {
                v as $t
            }
            fn from_nodata(v: f64) -> Option<Self> {
                Some(v as $t)
            }
            fn is_nan(self) -> bool {
                <$t>::is_nan(self)
            }
            fn wrapping_add(self, o: Self) -> Self {
                <$t>::from_bits(self.to_bits().wrapping_add(o.to_bits()))
            }
            fn wrapping_sub(self, o: Self) -> Self {
                <$t>::from_bits(self.to_bits().wrapping_sub(o.to_bits()))
            }
            fn empty() -> Self {
                <$t>::NAN
            }
        }
    };
}

int_sample!(u8);
int_sample!(i8);
int_sample!(u16);
int_sample!(i16);
int_sample!(u32);
int_sample!(i32);
float_sample!(f32, u32);
float_sample!(f64, u64);

/// One level's pixels, pixel-interleaved (`spp` samples per pixel), row-major.
pub(crate) struct Raster<T> {
    pub width: usize,
    pub height: usize,
    pub spp: usize,
    pub data: Vec<T>,
}

/// What a pixel is worth to the average: nodata pixels are not. NaN is excluded only when
/// nodata is NaN; otherwise it propagates (any NaN input gives NaN), as GDAL 3.6's average does
/// (measured on Float32 with nodata NaN, -9999 and none).
#[derive(Clone, Copy)]
pub(crate) struct Validity<T> {
    pub nodata: Option<T>,
}

impl<T: Sample> Validity<T> {
    /// Validity under a band's nodata value, compared in the sample type (an Int16 band with
    /// nodata 1.5 has no nodata pixels).
    pub(crate) fn of(nodata: Option<f64>) -> Self {
        Self {
            nodata: nodata.and_then(T::from_nodata),
        }
    }

    fn valid(self, v: T) -> bool {
        match self.nodata {
            None => true,
            Some(nd) => !(v == nd || (nd.is_nan() && v.is_nan())),
        }
    }

    /// The value of a pixel with no valid input.
    pub(crate) fn fill(self) -> T {
        self.nodata.unwrap_or_else(T::empty)
    }
}

/// Per output index along one axis: the source indices it covers and their weights.
///
/// GDAL's average maps output pixel `i` to the source interval `[i·r, (i+1)·r)` with
/// `r = src / dst`, weighting each source pixel by its overlap; for an exact 2× ratio that is a
/// plain 2×2 box. Nearest takes source `⌊0.5 + i·r⌋` (both measured against GDAL 3.6).
const EPSILON: f64 = 1e-8;

struct Axis {
    start: Vec<usize>,
    weights: Vec<Vec<f64>>,
}

impl Axis {
    fn average(src: usize, dst: usize) -> Self {
        let r = src as f64 / dst as f64;
        let mut start = Vec::with_capacity(dst);
        let mut weights = Vec::with_capacity(dst);
        for i in 0..dst {
            let (lo, hi) = (i as f64 * r, (i + 1) as f64 * r);
            // The epsilon keeps a bound that is an integer up to rounding (i·r for r = 901/450)
            // from pulling in a neighbour with a ~1e-13 weight, as GDAL's does.
            let first = (lo + EPSILON).floor() as usize;
            let last = ((hi - EPSILON).ceil() as usize).min(src);
            start.push(first);
            weights.push(
                (first..last)
                    .map(|s| (hi.min(s as f64 + 1.0) - lo.max(s as f64)).max(0.0))
                    .collect(),
            );
        }
        Self { start, weights }
    }

    fn nearest(src: usize, dst: usize) -> Vec<usize> {
        let r = src as f64 / dst as f64;
        (0..dst)
            .map(|i| ((0.5 + i as f64 * r) as usize).min(src - 1))
            .collect()
    }
}

/// Reduce `src` to `dw × dh`.
pub(crate) fn downsample<T: Sample>(
    src: &Raster<T>,
    dw: usize,
    dh: usize,
    validity: Validity<T>,
    resampling: Resampling,
) -> Raster<T> {
    let spp = src.spp;
    let mut data = vec![T::default(); dw * dh * spp];
    let row_len = dw * spp;
    match resampling {
        Resampling::Nearest => {
            let xs = Axis::nearest(src.width, dw);
            let ys = Axis::nearest(src.height, dh);
            data.par_chunks_mut(row_len)
                .zip(ys.par_iter())
                .for_each(|(out, &sy)| {
                    let line = &src.data[sy * src.width * spp..(sy + 1) * src.width * spp];
                    for (o, &sx) in out.chunks_exact_mut(spp).zip(&xs) {
                        o.copy_from_slice(&line[sx * spp..(sx + 1) * spp]);
                    }
                });
        }
        Resampling::Average if src.width == 2 * dw && src.height == 2 * dh => {
            // The common case, exactly 2× on both axes: a 2×2 box with unit weights (the same
            // result as the general path, without its weight tables).
            data.par_chunks_mut(row_len)
                .enumerate()
                .for_each(|(j, out)| box2_row(src, j, validity, out));
        }
        Resampling::Average => {
            let xs = Axis::average(src.width, dw);
            let ys = Axis::average(src.height, dh);
            data.par_chunks_mut(row_len)
                .enumerate()
                .for_each(|(j, out)| {
                    average_row(src, &xs, ys.start[j], &ys.weights[j], validity, out);
                });
        }
    }
    Raster {
        width: dw,
        height: dh,
        spp,
        data,
    }
}

fn box2_row<T: Sample>(src: &Raster<T>, j: usize, validity: Validity<T>, out: &mut [T]) {
    let spp = src.spp;
    let stride = src.width * spp;
    let top = &src.data[2 * j * stride..(2 * j + 1) * stride];
    let bottom = &src.data[(2 * j + 1) * stride..(2 * j + 2) * stride];
    box2_into(top, bottom, spp, validity, out);
}

/// The first overview level of one window: `rows` rows of `w` pixel-interleaved pixels (both
/// even; `spp` samples each) reduced 2×, output row `y` at `out[y * out_stride..]`.
#[expect(
    clippy::too_many_arguments,
    reason = "a window, its reduction and a destination"
)]
pub(crate) fn reduce_window<T: Sample>(
    px: &[T],
    w: usize,
    rows: usize,
    spp: usize,
    validity: Validity<T>,
    resampling: Resampling,
    out: &mut [T],
    out_stride: usize,
) {
    let stride = w * spp;
    for y in 0..rows / 2 {
        let top = &px[2 * y * stride..(2 * y + 1) * stride];
        let bottom = &px[(2 * y + 1) * stride..(2 * y + 2) * stride];
        let out = &mut out[y * out_stride..][..w / 2 * spp];
        match resampling {
            Resampling::Average => box2_into(top, bottom, spp, validity, out),
            Resampling::Nearest => {
                // ⌊0.5 + 2i⌋ = 2i: the top-left pixel of each box.
                for (o, p) in out.chunks_exact_mut(spp).zip(top.chunks_exact(2 * spp)) {
                    o.copy_from_slice(&p[..spp]);
                }
            }
        }
    }
}

/// One output row of a 2×2 box reduction from two source rows (`spp` samples per pixel).
pub(crate) fn box2_into<T: Sample>(
    top: &[T],
    bottom: &[T],
    spp: usize,
    validity: Validity<T>,
    out: &mut [T],
) {
    if spp == 1 {
        for (i, o) in out.iter_mut().enumerate() {
            let a = 2 * i;
            *o = T::box4([top[a], top[a + 1], bottom[a], bottom[a + 1]], validity);
        }
        return;
    }
    for (k, o) in out.iter_mut().enumerate() {
        // Output sample k is pixel k / spp, band k % spp.
        let a = (k / spp) * 2 * spp + k % spp;
        *o = T::box4([top[a], top[a + spp], bottom[a], bottom[a + spp]], validity);
    }
}

fn average_row<T: Sample>(
    src: &Raster<T>,
    xs: &Axis,
    y0: usize,
    wys: &[f64],
    validity: Validity<T>,
    out: &mut [T],
) {
    let spp = src.spp;
    let stride = src.width * spp;
    let fill = validity.fill();
    for (i, px) in out.chunks_exact_mut(spp).enumerate() {
        let x0 = xs.start[i];
        let wxs = &xs.weights[i];
        for (b, o) in px.iter_mut().enumerate() {
            let mut sum = 0.0;
            let mut weight = 0.0;
            for (dy, &wy) in wys.iter().enumerate() {
                let row = (y0 + dy) * stride;
                for (dx, &wx) in wxs.iter().enumerate() {
                    let v = src.data[row + (x0 + dx) * spp + b];
                    if validity.valid(v) {
                        let w = wy * wx;
                        sum += v.to_f64() * w;
                        weight += w;
                    }
                }
            }
            *o = if weight > 0.0 {
                T::from_mean(sum / weight)
            } else {
                fill
            };
        }
    }
}

/// [`read_row`] for a contiguous destination (one plane, or pixel-interleaved samples): the
/// common case, without an index closure per sample.
pub(crate) fn read_row_contiguous<T: Sample>(
    line: &[u8],
    e: Endian,
    stride: usize,
    horizontal: bool,
    dst: &mut [T],
) {
    for (d, b) in dst.iter_mut().zip(line.chunks_exact(T::BYTES)) {
        *d = T::read(e, b);
    }
    if horizontal {
        for i in stride..dst.len() {
            dst[i] = dst[i].wrapping_add(dst[i - stride]);
        }
    }
}

/// Read `n` samples of one decoded block row into `dst`, undoing predictor 2 when
/// `horizontal`: sample `i` is predicted from sample `i - stride` of the same row (libtiff
/// `horAcc*`; `stride` is the samples per pixel of the block). `place(i)` is the index in `dst`.
pub(crate) fn read_row<T: Sample>(
    line: &[u8],
    e: Endian,
    n: usize,
    stride: usize,
    horizontal: bool,
    dst: &mut [T],
    place: impl Fn(usize) -> usize,
) {
    for i in 0..n {
        let mut v = T::read(e, &line[i * T::BYTES..]);
        if horizontal && i >= stride {
            v = v.wrapping_add(dst[place(i - stride)]);
        }
        dst[place(i)] = v;
    }
}

/// Encode one level into blocks in TIFF order (plane-major, then row-major), in parallel.
pub(crate) fn encode_level<T: Sample>(r: &Raster<T>, f: &Format) -> Result<Vec<Vec<u8>>, String> {
    let bs = f.tile_width as usize;
    let bx = r.width.div_ceil(bs);
    let by = r.height.div_ceil(bs);
    let planes = f.planes() as usize;
    (0..planes * by * bx)
        .into_par_iter()
        .map_init(Codec::default, |codec, idx| {
            let plane = idx / (bx * by);
            encode_block(codec, r, f, plane, (idx / bx) % by, idx % bx)
        })
        .collect()
}

/// Encode block (`row`, `col`) of `plane`. Partial right and bottom blocks are padded with
/// zeros (TIFF 6.0 §15 stores whole tiles; readers ignore the padding, and GDAL pads so too);
/// the predictor runs over the whole padded row, as libtiff's.
pub(crate) fn encode_block<T: Sample>(
    codec: &mut Codec,
    r: &Raster<T>,
    f: &Format,
    plane: usize,
    row: usize,
    col: usize,
) -> Result<Vec<u8>, String> {
    let shape = BlockShape::of(f);
    let bs = f.tile_width as usize;
    let planes = f.planes() as usize;
    let block_spp = f.block_samples();
    let row_bytes = shape.row_samples * T::BYTES;
    let mut raw = vec![0u8; shape.len()];
    let mut line = vec![T::default(); shape.row_samples];
    let (x0, y0) = (col * bs, row * bs);
    let w = bs.min(r.width - x0);
    let h = bs.min(r.height - y0);
    for y in 0..h {
        let src = &r.data[((y0 + y) * r.width + x0) * r.spp..];
        if planes > 1 {
            for x in 0..w {
                line[x] = src[x * r.spp + plane];
            }
        } else {
            line[..w * r.spp].copy_from_slice(&src[..w * r.spp]);
        }
        line[w * block_spp..].fill(T::default());
        if f.predictor == 2 {
            for i in (block_spp..line.len()).rev() {
                line[i] = line[i].wrapping_sub(line[i - block_spp]);
            }
        }
        let out = &mut raw[y * row_bytes..(y + 1) * row_bytes];
        for (v, b) in line.iter().zip(out.chunks_exact_mut(T::BYTES)) {
            v.write(f.endian, b);
        }
    }
    if f.predictor == 3 {
        crate::codec::fp_apply(&mut raw, f.endian, shape);
    }
    codec.deflate(f, &raw)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_follow_gdal_cog() {
        assert_eq!(
            overview_sizes(1300, 900, 256),
            vec![(650, 450), (325, 225), (162, 112)]
        );
        assert_eq!(
            overview_sizes(1025, 1025, 256),
            vec![(512, 512), (256, 256)]
        );
        assert_eq!(overview_sizes(1000, 3, 256), vec![(500, 1), (250, 1)]);
        assert_eq!(overview_sizes(1024, 1024, 512), vec![(512, 512)]);
        assert_eq!(overview_sizes(512, 300, 512), vec![]);
        assert_eq!(overview_sizes(10240, 10240, 512).len(), 5);
    }

    #[test]
    fn average_excludes_nodata_and_rounds_half_away() {
        let src = Raster {
            width: 4,
            height: 2,
            spp: 1,
            data: vec![1i16, 2, -9, -9, 3, 4, -9, -9],
        };
        let v = Validity { nodata: Some(-9) };
        let out = downsample(&src, 2, 1, v, Resampling::Average);
        assert_eq!(out.data, vec![3, -9]); // (1+2+3+4)/4 = 2.5 → 3; all nodata → nodata
        let src = Raster {
            width: 2,
            height: 2,
            spp: 1,
            data: vec![-1i16, -2, -3, -4],
        };
        let out = downsample(&src, 1, 1, Validity { nodata: None }, Resampling::Average);
        assert_eq!(out.data, vec![-3]); // -2.5 → -3
    }

    #[test]
    fn odd_sizes_use_fractional_weights() {
        // 3 → 1: one pixel covering all three with weight 1 each.
        let a = Axis::average(3, 1);
        assert_eq!(a.start, vec![0]);
        assert_eq!(a.weights, vec![vec![1.0, 1.0, 1.0]]);
        // 5 → 2: ratio 2.5, the middle pixel is split.
        let a = Axis::average(5, 2);
        assert_eq!(a.start, vec![0, 2]);
        assert_eq!(a.weights, vec![vec![1.0, 1.0, 0.5], vec![0.5, 1.0, 1.0]]);
        assert_eq!(Axis::nearest(4, 2), vec![0, 2]);
        assert_eq!(Axis::nearest(901, 450), {
            let r = 901.0 / 450.0;
            (0..450)
                .map(|i| (0.5 + i as f64 * r) as usize)
                .collect::<Vec<_>>()
        });
    }

    #[test]
    fn horizontal_predictor_matches_libtiff() {
        // u16 samples 10, 13, 11 are stored as differences 10, 3, -2 (wrapping).
        let line: Vec<u8> = [10u16, 3, 0xfffe]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect();
        let mut dst = vec![0u16; 3];
        read_row(&line, Endian::Little, 3, 1, true, &mut dst, |i| i);
        assert_eq!(dst, vec![10, 13, 11]);
        // Two samples per pixel: each band accumulates separately; planar placement.
        let line: Vec<u8> = [1i16, 100, 1, -1]
            .iter()
            .flat_map(|v| v.to_be_bytes())
            .collect();
        let mut dst = vec![0i16; 8];
        read_row(&line, Endian::Big, 4, 2, true, &mut dst, |i| i * 2);
        assert_eq!(dst, vec![1, 0, 100, 0, 2, 0, 99, 0]);
    }

    #[test]
    fn encoded_blocks_decode_back() {
        let f = Format {
            endian: Endian::Big,
            tiled: true,
            tile_width: 16,
            tile_height: 16,
            samples: 2,
            bits: vec![16, 16],
            sample_format: vec![2, 2],
            planar: 1,
            compression: crate::tile::COMPRESSION_DEFLATE,
            predictor: 2,
            photometric: Some(1),
            extra_samples: vec![0],
        };
        let r = Raster {
            width: 20,
            height: 5,
            spp: 2,
            data: (0..200).map(|i| (i * 37 % 1001) as i16 - 500).collect(),
        };
        let blocks = encode_level(&r, &f).unwrap();
        assert_eq!(blocks.len(), 2);
        let shape = BlockShape::of(&f);
        let mut codec = Codec::default();
        let mut buf = vec![0u8; shape.len()];
        codec.inflate(&f, &blocks[1], &mut buf).unwrap();
        let mut row = vec![0i16; 32];
        read_row(&buf, f.endian, 32, 2, true, &mut row, |i| i);
        // Block 1 starts at x = 16: four valid pixels, then padding.
        assert_eq!(&row[..8], &r.data[32..40]);
        assert!(row[8..].iter().all(|&v| v == 0));
    }

    #[test]
    fn nan_propagates_unless_it_is_nodata() {
        let src = Raster {
            width: 2,
            height: 1,
            spp: 1,
            data: vec![f32::NAN, 4.0],
        };
        let out = downsample(&src, 1, 1, Validity { nodata: None }, Resampling::Average);
        assert!(out.data[0].is_nan());
        let v = Validity {
            nodata: Some(-9999.0),
        };
        assert!(downsample(&src, 1, 1, v, Resampling::Average).data[0].is_nan());
        let v = Validity {
            nodata: Some(f32::NAN),
        };
        assert_eq!(
            downsample(&src, 1, 1, v, Resampling::Average).data,
            vec![4.0]
        );
        // Odd sizes take the weighted path: same rule.
        let src = Raster {
            width: 3,
            height: 1,
            spp: 1,
            data: vec![f32::NAN, 4.0, 6.0],
        };
        assert_eq!(
            downsample(&src, 1, 1, v, Resampling::Average).data,
            vec![5.0]
        );
    }
}

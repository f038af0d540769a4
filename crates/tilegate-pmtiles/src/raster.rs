//! A pyramid tile's pixels, and the steps between the warped base and the stored tiles: cut a
//! window into tiles, halve a level into its parents (2×2 average or nearest), and encode and
//! decode PNG — 8-bit imagery with transparency for nodata, or elevation packed into RGB
//! (Terrarium, Mapbox Terrain-RGB).
//!
//! Every level is *quantized* to what its tiles store before the level above is made from it,
//! so that a parent made in memory from children just encoded equals the parent made later
//! from the same children read back from the store: the tree may be built either way.

use libdeflater::{CompressionLvl, Compressor, Decompressor};

/// How a tile's values are stored as an image.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PixelEncoding {
    /// Each band's value is one 8-bit sample (values are 0–255).
    Image8,
    /// Terrarium: `v + 32768 = R·256 + G + B/256`.
    Terrarium,
    /// Mapbox Terrain-RGB: `(v + 10000) × 10 = R·65536 + G·256 + B`.
    MapboxTerrainRgb,
}

impl PixelEncoding {
    /// By the name a recipe gives it: none (8-bit imagery), `terrarium`, `mapbox-terrain-rgb`.
    pub fn named(name: Option<&str>) -> Option<PixelEncoding> {
        match name {
            None => Some(PixelEncoding::Image8),
            Some("terrarium") => Some(PixelEncoding::Terrarium),
            Some("mapbox-terrain-rgb") => Some(PixelEncoding::MapboxTerrainRgb),
            Some(_) => None,
        }
    }
}

/// How a parent's pixel is made from the 2×2 pixels under it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reduce {
    /// The mean of the valid ones (invalid where none is).
    Average,
    /// The top-left one.
    Nearest,
}

impl Reduce {
    /// By its GDAL-style name: `average`, or `nearest` (`near`).
    pub fn named(name: &str) -> Option<Reduce> {
        match name {
            "average" => Some(Reduce::Average),
            "nearest" | "near" => Some(Reduce::Nearest),
            _ => None,
        }
    }
}

/// A square or rectangular block of pixels: `bands` values per pixel (interleaved) and whether
/// each pixel is valid (not nodata, inside the source).
#[derive(Clone, Debug, PartialEq)]
pub struct TileData {
    pub width: u32,
    pub height: u32,
    pub bands: usize,
    pub values: Vec<f32>,
    pub valid: Vec<bool>,
}

/// Why a PNG could not be read back.
#[derive(Debug, thiserror::Error)]
#[error("read tile image: {0}")]
pub struct ImageError(String);

impl TileData {
    /// A block with no valid pixel.
    pub fn empty(width: u32, height: u32, bands: usize) -> TileData {
        let n = width as usize * height as usize;
        TileData {
            width,
            height,
            bands,
            values: vec![0.0; n * bands],
            valid: vec![false; n],
        }
    }

    /// Whether no pixel is valid: such a tile is recorded and not written.
    pub fn is_empty(&self) -> bool {
        !self.valid.iter().any(|v| *v)
    }

    /// The `w × h` block at (`x`, `y`); pixels past the edge are invalid.
    pub fn crop(&self, x: u32, y: u32, w: u32, h: u32) -> TileData {
        let mut out = TileData::empty(w, h, self.bands);
        let b = self.bands;
        for row in 0..h {
            let sy = y + row;
            if sy >= self.height {
                break;
            }
            let cols = w.min(self.width.saturating_sub(x)) as usize;
            if cols == 0 {
                break;
            }
            let src = (sy as usize * self.width as usize) + x as usize;
            let dst = row as usize * w as usize;
            out.valid[dst..dst + cols].copy_from_slice(&self.valid[src..src + cols]);
            out.values[dst * b..(dst + cols) * b]
                .copy_from_slice(&self.values[src * b..(src + cols) * b]);
        }
        out
    }

    /// The 2×2 block of four equal tiles (top-left, top-right, bottom-left, bottom-right);
    /// a missing one is invalid.
    pub fn mosaic(children: [Option<&TileData>; 4], size: u32, bands: usize) -> TileData {
        let mut out = TileData::empty(size * 2, size * 2, bands);
        for (i, child) in children.iter().enumerate() {
            let Some(c) = child else { continue };
            let (ox, oy) = ((i as u32 % 2) * size, (i as u32 / 2) * size);
            for row in 0..size.min(c.height) {
                let cols = size.min(c.width) as usize;
                let src = row as usize * c.width as usize;
                let dst = (oy + row) as usize * out.width as usize + ox as usize;
                out.valid[dst..dst + cols].copy_from_slice(&c.valid[src..src + cols]);
                out.values[dst * bands..(dst + cols) * bands]
                    .copy_from_slice(&c.values[src * bands..(src + cols) * bands]);
            }
        }
        out
    }

    /// Half the size (each side rounded up), each pixel made from the 2×2 under it, then
    /// quantized to what `encoding` stores.
    pub fn reduce(&self, how: Reduce, encoding: PixelEncoding) -> TileData {
        let (w, h) = (self.width.div_ceil(2), self.height.div_ceil(2));
        let b = self.bands;
        let mut out = TileData::empty(w, h, b);
        match how {
            Reduce::Nearest => {
                for y in 0..h {
                    for x in 0..w {
                        let o = (y * w + x) as usize;
                        let i = ((2 * y) * self.width + 2 * x) as usize;
                        out.valid[o] = self.valid[i];
                        out.values[o * b..(o + 1) * b]
                            .copy_from_slice(&self.values[i * b..(i + 1) * b]);
                    }
                }
                out.quantize(encoding);
            }
            // The common band counts with their count known to the compiler.
            Reduce::Average => match b {
                1 => self.average_into::<1>(&mut out, encoding),
                3 => self.average_into::<3>(&mut out, encoding),
                4 => self.average_into::<4>(&mut out, encoding),
                _ => self.average_into::<0>(&mut out, encoding),
            },
        }
        out
    }

    /// `out` (half this size) as the mean of the valid pixels of each 2×2, quantized; `B`
    /// bands, or (0) as many as the tile has.
    fn average_into<const B: usize>(&self, out: &mut TileData, encoding: PixelEncoding) {
        let b = if B == 0 { self.bands } else { B };
        let mut sum_buf = vec![0f64; b];
        for y in 0..out.height {
            for x in 0..out.width {
                let o = (y * out.width + x) as usize;
                let sum = &mut sum_buf[..b];
                sum.fill(0.0);
                let mut n = 0u32;
                for (dx, dy) in [(0, 0), (1, 0), (0, 1), (1, 1)] {
                    let (sx, sy) = (2 * x + dx, 2 * y + dy);
                    if sx >= self.width || sy >= self.height {
                        continue;
                    }
                    let i = (sy * self.width + sx) as usize;
                    if self.valid[i] {
                        n += 1;
                        for (s, v) in sum.iter_mut().zip(&self.values[i * b..(i + 1) * b]) {
                            *s += f64::from(*v);
                        }
                    }
                }
                if n > 0 {
                    out.valid[o] = true;
                    for (d, s) in out.values[o * b..(o + 1) * b].iter_mut().zip(&*sum) {
                        *d = quantized((s / f64::from(n)) as f32, encoding);
                    }
                }
            }
        }
    }

    /// Invalid pixels' values set to 0: what [`TileData::quantize`] does to values that are
    /// already as the tile stores them (8-bit samples as 8-bit imagery).
    pub fn clear_invalid(&mut self) {
        let b = self.bands;
        for (i, valid) in self.valid.iter().enumerate() {
            if !*valid {
                self.values[i * b..(i + 1) * b].fill(0.0);
            }
        }
    }

    /// Each valid value as the tile will store it; invalid pixels' values become 0.
    pub fn quantize(&mut self, encoding: PixelEncoding) {
        let b = self.bands;
        for (i, valid) in self.valid.iter().enumerate() {
            for v in &mut self.values[i * b..(i + 1) * b] {
                *v = if *valid { quantized(*v, encoding) } else { 0.0 };
            }
        }
    }
}

/// An 8-bit value: rounded half away from zero (as `f32::round`), clamped to 0–255, NaN as 0.
/// Truncating `v + 0.5` in double precision is that rounding for every value the clamp leaves
/// (exactly: an `f32` plus one half has no rounding error in an `f64`), without the `roundf`
/// call the baseline x86-64 target makes of `round`.
#[inline]
fn byte(v: f32) -> u8 {
    (f64::from(v.clamp(0.0, 255.0)) + 0.5) as u8
}

/// A value as `encoding` stores it (and reads it back).
pub fn quantized(v: f32, encoding: PixelEncoding) -> f32 {
    match encoding {
        PixelEncoding::Image8 => f32::from(byte(v)),
        PixelEncoding::Terrarium => {
            let t = ((f64::from(v) + 32768.0) * 256.0)
                .floor()
                .clamp(0.0, 16_777_215.0);
            (t / 256.0 - 32768.0) as f32
        }
        PixelEncoding::MapboxTerrainRgb => {
            let t = ((f64::from(v) + 10000.0) * 10.0)
                .round()
                .clamp(0.0, 16_777_215.0);
            (t / 10.0 - 10000.0) as f32
        }
    }
}

fn to_rgb24(v: f32, encoding: PixelEncoding) -> [u8; 3] {
    let t = match encoding {
        PixelEncoding::Terrarium => ((f64::from(v) + 32768.0) * 256.0).floor(),
        PixelEncoding::MapboxTerrainRgb => ((f64::from(v) + 10000.0) * 10.0).round(),
        PixelEncoding::Image8 => unreachable!("8-bit images are not packed"),
    }
    .clamp(0.0, 16_777_215.0) as u32;
    [(t >> 16) as u8, (t >> 8) as u8, t as u8]
}

fn from_rgb24(rgb: &[u8], encoding: PixelEncoding) -> f32 {
    let t = (u32::from(rgb[0]) << 16) | (u32::from(rgb[1]) << 8) | u32::from(rgb[2]);
    match encoding {
        PixelEncoding::Terrarium => (f64::from(t) / 256.0 - 32768.0) as f32,
        PixelEncoding::MapboxTerrainRgb => (f64::from(t) / 10.0 - 10000.0) as f32,
        PixelEncoding::Image8 => unreachable!("8-bit images are not packed"),
    }
}

const PNG_SIGNATURE: [u8; 8] = [0x89, b'P', b'N', b'G', b'\r', b'\n', 0x1a, b'\n'];

/// The tile as a PNG: `None` when no pixel is valid. 8-bit imagery keeps its bands (1: gray,
/// 2: gray + alpha, 3: RGB, 4: RGBA as given) and gains an alpha channel only where some pixel
/// is invalid; elevation is RGB, with alpha where some pixel is invalid.
pub fn encode_png(tile: &TileData, encoding: PixelEncoding) -> Option<Vec<u8>> {
    if tile.is_empty() {
        return None;
    }
    let partial = tile.valid.iter().any(|v| !*v);
    let color = match encoding {
        PixelEncoding::Image8 => tile.bands.min(4),
        _ => 3,
    };
    let source_alpha = matches!(encoding, PixelEncoding::Image8) && (color == 2 || color == 4);
    let channels = if partial && !source_alpha {
        color + 1
    } else {
        color
    };
    let color_type: u8 = match channels {
        1 => 0,
        2 => 4,
        3 => 2,
        _ => 6,
    };
    let (w, h) = (tile.width as usize, tile.height as usize);
    let stride = w * channels;
    let mut raw = vec![0u8; h * stride];
    // Invalid pixels stay all zeros: transparent.
    let pixels = raw
        .chunks_exact_mut(channels)
        .zip(tile.values.chunks_exact(tile.bands))
        .zip(&tile.valid)
        .filter(|(_, valid)| **valid)
        .map(|(pv, _)| pv);
    match encoding {
        PixelEncoding::Image8 => {
            for (px, vals) in pixels {
                for (c, v) in px.iter_mut().zip(vals).take(color) {
                    *c = byte(*v);
                }
                if channels > color {
                    px[color] = 255;
                }
            }
        }
        _ => {
            for (px, vals) in pixels {
                px[..3].copy_from_slice(&to_rgb24(vals[0], encoding));
                if channels > color {
                    px[color] = 255;
                }
            }
        }
    }
    let filtered = filter_rows(&raw, stride, channels);
    let mut z = Compressor::new(CompressionLvl::new(6).expect("level 6 exists"));
    let mut idat = vec![0u8; z.zlib_compress_bound(filtered.len())];
    let n = z
        .zlib_compress(&filtered, &mut idat)
        .expect("the bound holds the stream");
    idat.truncate(n);
    let mut out = Vec::with_capacity(n + 64);
    out.extend_from_slice(&PNG_SIGNATURE);
    let mut ihdr = Vec::with_capacity(13);
    ihdr.extend_from_slice(&tile.width.to_be_bytes());
    ihdr.extend_from_slice(&tile.height.to_be_bytes());
    ihdr.extend_from_slice(&[8, color_type, 0, 0, 0]);
    chunk(&mut out, b"IHDR", &ihdr);
    chunk(&mut out, b"IDAT", &idat);
    chunk(&mut out, b"IEND", &[]);
    Some(out)
}

fn chunk(out: &mut Vec<u8>, kind: &[u8; 4], data: &[u8]) {
    out.extend_from_slice(&(data.len() as u32).to_be_bytes());
    out.extend_from_slice(kind);
    out.extend_from_slice(data);
    let mut crc = libdeflater::Crc::new();
    crc.update(kind);
    crc.update(data);
    out.extend_from_slice(&crc.sum().to_be_bytes());
}

/// Each row with the PNG filter that gives the smallest sum of absolute residuals (the
/// heuristic of libpng and the PNG specification), its type byte first; the first filter of
/// the smallest sums on a tie.
fn filter_rows(raw: &[u8], stride: usize, bpp: usize) -> Vec<u8> {
    let rows = raw.len() / stride.max(1);
    let mut out = Vec::with_capacity(rows * (stride + 1));
    let zero = vec![0u8; stride];
    let mut cand: [Vec<u8>; 5] = std::array::from_fn(|_| vec![0u8; stride]);
    let bpp = bpp.min(stride);
    for r in 0..rows {
        let cur = &raw[r * stride..(r + 1) * stride];
        let prev = if r == 0 {
            &zero[..]
        } else {
            &raw[(r - 1) * stride..r * stride]
        };
        let [none, sub, up, avg, pae] = &mut cand;
        // A row's sum fits 32 bits (at most 128 a byte); 64-bit lanes would halve the
        // vectorised loop's width.
        let mut sums = [0u32; 5];
        let residual = |v: u8| u32::from((v as i8).unsigned_abs());
        // The first pixel has no left neighbour (a = c = 0); then one pass computes every
        // filter's residual and its sum together.
        for i in 0..bpp {
            let (x, b) = (cur[i], prev[i]);
            let row = [
                x,
                x,
                x.wrapping_sub(b),
                x.wrapping_sub(b / 2),
                x.wrapping_sub(b),
            ];
            for (k, v) in row.into_iter().enumerate() {
                sums[k] += residual(v);
            }
            (none[i], sub[i], up[i], avg[i], pae[i]) = (row[0], row[1], row[2], row[3], row[4]);
        }
        for i in bpp..stride {
            let (x, a, b, c) = (cur[i], cur[i - bpp], prev[i], prev[i - bpp]);
            let row = [
                x,
                x.wrapping_sub(a),
                x.wrapping_sub(b),
                x.wrapping_sub(((u16::from(a) + u16::from(b)) / 2) as u8),
                x.wrapping_sub(paeth(a, b, c)),
            ];
            for (k, v) in row.into_iter().enumerate() {
                sums[k] += residual(v);
            }
            (none[i], sub[i], up[i], avg[i], pae[i]) = (row[0], row[1], row[2], row[3], row[4]);
        }
        let best = (0..5).min_by_key(|k| sums[*k]).unwrap_or(0);
        out.push(best as u8);
        out.extend_from_slice(&cand[best]);
    }
    out
}

fn paeth(a: u8, b: u8, c: u8) -> u8 {
    let (ia, ib, ic) = (i16::from(a), i16::from(b), i16::from(c));
    let p = ia + ib - ic;
    let (pa, pb, pc) = ((p - ia).abs(), (p - ib).abs(), (p - ic).abs());
    if pa <= pb && pa <= pc {
        a
    } else if pb <= pc {
        b
    } else {
        c
    }
}

/// A PNG this module wrote (8-bit, not interlaced) back as the tile's values: `bands` values
/// per pixel for 8-bit imagery (an alpha channel the image gained is validity), one elevation
/// for an RGB encoding.
pub fn decode_png(
    bytes: &[u8],
    encoding: PixelEncoding,
    bands: usize,
) -> Result<TileData, ImageError> {
    let bad = |s: &str| ImageError(s.to_owned());
    if bytes.len() < 8 || bytes[..8] != PNG_SIGNATURE {
        return Err(bad("not a PNG"));
    }
    let mut pos = 8;
    let (mut width, mut height, mut color_type) = (0u32, 0u32, 0u8);
    let mut idat = Vec::new();
    while pos + 8 <= bytes.len() {
        let len = u32::from_be_bytes(bytes[pos..pos + 4].try_into().expect("4 bytes")) as usize;
        let kind = &bytes[pos + 4..pos + 8];
        let data = bytes
            .get(pos + 8..pos + 8 + len)
            .ok_or_else(|| bad("a chunk runs past the end"))?;
        match kind {
            b"IHDR" => {
                if data.len() != 13 || data[8] != 8 || data[12] != 0 {
                    return Err(bad("only 8-bit, non-interlaced PNGs are read"));
                }
                width = u32::from_be_bytes(data[0..4].try_into().expect("4 bytes"));
                height = u32::from_be_bytes(data[4..8].try_into().expect("4 bytes"));
                color_type = data[9];
            }
            b"IDAT" => idat.extend_from_slice(data),
            b"IEND" => break,
            _ => {}
        }
        pos += 12 + len;
    }
    let channels = match color_type {
        0 => 1,
        4 => 2,
        2 => 3,
        6 => 4,
        _ => return Err(bad("unsupported PNG colour type")),
    };
    let (w, h) = (width as usize, height as usize);
    if w == 0 || h == 0 || w > 65_536 || h > 65_536 {
        return Err(bad("a PNG's size is out of range"));
    }
    let stride = w * channels;
    let mut filtered = vec![0u8; h * (stride + 1)];
    let n = Decompressor::new()
        .zlib_decompress(&idat, &mut filtered)
        .map_err(|e| ImageError(format!("inflate: {e}")))?;
    if n != filtered.len() {
        return Err(bad("the image data is short"));
    }
    let mut raw = vec![0u8; h * stride];
    for r in 0..h {
        let kind = filtered[r * (stride + 1)];
        let src = &filtered[r * (stride + 1) + 1..(r + 1) * (stride + 1)];
        let (done, rest) = raw.split_at_mut(r * stride);
        let prev = if r == 0 {
            None
        } else {
            Some(&done[(r - 1) * stride..])
        };
        let cur = &mut rest[..stride];
        for i in 0..stride {
            let a = if i >= channels { cur[i - channels] } else { 0 };
            let b = prev.map_or(0, |p| p[i]);
            let c = if i >= channels {
                prev.map_or(0, |p| p[i - channels])
            } else {
                0
            };
            cur[i] = match kind {
                0 => src[i],
                1 => src[i].wrapping_add(a),
                2 => src[i].wrapping_add(b),
                3 => src[i].wrapping_add(((u16::from(a) + u16::from(b)) / 2) as u8),
                4 => src[i].wrapping_add(paeth(a, b, c)),
                _ => return Err(bad("unknown PNG filter")),
            };
        }
    }
    let out_bands = match encoding {
        PixelEncoding::Image8 => bands,
        _ => 1,
    };
    let mut tile = TileData::empty(width, height, out_bands);
    // Channels past the data's are the alpha this module added (or the source's own alpha).
    let color = match encoding {
        PixelEncoding::Image8 => bands.min(channels),
        _ => 3,
    };
    let alpha_at = match encoding {
        PixelEncoding::Image8 if bands == 2 || bands == 4 => Some(bands - 1),
        _ if channels > color => Some(color),
        _ => None,
    };
    for i in 0..w * h {
        let px = &raw[i * channels..(i + 1) * channels];
        let valid = alpha_at.is_none_or(|a| px[a] != 0);
        tile.valid[i] = valid;
        if !valid {
            continue;
        }
        match encoding {
            PixelEncoding::Image8 => {
                for (d, s) in tile.values[i * bands..(i + 1) * bands].iter_mut().zip(px) {
                    *d = f32::from(*s);
                }
            }
            _ => tile.values[i] = from_rgb24(&px[..3], encoding),
        }
    }
    Ok(tile)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(w: u32, h: u32, bands: usize, holes: bool) -> TileData {
        let mut t = TileData::empty(w, h, bands);
        for i in 0..(w * h) as usize {
            t.valid[i] = !holes || i % 7 != 3;
            for b in 0..bands {
                t.values[i * bands + b] = ((i * 31 + b * 17) % 256) as f32;
            }
        }
        t.quantize(PixelEncoding::Image8);
        t
    }

    #[test]
    fn png_round_trips_every_band_count_with_and_without_holes() {
        for bands in 1..=4 {
            for holes in [false, true] {
                let mut t = sample(37, 19, bands, holes);
                if bands == 2 || bands == 4 {
                    // The source's own alpha is the validity.
                    for i in 0..t.valid.len() {
                        t.values[i * bands + bands - 1] = if t.valid[i] { 255.0 } else { 0.0 };
                    }
                    t.quantize(PixelEncoding::Image8);
                }
                let png = encode_png(&t, PixelEncoding::Image8).unwrap();
                let back = decode_png(&png, PixelEncoding::Image8, bands).unwrap();
                assert_eq!(back, t, "bands {bands} holes {holes}");
            }
        }
    }

    #[test]
    fn an_empty_tile_is_not_encoded() {
        assert!(encode_png(&TileData::empty(8, 8, 3), PixelEncoding::Image8).is_none());
    }

    #[test]
    fn elevation_round_trips_within_each_encodings_precision() {
        for (enc, step) in [
            (PixelEncoding::Terrarium, 1.0 / 256.0),
            (PixelEncoding::MapboxTerrainRgb, 0.1),
        ] {
            let mut t = TileData::empty(16, 16, 1);
            for i in 0..256 {
                t.valid[i] = i != 5;
                t.values[i] = -420.7 + i as f32 * 37.913;
            }
            let raw = t.clone();
            t.quantize(enc);
            let png = encode_png(&t, enc).unwrap();
            let back = decode_png(&png, enc, 1).unwrap();
            assert_eq!(back.valid, raw.valid);
            for i in 0..256 {
                if raw.valid[i] {
                    assert!((back.values[i] - raw.values[i]).abs() <= step as f32 + 1e-3);
                    assert_eq!(back.values[i], t.values[i]);
                }
            }
        }
    }

    #[test]
    fn a_parent_from_stored_children_equals_one_made_in_memory() {
        let base = sample(64, 64, 3, true);
        let parent = base.reduce(Reduce::Average, PixelEncoding::Image8);
        let stored: Vec<TileData> = [(0, 0), (32, 0), (0, 32), (32, 32)]
            .iter()
            .map(|(x, y)| {
                let png = encode_png(&base.crop(*x, *y, 32, 32), PixelEncoding::Image8).unwrap();
                decode_png(&png, PixelEncoding::Image8, 3).unwrap()
            })
            .collect();
        let again = TileData::mosaic(
            [
                Some(&stored[0]),
                Some(&stored[1]),
                Some(&stored[2]),
                Some(&stored[3]),
            ],
            32,
            3,
        )
        .reduce(Reduce::Average, PixelEncoding::Image8);
        assert_eq!(parent, again);
    }

    #[test]
    fn average_ignores_invalid_pixels_and_nearest_takes_the_top_left() {
        let mut t = TileData::empty(2, 2, 1);
        t.values = vec![10.0, 20.0, 31.0, 99.0];
        t.valid = vec![true, true, true, false];
        let a = t.reduce(Reduce::Average, PixelEncoding::Image8);
        assert_eq!((a.values[0], a.valid[0]), (20.0, true));
        let n = t.reduce(Reduce::Nearest, PixelEncoding::Image8);
        assert_eq!(n.values[0], 10.0);
    }

    /// The row filters as the PNG specification states them, one candidate row at a time.
    fn filter_rows_by_the_book(raw: &[u8], stride: usize, bpp: usize) -> Vec<u8> {
        let mut out = Vec::new();
        for r in 0..raw.len() / stride {
            let cur = &raw[r * stride..(r + 1) * stride];
            let prev = |i: usize| if r == 0 { 0 } else { raw[(r - 1) * stride + i] };
            let left = |i: usize| if i >= bpp { cur[i - bpp] } else { 0 };
            let up_left = |i: usize| if i >= bpp { prev(i - bpp) } else { 0 };
            let rows: Vec<Vec<u8>> = (0..5)
                .map(|k| {
                    (0..stride)
                        .map(|i| {
                            let (x, a, b, c) = (cur[i], left(i), prev(i), up_left(i));
                            match k {
                                0 => x,
                                1 => x.wrapping_sub(a),
                                2 => x.wrapping_sub(b),
                                3 => x.wrapping_sub(((u16::from(a) + u16::from(b)) / 2) as u8),
                                _ => x.wrapping_sub(paeth(a, b, c)),
                            }
                        })
                        .collect()
                })
                .collect();
            let score = |v: &Vec<u8>| -> u64 {
                v.iter().map(|b| u64::from((*b as i8).unsigned_abs())).sum()
            };
            let best = (0..5).min_by_key(|k| score(&rows[*k])).unwrap();
            out.push(best as u8);
            out.extend_from_slice(&rows[best]);
        }
        out
    }

    proptest::proptest! {
        #[test]
        fn the_row_filters_are_the_specifications(
            bpp in 1usize..=4,
            width in 1usize..40,
            rows in 1usize..6,
            seed in proptest::prelude::any::<u64>(),
            smooth in proptest::prelude::any::<bool>(),
        ) {
            let stride = width * bpp;
            let mut state = seed | 1;
            let raw: Vec<u8> = (0..stride * rows)
                .map(|i| {
                    state ^= state << 13;
                    state ^= state >> 7;
                    state ^= state << 17;
                    // Smooth rows choose the predicting filters; noise chooses None.
                    if smooth { (i / 3 + (state % 3) as usize) as u8 } else { state as u8 }
                })
                .collect();
            proptest::prop_assert_eq!(
                filter_rows(&raw, stride, bpp),
                filter_rows_by_the_book(&raw, stride, bpp)
            );
        }
    }

    #[test]
    fn a_byte_rounds_half_away_from_zero_and_clamps() {
        for v in [
            -3.0f32, -0.5, -0.0, 0.0, 0.49999997, 0.5, 1.5, 2.5, 254.5, 254.49998, 255.0, 300.0,
        ] {
            assert_eq!(f32::from(byte(v)), v.round().clamp(0.0, 255.0), "{v}");
        }
        assert_eq!(byte(f32::NAN), 0);
    }
}

//! Block codecs: DEFLATE (libdeflate), LZW (weezl), ZSTD (libzstd) or none, and the floating-point predictor (predictor 3,
//! Adobe Photoshop TIFF Technical Note 3) exactly as libtiff applies it, row by row of the
//! block. The horizontal predictor (2) works on typed samples, in `overview`.

use crate::tiff::Endian;
use crate::tile::{
    COMPRESSION_DEFLATE, COMPRESSION_DEFLATE_OLD, COMPRESSION_LZW, COMPRESSION_NONE,
    COMPRESSION_ZSTD, Format,
};
use libdeflater::{CompressionLvl, Compressor, Decompressor};
use weezl::{BitOrder, LzwStatus};

/// The libdeflate level GDAL's default DEFLATE compresses at: its `ZLEVEL`/`LEVEL` creation
/// option defaults to 6, and libtiff asks libdeflate for one level more than the zlib level it
/// is given ("to get results as good as zlib"). Measured: GDAL 3.6's DEFLATE tiles are
/// byte for byte libdeflate level 7.
const DEFLATE_LEVEL: i32 = 7;
/// GDAL's default ZSTD level (`ZSTD_LEVEL` defaults to 9).
const ZSTD_LEVEL: i32 = 9;

/// Geometry of one block's samples, as the predictor sees it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct BlockShape {
    /// Bytes per sample.
    pub bytes: usize,
    /// Samples in one block row (tile width × samples per pixel of the plane).
    pub row_samples: usize,
    /// Distance between a sample and the one it is predicted from: samples per pixel for
    /// PlanarConfiguration=1, 1 for planar (libtiff's `stride`).
    pub stride: usize,
    pub rows: usize,
}

impl BlockShape {
    pub(crate) fn of(f: &Format) -> Self {
        let stride = f.block_samples();
        Self {
            bytes: f.sample_bytes(),
            row_samples: f.tile_width as usize * stride,
            stride,
            rows: f.tile_height as usize,
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.bytes * self.row_samples * self.rows
    }
}

/// One thread's codec state (libdeflate's and zstd's contexts are not `Sync`).
pub(crate) struct Codec {
    compressor: Compressor,
    decompressor: Decompressor,
    zstd: Option<(
        zstd::bulk::Compressor<'static>,
        zstd::bulk::Decompressor<'static>,
    )>,
}

impl Default for Codec {
    fn default() -> Self {
        Self {
            compressor: Compressor::new(
                CompressionLvl::new(DEFLATE_LEVEL).unwrap_or_else(|_| CompressionLvl::default()),
            ),
            decompressor: Decompressor::new(),
            zstd: None,
        }
    }
}

/// TIFF LZW (TIFF 6.0 §13): MSB-first codes from 9 bits, switching width one code early
/// ("early change", as libtiff writes and reads it).
fn lzw_decode(data: &[u8], out: &mut [u8]) -> Result<(), String> {
    let mut dec = weezl::decode::Decoder::with_tiff_size_switch(BitOrder::Msb, 8);
    let (mut read, mut written) = (0, 0);
    while written < out.len() {
        let r = dec.decode_bytes(&data[read..], &mut out[written..]);
        read += r.consumed_in;
        written += r.consumed_out;
        match r.status {
            Ok(LzwStatus::Ok) if r.consumed_in + r.consumed_out > 0 => {}
            Ok(_) => break,
            Err(e) => return Err(format!("decode LZW block: {e}")),
        }
    }
    if written != out.len() {
        return Err(format!(
            "LZW block decodes to {written} bytes, a block has {}",
            out.len()
        ));
    }
    Ok(())
}

impl Codec {
    /// Decompress `data` into `out`, which is exactly one block. The predictor is left for the
    /// caller: predictor 2 works on typed samples, predictor 3 on the bytes ([`fp_undo`]).
    pub(crate) fn inflate(
        &mut self,
        f: &Format,
        data: &[u8],
        out: &mut [u8],
    ) -> Result<(), String> {
        match f.compression {
            COMPRESSION_DEFLATE | COMPRESSION_DEFLATE_OLD => {
                let n = self
                    .decompressor
                    .zlib_decompress(data, out)
                    .map_err(|e| format!("inflate block: {e}"))?;
                if n != out.len() {
                    return Err(format!(
                        "block inflates to {n} bytes, a block has {}",
                        out.len()
                    ));
                }
            }
            COMPRESSION_LZW => lzw_decode(data, out)?,
            COMPRESSION_ZSTD => {
                let n = self
                    .zstd()?
                    .1
                    .decompress_to_buffer(data, out)
                    .map_err(|e| format!("decode ZSTD block: {e}"))?;
                if n != out.len() {
                    return Err(format!(
                        "ZSTD block decodes to {n} bytes, a block has {}",
                        out.len()
                    ));
                }
            }
            COMPRESSION_NONE => {
                if data.len() < out.len() {
                    return Err(format!(
                        "uncompressed block has {} bytes, a block has {}",
                        data.len(),
                        out.len()
                    ));
                }
                out.copy_from_slice(&data[..out.len()]);
            }
            c => return Err(format!("no decoder for compression {c}")),
        }
        Ok(())
    }

    fn zstd(
        &mut self,
    ) -> Result<
        &mut (
            zstd::bulk::Compressor<'static>,
            zstd::bulk::Decompressor<'static>,
        ),
        String,
    > {
        if self.zstd.is_none() {
            let c = zstd::bulk::Compressor::new(ZSTD_LEVEL)
                .map_err(|e| format!("create a ZSTD compressor: {e}"))?;
            let d = zstd::bulk::Decompressor::new()
                .map_err(|e| format!("create a ZSTD decompressor: {e}"))?;
            self.zstd = Some((c, d));
        }
        Ok(self.zstd.as_mut().expect("just set"))
    }

    /// Compress one block whose predictor has been applied. The codecs cannot fail on valid
    /// input short of memory exhaustion, which is reported as a string like decode errors.
    pub(crate) fn deflate(&mut self, f: &Format, raw: &[u8]) -> Result<Vec<u8>, String> {
        Ok(match f.compression {
            COMPRESSION_LZW => weezl::encode::Encoder::with_tiff_size_switch(BitOrder::Msb, 8)
                .encode(raw)
                .map_err(|e| format!("encode LZW block: {e}"))?,
            COMPRESSION_ZSTD => self
                .zstd()?
                .0
                .compress(raw)
                .map_err(|e| format!("encode ZSTD block: {e}"))?,
            COMPRESSION_DEFLATE | COMPRESSION_DEFLATE_OLD => {
                let mut out = vec![0u8; self.compressor.zlib_compress_bound(raw.len())];
                // The bound is libdeflate's worst case, so compression cannot run out of room.
                let n = self
                    .compressor
                    .zlib_compress(raw, &mut out)
                    .expect("zlib_compress_bound is enough room");
                out.truncate(n);
                out
            }
            _ => raw.to_vec(),
        })
    }
}

/// Index of the byte of significance `k` (0 = most significant) inside a sample stored in
/// byte order `e`.
fn byte_index(e: Endian, bytes: usize, k: usize) -> usize {
    match e {
        Endian::Big => k,
        Endian::Little => bytes - 1 - k,
    }
}

/// Undo predictor 3 (libtiff `fpAcc`): per row, add bytes `stride` apart across the whole
/// row, then gather byte planes (most significant first, independent of the file's byte
/// order) back into samples — written here in the file's byte order, like every other path.
pub(crate) fn fp_undo(buf: &mut [u8], e: Endian, s: BlockShape) {
    let wc = s.row_samples;
    let bps = s.bytes;
    let mut tmp = vec![0u8; wc * bps];
    for row in buf.chunks_exact_mut(wc * bps) {
        for i in s.stride..row.len() {
            row[i] = row[i].wrapping_add(row[i - s.stride]);
        }
        tmp.copy_from_slice(row);
        for k in 0..bps {
            let at = byte_index(e, bps, k);
            let plane = &tmp[k * wc..(k + 1) * wc];
            for (c, &b) in plane.iter().enumerate() {
                row[c * bps + at] = b;
            }
        }
    }
}

/// Apply predictor 3 (libtiff `fpDiff`): scatter samples into byte planes, most significant
/// first, then difference bytes `stride` apart from the end of the row.
pub(crate) fn fp_apply(buf: &mut [u8], e: Endian, s: BlockShape) {
    let wc = s.row_samples;
    let bps = s.bytes;
    let mut tmp = vec![0u8; wc * bps];
    for row in buf.chunks_exact_mut(wc * bps) {
        for k in 0..bps {
            let at = byte_index(e, bps, k);
            let plane = &mut tmp[k * wc..(k + 1) * wc];
            for (c, b) in plane.iter_mut().enumerate() {
                *b = row[c * bps + at];
            }
        }
        row.copy_from_slice(&tmp);
        for i in (s.stride..row.len()).rev() {
            row[i] = row[i].wrapping_sub(row[i - s.stride]);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_codec_round_trips() {
        let mut f = Format {
            endian: Endian::Little,
            tiled: true,
            tile_width: 16,
            tile_height: 16,
            samples: 1,
            bits: vec![8],
            sample_format: vec![1],
            planar: 1,
            compression: 0,
            predictor: 1,
            photometric: Some(1),
            extra_samples: vec![],
        };
        let raw: Vec<u8> = (0..256u32).map(|i| (i * i % 7) as u8).collect();
        let mut codec = Codec::default();
        for c in [
            COMPRESSION_NONE,
            COMPRESSION_DEFLATE,
            COMPRESSION_LZW,
            COMPRESSION_ZSTD,
        ] {
            f.compression = c;
            let packed = codec.deflate(&f, &raw).unwrap();
            let mut out = vec![0u8; raw.len()];
            codec.inflate(&f, &packed, &mut out).unwrap();
            assert_eq!(out, raw, "compression {c}");
            // A truncated stream is an error, never a short block.
            if c != COMPRESSION_NONE {
                let mut out = vec![0u8; raw.len()];
                assert!(
                    codec
                        .inflate(&f, &packed[..packed.len() / 2], &mut out)
                        .is_err()
                );
            }
        }
    }

    fn shape(bytes: usize, width: usize, spp: usize, rows: usize) -> BlockShape {
        BlockShape {
            bytes,
            row_samples: width * spp,
            stride: spp,
            rows,
        }
    }

    #[test]
    fn floating_point_predictor_round_trips_and_uses_byte_planes() {
        for e in [Endian::Little, Endian::Big] {
            let s = shape(4, 3, 2, 2);
            let orig: Vec<u8> = (0..s.len()).map(|i| (i * 91 % 253) as u8).collect();
            let mut b = orig.clone();
            fp_apply(&mut b, e, s);
            fp_undo(&mut b, e, s);
            assert_eq!(b, orig);
        }
        // One f32 sample 1.0 (0x3f800000): planes are 3f 80 00 00, differenced bytewise.
        let s = shape(4, 1, 1, 1);
        let mut b = 1.0f32.to_le_bytes().to_vec();
        fp_apply(&mut b, Endian::Little, s);
        assert_eq!(
            b,
            vec![0x3f, 0x80u8.wrapping_sub(0x3f), 0x80u8.wrapping_neg(), 0]
        );
    }
}

//! Writing a job's window tiles without GDAL's COG driver per tile: [`TileWriter`] learns the
//! tile structure from one *prototype* tile that GDAL wrote for the job (its tags: sample
//! format, compression, predictor, nodata, GeoTIFF keys, …) and then writes every window's
//! tile itself — the same tags with the window's size and georeferencing origin, the block
//! padded with zeros and predicted as libtiff does, compressed with the same codec at GDAL's
//! default level, laid out as GDAL's COG driver lays out a single-block COG. For DEFLATE the
//! bytes are GDAL's own (the tests compare them); the point is the time: no MEM dataset, no
//! driver, no libtiff or PROJ call per window.
//!
//! Only the common georeferencing is handled natively — ModelPixelScale + ModelTiepoint at
//! raster (0,0), pixel-is-area — and the compressions the assembler can copy; for anything
//! else [`TileWriter::from_prototype`] says no and the caller keeps using GDAL per window.

use crate::Resampling;
use crate::codec::Codec;
use crate::layout::{self, IfdOut, size_entry};
use crate::overview::{Raster, Sample, Validity, encode_block};
use crate::reduced::ReducedWindow;
use crate::tiff::{DOUBLE, Endian, Entry};
use crate::tile::{
    self, COMPRESSION_DEFLATE, COMPRESSION_LZW, COMPRESSION_NONE, COMPRESSION_ZSTD, GDAL_METADATA,
    GEO_KEY_DIRECTORY, IMAGE_LENGTH, IMAGE_WIDTH, MODEL_TIEPOINT, MODEL_TRANSFORMATION,
    TILE_BYTE_COUNTS, TILE_OFFSETS, TileLayout,
};
use tilegate_core::Window;

thread_local! {
    /// One codec per thread (libdeflate's and zstd's contexts are not `Sync`), reused for
    /// every tile the thread writes.
    static CODEC: std::cell::RefCell<Codec> = std::cell::RefCell::new(Codec::default());
}

/// GeoTIFF's GTRasterTypeGeoKey and its pixel-is-point value (GeoTIFF 1.0 §6.3.1.2).
const GT_RASTER_TYPE: u16 = 1025;
const RASTER_PIXEL_IS_POINT: u16 = 2;

/// Writes single-block COG tiles shaped like a prototype tile. Cheap to share across threads.
#[derive(Debug, Clone)]
pub struct TileWriter {
    layout: TileLayout,
    /// The prototype's tags, less those each tile sets itself (size, block table, tie point).
    kept: Vec<Entry>,
    /// The prototype's tie point: raster (I, J, K) and model (X, Y, Z).
    tiepoint: [f64; 6],
    window: u32,
}

fn doubles(e: Endian, entry: &Entry) -> Option<Vec<f64>> {
    (entry.typ == DOUBLE).then(|| {
        entry
            .data
            .chunks_exact(8)
            .map(|b| f64::from_bits(e.u64(b)))
            .collect()
    })
}

impl TileWriter {
    /// Learn the tile structure from `prototype`, a tile GDAL wrote for this job's window (0,0)
    /// with blocks of `window` pixels. `Err` says why this job's tiles must stay with GDAL.
    pub fn from_prototype(prototype: &[u8], window: u32) -> Result<Self, String> {
        let layout = tile::read_layout(Window::new(0, 0), prototype).map_err(|e| e.to_string())?;
        let f = &layout.format;
        let e = f.endian;
        if !f.tiled || (f.tile_width, f.tile_height) != (window, window) {
            return Err("the prototype is not one block of the window size".into());
        }
        if !matches!(
            f.compression,
            COMPRESSION_NONE | COMPRESSION_DEFLATE | COMPRESSION_LZW | COMPRESSION_ZSTD
        ) {
            return Err(format!("compression {} is written by GDAL", f.compression));
        }
        if f.gdal_dtype().is_none() || layout.has_mask {
            return Err("sample type or mask written by GDAL".into());
        }
        if layout.ifd.get(MODEL_TRANSFORMATION).is_some() {
            return Err("a model transformation (rotated grid) is written by GDAL".into());
        }
        if let Some(keys) = layout.ifd.get(GEO_KEY_DIRECTORY).and_then(|k| k.uints(e))
            && keys.get(4..).unwrap_or_default().chunks_exact(4).any(|k| {
                k[0] == u64::from(GT_RASTER_TYPE) && k[3] == u64::from(RASTER_PIXEL_IS_POINT)
            })
        {
            return Err("pixel-is-point georeferencing is written by GDAL".into());
        }
        let tiepoint = match layout.ifd.get(MODEL_TIEPOINT) {
            None => [0.0; 6],
            Some(t) => match doubles(e, t).as_deref() {
                Some([0.0, 0.0, k, x, y, z]) => [0.0, 0.0, *k, *x, *y, *z],
                _ => return Err("a tie point other than one at raster (0,0)".into()),
            },
        };
        let mut kept: Vec<Entry> = layout
            .ifd
            .entries
            .iter()
            .filter(|x| {
                !matches!(
                    x.tag,
                    IMAGE_WIDTH
                        | IMAGE_LENGTH
                        | TILE_OFFSETS
                        | TILE_BYTE_COUNTS
                        | MODEL_TIEPOINT
                        | GDAL_METADATA
                )
            })
            .cloned()
            .collect();
        // Statistics of the prototype's pixels would be wrong for every other window.
        if let Some(md) = layout.ifd.get(GDAL_METADATA).and_then(Entry::ascii)
            && let Some(md) = tile::filter_gdal_metadata(&md)
        {
            kept.push(tile::ascii_entry(GDAL_METADATA, &md));
        }
        Ok(Self {
            layout,
            kept,
            tiepoint,
            window,
        })
    }

    /// The tile of a `width × height` window whose top-left pixel is at `(x, y)` of the scene
    /// with geotransform `gt`. `pixels` are the window's samples, band after band, each band
    /// row-major, in the machine's byte order — as GDAL's RasterIO returns them. With `reduce`,
    /// also the window's first overview level (for windows of even width and height) as the
    /// assembler would compute it from the tile.
    pub fn encode(
        &self,
        pixels: &[u8],
        width: u32,
        height: u32,
        (x, y): (u32, u32),
        gt: &[f64; 6],
        reduce: Option<Resampling>,
    ) -> Result<(Vec<u8>, Option<ReducedWindow>), String> {
        if width > self.window || height > self.window || width == 0 || height == 0 {
            return Err(format!("a {width}×{height} window does not fit one block"));
        }
        let reduce = reduce.filter(|_| width.is_multiple_of(2) && height.is_multiple_of(2));
        let f = &self.layout.format;
        let e = f.endian;
        let (blocks, reduced) = with_sample_type!(f.gdal_dtype(), T => {
            self.blocks::<T>(pixels, width, height, reduce)
        })
        .ok_or_else(|| format!("no native tiles for {:?}", f.gdal_dtype()))??;
        let mut entries = self.kept.clone();
        entries.push(size_entry(e, IMAGE_WIDTH, width));
        entries.push(size_entry(e, IMAGE_LENGTH, height));
        if self.layout.ifd.get(MODEL_TIEPOINT).is_some() {
            // The origin moved by (x, y) pixels, computed as GDAL computes a window's origin.
            let (fx, fy) = (f64::from(x), f64::from(y));
            let t = self.tiepoint;
            let point = [
                t[0],
                t[1],
                t[2],
                t[3] + fx * gt[1] + fy * gt[2],
                t[4] + fx * gt[4] + fy * gt[5],
                t[5],
            ];
            let mut data = Vec::with_capacity(48);
            point.iter().for_each(|v| e.put_u64(&mut data, v.to_bits()));
            entries.push(Entry {
                tag: MODEL_TIEPOINT,
                typ: DOUBLE,
                count: 6,
                data,
            });
        }
        entries.sort_by_key(|x| x.tag);
        let ifd = IfdOut {
            entries,
            blocks: blocks.into_iter().map(bytes::Bytes::from).collect(),
            value_order: self.layout.ifd.value_order.clone(),
        };
        Ok((layout::write(&[ifd], e, false).0, reduced))
    }

    /// The window's block(s): band-sequential native samples to the block layout, then
    /// predicted and compressed; and the window reduced with `reduce`.
    fn blocks<T: Sample>(
        &self,
        pixels: &[u8],
        width: u32,
        height: u32,
        reduce: Option<Resampling>,
    ) -> Result<(Vec<Vec<u8>>, Option<ReducedWindow>), String> {
        let f = &self.layout.format;
        let spp = usize::from(f.samples);
        let n = width as usize * height as usize;
        if pixels.len() != n * spp * T::BYTES {
            return Err(format!(
                "{} bytes of pixels for a {width}×{height}×{spp} window",
                pixels.len()
            ));
        }
        let native = if cfg!(target_endian = "little") {
            Endian::Little
        } else {
            Endian::Big
        };
        let mut data = vec![T::default(); n * spp];
        for band in 0..spp {
            let plane = &pixels[band * n * T::BYTES..(band + 1) * n * T::BYTES];
            for (i, b) in plane.chunks_exact(T::BYTES).enumerate() {
                data[i * spp + band] = T::read(native, b);
            }
        }
        let raster = Raster {
            width: width as usize,
            height: height as usize,
            spp,
            data,
        };
        let reduced = reduce.map(|resampling| {
            let validity = Validity::of(self.layout.nodata_value());
            ReducedWindow::of(
                &raster.data,
                raster.width,
                raster.height,
                spp,
                validity,
                resampling,
            )
        });
        let blocks = CODEC.with(|codec| {
            let mut codec = codec.borrow_mut();
            (0..f.planes() as usize)
                .map(|plane| encode_block(&mut codec, &raster, f, plane, 0, 0))
                .collect::<Result<Vec<_>, String>>()
        })?;
        Ok((blocks, reduced))
    }
}

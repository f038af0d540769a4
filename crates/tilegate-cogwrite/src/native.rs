//! The native path: copy every tile's compressed blocks into the full-resolution IFD, decode
//! them once into a scene raster, build and encode the overview levels, write the layout.

use crate::codec::{self, BlockShape, Codec};
use crate::error::AssembleError;
use crate::layout::{self, IfdOut, long_entry, short_entry, size_entry};
use crate::overview::{self, Raster, Sample, Validity};
use crate::reduced::ReducedWindows;
use crate::tiff::Entry;
use crate::tile::{self, Format, TileLayout};
use crate::{AssemblyPath, SceneCog, SceneSpec, TileInput};
use bytes::Bytes;
use rayon::prelude::*;
use std::collections::HashSet;
use std::sync::atomic::{AtomicUsize, Ordering};
use tilegate_core::Grid;

/// Assemble tiles already checked to be block-copyable with natively decodable blocks.
/// `tiles` and `layouts` are in grid order (row-major).
pub(crate) fn assemble(
    spec: &SceneSpec,
    tiles: &[TileInput],
    layouts: &[TileLayout],
    reduced: Option<&ReducedWindows>,
) -> Result<SceneCog, AssembleError> {
    let f = &layouts[0].format;
    let nodata = layouts[0].nodata_value();
    let (levels, reused) = with_sample_type!(f.gdal_dtype(), T => {
        overviews::<T>(spec, tiles, layouts, nodata, reduced)
    })
    .unwrap_or_else(|| {
        unreachable!(
            "overview_obstacle admits only native types, not {:?}",
            f.gdal_dtype()
        )
    })?;

    // Full resolution: each tile's block(s), byte for byte, in the scene's TIFF block order
    // (all of plane 0 row-major, then plane 1, … — TIFF 6.0 §15 TileOffsets).
    let planes = f.planes() as usize;
    let mut full: Vec<Bytes> = Vec::with_capacity(tiles.len() * planes);
    for plane in 0..planes {
        for (t, l) in tiles.iter().zip(layouts) {
            let (off, len) = l.blocks[plane];
            full.push(t.bytes.slice(off as usize..(off + len) as usize));
        }
    }

    let main = main_entries(f, spec.grid.width, spec.grid.height, layouts);
    let mut ifds = vec![IfdOut {
        entries: main,
        blocks: full,
        value_order: Vec::new(),
    }];
    let overview_levels = levels.len() as u32;
    for lvl in levels {
        ifds.push(IfdOut {
            entries: overview_entries(f, lvl.width, lvl.height, &layouts[0]),
            blocks: lvl.blocks.into_iter().map(Bytes::from).collect(),
            value_order: Vec::new(),
        });
    }
    let file = layout::lay_out(&ifds, f.endian, spec.force_bigtiff);
    tracing::debug!(
        bytes = file.len(),
        bigtiff = file.bigtiff,
        "laid out the scene"
    );
    Ok(SceneCog {
        file,
        overview_levels,
        path: AssemblyPath::CopiedBlocks,
        fallback_reason: None,
        reduced_windows_reused: reused as u64,
    })
}

/// One encoded overview level.
struct Level {
    width: u32,
    height: u32,
    blocks: Vec<Vec<u8>>,
}

/// The encoded overview levels, and how many windows' first level came from `reduced`.
fn overviews<T: Sample>(
    spec: &SceneSpec,
    tiles: &[TileInput],
    layouts: &[TileLayout],
    nodata: Option<f64>,
    reduced: Option<&ReducedWindows>,
) -> Result<(Vec<Level>, usize), AssembleError> {
    let grid = spec.grid;
    let sizes = overview::overview_sizes(grid.width, grid.height, grid.window);
    if sizes.is_empty() {
        return Ok((Vec::new(), 0));
    }
    // Reductions made with another resampling are not this level's.
    let reduced = reduced.filter(|r| r.resampling() == spec.resampling);
    let f = &layouts[0].format;
    let validity = Validity::of(nodata);
    let t0 = std::time::Instant::now();
    let even = grid.width.is_multiple_of(2) && grid.height.is_multiple_of(2);
    let (mut cur, reused) = if even {
        decode_half::<T>(grid, f, tiles, layouts, validity, spec.resampling, reduced)?
    } else {
        (decode_scene::<T>(grid, f, tiles, layouts, validity)?, 0)
    };
    tracing::debug!(
        elapsed_ms = t0.elapsed().as_millis() as u64,
        tiles = tiles.len(),
        first_level_direct = even,
        reused,
        "decoded the tiles"
    );
    let mut levels = Vec::with_capacity(sizes.len());
    // Each level from the previous one, as GDAL 3.6's COG driver does (measured: level 2
    // equals the average of GDAL's rounded level 1, not of the full resolution).
    for (w, h) in sizes {
        let t0 = std::time::Instant::now();
        let next = if (cur.width, cur.height) == (w as usize, h as usize) {
            // The first level, already reduced while decoding.
            std::mem::replace(
                &mut cur,
                Raster {
                    width: 0,
                    height: 0,
                    spp: 0,
                    data: Vec::new(),
                },
            )
        } else {
            overview::downsample(&cur, w as usize, h as usize, validity, spec.resampling)
        };
        let t1 = std::time::Instant::now();
        levels.push(Level {
            width: w,
            height: h,
            blocks: overview::encode_level(&next, f)
                .map_err(|detail| AssembleError::EncodeOverview { detail })?,
        });
        tracing::debug!(
            width = w,
            height = h,
            downsample_ms = (t1 - t0).as_millis() as u64,
            encode_ms = t1.elapsed().as_millis() as u64,
            "overview level"
        );
        cur = next;
    }
    Ok((levels, reused))
}

/// Decode every tile's block(s) into one pixel-interleaved scene raster, one grid row of tiles
/// per rayon task.
fn decode_scene<T: Sample>(
    grid: Grid,
    f: &Format,
    tiles: &[TileInput],
    layouts: &[TileLayout],
    validity: Validity<T>,
) -> Result<Raster<T>, AssembleError> {
    let (width, height) = (grid.width as usize, grid.height as usize);
    let spp = usize::from(f.samples);
    let win = grid.window as usize;
    let cols = grid.cols() as usize;
    let shape = BlockShape::of(f);
    let mut data = vec![T::default(); width * height * spp];
    data.par_chunks_mut(win * width * spp)
        .enumerate()
        .try_for_each_init(
            || (Codec::default(), vec![0u8; shape.len()]),
            |(codec, buf), (row, strip)| -> Result<(), AssembleError> {
                let rows_here = strip.len() / (width * spp);
                for col in 0..cols {
                    let i = row * cols + col;
                    let x0 = col * win;
                    let w = win.min(width - x0);
                    let out = &mut strip[x0 * spp..];
                    decode_tile(
                        codec,
                        buf,
                        f,
                        &tiles[i],
                        &layouts[i],
                        w,
                        rows_here,
                        validity,
                        out,
                        width * spp,
                    )?;
                }
                Ok(())
            },
        )?;
    Ok(Raster {
        width,
        height,
        spp,
        data,
    })
}

/// The first overview level straight from the tiles, for a scene of even width and height:
/// every 2×2 box then lies inside one tile (windows start at multiples of 16), so each tile is
/// decoded and reduced on its own and the full-resolution scene is never held in memory. The
/// result is the same as [`decode_scene`] followed by [`overview::downsample`]. Windows that
/// their encoders placed in `reduced` are already there and are not decoded; returns how many
/// were.
fn decode_half<T: Sample>(
    grid: Grid,
    f: &Format,
    tiles: &[TileInput],
    layouts: &[TileLayout],
    validity: Validity<T>,
    resampling: crate::Resampling,
    reduced: Option<&ReducedWindows>,
) -> Result<(Raster<T>, usize), AssembleError> {
    let (width, height) = (grid.width as usize / 2, grid.height as usize / 2);
    let spp = usize::from(f.samples);
    let win = grid.window as usize;
    let cols = grid.cols() as usize;
    let shape = BlockShape::of(f);
    let (mut data, placed) = reduced
        .and_then(|r| r.take::<T>(spp))
        .filter(|(level, _)| level.len() == width * height * spp)
        .unwrap_or_else(|| (vec![T::default(); width * height * spp], HashSet::new()));
    let reused = AtomicUsize::new(0);
    data.par_chunks_mut(win / 2 * width * spp)
        .enumerate()
        .try_for_each_init(
            || {
                (
                    Codec::default(),
                    vec![0u8; shape.len()],
                    vec![T::default(); win * win * spp],
                )
            },
            |(codec, buf, px), (row, strip)| -> Result<(), AssembleError> {
                let half_rows = strip.len() / (width * spp);
                for col in 0..cols {
                    let i = row * cols + col;
                    let x0 = col * win;
                    let w = win.min(2 * width - x0);
                    if placed.contains(&tiles[i].window) {
                        reused.fetch_add(1, Ordering::Relaxed);
                        continue;
                    }
                    let out = &mut strip[x0 / 2 * spp..];
                    decode_tile(
                        codec,
                        buf,
                        f,
                        &tiles[i],
                        &layouts[i],
                        w,
                        2 * half_rows,
                        validity,
                        px,
                        w * spp,
                    )?;
                    overview::reduce_window(
                        px,
                        w,
                        2 * half_rows,
                        spp,
                        validity,
                        resampling,
                        out,
                        width * spp,
                    );
                }
                Ok(())
            },
        )?;
    Ok((
        Raster {
            width,
            height,
            spp,
            data,
        },
        reused.into_inner(),
    ))
}

/// Decode one tile's top `rows` rows, `w` pixels wide, into `out` (pixel-interleaved,
/// `out_stride` samples per row), undoing the predictors.
#[expect(
    clippy::too_many_arguments,
    reason = "a tile, its format and a destination region"
)]
fn decode_tile<T: Sample>(
    codec: &mut Codec,
    buf: &mut [u8],
    f: &Format,
    t: &TileInput,
    l: &TileLayout,
    w: usize,
    rows: usize,
    validity: Validity<T>,
    out: &mut [T],
    out_stride: usize,
) -> Result<(), AssembleError> {
    let spp = usize::from(f.samples);
    let shape = BlockShape::of(f);
    let planes = f.planes() as usize;
    let block_spp = f.block_samples();
    let row_bytes = shape.row_samples * T::BYTES;
    let horizontal = f.predictor == 2;
    for plane in 0..planes {
        let (off, len) = l.blocks[plane];
        if len == 0 {
            // A sparse block reads as nodata (or 0), as in GDAL.
            fill_block(out, out_stride, spp, w, rows, plane, planes, validity);
            continue;
        }
        let src = &t.bytes[off as usize..(off + len) as usize];
        let corrupt = |detail| AssembleError::CorruptBlock {
            window: l.window,
            detail,
        };
        codec.inflate(f, src, buf).map_err(corrupt)?;
        if f.predictor == 3 {
            codec::fp_undo(buf, f.endian, shape);
        }
        let n = w * block_spp;
        for y in 0..rows {
            let line = &buf[y * row_bytes..(y + 1) * row_bytes];
            let dst = &mut out[y * out_stride..y * out_stride + w * spp];
            if planes > 1 {
                overview::read_row(line, f.endian, n, 1, horizontal, dst, |i| i * spp + plane);
            } else {
                overview::read_row_contiguous(
                    &line[..n * T::BYTES],
                    f.endian,
                    spp,
                    horizontal,
                    dst,
                );
            }
        }
    }
    Ok(())
}

#[expect(clippy::too_many_arguments, reason = "a region and its band selection")]
fn fill_block<T: Sample>(
    out: &mut [T],
    out_stride: usize,
    spp: usize,
    w: usize,
    rows: usize,
    plane: usize,
    planes: usize,
    validity: Validity<T>,
) {
    let v = validity.nodata.unwrap_or_default();
    for y in 0..rows {
        for x in 0..w {
            let px = &mut out[y * out_stride + x * spp..][..spp];
            if planes > 1 {
                px[plane] = v;
            } else {
                px.fill(v);
            }
        }
    }
}

/// Structural entries shared by every IFD (TIFF 6.0 §8 and §15).
fn structural(f: &Format, width: u32, height: u32, origin: &TileLayout) -> Vec<Entry> {
    let e = f.endian;
    let mut v = vec![
        size_entry(e, tile::IMAGE_WIDTH, width),
        size_entry(e, tile::IMAGE_LENGTH, height),
        short_entry(e, tile::BITS_PER_SAMPLE, &f.bits),
        short_entry(e, tile::COMPRESSION, &[f.compression]),
        short_entry(e, tile::SAMPLES_PER_PIXEL, &[f.samples]),
        short_entry(e, tile::PLANAR_CONFIGURATION, &[f.planar]),
        size_entry(e, tile::TILE_WIDTH, f.tile_width),
        size_entry(e, tile::TILE_LENGTH, f.tile_height),
        short_entry(e, tile::SAMPLE_FORMAT, &f.sample_format),
    ];
    if let Some(p) = f.photometric {
        v.push(short_entry(e, tile::PHOTOMETRIC, &[p]));
    }
    if f.predictor != 1 {
        v.push(short_entry(e, tile::PREDICTOR, &[f.predictor]));
    }
    if !f.extra_samples.is_empty() {
        v.push(short_entry(e, tile::EXTRA_SAMPLES, &f.extra_samples));
    }
    // GDAL writes GDAL_NODATA on every IFD, overviews included.
    if let Some(nd) = origin.ifd.get(tile::GDAL_NODATA) {
        v.push(nd.clone());
    }
    v
}

fn main_entries(f: &Format, width: u32, height: u32, layouts: &[TileLayout]) -> Vec<Entry> {
    let origin = &layouts[0];
    let mut v = structural(f, width, height, origin);
    v.extend(tile::main_ifd_copied(origin));
    v
}

fn overview_entries(f: &Format, width: u32, height: u32, origin: &TileLayout) -> Vec<Entry> {
    let mut v = structural(f, width, height, origin);
    // NewSubfileType bit 0: a reduced-resolution version of another image (TIFF 6.0 §8).
    v.push(long_entry(f.endian, tile::NEW_SUBFILE_TYPE, 1));
    v
}

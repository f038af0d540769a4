//! A window's pixels as each recipe reads them: bands copied, an expression or NDVI
//! evaluated, a registered recipe run over a margin, or the source warped.

use super::cache::CachedSource;
use super::{EncodeRequest, NDVI_NODATA, shifted_geotransform};
use crate::GdalSaid;
use crate::dtype::Dtype;
use crate::error::CogError;
use crate::ffi::{self, Layout};
use crate::semantics::BandSemantics;
use crate::warp::Transformer;
use gdal::DriverManager;
use gdal::errors::GdalError;
use std::sync::Arc;
use tilegate_core::WindowRect;
use tilegate_core::recipe::Operation;

/// Read `req`'s window from `src` as its recipe asks (`bands`: the recipe's input bands).
pub(super) fn read(
    src: &CachedSource,
    req: &EncodeRequest,
    bands: &[u32],
) -> Result<Pixels, CogError> {
    match &req.recipe.operation {
        Operation::Copy { .. } => read_copy(src, req, bands),
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
        Operation::Warp(spec) => read_warp(src, req, spec, Transformer::Exact),
        Operation::Pyramid(p) => {
            // The job's grid is the base zoom's, in the set's CRS (the scene's CRS).
            let spec = tilegate_core::recipe::WarpSpec {
                t_srs: req.scene.crs_wkt.clone(),
                tr: None,
                tap: false,
                origin: None,
                resampling: p.resampling.clone(),
            };
            // `near` tiles equal `gdalwarp -et 0` of each tile exactly; any other resampling
            // is within GDAL's own tolerance of it, at less than half the warp's time.
            let transformer = if p.resampling == "near" {
                Transformer::Exact
            } else {
                Transformer::Approximate
            };
            read_warp(src, req, &spec, transformer)
        }
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
        Operation::Product(_) => unreachable!("a product window reads its inputs (`product`)"),
    }
}

impl Pixels {
    /// The window as a pyramid's tile values: every band per pixel, valid where the mask (or
    /// alpha) says so and, without one, where not every band is its nodata (or NaN).
    pub(crate) fn tile_data(
        &self,
        rect: WindowRect,
        encoding: tilegate_pmtiles::PixelEncoding,
    ) -> tilegate_pmtiles::TileData {
        let n = rect.width as usize * rect.height as usize;
        let b = self.bands as usize;
        let size = self.dtype.size();
        let mut out = tilegate_pmtiles::TileData::empty(rect.width, rect.height, b);
        let alpha_band = self
            .semantics
            .last()
            .is_some_and(|s| s.color == gdal_sys::GDALColorInterp::GCI_AlphaBand);
        // A few thousand samples decoded at a time: a band's worth of `f64` is 32 MiB for a
        // 2048² window, fresh pages each time.
        const CHUNK: usize = 4096;
        for band in 0..b {
            let plane = &self.bytes[band * n * size..(band + 1) * n * size];
            for (c, chunk) in plane.chunks(CHUNK * size).enumerate() {
                let values = self.dtype.decode_f64(chunk);
                for (i, v) in values.into_iter().enumerate() {
                    out.values[(c * CHUNK + i) * b + band] = v as f32;
                }
            }
        }
        for i in 0..n {
            out.valid[i] = match (&self.mask, alpha_band) {
                (Some(m), _) => m[i] != 0,
                (None, true) => out.values[i * b + b - 1] != 0.0,
                (None, false) => (0..b).any(|band| {
                    let v = f64::from(out.values[i * b + band]);
                    !v.is_nan() && self.nodata.get(band).copied().flatten() != Some(v)
                }),
            };
        }
        if let Some((_, entries)) = self.semantics.first().and_then(|s| s.palette.as_ref())
            && b == 1
            && encoding == tilegate_pmtiles::PixelEncoding::Image8
        {
            out = expand_palette(&out, entries);
        }
        if self.dtype == Dtype::Byte && encoding == tilegate_pmtiles::PixelEncoding::Image8 {
            // Already what 8-bit imagery stores (palette colours too).
            out.clear_invalid();
        } else {
            out.quantize(encoding);
        }
        out
    }
}

/// One paletted band as its colours: RGB per pixel, invalid where it was or where its entry's
/// alpha is 0 (an index past the table is invalid too).
fn expand_palette(
    index: &tilegate_pmtiles::TileData,
    entries: &[gdal::raster::ColorEntry],
) -> tilegate_pmtiles::TileData {
    let mut out = tilegate_pmtiles::TileData::empty(index.width, index.height, 3);
    for (i, valid) in index.valid.iter().enumerate() {
        let entry = entries.get(index.values[i] as usize);
        if let (true, Some(gdal::raster::ColorEntry::Rgba(c))) = (*valid, entry)
            && c.a != 0
        {
            out.valid[i] = true;
            out.values[i * 3..i * 3 + 3].copy_from_slice(&[
                f32::from(c.r),
                f32::from(c.g),
                f32::from(c.b),
            ]);
        }
    }
    out
}

/// A window's output pixels, band-sequential, native-endian, with what the bands mean.
pub(super) struct Pixels {
    pub(super) dtype: Dtype,
    pub(super) bands: u32,
    pub(super) nodata: Vec<Option<f64>>,
    /// One per band, shared with the source's (nothing is copied per window).
    pub(super) semantics: Vec<Arc<BandSemantics>>,
    /// Dataset metadata kept on the tile.
    pub(super) metadata: Arc<[(String, String)]>,
    /// The window of the source's per-dataset mask (0 masked out, 255 valid), if it has one.
    pub(super) mask: Option<Vec<u8>>,
    pub(super) bytes: Vec<u8>,
}

fn read_err(req: &EncodeRequest, source: GdalError) -> CogError {
    let (path, rect) = (req.path.clone(), req.rect);
    if ffi::is_network(&req.path) {
        CogError::Read {
            path,
            rect,
            source: GdalSaid(source),
        }
    } else {
        CogError::CorruptWindow {
            path,
            rect,
            source: GdalSaid(source),
        }
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
    transformer: Transformer,
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
    let warp_err = |source: GdalError| CogError::Warp {
        path: req.path.clone(),
        rect: r,
        source: GdalSaid(source),
    };
    let mem_driver = DriverManager::get_driver_by_name("MEM").map_err(warp_err)?;
    // The window's grid: its geotransform and CRS on a MEM dataset of `bands` bands.
    let grid = |bands: u32| {
        let mut mem = ffi::create(&mem_driver, "", r.width, r.height, bands, src.dtype, &[])?;
        mem.set_geo_transform(&shifted_geotransform(&req.scene.geotransform, r))?;
        mem.set_projection(&req.scene.crs_wkt)?;
        Ok::<_, GdalError>(mem)
    };
    // An average through the approximate transformer of an integer source with nodata, or
    // with every pixel valid, is the warper's arithmetic computed here, several times faster.
    let all_valid = || {
        (1..=bands as usize).all(|b| {
            src.ds
                .rasterband(b)
                .and_then(|band| band.mask_flags())
                .is_ok_and(|f| f.is_all_valid())
        })
    };
    if transformer == Transformer::Approximate
        && spec.resampling == "average"
        && !has_alpha
        && (nodata.is_some() || all_valid())
        && let Some(avg) = crate::warp_average::average_window(
            &src.ds,
            &grid(0).map_err(warp_err)?,
            r,
            src.dtype,
            bands,
            nodata.as_deref(),
        )
        .map_err(warp_err)?
    {
        return Ok(Pixels {
            dtype: src.dtype,
            bands,
            nodata: src.nodata.clone(),
            semantics: src.semantics.bands.clone(),
            metadata: src.semantics.metadata.clone(),
            mask: mask_band.then(|| avg.valid.iter().map(|v| if *v { 255 } else { 0 }).collect()),
            bytes: avg.bytes,
        });
    }
    let dst_bands = bands + u32::from(mask_band);
    let mem = grid(dst_bands).map_err(warp_err)?;
    if let Some(values) = &nodata {
        for (i, v) in values.iter().enumerate() {
            // Filled, not only declared: the warper skips the chunks of the window that no
            // source pixel reaches, and INIT_DEST=NO_DATA initialises only the chunks it warps,
            // so an unfilled MEM band would keep zeros there — valid pixels where there is
            // no data, whenever nodata is not 0.
            mem.rasterband(i + 1)
                .and_then(|mut b| {
                    b.set_no_data_value(Some(*v))?;
                    b.fill(*v, None)
                })
                .map_err(warp_err)?;
        }
    }
    crate::warp::warp_window(
        &src.ds,
        &mem,
        spec,
        transformer,
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

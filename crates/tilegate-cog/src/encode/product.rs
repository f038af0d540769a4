//! A product tile's window: every input scene warped onto the window's grid, then combined
//! pixel by pixel — the first valid observation in the mosaic's order, or a statistic of the
//! valid observations.
//!
//! Each input goes through GDAL's warper with the warp recipe's options and the tile's grid.
//! With `near` (the default) the transformer is exact and an input pixel is valid where the
//! warper found a source pixel that the source's mask (a per-dataset mask or an alpha band)
//! keeps and no band holds its nodata value (or NaN) — the warper is told to ignore nodata
//! (`-srcnodata None`) so that a scene's mask is honoured even where it also declares nodata,
//! which `gdalwarp` otherwise skips. With another resampling, an input is valid where the
//! warper's own validity says (nodata first, then the mask or alpha), as `gdalwarp` decides.

use super::cache::{self, CachedSource};
use super::pixels::Pixels;
use super::{EncodeRequest, shifted_geotransform};
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
use tilegate_core::product::{Method, ProductSpec, Stat};
use tilegate_core::recipe::WarpSpec;

/// One input of a product window: where GDAL reads it and what the planner found there.
#[derive(Debug, Clone, PartialEq)]
pub struct ProductSource {
    pub path: String,
    pub cache_key: String,
    pub scene: tilegate_core::source::SceneMeta,
}

/// One input warped onto the window: its bands as `f64`, band after band, and where it is
/// valid.
struct Warped {
    values: Vec<f64>,
    valid: Vec<bool>,
}

/// The window's pixels of the product tile `req` (whose scene is the tile's output grid).
pub(super) fn read(
    req: &EncodeRequest,
    spec: &ProductSpec,
    inputs: &[ProductSource],
) -> Result<Pixels, CogError> {
    if inputs.len() != spec.inputs.len() || inputs.is_empty() {
        return Err(CogError::Recipe(
            tilegate_core::recipe::RecipeError::Custom(format!(
                "product tile {} lists {} inputs and was given {}",
                spec.tile,
                spec.inputs.len(),
                inputs.len()
            )),
        ));
    }
    let r = req.rect;
    let n = r.width as usize * r.height as usize;
    let order = spec.mosaic_order();
    let mut first: Option<InputFacts> = None;
    let mut warped = Vec::with_capacity(order.len());
    for &i in &order {
        let input = &inputs[i];
        let one = EncodeRequest {
            path: input.path.clone(),
            cache_key: input.cache_key.clone(),
            scene: input.scene.clone(),
            recipe: req.recipe.clone(),
            rect: r,
        };
        let w = cache::with_source(&one, |src| {
            let data_bands = data_bands(src);
            match &first {
                None => {
                    first = Some(InputFacts {
                        dtype: src.dtype,
                        bands: data_bands,
                        semantics: src.semantics.bands[..data_bands as usize].to_vec(),
                    });
                }
                Some(f) if (f.dtype, f.bands) != (src.dtype, data_bands) => {
                    return Err(CogError::SceneMismatch {
                        path: input.path.clone(),
                        planned: format!("{} bands of {}", f.bands, f.dtype.name()),
                        found: format!("{data_bands} bands of {}", src.dtype.name()),
                    });
                }
                Some(_) => {}
            }
            warp_input(src, req, &one, &spec.resampling)
        })
        .inspect_err(|e| {
            if matches!(e, CogError::Read { .. } | CogError::CorruptWindow { .. }) {
                cache::evict(&input.path);
            }
        })?;
        warped.push(w);
    }
    let InputFacts {
        dtype,
        bands,
        semantics,
    } = first.expect("at least one input");
    let b = bands as usize;
    match spec.method {
        Method::Mosaic { .. } => {
            // The nodata every input shares, as planned; else a mask where none observed.
            let common = req.scene.nodata.filter(|v| !v.is_nan());
            let fill = common.unwrap_or(0.0);
            let mut out = vec![fill; n * b];
            let mut filled = vec![false; n];
            for w in &warped {
                for p in 0..n {
                    if !filled[p] && w.valid[p] {
                        filled[p] = true;
                        for band in 0..b {
                            out[band * n + p] = w.values[band * n + p];
                        }
                    }
                }
            }
            let out: Vec<f64> = out.into_iter().map(|v| dtype.convert(v)).collect();
            let mut bytes = Vec::new();
            dtype.encode_f64(&out, &mut bytes);
            Ok(Pixels {
                dtype,
                bands,
                nodata: vec![common; b],
                semantics,
                metadata: Arc::from(Vec::new()),
                mask: common
                    .is_none()
                    .then(|| filled.iter().map(|f| if *f { 255 } else { 0 }).collect()),
                bytes,
            })
        }
        Method::Composite { stat: Stat::Count } => {
            let counts: Vec<f64> = (0..n)
                .map(|p| warped.iter().filter(|w| w.valid[p]).count() as f64)
                .collect();
            let mut bytes = Vec::new();
            Dtype::UInt16.encode_f64(&counts, &mut bytes);
            Ok(Pixels {
                dtype: Dtype::UInt16,
                bands: 1,
                nodata: vec![None],
                semantics: vec![Arc::new(BandSemantics::plain("count"))],
                metadata: Arc::from(Vec::new()),
                mask: None,
                bytes,
            })
        }
        Method::Composite { stat } => {
            let mut out = vec![f64::NAN; n * b];
            let mut obs = Vec::with_capacity(warped.len());
            for band in 0..b {
                for p in 0..n {
                    obs.clear();
                    obs.extend(
                        warped
                            .iter()
                            .filter(|w| w.valid[p])
                            .map(|w| w.values[band * n + p]),
                    );
                    if !obs.is_empty() {
                        out[band * n + p] = f64::from(stat.of(&mut obs) as f32);
                    }
                }
            }
            let mut bytes = Vec::new();
            Dtype::Float32.encode_f64(&out, &mut bytes);
            let name = stat.name();
            Ok(Pixels {
                dtype: Dtype::Float32,
                bands,
                nodata: vec![Some(f64::NAN); b],
                semantics: semantics
                    .iter()
                    .map(|s| {
                        let described = if s.description.is_empty() {
                            name.clone()
                        } else {
                            format!("{} {name}", s.description)
                        };
                        Arc::new(BandSemantics::plain(&described))
                    })
                    .collect(),
                metadata: Arc::from(Vec::new()),
                mask: None,
                bytes,
            })
        }
    }
}

/// What the first input read says every input's pixels are.
struct InputFacts {
    dtype: Dtype,
    bands: u32,
    semantics: Vec<Arc<BandSemantics>>,
}

/// The source's bands that hold data: all but an alpha band.
fn data_bands(src: &CachedSource) -> u32 {
    let all = u32::try_from(src.semantics.bands.len()).unwrap_or(u32::MAX);
    if has_alpha(src) { all - 1 } else { all }
}

fn has_alpha(src: &CachedSource) -> bool {
    src.semantics.bands.len() > 1
        && src
            .semantics
            .bands
            .last()
            .is_some_and(|b| b.color == gdal_sys::GDALColorInterp::GCI_AlphaBand)
}

/// Warp one input onto the window's grid (the tile's CRS and the window's geotransform) with
/// an alpha band of the warper's validity.
fn warp_input(
    src: &CachedSource,
    tile: &EncodeRequest,
    input: &EncodeRequest,
    resampling: &str,
) -> Result<Warped, CogError> {
    let r = tile.rect;
    let warp_err = |source: GdalError| CogError::Warp {
        path: input.path.clone(),
        rect: r,
        source: GdalSaid(source),
    };
    let bands = data_bands(src);
    let mem_driver = DriverManager::get_driver_by_name("MEM").map_err(warp_err)?;
    let mut mem = ffi::create(
        &mem_driver,
        "",
        r.width,
        r.height,
        bands + 1,
        Dtype::Float64,
        &[],
    )
    .map_err(warp_err)?;
    mem.set_geo_transform(&shifted_geotransform(&tile.scene.geotransform, r))
        .map_err(warp_err)?;
    mem.set_projection(&tile.scene.crs_wkt).map_err(warp_err)?;
    let spec = WarpSpec {
        t_srs: tile.scene.crs_wkt.clone(),
        tr: None,
        tap: false,
        origin: None,
        resampling: resampling.to_owned(),
    };
    let exact = resampling == "near";
    let transformer = if exact {
        Transformer::Exact
    } else {
        Transformer::Approximate
    };
    crate::warp::warp_validity(&src.ds, &mem, &spec, transformer, has_alpha(src), exact)
        .map_err(warp_err)?;
    let n = r.width as usize * r.height as usize;
    let mut raw = vec![0u8; n * (bands as usize + 1) * 8];
    let all: Vec<u32> = (1..=bands + 1).collect();
    let whole = WindowRect { x: 0, y: 0, ..r };
    ffi::raster_io(
        &mem,
        false,
        whole,
        &all,
        Dtype::Float64,
        Layout::BandSequential,
        &mut raw,
    )
    .map_err(warp_err)?;
    let mut values = Dtype::Float64.decode_f64(&raw);
    let alpha = values.split_off(n * bands as usize);
    let nodata = &src.nodata[..bands as usize];
    let valid = (0..n)
        .map(|p| {
            alpha[p] != 0.0
                && (0..bands as usize).all(|band| {
                    let v = values[band * n + p];
                    !v.is_nan() && (!exact || nodata[band] != Some(v))
                })
        })
        .collect();
    Ok(Warped { values, valid })
}

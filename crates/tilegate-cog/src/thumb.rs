//! A small PNG picture of an assembled scene, made from its smallest overview (no full
//! resolution pixel is read), for the job report.

use crate::GdalSaid;
use crate::error::CogError;
use crate::ffi::{self, VsiMemFile};
use gdal::DriverManager;
use gdal::raster::{Buffer, ColorInterpretation, RasterBand};

fn gdal_err(operation: &'static str) -> impl FnOnce(gdal::errors::GdalError) -> CogError {
    move |source| CogError::Gdal {
        operation,
        source: GdalSaid(source),
    }
}

/// A PNG of the scene at `path` (any GDAL path) from the smallest overview at least
/// `min_side` pixels on its longer side (the full raster if none is): red, green and blue from
/// bands colour-interpreted so (else bands 1–3 of a three-or-more-band scene, else band 1 as
/// grey), each stretched from its 2nd to its 98th percentile, and nodata (or masked) pixels
/// transparent.
pub fn thumbnail_png(path: &str, min_side: usize) -> Result<Vec<u8>, CogError> {
    let _gdal_log = ffi::ErrorScope::new();
    let ds = ffi::open_raster(path)?;
    let count = ds.raster_count();
    let band = |i: usize| ds.rasterband(i).map_err(gdal_err("read a scene band"));
    let by_interp = |want: ColorInterpretation| {
        (1..=count).find(|&i| band(i).is_ok_and(|b| b.color_interpretation() == want))
    };
    let rgb = match (
        by_interp(ColorInterpretation::RedBand),
        by_interp(ColorInterpretation::GreenBand),
        by_interp(ColorInterpretation::BlueBand),
    ) {
        (Some(r), Some(g), Some(b)) => vec![r, g, b],
        _ if count >= 3 => vec![1, 2, 3],
        _ => vec![1],
    };
    let level = |b: &RasterBand<'_>| -> Result<Option<usize>, CogError> {
        let n = b.overview_count().map_err(gdal_err("count overviews"))?;
        let mut pick = None;
        for i in 0..usize::try_from(n).unwrap_or(0) {
            let o = b.overview(i).map_err(gdal_err("open an overview"))?;
            let (w, h) = o.size();
            if w.max(h) >= min_side {
                pick = Some(i);
            }
        }
        Ok(pick)
    };
    let first = band(rgb[0])?;
    let level = level(&first)?;
    // A band of the chosen level: its size, values and validity (255 valid, 0 not).
    let read = |i: usize| -> Result<Plane, CogError> {
        let b = band(i)?;
        let b = match level {
            Some(l) => b.overview(l).map_err(gdal_err("open an overview"))?,
            None => b,
        };
        let (w, h) = b.size();
        let px: Buffer<f64> = b
            .read_as((0, 0), (w, h), (w, h), None)
            .map_err(gdal_err("read an overview"))?;
        let mask = b.open_mask_band().ok().and_then(|m| {
            m.read_as::<u8>((0, 0), (w, h), (w, h), None)
                .ok()
                .map(|m| m.data().to_vec())
        });
        let nodata = b.no_data_value();
        let mut valid = mask.unwrap_or_else(|| vec![255; w * h]);
        for (v, p) in valid.iter_mut().zip(px.data()) {
            if p.is_nan() || nodata.is_some_and(|nd| *p == nd) {
                *v = 0;
            }
        }
        Ok(Plane {
            width: w,
            height: h,
            values: px.data().to_vec(),
            valid,
        })
    };
    let mut planes = Vec::new();
    let mut alpha: Option<Vec<u8>> = None;
    let (mut width, mut height) = (0, 0);
    for &i in &rgb {
        let Plane {
            width: w,
            height: h,
            values,
            valid,
        } = read(i)?;
        (width, height) = (w, h);
        planes.push(stretch(&values, &valid));
        alpha = Some(match alpha {
            None => valid,
            Some(a) => a.iter().zip(&valid).map(|(x, y)| (*x).min(*y)).collect(),
        });
    }
    while planes.len() < 3 {
        planes.push(planes[0].clone());
    }
    let mem = DriverManager::get_driver_by_name("MEM")
        .map_err(gdal_err("find GDAL's MEM driver"))?
        .create_with_band_type::<u8, _>("", width, height, 4)
        .map_err(gdal_err("create the thumbnail raster"))?;
    let alpha = alpha.unwrap_or_else(|| vec![255; width * height]);
    for (i, plane) in planes.into_iter().chain([alpha]).enumerate() {
        let mut buf = Buffer::new((width, height), plane);
        mem.rasterband(i + 1)
            .and_then(|mut b| b.write((0, 0), (width, height), &mut buf))
            .map_err(gdal_err("write the thumbnail raster"))?;
    }
    let file = VsiMemFile::new("thumbnail");
    let png =
        DriverManager::get_driver_by_name("PNG").map_err(gdal_err("find GDAL's PNG driver"))?;
    mem.create_copy(&png, file.name(), &gdal::cpl::CslStringList::new())
        .map_err(gdal_err("write the thumbnail PNG"))?;
    file.take().map_err(gdal_err("take the thumbnail PNG"))
}

struct Plane {
    width: usize,
    height: usize,
    values: Vec<f64>,
    valid: Vec<u8>,
}

/// Stretch valid values from their 2nd to 98th percentile onto 1..=255 (0 where invalid).
fn stretch(px: &[f64], valid: &[u8]) -> Vec<u8> {
    let mut values: Vec<f64> = px
        .iter()
        .zip(valid)
        .filter(|(p, v)| **v > 0 && p.is_finite())
        .map(|(p, _)| *p)
        .collect();
    if values.is_empty() {
        return vec![0; px.len()];
    }
    values.sort_by(f64::total_cmp);
    let at = |q: f64| values[((values.len() - 1) as f64 * q).round() as usize];
    let (lo, hi) = (at(0.02), at(0.98));
    let span = if hi > lo { hi - lo } else { 1.0 };
    px.iter()
        .zip(valid)
        .map(|(p, v)| {
            if *v == 0 || !p.is_finite() {
                0
            } else {
                (1.0 + ((p - lo) / span).clamp(0.0, 1.0) * 254.0).round() as u8
            }
        })
        .collect()
}

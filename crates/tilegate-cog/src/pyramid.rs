//! A pyramid window: the block of base tiles it covers warped from the source onto the tile
//! matrix set's base zoom, cut into tiles, and halved level by level into the parents whose
//! children all lie in the block — each tile encoded as its image, an empty one as nothing.

use crate::encode::{EncodeRequest, pyramid_pixels};
use crate::error::CogError;
use rayon::prelude::*;
use tilegate_core::recipe::{Operation, PYRAMID_WINDOW_TILES, PyramidSpec, WarpSpec};
use tilegate_core::source::SceneMeta;
use tilegate_pmtiles::tms::{CornerOfOrigin, Crs};
use tilegate_pmtiles::{Bbox, Pyramid, Tile, TileMatrixSet, encode_png};

/// One tile a window made: its address and its image (`None`: no valid pixel, not written).
#[derive(Debug, Clone, PartialEq)]
pub struct PyramidTile {
    pub tile: Tile,
    pub image: Option<Vec<u8>>,
}

/// Warp, cut and halve one window of a pyramid job: its base tiles first, then each level up
/// to the window's top tile (or the pyramid's top zoom, if that is lower down).
pub fn encode_pyramid_window(req: &EncodeRequest) -> Result<Vec<PyramidTile>, CogError> {
    let Operation::Pyramid(spec) = &req.recipe.operation else {
        return Err(CogError::Recipe(
            tilegate_core::recipe::RecipeError::Custom("not a pyramid recipe".into()),
        ));
    };
    let size = spec.tile_size.max(1);
    let encoding = tilegate_pmtiles::PixelEncoding::named(spec.encoding.map(|e| e.name()))
        .expect("every terrain encoding is named");
    let reduce = tilegate_pmtiles::Reduce::named(spec.overview().name())
        .expect("every overview resampling is named");
    let data = pyramid_pixels(req, encoding)?;
    let r = req.rect;
    let (tx0, ty0) = (
        spec.base_origin[0] + r.x / size,
        spec.base_origin[1] + r.y / size,
    );
    let [min_x, min_y, max_x, max_y] = spec.base_range;
    // Columns may run past the matrix's east edge (a scene across the antimeridian): a tile is
    // named by its column modulo its zoom's width. A window's tiles all lie on one side of
    // the wrap (it starts on a multiple of its width in tiles, which divides the matrix's).
    let tms = TileMatrixSet::named(&spec.tms, spec.tms_document.as_deref())
        .map_err(|e| CogError::Recipe(tilegate_core::recipe::RecipeError::Custom(e.to_string())))?;
    let width_at = |z: u8| tms.matrix(z).map_or(u32::MAX, |m| m.matrix_width);
    let mut out = Vec::new();
    let mut level = data;
    let (mut z, mut x0, mut y0) = (spec.max_zoom, tx0, ty0);
    let (mut lo_x, mut lo_y, mut hi_x, mut hi_y) = (min_x, min_y, max_x, max_y);
    loop {
        let cols = level.width.div_ceil(size);
        let rows = level.height.div_ceil(size);
        let inside: Vec<(u32, u32)> = (0..rows)
            .flat_map(|row| (0..cols).map(move |col| (col, row)))
            .filter(|(col, row)| {
                let (x, y) = (x0 + col, y0 + row);
                (lo_x..=hi_x).contains(&x) && (lo_y..=hi_y).contains(&y)
            })
            .collect();
        // Each tile cut and encoded on rayon's pool: the last window of a job (when the other
        // workers have none left) still encodes on every core. While it waits, this thread
        // may run another window's job from the pool (rayon's work stealing): nothing is held
        // across this — the thread's source cache and kept region were let go above.
        out.par_extend(inside.par_iter().map(|&(col, row)| {
            let tile = level.crop(col * size, row * size, size, size);
            PyramidTile {
                tile: Tile::new(z, (x0 + col) % width_at(z), y0 + row),
                image: encode_png(&tile, encoding),
            }
        }));
        // The level above is this window's alone while its tiles' children all lie here: the
        // window starts on an even tile and spans more than one (or is the pyramid's edge).
        if z == spec.min_zoom || cols * rows <= 1 || x0 % 2 != 0 || y0 % 2 != 0 {
            break;
        }
        level = level.reduce(reduce, encoding);
        z -= 1;
        (x0, y0) = (x0 / 2, y0 / 2);
        (lo_x, lo_y, hi_x, hi_y) = (lo_x / 2, lo_y / 2, hi_x / 2, hi_y / 2);
    }
    Ok(out)
}

/// How many zooms past the source's native zoom a pyramid's base may be.
pub const MAX_UPSAMPLING_ZOOMS: u8 = 3;

/// The CRS GDAL warps to for a set: its EPSG code (x/y order, as GDAL's geotransforms are).
fn target_srs(tms: &TileMatrixSet) -> Result<String, String> {
    match tms.crs() {
        Crs::WebMercator => Ok("EPSG:3857".into()),
        Crs::Crs84 => Ok("EPSG:4326".into()),
        Crs::Other(uri) => {
            let code = uri
                .trim_end_matches('/')
                .rsplit(['/', ':'])
                .next()
                .and_then(|c| c.parse::<u32>().ok())
                .filter(|_| uri.to_ascii_uppercase().contains("EPSG"))
                .ok_or_else(|| format!("the set's CRS `{uri}` is not an EPSG code"))?;
            Ok(format!("EPSG:{code}"))
        }
    }
}

/// Plan a pyramid of the raster at `path`: fill in `spec`'s zooms where they are unset
/// (`max_zoom == u8::MAX`: the native resolution's zoom; `min_zoom == u8::MAX`: the zoom where
/// the scene is one tile), its base origin, range and tile size, and return the job's grid —
/// the base zoom's pixels over whole windows of tiles, in the set's CRS.
pub fn pyramid_grid(path: &str, spec: &mut PyramidSpec) -> Result<SceneMeta, CogError> {
    let bad = |reason: String| CogError::BadWarp {
        path: path.to_owned(),
        reason,
    };
    let tms = TileMatrixSet::named(&spec.tms, spec.tms_document.as_deref())
        .map_err(|e| bad(e.to_string()))?;
    if !tms.is_quadtree() {
        return Err(bad(format!(
            "tile matrix set {} is not a quadtree (each zoom twice the one above)",
            tms.id()
        )));
    }
    let t_srs = target_srs(&tms).map_err(bad)?;
    // One open for the source's facts and its palette.
    let (source, palette) = {
        let _gdal_log = crate::ffi::ErrorScope::new();
        let ds = crate::ffi::open_raster(path)?;
        let palette = ds.rasterband(1).is_ok_and(|b| {
            b.color_table().is_some_and(|t| {
                t.palette_interpretation() == gdal::raster::PaletteInterpretation::Rgba
            })
        });
        (crate::probe::scene_meta(&ds, path)?, palette)
    };
    // A paletted band's tiles are its colours, and its parents are made by nearest (an average
    // of categories means nothing): GDAL's own rule for paletted overviews.
    spec.paletted = source.bands == 1 && palette;
    if spec.overview_resampling.is_none() {
        spec.overview_resampling = Some(if spec.paletted {
            tilegate_core::recipe::OverviewResampling::Nearest
        } else {
            tilegate_core::recipe::OverviewResampling::Average
        });
    }
    let ring = source
        .placement
        .as_ref()
        .and_then(|p| unwrapped(&p.footprint));
    let across = ring.is_some();
    let (free, bbox, res) = match ring {
        // A scene across the antimeridian: GDAL's suggestion would span the whole world (or
        // fail), so its box is made here from the source's footprint with its longitudes
        // unwrapped past 180°, and its resolution from the box's area over the source's pixels.
        Some(ring) => {
            let mut b = Bbox::new(f64::MAX, f64::MAX, f64::MIN, f64::MIN);
            for [lon, lat] in ring {
                let (x, y) = tms.from_wgs84(lon, lat).map_err(|e| bad(e.to_string()))?;
                b = Bbox::new(
                    b.min_x.min(x),
                    b.min_y.min(y),
                    b.max_x.max(x),
                    b.max_y.max(y),
                );
            }
            let pixels = f64::from(source.width) * f64::from(source.height);
            let res = ((b.max_x - b.min_x) * (b.max_y - b.min_y) / pixels).sqrt();
            let crs_wkt = gdal::spatial_ref::SpatialRef::from_definition(&t_srs)
                .and_then(|r| r.to_wkt())
                .map_err(|e| bad(e.to_string()))?;
            let free = SceneMeta {
                crs_wkt,
                ..source.clone()
            };
            (free, b, res)
        }
        // Where the scene lies in the set's CRS, and its native resolution there: GDAL's own
        // suggestion for the warp.
        None => {
            let free = crate::warp_grid(
                path,
                &WarpSpec {
                    t_srs: t_srs.clone(),
                    tr: None,
                    tap: false,
                    origin: None,
                    resampling: spec.resampling.clone(),
                },
            )?;
            let gt = free.geotransform;
            let b = Bbox::new(
                gt[0],
                gt[3] + f64::from(free.height) * gt[5],
                gt[0] + f64::from(free.width) * gt[1],
                gt[3],
            );
            (free, b, gt[1])
        }
    };
    let (default_min, default_max) =
        Pyramid::default_zooms(&tms, bbox, res).map_err(|e| bad(e.to_string()))?;
    if spec.max_zoom == u8::MAX {
        spec.max_zoom = default_max;
    }
    if spec.min_zoom == u8::MAX {
        spec.min_zoom = default_min.min(spec.max_zoom);
    }
    // A base zoom far finer than the source's only multiplies windows of invented pixels (and
    // a request could ask for billions): at most three zooms (8×) past the native one.
    if spec.max_zoom > default_max.saturating_add(MAX_UPSAMPLING_ZOOMS) {
        return Err(bad(format!(
            "zoom {} is {} zooms finer than the source's native zoom {default_max}: at most \
             {MAX_UPSAMPLING_ZOOMS} (each zoom doubles the pixels invented)",
            spec.max_zoom,
            spec.max_zoom - default_max
        )));
    }
    if spec.max_zoom > tms.max_zoom() {
        return Err(bad(format!(
            "zoom {} is past the set's last zoom {}",
            spec.max_zoom,
            tms.max_zoom()
        )));
    }
    let pyramid =
        Pyramid::new(&tms, bbox, spec.min_zoom, spec.max_zoom).map_err(|e| bad(e.to_string()))?;
    let mut base = *pyramid.level(spec.max_zoom).expect("the base zoom");
    let m = tms.matrix(spec.max_zoom).map_err(|e| bad(e.to_string()))?;
    if across {
        // Columns past the matrix's east edge are kept (unwrapped): the job's grid runs on
        // across the antimeridian, and each tile is named by its column modulo the width.
        let (sx, _) = m.tile_span();
        let ox = m.point_of_origin[0];
        base.min_x = ((bbox.min_x - ox) / sx + 1e-9).floor().max(0.0) as u32;
        base.max_x = (((bbox.max_x - ox) / sx - 1e-9).ceil() as u32)
            .saturating_sub(1)
            .max(base.min_x);
    }
    if m.corner_of_origin != CornerOfOrigin::TopLeft || m.tile_width != m.tile_height {
        return Err(bad(
            "only sets with square tiles and a top-left origin make pyramids here".into(),
        ));
    }
    let n = PYRAMID_WINDOW_TILES;
    let (x0, y0) = (base.min_x / n * n, base.min_y / n * n);
    let ts = m.tile_width;
    spec.tile_size = ts;
    spec.base_origin = [x0, y0];
    spec.base_range = [base.min_x, base.min_y, base.max_x, base.max_y];
    let (sx, sy) = m.tile_span();
    let [ox, oy] = m.point_of_origin;
    let too_large = || bad("the base zoom's grid is larger than 2^32 pixels a side".into());
    let width = (base.max_x + 1 - x0)
        .checked_mul(ts)
        .ok_or_else(too_large)?;
    let height = (base.max_y + 1 - y0)
        .checked_mul(ts)
        .ok_or_else(too_large)?;
    let geotransform = [
        ox + f64::from(x0) * sx,
        m.cell_size,
        0.0,
        oy - f64::from(y0) * sy,
        0.0,
        -m.cell_size,
    ];
    let placement = crate::place::placement(&free.crs_wkt, &geotransform, width, height);
    Ok(SceneMeta {
        width,
        height,
        geotransform,
        placement,
        ..free
    })
}

/// A footprint ring (WGS84 longitude, latitude) that crosses the antimeridian, with its
/// western longitudes moved past 180° so that it is one piece; `None` for one that does not
/// (its longitudes span less than half the world).
fn unwrapped(ring: &[[f64; 2]]) -> Option<Vec<[f64; 2]>> {
    let lons = ring.iter().map(|p| p[0]);
    let (lo, hi) = lons.fold((f64::MAX, f64::MIN), |(a, b), v| (a.min(v), b.max(v)));
    (hi - lo > 180.0).then(|| {
        ring.iter()
            .map(|&[lon, lat]| [if lon < 0.0 { lon + 360.0 } else { lon }, lat])
            .collect()
    })
}

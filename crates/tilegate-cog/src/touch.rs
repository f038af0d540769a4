//! Which tiles of a product grid a scene touches, and a tile's grid as a scene: the CRS work
//! (PROJ through GDAL) behind [`tilegate_core::product`]'s arithmetic.

use gdal::spatial_ref::{AxisMappingStrategy, CoordTransform, SpatialRef};
use tilegate_core::product::{GridTile, UtmGrid, ring_meets_box};
use tilegate_core::source::{Placement, SceneMeta};

fn srs(epsg: u32) -> Option<SpatialRef> {
    let mut s = SpatialRef::from_epsg(epsg).ok()?;
    s.set_axis_mapping_strategy(AxisMappingStrategy::TraditionalGisOrder);
    Some(s)
}

/// `points` transformed from `from` to `to` (EPSG codes), or `None` where PROJ cannot.
fn transform(points: &[[f64; 2]], from: u32, to: u32) -> Option<Vec<[f64; 2]>> {
    let t = CoordTransform::new(&srs(from)?, &srs(to)?).ok()?;
    let (mut xs, mut ys): (Vec<f64>, Vec<f64>) = points.iter().map(|p| (p[0], p[1])).unzip();
    let mut zs = vec![0.0; xs.len()];
    t.transform_coords(&mut xs, &mut ys, &mut zs).ok()?;
    let out: Vec<[f64; 2]> = xs.iter().zip(&ys).map(|(&x, &y)| [x, y]).collect();
    out.iter()
        .all(|p| p[0].is_finite() && p[1].is_finite())
        .then_some(out)
}

/// The tiles of `grid` whose squares meet the scene's outline (its WGS84 footprint projected
/// into each candidate zone's CRS) and lie in their zone (their square reaches the zone's
/// longitudes), sorted. Only the tiles under the projected outline's bounding box are tested.
pub fn tiles_touched(grid: &UtmGrid, placement: &Placement) -> Vec<GridTile> {
    let [west, south, east, north] = placement.bbox;
    if east - west > 180.0 {
        // Across the antimeridian: not a UTM product's case yet (said by the caller).
        return Vec::new();
    }
    let max_abs_lat = south.abs().max(north.abs());
    let mut out = Vec::new();
    for zone in grid.candidate_zones(west, east, max_abs_lat) {
        for hemisphere in [true, false] {
            if (hemisphere && north < 0.0) || (!hemisphere && south >= 0.0) {
                continue;
            }
            let probe = GridTile {
                zone,
                north: hemisphere,
                col: 0,
                row: 0,
            };
            let Some(ring) = transform(&placement.footprint, 4326, probe.epsg()) else {
                continue;
            };
            let bbox = ring.iter().fold(
                [
                    f64::INFINITY,
                    f64::INFINITY,
                    f64::NEG_INFINITY,
                    f64::NEG_INFINITY,
                ],
                |b, p| {
                    [
                        b[0].min(p[0]),
                        b[1].min(p[1]),
                        b[2].max(p[0]),
                        b[3].max(p[1]),
                    ]
                },
            );
            for tile in grid.tiles_under(zone, hemisphere, bbox) {
                let square = grid.bounds(&tile);
                if ring_meets_box(&ring, square) && in_zone(grid, &tile) {
                    out.push(tile);
                }
            }
        }
    }
    out.sort();
    out.dedup();
    out
}

/// Whether the tile's square reaches its zone's longitudes (and its hemisphere's latitudes).
fn in_zone(grid: &UtmGrid, tile: &GridTile) -> bool {
    let [minx, miny, maxx, maxy] = grid.bounds(tile);
    let steps = 8;
    let mut edge = Vec::with_capacity(4 * steps);
    for i in 0..steps {
        let t = i as f64 / steps as f64;
        edge.push([minx + (maxx - minx) * t, miny]);
        edge.push([maxx, miny + (maxy - miny) * t]);
        edge.push([maxx - (maxx - minx) * t, maxy]);
        edge.push([minx, maxy - (maxy - miny) * t]);
    }
    let Some(lonlat) = transform(&edge, tile.epsg(), 4326) else {
        return false;
    };
    let [w, e] = tile.zone_band();
    let (lo, hi) = lonlat
        .iter()
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), p| {
            (a.min(p[0]), b.max(p[0]))
        });
    let lats = lonlat.iter().map(|p| p[1]);
    let hemisphere_ok = if tile.north {
        lats.clone().any(|l| l >= 0.0)
    } else {
        lats.clone().any(|l| l < 0.0)
    };
    lo < e && hi > w && hemisphere_ok
}

/// The tile's grid as the scene a product job writes: its size, CRS and geotransform, with
/// the output's bands, type and nodata, and its place on the Earth.
pub fn tile_scene(
    grid: &UtmGrid,
    tile: &GridTile,
    bands: u32,
    dtype: &str,
    nodata: Option<f64>,
) -> Option<SceneMeta> {
    let crs_wkt = srs(tile.epsg())?.to_wkt().ok()?;
    let geotransform = grid.geotransform(tile);
    let px = grid.tile_pixels();
    let placement = crate::place::placement(&crs_wkt, &geotransform, px, px);
    Some(SceneMeta {
        width: px,
        height: px,
        bands,
        dtype: dtype.to_owned(),
        crs_wkt,
        geotransform,
        nodata,
        placement,
        datetime: None,
    })
}

//! Where a scene lies on the Earth (its outline in WGS84 and its EPSG code) and when it was
//! made, read once when planning for the catalogue entries built from the job row.

use gdal::spatial_ref::{AxisMappingStrategy, CoordTransform, SpatialRef};
use tilegate_core::source::Placement;

/// Points per edge of the outline: enough for a projected scene's curved edges in WGS84.
const POINTS_PER_EDGE: u32 = 16;

/// The scene's outline in WGS84 (longitude, latitude), or `None` without a CRS or where PROJ
/// cannot transform it. The outline follows the pixel grid's edges (rotated and south-up
/// geotransforms included), densified so that curved edges stay close; a scene that crosses
/// the antimeridian is not split (its bbox then spans the globe the long way).
pub fn placement(crs_wkt: &str, gt: &[f64; 6], width: u32, height: u32) -> Option<Placement> {
    if crs_wkt.is_empty() {
        return None;
    }
    let mut src = SpatialRef::from_wkt(crs_wkt).ok()?;
    src.set_axis_mapping_strategy(AxisMappingStrategy::TraditionalGisOrder);
    let epsg = epsg_of(&src);
    let mut wgs84 = SpatialRef::from_epsg(4326).ok()?;
    wgs84.set_axis_mapping_strategy(AxisMappingStrategy::TraditionalGisOrder);
    let transform = CoordTransform::new(&src, &wgs84).ok()?;
    let (w, h) = (f64::from(width), f64::from(height));
    let n = POINTS_PER_EDGE;
    let t = |i: u32| f64::from(i) / f64::from(n);
    // Counter-clockwise on the map for a north-up grid: down the left edge, along the bottom,
    // up the right edge, back along the top.
    let mut pixels: Vec<(f64, f64)> = Vec::with_capacity(4 * n as usize + 1);
    pixels.extend((0..n).map(|i| (0.0, h * t(i))));
    pixels.extend((0..n).map(|i| (w * t(i), h)));
    pixels.extend((0..n).map(|i| (w, h * (1.0 - t(i)))));
    pixels.extend((0..n).map(|i| (w * (1.0 - t(i)), 0.0)));
    let (mut xs, mut ys): (Vec<f64>, Vec<f64>) = pixels
        .iter()
        .map(|&(px, py)| {
            (
                gt[0] + px * gt[1] + py * gt[2],
                gt[3] + px * gt[4] + py * gt[5],
            )
        })
        .unzip();
    let mut zs = vec![0.0; xs.len()];
    let mut footprint: Vec<[f64; 2]> = if transform
        .transform_coords(&mut xs, &mut ys, &mut zs)
        .is_ok()
        && xs.iter().chain(&ys).all(|v| v.is_finite())
    {
        xs.iter()
            .zip(&ys)
            .map(|(&x, &y)| [round9(x), round9(y)])
            .collect()
    } else {
        // Some of the grid's edge is not on the Earth (a geostationary full disk's corners
        // look past it): the outline of the pixels that are, sampled across the whole grid.
        visible_hull(&transform, gt, w, h)?
    };
    // RFC 7946: exterior rings counter-clockwise. A south-up or mirrored grid walks its edges
    // the other way round.
    let twice_area: f64 = (0..footprint.len())
        .map(|i| {
            let (a, b) = (footprint[i], footprint[(i + 1) % footprint.len()]);
            a[0] * b[1] - b[0] * a[1]
        })
        .sum();
    if twice_area < 0.0 {
        footprint.reverse();
    }
    footprint.push(footprint[0]);
    let fold = |pick: fn(&[f64; 2]) -> f64, max: bool| {
        footprint
            .iter()
            .map(pick)
            .fold(if max { f64::MIN } else { f64::MAX }, |a, b| {
                if max { a.max(b) } else { a.min(b) }
            })
    };
    let bbox = [
        fold(|p| p[0], false),
        fold(|p| p[1], false),
        fold(|p| p[0], true),
        fold(|p| p[1], true),
    ];
    let projjson = epsg.is_none().then(|| src.to_projjson().ok()).flatten();
    Some(Placement {
        epsg,
        footprint,
        bbox,
        projjson,
    })
}

/// Samples per side of the grid [`visible_hull`] transforms.
const HULL_SAMPLES: u32 = 64;

/// The convex hull (counter-clockwise, not closed) in WGS84 of the grid's points that PROJ can
/// place on the Earth: [`HULL_SAMPLES`]² samples across the grid, and along every sampled row
/// and column the limb itself — where the Earth ends, found by bisecting between the last
/// sample on it and the first past it. `None` if fewer than three points are on the Earth.
fn visible_hull(
    transform: &CoordTransform,
    gt: &[f64; 6],
    w: f64,
    h: f64,
) -> Option<Vec<[f64; 2]>> {
    // Points past the Earth are failures PROJ reports: logged, not printed.
    let _quiet = crate::ffi::ErrorScope::new();
    let place = |px: f64, py: f64| -> Option<[f64; 2]> {
        let mut x = [gt[0] + px * gt[1] + py * gt[2]];
        let mut y = [gt[3] + px * gt[4] + py * gt[5]];
        let mut z = [0.0];
        (transform.transform_coords(&mut x, &mut y, &mut z).is_ok()
            && x[0].is_finite()
            && y[0].is_finite())
        .then(|| [round9(x[0]), round9(y[0])])
    };
    // Between a pixel position on the Earth and one past it: the last one on it.
    let limb = |on: (f64, f64), off: (f64, f64)| -> Option<[f64; 2]> {
        let (mut a, mut b) = (on, off);
        for _ in 0..LIMB_STEPS {
            let mid = ((a.0 + b.0) / 2.0, (a.1 + b.1) / 2.0);
            if place(mid.0, mid.1).is_some() {
                a = mid;
            } else {
                b = mid;
            }
        }
        place(a.0, a.1)
    };
    let n = HULL_SAMPLES;
    let at = |i: u32, j: u32| {
        (
            w * f64::from(i) / f64::from(n),
            h * f64::from(j) / f64::from(n),
        )
    };
    let mut points = Vec::new();
    for line in 0..=n {
        for (along, cross) in [(true, line), (false, line)] {
            let pos = |k: u32| if along { at(k, cross) } else { at(cross, k) };
            let mut previous: Option<(bool, (f64, f64))> = None;
            for k in 0..=n {
                let p = pos(k);
                let placed = place(p.0, p.1);
                if let Some(q) = placed {
                    points.push(q);
                }
                if let Some((was_on, q)) = previous
                    && was_on != placed.is_some()
                {
                    let (on, off) = if was_on { (q, p) } else { (p, q) };
                    points.extend(limb(on, off));
                }
                previous = Some((placed.is_some(), p));
            }
        }
    }
    let hull = convex_hull(points);
    (hull.len() >= 3).then_some(hull)
}

/// Bisections that find the limb between two samples: 2⁻²⁰ of a sample's spacing.
const LIMB_STEPS: u32 = 20;

/// The convex hull of `points`, counter-clockwise from the lowest-leftmost (Andrew's monotone
/// chain), without collinear points.
fn convex_hull(mut points: Vec<[f64; 2]>) -> Vec<[f64; 2]> {
    points.sort_by(|a, b| a[0].total_cmp(&b[0]).then(a[1].total_cmp(&b[1])));
    points.dedup();
    if points.len() < 3 {
        return points;
    }
    let cross = |o: [f64; 2], a: [f64; 2], b: [f64; 2]| {
        (a[0] - o[0]) * (b[1] - o[1]) - (a[1] - o[1]) * (b[0] - o[0])
    };
    let mut hull: Vec<[f64; 2]> = Vec::with_capacity(points.len() * 2);
    for pass in [false, true] {
        let start = hull.len();
        let ordered: Box<dyn Iterator<Item = &[f64; 2]>> = if pass {
            Box::new(points.iter().rev())
        } else {
            Box::new(points.iter())
        };
        for &p in ordered {
            while hull.len() >= start + 2
                && cross(hull[hull.len() - 2], hull[hull.len() - 1], p) <= 0.0
            {
                hull.pop();
            }
            hull.push(p);
        }
        hull.pop();
    }
    hull
}

/// The EPSG code of a CRS, where it is (or is recognisably) one.
fn epsg_of(srs: &SpatialRef) -> Option<u32> {
    let code = |s: &SpatialRef| {
        (s.auth_name().as_deref() == Some("EPSG"))
            .then(|| s.auth_code().ok())
            .flatten()
            .and_then(|c| u32::try_from(c).ok())
    };
    code(srs).or_else(|| {
        let mut guess = srs.clone();
        guess.auto_identify_epsg().ok()?;
        code(&guess)
    })
}

/// Coordinates rounded to 1e-9 degrees (about 0.1 mm): stable across PROJ's last bits.
fn round9(v: f64) -> f64 {
    (v * 1e9).round() / 1e9
}

/// An RFC 3339 time in UTC (`2024-06-30T18:00:21.6Z`, fraction optional) as it is; `None` if
/// it is not one (another zone, no zone, not a date).
pub fn utc_rfc3339(t: &str) -> Option<String> {
    let t = t.trim();
    if !t.is_ascii() {
        return None;
    }
    let (whole, rest) = (t.get(..19)?, t.get(19..)?);
    let as_tiff = format!(
        "{}:{}:{} {}",
        &whole[0..4],
        &whole[5..7],
        &whole[8..10],
        &whole[11..19]
    );
    let ok = whole.as_bytes()[4] == b'-'
        && whole.as_bytes()[7] == b'-'
        && whole.as_bytes()[10] == b'T'
        && tiff_datetime_rfc3339(&as_tiff).is_some();
    let zone = rest.strip_suffix('Z')?;
    let fraction_ok = zone.is_empty()
        || zone
            .strip_prefix('.')
            .is_some_and(|f| !f.is_empty() && f.bytes().all(|b| b.is_ascii_digit()));
    (ok && fraction_ok).then(|| t.to_owned())
}

/// A TIFF `DateTime` (`YYYY:MM:DD HH:MM:SS`, local time of unknown zone, taken as UTC) as
/// RFC 3339; `None` if it is not one.
pub fn tiff_datetime_rfc3339(t: &str) -> Option<String> {
    let t = t.trim();
    let b = t.as_bytes();
    let digits =
        |r: std::ops::Range<usize>| b.get(r).is_some_and(|s| s.iter().all(u8::is_ascii_digit));
    let shape = b.len() == 19
        && digits(0..4)
        && b[4] == b':'
        && digits(5..7)
        && b[7] == b':'
        && digits(8..10)
        && b[10] == b' '
        && digits(11..13)
        && b[13] == b':'
        && digits(14..16)
        && b[16] == b':'
        && digits(17..19);
    let num = |r: std::ops::Range<usize>| t[r].parse::<u32>().ok();
    if !shape {
        return None;
    }
    let (year, month) = (num(0..4)?, num(5..7)?);
    let leap = year % 4 == 0 && (year % 100 != 0 || year % 400 == 0);
    let days = match month {
        1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
        4 | 6 | 9 | 11 => 30,
        2 if leap => 29,
        2 => 28,
        _ => return None,
    };
    let valid = (1..=days).contains(&num(8..10)?)
        && num(11..13)? < 24
        && num(14..16)? < 60
        && num(17..19)? < 61;
    valid.then(|| format!("{}-{}-{}T{}Z", &t[0..4], &t[5..7], &t[8..10], &t[11..19]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tiff_datetimes_become_rfc3339_and_others_are_refused() {
        assert_eq!(
            tiff_datetime_rfc3339("2024:06:30 10:15:00").as_deref(),
            Some("2024-06-30T10:15:00Z")
        );
        assert_eq!(tiff_datetime_rfc3339("2024-06-30 10:15:00"), None);
        assert_eq!(tiff_datetime_rfc3339("2024:13:30 10:15:00"), None);
        assert_eq!(tiff_datetime_rfc3339("2023:02:29 10:15:00"), None);
        assert_eq!(
            tiff_datetime_rfc3339("2024:02:29 23:59:59").as_deref(),
            Some("2024-02-29T23:59:59Z")
        );
        assert_eq!(tiff_datetime_rfc3339("    :  :     :  :  "), None);
        assert_eq!(tiff_datetime_rfc3339(""), None);
        assert_eq!(
            utc_rfc3339("2024-06-30T18:00:21.6Z").as_deref(),
            Some("2024-06-30T18:00:21.6Z")
        );
        assert_eq!(
            utc_rfc3339("2024-06-30T18:00:21Z").as_deref(),
            Some("2024-06-30T18:00:21Z")
        );
        assert_eq!(utc_rfc3339("2024-06-30T18:00:21+02:00"), None);
        assert_eq!(utc_rfc3339("2024-06-30 18:00:21Z"), None);
        assert_eq!(utc_rfc3339("2024-13-30T18:00:21Z"), None);
        assert_eq!(utc_rfc3339("2024-06-30T18:00:21.Z"), None);
        assert_eq!(utc_rfc3339("é"), None);
    }

    #[test]
    fn a_utm_scene_is_placed_in_wgs84_with_its_epsg_code() {
        let wkt = SpatialRef::from_epsg(32633).unwrap().to_wkt().unwrap();
        // 10 km × 10 km at 10 m, west edge at 500 km easting (the zone's central meridian,
        // 15° E), north edge at 5,000 km northing (about 45.1° N).
        let gt = [500_000.0, 10.0, 0.0, 5_000_000.0, 0.0, -10.0];
        let p = placement(&wkt, &gt, 1000, 1000).expect("placed");
        assert_eq!(p.epsg, Some(32633));
        assert_eq!(p.footprint.first(), p.footprint.last());
        assert_eq!(p.footprint.len(), 4 * POINTS_PER_EDGE as usize + 1);
        let [w, s, e, n] = p.bbox;
        assert!((w - 15.0).abs() < 1e-6, "west {w}");
        assert!(e > 15.12 && e < 15.13, "east {e}");
        assert!(s > 45.0 && n < 45.2 && s < n, "south {s} north {n}");
        assert_eq!(placement("", &gt, 10, 10), None);
        let ccw = |ring: &[[f64; 2]]| {
            ring.windows(2)
                .map(|w| w[0][0] * w[1][1] - w[1][0] * w[0][1])
                .sum::<f64>()
                > 0.0
        };
        assert!(ccw(&p.footprint), "north-up: counter-clockwise");
        // South-up: the same ground, the grid upside down.
        let south_up = [500_000.0, 10.0, 0.0, 4_990_000.0, 0.0, 10.0];
        let q = placement(&wkt, &south_up, 1000, 1000).expect("placed");
        assert!(ccw(&q.footprint), "south-up: counter-clockwise too");
        assert_eq!(p.projjson, None, "an EPSG CRS is named by its code");
    }

    /// A geostationary full disk (GOES-East): its corners look past the Earth, so its outline
    /// is that of the pixels on the Earth — a footprint, a bbox and the CRS as PROJJSON.
    #[test]
    fn a_geostationary_full_disk_is_placed_by_its_visible_pixels() {
        let srs = SpatialRef::from_proj4(
            "+proj=geos +h=35786023 +lon_0=-75 +sweep=x +ellps=GRS80 +units=m +no_defs",
        )
        .unwrap();
        let wkt = srs.to_wkt().unwrap();
        let half = 5_434_894.885;
        let gt = [
            -half,
            2.0 * half / 1000.0,
            0.0,
            half,
            0.0,
            -2.0 * half / 1000.0,
        ];
        let p = placement(&wkt, &gt, 1000, 1000).expect("placed");
        assert_eq!(p.epsg, None);
        assert!(p.projjson.is_some(), "a CRS without a code is given whole");
        let [w, s, e, n] = p.bbox;
        assert!(w > -160.0 && w < -150.0, "west {w}");
        assert!(e > 0.0 && e < 10.0, "east {e}");
        assert!(
            s > -82.0 && s < -75.0 && n > 75.0 && n < 82.0,
            "south {s} north {n}"
        );
        assert_eq!(p.footprint.first(), p.footprint.last());
        let twice_area: f64 = p
            .footprint
            .windows(2)
            .map(|w| w[0][0] * w[1][1] - w[1][0] * w[0][1])
            .sum();
        assert!(twice_area > 0.0, "counter-clockwise");
    }

    #[test]
    fn a_convex_hull_keeps_the_outside_counter_clockwise() {
        let square = vec![
            [0.0, 0.0],
            [2.0, 0.0],
            [1.0, 1.0],
            [2.0, 2.0],
            [0.0, 2.0],
            [1.0, 0.0],
        ];
        assert_eq!(
            convex_hull(square),
            vec![[0.0, 0.0], [2.0, 0.0], [2.0, 2.0], [0.0, 2.0]]
        );
    }
}

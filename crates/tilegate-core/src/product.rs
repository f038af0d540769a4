//! Products: many scenes made into one raster per tile of a fixed grid — a mosaic (the first
//! valid pixel in a stated order) or a composite (a statistic over every valid observation).
//!
//! A product tile is a job. Its source is the tile itself (`product://NAME/TILE`), pinned by a
//! hash of its input scenes' identities; its recipe names the grid, the method and the inputs.
//! So a tile's job ID is a function of (product, tile, recipe, the sorted identities of its
//! input scenes): a scene that arrives gives each tile it touches a new job — a new, immutable
//! output — and a scene delivered again changes nothing.
//!
//! The grid is pure arithmetic here; which tiles a scene touches is decided from the scene's
//! outline projected into each candidate zone's CRS (`tilegate-cog` projects it), tested
//! against the tiles under its bounding box only — never against every tile of the grid.

use crate::source::{SceneMeta, SourceInfo};
use serde::{Deserialize, Serialize};
use std::fmt;

/// A product grid: square tiles of `size` metres at `resolution` metres per pixel, in the UTM
/// zone of each tile (WGS 84, EPSG:326zz north and 327zz south), each tile's origin on a
/// multiple of `size` in its zone's coordinates. Written `utm:100km@10m`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct UtmGrid {
    /// The tile edge in metres.
    pub size: f64,
    /// Metres per pixel.
    pub resolution: f64,
}

/// Why a grid or a tile code is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProductError {
    #[error(
        "grid `{0}`: expected `utm:SIZE@RES` with SIZE and RES in metres or kilometres, e.g. \
         `utm:100km@10m` (a tile edge that is a whole number of pixels)"
    )]
    BadGrid(String),
    #[error("tile `{0}`: expected ZONE then N or S, the column and the row, e.g. `32N-5-51`")]
    BadTile(String),
    #[error(
        "product name `{0}`: 1 to 64 of a-z, 0-9, `-` and `_`, starting with a letter or digit"
    )]
    BadName(String),
    #[error("{0}")]
    Inputs(String),
}

/// The most pixels along a tile's edge: a tile is a job of windows, and 100 km at 10 m is
/// 10,000.
pub const MAX_TILE_PIXELS: f64 = 65_536.0;

impl UtmGrid {
    /// Parse `utm:SIZE@RES` (`utm:100km@10m`, `utm:5000m@30m`).
    pub fn parse(text: &str) -> Result<Self, ProductError> {
        let bad = || ProductError::BadGrid(text.chars().take(80).collect());
        let rest = text.trim().strip_prefix("utm:").ok_or_else(bad)?;
        let (size, res) = rest.split_once('@').ok_or_else(bad)?;
        let metres = |s: &str| -> Option<f64> {
            let (num, scale) = if let Some(n) = s.strip_suffix("km") {
                (n, 1000.0)
            } else {
                (s.strip_suffix('m')?, 1.0)
            };
            let v: f64 = num.parse().ok()?;
            (v.is_finite() && v > 0.0).then_some(v * scale)
        };
        let (size, resolution) = (metres(size).ok_or_else(bad)?, metres(res).ok_or_else(bad)?);
        let pixels = size / resolution;
        if pixels.fract() != 0.0 || !(16.0..=MAX_TILE_PIXELS).contains(&pixels) {
            return Err(bad());
        }
        Ok(Self { size, resolution })
    }

    /// The canonical text (`utm:100000m@10m`), part of every tile's identity.
    pub fn canonical(&self) -> String {
        format!("utm:{}m@{}m", self.size, self.resolution)
    }

    /// Pixels along a tile's edge.
    pub fn tile_pixels(&self) -> u32 {
        (self.size / self.resolution) as u32
    }

    /// The tiles of `zone` (hemisphere `north`) whose squares meet the box
    /// `[minx, miny, maxx, maxy]` in that zone's coordinates, row by row.
    pub fn tiles_under(&self, zone: u8, north: bool, bbox: [f64; 4]) -> Vec<GridTile> {
        let [minx, miny, maxx, maxy] = bbox;
        if !(bbox.iter().all(|v| v.is_finite()) && minx <= maxx && miny <= maxy) {
            return Vec::new();
        }
        // Northings: 0 to 10,000 km from the equator in either hemisphere's CRS.
        let rows = (0.0, 10_000_000.0 / self.size);
        let index = |v: f64| (v / self.size).floor();
        let (c0, c1) = (
            index(minx).max(0.0),
            index(maxx).min(1_000_000.0 / self.size),
        );
        let (r0, r1) = (index(miny).max(rows.0), index(maxy).min(rows.1 - 1.0));
        let mut out = Vec::new();
        let mut row = r0;
        while row <= r1 {
            let mut col = c0;
            while col <= c1 {
                out.push(GridTile {
                    zone,
                    north,
                    col: col as u32,
                    row: row as u32,
                });
                col += 1.0;
            }
            row += 1.0;
        }
        out
    }

    /// The tile's square in its zone's coordinates: `[minx, miny, maxx, maxy]`.
    pub fn bounds(&self, t: &GridTile) -> [f64; 4] {
        let (x, y) = (f64::from(t.col) * self.size, f64::from(t.row) * self.size);
        [x, y, x + self.size, y + self.size]
    }

    /// The tile's geotransform (north up, its top-left corner at the origin).
    pub fn geotransform(&self, t: &GridTile) -> [f64; 6] {
        let [minx, _, _, maxy] = self.bounds(t);
        [minx, self.resolution, 0.0, maxy, 0.0, -self.resolution]
    }

    /// The zones whose tiles may meet the longitudes `[west, east]` at latitudes up to
    /// `max_abs_lat`: a tile reaches past its zone's edge by up to its own size.
    pub fn candidate_zones(&self, west: f64, east: f64, max_abs_lat: f64) -> Vec<u8> {
        let cos = max_abs_lat.abs().min(84.0).to_radians().cos();
        let margin = self.size / (111_320.0 * cos) + 0.01;
        let first = (((west - margin + 180.0) / 6.0).floor() as i64 + 1).max(1);
        let last = (((east + margin + 180.0) / 6.0).floor() as i64 + 1).min(60);
        (first..=last).map(|z| z as u8).collect()
    }
}

/// One tile of a [`UtmGrid`]: its zone and hemisphere, then its column and row of squares
/// counted from the zone's false origin.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct GridTile {
    pub zone: u8,
    pub north: bool,
    pub col: u32,
    pub row: u32,
}

impl GridTile {
    /// The tile's CRS.
    pub fn epsg(&self) -> u32 {
        (if self.north { 32_600 } else { 32_700 }) + u32::from(self.zone)
    }

    /// The zone's longitudes `[west, east]`.
    pub fn zone_band(&self) -> [f64; 2] {
        let west = -180.0 + 6.0 * f64::from(self.zone - 1);
        [west, west + 6.0]
    }

    /// Parse a code as [`fmt::Display`] writes it (`32N-5-51`).
    pub fn parse(code: &str) -> Result<Self, ProductError> {
        let bad = || ProductError::BadTile(code.chars().take(40).collect());
        let mut parts = code.split('-');
        let (zh, col, row) = (
            parts.next().ok_or_else(bad)?,
            parts.next().ok_or_else(bad)?,
            parts.next().ok_or_else(bad)?,
        );
        if parts.next().is_some() || zh.len() < 2 {
            return Err(bad());
        }
        let (zone, hem) = zh.split_at(zh.len() - 1);
        let zone: u8 = zone.parse().map_err(|_| bad())?;
        let north = match hem {
            "N" => true,
            "S" => false,
            _ => return Err(bad()),
        };
        let digits = |s: &str| s.bytes().all(|b| b.is_ascii_digit()) && !s.is_empty();
        if !(1..=60).contains(&zone) || !digits(col) || !digits(row) {
            return Err(bad());
        }
        Ok(Self {
            zone,
            north,
            col: col.parse().map_err(|_| bad())?,
            row: row.parse().map_err(|_| bad())?,
        })
    }
}

impl fmt::Display for GridTile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let hem = if self.north { 'N' } else { 'S' };
        write!(f, "{:02}{hem}-{}-{}", self.zone, self.col, self.row)
    }
}

/// Whether a closed ring (first point repeated last, or not) and the box
/// `[minx, miny, maxx, maxy]` share any point: a vertex inside the box, a corner of the box
/// inside the ring, or two edges crossing.
pub fn ring_meets_box(ring: &[[f64; 2]], b: [f64; 4]) -> bool {
    let [minx, miny, maxx, maxy] = b;
    if ring.is_empty() {
        return false;
    }
    let inside_box = |p: &[f64; 2]| p[0] >= minx && p[0] <= maxx && p[1] >= miny && p[1] <= maxy;
    if ring.iter().any(inside_box) {
        return true;
    }
    let corners = [[minx, miny], [maxx, miny], [maxx, maxy], [minx, maxy]];
    if corners.iter().any(|c| point_in_ring(*c, ring)) {
        return true;
    }
    let n = ring.len();
    (0..n).any(|i| {
        let (a, c) = (ring[i], ring[(i + 1) % n]);
        (0..4).any(|k| segments_cross(a, c, corners[k], corners[(k + 1) % 4]))
    })
}

fn point_in_ring(p: [f64; 2], ring: &[[f64; 2]]) -> bool {
    let mut inside = false;
    let n = ring.len();
    let mut j = n - 1;
    for i in 0..n {
        let (a, b) = (ring[i], ring[j]);
        if (a[1] > p[1]) != (b[1] > p[1])
            && p[0] < (b[0] - a[0]) * (p[1] - a[1]) / (b[1] - a[1]) + a[0]
        {
            inside = !inside;
        }
        j = i;
    }
    inside
}

fn segments_cross(p1: [f64; 2], p2: [f64; 2], q1: [f64; 2], q2: [f64; 2]) -> bool {
    let cross = |o: [f64; 2], a: [f64; 2], b: [f64; 2]| {
        (a[0] - o[0]) * (b[1] - o[1]) - (a[1] - o[1]) * (b[0] - o[0])
    };
    let (d1, d2) = (cross(q1, q2, p1), cross(q1, q2, p2));
    let (d3, d4) = (cross(p1, p2, q1), cross(p1, p2, q2));
    ((d1 > 0.0) != (d2 > 0.0)) && ((d3 > 0.0) != (d4 > 0.0))
}

/// How a product tile's pixel is made from its inputs' pixels at the same place.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(tag = "method", rename_all = "kebab-case")]
pub enum Method {
    /// The first valid observation in `order`: the inputs' bands and type.
    Mosaic { order: Order },
    /// A statistic of each band over the valid observations.
    Composite { stat: Stat },
}

/// The order a mosaic takes its inputs in. Ties, and inputs without the value ordered by, go
/// by scene identity, after those with it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum Order {
    /// The latest acquisition first (its `datetime`).
    Newest,
    /// The earliest acquisition first.
    Oldest,
    /// The least cloudy first (`eo:cloud_cover`).
    LeastCloud,
}

impl Order {
    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "newest" => Self::Newest,
            "oldest" => Self::Oldest,
            "least-cloud" => Self::LeastCloud,
            _ => return None,
        })
    }

    pub fn name(self) -> &'static str {
        match self {
            Self::Newest => "newest",
            Self::Oldest => "oldest",
            Self::LeastCloud => "least-cloud",
        }
    }
}

/// A composite's per-pixel statistic over the valid observations of each band.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum Stat {
    Median,
    Mean,
    Min,
    Max,
    /// How many inputs are valid (UInt16, one band; 0 is a pixel no scene saw).
    Count,
    /// The `p`-th percentile (10 to 90), interpolated linearly between observations as
    /// NumPy's `nanpercentile` does.
    Percentile(u8),
}

impl Stat {
    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "median" => Self::Median,
            "mean" => Self::Mean,
            "min" => Self::Min,
            "max" => Self::Max,
            "count" => Self::Count,
            p => {
                let n: u8 = p.strip_prefix('p')?.parse().ok()?;
                if !(10..=90).contains(&n) {
                    return None;
                }
                Self::Percentile(n)
            }
        })
    }

    pub fn name(self) -> String {
        match self {
            Self::Median => "median".into(),
            Self::Mean => "mean".into(),
            Self::Min => "min".into(),
            Self::Max => "max".into(),
            Self::Count => "count".into(),
            Self::Percentile(p) => format!("p{p}"),
        }
    }

    /// The statistic of `values` (the valid observations, in any order; not empty).
    pub fn of(self, values: &mut [f64]) -> f64 {
        let n = values.len();
        match self {
            Self::Mean => values.iter().sum::<f64>() / n as f64,
            Self::Min => values.iter().copied().fold(f64::INFINITY, f64::min),
            Self::Max => values.iter().copied().fold(f64::NEG_INFINITY, f64::max),
            Self::Count => n as f64,
            Self::Median => {
                // NumPy's median: the mean of the two middle observations.
                values.sort_by(f64::total_cmp);
                let (lo, hi) = ((n - 1) / 2, n / 2);
                (values[lo] + values[hi]) / 2.0
            }
            Self::Percentile(p) => percentile(values, f64::from(p)),
        }
    }
}

/// NumPy's linear percentile: the value at rank `p/100 × (n − 1)`, interpolated between the
/// two observations around it.
fn percentile(values: &mut [f64], p: f64) -> f64 {
    values.sort_by(f64::total_cmp);
    let rank = p / 100.0 * (values.len() - 1) as f64;
    let (lo, hi) = (rank.floor() as usize, rank.ceil() as usize);
    let t = rank - rank.floor();
    if lo == hi {
        values[lo]
    } else {
        // NumPy's `_lerp`: a + (b - a) t, from the far end when t ≥ 0.5.
        let (a, b) = (values[lo], values[hi]);
        if t >= 0.5 {
            b - (b - a) * (1.0 - t)
        } else {
            a + (b - a) * t
        }
    }
}

/// One scene of a product tile: the pinned source, what the planner read of it, and its cloud
/// cover where a catalogue said.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ProductInput {
    /// The scene's identity: a hash of its canonical URI and pin ([`scene_id`]).
    pub id: String,
    pub source: SourceInfo,
    pub scene: SceneMeta,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cloud_cover: Option<f64>,
}

/// A scene's identity in a product: 128 bits of BLAKE3 over its canonical URI and its pin.
pub fn scene_id(source: &SourceInfo) -> String {
    let mut h = blake3::Hasher::new();
    for part in [source.uri.as_str(), source.etag.as_str()] {
        h.update(&(part.len() as u64).to_le_bytes());
        h.update(part.as_bytes());
    }
    h.finalize().to_hex()[..32].to_owned()
}

/// A product tile's recipe: the tile, how its pixels are made, and its inputs sorted by
/// identity.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ProductSpec {
    pub product: String,
    /// The grid's canonical text ([`UtmGrid::canonical`]).
    pub grid: String,
    /// The tile's code ([`GridTile`]'s display).
    pub tile: String,
    #[serde(flatten)]
    pub method: Method,
    /// GDAL's resampling onto the tile's grid (`near` by default: exact, every pixel a source
    /// pixel).
    pub resampling: String,
    pub inputs: Vec<ProductInput>,
}

impl ProductSpec {
    /// The hash of the inputs' identities in order: the tile source's pin.
    pub fn inputs_pin(&self) -> crate::ETag {
        let mut h = blake3::Hasher::new();
        for i in &self.inputs {
            h.update(i.id.as_bytes());
            h.update(b"\n");
        }
        crate::ETag::new(format!("inputs-{}", &h.finalize().to_hex()[..32]))
    }

    /// The job's source: the tile, pinned by its inputs.
    pub fn source(&self) -> SourceInfo {
        SourceInfo {
            uri: format!("product://{}/{}", self.product, self.tile),
            etag: self.inputs_pin(),
            size: self.inputs.iter().map(|i| i.source.size).sum(),
            stat: None,
            assets: Vec::new(),
            signed: false,
        }
    }

    /// The inputs' indices in the order a mosaic takes them (composites take all).
    pub fn mosaic_order(&self) -> Vec<usize> {
        let mut idx: Vec<usize> = (0..self.inputs.len()).collect();
        let Method::Mosaic { order } = self.method else {
            return idx;
        };
        let key = |i: &usize| {
            let input = &self.inputs[*i];
            match order {
                Order::Newest | Order::Oldest => input.scene.datetime.clone(),
                Order::LeastCloud => input.cloud_cover.map(|c| format!("{:020.9}", c.max(0.0))),
            }
        };
        idx.sort_by(|a, b| {
            let (ka, kb) = (key(a), key(b));
            let by_value = match (ka, kb) {
                (Some(x), Some(y)) => match order {
                    Order::Newest => y.cmp(&x),
                    Order::Oldest | Order::LeastCloud => x.cmp(&y),
                },
                (Some(_), None) => std::cmp::Ordering::Less,
                (None, Some(_)) => std::cmp::Ordering::Greater,
                (None, None) => std::cmp::Ordering::Equal,
            };
            by_value.then_with(|| self.inputs[*a].id.cmp(&self.inputs[*b].id))
        });
        idx
    }

    /// The canonical text of everything but the inputs (which the tile's pin holds).
    pub fn fingerprint(&self) -> String {
        let method = match self.method {
            Method::Mosaic { order } => format!("mosaic;order={}", order.name()),
            Method::Composite { stat } => format!("composite;stat={}", stat.name()),
        };
        format!(
            "op=product;product={};grid={};tile={};{method};r={}",
            self.product, self.grid, self.tile, self.resampling
        )
    }
}

/// A product tile's pointer (`products/NAME/tiles/TILE/current.json`): the job whose COG is
/// the tile now. It moves once per new input set, with a conditional write, and only to a
/// set that holds every scene of the one it leaves — so a tile assembled late for an older
/// input set never takes the pointer back, and it ends on the newest set.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct TilePointer {
    pub job_id: crate::JobId,
    /// The tile's COG.
    pub key: String,
    pub e_tag: crate::ETag,
    pub size: u64,
    /// The identities of the input scenes, sorted.
    pub inputs: Vec<String>,
    pub updated_at: crate::UnixMillis,
}

impl TilePointer {
    /// Whether a pointer to `inputs` should replace this one: it holds every scene this one
    /// does, and more.
    pub fn moves_to(&self, inputs: &[String]) -> bool {
        inputs.len() > self.inputs.len() && self.inputs.iter().all(|i| inputs.contains(i))
    }
}

/// Check a product's name: it is a key segment and part of a URI.
pub fn check_name(name: &str) -> Result<(), ProductError> {
    let ok = !name.is_empty()
        && name.len() <= 64
        && name.as_bytes()[0].is_ascii_alphanumeric()
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_');
    if ok {
        Ok(())
    } else {
        Err(ProductError::BadName(name.chars().take(80).collect()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grids_parse_to_whole_pixels_or_are_refused() {
        let g = UtmGrid::parse("utm:100km@10m").unwrap();
        assert_eq!(
            (g.size, g.resolution, g.tile_pixels()),
            (100_000.0, 10.0, 10_000)
        );
        assert_eq!(g.canonical(), "utm:100000m@10m");
        assert_eq!(UtmGrid::parse(&g.canonical()).unwrap(), g);
        for bad in [
            "utm:100km",
            "utm:100km@3m",
            "utm:0m@1m",
            "web:1@2",
            "utm:1km@1km",
        ] {
            assert!(UtmGrid::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn tile_codes_round_trip_and_name_their_crs() {
        let t = GridTile {
            zone: 32,
            north: true,
            col: 5,
            row: 51,
        };
        assert_eq!(t.to_string(), "32N-5-51");
        assert_eq!(GridTile::parse("32N-5-51").unwrap(), t);
        assert_eq!(t.epsg(), 32632);
        assert_eq!(GridTile::parse("07S-1-2").unwrap().epsg(), 32707);
        assert_eq!(t.zone_band(), [6.0, 12.0]);
        for bad in [
            "32X-1-2",
            "61N-1-2",
            "32N-1",
            "32N-a-2",
            "N-1-2",
            "32N-1-2-3",
            "32N--2",
        ] {
            assert!(GridTile::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn tiles_under_a_box_are_the_squares_it_meets() {
        let g = UtmGrid::parse("utm:10km@100m").unwrap();
        let tiles = g.tiles_under(32, true, [495_000.0, 5_001_000.0, 512_000.0, 5_009_000.0]);
        let codes: Vec<String> = tiles.iter().map(ToString::to_string).collect();
        assert_eq!(codes, ["32N-49-500", "32N-50-500", "32N-51-500"]);
        assert_eq!(
            g.bounds(&tiles[1]),
            [500_000.0, 5_000_000.0, 510_000.0, 5_010_000.0]
        );
        assert_eq!(
            g.geotransform(&tiles[1]),
            [500_000.0, 100.0, 0.0, 5_010_000.0, 0.0, -100.0]
        );
        assert!(
            g.tiles_under(32, true, [f64::NAN, 0.0, 1.0, 1.0])
                .is_empty()
        );
    }

    #[test]
    fn zones_reach_one_tile_past_their_edges() {
        let g = UtmGrid::parse("utm:100km@10m").unwrap();
        assert_eq!(g.candidate_zones(8.0, 10.0, 45.0), vec![32]);
        assert_eq!(g.candidate_zones(11.5, 12.5, 45.0), vec![32, 33]);
    }

    #[test]
    fn rings_meet_boxes_by_vertex_corner_or_crossing() {
        let square = [
            [0.0, 0.0],
            [10.0, 0.0],
            [10.0, 10.0],
            [0.0, 10.0],
            [0.0, 0.0],
        ];
        assert!(ring_meets_box(&square, [5.0, 5.0, 20.0, 20.0]));
        assert!(
            ring_meets_box(&square, [2.0, 2.0, 3.0, 3.0]),
            "box inside ring"
        );
        assert!(
            ring_meets_box(&square, [-5.0, 4.0, 15.0, 6.0]),
            "edges cross"
        );
        assert!(!ring_meets_box(&square, [11.0, 0.0, 12.0, 1.0]));
        let diamond = [[5.0, 0.0], [10.0, 5.0], [5.0, 10.0], [0.0, 5.0]];
        assert!(
            !ring_meets_box(&diamond, [0.0, 0.0, 1.0, 1.0]),
            "corner off the diamond"
        );
    }

    #[test]
    fn statistics_are_numpys() {
        assert_eq!(Stat::Median.of(&mut [3.0, 1.0, 2.0, 10.0]), 2.5);
        assert_eq!(Stat::Percentile(10).of(&mut [1.0, 2.0, 3.0, 4.0, 5.0]), 1.4);
        assert_eq!(Stat::Mean.of(&mut [1.0, 2.0]), 1.5);
        assert_eq!(Stat::Count.of(&mut [7.0, 7.0, 7.0]), 3.0);
        assert_eq!(Stat::parse("p90"), Some(Stat::Percentile(90)));
        assert_eq!(Stat::parse("p95"), None);
        assert_eq!(Stat::parse("p5"), None);
    }

    #[test]
    fn pointers_move_only_to_a_larger_input_set() {
        let at = |inputs: &[&str]| TilePointer {
            job_id: crate::JobId::parse(&"a".repeat(32)).unwrap(),
            key: "k".into(),
            e_tag: crate::ETag::new("e"),
            size: 1,
            inputs: inputs.iter().map(|s| (*s).to_owned()).collect(),
            updated_at: 0,
        };
        let ids = |v: &[&str]| v.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
        assert!(at(&["a", "b"]).moves_to(&ids(&["a", "b", "c"])));
        assert!(!at(&["a", "b"]).moves_to(&ids(&["a", "b"])), "the same set");
        assert!(
            !at(&["a", "b", "c"]).moves_to(&ids(&["a", "b"])),
            "an older set"
        );
        assert!(
            !at(&["a", "b"]).moves_to(&ids(&["a", "c", "d"])),
            "not a superset"
        );
    }

    #[test]
    fn names_are_key_segments() {
        assert!(check_name("alps-2026_q3").is_ok());
        for bad in ["", "Alps", "-x", "a/b", "a..b", &"x".repeat(65)] {
            assert!(check_name(bad).is_err(), "{bad}");
        }
    }
}

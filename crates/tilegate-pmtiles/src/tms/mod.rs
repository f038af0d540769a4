//! OGC Tile Matrix Sets 2.0 (OGC 17-083r4): the two web pyramids' grids, `WebMercatorQuad` and
//! `WorldCRS84Quad`, and any regular matrix set read from its JSON encoding — tile bounds, tile
//! ranges, resolutions, and the zoom a native resolution maps to.

mod json;

use std::f64::consts::PI;

/// The semi-major axis of WGS84 (metres): the sphere EPSG:3857 projects onto.
pub const EARTH_RADIUS: f64 = 6_378_137.0;

/// Half of Web Mercator's square world, in metres (π·R): the origin's ±x and ±y.
pub const WEB_MERCATOR_EXTENT: f64 = PI * EARTH_RADIUS;

/// The latitude at which Web Mercator's y reaches [`WEB_MERCATOR_EXTENT`]: atan(sinh(π)), in
/// degrees (85.0511287798066…). Latitudes beyond it are not on the map.
pub fn web_mercator_max_latitude() -> f64 {
    PI.sinh().atan().to_degrees()
}

/// The "standardized rendering pixel size" of OGC WMTS and TMS (0.28 mm): a scale denominator is
/// a cell size in metres divided by it.
pub const STANDARD_PIXEL_SIZE: f64 = 0.000_28;

/// Metres per degree on the WGS84 semi-major axis' circle (2πR/360): CRS84's metres per unit,
/// as the OGC definitions use it for `WorldCRS84Quad`'s scale denominators.
pub const METERS_PER_DEGREE: f64 = 2.0 * PI * EARTH_RADIUS / 360.0;

/// The coordinate reference system a matrix set is defined in.
#[derive(Clone, Debug, PartialEq)]
pub enum Crs {
    /// EPSG:3857, Web Mercator (metres; x east, y north).
    WebMercator,
    /// OGC CRS84 (degrees; longitude, latitude), also EPSG:4326 with its axes in x/y order.
    Crs84,
    /// Any other CRS, by the URI (or text) the document gave: its matrices work in its own
    /// units, but nothing converts it to WGS84.
    Other(String),
}

impl Crs {
    /// Recognises the URIs and short forms of the two CRSs this crate can convert to WGS84.
    pub fn from_uri(uri: &str) -> Crs {
        let u = uri.trim().trim_end_matches('/').to_ascii_lowercase();
        let tail = |suffix: &str| u.ends_with(suffix);
        if tail("/epsg/0/3857") || u == "epsg:3857" || tail("/epsg/0/900913") || tail("::3857") {
            Crs::WebMercator
        } else if tail("/ogc/1.3/crs84")
            || tail("/ogc/0/crs84")
            || u == "crs84"
            || u == "ogc:crs84"
            || tail("/epsg/0/4326")
            || u == "epsg:4326"
            || tail("::4326")
        {
            Crs::Crs84
        } else {
            Crs::Other(uri.to_owned())
        }
    }

    /// Metres per CRS unit, for scale denominators (`None` where unknown).
    pub fn meters_per_unit(&self) -> Option<f64> {
        match self {
            Crs::WebMercator => Some(1.0),
            Crs::Crs84 => Some(METERS_PER_DEGREE),
            Crs::Other(_) => None,
        }
    }
}

/// Which corner of the matrix its origin point is, and so where row 0 is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CornerOfOrigin {
    /// Row 0 is the top row; rows grow southwards (the web's XYZ convention).
    TopLeft,
    /// Row 0 is the bottom row; rows grow northwards.
    BottomLeft,
}

/// One zoom level's grid: a regular matrix of equal tiles.
#[derive(Clone, Debug, PartialEq)]
pub struct TileMatrix {
    /// The matrix's identifier in its set (for the quad sets, the zoom as a decimal string).
    pub id: String,
    pub scale_denominator: f64,
    /// The size of one cell (pixel) in CRS units.
    pub cell_size: f64,
    pub corner_of_origin: CornerOfOrigin,
    /// The origin corner in CRS units, x (easting / longitude) first whatever the CRS's axis order.
    pub point_of_origin: [f64; 2],
    pub tile_width: u32,
    pub tile_height: u32,
    pub matrix_width: u32,
    pub matrix_height: u32,
}

impl TileMatrix {
    /// The width and height of one tile in CRS units.
    pub fn tile_span(&self) -> (f64, f64) {
        (
            self.cell_size * f64::from(self.tile_width),
            self.cell_size * f64::from(self.tile_height),
        )
    }

    /// The whole matrix's extent in CRS units.
    pub fn extent(&self) -> Bbox {
        let (sx, sy) = self.tile_span();
        let [ox, oy] = self.point_of_origin;
        let w = sx * f64::from(self.matrix_width);
        let h = sy * f64::from(self.matrix_height);
        match self.corner_of_origin {
            CornerOfOrigin::TopLeft => Bbox::new(ox, oy - h, ox + w, oy),
            CornerOfOrigin::BottomLeft => Bbox::new(ox, oy, ox + w, oy + h),
        }
    }
}

/// A tile's address: zoom (the matrix's index in its set), column and row.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Tile {
    pub z: u8,
    pub x: u32,
    pub y: u32,
}

impl Tile {
    pub const fn new(z: u8, x: u32, y: u32) -> Tile {
        Tile { z, x, y }
    }
}

impl std::fmt::Display for Tile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}/{}", self.z, self.x, self.y)
    }
}

/// An axis-aligned box: in a matrix set's CRS, or in WGS84 as (west, south, east, north) degrees.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Bbox {
    pub min_x: f64,
    pub min_y: f64,
    pub max_x: f64,
    pub max_y: f64,
}

impl Bbox {
    pub const fn new(min_x: f64, min_y: f64, max_x: f64, max_y: f64) -> Bbox {
        Bbox {
            min_x,
            min_y,
            max_x,
            max_y,
        }
    }
}

/// An inclusive rectangle of tiles at one zoom.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TileRange {
    pub z: u8,
    pub min_x: u32,
    pub min_y: u32,
    pub max_x: u32,
    pub max_y: u32,
}

impl TileRange {
    /// How many tiles the range holds.
    pub fn len(&self) -> u64 {
        u64::from(self.max_x - self.min_x + 1) * u64::from(self.max_y - self.min_y + 1)
    }

    /// Never true: a range holds at least one tile (an empty cover is `None` or an empty list).
    pub fn is_empty(&self) -> bool {
        false
    }

    pub fn contains(&self, tile: Tile) -> bool {
        tile.z == self.z
            && (self.min_x..=self.max_x).contains(&tile.x)
            && (self.min_y..=self.max_y).contains(&tile.y)
    }

    /// The tiles row by row (y outer, x inner).
    pub fn tiles(&self) -> impl Iterator<Item = Tile> + use<> {
        let r = *self;
        (r.min_y..=r.max_y)
            .flat_map(move |y| (r.min_x..=r.max_x).map(move |x| Tile::new(r.z, x, y)))
    }
}

/// How a native resolution between two zooms' resolutions picks one of them: the rule of GDAL's
/// COG driver (`ZOOM_LEVEL_STRATEGY`, `frmts/gtiff/cogdriver.cpp`), which morecantile's
/// `zoom_for_res` follows too.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ZoomStrategy {
    /// The zoom whose resolution is nearer in ratio: the finer zoom `z` (resolution `r_z ≤ res`)
    /// unless `r_{z-1} / res < res / r_z`, then the coarser `z - 1`.
    #[default]
    Auto,
    /// The coarser of the two (never upsamples the source).
    Lower,
    /// The finer of the two (never loses source detail).
    Upper,
}

/// What a matrix set cannot answer.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TmsError {
    #[error("zoom {zoom} is not in the tile matrix set (zooms 0..={max_zoom})")]
    ZoomOutOfRange { zoom: u8, max_zoom: u8 },
    #[error("tile {tile} is outside its matrix ({width}x{height} tiles)")]
    TileOutOfRange { tile: Tile, width: u32, height: u32 },
    #[error("convert CRS {crs} to WGS84: only EPSG:3857 and CRS84/EPSG:4326 are known")]
    UnsupportedCrs { crs: String },
    #[error("bounding box has a NaN coordinate")]
    NanCoordinate,
    #[error("parse the tile matrix set JSON document")]
    Json(#[from] serde_json::Error),
    #[error("read tile matrix set {id}: {reason}")]
    Invalid { id: String, reason: String },
}

/// A regular (no variable matrix widths) OGC tile matrix set: matrix `z` is zoom `z`.
#[derive(Clone, Debug, PartialEq)]
pub struct TileMatrixSet {
    id: String,
    crs: Crs,
    matrices: Vec<TileMatrix>,
}

/// Added on the inward side of a box's edges (in tiles) when finding the tiles it covers, so that
/// a tile's own bounds, after the rounding of `origin + n · span`, cover exactly that tile.
const EDGE_TOLERANCE: f64 = 1e-9;

/// Degrees a WGS84 box's edges move inward before projecting (morecantile's `LL_EPSILON`).
const LL_EPSILON: f64 = 1e-11;

impl TileMatrixSet {
    /// Builds a set from its parts, checking that it has matrices and that each is well formed.
    pub fn new(
        id: impl Into<String>,
        crs: Crs,
        matrices: Vec<TileMatrix>,
    ) -> Result<TileMatrixSet, TmsError> {
        let id = id.into();
        let invalid = |reason: String| TmsError::Invalid {
            id: id.clone(),
            reason,
        };
        if matrices.is_empty() {
            return Err(invalid("it has no tile matrices".into()));
        }
        if matrices.len() > usize::from(u8::MAX) + 1 {
            return Err(invalid(format!(
                "{} tile matrices (at most 256)",
                matrices.len()
            )));
        }
        for m in &matrices {
            let ok = m.cell_size.is_finite()
                && m.cell_size > 0.0
                && m.point_of_origin.iter().all(|v| v.is_finite())
                && m.tile_width > 0
                && m.tile_height > 0
                && m.matrix_width > 0
                && m.matrix_height > 0;
            if !ok {
                return Err(invalid(format!(
                    "tile matrix {} has a non-positive size or a non-finite origin",
                    m.id
                )));
            }
        }
        Ok(TileMatrixSet { id, crs, matrices })
    }

    /// OGC `WebMercatorQuad` (EPSG:3857, 256² tiles, zooms 0–24, one tile at zoom 0), computed from
    /// π·R as the OGC definition's numbers are.
    pub fn web_mercator_quad() -> TileMatrixSet {
        let matrices = (0..=24u8)
            .map(|z| {
                let n = 1u32 << z;
                let cell_size = 2.0 * WEB_MERCATOR_EXTENT / 256.0 / f64::from(n);
                TileMatrix {
                    id: z.to_string(),
                    scale_denominator: cell_size / STANDARD_PIXEL_SIZE,
                    cell_size,
                    corner_of_origin: CornerOfOrigin::TopLeft,
                    point_of_origin: [-WEB_MERCATOR_EXTENT, WEB_MERCATOR_EXTENT],
                    tile_width: 256,
                    tile_height: 256,
                    matrix_width: n,
                    matrix_height: n,
                }
            })
            .collect();
        TileMatrixSet {
            id: "WebMercatorQuad".into(),
            crs: Crs::WebMercator,
            matrices,
        }
    }

    /// OGC `WorldCRS84Quad` (CRS84, 256² tiles, zooms 0–23, two tiles side by side at zoom 0).
    pub fn world_crs84_quad() -> TileMatrixSet {
        let matrices = (0..=23u8)
            .map(|z| {
                let n = 1u32 << z;
                let cell_size = 180.0 / 256.0 / f64::from(n);
                TileMatrix {
                    id: z.to_string(),
                    scale_denominator: cell_size * METERS_PER_DEGREE / STANDARD_PIXEL_SIZE,
                    cell_size,
                    corner_of_origin: CornerOfOrigin::TopLeft,
                    point_of_origin: [-180.0, 90.0],
                    tile_width: 256,
                    tile_height: 256,
                    matrix_width: 2 * n,
                    matrix_height: n,
                }
            })
            .collect();
        TileMatrixSet {
            id: "WorldCRS84Quad".into(),
            crs: Crs::Crs84,
            matrices,
        }
    }

    /// Parses an OGC TMS 2.0 JSON document (`tileMatrices` with `cellSize`, `pointOfOrigin`,
    /// optional `cornerOfOrigin`). Refuses variable matrix widths. A point of origin given in a
    /// latitude-first axis order (`orderedAxes` starting with a latitude or northing) is swapped
    /// into x/y order.
    pub fn from_json(document: &str) -> Result<TileMatrixSet, TmsError> {
        json::parse(document)
    }

    /// A set by its identifier — `WebMercatorQuad`, `WorldCRS84Quad` — or read from its TMS 2.0
    /// JSON `document` when one is given.
    pub fn named(id: &str, document: Option<&str>) -> Result<TileMatrixSet, TmsError> {
        match (document, id) {
            (Some(doc), _) => TileMatrixSet::from_json(doc),
            (None, "WebMercatorQuad") => Ok(TileMatrixSet::web_mercator_quad()),
            (None, "WorldCRS84Quad") => Ok(TileMatrixSet::world_crs84_quad()),
            (None, other) => Err(TmsError::Invalid {
                id: other.to_owned(),
                reason: "no such built-in set: expected WebMercatorQuad or WorldCRS84Quad, or a \
                         TMS 2.0 JSON document"
                    .into(),
            }),
        }
    }

    pub fn id(&self) -> &str {
        &self.id
    }

    pub fn crs(&self) -> &Crs {
        &self.crs
    }

    pub fn matrices(&self) -> &[TileMatrix] {
        &self.matrices
    }

    /// The finest zoom (the last matrix's index).
    pub fn max_zoom(&self) -> u8 {
        // `new` keeps at most 256 matrices.
        u8::try_from(self.matrices.len() - 1).unwrap_or(u8::MAX)
    }

    pub fn matrix(&self, z: u8) -> Result<&TileMatrix, TmsError> {
        self.matrices
            .get(usize::from(z))
            .ok_or(TmsError::ZoomOutOfRange {
                zoom: z,
                max_zoom: self.max_zoom(),
            })
    }

    /// A tile's width and height in pixels at a zoom.
    pub fn tile_size(&self, z: u8) -> Result<(u32, u32), TmsError> {
        let m = self.matrix(z)?;
        Ok((m.tile_width, m.tile_height))
    }

    /// The cell size (CRS units per pixel) at a zoom.
    pub fn resolution(&self, z: u8) -> Result<f64, TmsError> {
        Ok(self.matrix(z)?.cell_size)
    }

    /// The scale denominator at a zoom, as the set defines it.
    pub fn scale_denominator(&self, z: u8) -> Result<f64, TmsError> {
        Ok(self.matrix(z)?.scale_denominator)
    }

    /// Whether each matrix has the previous one's origin, half its cell size and twice its
    /// columns and rows, so that [`parent`](Self::parent) and [`children`](Self::children) hold.
    pub fn is_quadtree(&self) -> bool {
        self.matrices.windows(2).all(|w| {
            let (a, b) = (&w[0], &w[1]);
            a.point_of_origin == b.point_of_origin
                && a.corner_of_origin == b.corner_of_origin
                && a.tile_width == b.tile_width
                && a.tile_height == b.tile_height
                && Some(b.matrix_width) == a.matrix_width.checked_mul(2)
                && Some(b.matrix_height) == a.matrix_height.checked_mul(2)
                && ((a.cell_size / 2.0 - b.cell_size) / b.cell_size).abs() <= 1e-9
        })
    }

    /// The tile one zoom up that covers this one; `None` at zoom 0 or in a set that is not a
    /// quadtree.
    pub fn parent(&self, tile: Tile) -> Option<Tile> {
        self.check(tile).ok()?;
        if tile.z == 0 || !self.is_quadtree() {
            return None;
        }
        Some(Tile::new(tile.z - 1, tile.x / 2, tile.y / 2))
    }

    /// The four tiles one zoom down that this one covers, in the order (2x, 2y), (2x+1, 2y),
    /// (2x, 2y+1), (2x+1, 2y+1); `None` at the finest zoom or in a set that is not a quadtree.
    pub fn children(&self, tile: Tile) -> Option<[Tile; 4]> {
        self.check(tile).ok()?;
        if tile.z >= self.max_zoom() || !self.is_quadtree() {
            return None;
        }
        let (z, x, y) = (tile.z + 1, tile.x * 2, tile.y * 2);
        Some([
            Tile::new(z, x, y),
            Tile::new(z, x + 1, y),
            Tile::new(z, x, y + 1),
            Tile::new(z, x + 1, y + 1),
        ])
    }

    fn check(&self, tile: Tile) -> Result<&TileMatrix, TmsError> {
        let m = self.matrix(tile.z)?;
        if tile.x >= m.matrix_width || tile.y >= m.matrix_height {
            return Err(TmsError::TileOutOfRange {
                tile,
                width: m.matrix_width,
                height: m.matrix_height,
            });
        }
        Ok(m)
    }

    /// A tile's bounds in the set's CRS.
    pub fn xy_bounds(&self, tile: Tile) -> Result<Bbox, TmsError> {
        let m = self.check(tile)?;
        let (sx, sy) = m.tile_span();
        let [ox, oy] = m.point_of_origin;
        let (x, y) = (f64::from(tile.x), f64::from(tile.y));
        let (left, right) = (ox + x * sx, ox + (x + 1.0) * sx);
        Ok(match m.corner_of_origin {
            CornerOfOrigin::TopLeft => Bbox::new(left, oy - (y + 1.0) * sy, right, oy - y * sy),
            CornerOfOrigin::BottomLeft => Bbox::new(left, oy + y * sy, right, oy + (y + 1.0) * sy),
        })
    }

    /// A tile's bounds in WGS84 degrees (west, south, east, north).
    pub fn bounds(&self, tile: Tile) -> Result<Bbox, TmsError> {
        let b = self.xy_bounds(tile)?;
        let (west, north) = self.to_wgs84(b.min_x, b.max_y)?;
        let (east, south) = self.to_wgs84(b.max_x, b.min_y)?;
        Ok(Bbox::new(west, south, east, north))
    }

    /// A point in the set's CRS as WGS84 (longitude, latitude) degrees.
    pub fn to_wgs84(&self, x: f64, y: f64) -> Result<(f64, f64), TmsError> {
        match &self.crs {
            Crs::WebMercator => Ok((
                (x / EARTH_RADIUS).to_degrees(),
                (y / EARTH_RADIUS).sinh().atan().to_degrees(),
            )),
            Crs::Crs84 => Ok((x, y)),
            Crs::Other(crs) => Err(TmsError::UnsupportedCrs { crs: crs.clone() }),
        }
    }

    /// A WGS84 (longitude, latitude) point in the set's CRS. Web Mercator clamps the latitude to
    /// ±[`web_mercator_max_latitude`] (the poles are infinitely far).
    pub fn from_wgs84(&self, lon: f64, lat: f64) -> Result<(f64, f64), TmsError> {
        match &self.crs {
            Crs::WebMercator => {
                let limit = web_mercator_max_latitude();
                let lat = lat.clamp(-limit, limit).to_radians();
                Ok((
                    EARTH_RADIUS * lon.to_radians(),
                    EARTH_RADIUS * (PI / 4.0 + lat / 2.0).tan().ln(),
                ))
            }
            Crs::Crs84 => Ok((lon, lat)),
            Crs::Other(crs) => Err(TmsError::UnsupportedCrs { crs: crs.clone() }),
        }
    }

    /// The tiles at zoom `z` whose interiors meet a box given in the set's CRS (a box edge on a
    /// tile edge does not take in the neighbour; a zero-width box takes the tile it lies in).
    /// `None` when the box lies outside the matrix.
    pub fn tile_range(&self, bbox: Bbox, z: u8) -> Result<Option<TileRange>, TmsError> {
        let m = self.matrix(z)?;
        if [bbox.min_x, bbox.min_y, bbox.max_x, bbox.max_y]
            .iter()
            .any(|v| v.is_nan())
        {
            return Err(TmsError::NanCoordinate);
        }
        let extent = m.extent();
        if bbox.min_x > bbox.max_x
            || bbox.min_y > bbox.max_y
            || bbox.max_x < extent.min_x
            || bbox.min_x > extent.max_x
            || bbox.max_y < extent.min_y
            || bbox.min_y > extent.max_y
        {
            return Ok(None);
        }
        let (sx, sy) = m.tile_span();
        let [ox, oy] = m.point_of_origin;
        let cols = span_cells(
            (bbox.min_x - ox) / sx,
            (bbox.max_x - ox) / sx,
            m.matrix_width,
        );
        let rows = match m.corner_of_origin {
            CornerOfOrigin::TopLeft => (oy - bbox.max_y) / sy..(oy - bbox.min_y) / sy,
            CornerOfOrigin::BottomLeft => (bbox.min_y - oy) / sy..(bbox.max_y - oy) / sy,
        };
        let rows = span_cells(rows.start, rows.end, m.matrix_height);
        match (cols, rows) {
            (Some((min_x, max_x)), Some((min_y, max_y))) => Ok(Some(TileRange {
                z,
                min_x,
                min_y,
                max_x,
                max_y,
            })),
            _ => Ok(None),
        }
    }

    /// The tiles at zoom `z` that a WGS84 box (west, south, east, north degrees) covers: one range,
    /// or two when `west > east` (a box across the antimeridian: [west, 180] and [-180, east]),
    /// none when it misses the set; the two halves become one range where they share columns. Longitudes are clamped to ±180; in Web Mercator latitudes are
    /// clamped to ±[`web_mercator_max_latitude`], so a box reaching a pole takes the edge row.
    pub fn tile_ranges_wgs84(&self, bbox: Bbox, z: u8) -> Result<Vec<TileRange>, TmsError> {
        if [bbox.min_x, bbox.min_y, bbox.max_x, bbox.max_y]
            .iter()
            .any(|v| v.is_nan())
        {
            return Err(TmsError::NanCoordinate);
        }
        let parts = if bbox.min_x > bbox.max_x {
            vec![
                Bbox::new(-180.0, bbox.min_y, bbox.max_x, bbox.max_y),
                Bbox::new(bbox.min_x, bbox.min_y, 180.0, bbox.max_y),
            ]
        } else {
            vec![bbox]
        };
        let mut ranges = Vec::with_capacity(2);
        for part in parts {
            let west = part.min_x.clamp(-180.0, 180.0);
            let east = part.max_x.clamp(-180.0, 180.0);
            let (mut south, mut north) =
                (part.min_y.clamp(-90.0, 90.0), part.max_y.clamp(-90.0, 90.0));
            if self.crs == Crs::WebMercator {
                let limit = web_mercator_max_latitude();
                if south >= limit || north <= -limit {
                    continue;
                }
                south = south.max(-limit);
                north = north.min(limit);
            }
            // Inward by LL_EPSILON degrees (as morecantile's `tiles`): a box on tile edges
            // survives the projection's rounding without taking in the neighbours.
            let (mut west, mut east) = (west, east);
            if east - west > 2.0 * LL_EPSILON {
                (west, east) = (west + LL_EPSILON, east - LL_EPSILON);
            }
            if north - south > 2.0 * LL_EPSILON {
                (south, north) = (south + LL_EPSILON, north - LL_EPSILON);
            }
            let (min_x, min_y) = self.from_wgs84(west, south)?;
            let (max_x, max_y) = self.from_wgs84(east, north)?;
            if let Some(range) = self.tile_range(Bbox::new(min_x, min_y, max_x, max_y), z)? {
                ranges.push(range);
            }
        }
        // Where the halves share columns (a matrix a tile or two wide), one range holds both.
        if let [a, b] = ranges[..]
            && a.max_x >= b.min_x
        {
            ranges = vec![TileRange {
                z,
                min_x: a.min_x.min(b.min_x),
                min_y: a.min_y.min(b.min_y),
                max_x: a.max_x.max(b.max_x),
                max_y: a.max_y.max(b.max_y),
            }];
        }
        Ok(ranges)
    }

    /// The zoom for a native resolution (in CRS units per pixel), by GDAL's COG driver rule
    /// (`cogdriver.cpp`, `ZOOM_LEVEL_STRATEGY`; morecantile's `zoom_for_res` is the same): take the
    /// first zoom `z` whose resolution `r_z` is finer than `res` or equal to it within a relative
    /// 1e-8; if it is not equal and `z > 0`, [`ZoomStrategy`] chooses between `z` and `z - 1`.
    /// A resolution finer than the finest zoom's gives the finest zoom (morecantile's answer;
    /// GDAL refuses), one coarser than zoom 0's gives zoom 0.
    pub fn zoom_for_resolution(&self, res: f64, strategy: ZoomStrategy) -> u8 {
        let max = self.max_zoom();
        let close = |r: f64| ((res - r) / r).abs() <= 1e-8;
        let mut z = 0u8;
        while z < max {
            let r = self.matrices[usize::from(z)].cell_size;
            if res > r || close(r) {
                break;
            }
            z += 1;
        }
        let r = self.matrices[usize::from(z)].cell_size;
        if z > 0 && !close(r) {
            let coarser = self.matrices[usize::from(z - 1)].cell_size;
            match strategy {
                ZoomStrategy::Lower => z -= 1,
                ZoomStrategy::Upper => {}
                ZoomStrategy::Auto => {
                    if coarser / res < res / r {
                        z -= 1;
                    }
                }
            }
        }
        z
    }
}

/// The cells `[floor(lo), ceil(hi) - 1]` of an axis of `n` cells, with the edges moved inward by
/// [`EDGE_TOLERANCE`], clamped to the axis; `None` when nothing is left.
fn span_cells(lo: f64, hi: f64, n: u32) -> Option<(u32, u32)> {
    let last = f64::from(n) - 1.0;
    let first = (lo + EDGE_TOLERANCE).floor().clamp(0.0, last);
    let end = ((hi - EDGE_TOLERANCE).ceil() - 1.0)
        .clamp(0.0, last)
        .max(first);
    if hi < 0.0 || lo > f64::from(n) {
        return None;
    }
    // Both are whole numbers in [0, n - 1] here.
    Some((first as u32, end as u32))
}

#[cfg(test)]
mod tests;

//! A web pyramid's shape: which tiles it holds at each zoom, and which children each parent
//! waits for — the tree of completions a pyramid job is built along.
//!
//! The tree is made bottom-up so that it is closed: the base (finest) zoom holds the tiles the
//! scene covers, and each zoom above holds exactly the parents of the zoom below. Every tile
//! above the base then has at least one child in the pyramid, every tile below the top has its
//! parent in it, and a parent is complete when each of its children in the pyramid is recorded:
//! [`Pyramid::children`] lists them (one, two or four: fewer at the data's edges). A range
//! computed for each zoom from the scene's box instead can leave out the parent of a base tile
//! (a box edge a hair past a tile edge counts at a fine zoom and not at a coarse one, the
//! tolerance being a fraction of a tile): that tile's completion would have nothing to build.
//!
//! The top zoom holds the fewest tiles the zooms asked for allow; with the default zooms
//! ([`Pyramid::default_zooms`]) it is one tile.

use crate::tms::{Bbox, Tile, TileMatrixSet, TileRange, TmsError, ZoomStrategy};

/// Why a pyramid cannot be laid out.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PyramidError {
    /// A pyramid halves each zoom into the next: the set must be a quadtree.
    #[error("tile matrix set {0} is not a quadtree (each zoom twice the one above): no pyramid")]
    NotQuadtree(String),
    #[error("zooms {min}..{max}: the first must not be above the last")]
    Zooms { min: u8, max: u8 },
    #[error("the scene lies outside tile matrix set {0}")]
    Outside(String),
    #[error(transparent)]
    Tms(#[from] TmsError),
}

/// The tiles of a pyramid, zoom by zoom, from `min_zoom` (the top) to `max_zoom` (the base).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Pyramid {
    min_zoom: u8,
    /// One range per zoom, `min_zoom` first.
    levels: Vec<TileRange>,
}

impl Pyramid {
    /// The pyramid of `tms` over `bbox` (in the set's CRS), zooms `min_zoom..=max_zoom`.
    pub fn new(
        tms: &TileMatrixSet,
        bbox: Bbox,
        min_zoom: u8,
        max_zoom: u8,
    ) -> Result<Pyramid, PyramidError> {
        if !tms.is_quadtree() {
            return Err(PyramidError::NotQuadtree(tms.id().to_owned()));
        }
        if min_zoom > max_zoom {
            return Err(PyramidError::Zooms {
                min: min_zoom,
                max: max_zoom,
            });
        }
        let base = tms
            .tile_range(bbox, max_zoom)?
            .ok_or_else(|| PyramidError::Outside(tms.id().to_owned()))?;
        let mut levels = vec![base];
        let mut below = base;
        for z in (min_zoom..max_zoom).rev() {
            below = TileRange {
                z,
                min_x: below.min_x / 2,
                min_y: below.min_y / 2,
                max_x: below.max_x / 2,
                max_y: below.max_y / 2,
            };
            levels.push(below);
        }
        levels.reverse();
        Ok(Pyramid { min_zoom, levels })
    }

    /// The zooms a pyramid of `bbox` takes by default: its base is the zoom of the scene's
    /// native resolution `res` (CRS units per pixel; GDAL's rule, [`ZoomStrategy::Auto`]), its
    /// top the finest zoom at which the scene lies in one tile (zoom 0 at the coarsest).
    pub fn default_zooms(
        tms: &TileMatrixSet,
        bbox: Bbox,
        res: f64,
    ) -> Result<(u8, u8), PyramidError> {
        let max = tms.zoom_for_resolution(res, ZoomStrategy::Auto);
        let outside = || PyramidError::Outside(tms.id().to_owned());
        let mut range = tms.tile_range(bbox, max)?.ok_or_else(outside)?;
        let mut min = max;
        // Halving the base's range, as the pyramid is built, until one tile is left.
        while range.len() > 1 && min > 0 {
            min -= 1;
            range = TileRange {
                z: min,
                min_x: range.min_x / 2,
                min_y: range.min_y / 2,
                max_x: range.max_x / 2,
                max_y: range.max_y / 2,
            };
        }
        Ok((min, max))
    }

    /// The top zoom.
    pub fn min_zoom(&self) -> u8 {
        self.min_zoom
    }

    /// The base zoom: the tiles read from the source.
    pub fn max_zoom(&self) -> u8 {
        self.min_zoom + (self.levels.len() - 1) as u8
    }

    /// The tiles at zoom `z`, if the pyramid has that zoom.
    pub fn level(&self, z: u8) -> Option<&TileRange> {
        self.levels.get(usize::from(z.checked_sub(self.min_zoom)?))
    }

    /// Every zoom's tiles, the top first.
    pub fn levels(&self) -> &[TileRange] {
        &self.levels
    }

    /// How many tiles the pyramid holds, every zoom together.
    pub fn len(&self) -> u64 {
        self.levels.iter().map(TileRange::len).sum()
    }

    /// Never true: a pyramid holds at least its top tile.
    pub fn is_empty(&self) -> bool {
        false
    }

    pub fn contains(&self, tile: Tile) -> bool {
        self.level(tile.z).is_some_and(|r| r.contains(tile))
    }

    /// The tile this one completes: its parent, or `None` at the top (or outside the pyramid).
    pub fn parent(&self, tile: Tile) -> Option<Tile> {
        if !self.contains(tile) || tile.z == self.min_zoom {
            return None;
        }
        Some(Tile::new(tile.z - 1, tile.x / 2, tile.y / 2))
    }

    /// The children this tile waits for: those of its four in the zoom below that are in the
    /// pyramid, in the order (2x, 2y), (2x+1, 2y), (2x, 2y+1), (2x+1, 2y+1); none at the base
    /// or outside the pyramid.
    pub fn children(&self, tile: Tile) -> Vec<Tile> {
        if !self.contains(tile) {
            return Vec::new();
        }
        let Some(below) = self.level(tile.z.saturating_add(1)) else {
            return Vec::new();
        };
        let (x, y) = (tile.x * 2, tile.y * 2);
        [(x, y), (x + 1, y), (x, y + 1), (x + 1, y + 1)]
            .into_iter()
            .map(|(x, y)| Tile::new(below.z, x, y))
            .filter(|t| below.contains(*t))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mercator() -> TileMatrixSet {
        TileMatrixSet::web_mercator_quad()
    }

    /// A box in Web Mercator metres around (x, y), `w` × `h`.
    fn around(x: f64, y: f64, w: f64, h: f64) -> Bbox {
        Bbox::new(x - w / 2.0, y - h / 2.0, x + w / 2.0, y + h / 2.0)
    }

    /// The tree is closed: every tile below the top has its parent in the pyramid and is one
    /// of that parent's children; every tile above the base has at least one child; each
    /// zoom's children, counted through their parents, are exactly the zoom below.
    fn assert_closed(p: &Pyramid) {
        for pair in p.levels().windows(2) {
            let (above, below) = (pair[0], pair[1]);
            let mut counted = 0u64;
            for t in above.tiles() {
                let kids = p.children(t);
                assert!(!kids.is_empty(), "{t} waits for no child");
                for k in &kids {
                    assert_eq!(p.parent(*k), Some(t));
                }
                counted += kids.len() as u64;
            }
            assert_eq!(counted, below.len(), "zoom {}", below.z);
        }
        let base = p.level(p.max_zoom()).unwrap();
        assert!(base.tiles().all(|t| p.children(t).is_empty()));
        let top = p.level(p.min_zoom()).unwrap();
        assert!(top.tiles().all(|t| p.parent(t).is_none()));
    }

    #[test]
    fn a_scene_across_tile_edges_makes_a_closed_tree() {
        let tms = mercator();
        // 40 km × 30 km near (1,000 km, 5,000 km): it straddles tile edges at many zooms.
        let bbox = around(1_000_000.0, 5_000_000.0, 40_000.0, 30_000.0);
        let p = Pyramid::new(&tms, bbox, 5, 13).unwrap();
        assert_eq!((p.min_zoom(), p.max_zoom()), (5, 13));
        assert_eq!(p.level(13), tms.tile_range(bbox, 13).unwrap().as_ref());
        assert_closed(&p);
        assert_eq!(p.len(), p.levels().iter().map(TileRange::len).sum::<u64>());
    }

    #[test]
    fn the_default_zooms_run_from_the_native_resolution_to_one_tile() {
        let tms = mercator();
        let bbox = around(1_000_000.0, 5_000_000.0, 102_400.0, 102_400.0);
        // 10 m pixels: zoom 14's 9.55 m is the nearer in ratio (zoom 13's is 19.1 m).
        let (min, max) = Pyramid::default_zooms(&tms, bbox, 10.0).unwrap();
        assert_eq!(max, 14);
        let p = Pyramid::new(&tms, bbox, min, max).unwrap();
        assert_eq!(p.level(min).unwrap().len(), 1, "{p:?}");
        // One zoom finer than the top is more than one tile (else the top would be finer).
        assert!(p.level(min + 1).unwrap().len() > 1, "{p:?}");
        assert_closed(&p);
    }

    #[test]
    fn a_base_tile_barely_inside_the_box_keeps_its_parent() {
        let tms = mercator();
        // The box's west edge 7 µm west of x = 0, an edge at every zoom: more than the edge
        // tolerance (1e-9 of a tile) of a zoom-13 tile, less than that of a zoom-12 tile. So
        // zoom 13 takes the tile west of 0 and a range computed for zoom 12 alone does not
        // take its parent, which would leave that child with nothing to complete.
        let bbox = Bbox::new(-7e-6, 1000.0, 30_000.0, 20_000.0);
        let p = Pyramid::new(&tms, bbox, 9, 13).unwrap();
        let base = *p.level(13).unwrap();
        assert_eq!(base.min_x, 4095, "{base:?}");
        let alone = tms.tile_range(bbox, 12).unwrap().unwrap();
        assert_eq!(alone.min_x, 2048, "{alone:?}");
        assert_eq!(p.level(12).unwrap().min_x, 2047);
        assert!(p.contains(p.parent(Tile::new(13, 4095, base.min_y)).unwrap()));
        assert_closed(&p);
    }

    #[test]
    fn what_cannot_be_a_pyramid_is_named() {
        let tms = mercator();
        let bbox = around(0.0, 0.0, 1000.0, 1000.0);
        assert!(matches!(
            Pyramid::new(&tms, bbox, 9, 3),
            Err(PyramidError::Zooms { min: 9, max: 3 })
        ));
        let far = Bbox::new(3e7, 3e7, 3.1e7, 3.1e7);
        assert!(matches!(
            Pyramid::new(&tms, far, 0, 3),
            Err(PyramidError::Outside(_))
        ));
    }

    #[test]
    fn zoom_zero_holds_the_whole_world_in_one_tile() {
        let tms = mercator();
        let world = Bbox::new(-2e7, -2e7, 2e7, 2e7);
        let p = Pyramid::new(&tms, world, 0, 3).unwrap();
        assert_eq!(p.level(0).unwrap().len(), 1);
        assert_eq!(p.level(3).unwrap().len(), 64);
        assert_eq!(p.len(), 1 + 4 + 16 + 64);
        assert_eq!(p.children(Tile::new(0, 0, 0)).len(), 4);
        assert_closed(&p);
    }
}

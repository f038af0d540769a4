//! PMTiles v3 tile IDs: a tile's position along the Hilbert curves of zooms 0, 1, 2, … laid end
//! to end (spec §4.1), so that IDs at one zoom are contiguous and neighbours are near.

use super::ArchiveError;
use crate::tms::Tile;

/// The finest zoom whose IDs fit in 64 bits (the spec's reference code refuses z > 31).
pub const MAX_ZOOM: u8 = 31;

/// The first tile ID of zoom `z`: (4^z − 1) / 3, the count of tiles at zooms 0..z.
fn zoom_base(z: u8) -> u64 {
    ((1u128 << (2 * u32::from(z))) - 1) as u64 / 3
}

/// A Hilbert quadrant step: rotates / flips (x, y) within a square of side `n`.
fn rotate(n: u64, x: &mut u64, y: &mut u64, rx: u64, ry: u64) {
    if ry == 0 {
        if rx != 0 {
            *x = n - 1 - *x;
            *y = n - 1 - *y;
        }
        std::mem::swap(x, y);
    }
}

/// The tile ID of z/x/y (x, y from the top left, as XYZ tiles).
pub fn zxy_to_tileid(z: u8, x: u32, y: u32) -> Result<u64, ArchiveError> {
    let tile = Tile::new(z, x, y);
    if z > MAX_ZOOM {
        return Err(ArchiveError::ZoomTooDeep { tile });
    }
    let n = 1u64 << z;
    if u64::from(x) >= n || u64::from(y) >= n {
        return Err(ArchiveError::TileOutsideZoom { tile });
    }
    let (mut x, mut y) = (u64::from(x), u64::from(y));
    let mut d = 0u64;
    let mut s = n / 2;
    while s > 0 {
        let rx = u64::from(x & s > 0);
        let ry = u64::from(y & s > 0);
        d += s * s * ((3 * rx) ^ ry);
        rotate(n, &mut x, &mut y, rx, ry);
        s /= 2;
    }
    Ok(zoom_base(z) + d)
}

/// The z/x/y of a tile ID; `None` for IDs past zoom [`MAX_ZOOM`].
pub fn tileid_to_zxy(id: u64) -> Option<Tile> {
    // The zoom is the largest z with (4^z − 1) / 3 <= id, i.e. 4^z <= 3·id + 1.
    let v = 3 * u128::from(id) + 1;
    let z = ((127 - v.leading_zeros()) / 2) as u8;
    if z > MAX_ZOOM {
        return None;
    }
    let n = 1u64 << z;
    let mut t = id - zoom_base(z);
    let (mut x, mut y) = (0u64, 0u64);
    let mut s = 1u64;
    while s < n {
        let rx = 1 & (t / 2);
        let ry = 1 & (t ^ rx);
        rotate(s, &mut x, &mut y, rx, ry);
        x += s * rx;
        y += s * ry;
        t /= 4;
        s *= 2;
    }
    // x, y < 2^31 here.
    Some(Tile::new(z, x as u32, y as u32))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The table in spec §4.1.
    #[test]
    fn spec_vectors() {
        let table = [
            ((0, 0, 0), 0),
            ((1, 0, 0), 1),
            ((1, 0, 1), 2),
            ((1, 1, 1), 3),
            ((1, 1, 0), 4),
            ((2, 0, 0), 5),
            ((12, 3423, 1763), 19_078_479),
        ];
        for ((z, x, y), id) in table {
            assert_eq!(zxy_to_tileid(z, x, y).unwrap(), id, "{z}/{x}/{y}");
            assert_eq!(tileid_to_zxy(id), Some(Tile::new(z, x, y)), "{id}");
        }
    }

    #[test]
    fn each_zoom_fills_its_id_span() {
        for z in 0..=6u8 {
            let n = 1u32 << z;
            let mut ids: Vec<u64> = (0..n)
                .flat_map(|x| (0..n).map(move |y| (x, y)))
                .map(|(x, y)| zxy_to_tileid(z, x, y).unwrap())
                .collect();
            ids.sort_unstable();
            let base = zoom_base(z);
            assert_eq!(
                ids,
                (base..base + u64::from(n) * u64::from(n)).collect::<Vec<_>>()
            );
        }
    }

    #[test]
    fn extremes() {
        let last = (1u32 << 31) - 1;
        let id = zxy_to_tileid(31, last, 0).unwrap();
        assert_eq!(tileid_to_zxy(id), Some(Tile::new(31, last, 0)));
        let max_id = zoom_base(32) - 1;
        assert_eq!(tileid_to_zxy(max_id).map(|t| t.z), Some(31));
        assert_eq!(tileid_to_zxy(max_id + 1), None);
        assert!(matches!(
            zxy_to_tileid(32, 0, 0),
            Err(ArchiveError::ZoomTooDeep { .. })
        ));
        assert!(matches!(
            zxy_to_tileid(3, 8, 0),
            Err(ArchiveError::TileOutsideZoom { .. })
        ));
    }

    proptest::proptest! {
        #[test]
        fn round_trip(z in 0u8..=31, fx in 0.0f64..1.0, fy in 0.0f64..1.0) {
            let n = 1u64 << z;
            let (x, y) = ((fx * n as f64) as u32, (fy * n as f64) as u32);
            let id = zxy_to_tileid(z, x, y).unwrap();
            proptest::prop_assert_eq!(tileid_to_zxy(id), Some(Tile::new(z, x, y)));
        }

        #[test]
        fn ids_round_trip(id in 0u64..zoom_base(32)) {
            let t = tileid_to_zxy(id).unwrap();
            proptest::prop_assert_eq!(zxy_to_tileid(t.z, t.x, t.y).unwrap(), id);
        }
    }
}

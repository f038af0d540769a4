//! The tile matrix sets against the OGC definitions' numbers, and their geometry's edge cases.

use super::*;

fn close(a: f64, b: f64, tol: f64) -> bool {
    (a - b).abs() <= tol * b.abs().max(1.0)
}

/// The OGC definitions' numbers (`WebMercatorQuad.json`, `WorldCRS84Quad.json`).
#[test]
fn builtins_match_the_ogc_definitions() {
    let wm = TileMatrixSet::web_mercator_quad();
    assert_eq!(wm.max_zoom(), 24);
    let m0 = wm.matrix(0).unwrap();
    assert_eq!(
        m0.point_of_origin,
        [-20037508.342789244, 20037508.342789244]
    );
    assert_eq!(m0.cell_size, 156543.03392804097);
    assert!(close(m0.scale_denominator, 559082264.0287178, 1e-15));
    assert!(close(wm.resolution(2).unwrap(), 39135.75848201024, 1e-15));
    assert!(close(
        wm.scale_denominator(24).unwrap(),
        33.323899747652874,
        1e-12
    ));

    let geo = TileMatrixSet::world_crs84_quad();
    assert_eq!(geo.max_zoom(), 23);
    let g0 = geo.matrix(0).unwrap();
    assert_eq!((g0.matrix_width, g0.matrix_height), (2, 1));
    assert_eq!(g0.cell_size, 0.703125);
    assert!(close(g0.scale_denominator, 279541132.014358, 1e-12));
    assert!(close(
        geo.scale_denominator(3).unwrap(),
        34942641.5017948,
        1e-12
    ));
    assert!(wm.is_quadtree() && geo.is_quadtree());
    assert_eq!(wm.tile_size(7).unwrap(), (256, 256));
}

#[test]
fn tile_bounds() {
    let wm = TileMatrixSet::web_mercator_quad();
    let b = wm.bounds(Tile::new(0, 0, 0)).unwrap();
    let limit = web_mercator_max_latitude();
    assert!(close(limit, 85.0511287798066, 1e-13));
    assert!(close(b.min_x, -180.0, 1e-14) && close(b.max_x, 180.0, 1e-14));
    assert!(close(b.max_y, limit, 1e-14) && close(b.min_y, -limit, 1e-14));
    // 1/1/0 is the north-east quarter.
    let b = wm.bounds(Tile::new(1, 1, 0)).unwrap();
    assert!(close(b.min_x, 0.0, 1e-12) && close(b.min_y, 0.0, 1e-12));
    let geo = TileMatrixSet::world_crs84_quad();
    assert_eq!(
        geo.bounds(Tile::new(1, 3, 1)).unwrap(),
        Bbox::new(90.0, -90.0, 180.0, 0.0)
    );
    assert!(matches!(
        geo.xy_bounds(Tile::new(0, 2, 0)),
        Err(TmsError::TileOutOfRange { .. })
    ));
    assert!(matches!(
        wm.bounds(Tile::new(25, 0, 0)),
        Err(TmsError::ZoomOutOfRange { .. })
    ));
}

#[test]
fn parents_and_children() {
    let wm = TileMatrixSet::web_mercator_quad();
    let t = Tile::new(5, 17, 9);
    let kids = wm.children(t).unwrap();
    assert_eq!(kids[3], Tile::new(6, 35, 19));
    assert!(kids.iter().all(|&k| wm.parent(k) == Some(t)));
    assert_eq!(wm.parent(Tile::new(0, 0, 0)), None);
    assert_eq!(wm.children(Tile::new(24, 0, 0)), None);
    let geo = TileMatrixSet::world_crs84_quad();
    assert_eq!(geo.parent(Tile::new(1, 3, 1)), Some(Tile::new(0, 1, 0)));
    // Children cover their parent exactly.
    let p = geo.xy_bounds(Tile::new(3, 5, 2)).unwrap();
    let c = geo.children(Tile::new(3, 5, 2)).unwrap();
    let (first, last) = (geo.xy_bounds(c[0]).unwrap(), geo.xy_bounds(c[3]).unwrap());
    assert_eq!(
        (first.min_x, first.max_y, last.max_x, last.min_y),
        (p.min_x, p.max_y, p.max_x, p.min_y)
    );
}

#[test]
fn ranges_across_the_antimeridian_and_past_the_latitude_limit() {
    let wm = TileMatrixSet::web_mercator_quad();
    let r = wm
        .tile_ranges_wgs84(Bbox::new(170.0, -10.0, -170.0, 10.0), 3)
        .unwrap();
    assert_eq!(r.len(), 2);
    assert_eq!(
        (r[0].min_x, r[0].max_x, r[1].min_x, r[1].max_x),
        (0, 0, 7, 7)
    );
    let r = wm
        .tile_ranges_wgs84(Bbox::new(-10.0, 80.0, 10.0, 90.0), 2)
        .unwrap();
    assert_eq!(
        r,
        vec![TileRange {
            z: 2,
            min_x: 1,
            min_y: 0,
            max_x: 2,
            max_y: 0
        }]
    );
    assert!(
        wm.tile_ranges_wgs84(Bbox::new(0.0, 86.0, 1.0, 89.0), 4)
            .unwrap()
            .is_empty()
    );
    let whole = wm
        .tile_ranges_wgs84(Bbox::new(-180.0, -90.0, 180.0, 90.0), 4)
        .unwrap();
    assert_eq!(whole[0].len(), 256);
    let geo = TileMatrixSet::world_crs84_quad();
    let whole = geo
        .tile_ranges_wgs84(Bbox::new(-180.0, -90.0, 180.0, 90.0), 0)
        .unwrap();
    assert_eq!(whole[0].len(), 2);
    assert!(matches!(
        geo.tile_range(Bbox::new(f64::NAN, 0.0, 1.0, 1.0), 0),
        Err(TmsError::NanCoordinate)
    ));
    assert_eq!(
        geo.tile_range(Bbox::new(200.0, 0.0, 210.0, 1.0), 0)
            .unwrap(),
        None
    );
}

proptest::proptest! {
    /// A tile's own bounds cover that tile and no neighbour, in both sets and both CRSs.
    #[test]
    fn a_tiles_bounds_cover_exactly_it(z in 0u8..=22, fx in 0.0f64..1.0, fy in 0.0f64..1.0) {
        for tms in [TileMatrixSet::web_mercator_quad(), TileMatrixSet::world_crs84_quad()] {
            let m = tms.matrix(z).unwrap();
            let tile = Tile::new(z, (fx * f64::from(m.matrix_width)) as u32, (fy * f64::from(m.matrix_height)) as u32);
            let one = TileRange { z, min_x: tile.x, min_y: tile.y, max_x: tile.x, max_y: tile.y };
            proptest::prop_assert_eq!(tms.tile_range(tms.xy_bounds(tile).unwrap(), z).unwrap(), Some(one));
            proptest::prop_assert_eq!(tms.tile_ranges_wgs84(tms.bounds(tile).unwrap(), z).unwrap(), vec![one]);
        }
    }
}

#[test]
fn zoom_for_resolution_follows_gdal() {
    let wm = TileMatrixSet::web_mercator_quad();
    let r = |z| wm.resolution(z).unwrap();
    assert_eq!(wm.zoom_for_resolution(r(10), ZoomStrategy::Auto), 10);
    assert_eq!(
        wm.zoom_for_resolution(r(10) * (1.0 + 1e-9), ZoomStrategy::Lower),
        10
    );
    // Between zooms 10 and 11: the geometric mean is the tie point.
    let mid = (r(10) * r(11)).sqrt();
    assert_eq!(wm.zoom_for_resolution(mid * 1.01, ZoomStrategy::Auto), 10);
    assert_eq!(wm.zoom_for_resolution(mid * 0.99, ZoomStrategy::Auto), 11);
    assert_eq!(wm.zoom_for_resolution(mid, ZoomStrategy::Lower), 10);
    assert_eq!(wm.zoom_for_resolution(mid, ZoomStrategy::Upper), 11);
    assert_eq!(wm.zoom_for_resolution(1e9, ZoomStrategy::Upper), 0);
    assert_eq!(wm.zoom_for_resolution(1e-6, ZoomStrategy::Auto), 24);
    // 10 m Sentinel-2 in Web Mercator: zoom 14 (9.55 m) by AUTO, as GDAL's COG driver picks.
    assert_eq!(wm.zoom_for_resolution(10.0, ZoomStrategy::Auto), 14);
    assert_eq!(wm.zoom_for_resolution(10.0, ZoomStrategy::Lower), 13);
}

#[test]
fn json_documents() {
    // A bottom-left, latitude-first set in EPSG:4326 with two matrices.
    let doc = r#"{
        "id": "Custom", "crs": {"uri": "http://www.opengis.net/def/crs/EPSG/0/4326"},
        "orderedAxes": ["Lat", "Lon"],
        "tileMatrices": [
          {"id": "a", "scaleDenominator": 1e8, "cellSize": 1.0, "cornerOfOrigin": "bottomLeft",
           "pointOfOrigin": [-90, -180], "tileWidth": 90, "tileHeight": 90,
           "matrixWidth": 4, "matrixHeight": 2},
          {"id": "b", "scaleDenominator": 5e7, "cellSize": 0.5, "cornerOfOrigin": "bottomLeft",
           "pointOfOrigin": [-90, -180], "tileWidth": 90, "tileHeight": 90,
           "matrixWidth": 8, "matrixHeight": 4}
        ]}"#;
    let tms = TileMatrixSet::from_json(doc).unwrap();
    assert_eq!(
        (tms.id(), tms.crs(), tms.max_zoom()),
        ("Custom", &Crs::Crs84, 1)
    );
    assert!(tms.is_quadtree());
    assert_eq!(tms.matrix(0).unwrap().point_of_origin, [-180.0, -90.0]);
    // Row 0 is the bottom row.
    assert_eq!(
        tms.bounds(Tile::new(0, 1, 0)).unwrap(),
        Bbox::new(-90.0, -90.0, 0.0, 0.0)
    );
    let r = tms
        .tile_ranges_wgs84(Bbox::new(-10.0, 10.0, 10.0, 20.0), 1)
        .unwrap();
    assert_eq!(
        r,
        vec![TileRange {
            z: 1,
            min_x: 3,
            min_y: 2,
            max_x: 4,
            max_y: 2
        }]
    );

    let variable = doc.replace(
        r#""matrixWidth": 8,"#,
        r#""matrixWidth": 8, "variableMatrixWidths": [],"#,
    );
    assert!(matches!(
        TileMatrixSet::from_json(&variable),
        Err(TmsError::Invalid { .. })
    ));
    assert!(matches!(
        TileMatrixSet::from_json("{}"),
        Err(TmsError::Json(_))
    ));
    let unknown = doc.replace("EPSG/0/4326", "EPSG/0/32631");
    let tms = TileMatrixSet::from_json(&unknown).unwrap();
    assert!(tms.xy_bounds(Tile::new(0, 0, 0)).is_ok());
    assert!(matches!(
        tms.bounds(Tile::new(0, 0, 0)),
        Err(TmsError::UnsupportedCrs { .. })
    ));
}

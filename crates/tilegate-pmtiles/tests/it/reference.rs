//! Cross-checks against the reference implementations, through `reference.py` in the venv that
//! `.ci/tiles-venv` makes: Python `pmtiles` 3.8.1 reads an archive written here (every tile by
//! traversal, a sample by lookup, absent tiles as `None`), and `morecantile` 7.1.0 gives tile
//! bounds, matrices, zooms for resolutions and the tiles that boxes cover, for both quad sets.
//!
//! The venv is `.ci-cache/tiles-venv` at the workspace root, or `TILEGATE_TILES_PYTHON`. Without
//! it the test fails in CI (`CI=true`) and says it skipped elsewhere.

use std::path::PathBuf;
use std::process::Command;

use serde_json::{Value, json};
use tilegate_pmtiles::archive::zxy_to_tileid;
use tilegate_pmtiles::tms::{Crs, ZoomStrategy};
use tilegate_pmtiles::{
    ArchiveBuilder, ArchiveOptions, Bbox, ContentKey, Tile, TileMatrixSet, TileType,
};

/// The archive's tile rule (the same as `reference.py`'s `content`); `None` for a tile left out.
fn content(t: Tile) -> Option<Vec<u8>> {
    let (z, x, y) = (t.z, t.x, t.y);
    if z == 8 && (x * 3 + y) % 11 == 5 {
        return None;
    }
    if z == 8 && x < 16 && y < 16 {
        return Some(b"run".to_vec());
    }
    if (x + y) % 7 == 0 {
        return Some(b"empty".to_vec());
    }
    Some(
        format!("{z}/{x}/{y}|")
            .repeat((x as usize * 31 + y as usize * 17 + z as usize) % 40 + 1)
            .into_bytes(),
    )
}

const ARCHIVE_MAX_ZOOM: u8 = 8;

fn python() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("TILEGATE_TILES_PYTHON") {
        return Some(p.into());
    }
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
    let p = root.join(".ci-cache/tiles-venv/bin/python");
    let ready = Command::new(&p)
        .args(["-c", "import pmtiles, morecantile"])
        .output()
        .is_ok_and(|o| o.status.success());
    if ready {
        return Some(p);
    }
    let why = "no venv with pmtiles and morecantile at .ci-cache/tiles-venv (make it with `bash .ci/tiles-venv`)";
    if std::env::var("CI").is_ok_and(|v| v == "true") {
        panic!("{why}");
    }
    eprintln!("SKIPPED the pmtiles/morecantile cross-checks: {why}");
    None
}

/// A small deterministic sequence (an LCG) for sampling tiles.
struct Sample(u64);

impl Sample {
    fn below(&mut self, n: u32) -> u32 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        ((self.0 >> 33) % u64::from(n)) as u32
    }
}

fn close(a: f64, b: f64, tol: f64) -> bool {
    (a - b).abs() <= tol * b.abs().max(1.0)
}

fn f(v: &Value) -> f64 {
    v.as_f64().expect("a number")
}

#[test]
fn reference_implementations_agree() {
    let Some(python) = python() else { return };
    let dir = tempfile::tempdir().unwrap();

    // The archive, planned from keys and written blob by blob, as the pipeline will.
    let mut tiles = Vec::new();
    for z in 0..=ARCHIVE_MAX_ZOOM {
        for x in 0..1u32 << z {
            for y in 0..1u32 << z {
                let t = Tile::new(z, x, y);
                if let Some(bytes) = content(t) {
                    tiles.push((t, bytes));
                }
            }
        }
    }
    let mut options = ArchiveOptions::new(TileType::Png);
    options.metadata.insert("name".into(), "reference".into());
    options
        .metadata
        .insert("attribution".into(), "tilegate tests".into());
    let mut builder = ArchiveBuilder::new(options);
    for (t, bytes) in tiles.iter().rev() {
        builder.add(*t, ContentKey::of(bytes)).unwrap();
    }
    let layout = builder.finish().unwrap();
    assert!(
        layout.header.leaf_directories_length > 0,
        "the archive should need leaves"
    );
    let path = dir.path().join("reference.pmtiles");
    let mut file = std::io::BufWriter::new(std::fs::File::create(&path).unwrap());
    layout
        .write_to(&mut file, |blob| Ok(content(blob.first_tile).unwrap()))
        .unwrap();
    drop(file);

    let mut sample = Sample(49);
    let mut gets: Vec<[u32; 3]> = tiles
        .iter()
        .step_by(97)
        .map(|(t, _)| [t.z.into(), t.x, t.y])
        .collect();
    // Left out at zoom 8, and zooms past the archive's.
    gets.extend((0..200).map(|i| [8, i, (5 + 11 * 200 - 3 * i) % 11 + 11 * (i % 20)]));
    gets.extend([[9, 0, 0], [9, 511, 511], [12, 2134, 1443], [14, 0, 16383]]);

    // Tile matrix set questions.
    let sets = [
        TileMatrixSet::web_mercator_quad(),
        TileMatrixSet::world_crs84_quad(),
    ];
    let mut sampled: Vec<Vec<Tile>> = Vec::new();
    let mut resolutions: Vec<Vec<f64>> = Vec::new();
    for tms in &sets {
        let mut ts = Vec::new();
        for z in 0..=14u8 {
            let m = tms.matrix(z).unwrap();
            ts.push(Tile::new(z, 0, 0));
            ts.push(Tile::new(z, m.matrix_width - 1, m.matrix_height - 1));
            for _ in 0..10 {
                ts.push(Tile::new(
                    z,
                    sample.below(m.matrix_width),
                    sample.below(m.matrix_height),
                ));
            }
        }
        sampled.push(ts);
        let mut rs = vec![1e9, 1e-9];
        for z in 0..=tms.max_zoom() {
            let r = tms.resolution(z).unwrap();
            rs.extend([r, r * 0.9, r * 1.3, r * 1.41, r * 1.42, r * 1.9]);
        }
        resolutions.push(rs);
    }
    let boxes = [
        Bbox::new(5.95, 45.81, 10.49, 47.81),    // Switzerland
        Bbox::new(179.5, -17.0, -179.7, -16.5),  // Fiji, across the antimeridian
        Bbox::new(-30.0, 84.0, -29.0, 89.9),     // past Web Mercator's latitude limit
        Bbox::new(-70.55, -33.6, -70.45, -33.3), // Santiago
    ];
    let mut box_cases = Vec::new();
    for tms in &sets {
        for b in boxes {
            for z in 0..=14u8 {
                let ranges = tms.tile_ranges_wgs84(b, z).unwrap();
                box_cases.push((tms.id().to_owned(), b, z, ranges));
            }
        }
    }

    // Tile IDs at every zoom the spec allows, a few tiles each.
    let mut tileids = Vec::new();
    for z in 0..=31u8 {
        let n = if z == 31 { u32::MAX / 2 + 1 } else { 1u32 << z };
        for (x, y) in [(0, 0), (n - 1, n - 1), (n - 1, 0)]
            .into_iter()
            .chain((0..20).map(|_| (sample.below(n), sample.below(n))))
        {
            tileids.push(json!([z, x, y, zxy_to_tileid(z, x, y).unwrap()]));
        }
    }

    let job = json!({
        "tileids": tileids,
        "archive": {"path": path, "max_zoom": ARCHIVE_MAX_ZOOM, "gets": gets},
        "tms": {
            "tiles": {
                sets[0].id(): sampled[0].iter().map(|t| [u32::from(t.z), t.x, t.y]).collect::<Vec<_>>(),
                sets[1].id(): sampled[1].iter().map(|t| [u32::from(t.z), t.x, t.y]).collect::<Vec<_>>(),
            },
            "resolutions": {sets[0].id(): resolutions[0], sets[1].id(): resolutions[1]},
            "boxes": box_cases.iter().map(|(id, b, z, ranges)| json!({
                "tms": id, "bbox": [b.min_x, b.min_y, b.max_x, b.max_y], "z": z,
                "ranges": ranges.iter().map(|r| [r.min_x, r.min_y, r.max_x, r.max_y]).collect::<Vec<_>>(),
            })).collect::<Vec<_>>(),
        },
    });
    let job_path = dir.path().join("job.json");
    let result_path = dir.path().join("result.json");
    std::fs::write(&job_path, job.to_string()).unwrap();
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/it/reference.py");
    let out = Command::new(&python)
        .arg(&script)
        .arg(&job_path)
        .arg(&result_path)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "reference.py failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let result: Value = serde_json::from_slice(&std::fs::read(&result_path).unwrap()).unwrap();
    assert_eq!(
        result["versions"],
        json!({"pmtiles": "3.8.1", "morecantile": "7.1.0"})
    );

    // pmtiles: the header it decodes, every tile by traversal, the sample by lookup.
    let a = &result["archive"];
    let h = &layout.header;
    let ph = &a["header"];
    for (field, ours) in [
        ("root_offset", h.root_offset),
        ("root_length", h.root_length),
        ("metadata_offset", h.metadata_offset),
        ("metadata_length", h.metadata_length),
        ("leaf_directory_offset", h.leaf_directories_offset),
        ("leaf_directory_length", h.leaf_directories_length),
        ("tile_data_offset", h.tile_data_offset),
        ("tile_data_length", h.tile_data_length),
        ("addressed_tiles_count", h.addressed_tiles),
        ("tile_entries_count", h.tile_entries),
        ("tile_contents_count", h.tile_contents),
        ("internal_compression", 2),
        ("tile_compression", 1),
        ("tile_type", 2),
        ("min_zoom", 0),
        ("max_zoom", u64::from(ARCHIVE_MAX_ZOOM)),
        ("center_zoom", 0),
    ] {
        assert_eq!(ph[field].as_u64(), Some(ours), "header field {field}");
    }
    assert_eq!(ph["clustered"], json!(true));
    assert_eq!(
        ph["min_lon_e7"].as_i64(),
        Some(i64::from(h.min_position.lon_e7))
    );
    assert_eq!(
        ph["max_lat_e7"].as_i64(),
        Some(i64::from(h.max_position.lat_e7))
    );
    assert_eq!(
        a["metadata"],
        json!({"name": "reference", "attribution": "tilegate tests"})
    );
    assert_eq!(result["tileids_wrong"], json!([]));
    let directories = a["directories"].as_u64().unwrap();
    assert_eq!(
        a["directories_same"].as_u64(),
        Some(directories),
        "directories re-encoded by pmtiles differ"
    );
    assert_eq!(directories, 1 + reader_leaves(&layout));
    assert_eq!(a["traversed_wrong"], json!([]));
    assert_eq!(a["traversed"].as_u64(), Some(tiles.len() as u64));
    assert_eq!(a["expected"].as_u64(), Some(tiles.len() as u64));
    assert_eq!(h.addressed_tiles, tiles.len() as u64);
    assert_eq!(a["gets_wrong"], json!([]));
    let (present, absent) = (
        a["gets_present"].as_u64().unwrap(),
        a["gets_absent"].as_u64().unwrap(),
    );
    assert_eq!(present + absent, gets.len() as u64);
    assert!(
        present > 500 && absent > 200,
        "{present} present, {absent} absent"
    );

    // morecantile: matrices, the OGC JSON documents, bounds, zooms for resolutions.
    let mut compared = 0usize;
    for (i, tms) in sets.iter().enumerate() {
        let r = &result["tms"][tms.id()];
        let theirs = r["matrices"].as_array().unwrap();
        assert_eq!(theirs.len(), tms.matrices().len(), "{}", tms.id());
        let parsed = TileMatrixSet::from_json(r["json"].as_str().unwrap()).unwrap();
        assert_eq!(parsed.id(), tms.id());
        assert_eq!(
            parsed.crs(),
            if i == 0 {
                &Crs::WebMercator
            } else {
                &Crs::Crs84
            }
        );
        for ((ours, theirs), json) in tms.matrices().iter().zip(theirs).zip(parsed.matrices()) {
            assert!(
                close(ours.cell_size, f(&theirs["cellSize"]), 1e-12),
                "{} {}",
                tms.id(),
                ours.id
            );
            assert!(
                close(
                    ours.scale_denominator,
                    f(&theirs["scaleDenominator"]),
                    1e-12
                ),
                "{} {}",
                tms.id(),
                ours.id
            );
            assert_eq!(
                (ours.matrix_width, ours.matrix_height, ours.tile_width),
                (
                    theirs["matrixWidth"].as_u64().unwrap() as u32,
                    theirs["matrixHeight"].as_u64().unwrap() as u32,
                    theirs["tileWidth"].as_u64().unwrap() as u32
                )
            );
            assert!(
                close(ours.cell_size, json.cell_size, 1e-12)
                    && close(ours.scale_denominator, json.scale_denominator, 1e-12)
            );
            assert_eq!(
                (ours.id.as_str(), ours.corner_of_origin, ours.matrix_width),
                (json.id.as_str(), json.corner_of_origin, json.matrix_width)
            );
            assert!(
                close(ours.point_of_origin[0], json.point_of_origin[0], 1e-15)
                    && close(ours.point_of_origin[1], json.point_of_origin[1], 1e-15)
            );
        }
        for (k, &t) in sampled[i].iter().enumerate() {
            let xy = tms.xy_bounds(t).unwrap();
            let geo = tms.bounds(t).unwrap();
            let (txy, tgeo) = (&r["xy_bounds"][k], &r["bounds"][k]);
            for (j, v) in [xy.min_x, xy.min_y, xy.max_x, xy.max_y]
                .into_iter()
                .enumerate()
            {
                assert!(
                    close(v, f(&txy[j]), 1e-12),
                    "{} {t} xy {j}: {v} vs {}",
                    tms.id(),
                    txy[j]
                );
            }
            for (j, v) in [geo.min_x, geo.min_y, geo.max_x, geo.max_y]
                .into_iter()
                .enumerate()
            {
                assert!(
                    (v - f(&tgeo[j])).abs() <= 1e-9,
                    "{} {t} lnglat {j}: {v} vs {}",
                    tms.id(),
                    tgeo[j]
                );
            }
            compared += 1;
        }
        for (strategy, name) in [
            (ZoomStrategy::Auto, "auto"),
            (ZoomStrategy::Lower, "lower"),
            (ZoomStrategy::Upper, "upper"),
        ] {
            let ours: Vec<u64> = resolutions[i]
                .iter()
                .map(|&res| u64::from(tms.zoom_for_resolution(res, strategy)))
                .collect();
            let theirs: Vec<u64> = r["zoom_for_res"][name]
                .as_array()
                .unwrap()
                .iter()
                .map(|v| v.as_u64().unwrap())
                .collect();
            assert_eq!(ours, theirs, "{} zoom_for_res {name}", tms.id());
        }
    }

    // morecantile: the tiles each box covers are exactly our ranges' tiles.
    let mut covered = 0u64;
    for ((id, b, z, ranges), theirs) in box_cases
        .iter()
        .zip(result["tms"]["boxes"].as_array().unwrap())
    {
        let ours: u64 = ranges.iter().map(|r| r.len()).sum();
        assert_eq!(theirs["outside"], json!([]), "{id} {b:?} z{z}");
        // morecantile may yield a tile twice (both halves of an antimeridian box at zoom 0).
        assert_eq!(
            theirs["distinct"].as_u64(),
            Some(ours),
            "{id} {b:?} z{z}: {ranges:?}"
        );
        covered += ours;
    }
    eprintln!(
        "pmtiles agreed on {} tile IDs and re-encoded {directories} directories byte for byte; read {} tiles ({} entries, {} contents, {} leaf bytes) and {present} + {absent} lookups; \
         morecantile agreed on {compared} tiles' bounds, {} zoom choices, {} box covers ({covered} tiles)",
        tileids.len(),
        tiles.len(),
        h.tile_entries,
        h.tile_contents,
        h.leaf_directories_length,
        3 * (resolutions[0].len() + resolutions[1].len()),
        box_cases.len(),
    );
}

/// How many leaf directories the archive's root points to.
fn reader_leaves(layout: &tilegate_pmtiles::ArchiveLayout) -> u64 {
    let reader = tilegate_pmtiles::ArchiveReader::new(&layout.prefix).unwrap();
    reader
        .root_directory()
        .unwrap()
        .iter()
        .filter(|e| e.run_length == 0)
        .count() as u64
}

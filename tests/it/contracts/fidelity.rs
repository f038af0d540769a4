//! Real rasters, faithfully: a corpus made with GDAL inside the test (`tests/fixtures/
//! fidelity.py make` — RGB JPEG in YCbCr, RGBA, an internal mask, UInt16 with descriptions,
//! scale/offset and units, a paletted land cover, strips, nodata 0/255/NaN, rotated, south-up,
//! no CRS, ESRI WKT, BigTIFF, a VRT, GCPs only) runs end to end through `tilegate run`, and every tile and the
//! scene are checked property by property against `gdal_translate -of COG` of the same extent:
//! pixels, mask, colour interpretation, alpha, descriptions, scale/offset, units, palette,
//! nodata, geotransform, CRS, `AREA_OR_POINT`. Overviews of the paletted raster hold only
//! classes that occur in it; overviews of the masked raster take nothing from masked-out
//! pixels. Every output passes GDAL's COG validator and rio-cogeo's `cog_validate`; a rerun
//! writes nothing. A GCP-only raster is refused when planning, with a named reason.

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;
use tilegate_tests::{snapshot, tempdir, tg, tg_json, validate_cogs};

const WINDOW: &str = "256";

fn fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/fidelity.py")
}

/// Run the fixture under Debian's Python (with GDAL's bindings); its stdout.
fn py(args: &[&str]) -> String {
    let out = Command::new("/usr/bin/python3")
        .arg(fixture())
        .args(args)
        .output()
        .expect("run /usr/bin/python3 (python3-gdal)");
    assert!(
        out.status.success(),
        "fidelity.py {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// The corpus, made in `dir`: (case, path).
fn corpus(dir: &Path) -> Vec<(String, PathBuf)> {
    py(&["make", dir.to_str().unwrap()])
        .lines()
        .map(|l| {
            let (name, path) = l.split_once(' ').unwrap();
            (name.to_owned(), PathBuf::from(path))
        })
        .collect()
}

/// rio-cogeo's `cog_validate` over `paths`: every failure with its errors. The interpreter is
/// the README's test command's (`TILEGATE_RIO_PYTHON`); without it outside CI the check is
/// skipped, saying so; in CI it must be there.
fn rio_validate(paths: &[PathBuf]) -> Result<(), String> {
    let Some(python) = std::env::var_os("TILEGATE_RIO_PYTHON") else {
        assert!(
            std::env::var_os("CI").is_none(),
            "no TILEGATE_RIO_PYTHON in CI: run through .ci/test, which installs rio-cogeo"
        );
        println!(
            "SKIPPED rio-cogeo's cog_validate: no TILEGATE_RIO_PYTHON (bash .ci/test sets it)"
        );
        return Ok(());
    };
    const SCRIPT: &str = r#"
import sys
from rio_cogeo.cogeo import cog_validate
bad = 0
for path in sys.argv[1:]:
    valid, errors, warnings = cog_validate(path, quiet=True)
    if not valid or errors:
        bad += 1
        print(path + ": " + "; ".join(errors))
print("rio-validated", bad)
"#;
    let out = Command::new(python)
        .args(["-c", SCRIPT])
        .args(paths)
        .output()
        .map_err(|e| format!("run rio-cogeo: {e}"))?;
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    if out.status.success() && text.trim_end().ends_with("rio-validated 0") {
        Ok(())
    } else {
        Err(format!("{text}{}", String::from_utf8_lossy(&out.stderr)))
    }
}

/// Everything a job wrote: its tiles and its scene.
fn outputs(data: &Path, job: &str) -> (PathBuf, PathBuf) {
    let objects = data.join("objects/tilegate");
    (
        objects.join("tiles").join(job),
        objects.join("scenes").join(format!("{job}.tif")),
    )
}

/// Run `source` end to end with `extra` recipe flags and check every output against GDAL's.
fn check_case(name: &str, source: &Path, extra: &[&str], bands: Option<&str>) -> Vec<String> {
    let tmp = tempdir();
    let data = tmp.path();
    let mut args = vec!["run", source.to_str().unwrap(), "--window", WINDOW];
    args.extend_from_slice(extra);
    let run = tg_json(data, &args);
    assert_eq!(run["complete"], true, "{name}: {run}");
    assert_eq!(run["scene"]["outcome"], "written", "{name}: {run}");
    let job = run["job_id"].as_str().unwrap().to_owned();
    let (tiles, scene) = outputs(data, &job);
    let mut problems: Vec<String> = py(&[
        "check-job",
        source.to_str().unwrap(),
        tiles.to_str().unwrap(),
        scene.to_str().unwrap(),
        WINDOW,
        bands.unwrap_or(""),
    ])
    .lines()
    .filter(|l| *l != "ok")
    .map(|l| format!("{name}: {l}"))
    .collect();
    let mut all: Vec<PathBuf> = snapshot(&tiles).into_keys().collect();
    all.push(scene.clone());
    if let Err(e) = validate_cogs(&all) {
        problems.push(format!("{name}: GDAL's validator: {e}"));
    }
    if let Err(e) = rio_validate(&all) {
        problems.push(format!("{name}: rio-cogeo: {e}"));
    }
    // A rerun writes nothing and changes no LastModified.
    let before = (
        snapshot(&tiles),
        std::fs::metadata(&scene).unwrap().modified().unwrap(),
    );
    let again = tg_json(data, &args);
    if again["tiles_written"] != 0 || again["scene"]["outcome"] != "already_done" {
        problems.push(format!("{name}: the rerun wrote something: {again}"));
    }
    let after = (
        snapshot(&tiles),
        std::fs::metadata(&scene).unwrap().modified().unwrap(),
    );
    if before != after {
        problems.push(format!("{name}: the rerun changed a tile or the scene"));
    }
    problems
}

#[test]
fn heavy_fidelity_corpus_matches_gdal_translate() {
    let tmp = tempdir();
    let cases = corpus(tmp.path());
    assert!(cases.len() >= 15, "{cases:?}");
    let mut problems = Vec::new();
    let mut checked = 0;
    for (name, path) in &cases {
        if name == "gcps" {
            continue;
        }
        problems.extend(check_case(name, path, &[], None));
        checked += 1;
    }
    // Band selection keeps the kept bands' meaning (colour interpretation follows the band).
    let by_name = |n: &str| &cases.iter().find(|(c, _)| c == n).unwrap().1;
    problems.extend(check_case(
        "rgb-jpeg-ycbcr --bands 3,2,1",
        by_name("rgb-jpeg-ycbcr"),
        &["--bands", "3,2,1"],
        Some("3,2,1"),
    ));
    // A selected alpha stays alpha.
    problems.extend(check_case(
        "rgba --bands 1,4",
        by_name("rgba"),
        &["--bands", "1,4"],
        Some("1,4"),
    ));
    println!("fidelity: {checked} rasters and 2 band selections checked");
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// A raster placed only by ground control points cannot be cut into tiles that carry its
/// placement: the plan refuses it with a named reason and plans nothing.
#[test]
fn a_gcp_only_raster_is_refused_when_planning() {
    let tmp = tempdir();
    let cases = corpus(tmp.path());
    let (_, gcps) = cases.iter().find(|(c, _)| c == "gcps").unwrap();
    let data = tmp.path().join("data");
    let out = tg(&data, &["plan", gcps.to_str().unwrap()], &[]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains("error[unsupported-georeferencing]"),
        "{stderr}"
    );
    assert!(stderr.contains("ground control points"), "{stderr}");
    let rt = tokio::runtime::Runtime::new().unwrap();
    let b = tilegate_embedded::open_data_dir(&data, 3).unwrap();
    assert!(rt.block_on(b.jobs.list_jobs(10)).unwrap().is_empty());
    assert_eq!(rt.block_on(b.queue.depth()).unwrap().visible, 0);
}

/// NDVI of a 4-band reflectance raster: one Float32 band with its nodata and a description.
#[test]
fn ndvi_tiles_say_what_they_are() {
    use gdal::Metadata as _;
    let tmp = tempdir();
    let cases = corpus(tmp.path());
    let (_, src) = cases.iter().find(|(c, _)| c == "u16-bands").unwrap();
    let data = tmp.path().join("data");
    let run: Value = tg_json(
        &data,
        &[
            "run",
            src.to_str().unwrap(),
            "--window",
            WINDOW,
            "--recipe",
            "ndvi",
            "--red",
            "3",
            "--nir",
            "4",
        ],
    );
    assert_eq!(run["scene"]["outcome"], "written", "{run}");
    let (tiles, scene) = outputs(&data, run["job_id"].as_str().unwrap());
    for path in [tiles.join("0001_0001.tif"), scene] {
        let ds = gdal::Dataset::open(&path).unwrap();
        assert_eq!(ds.raster_count(), 1);
        let b = ds.rasterband(1).unwrap();
        assert_eq!(b.band_type().name(), "Float32", "{}", path.display());
        assert_eq!(b.no_data_value(), Some(tilegate_cog::NDVI_NODATA));
        assert_eq!(b.description().unwrap(), "NDVI", "{}", path.display());
        assert_eq!(
            ds.metadata_item("AREA_OR_POINT", "").as_deref(),
            Some("Point")
        );
    }
}

/// The native tile writer's fast path can never silently differ: over every raster of the
/// corpus (and band selections of the RGB and RGBA ones), each window's native tile is GDAL's
/// COG driver's byte for byte — or the writer declined and GDAL wrote it.
#[test]
fn native_tiles_equal_gdals_over_the_corpus() {
    use tilegate_core::recipe::{Compression, Operation, Recipe};
    let tmp = tempdir();
    let mut compared = 0;
    for (name, path) in corpus(tmp.path()) {
        if name == "gcps" {
            continue;
        }
        let p = path.to_str().unwrap();
        let meta = tilegate_cog::probe(p).unwrap();
        let mut selections = vec![None];
        if name.starts_with("rgb") {
            selections.push(Some(vec![3, 2, 1]));
        }
        if name == "rgba" {
            selections.push(Some(vec![4, 1]));
        }
        for bands in selections {
            let recipe = Recipe {
                operation: Operation::Copy { bands },
                compression: Compression::Deflate,
                window: 256,
            };
            let grid = tilegate_core::Grid::new(meta.width, meta.height, 256).unwrap();
            for w in grid.windows() {
                let req = tilegate_cog::EncodeRequest {
                    path: p.to_owned(),
                    cache_key: "corpus".to_owned(),
                    scene: meta.clone(),
                    recipe: recipe.clone(),
                    rect: grid.rect(w).unwrap(),
                };
                let native = tilegate_cog::encode_window(&req).unwrap();
                let gdal = tilegate_cog::encode_window_with_gdal(&req).unwrap();
                assert!(
                    native == gdal,
                    "{name} {:?} window {w}: native tile differs from GDAL's ({} vs {} bytes)",
                    recipe.operation,
                    native.len(),
                    gdal.len()
                );
                compared += 1;
            }
        }
    }
    assert!(compared >= 12 * 9, "{compared}");
}

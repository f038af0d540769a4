//! The recipes and sources beyond `copy`: `warp` against a whole-scene `gdalwarp`, `expr`
//! against NumPy, a recipe of one's own (the example `tilegate-median` binary) under
//! duplicates and a killed worker, HTTP(S) and STAC Item sources, and batches.

use gdal::Dataset;
use std::path::{Path, PathBuf};
use std::process::Command;
use tilegate_tests::*;

/// Run a command with the system Python (python3-gdal and NumPy come from apt).
fn python(script: &str, args: &[&str]) -> String {
    let out = Command::new("/usr/bin/python3")
        .arg("-c")
        .arg(script)
        .args(args)
        .output()
        .expect("run python3");
    assert!(
        out.status.success(),
        "python failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

fn scene_of(data: &Path, job: &str) -> PathBuf {
    data.join("objects")
        .join(tilegate_core::Prefix::DEFAULT)
        .join("scenes")
        .join(format!("{job}.tif"))
}

fn run_json(bin: &Path, data: &Path, args: &[&str]) -> serde_json::Value {
    let out = Command::new(bin)
        .arg("--data")
        .arg(data)
        .arg("--json")
        .args(args)
        .output()
        .expect("run");
    json_of(args, &out)
}

fn gdalwarp(args: &[&str]) {
    let out = Command::new("gdalwarp")
        .args(["-q", "-overwrite"])
        .args(args)
        .output()
        .expect("run gdalwarp");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Band 1 as f64, and the validity of each pixel (the mask, or the alpha band `alpha`).
fn band_and_validity(
    path: &Path,
    alpha: Option<usize>,
) -> (Vec<f64>, Vec<bool>, (usize, usize), [f64; 6]) {
    let ds = Dataset::open(path).unwrap();
    let size = ds.raster_size();
    let b = ds.rasterband(1).unwrap();
    let v = b
        .read_as::<f64>((0, 0), size, size, None)
        .unwrap()
        .into_shape_and_vec()
        .1;
    let valid = match alpha {
        Some(i) => ds.rasterband(i).unwrap(),
        None => b.open_mask_band().unwrap(),
    }
    .read_as::<u8>((0, 0), size, size, None)
    .unwrap()
    .into_shape_and_vec()
    .1
    .into_iter()
    .map(|m| m != 0)
    .collect();
    (v, valid, size, ds.geo_transform().unwrap())
}

/// Warp `src` with tilegate (window `window`) and with one whole-scene `gdalwarp` of the same
/// parameters; return the largest difference over pixels valid in both, and how many pixels'
/// validity differs.
fn warp_against_gdalwarp(dir: &Path, src: &Path, resampling: &str, window: u32) -> (f64, usize) {
    let data = dir.join(format!("data-{resampling}-{window}"));
    let run = tg_json(
        &data,
        &[
            "run",
            src.to_str().unwrap(),
            "--recipe",
            "warp",
            "--t-srs",
            "EPSG:3857",
            "--tr",
            "30",
            "--tap",
            "--warp-resampling",
            resampling,
            "--window",
            &window.to_string(),
        ],
    );
    assert_eq!(run["dead_lettered"], 0, "{run}");
    let job = run["job_id"].as_str().unwrap();
    let scene = scene_of(&data, job);
    validate_cog(&scene).unwrap();
    let reference = dir.join(format!("ref-{resampling}.tif"));
    // The source has no nodata, so the warp's validity is an alpha band (a mask in tilegate's
    // scene); the transformer is exact (-et 0) on both sides.
    gdalwarp(&[
        "-t_srs",
        "EPSG:3857",
        "-tr",
        "30",
        "30",
        "-tap",
        "-r",
        resampling,
        "-et",
        "0",
        "-dstalpha",
        src.to_str().unwrap(),
        reference.to_str().unwrap(),
    ]);
    let (got, got_valid, got_size, got_gt) = band_and_validity(&scene, None);
    let (want, want_valid, want_size, want_gt) = band_and_validity(&reference, Some(2));
    assert_eq!(got_size, want_size, "the job's grid is gdalwarp's grid");
    assert_eq!(got_gt, want_gt);
    let mut max = 0f64;
    let mut validity = 0;
    for i in 0..got.len() {
        if got_valid[i] != want_valid[i] {
            validity += 1;
        } else if got_valid[i] {
            max = max.max((got[i] - want[i]).abs());
        }
    }
    assert!(
        got_valid.iter().any(|v| !v),
        "the reprojected corners are masked out"
    );
    (max, validity)
}

#[test]
fn warp_near_equals_a_whole_scene_gdalwarp_pixel_for_pixel() {
    let dir = tempdir();
    let src = dir.path().join("utm.tif");
    sample(dir.path(), &src, 1024, 3);
    for window in [128, 256] {
        let (max, validity) = warp_against_gdalwarp(dir.path(), &src, "near", window);
        assert_eq!((max, validity), (0.0, 0), "window {window}");
    }
}

#[test]
fn warp_bilinear_and_cubic_stay_within_the_documented_tolerance() {
    let dir = tempdir();
    let src = dir.path().join("utm.tif");
    sample(dir.path(), &src, 1024, 4);
    for resampling in ["bilinear", "cubic"] {
        for window in [128, 256] {
            let (max, validity) = warp_against_gdalwarp(dir.path(), &src, resampling, window);
            // README: integer outputs within 2 of the whole-scene warp; validity identical.
            // GDAL's warper rounds its kernel sums differently by chunk (one whole-scene
            // gdalwarp differs from another with a smaller -wm by 1), and a window is a chunk.
            assert!(max <= 2.0, "{resampling} window {window}: off by {max}");
            assert_eq!(validity, 0, "{resampling} window {window}");
        }
    }
}

#[test]
fn warp_refuses_a_bad_target_when_planning() {
    let dir = tempdir();
    let src = dir.path().join("s.tif");
    sample(dir.path(), &src, 256, 1);
    for (args, reason) in [
        (vec!["--recipe", "warp"], "bad-recipe"),
        (
            vec!["--recipe", "warp", "--t-srs", "EPSG:999999"],
            "bad-recipe",
        ),
        (
            vec!["--recipe", "warp", "--t-srs", "EPSG:3857", "--tap"],
            "bad-recipe",
        ),
        (
            vec![
                "--recipe",
                "warp",
                "--t-srs",
                "EPSG:3857",
                "--warp-resampling",
                "nearest-ish",
            ],
            "bad-recipe",
        ),
    ] {
        let mut a = vec!["plan", src.to_str().unwrap()];
        a.extend(args.iter().copied());
        let out = tg(dir.path(), &a, &[]);
        assert_eq!(out.status.code(), Some(1), "{a:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(&format!("error[{reason}]")), "{a:?}: {err}");
    }
}

const NUMPY_EXPR: &str = r#"
import sys
import numpy as np
from osgeo import gdal
scene, src = gdal.Open(sys.argv[1]), gdal.Open(sys.argv[2])
b = [None] + [src.GetRasterBand(i).ReadAsArray().astype(np.float64) for i in range(1, src.RasterCount + 1)]
nd = src.GetRasterBand(1).GetNoDataValue()
with np.errstate(all="ignore"):
    outs = [
        ((b[4] - b[3]) / (b[4] + b[3]), [3, 4], np.float32),
        (np.where(b[1] > 30000, b[1] * 0.5, b[2] % 7), [1, 2], np.float32),
    ]
bad = []
for i, (v, used, t) in enumerate(outs):
    invalid = ~np.isfinite(v)
    for u in used:
        invalid |= b[u] == nd
    want = np.where(invalid, -9999, v).astype(t)
    got = scene.GetRasterBand(i + 1).ReadAsArray()
    bad.append(int((got != want).sum()))
    bad.append(int(invalid.sum()))
print(" ".join(map(str, bad)), scene.GetRasterBand(1).GetNoDataValue())
"#;

#[test]
fn expr_equals_numpy_with_nodata_propagated() {
    let dir = tempdir();
    let src = dir.path().join("four.tif");
    sample_with(dir.path(), &src, 600, &["--bands", "4", "--nodata", "0"]);
    let run = tg_json(
        dir.path(),
        &[
            "run",
            src.to_str().unwrap(),
            "--recipe",
            "expr",
            "--expr",
            "(b4 - b3) / (b4 + b3); where(b1 > 30000, b1 * 0.5, b2 % 7)",
            "--window",
            "256",
        ],
    );
    let scene = scene_of(dir.path(), run["job_id"].as_str().unwrap());
    validate_cog(&scene).unwrap();
    let got = python(
        NUMPY_EXPR,
        &[scene.to_str().unwrap(), src.to_str().unwrap()],
    );
    let f: Vec<&str> = got.split_whitespace().collect();
    assert_eq!(
        (f[0], f[2], f[4]),
        ("0", "0", "-9999.0"),
        "mismatching pixels: {got}"
    );
    assert_ne!(f[1], "0", "the scene has nodata pixels to propagate: {got}");
}

#[test]
fn a_malformed_expression_is_refused_when_planning_with_a_named_reason() {
    let dir = tempdir();
    let src = dir.path().join("s.tif");
    sample(dir.path(), &src, 256, 1);
    for (expr, needle) in [
        ("sqr(b1)", "unknown function `sqr`"),
        ("(b1 + b2", "never closed"),
        ("b1 +* b2", "column 5"),
        ("b1 < b2 < 3", "do not chain"),
    ] {
        let out = tg(
            dir.path(),
            &[
                "plan",
                src.to_str().unwrap(),
                "--recipe",
                "expr",
                "--expr",
                expr,
            ],
            &[],
        );
        assert_eq!(out.status.code(), Some(1), "{expr}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains("error[bad-expression]") && err.contains(needle),
            "{expr}: {err}"
        );
    }
    // A band the scene lacks is refused too, and nothing was planned or enqueued.
    let out = tg(
        dir.path(),
        &[
            "plan",
            src.to_str().unwrap(),
            "--recipe",
            "expr",
            "--expr",
            "b2 * 2",
        ],
        &[],
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("band 2 does not exist"));
    let st = tg(dir.path(), &["--json", "dlq", "list"], &[]);
    assert!(st.status.success());
    let out = tg(dir.path(), &["--json", "status"], &[]);
    assert!(!out.status.success(), "no job was planned");
}

fn median_bin() -> PathBuf {
    let bin = tilegate_bin().with_file_name("tilegate-median");
    assert!(
        bin.exists(),
        "build the example: cargo build -p tilegate-example-median"
    );
    bin
}

/// The median filter over the whole scene at once (the example's rule: valid samples only,
/// lower middle of an even count).
fn median_reference(values: &[f64], w: usize, h: usize, r: usize, nodata: Option<f64>) -> Vec<f64> {
    let mut out = Vec::with_capacity(w * h);
    let mut s = Vec::new();
    for y in 0..h {
        for x in 0..w {
            s.clear();
            for ny in y.saturating_sub(r)..(y + r + 1).min(h) {
                for nx in x.saturating_sub(r)..(x + r + 1).min(w) {
                    let v = values[ny * w + nx];
                    if !v.is_nan() && Some(v) != nodata {
                        s.push(v);
                    }
                }
            }
            out.push(if s.is_empty() {
                nodata.unwrap_or(0.0)
            } else {
                s.sort_by(f64::total_cmp);
                s[(s.len() - 1) / 2]
            });
        }
    }
    out
}

#[test]
fn a_recipe_of_ones_own_runs_exactly_once_through_duplicates_and_a_killed_worker() {
    let dir = tempdir();
    let data = dir.path().join("data");
    let src = dir.path().join("s.tif");
    sample_with(dir.path(), &src, 400, &["--nodata", "0"]);
    let bin = median_bin();
    let args = vec![
        "plan",
        src.to_str().unwrap(),
        "--recipe",
        "median",
        "--param",
        "radius=2",
        "--window",
        "128",
    ];
    let plan = run_json(&bin, &data, &args);
    let job = plan["job_id"].as_str().unwrap().to_owned();
    assert_eq!(plan["windows"], 16);
    // The stock binary cannot plan it: the recipe is not registered there.
    let out = tg(&data, &args, &[]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("unknown recipe `median`"));
    // A worker killed after its third commit, before the manifest row and the ack.
    let killed = Command::new(&bin)
        .arg("--data")
        .arg(&data)
        .args(ONE_AT_A_TIME)
        .env("TILEGATE_FAULT", "after-commit")
        .env("TILEGATE_FAULT_SKIP", "2")
        .output()
        .unwrap();
    assert!(!killed.status.success(), "the worker was killed");
    // Every window again, beside the redeliveries: duplicates.
    run_json(&bin, &data, &["backfill", &job]);
    let work = run_json(&bin, &data, &["work", "--until-empty", "--visibility", "2"]);
    assert_eq!(work["dead_lettered"], 0, "{work}");
    let tiles = std::fs::read_dir(tiles_dir(&data, &job)).unwrap().count();
    assert_eq!(tiles, 16, "one tile per window");
    let asm = run_json(&bin, &data, &["assemble", &job]);
    assert_eq!(asm["outcome"], "written");
    let st = run_json(&bin, &data, &["status", &job]);
    assert_eq!(st["manifest_rows"], 16, "{st}");
    let absorbed = work["skipped"].as_u64().unwrap() + work["already_present"].as_u64().unwrap();
    assert!(
        absorbed >= 13,
        "the backfilled duplicates were absorbed: {work}"
    );
    let scene = scene_of(&data, &job);
    validate_cog(&scene).unwrap();
    let got = tilegate_cog::read_raster(scene.to_str().unwrap(), None, None).unwrap();
    let source = tilegate_cog::read_raster(src.to_str().unwrap(), None, None).unwrap();
    let want = median_reference(&source.band_f64(0), 400, 400, 2, source.nodata);
    let got = got.band_f64(0);
    let differ = got.iter().zip(&want).filter(|(a, b)| a != b).count();
    assert_eq!(differ, 0, "the assembled scene is the whole-scene median");
}

#[test]
fn an_https_source_runs_end_to_end_pinned_by_its_etag() {
    let dir = tempdir();
    let served = dir.path().join("www");
    std::fs::create_dir_all(&served).unwrap();
    let src = served.join("s.tif");
    sample(dir.path(), &src, 512, 7);
    let server = HttpServer::start(&served);
    let data = dir.path().join("data");
    let url = server.url("s.tif");
    let run = tg_json(&data, &["run", &url, "--window", "256"]);
    assert_eq!(run["dead_lettered"], 0, "{run}");
    let job = run["job_id"].as_str().unwrap();
    assert_scene_matches_source(&scene_of(&data, job), &src);
    let st = tg_json(&data, &["status", job]);
    let md5 = python(
        "import hashlib,sys; print(hashlib.md5(open(sys.argv[1],'rb').read()).hexdigest())",
        &[src.to_str().unwrap()],
    );
    assert_eq!(
        st["source_etag"].as_str().unwrap().trim_matches('"'),
        md5,
        "{st}"
    );
}

/// A STAC Item of two single-band assets (B04 at 10 m, B08 at 20 m) next to it.
fn write_item(dir: &Path) -> PathBuf {
    let four = dir.join("four.tif");
    sample_with(dir, &four, 512, &["--bands", "2"]);
    let b04 = dir.join("B04.tif");
    let b08 = dir.join("B08.tif");
    for (b, path, extra) in [
        ("1", &b04, vec![]),
        ("2", &b08, vec!["-outsize", "50%", "50%"]),
    ] {
        let out = Command::new("gdal_translate")
            .args(["-q", "-b", b])
            .args(extra)
            .arg(&four)
            .arg(path)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let item = serde_json::json!({
        "type": "Feature", "stac_version": "1.0.0", "id": "scene-1",
        "geometry": null, "properties": {"datetime": "2026-12-01T10:00:00Z"}, "links": [],
        "assets": {
            "B04": {"href": "./B04.tif", "type": "image/tiff; application=geotiff"},
            "B08": {"href": "B08.tif", "type": "image/tiff; application=geotiff"},
            "thumbnail": {"href": "thumb.png"}
        }
    });
    let path = dir.join("item.json");
    std::fs::write(&path, serde_json::to_vec_pretty(&item).unwrap()).unwrap();
    path
}

#[test]
fn a_stac_item_over_http_runs_and_a_changed_asset_is_source_changed() {
    let dir = tempdir();
    let served = dir.path().join("www");
    std::fs::create_dir_all(&served).unwrap();
    write_item(&served);
    let server = HttpServer::start(&served);
    let data = dir.path().join("data");
    let item = server.url("item.json");
    // Without --assets the planner names the item's assets.
    let out = tg(&data, &["plan", &item], &[]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("error[bad-stac-item]") && err.contains("B04, B08, thumbnail"),
        "{err}"
    );
    let plan = tg_json(
        &data,
        &["plan", &item, "--assets", "B04,B08", "--window", "128"],
    );
    let job = plan["job_id"].as_str().unwrap().to_owned();
    assert_eq!(plan["windows"], 16);
    // Eight windows, then B08 changes under the running job (the worker dies before its
    // ninth encode; that message comes back after its visibility timeout).
    let out = work_until_fault(&data, "before-encode", 8);
    assert!(
        !out.status.success(),
        "the worker stopped at its ninth window"
    );
    assert_eq!(tg_json(&data, &["status", &job])["manifest_rows"], 8);
    let out = Command::new("gdal_translate")
        .args(["-q", "-scale", "0", "65535", "0", "100", "-ot", "UInt16"])
        .arg(served.join("B04.tif"))
        .arg(dir.path().join("other.tif"))
        .output()
        .unwrap();
    assert!(out.status.success());
    std::fs::copy(dir.path().join("other.tif"), served.join("B08.tif")).unwrap();
    let work = tg_json(&data, &["work", "--until-empty"]);
    let st = tg_json(&data, &["status", &job]);
    let changed = st["dead_letters_by_reason"]["source-changed"]
        .as_u64()
        .unwrap_or(0);
    assert!(
        changed > 0,
        "windows after the change are source-changed: {st}\n{work}"
    );
    assert_eq!(
        st["manifest_rows"].as_u64().unwrap() + changed,
        16,
        "every window is either recorded (before the change) or dead-lettered: {st}"
    );
}

#[test]
fn a_local_stac_item_runs_end_to_end_with_assets_as_bands() {
    let dir = tempdir();
    let item = write_item(dir.path());
    let data = dir.path().join("data");
    let run = tg_json(
        &data,
        &[
            "run",
            item.to_str().unwrap(),
            "--assets",
            "B08,B04",
            "--window",
            "256",
        ],
    );
    assert_eq!(run["dead_lettered"], 0, "{run}");
    let scene = scene_of(&data, run["job_id"].as_str().unwrap());
    validate_cog(&scene).unwrap();
    let ds = Dataset::open(&scene).unwrap();
    assert_eq!(ds.raster_size(), (512, 512), "the finest asset's grid");
    assert_eq!(ds.raster_count(), 2);
    use gdal::Metadata as _;
    assert_eq!(ds.rasterband(1).unwrap().description().unwrap(), "B08");
    assert_eq!(ds.rasterband(2).unwrap().description().unwrap(), "B04");
    // Band 2 is B04 itself, pixel for pixel.
    let got = tilegate_cog::read_raster(scene.to_str().unwrap(), None, Some(&[2])).unwrap();
    let b04 = tilegate_cog::read_raster(dir.path().join("B04.tif").to_str().unwrap(), None, None)
        .unwrap();
    assert_eq!(got.bytes, b04.bytes);
}

#[test]
fn plan_from_a_list_plans_one_job_per_source_and_status_lists_them() {
    let dir = tempdir();
    let data = dir.path().join("data");
    let mut lines = String::from("# a day's scenes\n\n");
    for seed in 1..=3 {
        let src = dir.path().join(format!("s{seed}.tif"));
        sample(dir.path(), &src, 256, seed);
        lines.push_str(&format!("{}\n", src.display()));
    }
    lines.push_str("/nonexistent/scene.tif\n");
    let list = dir.path().join("list.txt");
    std::fs::write(&list, &lines).unwrap();
    let out = tg(
        &data,
        &["plan", "--from", list.to_str().unwrap(), "--window", "128"],
        &[],
    );
    assert_eq!(
        out.status.code(),
        Some(1),
        "one source could not be planned"
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let rows: Vec<&str> = text.lines().collect();
    assert_eq!(rows.len(), 4, "{text}");
    assert_eq!(
        rows.iter().filter(|l| l.starts_with("job ")).count(),
        3,
        "{text}"
    );
    assert!(rows[3].starts_with("error[source-missing]"), "{text}");
    let work = tg_json(&data, &["work", "--until-empty"]);
    assert_eq!(work["handled"], 12);
    let st = tg_json(&data, &["status"]);
    let recent = st["recent_jobs"].as_array().unwrap();
    assert_eq!(recent.len(), 3, "{st}");
    for r in recent {
        assert_eq!(
            (r["recorded"].as_u64(), r["windows"].as_u64()),
            (Some(4), Some(4)),
            "{r}"
        );
    }
    let text = String::from_utf8_lossy(&tg(&data, &["status"], &[]).stdout).into_owned();
    assert!(text.contains("recent jobs"), "{text}");
}

/// `tilegate recipes` lists what `--recipe` accepts — what `run --help` points to: the
/// built-in recipes with their flags, and a binary's own with its parameters.
#[test]
fn recipes_lists_the_built_in_and_the_registered_recipes() {
    let tmp = tempdir();
    let data = tmp.path().join("data");
    let names = |bin: &Path| -> Vec<(String, String)> {
        let doc = run_json(bin, &data, &["recipes"]);
        doc["recipes"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| {
                assert!(!r["summary"].as_str().unwrap().is_empty(), "{r}");
                (
                    r["name"].as_str().unwrap().to_owned(),
                    r["kind"].as_str().unwrap().to_owned(),
                )
            })
            .collect()
    };
    let built_in: Vec<(String, String)> = ["copy", "warp", "expr", "ndvi", "noop"]
        .iter()
        .map(|n| ((*n).to_owned(), "built-in".to_owned()))
        .collect();
    assert_eq!(names(&tilegate_bin()), built_in);
    let mut with_median = built_in.clone();
    with_median.push(("median".to_owned(), "registered".to_owned()));
    assert_eq!(names(&median_bin()), with_median);
    let doc = run_json(&median_bin(), &data, &["recipes"]);
    assert_eq!(doc["recipes"][5]["params"][0]["name"], "radius");
    let help = tg(&data, &["run", "--help"], &[]);
    assert!(String::from_utf8_lossy(&help.stdout).contains("tilegate recipes"));
    let text = tg(&data, &["recipes"], &[]);
    assert!(text.status.success());
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(
        text.contains("warp (built-in): reproject onto a target grid"),
        "{text}"
    );
}

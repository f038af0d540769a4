//! Rasters: sample scenes, GDAL's COG validator, and the check that an assembled scene equals
//! its source.

use crate::tg;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Run GDAL's COG validator (`validate_cloud_optimized_geotiff` from python3-gdal) with the
/// full check. Returns its output on failure. The validator must be installed: a missing
/// validator is a failure, not a skip.
pub fn validate_cog(path: &Path) -> Result<(), String> {
    let out = Command::new("/usr/bin/python3")
        .args([
            "-m",
            "osgeo_utils.samples.validate_cloud_optimized_geotiff",
            "--full-check=yes",
        ])
        .arg(path)
        .output()
        .map_err(|e| format!("run the COG validator (/usr/bin/python3 with python3-gdal): {e}"))?;
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    if out.status.success() && text.contains("is a valid cloud optimized GeoTIFF") {
        Ok(())
    } else {
        Err(format!("{}: {}", path.display(), text.trim()))
    }
}

/// Validate many files with one Python process (GDAL's `validate()` with the full check).
/// Returns every failing file with its errors.
pub fn validate_cogs(paths: &[PathBuf]) -> Result<(), String> {
    const SCRIPT: &str = r#"
import sys
from osgeo import gdal
from osgeo_utils.samples.validate_cloud_optimized_geotiff import validate
gdal.UseExceptions()
bad = 0
for path in sys.stdin.read().split("\n"):
    if not path:
        continue
    try:
        warnings, errors, _ = validate(path, full_check=True)
    except Exception as e:
        warnings, errors = [], [str(e)]
    if errors:
        bad += 1
        print(path + ": " + "; ".join(errors))
print("validated", bad)
"#;
    use std::io::Write;
    let mut child = Command::new("/usr/bin/python3")
        .args(["-c", SCRIPT])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .map_err(|e| format!("run the COG validator (/usr/bin/python3 with python3-gdal): {e}"))?;
    let list: String = paths.iter().map(|p| format!("{}\n", p.display())).collect();
    child
        .stdin
        .take()
        .expect("piped stdin")
        .write_all(list.as_bytes())
        .map_err(|e| e.to_string())?;
    let out = child.wait_with_output().map_err(|e| e.to_string())?;
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    if out.status.success() && text.trim_end().ends_with("validated 0") {
        Ok(())
    } else {
        Err(format!("{}{}", text, String::from_utf8_lossy(&out.stderr)))
    }
}

pub fn sample(data: &Path, path: &Path, size: u32, seed: u64) {
    let out = tg(
        data,
        &[
            "sample-scene",
            path.to_str().unwrap(),
            "--size",
            &size.to_string(),
            "--seed",
            &seed.to_string(),
        ],
        &[],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `tilegate sample-scene PATH --size SIZE` with `extra` options (bands, nodata, …).
pub fn sample_with(data: &Path, path: &Path, size: u32, extra: &[&str]) {
    let size = size.to_string();
    let mut args = vec!["sample-scene", path.to_str().unwrap(), "--size", &size];
    args.extend_from_slice(extra);
    let out = tg(data, &args, &[]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The scene's full-resolution pixels, geotransform, CRS and nodata equal the source's, it is a
/// valid COG, and GDAL reports `LAYOUT=COG`.
pub fn assert_scene_matches_source(scene: &Path, source: &Path) {
    use gdal::Metadata as _;
    validate_cog(scene).unwrap();
    let got = tilegate_cog::read_raster(scene.to_str().unwrap(), None, None).unwrap();
    let want = tilegate_cog::read_raster(source.to_str().unwrap(), None, None).unwrap();
    assert_eq!(
        (got.width, got.height, got.bands),
        (want.width, want.height, want.bands)
    );
    assert_eq!(got.dtype, want.dtype);
    assert_eq!(got.geotransform, want.geotransform);
    assert_eq!(got.crs_wkt, want.crs_wkt);
    assert_eq!(got.nodata, want.nodata);
    assert!(
        got.bytes == want.bytes,
        "scene pixels differ from the source"
    );
    let ds = gdal::Dataset::open(scene).unwrap();
    assert_eq!(
        ds.metadata_item("LAYOUT", "IMAGE_STRUCTURE").as_deref(),
        Some("COG"),
        "GDAL does not report LAYOUT=COG"
    );
}

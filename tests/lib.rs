//! Shared helpers for the integration tests: temporary data directories, the `tilegate`
//! binary, and GDAL's COG validator.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The `tilegate` binary built beside the test binary (`cargo build -p tilegate-cli` first;
/// the README's test command does).
pub fn tilegate_bin() -> PathBuf {
    let exe = std::env::current_exe().expect("current exe");
    let dir = exe
        .parent()
        .and_then(Path::parent)
        .expect("test binary lives in target/<profile>/deps");
    let bin = dir.join("tilegate");
    assert!(
        bin.exists(),
        "{} is missing: run `cargo build -p tilegate-cli` before the tests",
        bin.display()
    );
    bin
}

/// The cross-process child helper of this package.
pub fn child_bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_tilegate-test-child"))
}

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

/// A fresh temporary directory that lives as long as the returned guard.
pub fn tempdir() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("tilegate-test-")
        .tempdir()
        .expect("create a temporary directory")
}

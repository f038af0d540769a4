//! Shared helpers for the integration tests: temporary data directories, the `tilegate`
//! binary, and GDAL's COG validator.

use serde_json::Value;
use std::collections::BTreeMap;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

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

/// The cross-process child helper of this package. Cargo builds a package's binaries before
/// its integration tests and puts them beside the test binary's `deps/` directory
/// (`CARGO_BIN_EXE_*` is set only when compiling integration tests, not this library).
pub fn child_bin() -> PathBuf {
    let exe = std::env::current_exe().expect("current exe");
    let dir = exe
        .parent()
        .and_then(Path::parent)
        .expect("test binary lives in target/<profile>/deps");
    let bin = dir.join("tilegate-test-child");
    assert!(
        bin.exists(),
        "{} is missing: build the tests package (`cargo build -p tilegate-tests --bins`)",
        bin.display()
    );
    bin
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

/// Run `tilegate --data DATA ARGS...` and return its output (whatever the exit status).
pub fn tg(data: &Path, args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(tilegate_bin());
    cmd.arg("--data").arg(data).args(args);
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().expect("run tilegate")
}

/// Run with `--json`, require success, parse stdout.
pub fn tg_json(data: &Path, args: &[&str]) -> Value {
    let mut a = vec!["--json"];
    a.extend_from_slice(args);
    let out = tg(data, &a, &[]);
    assert!(
        out.status.success(),
        "tilegate {args:?} failed: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "tilegate {args:?} printed no JSON ({e}): {}",
            String::from_utf8_lossy(&out.stdout)
        )
    })
}

/// Every tile file under `dir`: path → (mtime ns, inode, content hash).
pub fn snapshot(dir: &Path) -> BTreeMap<PathBuf, (i64, u64, String)> {
    let mut out = BTreeMap::new();
    let Ok(rd) = std::fs::read_dir(dir) else {
        return out;
    };
    for e in rd {
        let p = e.unwrap().path();
        if p.extension().is_some_and(|x| x == "tif") {
            let m = std::fs::metadata(&p).unwrap();
            let hash = blake3_hex(&std::fs::read(&p).unwrap());
            out.insert(
                p,
                (m.mtime() * 1_000_000_000 + m.mtime_nsec(), m.ino(), hash),
            );
        }
    }
    out
}

pub fn blake3_hex(bytes: &[u8]) -> String {
    blake3::hash(bytes).to_hex().to_string()
}

pub fn tiles_dir(data: &Path, job: &str) -> PathBuf {
    data.join("objects")
        .join(tilegate_core::Prefix::DEFAULT)
        .join("tiles")
        .join(job)
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

/// Run one `work --until-empty` process that handles one message at a time (visibility 1 s)
/// with the fault hook armed at `point` after `skip` passes; it is expected to die there.
pub fn work_until_fault(data: &Path, point: &str, skip: u32) -> Output {
    let skip = skip.to_string();
    tg(
        data,
        &[
            "work",
            "--until-empty",
            "--threads",
            "1",
            "--concurrency",
            "1",
            "--visibility",
            "1",
        ],
        &[("TILEGATE_FAULT", point), ("TILEGATE_FAULT_SKIP", &skip)],
    )
}

//! Files on disk: temporary directories, snapshots of what a run left, content hashes, test
//! artifacts, and self-checking payloads for crash tests.

use std::collections::BTreeMap;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// A fresh temporary directory that lives as long as the returned guard.
pub fn tempdir() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("tilegate-test-")
        .tempdir()
        .expect("create a temporary directory")
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

/// Every object file under `root` (the embedded store's directory, its internal `.tilegate`
/// state excluded): path → (mtime ns, inode, content hash).
pub fn snapshot_tree(root: &Path) -> BTreeMap<PathBuf, (i64, u64, String)> {
    let mut out = BTreeMap::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let Ok(rd) = std::fs::read_dir(&dir) else {
            continue;
        };
        for e in rd {
            let p = e.unwrap().path();
            let m = std::fs::symlink_metadata(&p).unwrap();
            if m.is_dir() {
                if p.file_name().is_some_and(|n| n != ".tilegate") {
                    stack.push(p);
                }
            } else {
                let hash = blake3_hex(&std::fs::read(&p).unwrap());
                out.insert(
                    p,
                    (m.mtime() * 1_000_000_000 + m.mtime_nsec(), m.ino(), hash),
                );
            }
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

/// Where tests leave files a person may want to look at (screenshots):
/// `target/test-artifacts/`.
pub fn artifacts_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("current exe");
    let dir = exe
        .ancestors()
        .nth(3)
        .expect("test binary lives in target/<profile>/deps")
        .join("test-artifacts");
    std::fs::create_dir_all(&dir).expect("create target/test-artifacts");
    dir
}

/// A self-checking payload for crash tests: a header naming the key, the version, the body's
/// length and its hash, then ~2 MiB of body, so that any prefix of it is detectably partial.
pub fn crash_payload(key: &str, version: u64) -> Vec<u8> {
    let mut body = Vec::with_capacity(2 << 20);
    let mut x = blake3::Hasher::new();
    x.update(key.as_bytes());
    x.update(&version.to_le_bytes());
    x.finalize_xof().fill({
        body.resize((2 << 20) + (version as usize % 4096), 0);
        &mut body
    });
    let header = format!(
        "tilegate-crash-test {key} {version} {} {}\n",
        body.len(),
        blake3_hex(&body)
    );
    let mut out = header.into_bytes();
    out.extend_from_slice(&body);
    out
}

/// Check a [`crash_payload`]: its key and version if whole, else what is wrong.
pub fn check_crash_payload(bytes: &[u8]) -> Result<(String, u64), String> {
    let nl = bytes
        .iter()
        .position(|&b| b == b'\n')
        .ok_or_else(|| format!("no header in {} bytes", bytes.len()))?;
    let header = std::str::from_utf8(&bytes[..nl]).map_err(|e| e.to_string())?;
    let f: Vec<&str> = header.split(' ').collect();
    let [tag, key, version, len, hash] = f[..] else {
        return Err(format!("bad header {header:?}"));
    };
    let body = &bytes[nl + 1..];
    if tag != "tilegate-crash-test" || len.parse::<usize>() != Ok(body.len()) {
        return Err(format!("{header:?}: body is {} bytes", body.len()));
    }
    if blake3_hex(body) != hash {
        return Err(format!("{header:?}: body hash differs"));
    }
    Ok((key.to_owned(), version.parse().map_err(|_| "bad version")?))
}

/// The path of `tests/fixtures/NAME` (the reference scripts and documents tests hand to tools).
pub fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fixtures")
        .join(name)
}

/// Run a checker, require success, and return its trimmed standard output (its output and
/// errors in the panic otherwise).
pub fn checked(cmd: &mut std::process::Command) -> String {
    let out = cmd.output().expect("run a checker");
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

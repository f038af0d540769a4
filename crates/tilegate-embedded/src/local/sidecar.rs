//! Per-inode sidecars: an object's ETag and user metadata, kept beside it so a HEAD does not
//! rehash the file.
//!
//! A sidecar is named by the key and the *inode* of the file it describes, and is written
//! before that file becomes visible at the key. `link(2)` and `rename(2)` keep the inode, so
//! the sidecar is in place the moment the object is. It is trusted only while the file's size
//! and mtime still equal the recorded ones; a file a person dropped in or rewrote in place has
//! no matching sidecar and is hashed from its content instead.

use super::fsx::{Stat, fsync_dir};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fs::{self, File};
use std::io::{self, Write as _};
use std::path::{Path, PathBuf};
use tilegate_core::ETag;

/// What a sidecar records.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Sidecar {
    pub key: String,
    pub e_tag: ETag,
    pub size: u64,
    pub mtime_ns: i64,
    #[serde(default)]
    pub metadata: BTreeMap<String, String>,
}

impl Sidecar {
    /// True if this sidecar describes the file version `st` at `key`.
    pub fn describes(&self, key: &str, st: &Stat) -> bool {
        self.key == key && self.size == st.size && self.mtime_ns == st.mtime_ns
    }
}

/// `meta/<hash of key>-<dev>-<ino>.json`.
pub(crate) fn path(meta_dir: &Path, key: &str, st: &Stat) -> PathBuf {
    let h = blake3::hash(key.as_bytes()).to_hex();
    meta_dir.join(format!("{}-{}-{}.json", &h[..32], st.dev, st.ino))
}

/// Read a sidecar; any failure (absent, torn by a crash, unparsable) is `None`, which makes
/// the caller hash the content — never a wrong answer, only a slower one.
pub(crate) fn read(path: &Path) -> Option<Sidecar> {
    let text = fs::read(path).ok()?;
    serde_json::from_slice(&text).ok()
}

/// Write a sidecar before its object is published. One that carries user metadata is written
/// durably (file and directory entry fsynced): that metadata exists nowhere else. One without
/// is only a cache of facts the content itself gives (its ETag is the content hash), so it is
/// not fsynced — a crash can lose it or leave it torn, and [`read`] then answers `None` and the
/// content is hashed again: slower, never wrong. That spares two of a tile Create's four
/// fsyncs.
pub(crate) fn write(meta_dir: &Path, path: &Path, sidecar: &Sidecar) -> io::Result<()> {
    let json = serde_json::to_vec(sidecar).map_err(io::Error::other)?;
    let mut f = File::create(path)?;
    f.write_all(&json)?;
    if sidecar.metadata.is_empty() {
        return Ok(());
    }
    f.sync_all()?;
    fsync_dir(meta_dir)
}

/// Remove a sidecar that no longer describes a visible object. A failure leaves an orphan
/// that no lookup will match (its inode is gone from the key), so it is only logged.
pub(crate) fn remove(path: &Path) {
    match fs::remove_file(path) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => tracing::warn!(path = %path.display(), error = %e, "remove sidecar"),
    }
}

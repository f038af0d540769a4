//! Per-inode sidecars: an object's ETag and user metadata, kept with it so a HEAD does not
//! rehash the file.
//!
//! A sidecar is an extended attribute (`user.tilegate.sidecar`) of the file it describes, set
//! on the temp file before that file becomes visible at the key: `link(2)` and `rename(2)`
//! keep the inode, so the sidecar is in place the moment the object is, and it costs no file
//! of its own (no inode to allocate, open, fsync or unlink per object). On a filesystem
//! without user extended attributes it is a file `meta/<hash of key>-<dev>-<ino>.json` beside
//! the objects instead, as data directories before this version have them; readers look at
//! both. It is trusted only while its key, and the file's size and mtime, still equal the
//! recorded ones; a file a person dropped in or rewrote in place has no matching sidecar and is
//! hashed from its content instead.

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

/// The extended attribute that holds a sidecar.
const XATTR: &std::ffi::CStr = c"user.tilegate.sidecar";

/// True for the errors of a filesystem (or kernel) without user extended attributes.
fn unsupported(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::ENOTSUP | libc::EPERM | libc::ENOSYS)
    )
}

/// True for the errors after which a sidecar goes to a file instead of an attribute: no user
/// attributes at all, or no room for this one — a value over the filesystem's attribute size
/// (`E2BIG`, `ERANGE`), or attribute space exhausted (`ENOSPC`, `EDQUOT`: tmpfs counts user
/// attributes against its inode space since Linux 6.6, ext4 keeps them in one block). A disk
/// that is really full fails the file write too, and that error is returned.
fn falls_back(e: &io::Error) -> bool {
    unsupported(e)
        || matches!(
            e.raw_os_error(),
            Some(libc::E2BIG | libc::ERANGE | libc::ENOSPC | libc::EDQUOT)
        )
}

/// The sidecar attribute of `file`: `Ok(None)` if it has none.
fn get_xattr(file: &File) -> io::Result<Option<Vec<u8>>> {
    use std::os::fd::AsRawFd as _;
    let mut buf = vec![0u8; 512];
    loop {
        // SAFETY: a valid descriptor, a NUL-terminated name and a buffer of the given length.
        let n = unsafe {
            libc::fgetxattr(
                file.as_raw_fd(),
                XATTR.as_ptr(),
                buf.as_mut_ptr().cast(),
                buf.len(),
            )
        };
        if n >= 0 {
            buf.truncate(n as usize);
            return Ok(Some(buf));
        }
        let e = io::Error::last_os_error();
        match e.raw_os_error() {
            Some(libc::ENODATA) => return Ok(None),
            Some(libc::ERANGE) if buf.len() < 1 << 20 => buf.resize(buf.len() * 4, 0),
            _ => return Err(e),
        }
    }
}

fn set_xattr(file: &File, value: &[u8]) -> io::Result<()> {
    use std::os::fd::AsRawFd as _;
    // SAFETY: a valid descriptor, a NUL-terminated name and a value of the given length.
    let r = unsafe {
        libc::fsetxattr(
            file.as_raw_fd(),
            XATTR.as_ptr(),
            value.as_ptr().cast(),
            value.len(),
            0,
        )
    };
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Read the sidecar of the open object `file`: its attribute, else a sidecar file at `path`.
/// Any failure (absent, torn by a crash, unparsable) is `None`, which makes the caller hash
/// the content — never a wrong answer, only a slower one.
pub(crate) fn read(file: &File, path: &Path) -> Option<Sidecar> {
    let text = match get_xattr(file) {
        Ok(Some(v)) => v,
        Ok(None) => fs::read(path).ok()?,
        Err(e) if unsupported(&e) => fs::read(path).ok()?,
        Err(_) => return None,
    };
    serde_json::from_slice(&text).ok()
}

/// Write the sidecar of `file` (the temp file about to be published) before its object is
/// published: its attribute, or where the filesystem has none a sidecar file at `path`. One
/// that carries user metadata is written durably (fsynced): that metadata exists nowhere
/// else. One without is only a cache of facts the content itself gives (its ETag is the
/// content hash), so it is not fsynced — a crash can lose it, and [`read`] then answers `None`
/// and the content is hashed again: slower, never wrong.
pub(crate) fn write(
    meta_dir: &Path,
    path: &Path,
    file: &File,
    sidecar: &Sidecar,
) -> io::Result<()> {
    let json = serde_json::to_vec(sidecar).map_err(io::Error::other)?;
    match set_xattr(file, &json) {
        Ok(()) => {
            if !sidecar.metadata.is_empty() {
                file.sync_all()?;
            }
            return Ok(());
        }
        Err(e) if falls_back(&e) => {
            tracing::debug!(error = %e, "sidecar attribute refused; writing a sidecar file");
        }
        Err(e) => return Err(e),
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_attribute_without_room_falls_back_to_a_file() {
        for errno in [
            libc::ENOTSUP,
            libc::EPERM,
            libc::E2BIG,
            libc::ERANGE,
            libc::ENOSPC,
            libc::EDQUOT,
        ] {
            assert!(falls_back(&io::Error::from_raw_os_error(errno)), "{errno}");
        }
        for errno in [libc::EIO, libc::EBADF, libc::EACCES] {
            assert!(!falls_back(&io::Error::from_raw_os_error(errno)), "{errno}");
        }
    }
}

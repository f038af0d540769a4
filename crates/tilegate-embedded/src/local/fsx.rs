//! The filesystem steps the local object store is built from — temp files, fsync, per-key
//! `flock(2)` locks, content hashing — each with the POSIX guarantee it relies on.

use crate::error::{EmbeddedError, io_error, own_error};
use std::fs::{self, File, Metadata, OpenOptions, TryLockError};
use std::io;
use std::os::unix::fs::{FileExt as _, MetadataExt as _};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime};
use tilegate_core::{ETag, Retry, StoreResult};

/// How long a writer waits for another writer's per-key lock before giving up (retryably).
pub(crate) const LOCK_TIMEOUT: Duration = Duration::from_secs(30);

/// Read and hash in chunks of this size.
const CHUNK: usize = 1 << 20;

/// The stat fields that identify one version of a file: `(dev, ino)` names the inode, which
/// `link(2)` and `rename(2)` preserve; size and mtime change whenever its content is rewritten
/// in place.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Stat {
    pub dev: u64,
    pub ino: u64,
    pub size: u64,
    pub mtime_ns: i64,
    pub mtime: SystemTime,
    pub is_file: bool,
}

impl Stat {
    pub fn of(m: &Metadata) -> io::Result<Self> {
        Ok(Self {
            dev: m.dev(),
            ino: m.ino(),
            size: m.len(),
            mtime_ns: m
                .mtime()
                .saturating_mul(1_000_000_000)
                .saturating_add(m.mtime_nsec()),
            mtime: m.modified()?,
            is_file: m.is_file(),
        })
    }

    pub fn of_file(f: &File) -> io::Result<Self> {
        Self::of(&f.metadata()?)
    }
}

/// The ETag of some content: the first 128 bits of its BLAKE3 hash, hex, quoted.
pub(crate) fn etag_of(hash: &blake3::Hash) -> ETag {
    ETag::new(format!("\"{}\"", &hash.to_hex()[..32]))
}

/// Hash a whole file through an open descriptor (never by path, so the hash is of the exact
/// version the caller opened).
pub(crate) fn hash_file(f: &File) -> io::Result<ETag> {
    hash_chunks(f, CHUNK, false)
}

/// Hash a file by path on every core: the ETag of content that was just written (and is
/// still in the page cache). Read in chunks rather than memory-mapped: a mapping's pages count
/// in the process's resident set, and a scene's 200 MB mapped for its ETag was what set the
/// peak RSS of `tilegate run`.
pub(crate) fn hash_path(path: &Path) -> io::Result<ETag> {
    hash_chunks(&File::open(path)?, PARALLEL_HASH, true)
}

fn hash_chunks(f: &File, chunk: usize, parallel: bool) -> io::Result<ETag> {
    let mut hasher = blake3::Hasher::new();
    let mut buf = vec![0u8; chunk];
    let mut offset = 0u64;
    loop {
        let n = match f.read_at(&mut buf, offset) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        if parallel {
            hasher.update_rayon(&buf[..n]);
        } else {
            hasher.update(&buf[..n]);
        }
        offset += n as u64;
    }
    Ok(etag_of(&hasher.finalize()))
}

/// Objects at least this large are hashed on every core, beside their write.
const PARALLEL_HASH: usize = 8 << 20;

/// The most one `write(2)` is handed. A write of 2 MiB or more lets Linux's page cache (ext4
/// with large folios) allocate PMD-size folios, and on a virtual machine whose free memory is
/// reported back to its host each of those costs a fresh fault on the host: measured on the
/// benchmark machine (Linux 6.18, a few seconds after memory was freed), a 233 MB file written
/// in 16 MiB or 2 MiB calls took 0.55 s of kernel time, in 1 MiB calls 0.065 s.
pub(crate) const WRITE_CHUNK: usize = 1 << 20;

/// `write_all_at` in calls of at most [`WRITE_CHUNK`] bytes.
pub(crate) fn write_all_at(f: &File, bytes: &[u8], offset: u64) -> io::Result<()> {
    let mut at = offset;
    for chunk in bytes.chunks(WRITE_CHUNK) {
        f.write_all_at(chunk, at)?;
        at += chunk.len() as u64;
    }
    Ok(())
}

/// fsync a directory, so that names just created, linked, renamed or removed in it survive a
/// power loss (POSIX leaves the durability of a directory entry to an fsync of the directory).
pub(crate) fn fsync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

/// A file under `.tilegate/tmp/`, removed when dropped. After the file has been linked or
/// renamed into place the removal only drops the temporary name (or finds nothing).
#[derive(Debug)]
pub(crate) struct TempFile {
    pub path: PathBuf,
    pub file: File,
}

impl TempFile {
    /// A new, empty temp file with a unique name (`O_EXCL`, so it is never someone else's).
    pub fn create(tmp_dir: &Path) -> io::Result<Self> {
        let path = tmp_dir.join(format!("{}.tmp", uuid::Uuid::new_v4().simple()));
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(&path)?;
        Ok(Self { path, file })
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        match fs::remove_file(&self.path) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => tracing::warn!(
                path = %self.path.display(),
                error = %e,
                "remove temp file (the sweep at the next open will retry)"
            ),
        }
    }
}

/// Complete, fsynced content waiting to be published at a key.
#[derive(Debug)]
pub(crate) struct Staged {
    pub tmp: TempFile,
    pub e_tag: ETag,
}

impl Staged {
    /// Write `bytes` to a new temp file and fsync it: after this the content is durable, so a
    /// crash can leave at most a stray temp file, never a partial object at a key.
    pub fn write(tmp_dir: &Path, bytes: &[u8]) -> io::Result<Self> {
        let tmp = TempFile::create(tmp_dir)?;
        if bytes.len() < PARALLEL_HASH {
            write_all_at(&tmp.file, bytes, 0)?;
            tmp.file.sync_all()?;
            return Ok(Self {
                tmp,
                e_tag: etag_of(&blake3::hash(bytes)),
            });
        }
        // A large object: hash it on the other cores while this thread writes and waits for
        // the disk.
        let e_tag = std::thread::scope(|s| -> io::Result<ETag> {
            let hash = s.spawn(|| etag_of(&blake3::Hasher::new().update_rayon(bytes).finalize()));
            write_all_at(&tmp.file, bytes, 0)?;
            tmp.file.sync_all()?;
            Ok(hash.join().expect("hashing thread panicked"))
        })?;
        Ok(Self { tmp, e_tag })
    }

    pub fn stat(&self) -> io::Result<Stat> {
        Stat::of_file(&self.tmp.file)
    }

    /// Give the staged file an mtime strictly after `previous`, so that LastModified changes on
    /// every real rewrite: the kernel stamps mtime from a coarse clock (a few milliseconds on
    /// Linux), and some filesystems keep whole seconds, so a rewrite right after the previous
    /// write could otherwise carry the same time.
    pub fn bump_mtime_past(&self, previous: &Stat) -> io::Result<Stat> {
        let mut st = self.stat()?;
        for step in [
            Duration::from_nanos(1),
            Duration::from_micros(1),
            Duration::from_millis(1),
            Duration::from_secs(1),
            Duration::from_secs(2),
        ] {
            if st.mtime_ns > previous.mtime_ns {
                break;
            }
            self.tmp.file.set_modified(previous.mtime + step)?;
            st = self.stat()?;
        }
        if st.mtime_ns > previous.mtime_ns {
            self.tmp.file.sync_all()?;
        }
        Ok(st)
    }
}

/// An exclusive per-key lock: `flock(2)` on a lock file. flock locks belong to the open file
/// description, so two opens in one process exclude each other just as two processes do, and
/// the kernel drops the lock when the descriptor closes — a crashed holder never leaves a key
/// locked. Lock files are never deleted: deleting one while another process waits on it would
/// let two writers lock different inodes under the same name.
#[derive(Debug)]
pub(crate) struct KeyLock {
    _file: File,
}

/// Take the lock at `path`, waiting up to [`LOCK_TIMEOUT`] (then a retryable error).
pub(crate) fn lock(operation: &'static str, key: &str, path: &Path) -> StoreResult<KeyLock> {
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(path)
        .map_err(|e| io_error(operation, key, e))?;
    let deadline = Instant::now() + LOCK_TIMEOUT;
    let mut nap = Duration::from_micros(200);
    loop {
        match file.try_lock() {
            Ok(()) => return Ok(KeyLock { _file: file }),
            Err(TryLockError::WouldBlock) => {
                if Instant::now() >= deadline {
                    return Err(own_error(
                        operation,
                        key,
                        Retry::Retryable,
                        EmbeddedError::LockTimeout(LOCK_TIMEOUT),
                    ));
                }
                std::thread::sleep(nap);
                nap = (nap * 2).min(Duration::from_millis(20));
            }
            Err(TryLockError::Error(e)) => return Err(io_error(operation, key, e)),
        }
    }
}

//! [`LocalObjectStore`]: objects as ordinary files under a root directory, with
//! create-if-absent by `link(2)`, compare-and-swap under a per-key `flock(2)`, and content-hash
//! ETags — safe across threads and processes sharing the directory.
//!
//! Layout: the object at key `a/b/c.tif` is the file `<root>/a/b/c.tif`, so a person or GDAL
//! can open it directly. The store's own state lives under `<root>/.tilegate/`:
//! `tmp/` (content being written; same filesystem, so link and rename stay atomic), `meta/`
//! (per-inode sidecars with ETag and user metadata), `locks/` (per-key lock files) and
//! `uploads/` (multipart uploads in progress). Keys whose first segment is `.tilegate` are
//! refused.
//!
//! What it cannot do: provider version IDs (an [`UpdateVersion`] without an ETag is
//! `NotImplemented`), and a key cannot be both an object and a "directory" of other objects
//! (`a` and `a/b`), which a filesystem cannot represent; such a write is a permanent error.

mod fsx;
mod multipart;
mod sidecar;

use crate::blocking;
use crate::error::{EmbeddedError, io_error, own_error};
use async_trait::async_trait;
use bytes::Bytes;
use fsx::{Staged, Stat, fsync_dir};
use sidecar::Sidecar;
use std::collections::BTreeMap;
use std::fs::{self, File};
use std::io;
use std::ops::Range;
use std::os::unix::fs::FileExt as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};
use tilegate_core::object::{
    DeleteOptions, DeleteOutcome, GetOptions, GetOutcome, GetResult, MultipartUpload, ObjectMeta,
    ObjectStore, PartId, PutMode, PutOptions, PutOutcome, RangeError, UpdateVersion,
};
use tilegate_core::{ETag, ObjectKey, Retry, StoreError, StoreResult, keys};
use tracing::{debug, info, warn};

/// The first key segment reserved for the store's own state.
pub const INTERNAL_DIR: &str = keys::STORE_RESERVED;

/// Temp files older than this are crash leftovers: no write takes this long.
const TMP_MAX_AGE: Duration = Duration::from_secs(3600);

/// An [`ObjectStore`] over a local directory. Cheap to clone; clones share the root.
#[derive(Debug, Clone)]
pub struct LocalObjectStore {
    inner: Arc<Local>,
}

/// The store's paths; every blocking operation is a method here.
#[derive(Debug)]
struct Local {
    root: PathBuf,
    tmp: PathBuf,
    meta: PathBuf,
    locks: PathBuf,
    uploads: PathBuf,
}

impl LocalObjectStore {
    /// Open (creating if needed) the store rooted at `root`, and sweep temp files left by
    /// crashed writers.
    pub fn open(root: impl AsRef<Path>) -> StoreResult<Self> {
        let shown = root.as_ref().display().to_string();
        let local = Local::at(root.as_ref()).map_err(|e| io_error("open", &shown, e))?;
        for dir in [&local.tmp, &local.meta, &local.locks, &local.uploads] {
            fs::create_dir_all(dir).map_err(|e| io_error("open", &shown, e))?;
        }
        local.sweep_tmp();
        Ok(Self {
            inner: Arc::new(local),
        })
    }

    /// Open the store rooted at `root` for reading only (a colleague's or an archived run on a
    /// read-only directory): nothing is created or swept, and a missing root is
    /// [`StoreError::NotFound`]. Reads never write (a version without a matching sidecar is
    /// hashed, not described anew); a write fails as the directory refuses it.
    pub fn open_read_only(root: impl AsRef<Path>) -> StoreResult<Self> {
        let shown = root.as_ref().display().to_string();
        let local = Local::at(root.as_ref()).map_err(|e| io_error("open", &shown, e))?;
        if !local.root.is_dir() {
            return Err(StoreError::NotFound {
                what: "object store directory",
                key: shown,
            });
        }
        Ok(Self {
            inner: Arc::new(local),
        })
    }

    /// The root directory (absolute).
    pub fn root(&self) -> &Path {
        &self.inner.root
    }

    /// The path of the file that holds `key` (whether or not it exists). For tools and tests
    /// that hand objects to GDAL.
    pub fn path_of(&self, key: &ObjectKey) -> PathBuf {
        self.inner.root.join(key.as_str())
    }

    async fn run<T, F>(&self, operation: &'static str, key: &str, f: F) -> StoreResult<T>
    where
        T: Send + 'static,
        F: FnOnce(&Local) -> StoreResult<T> + Send + 'static,
    {
        let inner = Arc::clone(&self.inner);
        blocking::run(operation, key, move || f(&inner)).await
    }
}

/// `ENOENT` or `ENOTDIR`: nothing at the path (or a file where a directory would be).
fn is_absent(e: &io::Error) -> bool {
    e.kind() == io::ErrorKind::NotFound || e.raw_os_error() == Some(libc::ENOTDIR)
}

/// The half-open range to serve from an object of `size` bytes (see [`RangeError::serve`]).
fn resolve_range(range: Option<Range<u64>>, size: u64) -> Result<Range<u64>, EmbeddedError> {
    Ok(RangeError::serve(range.as_ref(), size)?)
}

impl Local {
    fn path_of(&self, key: &str) -> PathBuf {
        self.root.join(key)
    }

    /// The paths of a store rooted at `root` (made absolute).
    fn at(root: &Path) -> io::Result<Self> {
        let root = std::path::absolute(root)?;
        let internal = root.join(INTERNAL_DIR);
        Ok(Self {
            tmp: internal.join("tmp"),
            meta: internal.join("meta"),
            locks: internal.join("locks"),
            uploads: internal.join("uploads"),
            root,
        })
    }

    fn lock_path(&self, key: &str) -> PathBuf {
        let h = blake3::hash(key.as_bytes()).to_hex();
        self.locks.join(format!("{}.lock", &h[..32]))
    }

    /// Remove temp files and abandoned upload claims older than [`TMP_MAX_AGE`]. Best effort:
    /// a failure is logged, and the next open tries again.
    fn sweep_tmp(&self) {
        let Ok(entries) = fs::read_dir(&self.tmp) else {
            return;
        };
        let cutoff = SystemTime::now()
            .checked_sub(TMP_MAX_AGE)
            .unwrap_or(SystemTime::UNIX_EPOCH);
        let mut removed = 0u64;
        for entry in entries.flatten() {
            let Ok(m) = entry.metadata() else { continue };
            if m.modified().is_ok_and(|t| t < cutoff) {
                let path = entry.path();
                let res = if m.is_dir() {
                    fs::remove_dir_all(&path)
                } else {
                    fs::remove_file(&path)
                };
                match res {
                    Ok(()) => removed += 1,
                    // Another process opening the store swept it first.
                    Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                    Err(e) => warn!(path = %path.display(), error = %e, "sweep temp file"),
                }
            }
        }
        if removed > 0 {
            info!(root = %self.root.display(), removed, "swept crash leftovers from .tilegate/tmp");
        }
    }

    /// Describe one open file version at `key`: ETag and metadata from its sidecar when the
    /// sidecar still matches, else from hashing the content through this descriptor.
    fn describe(
        &self,
        key: &str,
        st: &Stat,
        file: &File,
    ) -> io::Result<(ETag, BTreeMap<String, String>)> {
        if let Some(sc) = sidecar::read(file, &sidecar::path(&self.meta, key, st))
            && sc.describes(key, st)
        {
            return Ok((sc.e_tag, sc.metadata));
        }
        debug!(
            store = "local",
            key, "no matching sidecar: hashing the content"
        );
        Ok((fsx::hash_file(file)?, BTreeMap::new()))
    }

    /// Open the object at `key` once and describe that exact version. `None` if absent (or if
    /// the path is a directory, which is not an object).
    fn open_object(
        &self,
        operation: &'static str,
        key: &str,
    ) -> StoreResult<Option<(File, ObjectMeta, Stat)>> {
        let file = match File::open(self.path_of(key)) {
            Ok(f) => f,
            Err(e) if is_absent(&e) => return Ok(None),
            Err(e) => return Err(io_error(operation, key, e)),
        };
        let st = Stat::of_file(&file).map_err(|e| io_error(operation, key, e))?;
        if !st.is_file {
            return Ok(None);
        }
        let (e_tag, metadata) = self
            .describe(key, &st, &file)
            .map_err(|e| io_error(operation, key, e))?;
        let meta = ObjectMeta {
            key: key.to_owned(),
            size: st.size,
            e_tag,
            last_modified: st.mtime,
            version: None,
            metadata,
        };
        Ok(Some((file, meta, st)))
    }

    fn head(&self, key: &ObjectKey) -> StoreResult<Option<ObjectMeta>> {
        Ok(self.open_object("head", key)?.map(|(_, m, _)| m))
    }

    fn get(&self, key: &ObjectKey, opts: &GetOptions) -> StoreResult<GetOutcome> {
        // Open once, describe that descriptor's inode, and read from the same descriptor:
        // published files are never rewritten in place (every write is a new inode linked or
        // renamed over), so the bytes and the ETag returned are of one version.
        let Some((file, meta, _)) = self.open_object("get", key)? else {
            return Err(StoreError::NotFound {
                what: "object",
                key: key.to_string(),
            });
        };
        // If-Match first, as RFC 9110 §13.2.2 orders the preconditions.
        if let Some(cond) = &opts.if_match
            && !cond.matches_strong(&meta.e_tag)
        {
            return Ok(GetOutcome::PreconditionFailed);
        }
        if let Some(cond) = &opts.if_none_match
            && cond.matches_weak(&meta.e_tag)
        {
            return Ok(GetOutcome::NotModified);
        }
        let range = resolve_range(opts.range.clone(), meta.size)
            .map_err(|e| own_error("get", key, Retry::Permanent, e))?;
        let len = usize::try_from(range.end - range.start)
            .map_err(|e| StoreError::backend("get", key, Retry::Permanent, e))?;
        let mut buf = vec![0u8; len];
        file.read_exact_at(&mut buf, range.start)
            .map_err(|e| io_error("get", key, e))?;
        Ok(GetOutcome::Found(GetResult {
            meta,
            range,
            bytes: Bytes::from(buf),
        }))
    }

    fn put(&self, key: &ObjectKey, bytes: &[u8], opts: PutOptions) -> StoreResult<PutOutcome> {
        let staged = Staged::write(&self.tmp, bytes).map_err(|e| io_error("put", key, e))?;
        self.publish("put", key, staged, &opts.mode, opts.metadata)
    }

    /// Make sure the directory that will hold `key` exists, fsyncing each directory created
    /// so its entry is durable before an object is linked beneath it.
    fn ensure_parent(&self, operation: &'static str, key: &str) -> StoreResult<()> {
        let Some((parent, _)) = key.rsplit_once('/') else {
            return Ok(());
        };
        if fs::metadata(self.root.join(parent)).is_ok_and(|m| m.is_dir()) {
            return Ok(());
        }
        let mut dir = self.root.clone();
        for seg in parent.split('/') {
            let up = dir.clone();
            dir.push(seg);
            match fs::create_dir(&dir) {
                Ok(()) => fsync_dir(&up).map_err(|e| io_error(operation, key, e))?,
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                    if !fs::metadata(&dir).is_ok_and(|m| m.is_dir()) {
                        return Err(self.conflict(operation, key, &dir));
                    }
                }
                Err(e) if e.raw_os_error() == Some(libc::ENOTDIR) => {
                    return Err(self.conflict(operation, key, &up));
                }
                Err(e) => return Err(io_error(operation, key, e)),
            }
        }
        Ok(())
    }

    fn conflict(&self, operation: &'static str, key: &str, path: &Path) -> StoreError {
        let shown = path
            .strip_prefix(&self.root)
            .unwrap_or(path)
            .display()
            .to_string();
        own_error(
            operation,
            key,
            Retry::Permanent,
            EmbeddedError::KeyConflict { path: shown },
        )
    }

    /// Publish staged content at `key`, evaluating `mode` atomically with publication.
    fn publish(
        &self,
        operation: &'static str,
        key: &str,
        staged: Staged,
        mode: &PutMode,
        metadata: BTreeMap<String, String>,
    ) -> StoreResult<PutOutcome> {
        self.ensure_parent(operation, key)?;
        match mode {
            PutMode::Create => self.publish_create(operation, key, staged, metadata),
            PutMode::Overwrite => self.publish_replace(operation, key, staged, None, metadata),
            PutMode::Update(UpdateVersion {
                e_tag: Some(expected),
                ..
            }) => self.publish_replace(operation, key, staged, Some(expected), metadata),
            PutMode::Update(UpdateVersion { e_tag: None, .. }) => Err(StoreError::NotImplemented {
                operation: "update by provider version without an etag",
                implementer: "local",
            }),
        }
    }

    /// Create-if-absent. The guard is `link(2)` alone: it creates the new name only if no entry
    /// of that name exists and fails with `EEXIST` otherwise, atomically, whichever process
    /// races it. Nothing is checked beforehand, so there is no window between a check and the
    /// write. The temp file was fsynced first, so the name never points at partial content.
    fn publish_create(
        &self,
        operation: &'static str,
        key: &str,
        staged: Staged,
        metadata: BTreeMap<String, String>,
    ) -> StoreResult<PutOutcome> {
        let dest = self.path_of(key);
        let st = staged.stat().map_err(|e| io_error(operation, key, e))?;
        let sc_path = sidecar::path(&self.meta, key, &st);
        let sc = Sidecar {
            key: key.to_owned(),
            e_tag: staged.e_tag.clone(),
            size: st.size,
            mtime_ns: st.mtime_ns,
            metadata,
        };
        // The sidecar goes first (on, or named by, the temp file's inode, which link keeps), so
        // it is already there when the object becomes visible.
        sidecar::write(&self.meta, &sc_path, &staged.tmp.file, &sc)
            .map_err(|e| io_error(operation, key, e))?;
        match fs::hard_link(&staged.tmp.path, &dest) {
            Ok(()) => {
                let parent = dest.parent().unwrap_or(&self.root);
                fsync_dir(parent).map_err(|e| io_error(operation, key, e))?;
                drop(staged); // drops the temp name; the object keeps the inode
                debug!(
                    store = "local",
                    key,
                    outcome = "written",
                    size = sc.size,
                    "put"
                );
                Ok(PutOutcome::Written(ObjectMeta {
                    key: key.to_owned(),
                    size: sc.size,
                    e_tag: sc.e_tag,
                    last_modified: st.mtime,
                    version: None,
                    metadata: sc.metadata,
                }))
            }
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                sidecar::remove(&sc_path);
                if !fs::symlink_metadata(&dest).is_ok_and(|m| m.is_file()) {
                    return Err(self.conflict(operation, key, &dest));
                }
                debug!(store = "local", key, outcome = "already-present", "put");
                Ok(PutOutcome::AlreadyPresent)
            }
            Err(e) => {
                sidecar::remove(&sc_path);
                if matches!(
                    e.raw_os_error(),
                    Some(libc::EPERM | libc::EOPNOTSUPP | libc::EXDEV)
                ) {
                    return Err(own_error(
                        operation,
                        key,
                        Retry::Permanent,
                        EmbeddedError::NoHardLinks(e),
                    ));
                }
                Err(io_error(operation, key, e))
            }
        }
    }

    /// Overwrite (`expected == None`) or compare-and-swap. Under the per-key lock: read the
    /// current version, compare, then `rename(2)` the staged file over the key — rename
    /// replaces the name atomically, so readers see the old or the new file, never a mix. The
    /// lock is what makes compare-then-rename one step for every writer that takes it
    /// (Overwrite, Update, Delete); Create needs no lock because link never replaces.
    fn publish_replace(
        &self,
        operation: &'static str,
        key: &str,
        staged: Staged,
        expected: Option<&ETag>,
        metadata: BTreeMap<String, String>,
    ) -> StoreResult<PutOutcome> {
        let dest = self.path_of(key);
        let _lock = fsx::lock(operation, key, &self.lock_path(key))?;
        if fs::symlink_metadata(&dest).is_ok_and(|m| m.is_dir()) {
            return Err(self.conflict(operation, key, &dest));
        }
        let current = self.open_object(operation, key)?;
        if let Some(expected) = expected {
            let matches = current
                .as_ref()
                .is_some_and(|(_, m, _)| m.e_tag.strong_eq(expected));
            if !matches {
                debug!(store = "local", key, outcome = "superseded", expected = %expected, "put");
                return Ok(PutOutcome::Superseded);
            }
        }
        let st = match &current {
            Some((_, _, old)) => staged.bump_mtime_past(old),
            None => staged.stat(),
        }
        .map_err(|e| io_error(operation, key, e))?;
        let sc_path = sidecar::path(&self.meta, key, &st);
        let sc = Sidecar {
            key: key.to_owned(),
            e_tag: staged.e_tag.clone(),
            size: st.size,
            mtime_ns: st.mtime_ns,
            metadata,
        };
        sidecar::write(&self.meta, &sc_path, &staged.tmp.file, &sc)
            .map_err(|e| io_error(operation, key, e))?;
        if let Err(e) = fs::rename(&staged.tmp.path, &dest) {
            sidecar::remove(&sc_path);
            return Err(io_error(operation, key, e));
        }
        let parent = dest.parent().unwrap_or(&self.root);
        fsync_dir(parent).map_err(|e| io_error(operation, key, e))?;
        if let Some((_, _, old)) = &current {
            sidecar::remove(&sidecar::path(&self.meta, key, old));
        }
        debug!(
            store = "local",
            key,
            outcome = "written",
            size = sc.size,
            "put"
        );
        Ok(PutOutcome::Written(ObjectMeta {
            key: key.to_owned(),
            size: sc.size,
            e_tag: sc.e_tag,
            last_modified: st.mtime,
            version: None,
            metadata: sc.metadata,
        }))
    }

    fn delete(&self, key: &ObjectKey, opts: &DeleteOptions) -> StoreResult<DeleteOutcome> {
        // Every delete takes the lock, conditional or not: an unlocked unlink between an
        // Update's compare and its rename would let the Update resurrect the object.
        let _lock = fsx::lock("delete", key, &self.lock_path(key))?;
        let Some((_, meta, st)) = self.open_object("delete", key)? else {
            return Ok(DeleteOutcome::NotFound);
        };
        if let Some(expected) = &opts.if_match
            && !meta.e_tag.strong_eq(expected)
        {
            debug!(store = "local", key = %key, outcome = "superseded", "delete");
            return Ok(DeleteOutcome::Superseded);
        }
        let dest = self.path_of(key);
        match fs::remove_file(&dest) {
            Ok(()) => {}
            Err(e) if is_absent(&e) => return Ok(DeleteOutcome::NotFound),
            Err(e) => return Err(io_error("delete", key, e)),
        }
        let parent = dest.parent().unwrap_or(&self.root);
        fsync_dir(parent).map_err(|e| io_error("delete", key, e))?;
        sidecar::remove(&sidecar::path(&self.meta, key, &st));
        debug!(store = "local", key = %key, outcome = "deleted", "delete");
        Ok(DeleteOutcome::Deleted)
    }

    /// Every object whose key starts with `prefix` (S3 semantics: a plain string prefix, so
    /// `a/b` matches `a/b.tif` and `a/bc/d`), sorted by key. Files whose names are not valid
    /// keys (a person's `notes.txt~`) cannot be addressed and are skipped.
    fn list(&self, prefix: &str) -> StoreResult<Vec<ObjectMeta>> {
        keys::check_list_prefix(prefix)?;
        let dir = prefix.rsplit_once('/').map_or("", |(dir, _)| dir);
        if dir.split('/').next() == Some(INTERNAL_DIR) {
            return Ok(Vec::new());
        }
        let mut out = Vec::new();
        let start = if dir.is_empty() {
            self.root.clone()
        } else {
            self.root.join(dir)
        };
        self.walk(prefix, &start, dir, &mut out)?;
        out.sort_by(|a, b| a.key.cmp(&b.key));
        Ok(out)
    }

    fn walk(
        &self,
        prefix: &str,
        path: &Path,
        key_dir: &str,
        out: &mut Vec<ObjectMeta>,
    ) -> StoreResult<()> {
        let entries = match fs::read_dir(path) {
            Ok(e) => e,
            Err(e) if is_absent(&e) => return Ok(()),
            Err(e) => return Err(io_error("list", prefix, e)),
        };
        for entry in entries {
            let entry = entry.map_err(|e| io_error("list", prefix, e))?;
            // Names tilegate would never write (spaces, `%`, non-ASCII) are listed too, as they
            // are: a listing is for reports and reconciliation, which must see foreign objects
            // byte for byte. A name that is not UTF-8 cannot be a key at all and is skipped.
            let Some(name) = entry.file_name().to_str().map(str::to_owned) else {
                warn!(dir = %path.display(), "list: skipped a file name that is not UTF-8");
                continue;
            };
            if key_dir.is_empty() && name == INTERNAL_DIR {
                continue;
            }
            let key = if key_dir.is_empty() {
                name
            } else {
                format!("{key_dir}/{name}")
            };
            let Ok(ft) = entry.file_type() else { continue };
            if ft.is_dir() {
                let as_dir = format!("{key}/");
                if as_dir.starts_with(prefix) || prefix.starts_with(&as_dir) {
                    self.walk(prefix, &entry.path(), &key, out)?;
                }
            } else if key.starts_with(prefix) {
                // Gone since read_dir (a concurrent delete) is simply not listed.
                if let Some((_, meta, _)) = self.open_object("list", &key)? {
                    out.push(meta);
                }
            }
        }
        Ok(())
    }
}

#[async_trait]
impl ObjectStore for LocalObjectStore {
    fn name(&self) -> &'static str {
        "local"
    }

    /// The object's file as a `file://` URL. A directory grants no time-limited reads: the URL
    /// carries no signature and never expires, and whoever can read the directory can read
    /// the file (the ledger has still authorised the tenant against the row before asking).
    async fn presign_get(&self, key: &ObjectKey, _expires: Duration) -> StoreResult<String> {
        Ok(file_url(&self.path_of(key)))
    }

    async fn head(&self, key: &ObjectKey) -> StoreResult<Option<ObjectMeta>> {
        let k = key.to_owned();
        self.run("head", key, move |l| l.head(&k)).await
    }

    async fn get_opts(&self, key: &ObjectKey, opts: GetOptions) -> StoreResult<GetOutcome> {
        let k = key.to_owned();
        self.run("get", key, move |l| l.get(&k, &opts)).await
    }

    async fn put_opts(
        &self,
        key: &ObjectKey,
        bytes: Bytes,
        opts: PutOptions,
    ) -> StoreResult<PutOutcome> {
        let k = key.to_owned();
        self.run("put", key, move |l| l.put(&k, &bytes, opts)).await
    }

    async fn delete_opts(
        &self,
        key: &ObjectKey,
        opts: DeleteOptions,
    ) -> StoreResult<DeleteOutcome> {
        let k = key.to_owned();
        self.run("delete", key, move |l| l.delete(&k, &opts)).await
    }

    async fn list(&self, prefix: &str) -> StoreResult<Vec<ObjectMeta>> {
        let p = prefix.to_owned();
        self.run("list", prefix, move |l| l.list(&p)).await
    }

    async fn create_multipart(&self, key: &ObjectKey, opts: &PutOptions) -> StoreResult<String> {
        let k = key.to_owned();
        let metadata = opts.metadata.clone();
        self.run("create multipart upload", key, move |l| {
            l.create_multipart(&k, metadata)
        })
        .await
    }

    async fn upload_part(
        &self,
        key: &ObjectKey,
        upload_id: &str,
        part_number: u32,
        bytes: Bytes,
    ) -> StoreResult<PartId> {
        let (k, id) = (key.to_owned(), upload_id.to_owned());
        self.run("upload part", key, move |l| {
            l.upload_part(&k, &id, part_number, &bytes)
        })
        .await
    }

    async fn complete_multipart(
        &self,
        key: &ObjectKey,
        upload_id: &str,
        parts: &[PartId],
        mode: &PutMode,
    ) -> StoreResult<PutOutcome> {
        let (k, id, parts, mode) = (
            key.to_owned(),
            upload_id.to_owned(),
            parts.to_vec(),
            mode.clone(),
        );
        self.run("complete multipart upload", key, move |l| {
            l.complete_multipart(&k, &id, &parts, &mode)
        })
        .await
    }

    async fn abort_multipart(&self, key: &ObjectKey, upload_id: &str) -> StoreResult<()> {
        let (k, id) = (key.to_owned(), upload_id.to_owned());
        self.run("abort multipart upload", key, move |l| {
            l.abort_multipart(&k, &id)
        })
        .await
    }

    async fn list_multipart(
        &self,
        prefix: &str,
        older_than: Option<SystemTime>,
    ) -> StoreResult<Vec<MultipartUpload>> {
        let p = prefix.to_owned();
        self.run("list multipart uploads", prefix, move |l| {
            l.list_multipart(&p, older_than)
        })
        .await
    }
}

#[cfg(test)]
mod tests;

/// `path` as a `file://` URL, every byte outside the unreserved set and `/` percent-encoded.
fn file_url(path: &Path) -> String {
    use std::os::unix::ffi::OsStrExt as _;
    let mut url = String::from("file://");
    for &b in path.as_os_str().as_bytes() {
        if b.is_ascii_alphanumeric() || b"/-._~".contains(&b) {
            url.push(char::from(b));
        } else {
            url.push_str(&format!("%{b:02X}"));
        }
    }
    url
}

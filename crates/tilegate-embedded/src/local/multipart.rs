//! Multipart uploads for the local store, under `.tilegate/uploads/<id>/`, published at
//! completion exactly like a single put, honouring the same [`PutMode`].
//!
//! Parts that arrive in order (part 1, then 2, …: what every tilegate uploader does) are
//! appended to one *spool* file, fsynced, and recorded in `spool.idx` (number, offset, length,
//! ETag); completing with exactly those parts publishes the spool itself — no copy, no second
//! fsync of the object's bytes. Any other part (out of order, or uploaded again under a number
//! already used) is staged as its own file `part-NNNNN`, which takes precedence, and completion
//! then concatenates the named parts into a new file. A lock file in the upload's directory
//! serialises part uploads and completion of one upload across processes. Completion checks
//! each part's length and the staged object's size against the sizes the caller was given
//! before publishing anything (`CompletionMismatch` otherwise).

use super::Local;
use super::fsx::{Staged, TempFile, etag_of, fsync_dir, hash_path, lock, write_all_at};
use crate::error::{EmbeddedError, io_error, own_error};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fs::{self, File};
use std::io::{self, Read as _, Write as _};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tilegate_core::ObjectKey;
use tilegate_core::object::{
    CompletionMismatch, MultipartUpload, PartId, PutMode, PutOutcome, check_completed,
};
use tilegate_core::{ETag, Retry, StoreError, StoreResult, UnixMillis, now_millis};
use tracing::{debug, warn};

/// S3's part-number range, kept so callers behave the same on every backend.
const MAX_PART_NUMBER: u32 = 10_000;
const INFO_FILE: &str = "upload.json";
const SPOOL_FILE: &str = "spool";
const SPOOL_INDEX: &str = "spool.idx";
const LOCK_FILE: &str = "lock";

/// One part in the spool.
#[derive(Debug, Clone, PartialEq)]
struct Spooled {
    part_number: u32,
    offset: u64,
    len: u64,
    e_tag: ETag,
}

/// The spool's index: one line per appended part, written after the part's bytes are durable.
/// A torn last line (a crash while appending it) is ignored with the part it described.
fn read_spool_index(dir: &Path) -> io::Result<Vec<Spooled>> {
    let text = match fs::read_to_string(dir.join(SPOOL_INDEX)) {
        Ok(t) => t,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    let mut out: Vec<Spooled> = Vec::new();
    for line in text.lines() {
        let f: Vec<&str> = line.split(' ').collect();
        let [n, offset, len, e_tag] = f[..] else {
            break;
        };
        let (Ok(n), Ok(offset), Ok(len)) = (n.parse(), offset.parse(), len.parse()) else {
            break;
        };
        // Entries are contiguous and numbered 1, 2, …; anything else is not ours.
        let expected = out.last().map_or(0, |p| p.offset + p.len);
        if n as usize != out.len() + 1 || offset != expected {
            break;
        }
        out.push(Spooled {
            part_number: n,
            offset,
            len,
            e_tag: ETag::new(e_tag),
        });
    }
    Ok(out)
}

/// Where a named part's bytes are.
enum PartSource {
    File(PathBuf),
    Spool(Spooled),
}

/// `uploads/<id>/upload.json`.
#[derive(Debug, Serialize, Deserialize)]
struct UploadInfo {
    key: String,
    initiated_ms: UnixMillis,
    #[serde(default)]
    metadata: BTreeMap<String, String>,
}

/// Upload IDs are our own UUIDs (32 lowercase hex); anything else names no upload, and is
/// never joined to a path.
fn valid_id(id: &str) -> bool {
    id.len() == 32
        && id
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

fn no_upload(key: &str) -> StoreError {
    StoreError::NotFound {
        what: "multipart upload",
        key: key.to_owned(),
    }
}

fn part_name(n: u32) -> String {
    format!("part-{n:05}")
}

impl Local {
    /// The directory and record of upload `id`, which must be for `key` (else not found, as
    /// S3's NoSuchUpload).
    fn upload(
        &self,
        operation: &'static str,
        key: &str,
        id: &str,
    ) -> StoreResult<(PathBuf, UploadInfo)> {
        if !valid_id(id) {
            return Err(no_upload(key));
        }
        let dir = self.uploads.join(id);
        let text = match fs::read(dir.join(INFO_FILE)) {
            Ok(t) => t,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Err(no_upload(key)),
            Err(e) => return Err(io_error(operation, key, e)),
        };
        let info: UploadInfo = serde_json::from_slice(&text).map_err(|e| StoreError::Corrupt {
            what: "multipart upload record",
            key: id.to_owned(),
            detail: e.to_string(),
        })?;
        if info.key != key {
            return Err(no_upload(key));
        }
        Ok((dir, info))
    }

    pub(super) fn create_multipart(
        &self,
        key: &ObjectKey,
        metadata: BTreeMap<String, String>,
    ) -> StoreResult<String> {
        const OP: &str = "create multipart upload";
        let id = uuid::Uuid::new_v4().simple().to_string();
        let info = UploadInfo {
            key: key.to_string(),
            initiated_ms: now_millis(),
            metadata,
        };
        let json = serde_json::to_vec(&info).map_err(|e| io_error(OP, key, io::Error::other(e)))?;
        // Build the upload directory in tmp and rename it into uploads/ whole, so a listing
        // never sees a directory without its record.
        let staging = self.tmp.join(format!("upload-{id}"));
        let build = || -> io::Result<()> {
            fs::create_dir(&staging)?;
            let mut f = File::create(staging.join(INFO_FILE))?;
            f.write_all(&json)?;
            f.sync_all()?;
            fsync_dir(&staging)?;
            fs::rename(&staging, self.uploads.join(&id))?;
            fsync_dir(&self.uploads)
        };
        if let Err(e) = build() {
            let _ = fs::remove_dir_all(&staging);
            return Err(io_error(OP, key, e));
        }
        debug!(store = "local", key = %key, upload_id = %id, "multipart upload created");
        Ok(id)
    }

    pub(super) fn upload_part(
        &self,
        key: &ObjectKey,
        id: &str,
        part_number: u32,
        bytes: &[u8],
    ) -> StoreResult<PartId> {
        const OP: &str = "upload part";
        if part_number == 0 || part_number > MAX_PART_NUMBER {
            return Err(own_error(
                OP,
                key,
                Retry::Permanent,
                EmbeddedError::InvalidPart {
                    part_number,
                    reason: "part numbers run from 1 to 10000",
                },
            ));
        }
        let (dir, _) = self.upload(OP, key, id)?;
        let _lock = lock(OP, key, &dir.join(LOCK_FILE))?;
        // Re-read under the lock: a completion or abort may have taken the upload meanwhile.
        self.upload(OP, key, id)?;
        let spooled = read_spool_index(&dir).map_err(|e| io_error(OP, key, e))?;
        let next = spooled.len() as u32 + 1;
        if part_number == next && !dir.join(part_name(part_number)).exists() {
            return self.append_to_spool(key, &dir, &spooled, part_number, bytes);
        }
        let staged = Staged::write(&self.tmp, bytes).map_err(|e| io_error(OP, key, e))?;
        // rename(2) replaces a part uploaded earlier under the same number, as S3 does (and
        // takes precedence over that number's bytes in the spool).
        match fs::rename(&staged.tmp.path, dir.join(part_name(part_number))) {
            Ok(()) => {}
            // The upload was completed or aborted meanwhile.
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Err(no_upload(key)),
            Err(e) => return Err(io_error(OP, key, e)),
        }
        fsync_dir(&dir).map_err(|e| io_error(OP, key, e))?;
        Ok(PartId {
            part_number,
            e_tag: staged.e_tag.clone(),
            size: bytes.len() as u64,
        })
    }

    /// Append the next part to the spool: bytes written at the end of the last recorded part
    /// and fsynced, then the index line (also fsynced), so that the index never names bytes
    /// that are not durable.
    fn append_to_spool(
        &self,
        key: &str,
        dir: &Path,
        spooled: &[Spooled],
        part_number: u32,
        bytes: &[u8],
    ) -> StoreResult<PartId> {
        const OP: &str = "upload part";
        let offset = spooled.last().map_or(0, |p| p.offset + p.len);
        let e_tag = etag_of(&blake3::hash(bytes));
        let append = || -> io::Result<()> {
            let spool = fs::OpenOptions::new()
                .create(true)
                .truncate(false)
                .write(true)
                .open(dir.join(SPOOL_FILE))?;
            // Drop anything a crash left after the last recorded part.
            spool.set_len(offset)?;
            write_all_at(&spool, bytes, offset)?;
            spool.sync_data()?;
            let mut index = fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(dir.join(SPOOL_INDEX))?;
            writeln!(index, "{part_number} {offset} {} {e_tag}", bytes.len())?;
            index.sync_data()?;
            fsync_dir(dir)
        };
        append().map_err(|e| io_error(OP, key, e))?;
        Ok(PartId {
            part_number,
            e_tag,
            size: bytes.len() as u64,
        })
    }

    pub(super) fn complete_multipart(
        &self,
        key: &ObjectKey,
        id: &str,
        parts: &[PartId],
        mode: &PutMode,
    ) -> StoreResult<PutOutcome> {
        const OP: &str = "complete multipart upload";
        let (dir, _) = self.upload(OP, key, id)?;
        let _lock = lock(OP, key, &dir.join(LOCK_FILE))?;
        let (dir, info) = self.upload(OP, key, id)?;
        let invalid = |e| own_error(OP, key, Retry::Permanent, e);
        if parts.is_empty() {
            return Err(invalid(EmbeddedError::InvalidPartList(
                "no parts were named",
            )));
        }
        if parts
            .windows(2)
            .any(|w| w[0].part_number >= w[1].part_number)
        {
            return Err(invalid(EmbeddedError::InvalidPartList(
                "part numbers must be strictly ascending",
            )));
        }
        let spooled = read_spool_index(&dir).map_err(|e| io_error(OP, key, e))?;
        let mut sources = Vec::with_capacity(parts.len());
        for p in parts {
            let file = dir.join(part_name(p.part_number));
            let source = if file.exists() {
                PartSource::File(file)
            } else {
                match spooled.get(p.part_number as usize - 1) {
                    Some(s) => PartSource::Spool(s.clone()),
                    None => {
                        return Err(invalid(EmbeddedError::InvalidPart {
                            part_number: p.part_number,
                            reason: "it was not uploaded",
                        }));
                    }
                }
            };
            sources.push(source);
        }
        let whole_spool = sources.len() == spooled.len()
            && sources.iter().all(|s| matches!(s, PartSource::Spool(_)));
        let staged = if whole_spool {
            self.take_spool(key, &dir, parts, &spooled)?
        } else {
            self.concatenate(key, &dir, parts, &sources)?
        };
        // The staged file is the object (link(2) and rename(2) publish this very inode): one
        // whose size is not the parts' is refused before anything is published.
        let staged_size = staged.stat().map_err(|e| io_error(OP, key, e))?.size;
        if let Err(differs) = check_completed(parts, staged_size) {
            warn!(store = "local", key = %key, upload_id = id, %differs, "completed upload is not what its parts make; nothing published");
            return Err(CompletionMismatch {
                differs,
                withdrawn: true,
            }
            .into_store(key));
        }

        // Claim the upload: rename(2) of its directory is atomic, so of two concurrent
        // completions (or a completion and an abort) exactly one moves it; the other sees
        // ENOENT, as S3 answers NoSuchUpload to the second.
        let claimed = self.tmp.join(format!("completing-{id}"));
        match fs::rename(&dir, &claimed) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Err(no_upload(key)),
            Err(e) => return Err(io_error(OP, key, e)),
        }
        let out = self.publish(OP, key, staged, mode, info.metadata);
        if out.is_err() {
            // A fault (not an outcome): hand the upload back so the caller can retry or abort.
            if let Err(e) = fs::rename(&claimed, &dir) {
                warn!(store = "local", key = %key, upload_id = id, error = %e, "restore upload after a failed completion");
            }
        } else if let Err(e) = fs::remove_dir_all(&claimed) {
            warn!(store = "local", key = %key, upload_id = id, error = %e, "remove completed upload (the sweep will retry)");
        }
        out
    }

    /// The spool holds exactly the named parts, in order: it becomes the object. Each part's
    /// recorded ETag must be the one the caller was given; the whole is hashed once for the
    /// object's ETag. The spool's bytes were fsynced part by part as they arrived.
    ///
    /// The staged file is a second link to the spool, not the spool moved away: if publishing
    /// then fails (a fault, not an outcome), the upload is handed back with its spool intact
    /// and can be completed again; on success the upload directory, spool name included, goes.
    fn take_spool(
        &self,
        key: &str,
        dir: &Path,
        parts: &[PartId],
        spooled: &[Spooled],
    ) -> StoreResult<Staged> {
        const OP: &str = "complete multipart upload";
        for (p, s) in parts.iter().zip(spooled) {
            if s.len != p.size {
                return Err(own_error(
                    OP,
                    key,
                    Retry::Permanent,
                    EmbeddedError::InvalidPart {
                        part_number: p.part_number,
                        reason: "its size differs from the uploaded part's",
                    },
                ));
            }
            if !s.e_tag.strong_eq(&p.e_tag) {
                return Err(own_error(
                    OP,
                    key,
                    Retry::Permanent,
                    EmbeddedError::InvalidPart {
                        part_number: p.part_number,
                        reason: "its ETag differs from the uploaded part's",
                    },
                ));
            }
        }
        let end = spooled.last().map_or(0, |s| s.offset + s.len);
        let take = || -> io::Result<Staged> {
            let path = self
                .tmp
                .join(format!("{}.tmp", uuid::Uuid::new_v4().simple()));
            fs::hard_link(dir.join(SPOOL_FILE), &path)?;
            let file = fs::OpenOptions::new().read(true).write(true).open(&path)?;
            let tmp = TempFile { path, file };
            // Bytes past the last recorded part (a crash mid-append) are not the object's.
            if tmp.file.metadata()?.len() != end {
                tmp.file.set_len(end)?;
                tmp.file.sync_data()?;
            }
            let e_tag = hash_path(&tmp.path)?;
            Ok(Staged { tmp, e_tag })
        };
        take().map_err(|e| io_error(OP, key, e))
    }

    /// Concatenate the named parts, in order, into one fsynced temp file, checking each part's
    /// ETag against the one the caller was given (S3's InvalidPart otherwise).
    fn concatenate(
        &self,
        key: &str,
        dir: &Path,
        parts: &[PartId],
        sources: &[PartSource],
    ) -> StoreResult<Staged> {
        const OP: &str = "complete multipart upload";
        let mut tmp = TempFile::create(&self.tmp).map_err(|e| io_error(OP, key, e))?;
        let mut whole = blake3::Hasher::new();
        let mut buf = vec![0u8; 1 << 20];
        for (p, source) in parts.iter().zip(sources) {
            let bad = |reason| {
                own_error(
                    OP,
                    key,
                    Retry::Permanent,
                    EmbeddedError::InvalidPart {
                        part_number: p.part_number,
                        reason,
                    },
                )
            };
            let (path, range) = match source {
                PartSource::File(path) => (path.clone(), None),
                PartSource::Spool(s) => (dir.join(SPOOL_FILE), Some((s.offset, s.len))),
            };
            let f = match File::open(&path) {
                Ok(f) => f,
                Err(e) if e.kind() == io::ErrorKind::NotFound => {
                    return Err(bad("it was not uploaded"));
                }
                Err(e) => return Err(io_error(OP, key, e)),
            };
            let mut f: Box<dyn io::Read> = match range {
                None => Box::new(f),
                Some((offset, len)) => {
                    use std::io::Seek as _;
                    let mut f = f;
                    f.seek(io::SeekFrom::Start(offset))
                        .map_err(|e| io_error(OP, key, e))?;
                    Box::new(f.take(len))
                }
            };
            let mut part = blake3::Hasher::new();
            let mut len = 0u64;
            loop {
                let n = match f.read(&mut buf) {
                    Ok(0) => break,
                    Ok(n) => n,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    Err(e) => return Err(io_error(OP, key, e)),
                };
                part.update(&buf[..n]);
                whole.update(&buf[..n]);
                len += n as u64;
                tmp.file
                    .write_all(&buf[..n])
                    .map_err(|e| io_error(OP, key, e))?;
            }
            if len != p.size {
                return Err(bad("its size differs from the uploaded part's"));
            }
            if !etag_of(&part.finalize()).strong_eq(&p.e_tag) {
                return Err(bad("its ETag differs from the uploaded part's"));
            }
        }
        tmp.file.sync_all().map_err(|e| io_error(OP, key, e))?;
        Ok(Staged {
            tmp,
            e_tag: etag_of(&whole.finalize()),
        })
    }

    pub(super) fn abort_multipart(&self, key: &ObjectKey, id: &str) -> StoreResult<()> {
        const OP: &str = "abort multipart upload";
        let (dir, _) = self.upload(OP, key, id)?;
        // Move it out of uploads/ first (atomic), then delete at leisure: a part upload racing
        // the abort then fails cleanly instead of repopulating a half-deleted directory.
        let doomed = self.tmp.join(format!("aborting-{id}"));
        match fs::rename(&dir, &doomed) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Err(no_upload(key)),
            Err(e) => return Err(io_error(OP, key, e)),
        }
        if let Err(e) = fs::remove_dir_all(&doomed) {
            warn!(store = "local", key = %key, upload_id = id, error = %e, "remove aborted upload (the sweep will retry)");
        }
        debug!(
            store = "local",
            key = %key,
            upload_id = id,
            "multipart upload aborted"
        );
        Ok(())
    }

    pub(super) fn list_multipart(
        &self,
        prefix: &str,
        older_than: Option<SystemTime>,
    ) -> StoreResult<Vec<MultipartUpload>> {
        const OP: &str = "list multipart uploads";
        tilegate_core::keys::check_list_prefix(prefix)?;
        let entries = fs::read_dir(&self.uploads).map_err(|e| io_error(OP, prefix, e))?;
        let mut out = Vec::new();
        for entry in entries {
            let entry = entry.map_err(|e| io_error(OP, prefix, e))?;
            let Some(id) = entry.file_name().to_str().map(str::to_owned) else {
                continue;
            };
            if !valid_id(&id) {
                continue;
            }
            // Unreadable or vanished (completed meanwhile): not an incomplete upload to report.
            let Ok(text) = fs::read(entry.path().join(INFO_FILE)) else {
                continue;
            };
            let Ok(info) = serde_json::from_slice::<UploadInfo>(&text) else {
                warn!(store = "local", upload_id = %id, "unreadable multipart upload record");
                continue;
            };
            let initiated =
                UNIX_EPOCH + Duration::from_millis(u64::try_from(info.initiated_ms).unwrap_or(0));
            if !info.key.starts_with(prefix) || older_than.is_some_and(|t| initiated >= t) {
                continue;
            }
            out.push(MultipartUpload {
                key: info.key,
                upload_id: id,
                initiated,
            });
        }
        out.sort_by(|a, b| {
            (&a.key, a.initiated, &a.upload_id).cmp(&(&b.key, b.initiated, &b.upload_id))
        });
        Ok(out)
    }
}

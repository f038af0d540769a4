//! Multipart uploads as GCS resumable sessions.
//!
//! A session is created with the mode's precondition (`ifGenerationMatch=0` for a Create),
//! which GCS evaluates again when the last chunk finalises the object: two racing large
//! uploads of one key end with exactly one object, and the loser's finalisation is a 412.
//! A session takes its bytes in order, in chunks of a multiple of 256 KiB except the last:
//! parts are appended to the session in part-number order, whole chunks are sent as they
//! fill, the remainder is held by this handle and sent with the object's total size at
//! completion. So a session is driven by the handle that started it (as the assembler does);
//! another handle can find it (`list_multipart`) and cancel it (`abort_multipart`), through
//! the record kept for it at `.tilegate/uploads/<upload-id>` — GCS itself cannot list
//! resumable sessions.
//!
//! GCS may persist fewer bytes of a chunk than it was sent: its `308 Resume Incomplete` names
//! the bytes it kept in `Range: bytes=0-<last>`, a `308` without `Range` means it kept none,
//! and the next request must start at `<last> + 1` (GCS docs, "Perform resumable uploads":
//! upload in multiple chunks; check the status of an upload). So the handle keeps every byte
//! GCS has not acknowledged and sends the next chunk (or the last one again) from the
//! persisted offset, giving up after a few requests in a row that persist nothing. At
//! finalisation the object's size is checked against the parts' sum: an object that differs
//! is deleted (that generation only) and the completion answers `CompletionMismatch`, never
//! `Written`.

use crate::error::{Failure, FailureOf as _, GcsError};
use crate::store::{GcsStore, expected_generation};
use bytes::Bytes;
use gcloud_storage::http::objects::Object;
use gcloud_storage::http::objects::download::Range as GcsRange;
use gcloud_storage::http::objects::get::GetObjectRequest;
use gcloud_storage::http::objects::upload::{UploadObjectRequest, UploadType};
use gcloud_storage::http::resumable_upload_client::{ChunkSize, UploadStatus};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::SystemTime;
use tilegate_core::object::{MultipartUpload, PartId, PutMode, PutOptions, PutOutcome};
use tilegate_core::{ETag, ObjectKey, Retry, StoreError, StoreResult};
use tilegate_retry::record::{
    RECORDS, initiated_at, no_upload, parse_upload_id, record_key, upload_id,
};
use tilegate_retry::{Answer, Decision, Idempotency, conditional_write, run};
use tracing::{info, warn};

/// A session's chunks are multiples of this, except the last.
const CHUNK: usize = 256 * 1024;

/// Requests in a row that a session may answer without persisting a byte more before the
/// upload is given up on (each of them already repeated by the retry policy on a fault).
const STALLS: u32 = 5;

/// What a session record holds.
#[derive(Debug, Serialize, Deserialize)]
struct Record {
    key: String,
    session: String,
    initiated_ms: u64,
}

/// One session this handle drives.
#[derive(Debug)]
struct Session {
    key: String,
    url: String,
    mode: PutMode,
    token: String,
    /// GCS refused the session's precondition when it was created (an object is there):
    /// parts are accepted without moving bytes and the completion reports the refusal.
    refused: bool,
    /// Bytes GCS has acknowledged as persisted: where the next request starts.
    persisted: u64,
    /// The parts' bytes from `persisted` on, sent or not: a byte leaves only when GCS reports
    /// it persisted (less than a chunk remains after each part).
    pending: Vec<u8>,
    parts: Vec<PartId>,
}

impl Session {
    /// GCS reports `now` bytes persisted after a request that sent the session up to `end`:
    /// drop what it acknowledged, keep the rest to send again from `now`.
    fn acknowledge(&mut self, now: u64, end: u64) -> StoreResult<()> {
        let resume = |detail: String| {
            StoreError::backend(
                "upload part",
                &self.key,
                Retry::Permanent,
                GcsError::Resume {
                    offset: self.persisted,
                    detail,
                },
            )
        };
        if now < self.persisted {
            return Err(resume(format!(
                "the session reports {now} bytes persisted after acknowledging {}",
                self.persisted
            )));
        }
        if now > end {
            return Err(resume(format!(
                "the session reports {now} bytes persisted of the {end} it was sent"
            )));
        }
        if now < end {
            info!(
                store = "gcs",
                key = %self.key,
                persisted = now,
                sent = end,
                "the session persisted fewer bytes than it was sent; resending from the persisted offset"
            );
        }
        let kept = usize::try_from(now - self.persisted).expect("within pending");
        self.pending.drain(..kept);
        self.persisted = now;
        Ok(())
    }
}

/// What a request to a session came to.
enum Sent {
    /// The object is finalised.
    Finished(Box<Object>),
    /// The session persisted this many bytes so far (`308 Resume Incomplete`).
    Persisted(u64),
}

impl Sent {
    fn of(status: UploadStatus) -> Self {
        match status {
            UploadStatus::Ok(o) => Self::Finished(Box::new(o)),
            UploadStatus::ResumeIncomplete(r) => Self::Persisted(r.last_byte + 1),
            // A 308 without a Range header: nothing is persisted yet.
            UploadStatus::NotStarted => Self::Persisted(0),
        }
    }
}

/// The error of a session that made no progress on [`STALLS`] requests in a row.
fn stalled(key: &str, offset: u64) -> StoreError {
    StoreError::backend(
        "upload part",
        key,
        Retry::Retryable,
        GcsError::Resume {
            offset,
            detail: format!("the session persisted nothing more on {STALLS} requests in a row"),
        },
    )
}

/// The sessions of a handle and its clones, by upload ID.
#[derive(Debug, Clone, Default)]
pub(crate) struct Sessions(Arc<Mutex<HashMap<String, Arc<tokio::sync::Mutex<Session>>>>>);

impl Sessions {
    fn get(&self, id: &str) -> Option<Arc<tokio::sync::Mutex<Session>>> {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(id)
            .cloned()
    }

    fn insert(&self, id: String, s: Session) {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(id, Arc::new(tokio::sync::Mutex::new(s)));
    }

    fn remove(&self, id: &str) -> Option<Arc<tokio::sync::Mutex<Session>>> {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(id)
    }
}

fn out_of_order(key: &str, detail: String) -> StoreError {
    StoreError::backend(
        "upload part",
        key,
        Retry::Permanent,
        GcsError::UploadOrder { detail },
    )
}

impl GcsStore {
    fn record_key(&self, id: &str) -> String {
        self.full(&record_key(id))
    }

    /// Start a resumable session with the mode's precondition and record it.
    pub(crate) async fn start_session(&self, key: &str, opts: &PutOptions) -> StoreResult<String> {
        let (metadata, token) = tilegate_retry::mode_metadata(opts);
        let if_generation = match &opts.mode {
            PutMode::Overwrite => None,
            PutMode::Create => Some(0),
            PutMode::Update(v) => {
                Some(expected_generation(v).ok_or(StoreError::NotImplemented {
                    operation: "a resumable update by a version that is not a generation",
                    implementer: "gcs",
                })?)
            }
        };
        let full = self.full(key);
        let req = UploadObjectRequest {
            bucket: self.bucket.clone(),
            if_generation_match: if_generation,
            ..UploadObjectRequest::default()
        };
        let object = Object {
            name: full.clone(),
            metadata: Some(metadata.into_iter().collect()),
            ..Object::default()
        };
        let kind = UploadType::Multipart(Box::new(object));
        let started = run(
            &self.retry,
            Idempotency::Idempotent,
            "create multipart upload",
            &full,
            |_| async {
                self.client
                    .prepare_resumable_upload(&req, &kind)
                    .await
                    .map_err(Failure::of)
            },
        )
        .await;
        let (url, refused) = match started {
            Ok(c) => (c.url().to_owned(), false),
            // GCS may evaluate the precondition when the session is created, too.
            Err(f) if f.answer == Answer::PreconditionFailed => (String::new(), true),
            Err(f) => return Err(f.into_store("create multipart upload", key)),
        };
        let id = upload_id();
        let initiated_ms = parse_upload_id(&id).map_or(0, |(ms, _)| ms);
        let record = Record {
            key: key.to_owned(),
            session: url.clone(),
            initiated_ms,
        };
        let body = Bytes::from(
            serde_json::to_vec(&record)
                .map_err(|e| StoreError::backend("record upload", key, Retry::Permanent, e))?,
        );
        self.upload(
            &self.record_key(&id),
            &body,
            &BTreeMap::new(),
            &PutMode::Create,
            Some(0),
        )
        .await
        .map_err(|f| f.into_store("record upload", key))?;
        self.sessions.insert(
            id.clone(),
            Session {
                key: key.to_owned(),
                url,
                mode: opts.mode.clone(),
                token,
                refused,
                persisted: 0,
                pending: Vec::new(),
                parts: Vec::new(),
            },
        );
        Ok(id)
    }

    /// The session `id` of `key`, or why it cannot be driven here.
    async fn session(&self, key: &str, id: &str) -> StoreResult<Arc<tokio::sync::Mutex<Session>>> {
        if let Some(s) = self.sessions.get(id) {
            if s.lock().await.key == key {
                return Ok(s);
            }
            return Err(no_upload(key));
        }
        match self.read_record(id).await? {
            Some(r) if r.key == key => Err(out_of_order(
                key,
                format!(
                    "upload {id} is a GCS resumable session written by the handle that started \
                     it; another handle can only list or abort it"
                ),
            )),
            _ => Err(no_upload(key)),
        }
    }

    /// Append part `n` to the session, sending every whole chunk.
    pub(crate) async fn session_part(
        &self,
        key: &str,
        id: &str,
        n: u32,
        bytes: Bytes,
    ) -> StoreResult<PartId> {
        let session = self.session(key, id).await?;
        let mut s = session.lock().await;
        let next = u32::try_from(s.parts.len()).unwrap_or(u32::MAX) + 1;
        if n != next {
            return Err(out_of_order(
                key,
                format!(
                    "a GCS resumable session takes its parts in order, once each: expected part \
                     {next}, got {n}"
                ),
            ));
        }
        let offset = s.persisted + s.pending.len() as u64;
        let part = PartId {
            part_number: n,
            e_tag: ETag::new(format!("{n}:{offset}+{}", bytes.len())),
            size: bytes.len() as u64,
        };
        // The part belongs to the session from here on, whatever the sending below comes to:
        // its bytes are in `pending`, so the same part number is not taken twice.
        s.parts.push(part.clone());
        if !s.refused {
            s.pending.extend_from_slice(&bytes);
            let mut stalls = 0;
            while !s.refused && s.pending.len() >= CHUNK {
                let before = s.persisted;
                self.send_chunks(&mut s).await?;
                stalls = if s.persisted == before { stalls + 1 } else { 0 };
                if stalls >= STALLS {
                    return Err(stalled(key, s.persisted));
                }
            }
        }
        Ok(part)
    }

    /// Send the whole chunks of `pending` from the persisted offset; keep what GCS did not
    /// persist of them.
    async fn send_chunks(&self, s: &mut Session) -> StoreResult<()> {
        let whole = s.pending.len() / CHUNK * CHUNK;
        let chunk = Bytes::copy_from_slice(&s.pending[..whole]);
        let first = s.persisted;
        let end = first + whole as u64;
        let client = self.client.get_resumable_upload(s.url.clone());
        let size = ChunkSize::new(first, end - 1, None);
        let status = run(
            &self.retry,
            Idempotency::Idempotent,
            "upload part",
            &s.key,
            |_| async {
                client
                    .upload_multiple_chunk(chunk.clone(), &size)
                    .await
                    .map_err(Failure::of)
            },
        )
        .await;
        match status.map(Sent::of) {
            Ok(Sent::Persisted(now)) => s.acknowledge(now, end),
            Ok(Sent::Finished(o)) => Err(StoreError::backend(
                "upload part",
                &s.key,
                Retry::Permanent,
                GcsError::UploadOrder {
                    detail: format!(
                        "the session answered a middle chunk with a finished object of {} bytes",
                        o.size
                    ),
                },
            )),
            Err(f) if f.answer == Answer::PreconditionFailed => {
                s.refused = true;
                Ok(())
            }
            Err(f) if matches!(f.status, Some(404 | 410)) => Err(no_upload(&s.key)),
            Err(f) => Err(f.into_store("upload part", &s.key)),
        }
    }

    /// Finalise the session with the remainder and the object's size; the precondition the
    /// session was created with is evaluated here.
    pub(crate) async fn finish_session(
        &self,
        key: &ObjectKey,
        id: &str,
        parts: &[PartId],
        mode: &PutMode,
    ) -> StoreResult<PutOutcome> {
        const OP: &str = "complete multipart upload";
        let session = self.session(key, id).await?;
        let mut s = session.lock().await;
        if s.parts != parts {
            return Err(StoreError::backend(
                OP,
                key,
                Retry::Permanent,
                GcsError::UploadOrder {
                    detail: "the parts differ from the ones uploaded to the session".to_owned(),
                },
            ));
        }
        if &s.mode != mode {
            return Err(StoreError::NotImplemented {
                operation: "completing a resumable session under another mode than it was started with",
                implementer: "gcs",
            });
        }
        let decision = if s.refused {
            match mode {
                PutMode::Update(_) => Decision::Superseded { resent: false },
                _ => Decision::AlreadyPresent { resent: false },
            }
        } else {
            self.finalise(&mut s, mode).await?
        };
        let token = s.token.clone();
        drop(s);
        self.sessions.remove(id);
        self.forget(key, id).await;
        let outcome = self.settle(key, decision, &token, OP).await?;
        tilegate_retry::verify_completion("gcs", self, (key, id), parts, outcome, |_| Ok(())).await
    }

    /// Send the rest of the session with the object's size until GCS finalises it, resending
    /// from the persisted offset whenever it keeps fewer bytes than it was sent.
    async fn finalise(&self, s: &mut Session, mode: &PutMode) -> StoreResult<Decision<Object>> {
        const OP: &str = "complete multipart upload";
        let client = self.client.get_resumable_upload(s.url.clone());
        let full = self.full(&s.key);
        let total = s.persisted + s.pending.len() as u64;
        let mut stalls = 0;
        loop {
            let tail = Bytes::copy_from_slice(&s.pending);
            let size = if tail.is_empty() {
                ChunkSize::new(total, total, Some(total))
            } else {
                ChunkSize::new(s.persisted, total - 1, Some(total))
            };
            let r = conditional_write(
                &self.retry,
                Idempotency::Idempotent,
                mode,
                &full,
                |_| async {
                    client
                        .upload_multiple_chunk(tail.clone(), &size)
                        .await
                        .map(Sent::of)
                        .map_err(Failure::of)
                },
            )
            .await;
            let now = match r {
                Ok(Decision::Applied(Sent::Finished(o))) => return Ok(Decision::Applied(*o)),
                Ok(Decision::Applied(Sent::Persisted(now))) => now,
                Ok(Decision::AlreadyPresent { resent }) => {
                    return Ok(Decision::AlreadyPresent { resent });
                }
                Ok(Decision::Superseded { resent }) => return Ok(Decision::Superseded { resent }),
                Err(f) if matches!(f.status, Some(404 | 410)) => return Err(no_upload(&s.key)),
                Err(f) => return Err(f.into_store(OP, &s.key)),
            };
            // Not finalised: GCS kept only `now` bytes; the rest goes again from there.
            let before = s.persisted;
            s.acknowledge(now, total)?;
            stalls = if s.persisted == before { stalls + 1 } else { 0 };
            if stalls >= STALLS {
                return Err(stalled(&s.key, s.persisted));
            }
        }
    }

    /// Cancel the session and drop its record. An upload already gone is not an error.
    pub(crate) async fn cancel_session(&self, key: &str, id: &str) -> StoreResult<()> {
        let url = match self.sessions.remove(id) {
            Some(s) => Some(s.lock().await.url.clone()),
            None => self
                .read_record(id)
                .await?
                .filter(|r| r.key == key)
                .map(|r| r.session),
        };
        if let Some(url) = url.filter(|u| !u.is_empty()) {
            let client = self.client.get_resumable_upload(url);
            match client.cancel().await.map_err(Failure::of) {
                Ok(()) => {}
                Err(f) if matches!(f.status, Some(404 | 410)) => {}
                Err(f) => return Err(f.into_store("abort multipart upload", key)),
            }
        }
        self.forget(key, id).await;
        info!(
            store = "gcs",
            key,
            upload_id = id,
            "multipart upload aborted"
        );
        Ok(())
    }

    /// Delete an upload's record (best effort: a record left behind lists an upload that
    /// `abort_multipart` then cancels as already gone).
    async fn forget(&self, key: &str, id: &str) {
        use gcloud_storage::http::objects::delete::DeleteObjectRequest;
        let req = DeleteObjectRequest {
            bucket: self.bucket.clone(),
            object: self.record_key(id),
            ..DeleteObjectRequest::default()
        };
        let r = run(
            &self.retry,
            Idempotency::Idempotent,
            "forget upload",
            key,
            |_| async { self.client.delete_object(&req).await.map_err(Failure::of) },
        )
        .await;
        if let Err(f) = r
            && f.answer != Answer::NoSuchKey
        {
            warn!(store = "gcs", key, upload_id = id, error = %f, "could not delete the upload's record");
        }
    }

    async fn read_record(&self, id: &str) -> StoreResult<Option<Record>> {
        if !id.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-') || id.len() < 14 {
            return Ok(None);
        }
        let req = GetObjectRequest {
            bucket: self.bucket.clone(),
            object: self.record_key(id),
            ..GetObjectRequest::default()
        };
        let r = run(
            &self.retry,
            Idempotency::Idempotent,
            "read upload record",
            id,
            |_| async {
                self.client
                    .download_object(&req, &GcsRange::default())
                    .await
                    .map_err(Failure::of)
            },
        )
        .await;
        match r {
            Ok(body) => serde_json::from_slice(&body).map(Some).map_err(|e| {
                StoreError::backend(
                    "read upload record",
                    id,
                    Retry::Permanent,
                    GcsError::UploadRecord {
                        detail: e.to_string(),
                    },
                )
            }),
            Err(f) if f.answer == Answer::NoSuchKey => Ok(None),
            Err(f) => Err(f.into_store("read upload record", id)),
        }
    }

    /// The recorded uploads of keys under `prefix`, optionally only those initiated before
    /// `older_than`.
    pub(crate) async fn recorded_sessions(
        &self,
        prefix: &str,
        older_than: Option<SystemTime>,
    ) -> StoreResult<Vec<MultipartUpload>> {
        let records = self.full(RECORDS);
        let ids: Vec<String> = self
            .list_full("list multipart uploads", &records, prefix)
            .await?
            .into_iter()
            .filter_map(|o| o.name.strip_prefix(&records).map(str::to_owned))
            .collect();
        let mut out = Vec::new();
        for id in ids {
            let Some(r) = self.read_record(&id).await? else {
                continue;
            };
            let initiated = initiated_at(r.initiated_ms);
            if r.key.starts_with(prefix) && older_than.is_none_or(|t| initiated < t) {
                out.push(MultipartUpload {
                    key: r.key,
                    upload_id: id,
                    initiated,
                });
            }
        }
        out.sort_by(|a, b| (&a.key, a.initiated).cmp(&(&b.key, b.initiated)));
        Ok(out)
    }
}

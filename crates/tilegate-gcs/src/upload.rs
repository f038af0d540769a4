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

use crate::error::{Failure, GcsError};
use crate::store::{GcsStore, expected_generation};
use bytes::Bytes;
use gcloud_storage::http::objects::Object;
use gcloud_storage::http::objects::download::Range as GcsRange;
use gcloud_storage::http::objects::get::GetObjectRequest;
use gcloud_storage::http::objects::list::ListObjectsRequest;
use gcloud_storage::http::objects::upload::{UploadObjectRequest, UploadType};
use gcloud_storage::http::resumable_upload_client::{ChunkSize, UploadStatus};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::SystemTime;
use tilegate_core::object::{MultipartUpload, PartId, PutMode, PutOptions, PutOutcome};
use tilegate_core::{ETag, Retry, StoreError, StoreResult};
use tilegate_retry::record::{
    RECORDS, initiated_at, no_upload, parse_upload_id, record_key, upload_id,
};
use tilegate_retry::{Answer, Decision, Idempotency, conditional_write, run};
use tracing::{info, warn};

/// A session's chunks are multiples of this, except the last.
const CHUNK: usize = 256 * 1024;

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
    /// Bytes the session has persisted.
    sent: u64,
    /// Bytes of the parts not yet sent (less than a chunk after each part).
    pending: Vec<u8>,
    parts: Vec<PartId>,
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
        let (stamped, token) = tilegate_retry::stamp(opts);
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
        let metadata = match opts.mode {
            PutMode::Overwrite => opts.metadata.clone(),
            _ => stamped,
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
                sent: 0,
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
        let offset = s.sent + s.pending.len() as u64;
        let part = PartId {
            part_number: n,
            e_tag: ETag::new(format!("{n}:{offset}+{}", bytes.len())),
        };
        if !s.refused {
            s.pending.extend_from_slice(&bytes);
            let whole = s.pending.len() / CHUNK * CHUNK;
            if whole > 0 {
                let chunk = Bytes::from(s.pending.drain(..whole).collect::<Vec<u8>>());
                self.send_chunk(&mut s, chunk).await?;
            }
        }
        s.parts.push(part.clone());
        Ok(part)
    }

    /// Send one whole chunk at the session's offset.
    async fn send_chunk(&self, s: &mut Session, chunk: Bytes) -> StoreResult<()> {
        let first = s.sent;
        let last = first + chunk.len() as u64 - 1;
        let client = self.client.get_resumable_upload(s.url.clone());
        let size = ChunkSize::new(first, last, None);
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
        match status {
            Ok(UploadStatus::ResumeIncomplete(r)) => {
                s.sent = r.last_byte + 1;
                Ok(())
            }
            Ok(other) => Err(StoreError::backend(
                "upload part",
                &s.key,
                Retry::Permanent,
                GcsError::UploadOrder {
                    detail: format!("the session answered a middle chunk with {other:?}"),
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
        key: &str,
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
            let tail = Bytes::from(std::mem::take(&mut s.pending));
            let total = s.sent + tail.len() as u64;
            let size = if tail.is_empty() {
                ChunkSize::new(total, total, Some(total))
            } else {
                ChunkSize::new(s.sent, total - 1, Some(total))
            };
            let client = self.client.get_resumable_upload(s.url.clone());
            let full = self.full(key);
            let r = conditional_write(
                &self.retry,
                Idempotency::Idempotent,
                mode,
                &full,
                |_| async {
                    match client.upload_multiple_chunk(tail.clone(), &size).await {
                        Ok(UploadStatus::Ok(o)) => Ok(o),
                        Ok(other) => Err(Failure::own(
                            Answer::Transient,
                            GcsError::UploadOrder {
                                detail: format!(
                                    "the last chunk did not finalise the object: {other:?}"
                                ),
                            },
                        )),
                        Err(e) => Err(Failure::of(e)),
                    }
                },
            )
            .await;
            match r {
                Ok(d) => d,
                Err(f) if matches!(f.status, Some(404 | 410)) => return Err(no_upload(key)),
                Err(f) => return Err(f.into_store(OP, key)),
            }
        };
        let token = s.token.clone();
        drop(s);
        self.sessions.remove(id);
        self.forget(key, id).await;
        self.settle(key, decision, &token, OP).await
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
        let mut ids = Vec::new();
        let mut page_token: Option<String> = None;
        loop {
            let req = ListObjectsRequest {
                bucket: self.bucket.clone(),
                prefix: Some(records.clone()),
                page_token: page_token.clone(),
                ..ListObjectsRequest::default()
            };
            let page = run(
                &self.retry,
                Idempotency::Idempotent,
                "list multipart uploads",
                &records,
                |_| async { self.client.list_objects(&req).await.map_err(Failure::of) },
            )
            .await
            .map_err(|f| f.into_store("list multipart uploads", prefix))?;
            ids.extend(
                page.items
                    .unwrap_or_default()
                    .into_iter()
                    .filter_map(|o| o.name.strip_prefix(&records).map(str::to_owned)),
            );
            page_token = page.next_page_token.filter(|t| !t.is_empty());
            if page_token.is_none() {
                break;
            }
        }
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

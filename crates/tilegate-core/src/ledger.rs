//! The ledger of regenerated outputs: immutable attempt keys, the pointer that publishes one of
//! them, and the rows that decide retention and deletion.
//!
//! Deterministic tiles are written once and never change; they need no ledger. An output that
//! is legitimately produced again with other bytes (a window re-rendered, a preview) gets an
//! attempt: a fresh [`AttemptId`], an immutable key
//! ([`crate::Prefix::attempt_key`]), and an [`AttemptRow`] written *before* its upload starts.
//! Readers follow the [`Pointer`], moved from one attempt to the next by one conditional
//! table write ([`LedgerTable::publish`]). Garbage collection marks due rows
//! ([`LedgerTable::mark`]), then deletes each row's exact key at its recorded version — never
//! from a listing, never by prefix.
//!
//! The invariant every backend keeps: a pointer names attempt A **iff** A's row is
//! `accepted`. `publish` and `mark` change the pointer and the rows it concerns in one
//! transaction, so a crash leaves either the old state or the new one, never an accepted row
//! nobody points at (it would never expire) or a pointer at a row GC may delete.

use crate::error::StoreResult;
use crate::etag::ETag;
use crate::grid::Window;
use crate::id::JobId;
use crate::keys::Tenant;
use crate::table::{CreateOutcome, OutputRef, UpdateOutcome, Versioned};
use crate::{Prefix, UnixMillis};
use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use std::fmt;

mod publish;

pub use publish::{Begun, Publish, PublishBy, PublishOutcome, PublishWrites};

/// An attempt's identity: 32 lowercase hex characters (a random 128-bit value). A transport
/// retry of the same attempt carries the same ID; a new regeneration makes a new one.
#[derive(
    Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(try_from = "String", into = "String")]
pub struct AttemptId(String);

/// A string that is not an attempt ID.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("parse attempt id `{0}`: expected 32 lowercase hex characters")]
pub struct AttemptIdError(pub String);

impl AttemptId {
    /// The attempt ID of a random 128-bit value (the caller draws it).
    pub fn from_random(v: u128) -> Self {
        Self(format!("{v:032x}"))
    }

    pub fn parse(s: &str) -> Result<Self, AttemptIdError> {
        if crate::id::is_hex128(s) {
            Ok(Self(s.to_owned()))
        } else {
            Err(AttemptIdError(s.chars().take(80).collect()))
        }
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl TryFrom<String> for AttemptId {
    type Error = AttemptIdError;
    fn try_from(s: String) -> Result<Self, Self::Error> {
        Self::parse(&s)
    }
}

impl From<AttemptId> for String {
    fn from(a: AttemptId) -> String {
        a.0
    }
}

impl fmt::Display for AttemptId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// What an attempt regenerates: one window's tile, or the job's scene.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Hash,
    PartialOrd,
    Ord,
    Serialize,
    Deserialize,
    schemars::JsonSchema,
)]
#[serde(try_from = "String", into = "String")]
pub enum Subject {
    Window(Window),
    Scene,
}

impl Subject {
    /// `RRRR_CCCC` for a window, `scene` for the scene.
    pub fn parse(s: &str) -> Option<Self> {
        if s == "scene" {
            Some(Self::Scene)
        } else {
            Window::parse(s).map(Self::Window)
        }
    }
}

impl fmt::Display for Subject {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Window(w) => w.fmt(f),
            Self::Scene => f.write_str("scene"),
        }
    }
}

impl TryFrom<String> for Subject {
    type Error = String;
    fn try_from(s: String) -> Result<Self, String> {
        Self::parse(&s).ok_or_else(|| format!("`{s}` is neither a window RRRR_CCCC nor `scene`"))
    }
}

impl From<Subject> for String {
    fn from(s: Subject) -> String {
        s.to_string()
    }
}

/// Where an attempt is in its life. `accepted` iff a pointer names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum AttemptState {
    /// The row is written; the upload may be running, finished, or dead.
    Uploading,
    /// The object is in place with the recorded size and ETag; not (yet) published.
    Uploaded,
    /// A pointer names it.
    Accepted,
    /// It was accepted and a newer attempt replaced it at `retired_at`.
    Retired,
    /// GC marked it; the sweep deletes its exact key.
    Deleting,
    /// Its object is gone, verified at `deletion_verified_at`.
    Deleted,
}

impl AttemptState {
    pub const ALL: [Self; 6] = [
        Self::Uploading,
        Self::Uploaded,
        Self::Accepted,
        Self::Retired,
        Self::Deleting,
        Self::Deleted,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Self::Uploading => "uploading",
            Self::Uploaded => "uploaded",
            Self::Accepted => "accepted",
            Self::Retired => "retired",
            Self::Deleting => "deleting",
            Self::Deleted => "deleted",
        }
    }
}

impl fmt::Display for AttemptState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Milliseconds in an hour and a day, for retention arithmetic.
pub const HOUR_MS: u64 = 3_600_000;
pub const DAY_MS: u64 = 24 * HOUR_MS;

/// How long an attempt's object is kept, captured on its row when it is created (a policy
/// changed later does not move deadlines already recorded).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Retention {
    /// A preview: deleted this long after creation, published or not (deadlines shorter than
    /// a day are normal — bucket lifecycle rules cannot express them).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preview_ms: Option<u64>,
    /// Kept this long after logical retirement (or after upload, if never published).
    pub retired_ms: u64,
    /// An `uploading` row younger than this is presumed alive; longer than the longest upload.
    pub upload_grace_ms: u64,
}

impl Default for Retention {
    fn default() -> Self {
        Self {
            preview_ms: None,
            retired_ms: 7 * DAY_MS,
            upload_grace_ms: 6 * HOUR_MS,
        }
    }
}

fn after(t: UnixMillis, ms: u64) -> UnixMillis {
    t.saturating_add(i64::try_from(ms).unwrap_or(i64::MAX))
}

/// One regenerated output.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct AttemptRow {
    pub tenant: Tenant,
    pub job_id: JobId,
    pub subject: Subject,
    pub attempt: AttemptId,
    /// The exact object key; the only key GC ever deletes for this row.
    pub key: String,
    pub state: AttemptState,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub e_tag: Option<ETag>,
    pub created_at: UnixMillis,
    /// When a worker began the upload ([`AttemptRow::started`]); `None` for an order still
    /// waiting in the queue, which has no deadline yet (there is nothing to collect).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub upload_started_at: Option<UnixMillis>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uploaded_at: Option<UnixMillis>,
    /// When a pointer first named it. Once set it stays: an attempt that was ever published
    /// is never published again by an order, only by an explicit accept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub published_at: Option<UnixMillis>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retired_at: Option<UnixMillis>,
    /// When GC may delete it; `None` while it is published (and not a preview) or deleted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delete_after: Option<UnixMillis>,
    pub retention: Retention,
    /// Whether the regeneration asked to publish the attempt once uploaded, recorded when the
    /// row was written by whoever asked. A queue message carries a copy of this wish, and the
    /// message is not trusted: a worker publishes only what the row says. `None` on rows
    /// written before this was kept (the message's copy decides for them).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub accept: Option<bool>,
    /// A legal hold: GC never marks or sweeps the row while it is set.
    #[serde(default)]
    pub legal_hold: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub marked_at: Option<UnixMillis>,
    /// Set by the sweep's first conditional write; from then on the row cannot be published.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sweep_started_at: Option<UnixMillis>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deletion_verified_at: Option<UnixMillis>,
}

impl AttemptRow {
    /// The row written by whoever is about to upload at once: `uploading`, its upload begun
    /// `now` and due after the upload grace (see [`Self::queued`] for an order that waits).
    pub fn begin(
        tenant: Tenant,
        job_id: JobId,
        subject: Subject,
        attempt: AttemptId,
        root: &Prefix,
        retention: Retention,
        now: UnixMillis,
    ) -> Self {
        let key = root.attempt_key(&job_id, &subject, &attempt).into_string();
        Self {
            tenant,
            job_id,
            subject,
            attempt,
            key,
            state: AttemptState::Uploading,
            size: None,
            e_tag: None,
            created_at: now,
            upload_started_at: Some(now),
            uploaded_at: None,
            published_at: None,
            retired_at: None,
            delete_after: Some(after(now, retention.upload_grace_ms)),
            retention,
            accept: None,
            legal_hold: false,
            marked_at: None,
            sweep_started_at: None,
            deletion_verified_at: None,
        }
    }

    /// The row written before an order is sent to the queue: `uploading`, but with no upload
    /// begun and so no deadline. The upload grace counts from the moment a worker begins the
    /// upload ([`Self::started`]), never from enqueueing: an order that waits in a backlog,
    /// in retries or in the dead-letter queue for longer than the grace is not collected
    /// under it. Until a worker starts, no object can exist at the key (a worker starts the
    /// row before it writes), so there is nothing for GC to delete.
    pub fn queued(
        tenant: Tenant,
        job_id: JobId,
        subject: Subject,
        attempt: AttemptId,
        root: &Prefix,
        retention: Retention,
        now: UnixMillis,
    ) -> Self {
        Self::begin(tenant, job_id, subject, attempt, root, retention, now).waiting()
    }

    /// This row as an order's that no worker has taken yet (see [`Self::queued`]).
    pub fn waiting(self) -> Self {
        Self {
            upload_started_at: None,
            delete_after: None,
            ..self
        }
    }

    /// A worker begins (or, on a redelivery, begins again) the upload at `now`: due after
    /// the upload grace from now.
    pub fn started(&self, now: UnixMillis) -> Self {
        Self {
            upload_started_at: Some(now),
            delete_after: Some(after(now, self.retention.upload_grace_ms)),
            ..self.clone()
        }
    }

    /// Whether a pointer ever named it (rows written before `published_at` existed: retired
    /// or accepted).
    pub fn ever_published(&self) -> bool {
        self.published_at.is_some()
            || self.retired_at.is_some()
            || matches!(self.state, AttemptState::Accepted | AttemptState::Retired)
    }

    /// The order attempts were begun in (creation time, then attempt ID): what "newer" means
    /// when an order publishes.
    pub fn begun(&self) -> (UnixMillis, &AttemptId) {
        (self.created_at, &self.attempt)
    }

    /// `job/subject/attempt`, for logs and errors.
    pub fn shown(&self) -> String {
        format!("{}/{}/{}", self.job_id, self.subject, self.attempt)
    }

    /// The preview deadline, if this is a preview.
    pub fn preview_deadline(&self) -> Option<UnixMillis> {
        self.retention
            .preview_ms
            .map(|ms| after(self.created_at, ms))
    }

    /// The upload finished with this object.
    pub fn uploaded(&self, size: u64, e_tag: ETag, now: UnixMillis) -> Self {
        Self {
            state: AttemptState::Uploaded,
            size: Some(size),
            e_tag: Some(e_tag),
            uploaded_at: Some(now),
            delete_after: Some(
                self.preview_deadline()
                    .unwrap_or_else(|| after(now, self.retention.retired_ms)),
            ),
            ..self.clone()
        }
    }

    /// Published at `now`: kept while referenced (a preview still ends at its deadline).
    pub fn accepted(&self, now: UnixMillis) -> Self {
        Self {
            state: AttemptState::Accepted,
            published_at: Some(self.published_at.unwrap_or(now)),
            retired_at: None,
            delete_after: self.preview_deadline(),
            marked_at: None,
            ..self.clone()
        }
    }

    /// Replaced by a newer attempt at `now`: due `retired_ms` after that (a preview at its
    /// deadline, if sooner).
    pub fn retired(&self, now: UnixMillis) -> Self {
        let due = after(now, self.retention.retired_ms);
        Self {
            state: AttemptState::Retired,
            retired_at: Some(now),
            delete_after: Some(self.preview_deadline().map_or(due, |p| p.min(due))),
            ..self.clone()
        }
    }

    /// Marked by GC.
    pub fn marked(&self, now: UnixMillis) -> Self {
        Self {
            state: AttemptState::Deleting,
            marked_at: Some(now),
            ..self.clone()
        }
    }

    /// Claimed by a sweep: no longer publishable.
    pub fn sweeping(&self, now: UnixMillis) -> Self {
        Self {
            sweep_started_at: Some(now),
            ..self.clone()
        }
    }

    /// Its object is verified gone.
    pub fn deleted(&self, now: UnixMillis) -> Self {
        Self {
            state: AttemptState::Deleted,
            delete_after: None,
            deletion_verified_at: Some(now),
            ..self.clone()
        }
    }

    /// Whether a pointer may be moved onto it: its object is in place and no sweep has
    /// started (a pointer moved back onto a marked row wins over the sweep).
    pub fn publishable(&self) -> bool {
        match self.state {
            AttemptState::Uploaded | AttemptState::Retired => true,
            AttemptState::Deleting => self.sweep_started_at.is_none() && self.e_tag.is_some(),
            AttemptState::Uploading | AttemptState::Accepted | AttemptState::Deleted => false,
        }
    }

    /// Whether GC should consider it at `now`: past its deadline and not on hold. (The
    /// backends' due index holds exactly these rows, less the `now` test.)
    pub fn in_due_index(&self) -> bool {
        !self.legal_hold && self.state != AttemptState::Deleted && self.delete_after.is_some()
    }

    /// The object, once uploaded.
    pub fn output(&self) -> Option<OutputRef> {
        Some(OutputRef {
            key: self.key.clone(),
            e_tag: self.e_tag.clone()?,
            size: self.size?,
        })
    }
}

/// A regeneration carried in a window message. Its row was written (`uploading`) by whoever
/// sent the message, before any upload could start.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct AttemptOrder {
    pub id: AttemptId,
    /// Publish the attempt once uploaded (moving the pointer from wherever it is then).
    #[serde(default)]
    pub accept: bool,
}

/// What readers follow: the accepted attempt of one window or scene.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Pointer {
    pub tenant: Tenant,
    pub job_id: JobId,
    pub subject: Subject,
    pub attempt: AttemptId,
    pub output: OutputRef,
    pub moved_at: UnixMillis,
    /// The newest attempt (in the order they were begun) this pointer has ever named: an
    /// order never moves it onto one begun before that. `None` on pointers written before
    /// this was kept (the attempt named then stands in).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub newest: Option<Begun>,
}

/// One page of rows due for GC.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct DuePage {
    pub rows: Vec<Versioned<AttemptRow>>,
    /// Where the next page starts; `None` after the last.
    pub next: Option<String>,
}

/// The ledger table contract, on SQLite and DynamoDB.
#[async_trait]
pub trait LedgerTable: Send + Sync + fmt::Debug {
    /// Create the row if absent (the idempotency key is the attempt ID: a retry finds its own
    /// row and continues).
    async fn create_attempt(&self, row: &AttemptRow) -> StoreResult<CreateOutcome<AttemptRow>>;
    async fn get_attempt(
        &self,
        job: &JobId,
        subject: Subject,
        attempt: &AttemptId,
    ) -> StoreResult<Option<Versioned<AttemptRow>>>;
    /// Replace the row only if it is at `expected`. Not for publishing or marking: those move
    /// the pointer too ([`Self::publish`], [`Self::mark`]).
    async fn update_attempt(
        &self,
        row: &AttemptRow,
        expected: u64,
    ) -> StoreResult<UpdateOutcome<AttemptRow>>;
    /// Every attempt row of a job (any order).
    async fn list_attempts(&self, job: &JobId) -> StoreResult<Vec<Versioned<AttemptRow>>>;
    async fn get_pointer(
        &self,
        job: &JobId,
        subject: Subject,
    ) -> StoreResult<Option<Versioned<Pointer>>>;
    /// Every pointer of a job (any order).
    async fn list_pointers(&self, job: &JobId) -> StoreResult<Vec<Versioned<Pointer>>>;
    /// In one conditional write: move the pointer from `seen` to `attempt` (which must be
    /// publishable), make `attempt` accepted and retire `seen`.
    async fn publish(&self, p: &Publish) -> StoreResult<PublishOutcome>;
    /// GC's mark, in one conditional write: the row, if still at `row.version`, becomes
    /// `deleting`; if it was accepted (an expired preview), the pointer that names it is
    /// removed in the same write.
    async fn mark(
        &self,
        row: &Versioned<AttemptRow>,
        now: UnixMillis,
    ) -> StoreResult<UpdateOutcome<AttemptRow>>;
    /// Rows with `delete_after <= now` that are not held or deleted, across every job, from
    /// an index (never a scan), at most `limit` per page.
    async fn due(
        &self,
        now: UnixMillis,
        cursor: Option<&str>,
        limit: usize,
    ) -> StoreResult<DuePage>;
    /// The earliest deadline among those rows (`None`: nothing is due), from the index.
    async fn oldest_due(&self, now: UnixMillis) -> StoreResult<Option<UnixMillis>>;
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(super) fn row() -> AttemptRow {
        AttemptRow::begin(
            Tenant::default(),
            JobId::derive("u", "e", "r", "p"),
            Subject::Window(Window::new(1, 2)),
            AttemptId::from_random(7),
            &Prefix::default(),
            Retention::default(),
            1_000,
        )
    }

    #[test]
    fn keys_and_ids() {
        let r = row();
        assert_eq!(
            r.key,
            format!(
                "tilegate/attempts/{}/0001_0002/attempt-{}.tif",
                r.job_id,
                "0".repeat(31) + "7"
            )
        );
        assert!(AttemptId::parse("XYZ").is_err());
        assert_eq!(Subject::parse("scene"), Some(Subject::Scene));
        assert_eq!(
            Subject::parse("0003_0004"),
            Some(Subject::Window(Window::new(3, 4)))
        );
    }

    #[test]
    fn deadlines_follow_the_policy() {
        let r = row();
        assert_eq!(r.delete_after, Some(1_000 + 6 * HOUR_MS as i64));
        let up = r.uploaded(5, ETag::new("\"e\""), 2_000);
        assert_eq!(up.delete_after, Some(2_000 + 7 * DAY_MS as i64));
        assert!(up.publishable());
        let acc = up.accepted(3_000);
        assert_eq!(acc.delete_after, None, "kept while referenced");
        let ret = acc.retired(10_000);
        assert_eq!(ret.delete_after, Some(10_000 + 7 * DAY_MS as i64));
        let preview = AttemptRow {
            retention: Retention {
                preview_ms: Some(6 * HOUR_MS),
                ..Retention::default()
            },
            ..r
        }
        .uploaded(5, ETag::new("\"e\""), 2_000)
        .accepted(3_000);
        assert_eq!(preview.delete_after, Some(1_000 + 6 * HOUR_MS as i64));
        let marked = ret.marked(20_000);
        assert!(marked.publishable(), "a re-link before the sweep wins");
        assert!(!marked.sweeping(20_001).publishable());
    }

    #[test]
    fn an_order_waits_without_a_deadline_until_a_worker_starts_it() {
        let r = row();
        let q = AttemptRow::queued(
            r.tenant.clone(),
            r.job_id.clone(),
            r.subject,
            r.attempt.clone(),
            &Prefix::default(),
            Retention::default(),
            1_000,
        );
        assert_eq!((q.delete_after, q.upload_started_at), (None, None));
        assert!(!q.in_due_index());
        let s = q.started(50 * DAY_MS as i64);
        assert_eq!(
            s.delete_after,
            Some(50 * DAY_MS as i64 + 6 * HOUR_MS as i64)
        );
        assert!(s.in_due_index());
    }
}

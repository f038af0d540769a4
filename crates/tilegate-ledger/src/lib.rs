//! Regenerated outputs over the ledger (see `tilegate_core::ledger` for the rows and the
//! invariant): [`attempt`] begins an attempt, uploads its object and publishes it by moving
//! the pointer; [`gc`] marks due rows and sweeps their exact keys; [`reconcile`] compares a
//! job's objects with its rows and deletes nothing; [`url`] signs a tenant's read of an
//! accepted attempt.
//!
//! Every function takes the time as an argument, so retention is tested with an injected clock.

pub mod attempt;
pub mod gc;
pub mod reconcile;
pub mod url;

use tilegate_core::Reason;
use tilegate_core::ledger::{AttemptId, AttemptState, Subject};
use tilegate_core::table::Versioned;
use tilegate_core::{JobId, StoreError, Tenant};

/// Why a ledger operation could not go on. Each names what to do next.
#[derive(Debug, thiserror::Error)]
pub enum LedgerError {
    #[error("ledger: no job {0}")]
    UnknownJob(JobId),
    #[error("ledger: {subject} is outside job {job}'s grid")]
    OutsideGrid { job: JobId, subject: Subject },
    #[error("ledger: no attempt {attempt} of {job} {subject}")]
    UnknownAttempt {
        job: JobId,
        subject: Subject,
        attempt: AttemptId,
    },
    #[error(
        "ledger: attempt {attempt} is {state}, not uploading: it cannot be uploaded again \
         (regenerate makes a new attempt)"
    )]
    NotUploading {
        attempt: AttemptId,
        state: AttemptState,
    },
    #[error(
        "ledger: attempt {attempt} was collected while it uploaded (its row is {state}); the \
         object it wrote was deleted again — regenerate makes a new attempt"
    )]
    CollectedWhileUploading {
        attempt: AttemptId,
        state: AttemptState,
    },
    #[error("ledger: attempt {attempt} is already being deleted ({state}); it cannot be held")]
    BeingDeleted {
        attempt: AttemptId,
        state: AttemptState,
    },
    #[error(
        "ledger: `{key}` holds an object that is not attempt {attempt}'s (its attempt token is \
         {found:?}); nothing was overwritten"
    )]
    KeyCollision {
        key: String,
        attempt: AttemptId,
        found: Option<String>,
    },
    #[error(
        "ledger: tenant `{asked}` may not read job {job} {subject}: it belongs to another tenant"
    )]
    NotYourTenant {
        asked: Tenant,
        job: JobId,
        subject: Subject,
    },
    #[error("ledger: {job} {subject} has no accepted attempt (regenerate or accept one first)")]
    NothingAccepted { job: JobId, subject: Subject },
    #[error("ledger: `{key}` is past its retention deadline ({deadline} ms): no URL is issued")]
    Expired {
        key: String,
        deadline: tilegate_core::UnixMillis,
    },
    #[error("ledger: storage")]
    Store(#[from] StoreError),
}

impl LedgerError {
    /// A stable kebab-case name, for `--json` and exit codes.
    pub fn reason_code(&self) -> Reason {
        match self {
            Self::UnknownJob(_) => Reason::UnknownJob,
            Self::OutsideGrid { .. } => Reason::WindowOutsideScene,
            Self::UnknownAttempt { .. } => Reason::UnknownAttempt,
            Self::NotUploading { .. } => Reason::AttemptNotUploading,
            Self::CollectedWhileUploading { .. } => Reason::AttemptCollected,
            Self::KeyCollision { .. } => Reason::AttemptKeyCollision,
            Self::BeingDeleted { .. } => Reason::AttemptBeingDeleted,
            Self::NotYourTenant { .. } => Reason::NotYourTenant,
            Self::NothingAccepted { .. } => Reason::NothingAccepted,
            Self::Expired { .. } => Reason::RetentionExpired,
            Self::Store(e) => Reason::storage(e.is_retryable()),
        }
    }
}

/// The rows of a result, by state: what `status` and `/metrics` report.
pub fn count_by_state<'a>(
    rows: impl IntoIterator<Item = &'a Versioned<tilegate_core::ledger::AttemptRow>>,
) -> std::collections::BTreeMap<&'static str, u64> {
    let mut out: std::collections::BTreeMap<_, _> =
        AttemptState::ALL.iter().map(|s| (s.name(), 0)).collect();
    for r in rows {
        *out.entry(r.row.state.name()).or_default() += 1;
    }
    out
}

/// The job, subject and attempt of an attempt key (`…/attempts/JOB/SUBJECT/attempt-ID.tif`),
/// for reports that start from a key (stale uploads); `None` for any other key.
pub fn parse_attempt_key(key: &str) -> Option<(JobId, Subject, AttemptId)> {
    let mut segs = key.rsplit('/');
    let file = segs.next()?;
    let subject = Subject::parse(segs.next()?)?;
    let job = JobId::parse(segs.next()?).ok()?;
    if segs.next()? != "attempts" {
        return None;
    }
    let id = file.strip_prefix("attempt-")?.strip_suffix(".tif")?;
    Some((job, subject, AttemptId::parse(id).ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attempt_keys_parse_back() {
        let job = JobId::derive("u", "e", "r", "p");
        let id = AttemptId::from_random(5);
        let key = tilegate_core::Prefix::default().attempt_key(&job, &Subject::Scene, &id);
        assert_eq!(
            parse_attempt_key(&key),
            Some((job.clone(), Subject::Scene, id))
        );
        assert_eq!(
            parse_attempt_key(&format!("tilegate/tiles/{job}/0000_0000.tif")),
            None
        );
        assert_eq!(parse_attempt_key("attempt-x.tif"), None);
    }
}

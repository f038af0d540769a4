//! An attempt's life up to publication: [`begin`] writes the row (`uploading`) before any
//! byte moves, [`upload`] puts the object at the attempt's own key with create-if-absent and
//! records it, [`accept`] moves the pointer in one conditional write.
//!
//! The attempt ID is the idempotency key: a transport retry (a redelivered message, a re-run
//! command given `--attempt`) finds its row and continues; the attempt token in the object's
//! metadata tells its own earlier write (an answer lost) from a collision.

use crate::LedgerError;
use bytes::Bytes;
use tilegate_core::ledger::{
    AttemptId, AttemptRow, AttemptState, Publish, PublishOutcome, Retention, Subject,
};
use tilegate_core::object::{ATTEMPT_METADATA, DeleteOptions, ObjectMeta, PutOptions, PutOutcome};
use tilegate_core::table::{CreateOutcome, JobRecord, UpdateOutcome, Versioned};
use tilegate_core::{Backends, JobId, UnixMillis};

/// A fresh attempt ID (random, 128 bits).
pub fn new_id() -> AttemptId {
    AttemptId::from_random(uuid::Uuid::new_v4().as_u128())
}

/// The job, or a named refusal.
pub async fn job(b: &Backends, id: &JobId) -> Result<JobRecord, LedgerError> {
    Ok(b.jobs
        .get_job(id)
        .await?
        .ok_or_else(|| LedgerError::UnknownJob(id.clone()))?
        .row)
}

/// Write the attempt's row before its upload starts. An existing row of the same attempt (a
/// retry) is returned as it is.
pub async fn begin(
    b: &Backends,
    job: &JobRecord,
    subject: Subject,
    id: AttemptId,
    retention: Retention,
    now: UnixMillis,
) -> Result<Versioned<AttemptRow>, LedgerError> {
    if let Subject::Window(w) = subject
        && !job.grid.contains(w)
    {
        return Err(LedgerError::OutsideGrid {
            job: job.job_id.clone(),
            subject,
        });
    }
    let row = AttemptRow::begin(
        job.tenant.clone(),
        job.job_id.clone(),
        subject,
        id,
        &job.prefix,
        retention,
        now,
    );
    match b.ledger.create_attempt(&row).await? {
        CreateOutcome::Created => {
            tracing::info!(row = %row.shown(), key = %row.key, "attempt begun");
            Ok(Versioned { version: 1, row })
        }
        CreateOutcome::AlreadyExists(existing) => Ok(existing),
    }
}

/// The attempt's row, or a named refusal.
pub async fn row(
    b: &Backends,
    job: &JobId,
    subject: Subject,
    attempt: &AttemptId,
) -> Result<Versioned<AttemptRow>, LedgerError> {
    b.ledger
        .get_attempt(job, subject, attempt)
        .await?
        .ok_or_else(|| LedgerError::UnknownAttempt {
            job: job.clone(),
            subject,
            attempt: attempt.clone(),
        })
}

/// Put `bytes` at the attempt's key (create-if-absent, attempt token in the metadata) and
/// record size and ETag on its row. A retry of an attempt whose upload was recorded returns
/// the row; a row GC took while the upload ran makes the upload delete its own object again.
pub async fn upload(
    b: &Backends,
    row: Versioned<AttemptRow>,
    bytes: Bytes,
    now: UnixMillis,
) -> Result<Versioned<AttemptRow>, LedgerError> {
    match row.row.state {
        AttemptState::Uploading => {}
        AttemptState::Uploaded | AttemptState::Accepted | AttemptState::Retired => return Ok(row),
        state => {
            return Err(LedgerError::NotUploading {
                attempt: row.row.attempt.clone(),
                state,
            });
        }
    }
    let meta = put(b, &row.row, bytes).await?;
    record(b, row, meta.size, meta.e_tag, now).await
}

/// The object step of [`upload`] alone: `bytes` at the attempt's key with create-if-absent
/// and the attempt token; an object already there is this attempt's own (an earlier try) or a
/// named collision. The row is not touched: [`record`] does that.
pub async fn put(b: &Backends, row: &AttemptRow, bytes: Bytes) -> Result<ObjectMeta, LedgerError> {
    let key = &row.key;
    let token = row.attempt.to_string();
    let opts = PutOptions {
        metadata: [(ATTEMPT_METADATA.to_owned(), token.clone())].into(),
        ..PutOptions::create()
    };
    match b.objects.put_opts(key, bytes, opts).await? {
        PutOutcome::Written(meta) => Ok(meta),
        PutOutcome::AlreadyPresent | PutOutcome::Superseded => own_object(b, key, &token).await,
    }
}

/// Record the object now at the attempt's key — written by [`upload`], or by the assembler for
/// a scene — on the attempt's row (`uploaded`). A row GC took meanwhile makes this delete the
/// object again, at the version given.
pub async fn record(
    b: &Backends,
    mut row: Versioned<AttemptRow>,
    size: u64,
    e_tag: tilegate_core::ETag,
    now: UnixMillis,
) -> Result<Versioned<AttemptRow>, LedgerError> {
    let key = row.row.key.clone();
    loop {
        let done = row.row.uploaded(size, e_tag.clone(), now);
        match b.ledger.update_attempt(&done, row.version).await? {
            UpdateOutcome::Updated { version } => {
                tracing::info!(row = %done.shown(), size, "attempt uploaded");
                return Ok(Versioned { version, row: done });
            }
            UpdateOutcome::Superseded(None) => {
                return Err(LedgerError::UnknownAttempt {
                    job: done.job_id,
                    subject: done.subject,
                    attempt: done.attempt,
                });
            }
            UpdateOutcome::Superseded(Some(current)) => match current.row.state {
                // Something else changed the row (a hold): apply the upload to what is there.
                AttemptState::Uploading => row = current,
                // A duplicate delivery recorded the same object first.
                _ if current.row.e_tag.as_ref() == Some(&e_tag)
                    && current.row.state != AttemptState::Deleted
                    && current.row.state != AttemptState::Deleting =>
                {
                    return Ok(current);
                }
                state @ (AttemptState::Deleting | AttemptState::Deleted) => {
                    // GC judged the upload dead (it outlived the grace). Its row no longer
                    // vouches for the object, so the object goes too: the exact key, at the
                    // version just written.
                    b.objects
                        .delete_opts(
                            &key,
                            DeleteOptions {
                                if_match: Some(e_tag.clone()),
                            },
                        )
                        .await?;
                    return Err(LedgerError::CollectedWhileUploading {
                        attempt: done.attempt,
                        state,
                    });
                }
                state => {
                    return Err(LedgerError::NotUploading {
                        attempt: done.attempt,
                        state,
                    });
                }
            },
        }
    }
}

/// The object at `key` if it carries attempt token `token`; otherwise a collision.
async fn own_object(b: &Backends, key: &str, token: &str) -> Result<ObjectMeta, LedgerError> {
    let found = b.objects.head(key).await?;
    match found {
        Some(m) if m.metadata.get(ATTEMPT_METADATA).map(String::as_str) == Some(token) => {
            tracing::info!(
                key,
                "attempt object already in place: this attempt's own write"
            );
            Ok(m)
        }
        other => Err(LedgerError::KeyCollision {
            key: key.to_owned(),
            attempt: AttemptId::parse(token).expect("attempt tokens are attempt IDs"),
            found: other.and_then(|m| m.metadata.get(ATTEMPT_METADATA).cloned()),
        }),
    }
}

/// Move the pointer of `subject` from `seen` (the attempt the caller saw; `None`: no
/// pointer) to `attempt`, retiring `seen`, in one conditional write.
pub async fn accept(
    b: &Backends,
    job: &JobId,
    subject: Subject,
    attempt: &AttemptId,
    seen: Option<AttemptId>,
    now: UnixMillis,
) -> Result<PublishOutcome, LedgerError> {
    let out = b
        .ledger
        .publish(&Publish {
            job_id: job.clone(),
            subject,
            attempt: attempt.clone(),
            seen,
            now,
        })
        .await?;
    match &out {
        PublishOutcome::Published { previous } => {
            tracing::info!(%job, %subject, %attempt, previous = ?previous.as_ref().map(AttemptId::as_str), "pointer moved");
        }
        PublishOutcome::Superseded { current } => {
            tracing::info!(%job, %subject, %attempt, current = ?current.as_ref().map(|c| c.row.attempt.as_str()), outcome = "superseded", "pointer not moved: it moved meanwhile");
        }
        PublishOutcome::NotPublishable(row) => {
            tracing::info!(%job, %subject, %attempt, state = ?row.as_ref().map(|r| r.row.state), "pointer not moved: the attempt is not publishable");
        }
    }
    Ok(out)
}

/// [`accept`] from wherever the pointer is now: one read, then the conditional move on what
/// was read (a concurrent move in between still makes this `Superseded`).
pub async fn accept_current(
    b: &Backends,
    job: &JobId,
    subject: Subject,
    attempt: &AttemptId,
    now: UnixMillis,
) -> Result<PublishOutcome, LedgerError> {
    let seen = b
        .ledger
        .get_pointer(job, subject)
        .await?
        .map(|p| p.row.attempt);
    accept(b, job, subject, attempt, seen, now).await
}

/// Set (or release) a legal hold on an attempt, by a conditional write on the version read. A
/// hold cannot be set once a sweep has claimed the row: the sweep's claim and the hold are
/// both conditional on the same version, so exactly one of them lands, and a held row is
/// never deleted.
pub async fn set_hold(
    b: &Backends,
    job: &JobId,
    subject: Subject,
    attempt: &AttemptId,
    hold: bool,
) -> Result<Versioned<AttemptRow>, LedgerError> {
    loop {
        let cur = row(b, job, subject, attempt).await?;
        if hold && (cur.row.sweep_started_at.is_some() || cur.row.state == AttemptState::Deleted) {
            return Err(LedgerError::BeingDeleted {
                attempt: attempt.clone(),
                state: cur.row.state,
            });
        }
        let changed = AttemptRow {
            legal_hold: hold,
            ..cur.row.clone()
        };
        if let UpdateOutcome::Updated { version } =
            b.ledger.update_attempt(&changed, cur.version).await?
        {
            tracing::info!(row = %changed.shown(), hold, "legal hold");
            return Ok(Versioned {
                version,
                row: changed,
            });
        }
    }
}

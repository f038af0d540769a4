//! An attempt's life up to publication: [`begin`] (or [`begin_queued`], for an order sent
//! through the queue) writes the row (`uploading`) before any byte moves, [`start_upload`]
//! starts the upload grace when a worker takes the order, [`upload`] puts the object at the
//! attempt's own key with create-if-absent and records it, [`publish_order`] and [`accept`]
//! move the pointer in one conditional write.
//!
//! The attempt ID is the idempotency key: a transport retry (a redelivered message, a re-run
//! command given `--attempt`) finds its row and continues. The attempt's key names the
//! attempt and is written only by it (create-if-absent), so an object there is its own
//! earlier write (an answer lost); the attempt token in the object's metadata, where the store
//! kept it, only tells a collision by hand apart — the ledger does not depend on it.

use crate::LedgerError;
use bytes::Bytes;
use tilegate_core::ObjectKey;
use tilegate_core::ledger::{
    AttemptId, AttemptRow, AttemptState, Publish, PublishBy, PublishOutcome, Retention, Subject,
};
use tilegate_core::object::{ATTEMPT_METADATA, ObjectMeta, PutOptions, PutOutcome};
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

/// Write the attempt's row for an upload that starts now (this process uploads next): due
/// after the upload grace from now, with whether it is to be published once uploaded
/// (`accept`). An existing row of the same attempt (a retry) is returned as it is.
pub async fn begin(
    b: &Backends,
    job: &JobRecord,
    subject: Subject,
    id: AttemptId,
    retention: Retention,
    accept: bool,
    now: UnixMillis,
) -> Result<Versioned<AttemptRow>, LedgerError> {
    create(b, job, row_of(job, subject, id, retention, now), accept).await
}

/// Write the attempt's row for an order about to be sent through the queue: no deadline
/// until a worker starts the upload ([`start_upload`]), so a backlog, retries or a redrive
/// never collect it; and whether it is to be published (`accept`) — the worker reads that
/// here, never from the message. An existing row of the same attempt is returned as it is.
pub async fn begin_queued(
    b: &Backends,
    job: &JobRecord,
    subject: Subject,
    id: AttemptId,
    retention: Retention,
    accept: bool,
    now: UnixMillis,
) -> Result<Versioned<AttemptRow>, LedgerError> {
    let row = row_of(job, subject, id, retention, now).waiting();
    create(b, job, row, accept).await
}

/// The row of an attempt of `job` begun at `now`.
fn row_of(
    job: &JobRecord,
    subject: Subject,
    id: AttemptId,
    retention: Retention,
    now: UnixMillis,
) -> AttemptRow {
    AttemptRow::begin(
        job.tenant.clone(),
        job.job_id.clone(),
        subject,
        id,
        &job.prefix,
        retention,
        now,
    )
}

async fn create(
    b: &Backends,
    job: &JobRecord,
    mut row: AttemptRow,
    accept: bool,
) -> Result<Versioned<AttemptRow>, LedgerError> {
    row.accept = Some(accept);
    if let Subject::Window(w) = row.subject
        && !job.grid.contains(w)
    {
        return Err(LedgerError::OutsideGrid {
            job: job.job_id.clone(),
            subject: row.subject,
        });
    }
    match b.ledger.create_attempt(&row).await? {
        CreateOutcome::Created => {
            tracing::info!(row = %row.shown(), key = %row.key, "attempt begun");
            Ok(Versioned { version: 1, row })
        }
        CreateOutcome::AlreadyExists(existing) => Ok(existing),
    }
}

/// A worker begins the upload of an `uploading` row at `now`: the upload grace counts from
/// here (a redelivery begins it again). Returns the row to upload under; a row already
/// uploaded (or further) is returned as it is, with nothing left to upload. A row GC
/// collected — its upload was begun once and then abandoned past the grace — is refused by
/// name: regenerating makes a new attempt.
pub async fn start_upload(
    b: &Backends,
    mut row: Versioned<AttemptRow>,
    now: UnixMillis,
) -> Result<Versioned<AttemptRow>, LedgerError> {
    loop {
        match row.row.state {
            AttemptState::Uploading => {}
            AttemptState::Uploaded | AttemptState::Accepted | AttemptState::Retired => {
                return Ok(row);
            }
            state @ (AttemptState::Deleting | AttemptState::Deleted) => {
                return Err(LedgerError::CollectedWhileUploading {
                    attempt: row.row.attempt.clone(),
                    state,
                });
            }
        }
        let started = row.row.started(now);
        match b.ledger.update_attempt(&started, row.version).await? {
            UpdateOutcome::Updated { version } => {
                tracing::debug!(row = %started.shown(), "upload started");
                return Ok(Versioned {
                    version,
                    row: started,
                });
            }
            // A hold, a duplicate's start or record, or GC's mark landed first: look again.
            UpdateOutcome::Superseded(Some(current)) => row = current,
            UpdateOutcome::Superseded(None) => {
                return Err(LedgerError::UnknownAttempt {
                    job: started.job_id,
                    subject: started.subject,
                    attempt: started.attempt,
                });
            }
        }
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

/// Start the upload ([`start_upload`]), put `bytes` at the attempt's key (create-if-absent,
/// attempt token in the metadata) and record size and ETag on its row. A retry of an attempt
/// whose upload was recorded returns the row; a row GC took while the upload ran makes the
/// upload's own object go again, through the sweep's claim.
pub async fn upload(
    b: &Backends,
    row: Versioned<AttemptRow>,
    bytes: Bytes,
    now: UnixMillis,
) -> Result<Versioned<AttemptRow>, LedgerError> {
    let row = start_upload(b, row, now).await?;
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
    let key = &ObjectKey::checked(&row.key)?;
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
                    // vouches for the object, so the object goes too — through the sweep's
                    // own claim, which a legal hold or a re-link refuses.
                    crate::gc::collect_late_upload(b, current, &e_tag, now).await?;
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

/// The object at `key`, this attempt's own earlier write: the key names the attempt and only
/// the attempt writes it. Its attempt token, where the store kept it, must agree; an object
/// that carries another token was put there by hand, and is a named collision.
async fn own_object(b: &Backends, key: &ObjectKey, token: &str) -> Result<ObjectMeta, LedgerError> {
    let found = b.objects.head(key).await?;
    match found {
        Some(m) if is_own(&m, token) => {
            tracing::info!(
                key = %key,
                "attempt object already in place: this attempt's own write"
            );
            Ok(m)
        }
        other => Err(LedgerError::KeyCollision {
            key: key.to_string(),
            attempt: AttemptId::parse(token).expect("attempt tokens are attempt IDs"),
            found: other.and_then(|m| m.metadata.get(ATTEMPT_METADATA).cloned()),
        }),
    }
}

/// Whether the object at an attempt's own key is that attempt's: it carries the attempt's
/// token, or none at all (a copy that dropped its metadata, such as a local data directory
/// copied without extended attributes).
pub(crate) fn is_own(m: &ObjectMeta, token: &str) -> bool {
    m.metadata
        .get(ATTEMPT_METADATA)
        .is_none_or(|t| t.as_str() == token)
}

/// An explicit accept: move the pointer of `subject` from `seen` (the attempt the caller saw;
/// `None`: no pointer) to `attempt`, retiring `seen`, in one conditional write. Only this may
/// move a pointer back onto an attempt published before.
pub async fn accept(
    b: &Backends,
    job: &JobId,
    subject: Subject,
    attempt: &AttemptId,
    seen: Option<AttemptId>,
    now: UnixMillis,
) -> Result<PublishOutcome, LedgerError> {
    publish(b, job, subject, attempt, seen, now, PublishBy::Explicit).await
}

async fn publish(
    b: &Backends,
    job: &JobId,
    subject: Subject,
    attempt: &AttemptId,
    seen: Option<AttemptId>,
    now: UnixMillis,
    by: PublishBy,
) -> Result<PublishOutcome, LedgerError> {
    let out = b
        .ledger
        .publish(&Publish {
            job_id: job.clone(),
            subject,
            attempt: attempt.clone(),
            seen,
            now,
            by,
        })
        .await?;
    // An accept of the attempt the pointer already names is done, not refused — whatever the
    // `seen` it came with or the state the attempt is in since.
    let out = match out {
        PublishOutcome::Published { .. } => out,
        _ if by == PublishBy::Explicit => match b.ledger.get_pointer(job, subject).await? {
            Some(current) if current.row.attempt == *attempt => {
                PublishOutcome::AlreadyCurrent { current }
            }
            _ => out,
        },
        _ => out,
    };
    match &out {
        PublishOutcome::AlreadyCurrent { .. } => {
            tracing::info!(%job, %subject, %attempt, "pointer already at the attempt");
        }
        PublishOutcome::Published { previous } => {
            tracing::info!(%job, %subject, %attempt, previous = ?previous.as_ref().map(AttemptId::as_str), by = ?by, "pointer moved");
        }
        PublishOutcome::Superseded { current } => {
            tracing::info!(%job, %subject, %attempt, current = ?current.as_ref().map(|c| c.row.attempt.as_str()), outcome = "superseded", "pointer not moved: it moved meanwhile");
        }
        PublishOutcome::NotPublishable(row) => {
            tracing::info!(%job, %subject, %attempt, state = ?row.as_ref().map(|r| r.row.state), by = ?by, "pointer not moved: the attempt is not publishable");
        }
        PublishOutcome::Outdated { current } => {
            tracing::info!(%job, %subject, %attempt, current = ?current.as_ref().map(|c| c.row.attempt.as_str()), outcome = "outdated", "pointer not moved: a newer attempt was published");
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
    let seen = pointed(b, job, subject).await?;
    accept(b, job, subject, attempt, seen, now).await
}

async fn pointed(
    b: &Backends,
    job: &JobId,
    subject: Subject,
) -> Result<Option<AttemptId>, LedgerError> {
    Ok(b.ledger
        .get_pointer(job, subject)
        .await?
        .map(|p| p.row.attempt))
}

/// How many times [`publish_order`] reads the pointer again after it moved meanwhile.
const ORDER_TRIES: u32 = 8;

/// Publish an attempt as its regeneration order asked (`accept`), from wherever the pointer is
/// now. The order's rules hold in the ledger's own conditional write
/// ([`PublishBy::Order`]): an attempt published before is never published again, and none
/// begun before the newest one published — so a redelivered, re-run or late order never
/// moves the pointer back. A pointer that moved meanwhile is read again (the rules still
/// decide), a few times.
pub async fn publish_order(
    b: &Backends,
    job: &JobId,
    subject: Subject,
    attempt: &AttemptId,
    now: UnixMillis,
) -> Result<PublishOutcome, LedgerError> {
    let mut out = None;
    for _ in 0..ORDER_TRIES {
        let seen = pointed(b, job, subject).await?;
        let o = publish(b, job, subject, attempt, seen, now, PublishBy::Order).await?;
        if !matches!(o, PublishOutcome::Superseded { .. }) {
            return Ok(o);
        }
        out = Some(o);
    }
    Ok(out.expect("tried at least once"))
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

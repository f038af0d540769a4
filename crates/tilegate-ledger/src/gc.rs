//! Garbage collection in two steps, both decided by ledger rows and never by a listing.
//!
//! **Mark**: page through the due index (rows past `delete_after`, not held, not deleted;
//! an `uploading` row is due only once its upload grace has passed) and move each to
//! `deleting` with a conditional write on the version read. An accepted row is due only as
//! an expired preview; its pointer is withdrawn in the same write.
//!
//! **Sweep**: for each `deleting` row, a conditional write claims it for the sweep
//! (`sweep_started_at`, on the version read — a pointer moved back onto the row since the
//! mark has changed that version, and the sweep skips it: the re-link wins); then the row's
//! **exact key** is deleted with `If-Match` on the recorded ETag, the key is verified absent,
//! and the row becomes `deleted` with the time verified. A row whose upload never recorded an
//! ETag has its object deleted only if the object there is the attempt's own (the key names
//! the attempt; a token in its metadata, where the store kept one, must agree).
//!
//! Every ledger delete goes through that one claim: an upload that finds its row collected
//! ([`collect_late_upload`]) sweeps its own object with it, so a legal hold or a re-link that
//! landed after the mark is never overridden.

use crate::LedgerError;
use serde::Serialize;
use tilegate_core::ObjectKey;
use tilegate_core::UnixMillis;
use tilegate_core::ledger::{AttemptRow, AttemptState};
use tilegate_core::object::{DeleteOptions, DeleteOutcome};
use tilegate_core::table::{UpdateOutcome, Versioned};
use tilegate_core::{Backends, ETag};

/// How a pass runs.
#[derive(Debug, Clone)]
pub struct GcOptions {
    /// The time the pass judges deadlines by (injected in tests).
    pub now: UnixMillis,
    /// Report what would be marked and swept; write and delete nothing.
    pub dry_run: bool,
    /// Rows per page of the due index.
    pub page: usize,
}

impl GcOptions {
    pub fn at(now: UnixMillis) -> Self {
        Self {
            now,
            dry_run: false,
            page: 500,
        }
    }
}

/// One row GC acted on (or would have, in a dry run).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub struct GcItem {
    pub job_id: String,
    pub subject: String,
    pub attempt: String,
    /// The exact key deleted (or to be deleted).
    pub key: String,
    /// The state the row was in when the pass found it.
    pub state: &'static str,
    pub delete_after: Option<UnixMillis>,
}

/// What a pass did.
#[derive(Debug, Clone, Default, Serialize, schemars::JsonSchema)]
pub struct GcReport {
    pub now: UnixMillis,
    pub dry_run: bool,
    /// Due rows found in the index.
    pub due: u64,
    /// Rows moved to `deleting` by this pass.
    pub marked: u64,
    /// Rows whose object this pass deleted and verified gone.
    pub deleted: u64,
    /// Of those, rows whose object was already absent (a worker died before its upload, or
    /// an earlier sweep deleted it and stopped before the row).
    pub already_absent: u64,
    /// Rows that changed between reading and writing (a re-link, a hold, a finished upload):
    /// left as they are now.
    pub skipped_changed: u64,
    /// Rows whose key holds an object other than the recorded one: left for `reconcile`.
    pub skipped_mismatch: u64,
    /// The rows acted on, or in a dry run the rows that would be.
    pub items: Vec<GcItem>,
}

fn item(r: &AttemptRow) -> GcItem {
    GcItem {
        job_id: r.job_id.to_string(),
        subject: r.subject.to_string(),
        attempt: r.attempt.to_string(),
        key: r.key.clone(),
        state: r.state.name(),
        delete_after: r.delete_after,
    }
}

/// Whether a due-index row is due at `now` by the policy (the index holds every row with a
/// deadline; the time test and the state rules are here).
fn is_due(r: &AttemptRow, now: UnixMillis) -> bool {
    !r.legal_hold
        && r.delete_after.is_some_and(|d| d <= now)
        && match r.state {
            AttemptState::Uploading
            | AttemptState::Uploaded
            | AttemptState::Retired
            | AttemptState::Deleting => true,
            // Published: only an expired preview.
            AttemptState::Accepted => r.preview_deadline().is_some_and(|d| d <= now),
            AttemptState::Deleted => false,
        }
}

/// Run one pass: mark every due row, then sweep every marked one.
pub async fn gc(b: &Backends, opts: &GcOptions) -> Result<GcReport, LedgerError> {
    let (mut report, marked) = mark_pass(b, opts).await?;
    sweep_pass(b, marked, opts, &mut report).await?;
    tracing::info!(
        due = report.due,
        marked = report.marked,
        deleted = report.deleted,
        skipped_changed = report.skipped_changed,
        dry_run = opts.dry_run,
        "gc pass"
    );
    Ok(report)
}

/// The mark step alone: every due row moved to `deleting`; returns them (with the rows found
/// already marked) for [`sweep_pass`].
pub async fn mark_pass(
    b: &Backends,
    opts: &GcOptions,
) -> Result<(GcReport, Vec<Versioned<AttemptRow>>), LedgerError> {
    let mut report = GcReport {
        now: opts.now,
        dry_run: opts.dry_run,
        ..GcReport::default()
    };
    let mut to_sweep = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let page = b
            .ledger
            .due(opts.now, cursor.as_deref(), opts.page.max(1))
            .await?;
        for row in page.rows {
            if !is_due(&row.row, opts.now) {
                continue;
            }
            report.due += 1;
            if row.row.state == AttemptState::Deleting {
                to_sweep.push(row);
                continue;
            }
            if opts.dry_run {
                report.items.push(item(&row.row));
                continue;
            }
            match b.ledger.mark(&row, opts.now).await? {
                UpdateOutcome::Updated { version } => {
                    report.marked += 1;
                    tracing::debug!(row = %row.row.shown(), "marked");
                    to_sweep.push(Versioned {
                        version,
                        row: row.row.marked(opts.now),
                    });
                }
                UpdateOutcome::Superseded(_) => report.skipped_changed += 1,
            }
        }
        cursor = page.next;
        if cursor.is_none() {
            break;
        }
    }
    Ok((report, to_sweep))
}

/// The sweep step alone, over rows [`mark_pass`] returned (each re-checked conditionally).
pub async fn sweep_pass(
    b: &Backends,
    rows: Vec<Versioned<AttemptRow>>,
    opts: &GcOptions,
    report: &mut GcReport,
) -> Result<(), LedgerError> {
    for row in rows {
        if opts.dry_run {
            report.items.push(item(&row.row));
            continue;
        }
        sweep(b, row, opts.now, report).await?;
    }
    Ok(())
}

async fn sweep(
    b: &Backends,
    row: Versioned<AttemptRow>,
    now: UnixMillis,
    report: &mut GcReport,
) -> Result<(), LedgerError> {
    sweep_known(b, row, now, report, None).await
}

/// An upload that found its row `deleting` or `deleted` (GC judged it dead past its grace)
/// after it put `e_tag` at the key: the object goes, through the sweep's claim. A held row, or
/// one re-linked or changed since it was read, keeps it (the claim is refused).
pub(crate) async fn collect_late_upload(
    b: &Backends,
    current: Versioned<AttemptRow>,
    e_tag: &ETag,
    now: UnixMillis,
) -> Result<(), LedgerError> {
    match current.row.state {
        // The sweep claimed and finished this row before the late object landed: its claim
        // stands (no hold or publish can reach a deleted row), and the object is this
        // attempt's own write at the version given.
        AttemptState::Deleted => {
            delete_at(b, &ObjectKey::checked(&current.row.key)?, e_tag).await?;
            Ok(())
        }
        AttemptState::Deleting => {
            let mut report = GcReport::default();
            sweep_known(b, current, now, &mut report, Some(e_tag)).await
        }
        _ => Ok(()),
    }
}

/// The sweep's claim on a `deleting` row, on the version read: from here on no pointer can be
/// moved onto it and no hold set. `None` if the row is held, no longer `deleting`, or changed
/// since it was read (a re-link, a hold, a finished upload).
async fn claim(
    b: &Backends,
    row: Versioned<AttemptRow>,
    now: UnixMillis,
) -> Result<Option<Versioned<AttemptRow>>, LedgerError> {
    if row.row.state != AttemptState::Deleting || row.row.legal_hold {
        return Ok(None);
    }
    if row.row.sweep_started_at.is_some() {
        return Ok(Some(row));
    }
    let claimed = row.row.sweeping(now);
    Ok(
        match b.ledger.update_attempt(&claimed, row.version).await? {
            UpdateOutcome::Updated { version } => Some(Versioned {
                version,
                row: claimed,
            }),
            UpdateOutcome::Superseded(_) => None,
        },
    )
}

/// Sweep one row: claim it, delete its exact key at the recorded version (or `known`, the
/// version an upload just wrote), verify, record.
async fn sweep_known(
    b: &Backends,
    row: Versioned<AttemptRow>,
    now: UnixMillis,
    report: &mut GcReport,
    known: Option<&ETag>,
) -> Result<(), LedgerError> {
    let shown = row.row.shown();
    let Some(row) = claim(b, row, now).await? else {
        tracing::info!(row = %shown, "sweep skipped: the row is held or changed since it was marked");
        report.skipped_changed += 1;
        return Ok(());
    };
    let key = &ObjectKey::checked(&row.row.key)?;
    let token = row.row.attempt.as_str();
    let expected: Option<ETag> = match known.or(row.row.e_tag.as_ref()) {
        Some(e) => Some(e.clone()),
        // The upload never recorded its object: whatever is at the key is this attempt's own
        // (the key names it), unless it carries another attempt's token.
        None => match b.objects.head(key).await? {
            None => None,
            Some(m) if crate::attempt::is_own(&m, token) => Some(m.e_tag),
            Some(_) => {
                report.skipped_mismatch += 1;
                tracing::warn!(
                    key = %key,
                    "sweep skipped: the object at the key is not this attempt's"
                );
                return Ok(());
            }
        },
    };
    let mut outcome = match &expected {
        None => DeleteOutcome::NotFound,
        Some(e) => delete_at(b, key, e).await?,
    };
    if outcome == DeleteOutcome::Superseded {
        // Not at the recorded ETag. A store that lost the object's own record of its ETag (a
        // local data directory copied without extended attributes rehashes the content, and a
        // multipart object's ETag is then the plain content hash) still holds this attempt's
        // object if it is the attempt's own with the recorded size: delete that version.
        outcome = match b.objects.head(key).await? {
            None => DeleteOutcome::NotFound,
            Some(m) if crate::attempt::is_own(&m, token) && Some(m.size) == row.row.size => {
                tracing::info!(key = %key, recorded = ?expected, found = %m.e_tag,
                    "the attempt's object reports another ETag than recorded; same size, its own key: deleting that version");
                delete_at(b, key, &m.e_tag).await?
            }
            Some(_) => DeleteOutcome::Superseded,
        };
    }
    match outcome {
        DeleteOutcome::Deleted => {}
        DeleteOutcome::NotFound => report.already_absent += 1,
        DeleteOutcome::Superseded => {
            report.skipped_mismatch += 1;
            tracing::warn!(
                key = %key,
                "sweep skipped: the object at the key is not the recorded version"
            );
            return Ok(());
        }
    }
    if b.objects.head(key).await?.is_some() {
        // Another object appeared at the attempt's own key: not this row's to delete.
        report.skipped_mismatch += 1;
        return Ok(());
    }
    let done = row.row.deleted(now);
    match b.ledger.update_attempt(&done, row.version).await? {
        UpdateOutcome::Updated { .. } => {
            report.deleted += 1;
            report.items.push(item(&row.row));
            tracing::debug!(row = %done.shown(), key = %key, "swept");
        }
        // Only a hold can land here now (no publish after the claim); the object is gone
        // either way, and the next pass finishes the row.
        UpdateOutcome::Superseded(_) => report.skipped_changed += 1,
    }
    Ok(())
}

async fn delete_at(
    b: &Backends,
    key: &ObjectKey,
    e_tag: &ETag,
) -> Result<DeleteOutcome, LedgerError> {
    Ok(b.objects
        .delete_opts(
            key,
            DeleteOptions {
                if_match: Some(e_tag.clone()),
            },
        )
        .await?)
}

/// The deletion SLO: the age of the oldest row past its deadline and not yet deleted (nor
/// held), in seconds; 0 when none is overdue.
pub async fn oldest_overdue_seconds(b: &Backends, now: UnixMillis) -> Result<u64, LedgerError> {
    let oldest = b.ledger.oldest_due(now).await?;
    Ok(oldest.map_or(0, |d| u64::try_from((now - d) / 1000).unwrap_or(0)))
}

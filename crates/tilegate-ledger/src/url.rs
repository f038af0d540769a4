//! Tenant-scoped URLs: the tenant is authorised against the ledger row first, then the store
//! signs a time-limited GET of the accepted attempt's exact key — never for longer than the
//! row's remaining retention. Objects stay private; the URL is the only grant.

use crate::LedgerError;
use serde::Serialize;
use std::time::Duration;
use tilegate_core::ObjectKey;
use tilegate_core::ledger::Subject;
use tilegate_core::table::JobRecord;
use tilegate_core::{Backends, Tenant, UnixMillis};

/// A signed read of one accepted attempt.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub struct Grant {
    pub url: String,
    pub key: String,
    pub attempt: String,
    pub tenant: String,
    /// When the URL stops working (ms since the epoch): the requested expiry, or the row's
    /// deadline if that comes first.
    pub expires_at: UnixMillis,
    /// True if the row's retention, not the request, set the expiry.
    pub capped_by_retention: bool,
    /// False for the local store's `file://` URL: a path, which no expiry can end (whoever can
    /// read the directory can read the file).
    pub expiring: bool,
}

/// When a URL of `row` asked for `expires` from `now` must stop working, and whether the row's
/// retention (not the request) set that. Never past the row's deadline; and for an accepted
/// attempt, which has no deadline while it is published, never past `now` plus its retention
/// after retirement — the earliest deadline a retirement from now on can give it — so a URL
/// never outlives the object it reads.
fn expiry(
    row: &tilegate_core::ledger::AttemptRow,
    expires: Duration,
    now: UnixMillis,
) -> Result<(UnixMillis, bool), LedgerError> {
    let asked = now.saturating_add(i64::try_from(expires.as_millis()).unwrap_or(i64::MAX));
    let deadline = match row.delete_after {
        Some(deadline) if deadline <= now => {
            return Err(LedgerError::Expired {
                key: row.key.clone(),
                deadline,
            });
        }
        Some(deadline) => deadline,
        None => now.saturating_add(i64::try_from(row.retention.retired_ms).unwrap_or(i64::MAX)),
    };
    Ok(if deadline < asked {
        (deadline, true)
    } else {
        (asked, false)
    })
}

/// Authorise `tenant` for `subject` of `job` and sign a URL of its accepted attempt.
pub async fn grant(
    b: &Backends,
    job: &JobRecord,
    subject: Subject,
    tenant: &Tenant,
    expires: Duration,
    now: UnixMillis,
) -> Result<Grant, LedgerError> {
    let refuse = || not_your_tenant(job, subject, tenant);
    // The job's tenant is checked before anything about its rows is revealed.
    if &job.tenant != tenant {
        return Err(refuse());
    }
    let pointer = b
        .ledger
        .get_pointer(&job.job_id, subject)
        .await?
        .ok_or_else(|| LedgerError::NothingAccepted {
            job: job.job_id.clone(),
            subject,
        })?
        .row;
    let row = crate::attempt::row(b, &job.job_id, subject, &pointer.attempt).await?;
    if &row.row.tenant != tenant {
        return Err(refuse());
    }
    let (until, capped) = expiry(&row.row, expires, now)?;
    let attempt = row.row.attempt.to_string();
    sign(b, row.row.key, attempt, tenant, (until, capped), now).await
}

fn not_your_tenant(job: &JobRecord, subject: Subject, tenant: &Tenant) -> LedgerError {
    LedgerError::NotYourTenant {
        asked: tenant.clone(),
        job: job.job_id.clone(),
        subject,
    }
}

/// Sign a GET of `key` valid until `until` (`capped`: by retention) for `tenant`.
async fn sign(
    b: &Backends,
    key: String,
    attempt: String,
    tenant: &Tenant,
    (until, capped): (UnixMillis, bool),
    now: UnixMillis,
) -> Result<Grant, LedgerError> {
    let valid = Duration::from_millis(u64::try_from(until - now).unwrap_or(0));
    let url = b
        .objects
        .presign_get(&ObjectKey::checked(&key)?, valid)
        .await?;
    tracing::info!(tenant = %tenant, key = %key, valid_s = valid.as_secs(), capped, "url granted");
    Ok(Grant {
        key,
        attempt,
        tenant: tenant.to_string(),
        expires_at: until,
        capped_by_retention: capped,
        expiring: !url.starts_with("file:"),
        url,
    })
}

/// Authorise `tenant` for `subject` of `job` and sign a URL of what a reader gets now: the
/// accepted attempt where a pointer names one ([`grant`]), else the job's own output — the
/// window's tile as its manifest row records it, or the assembled scene — which no retention
/// deletes, so only the request sets the expiry.
pub async fn grant_published(
    b: &Backends,
    job: &JobRecord,
    subject: Subject,
    tenant: &Tenant,
    expires: Duration,
    now: UnixMillis,
) -> Result<Grant, LedgerError> {
    if &job.tenant != tenant {
        return Err(not_your_tenant(job, subject, tenant));
    }
    if b.ledger.get_pointer(&job.job_id, subject).await?.is_some() {
        return grant(b, job, subject, tenant, expires, now).await;
    }
    let key = match subject {
        Subject::Scene => job.scene_output.as_ref().map(|o| o.key.clone()),
        Subject::Window(w) => b
            .manifest
            .get_entry(&job.job_id, w)
            .await?
            .map(|e| e.row.key),
    }
    .ok_or_else(|| LedgerError::NothingAccepted {
        job: job.job_id.clone(),
        subject,
    })?;
    let until = now.saturating_add(i64::try_from(expires.as_millis()).unwrap_or(i64::MAX));
    sign(b, key, String::new(), tenant, (until, false), now).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use tilegate_core::ledger::{AttemptId, AttemptRow, HOUR_MS, Retention};
    use tilegate_core::{ETag, JobId, Prefix, Window};

    fn accepted(retired_ms: u64) -> AttemptRow {
        AttemptRow::begin(
            Tenant::default(),
            JobId::derive("u", "e", "r", "p"),
            Subject::Window(Window::new(0, 0)),
            AttemptId::from_random(1),
            &Prefix::default(),
            Retention {
                retired_ms,
                ..Retention::default()
            },
            0,
        )
        .uploaded(1, ETag::new("\"e\""), 1)
        .accepted(2)
    }

    #[test]
    fn a_url_of_an_accepted_attempt_never_outlives_its_retention_after_retirement() {
        let row = accepted(HOUR_MS);
        let now = 10_000;
        let (until, capped) = expiry(&row, Duration::from_secs(7 * 24 * 3600), now).unwrap();
        assert_eq!((until, capped), (now + HOUR_MS as i64, true));
        // Retired right after the URL was issued, the row is due no sooner than that.
        let retired = row.retired(now);
        assert!(retired.delete_after.unwrap() >= until);
        let (until, capped) = expiry(&row, Duration::from_secs(60), now).unwrap();
        assert_eq!((until, capped), (now + 60_000, false));
    }

    #[test]
    fn a_url_past_the_deadline_is_refused() {
        let row = accepted(HOUR_MS).retired(0);
        let due = row.delete_after.unwrap();
        assert!(matches!(
            expiry(&row, Duration::from_secs(1), due),
            Err(LedgerError::Expired { .. })
        ));
        assert_eq!(
            expiry(&row, Duration::from_secs(3600 * 5), due - 1000).unwrap(),
            (due, true)
        );
    }
}

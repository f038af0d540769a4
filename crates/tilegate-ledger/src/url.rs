//! Tenant-scoped URLs: the tenant is authorised against the ledger row first, then the store
//! signs a time-limited GET of the accepted attempt's exact key — never for longer than the
//! row's remaining retention. Objects stay private; the URL is the only grant.

use crate::LedgerError;
use serde::Serialize;
use std::time::Duration;
use tilegate_core::ledger::Subject;
use tilegate_core::table::JobRecord;
use tilegate_core::{Backends, Tenant, UnixMillis};

/// A signed read of one accepted attempt.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
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
    let refuse = || LedgerError::NotYourTenant {
        asked: tenant.clone(),
        job: job.job_id.clone(),
        subject,
    };
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
    let asked_ms = i64::try_from(expires.as_millis()).unwrap_or(i64::MAX);
    let (until, capped) = match row.row.delete_after {
        Some(deadline) if deadline <= now => {
            return Err(LedgerError::Expired {
                key: row.row.key.clone(),
                deadline,
            });
        }
        Some(deadline) if deadline < now.saturating_add(asked_ms) => (deadline, true),
        _ => (now.saturating_add(asked_ms), false),
    };
    let valid = Duration::from_millis(u64::try_from(until - now).unwrap_or(0));
    let url = b.objects.presign_get(&row.row.key, valid).await?;
    tracing::info!(tenant = %tenant, key = %row.row.key, valid_s = valid.as_secs(), capped, "url granted");
    Ok(Grant {
        url,
        key: row.row.key.clone(),
        attempt: row.row.attempt.to_string(),
        tenant: tenant.to_string(),
        expires_at: until,
        capped_by_retention: capped,
    })
}

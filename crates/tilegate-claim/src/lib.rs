//! The claim gate: a lease in front of a large output, so that duplicate producers never start
//! a second multipart upload.
//!
//! The lease saves cost; it is not the correctness guard. The upload still completes with
//! create-if-absent, so a holder whose lease lapsed mid-upload cannot overwrite the winner.
//! Every change a holder makes is guarded by its owner ID and fencing token in the claims
//! table's own conditional write.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use tilegate_core::table::{
    AcquireOutcome, ClaimChange, ClaimState, ClaimTable, OutputRef, UpdateOutcome,
};
use tilegate_core::{StoreResult, UnixMillis, now_millis};
use tokio::sync::watch;

/// What `try_claim` found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClaimOutcome {
    /// This owner holds the lease.
    Claimed(Lease),
    /// Another owner holds an unexpired lease.
    HeldBy {
        owner: String,
        expires_at: UnixMillis,
    },
    /// The work is done; here is its output.
    AlreadyDone { output: Option<OutputRef> },
}

/// A held lease.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lease {
    pub resource: String,
    pub owner: String,
    pub fencing_token: u64,
    pub expires_at: UnixMillis,
    pub ttl: Duration,
}

/// Whether a guarded change still applied.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LeaseState {
    Held,
    /// Someone else took the claim over (or it was completed): stop and abort.
    Lost,
}

/// An owner ID unique to this process and attempt: host, pid and a random suffix.
pub fn unique_owner(label: &str) -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_owned())
        .unwrap_or_else(|_| "host".into());
    format!(
        "{label}-{host}-{}-{}",
        std::process::id(),
        &uuid::Uuid::new_v4().simple().to_string()[..12]
    )
}

/// The gate over a claims table.
#[derive(Debug, Clone)]
pub struct ClaimGate {
    table: Arc<dyn ClaimTable>,
}

fn ttl_ms(ttl: Duration) -> i64 {
    i64::try_from(ttl.as_millis()).unwrap_or(i64::MAX / 4)
}

impl ClaimGate {
    pub fn new(table: Arc<dyn ClaimTable>) -> Self {
        Self { table }
    }

    /// Try to take the lease: succeeds if nobody holds it, or the holder's lease expired and
    /// the work is not done (a takeover gets a new fencing token).
    pub async fn try_claim(
        &self,
        resource: &str,
        owner: &str,
        ttl: Duration,
    ) -> StoreResult<ClaimOutcome> {
        let now = now_millis();
        let expires_at = now + ttl_ms(ttl);
        let answer = match self.table.acquire(resource, owner, now, expires_at).await {
            Ok(a) => a,
            Err(e) if e.is_retryable() => {
                // The request may have landed with its answer lost: read the claim back and
                // compare the owner to learn whether the winner was us.
                tracing::warn!(resource, error = %e, "claim answer lost; reading the claim back");
                match self.table.get_claim(resource).await? {
                    Some(row) if row.row.owner == owner && row.row.state == ClaimState::Held => {
                        AcquireOutcome::Acquired(row)
                    }
                    Some(row) => AcquireOutcome::Existing(row),
                    None => return Err(e),
                }
            }
            Err(e) => return Err(e),
        };
        Ok(match answer {
            AcquireOutcome::Acquired(row) => {
                tracing::info!(
                    resource,
                    owner,
                    fencing_token = row.row.fencing_token,
                    "claim won"
                );
                ClaimOutcome::Claimed(Lease {
                    resource: resource.to_owned(),
                    owner: owner.to_owned(),
                    fencing_token: row.row.fencing_token,
                    expires_at: row.row.expires_at,
                    ttl,
                })
            }
            AcquireOutcome::Existing(row) if row.row.state == ClaimState::Done => {
                ClaimOutcome::AlreadyDone {
                    output: row.row.output,
                }
            }
            AcquireOutcome::Existing(row) => ClaimOutcome::HeldBy {
                owner: row.row.owner,
                expires_at: row.row.expires_at,
            },
        })
    }

    async fn change(&self, lease: &Lease, change: ClaimChange) -> StoreResult<LeaseState> {
        match self
            .table
            .change(&lease.resource, &lease.owner, lease.fencing_token, change)
            .await?
        {
            UpdateOutcome::Updated { .. } => Ok(LeaseState::Held),
            UpdateOutcome::Superseded(_) => Ok(LeaseState::Lost),
        }
    }

    /// Extend the lease by its TTL from now.
    pub async fn renew(&self, lease: &mut Lease) -> StoreResult<LeaseState> {
        let expires_at = now_millis() + ttl_ms(lease.ttl);
        let state = self
            .change(lease, ClaimChange::Renew { expires_at })
            .await?;
        if state == LeaseState::Held {
            lease.expires_at = expires_at;
        }
        Ok(state)
    }

    /// Mark the work done with its output; later claimants get `AlreadyDone` at once.
    pub async fn complete(&self, lease: &Lease, output: OutputRef) -> StoreResult<LeaseState> {
        self.change(lease, ClaimChange::Complete { output }).await
    }

    /// Give the lease up so another owner may claim at once.
    pub async fn release(&self, lease: &Lease) -> StoreResult<LeaseState> {
        self.change(lease, ClaimChange::Release).await
    }

    /// Renew `lease` in the background every third of its TTL until the handle is stopped.
    /// The returned handle reports a lost lease at once.
    pub fn keep_alive(&self, lease: &Lease) -> KeepAlive {
        let (tx, rx) = watch::channel(LeaseState::Held);
        let paused = Arc::new(AtomicBool::new(false));
        let gate = self.clone();
        let mut lease = lease.clone();
        let p = paused.clone();
        let task = tokio::spawn(async move {
            let period = (lease.ttl / 3).max(Duration::from_millis(50));
            loop {
                tokio::time::sleep(period).await;
                if p.load(Ordering::SeqCst) {
                    continue;
                }
                match gate.renew(&mut lease).await {
                    Ok(LeaseState::Held) => {}
                    Ok(LeaseState::Lost) => {
                        tracing::warn!(resource = %lease.resource, "lease lost to another owner");
                        let _ = tx.send(LeaseState::Lost);
                        return;
                    }
                    Err(e) => {
                        tracing::warn!(resource = %lease.resource, error = %e, "lease renewal failed")
                    }
                }
            }
        });
        KeepAlive { rx, paused, task }
    }
}

/// A background renewal of a lease.
#[derive(Debug)]
pub struct KeepAlive {
    rx: watch::Receiver<LeaseState>,
    paused: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<()>,
}

impl KeepAlive {
    /// True once a renewal found the lease taken over.
    pub fn is_lost(&self) -> bool {
        *self.rx.borrow() == LeaseState::Lost
    }

    /// Test hook: stop renewing (without stopping the task), so the lease lapses.
    pub fn pause(&self) {
        self.paused.store(true, Ordering::SeqCst);
    }

    pub fn stop(self) {
        self.task.abort();
    }
}

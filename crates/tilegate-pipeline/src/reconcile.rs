//! The reconciler: the safety net under the unattended flow's edges.
//!
//! The fast path moves a job by edges — an arrival planned, the last window's row triggering
//! assembly, a publication delivered to the sinks — and any edge can be lost: a queue
//! dead-letters a message after N receives, a process dies at the wrong moment, a sink is
//! down longer than the inline retries. The reconciler is level-triggered, as a Kubernetes
//! controller is: for each **open** job (read through the tables' index of open jobs, so a pass
//! costs O(open jobs), never a scan of the finished ones) it compares what is stored with what
//! should be, and acts:
//!
//! 1. windows never enqueued (the row written, its planner lost): the missing ones enqueued,
//!    then the row marked — once the job is older than the grace a planner has;
//! 2. windows that left the queue by the queue's own redrive policy (a handler killed or timed
//!    out on every receive) with no `incomplete` announcement: one recorded, exactly as the
//!    worker records it;
//! 3. every window recorded and no scene: assembled through the claim gate;
//! 4. announcements pending: delivered, oldest jobs first, with a backoff per job and a cap
//!    per pass;
//! 5. nothing left (published, or incomplete in its generation, and every announcement taken by
//!    this process's sinks): the job is **settled**, which takes it out of the open index.
//!
//! Every action is the conditional write the fast path makes (create-if-absent tiles, the
//! claim gate, version-guarded row changes), so a pass is idempotent and may race the fast
//! path, other reconcilers and itself.

use crate::announce::Announcer;
use serde::Serialize;
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;
use tilegate_assembler::{AssembleOptions, AssembleOutcome};
use tilegate_core::announce::{Announcement, change_job};
use tilegate_core::id::JobId;
use tilegate_core::message::WindowMessage;
use tilegate_core::metrics::Counters;
use tilegate_core::queue::DeadLetter;
use tilegate_core::stall::{self, Seen, Stall, StallReason};
use tilegate_core::table::JobRecord;
use tilegate_core::{Backends, Reason, StoreError, UnixMillis, now_millis};

/// What a pass may do and how much of it.
#[derive(Debug, Clone)]
pub struct ReconcileOptions {
    /// A job whose windows were never all enqueued is its planner's for this long.
    pub grace: Duration,
    /// Open jobs looked at per pass, oldest first.
    pub limit: usize,
    /// Dead letters read per pass.
    pub dead_letters: usize,
    /// Jobs whose announcements are delivered per pass.
    pub deliveries: usize,
    /// How jobs are assembled.
    pub assemble: AssembleOptions,
    /// Assemble only jobs whose tiles total at most this many bytes (a Lambda function's
    /// memory); a larger one is left to a host that can take it.
    pub max_assemble_bytes: Option<u64>,
}

impl ReconcileOptions {
    pub fn new(assemble: AssembleOptions) -> Self {
        Self {
            grace: Duration::from_secs(120),
            limit: 1000,
            dead_letters: 1000,
            deliveries: 100,
            assemble,
            max_assemble_bytes: None,
        }
    }
}

/// One stalled job, as a pass left it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub struct StalledJob {
    pub job_id: JobId,
    #[serde(flatten)]
    pub stall: Stall,
}

/// What one pass did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub struct PassReport {
    /// Open jobs looked at.
    pub open_jobs: u64,
    /// Jobs whose missing windows this pass enqueued, and how many windows.
    pub jobs_enqueued: u64,
    pub windows_enqueued: u64,
    /// Jobs this pass published (or found published by another), and jobs whose claim a live
    /// assembler holds.
    pub assembled: u64,
    pub assembly_held: u64,
    /// Jobs this pass announced `incomplete` for windows the queue dead-lettered.
    pub incomplete_recorded: u64,
    /// Announcements a sink took, and those still pending after this pass.
    pub delivered: u64,
    pub pending: u64,
    /// Jobs this pass settled (out of the open index).
    pub settled: u64,
    /// Letters read from the dead-letter queue.
    pub dead_letters_read: u64,
    /// Jobs still open and stalled after this pass, with why.
    pub stalled: Vec<StalledJob>,
    /// Jobs a store's failure stopped this pass (each tried again next pass).
    pub failures: Vec<String>,
}

impl PassReport {
    /// Whether the pass changed anything stored.
    pub fn acted(&self) -> bool {
        self.jobs_enqueued
            + self.assembled
            + self.incomplete_recorded
            + self.delivered
            + self.settled
            > 0
    }
}

/// When a job's announcements are next tried after sinks refused them.
#[derive(Debug, Clone, Copy)]
struct Backoff {
    failures: u32,
    next: UnixMillis,
}

/// The first retry after a refused delivery; doubled per refusal up to [`BACKOFF_MAX_MS`].
const BACKOFF_FIRST_MS: i64 = 30_000;
const BACKOFF_MAX_MS: i64 = 3_600_000;

/// Moves every open job to its end from stored state alone.
#[derive(Debug)]
pub struct Reconciler {
    b: Backends,
    opts: ReconcileOptions,
    announcer: Announcer,
    backoff: Mutex<HashMap<JobId, Backoff>>,
}

impl Reconciler {
    /// A reconciler over `b` delivering to `announcer`'s sinks (none: it settles a job once
    /// its outcome is recorded).
    pub fn new(b: Backends, opts: ReconcileOptions, announcer: Announcer) -> Self {
        Self {
            b,
            opts,
            announcer,
            backoff: Mutex::default(),
        }
    }

    /// One pass over the open jobs.
    pub async fn pass(&self) -> Result<PassReport, StoreError> {
        let now = now_millis();
        let open = self.b.jobs.list_open_jobs(self.opts.limit).await?;
        let mut report = PassReport {
            open_jobs: open.len() as u64,
            ..PassReport::default()
        };
        // The dead-letter queue, once a pass, only when some open job could have lost windows.
        let mut letters: HashMap<JobId, Vec<DeadLetter>> = HashMap::new();
        if open
            .iter()
            .any(|j| j.row.scene_output.is_none() && j.row.windows_enqueued)
        {
            let read = self
                .b
                .queue
                .list_dead_letters(self.opts.dead_letters)
                .await?;
            report.dead_letters_read = read.len() as u64;
            for d in read {
                if let Ok(wm) = WindowMessage::decode(&d.body) {
                    letters.entry(wm.job_id.clone()).or_default().push(d);
                }
            }
        }
        let mut deliveries = self.opts.deliveries;
        for job in &open {
            let theirs = letters.get(&job.row.job_id).map_or(&[][..], Vec::as_slice);
            if let Err(e) = self
                .one(&job.row, theirs, now, &mut deliveries, &mut report)
                .await
            {
                let text = tilegate_core::error::chain(&e);
                tracing::warn!(job_id = %job.row.job_id, error = %text, "reconciling the job failed; next pass tries again");
                report.failures.push(format!("{}: {text}", job.row.job_id));
            }
        }
        tracing::info!(
            open = report.open_jobs,
            enqueued = report.jobs_enqueued,
            assembled = report.assembled,
            incomplete = report.incomplete_recorded,
            delivered = report.delivered,
            settled = report.settled,
            stalled = report.stalled.len(),
            "reconcile pass"
        );
        Ok(report)
    }

    /// Reconcile one open job.
    async fn one(
        &self,
        job: &JobRecord,
        letters: &[DeadLetter],
        now: UnixMillis,
        deliveries: &mut usize,
        report: &mut PassReport,
    ) -> Result<(), StoreError> {
        let id = &job.job_id;
        let windows = job.grid.len();
        let mut recorded = self.b.manifest.count_entries(id).await?;
        let unpublished = job.scene_output.is_none();
        // 1. Windows never enqueued.
        let grace = i64::try_from(self.opts.grace.as_millis()).unwrap_or(i64::MAX);
        if unpublished
            && !job.windows_enqueued
            && recorded < windows
            && now.saturating_sub(job.created_at) >= grace
        {
            let sent = tilegate_planner::enqueue_windows(&self.b, job, true)
                .await?
                .enqueued;
            change_job(&*self.b.jobs, id, "mark the windows enqueued", |row| {
                !std::mem::replace(&mut row.windows_enqueued, true)
            })
            .await?;
            tracing::info!(job_id = %id, windows = sent, "reconcile: enqueued the windows its planner did not");
            report.jobs_enqueued += 1;
            report.windows_enqueued += sent;
        }
        // 2. Windows the queue dead-lettered with no `incomplete` announcement.
        let ours: Vec<(&DeadLetter, WindowMessage)> = letters
            .iter()
            .filter_map(|d| Some((d, WindowMessage::decode(&d.body).ok()?)))
            .filter(|(_, wm)| {
                wm.attempt.is_none() && wm.source == job.source && wm.grid == job.grid
            })
            .collect();
        if unpublished
            && !stall::announced_incomplete(job)
            && let Some((first, wm)) = ours.iter().min_by_key(|(d, _)| d.dead_at)
        {
            let code = first
                .reason
                .split(':')
                .next()
                .and_then(Reason::parse)
                .unwrap_or(Reason::MaxReceivesExceeded);
            let window = wm.window;
            let recorded_now = tilegate_core::announce::record(&*self.b.jobs, id, |row| {
                (row.scene_output.is_none() && !stall::announced_incomplete(row)).then(|| {
                    Announcement::incomplete(
                        &row.job_id,
                        row.redrives,
                        code.as_str(),
                        window,
                        now_millis(),
                    )
                })
            })
            .await?;
            if recorded_now {
                tracing::warn!(job_id = %id, letters = ours.len(), reason = code.as_str(), "reconcile: windows left the queue unannounced; recorded the job incomplete");
                report.incomplete_recorded += 1;
            }
        }
        // 3. Complete and unpublished: assemble through the claim gate.
        if unpublished && windows > 0 && recorded >= windows && self.fits(id).await? {
            let assembled =
                tilegate_assembler::assemble(&self.b, id, &self.opts.assemble, &Counters::new())
                    .await;
            match assembled {
                Ok(r) => match r.outcome {
                    AssembleOutcome::Written
                    | AssembleOutcome::AlreadyDone
                    | AssembleOutcome::AlreadyPresent => {
                        tracing::info!(job_id = %id, outcome = r.outcome.as_str(), "reconcile: assembled a complete job");
                        report.assembled += 1;
                    }
                    AssembleOutcome::HeldBy { .. } => report.assembly_held += 1,
                    AssembleOutcome::LeaseLost => report
                        .failures
                        .push(format!("{id}: the claim's lease was taken over mid-upload")),
                },
                Err(e) => report.failures.push(format!(
                    "{id}: assemble: {}",
                    tilegate_core::error::chain(&e)
                )),
            }
        }
        // 4. Deliver what is pending, within the pass's cap and the job's backoff.
        let Some(row) = self.b.jobs.get_job(id).await? else {
            return Ok(());
        };
        let mut row = row.row;
        if self.announcer.pending_on(&row) && *deliveries > 0 && self.due(id, now) {
            *deliveries -= 1;
            let d = self.announcer.deliver(id).await?;
            report.delivered += d.delivered;
            report.pending += d.pending;
            self.after_delivery(id, d.pending == 0, now);
            if let Some(fresh) = self.b.jobs.get_job(id).await? {
                row = fresh.row;
            }
        }
        // 5. Settle, or say why not.
        if self.announcer.settle(&row).await? {
            report.settled += 1;
            return Ok(());
        }
        if row.scene_output.is_none() {
            recorded = self.b.manifest.count_entries(id).await?;
        }
        let seen = Seen {
            recorded,
            last_recorded_at: None,
            dead_letters: ours.len() as u64,
        };
        if let Some(stall) = stall::stall_of(&row, seen, now) {
            report.stalled.push(StalledJob {
                job_id: id.clone(),
                stall,
            });
        } else if self.announcer.pending_on(&row) {
            report.stalled.push(StalledJob {
                job_id: id.clone(),
                stall: Stall {
                    reason: StallReason::AnnouncementPending,
                    count: row
                        .outbox
                        .iter()
                        .filter(|a| !self.announcer.delivered_to_mine(a))
                        .count() as u64,
                },
            });
        }
        Ok(())
    }

    /// Whether the job's tiles fit this reconciler's assembly limit.
    async fn fits(&self, id: &JobId) -> Result<bool, StoreError> {
        let Some(max) = self.opts.max_assemble_bytes else {
            return Ok(true);
        };
        let bytes: u64 = self
            .b
            .manifest
            .list_entries(id)
            .await?
            .iter()
            .map(|r| r.row.size)
            .sum();
        if bytes > max {
            tracing::warn!(job_id = %id, bytes, max, "reconcile: job too large to assemble here");
        }
        Ok(bytes <= max)
    }

    fn due(&self, id: &JobId, now: UnixMillis) -> bool {
        let backoff = self.backoff.lock().expect("backoff");
        backoff.get(id).is_none_or(|b| now >= b.next)
    }

    fn after_delivery(&self, id: &JobId, all_taken: bool, now: UnixMillis) {
        let mut backoff = self.backoff.lock().expect("backoff");
        if all_taken {
            backoff.remove(id);
            return;
        }
        let b = backoff.entry(id.clone()).or_insert(Backoff {
            failures: 0,
            next: now,
        });
        b.failures += 1;
        let wait = BACKOFF_FIRST_MS
            .saturating_mul(1 << b.failures.saturating_sub(1).min(20))
            .min(BACKOFF_MAX_MS);
        b.next = now + wait;
    }
}

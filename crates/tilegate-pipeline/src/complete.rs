//! Assembly on completion: the [`OnComplete`] a worker pool calls when it records a job's last
//! window — `tilegate work --assemble`. It assembles exactly as `tilegate assemble` does
//! (manifest count, claim gate, copy, publish once); the duplicate triggers that at-least-once
//! delivery and racing workers make find the claim held or the scene published. Then it
//! delivers the job's announcements ([`crate::announce`]): the one the assembly recorded, or
//! one a crashed predecessor left pending — a duplicate trigger delivers it.

use crate::announce::Announcer;
use tilegate_assembler::{AssembleOptions, AssembleOutcome};
use tilegate_core::id::JobId;
use tilegate_core::metrics::{self as m, Counters};
use tilegate_core::table::JobRecord;
use tilegate_core::{Backends, Reason, UnixMillis};
use tilegate_worker::{CompletionError, OnComplete};

/// The largest job (its tiles' bytes) the Lambda function assembles by default: 4 GiB, which a
/// 10 GiB function lays out and uploads well within its 15 minutes.
pub const LAMBDA_ASSEMBLE_MAX_BYTES: u64 = 4 << 30;

/// Assemble a completed job in the worker that noticed.
#[derive(Debug)]
pub struct AssembleOnComplete {
    b: Backends,
    opts: AssembleOptions,
    max_bytes: Option<u64>,
    announcer: Option<Announcer>,
}

impl AssembleOnComplete {
    pub fn new(b: Backends, opts: AssembleOptions) -> Self {
        Self {
            b,
            opts,
            max_bytes: None,
            announcer: None,
        }
    }

    /// Deliver the job's announcements with `announcer` once it is published (or incomplete).
    pub fn announcing(mut self, announcer: Announcer) -> Self {
        self.announcer = Some(announcer);
        self
    }

    /// Deliver what `job`'s outbox holds; a sink's failure leaves it pending (logged by the
    /// announcer), a store's failure is logged: delivery never fails a window.
    async fn announce(&self, job: &JobId, delivery: u32) {
        if self.announcer.is_some() {
            tilegate_fault::point("before-announce", delivery);
        }
        if let Some(a) = &self.announcer
            && let Err(e) = a.deliver(job).await
        {
            tracing::warn!(job_id = %job, error = %tilegate_core::error::chain(&e), "announcing: the job row could not be read or marked; left pending");
        }
        // Nothing left for this process's sinks: out of the open index (else the reconciler
        // delivers, and settles, later).
        let settler = self
            .announcer
            .clone()
            .unwrap_or_else(|| Announcer::new(self.b.clone(), Vec::new()));
        let settled = match self.b.jobs.get_job(job).await {
            Ok(Some(row)) => settler.settle(&row.row).await,
            Ok(None) => Ok(false),
            Err(e) => Err(e),
        };
        if let Err(e) = settled {
            tracing::warn!(job_id = %job, error = %tilegate_core::error::chain(&e), "settling the job failed; the reconciler settles it");
        }
    }

    /// Assemble only jobs whose tiles total at most `bytes`; a larger one is left
    /// `assembling` for a host that can take it (`tilegate assemble --all`, run on a schedule
    /// by deploy/k8s's CronJob).
    pub fn at_most(mut self, bytes: u64) -> Self {
        self.max_bytes = Some(bytes);
        self
    }
}

impl AssembleOnComplete {
    /// Assemble; when another assembler holds the claim, take its word only once it has shown
    /// it is alive. A holder SIGKILLed mid-assembly leaves its lease live until it lapses, and
    /// its own trigger comes back to someone who finds the claim held: acknowledging then
    /// would lose the last trigger and leave the job `assembling` for good. So wait until the
    /// lease's expiry and look again: renewed (a later expiry) means a live holder, whose
    /// trigger is still in flight; lapsed, this one claims and assembles; done, it is done.
    async fn assemble_or_outwait(
        &self,
        job: &JobRecord,
        opts: &AssembleOptions,
        counters: &Counters,
    ) -> Result<tilegate_assembler::AssembleReport, tilegate_assembler::AssembleError> {
        let mut seen: Option<UnixMillis> = None;
        loop {
            let r = tilegate_assembler::assemble(&self.b, &job.job_id, opts, counters).await?;
            let AssembleOutcome::HeldBy { expires_at, .. } = &r.outcome else {
                return Ok(r);
            };
            if seen.is_some_and(|before| *expires_at > before) {
                return Ok(r);
            }
            // A second soon (a small scene is done by then), then a renewal interval (a live
            // holder renews every third of its lease), never past the expiry.
            let step = if seen.is_none() {
                1000
            } else {
                opts.lease_ttl.as_millis() as u64 / 3 + 250
            };
            seen = Some(*expires_at);
            let to_expiry = (*expires_at - tilegate_core::now_millis()).max(0) as u64 + 250;
            let wait = step.min(to_expiry);
            tracing::info!(job_id = %job.job_id, wait_ms = wait, "claim held: waiting to see its holder finish, renew it or let it lapse");
            tokio::time::sleep(std::time::Duration::from_millis(wait)).await;
        }
    }
}

#[async_trait::async_trait]
impl OnComplete for AssembleOnComplete {
    async fn job_incomplete(&self, job: &JobId) {
        self.announce(job, u32::MAX).await;
    }

    async fn job_complete(&self, job: &JobRecord, delivery: u32) -> Result<(), CompletionError> {
        if job.scene_output.is_some() {
            self.announce(&job.job_id, delivery).await;
            return Ok(());
        }
        if let Some(max) = self.max_bytes {
            let rows = self
                .b
                .manifest
                .list_entries(&job.job_id)
                .await
                .map_err(|e| CompletionError {
                    reason: Reason::storage(e.is_retryable()),
                    retryable: e.is_retryable(),
                    detail: tilegate_core::error::chain(&e),
                })?;
            let bytes: u64 = rows.iter().map(|r| r.row.size).sum();
            if bytes > max {
                tracing::warn!(job_id = %job.job_id, bytes, max, "job too large to assemble here: left for `tilegate assemble --all`");
                return Ok(());
            }
        }
        let counters = Counters::new();
        let opts = AssembleOptions {
            delivery,
            ..self.opts.clone()
        };
        let assembled = self.assemble_or_outwait(job, &opts, &counters).await;
        // The assembler's own counts, which no worker flushes (its requests are already
        // charged to the job by the worker's meter).
        let claims: Vec<(&str, u64)> = m::ASSEMBLER
            .into_iter()
            .map(|n| (n, counters.get(n)))
            .filter(|(_, v)| *v > 0)
            .collect();
        if !claims.is_empty()
            && let Err(e) = self.b.counters.add_counters(&job.job_id, &claims).await
        {
            tracing::warn!(job_id = %job.job_id, error = %tilegate_core::error::chain(&e), "counting the assembly failed");
        }
        match assembled {
            Ok(r) => {
                tracing::info!(job_id = %job.job_id, outcome = r.outcome.as_str(), scene = %r.scene_key, "assembled on completion");
                match r.outcome {
                    // Published here or before, or being published by a live holder of the
                    // claim (one seen renewing it), whose own trigger is not acknowledged
                    // until it is done.
                    AssembleOutcome::Written
                    | AssembleOutcome::AlreadyDone
                    | AssembleOutcome::AlreadyPresent => {
                        self.announce(&job.job_id, delivery).await;
                        Ok(())
                    }
                    AssembleOutcome::HeldBy { .. } => Ok(()),
                    AssembleOutcome::LeaseLost => Err(CompletionError {
                        reason: Reason::LeaseLost,
                        retryable: true,
                        detail: "the claim's lease was taken over mid-upload".to_owned(),
                    }),
                }
            }
            Err(e) => Err(CompletionError {
                reason: e.reason_code(),
                retryable: e.is_retryable(),
                detail: tilegate_core::error::chain(&e),
            }),
        }
    }
}

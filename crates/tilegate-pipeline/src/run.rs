//! A scene from source to published COG in one process: plan, work the queue until the job's
//! manifest is full, assemble. `tilegate run` and the benches' comparison with the simulation
//! run exactly this sequence; the stages keep every guarantee they have alone (a second `run` of
//! the same source resumes the same job, a tile already in place is not written again, the
//! scene is claimed before it is built).

use std::future::Future;
use std::sync::Arc;
use tilegate_assembler::{AssembleError, AssembleOptions, AssembleOutcome, AssembleReport};
use tilegate_core::metrics::{self as m, Counters};
use tilegate_core::table::JobRecord;
use tilegate_core::{Backends, JobId, StoreError};
use tilegate_planner::{Plan, PlanError, PlanOptions};
use tilegate_worker::{StopWhen, WorkReport, Worker, WorkerConfig};
use tokio::sync::watch;

/// The encoders fill the scene's first overview level (a quarter of its uncompressed size: 52 MB
/// for a 10240² UInt16 scene) for the assembler only up to this size; beyond it the assembler
/// decodes the tiles, one row of windows at a time.
pub const REDUCED_WINDOWS_BUDGET: usize = 512 << 20;

/// How a run goes.
#[derive(Debug, Clone)]
pub struct RunOptions {
    pub plan: PlanOptions,
    /// Each pool's configuration; its `stop` is set by [`Until`].
    pub worker: WorkerConfig,
    /// Worker pools working the queue side by side in this process (each with its threads).
    pub pools: usize,
    pub until: Until,
    /// Assemble the scene once the manifest is full; `None`: tiles only.
    pub assemble: Option<AssembleOptions>,
    /// The encoders' budget for the first overview level they hand the assembler (0: none).
    pub reduced_budget: usize,
}

/// When the pools stop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Until {
    /// The job's manifest holds every window, or nothing is left to receive.
    JobComplete,
    /// Nothing is visible or in flight on the queue, whatever job it belongs to.
    QueueDrained,
}

/// What a run did.
#[derive(Debug)]
pub struct RunOutcome {
    pub plan: Plan,
    /// The pools' reports, added up.
    pub work: WorkReport,
    /// The job's manifest rows when the pools stopped.
    pub manifest_rows: u64,
    /// The assembled scene; `None` when not asked for or the manifest was not full.
    pub scene: Option<AssembleReport>,
}

impl RunOutcome {
    /// Whether the manifest holds every window of the plan.
    pub fn complete(&self) -> bool {
        self.manifest_rows == self.plan.windows
    }
}

/// Why a run stopped before its end.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error("plan {source_ref}")]
    Plan {
        source_ref: String,
        source: PlanError,
    },
    #[error("work")]
    Work(#[source] StoreError),
    #[error(transparent)]
    Count(StoreError),
    #[error("assemble the scene")]
    Assemble(#[source] AssembleError),
}

/// Something shown while the pools work (a progress bar); finished before the scene is
/// assembled.
pub trait Progress: Send {
    fn finish(self) -> impl Future<Output = ()> + Send;
}

impl Progress for () {
    async fn finish(self) {}
}

/// Plan `source`, work its windows with `opts.pools` pools until [`Until`], then assemble the
/// scene if asked and the manifest is full. `progress` is started once the job is known; the
/// pools stop early when `stop` flips. The requests this process sent are recorded on the job
/// ([`record_job_counts`]).
pub async fn run<P: Progress>(
    b: &Backends,
    source: &str,
    opts: RunOptions,
    counters: &Arc<Counters>,
    stop: watch::Receiver<bool>,
    progress: impl FnOnce(&JobRecord) -> P,
) -> Result<RunOutcome, RunError> {
    let plan = tilegate_planner::plan(b, source, &opts.plan)
        .await
        .map_err(|source_err| RunError::Plan {
            source_ref: source.to_owned(),
            source: source_err,
        })?;
    let job = plan.job.clone();
    tilegate_retry::meter::set_job(&job.job_id);
    let mut cfg = opts.worker;
    cfg.stop = match opts.until {
        Until::JobComplete => StopWhen::JobComplete(job.job_id.clone()),
        Until::QueueDrained => StopWhen::QueueDrained,
    };
    // The encoders hand the assembler each window's first overview level, so that it does not
    // decode the tiles this process has just encoded.
    let pixel_bytes = job.scene.bands as usize
        * tilegate_cog::Dtype::from_name(&job.scene.dtype).map_or(8, |d| d.size());
    let reduced = opts.assemble.as_ref().and_then(|o| {
        tilegate_cog::ReducedWindows::new(
            job.job_id.clone(),
            o.resampling,
            job.grid,
            pixel_bytes,
            opts.reduced_budget,
        )
        .map(Arc::new)
    });
    cfg.reduce_into = reduced.clone();
    let shown = progress(&job);
    // A stop during the assembly abandons it and releases its claim (the next run assembles
    // at once); a stop before it leaves the job unassembled.
    let stop_assembly = stop.clone();
    let work = work_pools(b, cfg, opts.pools, counters, stop).await;
    shown.finish().await;
    let work = work.map_err(RunError::Work)?;
    // The encoder threads, their buffers and the source blocks they read are done with: give
    // their memory back before the scene is assembled.
    tilegate_cog::release_block_cache();
    release_free_memory();
    let manifest_rows = b
        .manifest
        .count_entries(&job.job_id)
        .await
        .map_err(RunError::Count)?;
    // The assembler counts on its own: the workers flushed theirs, and some names (a
    // pyramid's tile Creates) are bumped by both.
    let assembly = Counters::new();
    let scene = match opts.assemble {
        Some(mut a) if manifest_rows == plan.windows => {
            a.reduced = reduced;
            a.stop = Some(stop_assembly.clone());
            let assembled = assemble_or_wait(b, &job.job_id, &a, &assembly, stop_assembly).await;
            for name in m::ASSEMBLER {
                counters.add(name, assembly.get(name));
            }
            Some(assembled.map_err(RunError::Assemble)?)
        }
        _ => None,
    };
    if scene.is_some() {
        // `run` announces to no sink: once published, nothing is left for it to do, and the
        // job leaves the reconciler's open index (before the counts are recorded: its reads
        // and write are the job's too).
        settle_here(b, &job.job_id).await;
    }
    record_job_counts(b, &job.job_id, &assembly).await;
    Ok(RunOutcome {
        plan,
        work,
        manifest_rows,
        scene,
    })
}

/// Assemble; while another assembler holds the claim (a second `run` of the same job, started
/// beside this one), wait for it rather than end without a scene: its scene once it publishes
/// (`already_done`), or this run's own once its lease lapses (a holder that died). A live
/// holder renews its lease, so the wait ends when the scene does; a stop ends it at once.
async fn assemble_or_wait(
    b: &Backends,
    job: &JobId,
    opts: &AssembleOptions,
    counters: &Counters,
    mut stop: watch::Receiver<bool>,
) -> Result<AssembleReport, AssembleError> {
    let mut said = false;
    loop {
        let r = tilegate_assembler::assemble(b, job, opts, counters).await?;
        let AssembleOutcome::HeldBy { owner, expires_at } = &r.outcome else {
            return Ok(r);
        };
        if !said {
            tracing::info!(job_id = %job, holder = %owner, "another assembler holds the scene's claim: waiting for it to publish, or for its lease to lapse");
            said = true;
        }
        let to_expiry = (*expires_at - tilegate_core::now_millis()).clamp(0, 1000) as u64;
        tokio::select! {
            () = tokio::time::sleep(std::time::Duration::from_millis(to_expiry.max(200))) => {}
            () = tilegate_assembler::asked_to_stop(&mut stop) => {
                return Err(AssembleError::Interrupted { job: job.clone() });
            }
        }
    }
}

/// Settle `job` for a process with no sinks (a failure is logged: the reconciler settles it).
async fn settle_here(b: &Backends, job: &JobId) {
    let settler = crate::announce::Announcer::new(b.clone(), Vec::new());
    let settled = match b.jobs.get_job(job).await {
        Ok(Some(row)) => settler.settle(&row.row).await,
        Ok(None) => Ok(false),
        Err(e) => Err(e),
    };
    if let Err(e) = settled {
        tracing::warn!(job_id = %job, error = %tilegate_core::error::chain(&e), "settling the job failed; the reconciler settles it");
    }
}

/// `pools` workers over one queue, their reports added up. Each pool (and its encoder threads)
/// is dropped as soon as it stops.
async fn work_pools(
    b: &Backends,
    cfg: WorkerConfig,
    pools: usize,
    counters: &Arc<Counters>,
    stop: watch::Receiver<bool>,
) -> Result<WorkReport, StoreError> {
    let mut runs = tokio::task::JoinSet::new();
    for _ in 0..pools.max(1) {
        let worker = Worker::new(b.clone(), cfg.clone(), Arc::clone(counters));
        let stop = stop.clone();
        runs.spawn(async move { worker.run(stop).await });
    }
    let mut total = WorkReport::default();
    while let Some(done) = runs.join_next().await {
        match done {
            Ok(report) => total.merge(report?),
            Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
            Err(_) => {}
        }
    }
    Ok(total)
}

/// Write what this process counted for `job` and has not written yet: the requests its stores
/// sent (in a command that serves one job, those made before the job was known or outside any
/// job's scope — opening the stores, planning, lease renewals — were made for it too) and the
/// counts of its assembler (`counters`: the assembler's own, which no worker flushes). A
/// failure to write them is logged: the counts are for cost reports, never for correctness.
pub async fn record_job_counts(b: &Backends, job: &JobId, counters: &Counters) {
    use tilegate_retry::meter;
    meter::attribute_unscoped(job);
    let mut by_job: std::collections::BTreeMap<JobId, _> = meter::take_jobs().into_iter().collect();
    by_job.entry(job.clone()).or_default();
    for (j, counts) in by_job {
        let mut list: Vec<(&str, u64)> = counts.iter().map(|(k, v)| (k.as_str(), *v)).collect();
        if &j == job {
            list.extend(
                m::ASSEMBLER
                    .into_iter()
                    .map(|n| (n, counters.get(n)))
                    .filter(|(_, v)| *v > 0),
            );
        }
        if list.is_empty() {
            continue;
        }
        if let Err(e) = b.counters.add_counters(&j, &list).await {
            tracing::warn!(job_id = %j, error = %tilegate_core::error::chain(&e), "counting the job's requests failed");
        }
    }
}

/// Hand the heap's free pages back to the system (glibc keeps them otherwise), so that a
/// process's peak is its encoders' or its assembler's, not both.
pub fn release_free_memory() {
    // SAFETY: malloc_trim only releases free heap memory.
    unsafe {
        libc::malloc_trim(0);
    }
}

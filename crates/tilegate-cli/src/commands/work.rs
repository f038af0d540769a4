//! `work`, `run` and `backfill`: pools of workers over the queue, and the whole pipeline in one
//! process through `tilegate_pipeline::run`.

use super::announce::{announcer, deliver_after};
use super::assemble::assemble_options;
use super::{find_job, stop_on_signals, worker_config};
use crate::args::{AssembleFlags, BackfillArgs, PoolArgs, RunArgs, WorkArgs};
use crate::ctx::Ctx;
use crate::errors::refused;
use crate::output::{self, Out};
use crate::recipes::{Location, recipe_from};
use crate::reports::{
    AssembleSummary, BackfillReport, Item, NamedCopy, RasterBrief, RunBatch, RunReport, WorkSummary,
};
use anyhow::Context;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tilegate_core::metrics::{self as m, Counters};
use tilegate_core::table::JobRecord;
use tilegate_core::{Backends, Recipe};
use tilegate_core::{Exit, Reason};
use tilegate_pipeline::complete::AssembleOnComplete;
use tilegate_pipeline::run::REDUCED_WINDOWS_BUDGET;
use tilegate_pipeline::{RunOptions, Until};
use tilegate_planner::PlanOptions;
use tilegate_worker::{StopWhen, WorkReport, Worker};

/// How many of the newest jobs a pool looks at for pending announcements as it exits.
const ANNOUNCE_SWEEP_JOBS: usize = 100;

/// A pool's reconciler: a pass every `every` until the pool stops (the first after one
/// period, so that a pool's own fast path goes first).
async fn reconcile_in_background(
    r: tilegate_pipeline::reconcile::Reconciler,
    every: Duration,
    mut stop: tokio::sync::watch::Receiver<bool>,
) {
    loop {
        tokio::select! {
            () = tokio::time::sleep(every) => {}
            _ = stop.changed() => return,
        }
        if *stop.borrow() {
            return;
        }
        if let Err(e) = r.pass().await {
            tracing::warn!(error = %tilegate_core::error::chain(&e), "reconcile pass failed; the next one tries again");
        }
    }
}

impl WorkArgs {
    pub async fn exec(self, cx: &Ctx) -> anyhow::Result<ExitCode> {
        work(cx, &cx.open().await?, self).await
    }
}

impl RunArgs {
    pub async fn exec(self, cx: &Ctx) -> anyhow::Result<ExitCode> {
        run(cx, &cx.open().await?, self).await
    }
}

impl BackfillArgs {
    pub async fn exec(self, cx: &Ctx) -> anyhow::Result<ExitCode> {
        backfill_cmd(&cx.out, &cx.open().await?, self).await
    }
}

async fn work(cx: &Ctx, b: &Backends, a: WorkArgs) -> anyhow::Result<ExitCode> {
    let out = &cx.out;
    let stop = if a.until_empty {
        StopWhen::QueueDrained
    } else {
        StopWhen::Signal
    };
    let counters = Arc::new(Counters::new());
    let mut cfg = worker_config(cx, &a.pool, stop);
    let announcer = announcer(b, &a.assemble_flags.announce).await?;
    if a.assemble {
        let mut hook = AssembleOnComplete::new(b.clone(), assemble_options(&a.assemble_flags)?);
        if let Some(an) = &announcer {
            hook = hook.announcing(an.clone());
        }
        cfg.on_complete = Some(Arc::new(hook));
    }
    if !out.json {
        eprintln!(
            "tilegate: working the {} queue: {} encoder thread(s), {} window(s) at once{}; {}",
            b.queue.name(),
            cfg.threads,
            cfg.concurrency,
            if a.assemble {
                ", assembling each job it completes"
            } else {
                ""
            },
            if a.until_empty {
                "exits once the queue is empty"
            } else {
                "Ctrl-C finishes the windows in flight and stops"
            }
        );
    }
    let worker = Worker::new(b.clone(), cfg, counters.clone());
    let stop = stop_on_signals();
    if a.assemble && a.reconcile_every > 0.0 {
        let reconciler = tilegate_pipeline::reconcile::Reconciler::new(
            b.clone(),
            tilegate_pipeline::reconcile::ReconcileOptions::new(assemble_options(
                &a.assemble_flags,
            )?),
            announcer
                .clone()
                .unwrap_or_else(|| tilegate_pipeline::announce::Announcer::new(b.clone(), vec![])),
        );
        tokio::spawn(reconcile_in_background(
            reconciler,
            Duration::from_secs_f64(a.reconcile_every.max(1.0)),
            stop.clone(),
        ));
    }
    if let Some(addr) = a.metrics_addr {
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .with_context(|| format!("listen on --metrics-addr {addr}"))?;
        tracing::info!(addr = %listener.local_addr()?, "serving /healthz and /metrics");
        tokio::spawn(tilegate_service::metrics::serve(
            listener,
            counters.clone(),
            b.ledger.clone(),
            stop.clone(),
        ));
    }
    let started = Instant::now();
    let progress = work_progress(out, &counters);
    let report = worker.run(stop).await.context("work");
    progress.finish_and_clear();
    let report = report?;
    // What a sink refused while the pool ran, or what a pool without --assemble recorded
    // (jobs left incomplete): one more delivery before exiting.
    if let Some(an) = &announcer {
        match an.sweep(ANNOUNCE_SWEEP_JOBS).await {
            Ok(d) if d.pending > 0 => {
                tracing::warn!(
                    pending = d.pending,
                    "announcements left pending: `tilegate announce` delivers them later"
                );
            }
            Ok(_) => {}
            Err(e) => {
                tracing::warn!(error = %tilegate_core::error::chain(&e), "announcing at exit failed")
            }
        }
    }
    out.emit(&WorkSummary {
        handled: report.handled,
        written: report.written,
        already_present: report.already_present,
        skipped: report.skipped,
        accepts_refused: report.accepts_refused,
        dead_lettered: report.dead_lettered,
        retried: report.retried,
        released: report.released,
        counters: counters.snapshot(),
        unattributed_requests: tilegate_retry::meter::unattributed(),
        elapsed_s: started.elapsed().as_secs_f64(),
    });
    Ok(ExitCode::SUCCESS)
}

async fn run(cx: &Ctx, b: &Backends, a: RunArgs) -> anyhow::Result<ExitCode> {
    let out = &cx.out;
    let (recipe, location) = recipe_from(&a.recipe)?;
    let assemble = (!a.no_assemble).then_some(&a.assemble);
    let run_one = |source: String| {
        let (recipe, location) = (recipe.clone(), location.clone());
        let (assets, shards, pool) = (&a.recipe.assets, a.recipe.manifest_shards, &a.pool);
        async move {
            run_source(
                cx,
                b,
                (&source, assets, shards),
                recipe,
                location,
                pool,
                assemble,
            )
            .await
        }
    };
    let Some(list) = &a.from else {
        let source = a.source.clone().expect("clap requires a source or --from");
        if let Some(path) = &a.out_file {
            // Before any work: an -o that cannot be written fails now, not after the scene.
            check_named_copy(path, &source, a.force)?;
        }
        let mut ran = run_one(source).await?;
        if let Some(path) = &a.out_file
            && ran.complete
        {
            let size = write_named_copy(b, &ran.report.job_id, path).await?;
            ran.report.out = Some(NamedCopy {
                path: path.display().to_string(),
                size,
            });
        }
        return Ok(emit_run(out, &ran));
    };
    // One scene after another, each planned, worked and assembled before the next: a job
    // that cannot complete is reported and the list goes on.
    let sources = tilegate_pipeline::batch::sources(list)?;
    let (mut jobs, mut failed, mut incomplete) = (Vec::with_capacity(sources.len()), 0, 0);
    for source in sources {
        let item = match run_one(source.clone()).await {
            Ok(ran) => {
                incomplete += usize::from(!ran.complete);
                Item::Done(ran.report)
            }
            Err(e) => {
                failed += 1;
                Item::Failed {
                    source: tilegate_core::redact::redact(&source).into_owned(),
                    error: super::error_doc(&e),
                }
            }
        };
        if !out.json {
            println!("{}", tilegate_core::redact::redact(&item.line(out)));
        }
        jobs.push(item);
    }
    if out.json {
        let complete = jobs.len() - failed - incomplete;
        println!(
            "{}",
            tilegate_core::redact::redact(&out.json_of(&RunBatch {
                jobs,
                complete,
                incomplete,
                failed,
            }))
        );
    }
    Ok(if failed > 0 {
        Exit::Failed.into()
    } else if incomplete > 0 {
        Exit::Incomplete.into()
    } else {
        ExitCode::SUCCESS
    })
}

/// One source run: its `run --json` document and whether the job completed.
pub(super) struct Ran {
    report: RunReport,
    complete: bool,
}

/// Print a run's document (or its text) and say how the process ends.
pub(super) fn emit_run(out: &Out, ran: &Ran) -> ExitCode {
    out.emit(&ran.report);
    if ran.complete {
        ExitCode::SUCCESS
    } else {
        Exit::Incomplete.into()
    }
}

pub(super) async fn run_source(
    cx: &Ctx,
    b: &Backends,
    (source, assets, recipe_shards): (&str, &[String], u32),
    recipe: Recipe,
    (prefix, tenant): Location,
    pool: &PoolArgs,
    assemble: Option<&AssembleFlags>,
) -> anyhow::Result<Ran> {
    let out = &cx.out;
    let started = Instant::now();
    let counters = Arc::new(Counters::new());
    let opts = RunOptions {
        plan: PlanOptions {
            recipe,
            prefix,
            policy: cx.policy_of(&tenant),
            tenant,
            resume: true,
            assets: assets.to_vec(),
            manifest_shards: recipe_shards,
        },
        worker: worker_config(cx, pool, StopWhen::Signal),
        pools: 1,
        until: Until::JobComplete,
        assemble: assemble.map(assemble_options).transpose()?,
        reduced_budget: REDUCED_WINDOWS_BUDGET,
    };
    let ticker = output::Ticker::default();
    let then = assemble.map(|_| "every window recorded: assembling the scene".to_owned());
    let r = tilegate_pipeline::run(b, source, opts, &counters, stop_on_signals(), |job| {
        output::progress(out, b.clone(), job, then, &ticker)
    })
    .await;
    ticker.done();
    let r = r?;
    let complete = r.complete();
    if let Some(flags) = assemble {
        deliver_after(
            announcer(b, &flags.announce).await?.as_ref(),
            &r.plan.job.job_id,
        )
        .await;
    }
    let report = run_summary(
        &r.plan.job,
        (r.plan.windows, r.plan.already_recorded, r.manifest_rows),
        &r.work,
        &counters,
        r.scene.as_ref().map(|s| AssembleSummary::of(s, &counters)),
        started,
    );
    Ok(Ran { report, complete })
}

fn run_summary(
    job: &JobRecord,
    (windows, already_recorded, manifest_rows): (u64, u64, u64),
    report: &WorkReport,
    counters: &Counters,
    scene: Option<AssembleSummary>,
    started: Instant,
) -> RunReport {
    // Windows, not messages: a resumed run's twice-queued windows count once.
    let counts = tilegate_core::lifecycle::RunCounts::new(
        windows,
        already_recorded,
        manifest_rows,
        counters.get(m::TILES_WRITTEN),
        report.dead_lettered,
    );
    RunReport {
        job_id: job.job_id.clone(),
        output: RasterBrief::of(job),
        lifecycle: RunReport::lifecycle_of(&counts, scene.as_ref()),
        counts,
        manifest_rows: counts.counts.recorded,
        duplicate_encodes_skipped: counters.get(m::DUPLICATE_ENCODES_SKIPPED),
        retried: report.retried,
        complete: counts.counts.complete(),
        tiles_prefix: job.prefix.tiles_dir(&job.job_id),
        counters: counters.snapshot(),
        elapsed_s: started.elapsed().as_secs_f64(),
        scene,
        out: None,
    }
}

async fn backfill_cmd(out: &Out, b: &Backends, a: BackfillArgs) -> anyhow::Result<ExitCode> {
    let job = find_job(b, Some(&a.job)).await?;
    let sent = tilegate_planner::enqueue_windows(b, &job, a.missing).await?;
    out.emit(&BackfillReport {
        job_id: job.job_id,
        enqueued: sent.enqueued,
        already_recorded: sent.recorded,
        still_queued: sent.queued,
        windows: job.grid.len(),
    });
    Ok(ExitCode::SUCCESS)
}

/// Copy the job's published scene — the version its row records, read in ranges pinned to its
/// ETag — to `path` through a temporary name beside it, renamed into place once complete and
/// on disk. A second run writes the same bytes again; the store's scene is not touched.
/// Whether `-o PATH` may be written for `source`: its directory exists, it is not the
/// source itself (the job would no longer match its pinned source), and an existing file is
/// replaced only with `force` (said on stderr).
fn check_named_copy(path: &std::path::Path, source: &str, force: bool) -> anyhow::Result<()> {
    let bad = |why: String| refused(Reason::BadOption, format!("-o {}: {why}", path.display()));
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => std::path::Path::new("."),
    };
    if !dir.is_dir() {
        return Err(bad(format!(
            "the directory {} does not exist",
            dir.display()
        )));
    }
    if path.is_dir() {
        return Err(bad("a directory, not a file name".to_owned()));
    }
    let Ok(existing) = path.canonicalize() else {
        return Ok(());
    };
    let local = match tilegate_core::reference::Reference::parse(source) {
        Ok(tilegate_core::reference::Reference::Local(p)) => Some(p),
        _ => None,
    };
    if local.is_some_and(|p| {
        std::path::Path::new(&p)
            .canonicalize()
            .is_ok_and(|s| s == existing)
    }) {
        return Err(bad(
            "that is the job's own source: the scene would replace what it is made from".to_owned(),
        ));
    }
    if !force {
        return Err(bad("the file exists; --force replaces it".to_owned()));
    }
    eprintln!(
        "tilegate: -o {} exists and will be replaced (--force)",
        path.display()
    );
    Ok(())
}

async fn write_named_copy(
    b: &Backends,
    job: &tilegate_core::JobId,
    path: &std::path::Path,
) -> anyhow::Result<u64> {
    use std::io::Write as _;
    use tilegate_core::object::ObjectStoreExt as _;
    let row = b
        .jobs
        .get_job(job)
        .await?
        .ok_or_else(|| refused(Reason::UnknownJob, format!("no job {job}")))?
        .row;
    let Some(scene) = row.scene_output else {
        return Err(refused(
            Reason::NoScene,
            format!(
                "job {job} has no published scene to write to {}",
                path.display()
            ),
        ));
    };
    let key = tilegate_core::ObjectKey::checked(&scene.key)?;
    let name = path.file_name().ok_or_else(|| {
        refused(
            Reason::BadOption,
            format!("--out {}: not a file name", path.display()),
        )
    })?;
    let tmp = path.with_file_name(format!(
        ".{}.tilegate-{}",
        name.to_string_lossy(),
        std::process::id()
    ));
    let mut file =
        std::fs::File::create(&tmp).with_context(|| format!("create {}", tmp.display()))?;
    let same = b
        .objects
        .read_version_in_chunks(&key, (scene.size, &scene.e_tag), 16 << 20, &mut |part| {
            file.write_all(part)
        })
        .await
        .with_context(|| format!("write {}", tmp.display()));
    if !matches!(same, Ok(true)) {
        let _ = std::fs::remove_file(&tmp);
        same?;
        return Err(refused(
            Reason::StorageRefused,
            format!("{key} is no longer the version published ({})", scene.e_tag),
        ));
    }
    file.sync_all()
        .with_context(|| format!("write {}", tmp.display()))?;
    drop(file);
    std::fs::rename(&tmp, path)
        .with_context(|| format!("rename {} to {}", tmp.display(), path.display()))?;
    Ok(scene.size)
}

/// A line on a terminal's stderr that follows a `work` process: windows written, already
/// present and dead-lettered, and the rate. Hidden when stderr is not a terminal or with
/// `--json` (logs and scripts get the summary at the end).
fn work_progress(out: &Out, counters: &Arc<Counters>) -> indicatif::ProgressBar {
    use std::io::IsTerminal as _;
    if out.json || !std::io::stderr().is_terminal() {
        return indicatif::ProgressBar::hidden();
    }
    let bar = output::spinner();
    let (bar2, counters) = (bar.clone(), Arc::clone(counters));
    let started = Instant::now();
    tokio::spawn(async move {
        while !bar2.is_finished() {
            let written = counters.get(m::TILES_WRITTEN);
            let rate = written as f64 / started.elapsed().as_secs_f64().max(0.001);
            bar2.set_message(format!(
                "{written} written, {} already present, {} dead-lettered ({rate:.1}/s)",
                counters.get(m::DUPLICATE_ENCODES_SKIPPED) + counters.get(m::PRECONDITION_FAILED),
                counters.get(m::DEAD_LETTERED),
            ));
            bar2.tick();
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    });
    bar
}

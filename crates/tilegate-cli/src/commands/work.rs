//! `work`, `run` and `backfill`: pools of workers over the queue, and the whole pipeline in one
//! process through `tilegate_pipeline::run`.

use super::assemble::{assemble_doc, assemble_options};
use super::{find_job, stop_on_signals, worker_config};
use crate::args::{AssembleFlags, BackfillArgs, PoolArgs, RunArgs, WorkArgs};
use crate::output::{self, Out};
use crate::recipes::{Location, recipe_from};
use anyhow::Context;
use serde_json::json;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Instant;
use tilegate_core::Exit;
use tilegate_core::metrics::{self as m, Counters};
use tilegate_core::table::JobRecord;
use tilegate_core::{Backends, Recipe};
use tilegate_pipeline::run::REDUCED_WINDOWS_BUDGET;
use tilegate_pipeline::{RunOptions, Until};
use tilegate_planner::PlanOptions;
use tilegate_worker::{StopWhen, WorkReport, Worker};

pub(super) async fn work(out: &Out, b: &Backends, a: WorkArgs) -> anyhow::Result<ExitCode> {
    let stop = if a.until_empty {
        StopWhen::QueueDrained
    } else {
        StopWhen::Signal
    };
    let counters = Arc::new(Counters::new());
    let worker = Worker::new(b.clone(), worker_config(&a.pool, stop), counters.clone());
    let stop = stop_on_signals();
    if let Some(addr) = a.metrics_addr {
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .with_context(|| format!("listen on --metrics-addr {addr}"))?;
        tracing::info!(addr = %listener.local_addr()?, "serving /healthz and /metrics");
        tokio::spawn(crate::http::serve(
            listener,
            counters.clone(),
            b.ledger.clone(),
            stop.clone(),
        ));
    }
    let started = Instant::now();
    let report = worker.run(stop).await.context("work")?;
    let doc = json!({
        "handled": report.handled,
        "written": report.written,
        "already_present": report.already_present,
        "skipped": report.skipped,
        "accepts_refused": report.accepts_refused,
        "dead_lettered": report.dead_lettered,
        "retried": report.retried,
        "released": report.released,
        "counters": counters.snapshot(),
        // Requests charged to no job (receives and queue-depth checks come before a message
        // names its job); every other request is in its job's counters.
        "unattributed_requests": tilegate_retry::meter::unattributed(),
        "elapsed_s": started.elapsed().as_secs_f64(),
    });
    out.emit(&doc, || {
        format!(
            "handled {} message(s): {} written, {} already present, {} skipped, {} accept(s) refused, {} dead-lettered, {} retried ({:.2} s)",
            report.handled,
            report.written,
            report.already_present,
            report.skipped,
            report.accepts_refused,
            report.dead_lettered,
            report.retried,
            started.elapsed().as_secs_f64()
        )
    });
    Ok(ExitCode::SUCCESS)
}

pub(super) async fn run(out: &Out, b: &Backends, a: RunArgs) -> anyhow::Result<ExitCode> {
    let (recipe, location) = recipe_from(&a.recipe)?;
    let assemble = (!a.no_assemble).then_some(&a.assemble);
    let run_one = |source: String| {
        let (recipe, location) = (recipe.clone(), location.clone());
        let (assets, shards, pool) = (&a.recipe.assets, a.recipe.manifest_shards, &a.pool);
        async move {
            run_source(
                out,
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
        return Ok(emit_run(out, &run_one(source).await?));
    };
    // One scene after another, each planned, worked and assembled before the next: a job
    // that cannot complete is reported and the list goes on.
    let sources = crate::batch::sources(list).await?;
    let (mut docs, mut failed, mut incomplete) = (Vec::with_capacity(sources.len()), 0, 0);
    for source in sources {
        let doc = match run_one(source.clone()).await {
            Ok(ran) => {
                if !out.json {
                    println!(
                        "{}",
                        tilegate_core::redact::redact(&output::run_text(out, &ran.doc, &ran.job))
                    );
                }
                incomplete += usize::from(!ran.complete);
                ran.doc
            }
            Err(e) => {
                failed += 1;
                let doc = json!({
                    "source": tilegate_core::redact::redact(&source),
                    "error": crate::errors::error_doc(&e),
                });
                if !out.json {
                    println!(
                        "error[{}] {}: {}",
                        doc["error"]["reason"].as_str().unwrap_or_default(),
                        doc["source"].as_str().unwrap_or_default(),
                        doc["error"]["message"].as_str().unwrap_or_default()
                    );
                }
                doc
            }
        };
        docs.push(doc);
    }
    if out.json {
        let n = docs.len();
        let doc = json!({"jobs": docs, "complete": n - failed - incomplete,
            "incomplete": incomplete, "failed": failed});
        out.emit(&doc, String::new);
    }
    Ok(if failed > 0 {
        Exit::Failed.into()
    } else if incomplete > 0 {
        Exit::Incomplete.into()
    } else {
        ExitCode::SUCCESS
    })
}

/// One source run: its `run --json` document, its job, and whether the job completed.
pub(super) struct Ran {
    doc: serde_json::Value,
    job: JobRecord,
    complete: bool,
}

/// Print a run's document (or its text) and say how the process ends.
pub(super) fn emit_run(out: &Out, ran: &Ran) -> ExitCode {
    out.emit(&ran.doc, || output::run_text(out, &ran.doc, &ran.job));
    if ran.complete {
        ExitCode::SUCCESS
    } else {
        Exit::Incomplete.into()
    }
}

pub(super) async fn run_source(
    out: &Out,
    b: &Backends,
    (source, assets, recipe_shards): (&str, &[String], u32),
    recipe: Recipe,
    (prefix, tenant): Location,
    pool: &PoolArgs,
    assemble: Option<&AssembleFlags>,
) -> anyhow::Result<Ran> {
    let started = Instant::now();
    let counters = Arc::new(Counters::new());
    let opts = RunOptions {
        plan: PlanOptions {
            recipe,
            prefix,
            policy: crate::sources::of(&tenant),
            tenant,
            resume: true,
            assets: assets.to_vec(),
            manifest_shards: recipe_shards,
        },
        worker: worker_config(pool, StopWhen::Signal),
        pools: 1,
        until: Until::JobComplete,
        assemble: assemble.map(assemble_options).transpose()?,
        reduced_budget: REDUCED_WINDOWS_BUDGET,
    };
    let r = tilegate_pipeline::run(b, source, opts, &counters, stop_on_signals(), |job| {
        output::progress(out, b.clone(), job)
    })
    .await?;
    let complete = r.complete();
    let mut doc = run_summary(
        &r.plan.job,
        r.plan.windows,
        r.plan.already_recorded,
        &r.work,
        &counters,
        r.manifest_rows,
        started,
    );
    doc["scene"] = r
        .scene
        .as_ref()
        .map_or(serde_json::Value::Null, |s| assemble_doc(s, &counters));
    Ok(Ran {
        doc,
        job: r.plan.job,
        complete,
    })
}

fn run_summary(
    job: &JobRecord,
    windows: u64,
    already_recorded: u64,
    report: &WorkReport,
    counters: &Counters,
    manifest_rows: u64,
    started: Instant,
) -> serde_json::Value {
    json!({
        "job_id": job.job_id,
        "windows": windows,
        "tiles_written": counters.get(m::TILES_WRITTEN),
        "already_present": already_recorded + report.already_present + report.skipped,
        "duplicate_encodes_skipped": counters.get(m::DUPLICATE_ENCODES_SKIPPED),
        "manifest_rows": manifest_rows,
        "dead_lettered": report.dead_lettered,
        "retried": report.retried,
        "complete": manifest_rows == windows,
        "tiles_prefix": job.prefix.tiles_dir(&job.job_id),
        "counters": counters.snapshot(),
        "elapsed_s": started.elapsed().as_secs_f64(),
    })
}

pub(super) async fn backfill_cmd(
    out: &Out,
    b: &Backends,
    a: BackfillArgs,
) -> anyhow::Result<ExitCode> {
    let job = find_job(b, Some(&a.job)).await?;
    let (enqueued, recorded) = tilegate_planner::enqueue_windows(b, &job, a.missing).await?;
    let doc = json!({"job_id": job.job_id, "enqueued": enqueued, "already_recorded": recorded, "windows": job.grid.len()});
    out.emit(&doc, || {
        format!(
            "enqueued {enqueued} window(s) of job {} ({recorded} of {} already recorded)",
            job.job_id,
            job.grid.len()
        )
    });
    Ok(ExitCode::SUCCESS)
}

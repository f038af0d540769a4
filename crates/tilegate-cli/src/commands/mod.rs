//! One function per command, each returning the process exit code: the small commands here,
//! `plan`, `work`/`run`/`backfill` and `assemble`/`repair`/`cleanup-uploads` in their own
//! modules; the ledger's commands are in `crate::ledger`, the read-only ones in `crate::look`.

mod announce;
mod assemble;
mod ingest;
mod plan;
mod reconcile;
mod redrive;
mod work;

use crate::errors::refused;
use announce::announce_cmd;
pub(crate) use assemble::assemble_options;
use assemble::{assemble_cmd, cleanup_uploads, repair_cmd};
use ingest::ingest_cmd;
use plan::plan_cmd;
use tilegate_core::Reason;
use work::{backfill_cmd, run, run_source, work};

use crate::args::{Cli, Command, DemoArgs, DlqCommand, InitArgs, PoolArgs, SampleArgs};
use crate::backends::{self, Selection};
use crate::ledger;
use crate::output::Out;
use crate::reports;
use anyhow::Context;
use std::process::ExitCode;
use std::time::{Duration, Instant};
use tilegate_core::message::WindowMessage;
use tilegate_core::table::JobRecord;
use tilegate_core::{Backends, JobId, Prefix, Recipe, Tenant};
use tilegate_report::status::dead_letter_job;
use tilegate_worker::{StopWhen, WorkerConfig};
use tokio::sync::watch;

pub async fn dispatch(cli: Cli) -> anyhow::Result<ExitCode> {
    // Requests are counted for the job they serve; a command that serves one job names it.
    tilegate_retry::meter::scope(None, dispatch_command(cli)).await
}

async fn dispatch_command(cli: Cli) -> anyhow::Result<ExitCode> {
    crate::sources::load(cli.global.source_policy.as_deref())?;
    let sel = Selection::from_global(&cli.global)?;
    let out = Out::new(cli.global.json, sel.objects_root());
    match cli.command {
        Command::SampleScene(a) => sample_scene(&out, a).await,
        Command::Init(a) => init(&out, &sel, a).await,
        Command::Plan(a) => plan_cmd(&out, &sel, &backends::open(&sel).await?, a).await,
        Command::Work(a) => work(&out, &backends::open(&sel).await?, a).await,
        Command::Run(a) => run(&out, &backends::open(&sel).await?, a).await,
        Command::Assemble(a) => assemble_cmd(&out, &backends::open(&sel).await?, a).await,
        Command::Repair(a) => repair_cmd(&out, &backends::open(&sel).await?, a).await,
        Command::Backfill(a) => backfill_cmd(&out, &backends::open(&sel).await?, a).await,
        Command::CleanupUploads(a) => cleanup_uploads(&out, &backends::open(&sel).await?, a).await,
        Command::Status(a) => {
            crate::look::status(&out, &backends::open_read_only(&sel).await?, a).await
        }
        Command::Report(a) => {
            crate::look::report(&out, &sel, &backends::open_read_only(&sel).await?, a).await
        }
        Command::Stac(a) => {
            crate::look::stac_cmd(&out, &backends::open_read_only(&sel).await?, a).await
        }
        Command::Dlq(c @ DlqCommand::List { .. }) => {
            dlq(&out, &backends::open_read_only(&sel).await?, c).await
        }
        Command::Dlq(c) => dlq(&out, &backends::open(&sel).await?, c).await,
        Command::Announce(a) => announce_cmd(&out, &backends::open(&sel).await?, a).await,
        Command::ReconcileJobs(a) => {
            reconcile::reconcile_jobs(&out, &backends::open(&sel).await?, a).await
        }
        Command::Ingest(a) => ingest_cmd(&out, &sel, a).await,
        Command::Serve(a) => crate::serve::serve_cmd(&out, &sel, a).await,
        Command::Keys(c) => crate::serve::keys_cmd(&out, &backends::open(&sel).await?, c).await,
        Command::Demo(a) => demo(&out, &sel, a).await,
        Command::Recipes => {
            out.emit(&reports::RecipesReport {
                recipes: crate::recipes::catalogue(),
            });
            Ok(ExitCode::SUCCESS)
        }
        Command::Schema { name } => schema(name.as_deref()),
        Command::Regenerate(a) => ledger::regenerate(&out, &backends::open(&sel).await?, a).await,
        Command::Accept(a) => ledger::accept(&out, &backends::open(&sel).await?, a).await,
        Command::Attempts(a) => {
            ledger::attempts(&out, &backends::open_read_only(&sel).await?, a).await
        }
        Command::Hold(a) => ledger::hold(&out, &backends::open(&sel).await?, a).await,
        Command::Gc(a) => ledger::gc_cmd(&out, &backends::open(&sel).await?, a).await,
        Command::Reconcile(a) => ledger::reconcile_cmd(&out, &backends::open(&sel).await?, a).await,
        Command::Url(a) => ledger::url_cmd(&out, &backends::open(&sel).await?, a).await,
    }
}

/// `schema [NAME]`: one document's JSON Schema, or the names.
fn schema(name: Option<&str>) -> anyhow::Result<ExitCode> {
    let all = reports::schemas();
    let Some(name) = name else {
        for (n, _) in &all {
            println!("{n}");
        }
        return Ok(ExitCode::SUCCESS);
    };
    let (_, s) = all.iter().find(|(n, _)| *n == name).ok_or_else(|| {
        refused(
            Reason::BadOption,
            format!("no document `{name}` (`tilegate schema` lists them)"),
        )
    })?;
    println!("{}", serde_json::to_string_pretty(s)?);
    Ok(ExitCode::SUCCESS)
}

async fn init(out: &Out, sel: &Selection, a: InitArgs) -> anyhow::Result<ExitCode> {
    out.emit(&backends::init(sel, a.create_bucket, a.arrivals.as_deref()).await?);
    Ok(ExitCode::SUCCESS)
}

fn worker_config(p: &PoolArgs, stop: StopWhen) -> WorkerConfig {
    let mut cfg = WorkerConfig::default();
    if let Some(t) = p.threads {
        cfg.threads = t.max(1);
        cfg.concurrency = cfg.threads * 2 + 2;
    }
    if let Some(c) = p.concurrency {
        cfg.concurrency = c.max(1);
    }
    cfg.visibility = Duration::from_secs(p.visibility.max(1));
    cfg.skip_existing = !p.no_skip_existing;
    cfg.shutdown_grace = Duration::from_secs(p.shutdown_grace_s);
    cfg.counter_flush = Duration::from_secs_f64(p.counter_flush_s.clamp(0.05, 3600.0));
    cfg.stop = stop;
    cfg.sources = crate::sources::all();
    cfg
}

/// A stop signal that flips on Ctrl-C or SIGTERM.
fn stop_on_signals() -> watch::Receiver<bool> {
    let (tx, rx) = watch::channel(false);
    tokio::spawn(async move {
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
            .expect("install SIGTERM handler");
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = term.recv() => {}
        }
        eprintln!("tilegate: stopping: finishing in-flight windows");
        let _ = tx.send(true);
        // Keep the sender alive so receivers see `true`, not a closed channel.
        std::future::pending::<()>().await;
    });
    rx
}

async fn sample_scene(out: &Out, a: SampleArgs) -> anyhow::Result<ExitCode> {
    let opts = tilegate_cog::SampleOptions {
        width: a.width.unwrap_or(a.size),
        height: a.height.unwrap_or(a.size),
        bands: a.bands,
        dtype: a.dtype.clone(),
        nodata: a.nodata,
        seed: a.seed,
    };
    let started = Instant::now();
    if let Some(dir) = a.out.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).with_context(|| format!("create {}", dir.display()))?;
    }
    let path = a.out.clone();
    let meta = tokio::task::spawn_blocking(move || tilegate_cog::sample_scene(&path, &opts))
        .await?
        .with_context(|| format!("write sample scene {}", a.out.display()))?;
    out.emit(&reports::SampleReport {
        path: a.out,
        width: meta.width,
        height: meta.height,
        bands: meta.bands,
        dtype: meta.dtype,
        nodata: meta.nodata,
        elapsed_s: started.elapsed().as_secs_f64(),
    });
    Ok(ExitCode::SUCCESS)
}

/// Resolve a job argument: a full ID, a unique prefix, or (none) the newest job.
pub(crate) async fn find_job(b: &Backends, arg: Option<&str>) -> anyhow::Result<JobRecord> {
    if let Some(s) = arg
        && let Ok(id) = JobId::parse(s)
    {
        return Ok(b
            .jobs
            .get_job(&id)
            .await?
            .ok_or_else(|| {
                refused(
                    Reason::UnknownJob,
                    format!("no job {id} in this data directory"),
                )
            })?
            .row);
    }
    let jobs = b.jobs.list_jobs(10_000).await?;
    let matching: Vec<_> = jobs
        .into_iter()
        .filter(|j| arg.is_none_or(|p| j.row.job_id.as_str().starts_with(p)))
        .collect();
    match (arg, matching.as_slice()) {
        (None, []) => Err(refused(
            Reason::NoJob,
            "no job has been planned in this data directory (`tilegate plan SOURCE` plans one)",
        )),
        (None, [newest, ..]) => Ok(newest.row.clone()),
        (Some(p), []) => Err(refused(
            Reason::UnknownJob,
            format!("no job matches `{p}` (`tilegate status` lists the recent jobs)"),
        )),
        (Some(_), [one]) => Ok(one.row.clone()),
        (Some(p), many) => Err(refused(
            Reason::AmbiguousJob,
            format!("`{p}` matches {} jobs; give more characters", many.len()),
        )),
    }
}

/// How many dead letters `dlq --job` reads to find a job's.
const DLQ_SCAN: usize = 100_000;

/// The dead letters whose body names `job`.
async fn job_dead_letters(
    b: &Backends,
    job: &JobId,
) -> anyhow::Result<Vec<tilegate_core::queue::DeadLetter>> {
    let mut dead = b.queue.list_dead_letters(DLQ_SCAN).await?;
    dead.retain(|d| dead_letter_job(&d.body).as_ref() == Some(job));
    Ok(dead)
}

async fn dlq(out: &Out, b: &Backends, c: DlqCommand) -> anyhow::Result<ExitCode> {
    match c {
        DlqCommand::List { limit, job } => {
            let job = match job {
                Some(j) => Some(find_job(b, Some(&j)).await?.job_id),
                None => None,
            };
            let dead = match &job {
                Some(job) => job_dead_letters(b, job).await?,
                None => b.queue.list_dead_letters(limit).await?,
            };
            let rows: Vec<_> = dead
                .iter()
                .take(limit)
                .map(|d| reports::DeadLetterRow {
                    message_id: d.message_id.clone(),
                    reason: d.reason.clone(),
                    receive_count: d.receive_count,
                    dead_at_ms: d.dead_at,
                    job_id: dead_letter_job(&d.body),
                    window: WindowMessage::decode(&d.body)
                        .ok()
                        .map(|p| p.window.to_string()),
                    body_bytes: d.body.len(),
                })
                .collect();
            out.emit(&reports::DlqList {
                count: rows.len(),
                dead_letters: rows,
            });
        }
        DlqCommand::Redrive { ids, job } => redrive::redrive_cmd(out, b, ids, job).await?,
    }
    Ok(ExitCode::SUCCESS)
}

async fn demo(out: &Out, sel: &Selection, a: DemoArgs) -> anyhow::Result<ExitCode> {
    let b = backends::open(sel).await?;
    std::fs::create_dir_all(&sel.data)?;
    let scene = sel.data.join(format!("sample-{}.tif", a.size));
    if !scene.exists() {
        // A word on a terminal while it is written (logs and scripts get the summary).
        if !out.json && std::io::IsTerminal::is_terminal(&std::io::stderr()) {
            eprintln!(
                "tilegate: writing a {0}×{0} UInt16 sample scene to {1}",
                a.size,
                scene.display()
            );
        }
        let path = scene.clone();
        let opts = tilegate_cog::SampleOptions {
            width: a.size,
            height: a.size,
            bands: 1,
            dtype: "UInt16".into(),
            nodata: None,
            seed: 1,
        };
        tokio::task::spawn_blocking(move || tilegate_cog::sample_scene(&path, &opts))
            .await?
            .with_context(|| format!("write sample scene {}", scene.display()))?;
    }
    let source = scene.to_string_lossy().into_owned();
    let ran = run_source(
        out,
        &b,
        (&source, &[], 1),
        Recipe::copy_all(),
        (Prefix::default(), Tenant::default()),
        &a.pool,
        Some(&a.assemble),
    )
    .await?;
    Ok(work::emit_run(out, &ran))
}

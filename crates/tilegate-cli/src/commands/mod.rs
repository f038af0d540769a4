//! Every command, one file per group, each command's arguments with its `exec`: `plan`;
//! `work`, `run` and `backfill`; `assemble`, `repair` and `cleanup-uploads`; the ledger's
//! commands (`ledger`); the read-only ones (`look`); `dlq`; `announce`; `reconcile-jobs`;
//! `ingest`; `serve` and `keys` (`service`); `init`, `sample-scene` and `demo` (`setup`);
//! `recipes` and `schema` (`catalog`); `config`. What several commands share is here: the
//! context the dispatcher builds, finding a job, a worker's configuration, stopping on signals.

mod announce;
mod assemble;
pub mod catalog;
pub mod config;
mod dlq;
mod ingest;
mod ledger;
mod look;
mod plan;
mod product;
mod reconcile;
mod service;
mod setup;
mod work;

use crate::args::{Global, PoolArgs};
use crate::ctx::{Ctx, Selection};
use crate::errors::refused;
use crate::output::{ErrorDoc, Out};
use anyhow::Context as _;
use serde::Deserialize;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use tilegate_core::table::JobRecord;
use tilegate_core::{Backends, JobId, Reason};
use tilegate_source::Policies;
use tilegate_worker::{StopWhen, WorkerConfig};
use tokio::sync::watch;

/// Default data directory of the embedded backend.
const DEFAULT_DATA: &str = "./tilegate-data";

/// The `--config` file.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct ConfigFile {
    data: Option<PathBuf>,
    objects: Option<String>,
    tables: Option<String>,
    queue: Option<String>,
}

/// The context of a command, from the global flags: the source policy first (a file that
/// cannot be used stops the command with `bad-source-policy`, never falls back to something
/// wider), then where the backends live (flags, environment and the `--config` file merged).
pub fn context(g: &Global) -> anyhow::Result<Ctx> {
    let policies = Arc::new(source_policies(g.source_policy.as_deref())?);
    let sel = selection(g)?;
    Ok(Ctx {
        out: Out::new(g.json, sel.objects_root()),
        sel,
        policies,
    })
}

/// The policies of `--source-policy FILE` or `TILEGATE_SOURCE_POLICY`, or the default when
/// neither is given.
fn source_policies(file: Option<&Path>) -> anyhow::Result<Policies> {
    // An empty TILEGATE_SOURCE_POLICY is no file.
    match file.filter(|p| !p.as_os_str().is_empty()) {
        Some(path) => tilegate_source::policy::from_file(path)
            .map_err(|e| refused(Reason::BadSourcePolicy, e.to_string())),
        None => Ok(Policies::new()),
    }
}

/// Where each role lives: flags and environment first, then the `--config` file.
fn selection(g: &Global) -> anyhow::Result<Selection> {
    let file = match &g.config {
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("read config file {}", path.display()))?;
            toml::from_str::<ConfigFile>(&text)
                .with_context(|| format!("parse config file {}", path.display()))?
        }
        None => ConfigFile::default(),
    };
    Ok(Selection {
        data: g
            .data
            .clone()
            .or(file.data)
            .unwrap_or_else(|| PathBuf::from(DEFAULT_DATA)),
        objects: g.objects.clone().or(file.objects),
        tables: g.tables.clone().or(file.tables),
        queue: g.queue.clone().or(file.queue),
    })
}

/// The `{"reason": …, "message": …}` document of a failure, as `--json` prints it.
pub fn error_doc(err: &anyhow::Error) -> ErrorDoc {
    ErrorDoc {
        reason: crate::errors::reason_of(err),
        message: crate::errors::one_line(err),
    }
}

fn worker_config(cx: &Ctx, p: &PoolArgs, stop: StopWhen) -> WorkerConfig {
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
    cfg.sources = cx.policies();
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

/// Resolve a job argument: a full ID, a unique prefix, or (none) the newest job.
async fn find_job(b: &Backends, arg: Option<&str>) -> anyhow::Result<JobRecord> {
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

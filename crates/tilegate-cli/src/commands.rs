//! One function per command. Each returns the process exit code.

use crate::args::{
    AssembleArgs, AssembleFlags, BackfillArgs, CleanupArgs, Cli, Command, DemoArgs, DlqCommand,
    InitArgs, PlanArgs, PoolArgs, RecipeArgs, RepairArgs, RunArgs, SampleArgs, WorkArgs,
};
use crate::backends::{self, Selection};
use crate::errors::refused;
use crate::ledger;
use crate::output::{self, Out};
use anyhow::{Context, bail};
use serde_json::json;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tilegate_core::message::WindowMessage;
use tilegate_core::metrics::{self as m, Counters};
use tilegate_core::recipe::Operation;
use tilegate_core::table::JobRecord;
use tilegate_core::{Backends, Compression, JobId, Prefix, Recipe, Tenant};
use tilegate_pipeline::run::REDUCED_WINDOWS_BUDGET;
use tilegate_pipeline::{RunOptions, Until};
use tilegate_planner::{PlanOptions, plan};
use tilegate_report::status::dead_letter_job;
use tilegate_worker::{StopWhen, WorkReport, Worker, WorkerConfig};
use tokio::sync::watch;

/// Exit code when a job could not complete (missing windows, dead letters).
pub const EXIT_INCOMPLETE: u8 = 3;
/// Exit code when `assemble` refuses a job whose manifest is short.
pub const EXIT_MANIFEST_SHORT: u8 = 4;

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
        Command::Plan(a) => plan_cmd(&out, &backends::open(&sel).await?, a).await,
        Command::Work(a) => work(&out, &backends::open(&sel).await?, a).await,
        Command::Run(a) => run(&out, &backends::open(&sel).await?, a).await,
        Command::Assemble(a) => assemble_cmd(&out, &backends::open(&sel).await?, a).await,
        Command::Repair(a) => repair_cmd(&out, &backends::open(&sel).await?, a).await,
        Command::Backfill(a) => backfill_cmd(&out, &backends::open(&sel).await?, a).await,
        Command::CleanupUploads(a) => cleanup_uploads(&out, &backends::open(&sel).await?, a).await,
        Command::Status(a) => crate::look::status(&out, &backends::open(&sel).await?, a).await,
        Command::Report(a) => {
            crate::look::report(&out, &sel, &backends::open(&sel).await?, a).await
        }
        Command::Stac(a) => crate::look::stac_cmd(&out, &backends::open(&sel).await?, a).await,
        Command::Dlq(c) => dlq(&out, &backends::open(&sel).await?, c).await,
        Command::Demo(a) => demo(&out, &sel, a).await,
        Command::Regenerate(a) => ledger::regenerate(&out, &backends::open(&sel).await?, a).await,
        Command::Accept(a) => ledger::accept(&out, &backends::open(&sel).await?, a).await,
        Command::Attempts(a) => ledger::attempts(&out, &backends::open(&sel).await?, a).await,
        Command::Hold(a) => ledger::hold(&out, &backends::open(&sel).await?, a).await,
        Command::Gc(a) => ledger::gc_cmd(&out, &backends::open(&sel).await?, a).await,
        Command::Reconcile(a) => ledger::reconcile_cmd(&out, &backends::open(&sel).await?, a).await,
        Command::Url(a) => ledger::url_cmd(&out, &backends::open(&sel).await?, a).await,
    }
}

async fn init(out: &Out, sel: &Selection, a: InitArgs) -> anyhow::Result<ExitCode> {
    let doc = backends::init(sel, a.create_bucket).await?;
    out.emit(&doc, || {
        let list = |k: &str| {
            doc[k]
                .as_array()
                .map(|v| {
                    v.iter()
                        .filter_map(|x| x.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                })
                .unwrap_or_default()
        };
        format!(
            "created: {}
already there: {}",
            list("created"),
            list("existing")
        )
    });
    Ok(ExitCode::SUCCESS)
}

/// Where a job's outputs go: the prefix and the tenant.
type Location = (Prefix, Tenant);

fn recipe_from(a: &RecipeArgs) -> anyhow::Result<(Recipe, Location)> {
    let operation = match a.recipe.as_str() {
        "copy" => Operation::Copy {
            bands: a.bands.clone(),
        },
        "ndvi" => Operation::Ndvi {
            red: a.red,
            nir: a.nir,
        },
        "noop" => Operation::Noop,
        "warp" => Operation::Warp(warp_spec(a)?),
        "expr" => expr_operation(a)?,
        other => crate::recipes::custom_operation(other, &a.params)?,
    };
    let unused = |flag: &str, set: bool, recipes: &str| {
        if set {
            Err(refused(
                "bad-recipe",
                format!("{flag} applies to the {recipes} recipe, not `{}`", a.recipe),
            ))
        } else {
            Ok(())
        }
    };
    let is = |op: &str| a.recipe == op;
    unused("--t-srs", a.t_srs.is_some() && !is("warp"), "`warp`")?;
    unused("--tr", a.tr.is_some() && !is("warp"), "`warp`")?;
    unused("--tap", a.tap && !is("warp"), "`warp`")?;
    unused("--expr", a.expr.is_some() && !is("expr"), "`expr`")?;
    unused(
        "--param",
        !a.params.is_empty()
            && matches!(
                a.recipe.as_str(),
                "copy" | "ndvi" | "noop" | "warp" | "expr"
            ),
        "registered",
    )?;
    let compression = Compression::parse(&a.compress).ok_or_else(|| {
        refused(
            "bad-recipe",
            format!(
                "unknown compression `{}`: expected deflate, zstd or lzw",
                a.compress
            ),
        )
    })?;
    if a.window == 0 || !a.window.is_multiple_of(16) {
        return Err(refused(
            "bad-window",
            format!("window size {} is not a positive multiple of 16", a.window),
        ));
    }
    let prefix = Prefix::parse(a.prefix.trim_matches('/')).context("invalid --prefix")?;
    let tenant = Tenant::parse(&a.tenant).context("invalid --tenant")?;
    Ok((
        Recipe {
            operation,
            compression,
            window: a.window,
        },
        (prefix, tenant),
    ))
}

/// The `expr` recipe from the flags: the program parsed and validated now (a malformed
/// expression is refused here, never dead-lettered per window), kept in its canonical text.
fn expr_operation(a: &RecipeArgs) -> anyhow::Result<Operation> {
    let text = a.expr.as_deref().ok_or_else(|| {
        refused(
            "bad-recipe",
            "`expr` needs --expr, e.g. --expr \"(b4-b3)/(b4+b3)\"",
        )
    })?;
    let program = tilegate_expr::Program::parse(text)
        .map_err(|e| refused("bad-expression", format!("--expr: {e}")))?;
    let ot = tilegate_cog::Dtype::from_name(&a.ot).ok_or_else(|| {
            refused(
                "bad-recipe",
                format!("unknown --ot `{}`: expected Byte, UInt16, Int16, UInt32, Int32, Float32 or Float64", a.ot),
            )
        })?;
    let nodata = a.out_nodata.unwrap_or_else(|| ot.default_nodata());
    if !ot.represents(nodata) {
        return Err(refused(
            "bad-recipe",
            format!("--out-nodata {nodata} is not a {} value", ot.name()),
        ));
    }
    Ok(Operation::Expr {
        expr: program.canonical(),
        ot: ot.name().to_owned(),
        nodata,
    })
}

/// The `warp` recipe's target grid and resampling, from the flags.
fn warp_spec(a: &RecipeArgs) -> anyhow::Result<tilegate_core::recipe::WarpSpec> {
    let bad = |m: String| refused("bad-recipe", m);
    let t_srs = a.t_srs.clone().ok_or_else(|| {
        bad("`warp` needs a target CRS: --t-srs EPSG:3857 (or a PROJ string)".into())
    })?;
    let pair = |flag: &str, v: &Option<Vec<f64>>| match v.as_deref() {
        None => Ok(None),
        Some([r]) => Ok(Some([*r, *r])),
        Some([x, y]) => Ok(Some([*x, *y])),
        Some(other) => Err(bad(format!(
            "{flag} takes one or two numbers, not {}",
            other.len()
        ))),
    };
    let tr = pair("--tr", &a.tr)?;
    if let Some([x, y]) = tr
        && !(x > 0.0 && y > 0.0 && x.is_finite() && y.is_finite())
    {
        return Err(bad(format!("--tr {x},{y}: resolutions must be positive")));
    }
    let origin = match a.target_origin.as_deref() {
        None => None,
        Some([x, y]) => Some([*x, *y]),
        Some(_) => return Err(bad("--target-origin takes X,Y".into())),
    };
    let resampling = a.warp_resampling.to_ascii_lowercase();
    if !tilegate_core::recipe::WARP_RESAMPLINGS.contains(&resampling.as_str()) {
        return Err(bad(format!(
            "unknown --warp-resampling `{}`: expected one of {}",
            a.warp_resampling,
            tilegate_core::recipe::WARP_RESAMPLINGS.join(", ")
        )));
    }
    Ok(tilegate_core::recipe::WarpSpec {
        t_srs,
        tr,
        tap: a.tap,
        origin,
        resampling,
    })
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
    let doc = json!({
        "path": a.out,
        "width": meta.width,
        "height": meta.height,
        "bands": meta.bands,
        "dtype": meta.dtype,
        "nodata": meta.nodata,
        "elapsed_s": started.elapsed().as_secs_f64(),
    });
    out.emit(&doc, || {
        format!(
            "wrote {} ({}×{}, {} band(s) {}) in {:.2} s",
            a.out.display(),
            meta.width,
            meta.height,
            meta.bands,
            meta.dtype,
            started.elapsed().as_secs_f64()
        )
    });
    Ok(ExitCode::SUCCESS)
}

async fn plan_cmd(out: &Out, b: &Backends, a: PlanArgs) -> anyhow::Result<ExitCode> {
    let (recipe, (prefix, tenant)) = recipe_from(&a.recipe)?;
    let opts = PlanOptions {
        recipe,
        prefix,
        policy: crate::sources::of(&tenant),
        tenant,
        resume: a.resume,
        assets: a.recipe.assets.clone(),
        manifest_shards: a.recipe.manifest_shards,
    };
    let Some(list) = &a.from else {
        let source = a
            .source
            .as_deref()
            .expect("clap requires a source or --from");
        let doc = plan_one(b, source, &opts).await?;
        out.emit(&doc, || plan_line(&doc));
        return Ok(ExitCode::SUCCESS);
    };
    let sources = crate::batch::sources(list).await?;
    let mut docs = Vec::with_capacity(sources.len());
    let mut failed = 0usize;
    for source in &sources {
        let doc = match plan_one(b, source, &opts).await {
            Ok(doc) => doc,
            Err(e) => {
                failed += 1;
                json!({
                    "source": tilegate_core::redact::redact(source),
                    "error": {
                        "reason": crate::errors::reason_of(&e),
                        "message": tilegate_core::redact::redact(&format!("{e:#}")),
                    },
                })
            }
        };
        if !out.json {
            println!("{}", tilegate_core::redact::redact(&plan_line(&doc)));
        }
        docs.push(doc);
    }
    if out.json {
        println!(
            "{}",
            tilegate_core::redact::redact(
                &json!({"jobs": docs, "planned": docs.len() - failed, "failed": failed})
                    .to_string()
            )
        );
    }
    Ok(if failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

/// Plan one source: the `plan --json` document.
async fn plan_one(
    b: &Backends,
    source: &str,
    opts: &PlanOptions,
) -> anyhow::Result<serde_json::Value> {
    let started = Instant::now();
    let p = plan(b, source, opts)
        .await
        .with_context(|| format!("plan {source}"))?;
    tilegate_pipeline::run::record_job_counts(b, &p.job.job_id, &Counters::new()).await;
    Ok(json!({
        "job_id": p.job.job_id,
        "windows": p.windows,
        "enqueued": p.enqueued,
        "already_recorded": p.already_recorded,
        "newly_planned": p.newly_planned,
        "source": p.job.source.uri,
        "source_etag": p.job.source.etag,
        "tenant": p.job.tenant,
        "prefix": p.job.prefix.as_str(),
        "timings": {
            "pin_source_s": p.timings.pin_s,
            "probe_s": p.timings.probe_s,
            "job_row_s": p.timings.job_row_s,
            "enqueue_s": p.timings.enqueue_s,
        },
        "elapsed_s": started.elapsed().as_secs_f64(),
    }))
}

/// One line for a planned job (or a source that could not be planned).
fn plan_line(doc: &serde_json::Value) -> String {
    if let Some(e) = doc.get("error") {
        return format!(
            "error[{}] {}: {}",
            e["reason"].as_str().unwrap_or("error"),
            doc["source"].as_str().unwrap_or(""),
            e["message"].as_str().unwrap_or("")
        );
    }
    format!(
        "job {} {}: {} windows, {} enqueued ({} already recorded) {}",
        doc["job_id"].as_str().unwrap_or(""),
        if doc["newly_planned"].as_bool() == Some(true) {
            "planned"
        } else {
            "already planned"
        },
        doc["windows"],
        doc["enqueued"],
        doc["already_recorded"],
        doc["source"].as_str().unwrap_or("")
    )
}

async fn work(out: &Out, b: &Backends, a: WorkArgs) -> anyhow::Result<ExitCode> {
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

async fn run(out: &Out, b: &Backends, a: RunArgs) -> anyhow::Result<ExitCode> {
    let (recipe, location) = recipe_from(&a.recipe)?;
    let assemble = (!a.no_assemble).then_some(&a.assemble);
    run_source(
        out,
        b,
        (&a.source, &a.recipe.assets, a.recipe.manifest_shards),
        recipe,
        location,
        &a.pool,
        assemble,
    )
    .await
}

async fn run_source(
    out: &Out,
    b: &Backends,
    (source, assets, recipe_shards): (&str, &[String], u32),
    recipe: Recipe,
    (prefix, tenant): Location,
    pool: &PoolArgs,
    assemble: Option<&AssembleFlags>,
) -> anyhow::Result<ExitCode> {
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
    let job = &r.plan.job;
    out.emit(&doc, || output::run_text(out, &doc, job));
    Ok(if complete {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(EXIT_INCOMPLETE)
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

/// Resolve a job argument: a full ID, a unique prefix, or (none) the newest job.
pub(crate) async fn find_job(b: &Backends, arg: Option<&str>) -> anyhow::Result<JobRecord> {
    if let Some(s) = arg
        && let Ok(id) = JobId::parse(s)
    {
        return Ok(b
            .jobs
            .get_job(&id)
            .await?
            .with_context(|| format!("no job {id} in this data directory"))?
            .row);
    }
    let jobs = b.jobs.list_jobs(10_000).await?;
    let matching: Vec<_> = jobs
        .into_iter()
        .filter(|j| arg.is_none_or(|p| j.row.job_id.as_str().starts_with(p)))
        .collect();
    match (arg, matching.as_slice()) {
        (None, []) => bail!("no job has been planned in this data directory"),
        (None, [newest, ..]) => Ok(newest.row.clone()),
        (Some(p), []) => bail!("no job matches `{p}`"),
        (Some(_), [one]) => Ok(one.row.clone()),
        (Some(p), many) => bail!("`{p}` matches {} jobs; give more characters", many.len()),
    }
}

async fn dlq(out: &Out, b: &Backends, c: DlqCommand) -> anyhow::Result<ExitCode> {
    match c {
        DlqCommand::List { limit } => {
            let dead = b.queue.list_dead_letters(limit).await?;
            let rows: Vec<_> = dead
                .iter()
                .map(|d| {
                    let parsed = WindowMessage::decode(&d.body).ok();
                    json!({
                        "message_id": d.message_id,
                        "reason": d.reason,
                        "receive_count": d.receive_count,
                        "dead_at_ms": d.dead_at,
                        "job_id": dead_letter_job(&d.body),
                        "window": parsed.map(|p| p.window.to_string()),
                        "body_bytes": d.body.len(),
                    })
                })
                .collect();
            let doc = json!({ "dead_letters": rows, "count": rows.len() });
            out.emit(&doc, || output::dlq_text(&rows));
        }
        DlqCommand::Redrive { ids } => {
            let moved = if ids.is_empty() {
                b.queue.redrive(None).await?
            } else {
                b.queue.redrive(Some(&ids)).await?
            };
            let doc = json!({ "redriven": moved });
            out.emit(&doc, || {
                format!("returned {moved} dead letter(s) to the work queue")
            });
        }
    }
    Ok(ExitCode::SUCCESS)
}

async fn demo(out: &Out, sel: &Selection, a: DemoArgs) -> anyhow::Result<ExitCode> {
    let b = backends::open(sel).await?;
    std::fs::create_dir_all(&sel.data)?;
    let scene = sel.data.join(format!("sample-{}.tif", a.size));
    if !scene.exists() {
        if !out.json {
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
    run_source(
        out,
        &b,
        (&source, &[], 1),
        Recipe::copy_all(),
        (Prefix::default(), Tenant::default()),
        &a.pool,
        Some(&a.assemble),
    )
    .await
}

pub(crate) fn assemble_options(
    f: &AssembleFlags,
) -> anyhow::Result<tilegate_assembler::AssembleOptions> {
    let mut o = tilegate_assembler::AssembleOptions::new(tilegate_claim::unique_owner("assemble"));
    o.multipart_threshold = f.multipart_threshold;
    o.part_size = f.part_size;
    o.lease_ttl = Duration::from_millis(f.lease_ttl_ms.max(1));
    o.resampling = match f.resampling.as_str() {
        "average" => tilegate_cogwrite::Resampling::Average,
        "nearest" => tilegate_cogwrite::Resampling::Nearest,
        other => {
            return Err(refused(
                "bad-option",
                format!("unknown resampling `{other}`: expected average or nearest"),
            ));
        }
    };
    o.pause_renewals_after_parts = f.test_pause_renewals_after_parts;
    o.part_delay = Duration::from_millis(f.test_part_delay_ms);
    Ok(o)
}

fn assemble_doc(r: &tilegate_assembler::AssembleReport, counters: &Counters) -> serde_json::Value {
    let mut doc = json!({
        "job_id": r.job_id,
        "outcome": r.outcome.as_str(),
        "scene_key": r.scene_key,
        "scene_etag": r.scene_etag,
        "scene_size": r.scene_size,
        "assembly_path": r.path.map(|p| format!("{p:?}")),
        "multipart": r.multipart,
        "build_s": r.build_s,
        "upload_s": r.upload_s,
        "reduced_windows_reused": r.reduced_windows_reused,
        "claims_won_total": counters.get(m::CLAIMS_WON),
        "claims_lost_total": counters.get(m::CLAIMS_LOST),
        "multipart_bytes_uploaded_total": counters.get(m::MULTIPART_BYTES_UPLOADED),
    });
    if let tilegate_assembler::AssembleOutcome::HeldBy { owner, expires_at } = &r.outcome {
        doc["held_by"] = json!({ "owner": owner, "expires_at_ms": expires_at });
    }
    doc
}

async fn assemble_cmd(out: &Out, b: &Backends, a: AssembleArgs) -> anyhow::Result<ExitCode> {
    let job = find_job(b, a.job.as_deref()).await?;
    tilegate_retry::meter::set_job(&job.job_id);
    let counters = Counters::new();
    let started = Instant::now();
    let assembled =
        tilegate_assembler::assemble(b, &job.job_id, &assemble_options(&a.flags)?, &counters).await;
    tilegate_pipeline::run::record_job_counts(b, &job.job_id, &counters).await;
    match assembled {
        Ok(r) => {
            let mut doc = assemble_doc(&r, &counters);
            doc["elapsed_s"] = json!(started.elapsed().as_secs_f64());
            out.emit(&doc, || output::assemble_text(&doc));
            Ok(ExitCode::SUCCESS)
        }
        Err(e @ tilegate_assembler::AssembleError::Incomplete { .. }) => {
            let tilegate_assembler::AssembleError::Incomplete {
                have,
                want,
                missing,
                ..
            } = &e
            else {
                unreachable!()
            };
            let doc = json!({
                "job_id": job.job_id,
                "outcome": "incomplete",
                "manifest_rows": have,
                "windows": want,
                "missing": missing.iter().map(|w| w.to_string()).collect::<Vec<_>>(),
            });
            if out.json {
                out.emit(&doc, String::new);
            }
            eprintln!(
                "tilegate: error: {}",
                tilegate_core::redact::redact(&e.to_string())
            );
            Ok(ExitCode::from(EXIT_MANIFEST_SHORT))
        }
        Err(e) => Err(anyhow::Error::new(e)),
    }
}

async fn repair_cmd(out: &Out, b: &Backends, a: RepairArgs) -> anyhow::Result<ExitCode> {
    let job = find_job(b, Some(&a.job)).await?;
    let window = tilegate_core::Window::parse(&a.window).with_context(|| {
        format!(
            "`{}` is not a window: expected ROW_COL, e.g. 3_12",
            a.window
        )
    })?;
    let policy = crate::sources::of(&job.tenant);
    let prepared = tilegate_worker::repair::prepare(b, &policy, &job.job_id, window).await?;
    let key = prepared.key.clone();
    let outcome = tilegate_worker::repair::commit(b, prepared).await?;
    let doc = match &outcome {
        tilegate_worker::repair::RepairOutcome::Written { e_tag, size } => {
            json!({"outcome": "written", "key": key, "e_tag": e_tag, "size": size})
        }
        tilegate_worker::repair::RepairOutcome::Superseded => {
            json!({"outcome": "superseded", "key": key})
        }
    };
    out.emit(&doc, || match &outcome {
        tilegate_worker::repair::RepairOutcome::Written { e_tag, .. } => {
            format!("repaired {key} (now {e_tag})")
        }
        tilegate_worker::repair::RepairOutcome::Superseded => {
            format!("{key} changed while it was recomputed; left the newer tile in place")
        }
    });
    Ok(ExitCode::SUCCESS)
}

async fn backfill_cmd(out: &Out, b: &Backends, a: BackfillArgs) -> anyhow::Result<ExitCode> {
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

async fn cleanup_uploads(out: &Out, b: &Backends, a: CleanupArgs) -> anyhow::Result<ExitCode> {
    let cutoff = std::time::SystemTime::now() - Duration::from_secs(a.older_than_s);
    let stale = b.objects.list_multipart("", Some(cutoff)).await?;
    let mut uploads = Vec::new();
    for u in &stale {
        b.objects
            .abort_multipart(&tilegate_core::ObjectKey::checked(&u.key)?, &u.upload_id)
            .await?;
        // Against the ledger: an attempt's upload names its row; anything else is a
        // deterministic scene's (the claim gate's) or foreign.
        let ledger = match tilegate_ledger::parse_attempt_key(&u.key) {
            Some((job, subject, attempt)) => {
                match b.ledger.get_attempt(&job, subject, &attempt).await? {
                    Some(r) => json!({"attempt": attempt, "state": r.row.state.name(),
                        "note": if r.row.state == tilegate_core::ledger::AttemptState::Uploading {
                            "its row stays `uploading`; gc collects it after the upload grace"
                        } else { "its row does not depend on this upload" }}),
                    None => {
                        json!({"attempt": attempt, "state": null, "note": "no ledger row: not tilegate's"})
                    }
                }
            }
            None => serde_json::Value::Null,
        };
        uploads.push(json!({"key": u.key, "upload_id": u.upload_id, "ledger": ledger}));
    }
    let doc = json!({"aborted": stale.len(), "uploads": uploads});
    out.emit(&doc, || {
        let mut t = format!("aborted {} stale multipart upload(s)", stale.len());
        for u in &uploads {
            if let Some(state) = u["ledger"]["state"].as_str() {
                t.push_str(&format!(
                    "\n  {} (attempt {}, row {state})",
                    u["key"].as_str().unwrap_or(""),
                    u["ledger"]["attempt"].as_str().unwrap_or("")
                ));
            }
        }
        t
    });
    Ok(ExitCode::SUCCESS)
}

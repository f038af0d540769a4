//! `plan`: one job per source, printed as it is planned.

use crate::args::PlanArgs;
use crate::ctx::{Ctx, Selection};
use crate::recipes::recipe_from;
use crate::reports::{Item, PlanBatch, PlanEstimate, PlanReport, PlanTimings};
use anyhow::Context;
use std::process::ExitCode;
use std::time::Instant;
use tilegate_core::Backends;
use tilegate_core::Exit;
use tilegate_core::metrics::Counters;
use tilegate_pipeline::estimate::Upload;
use tilegate_planner::{PlanOptions, plan};
use tilegate_report::PriceTable;

impl PlanArgs {
    pub async fn exec(self, cx: &Ctx) -> anyhow::Result<ExitCode> {
        plan_cmd(cx, &cx.open().await?, self).await
    }
}

async fn plan_cmd(cx: &Ctx, b: &Backends, a: PlanArgs) -> anyhow::Result<ExitCode> {
    let (out, sel) = (&cx.out, &cx.sel);
    let (recipe, (prefix, tenant)) = recipe_from(&a.recipe)?;
    let opts = PlanOptions {
        recipe,
        prefix,
        policy: cx.policy_of(&tenant),
        tenant,
        resume: !a.all_windows,
        assets: a.recipe.assets.clone(),
        manifest_shards: a.recipe.manifest_shards,
    };
    let Some(list) = &a.from else {
        let source = a
            .source
            .as_deref()
            .expect("clap requires a source or --from");
        if a.estimate {
            let prices = super::look::prices(a.prices.as_deref())?;
            out.emit(&estimate(sel, b, source, &opts, &prices).await?);
            return Ok(ExitCode::SUCCESS);
        }
        out.emit(&plan_one(b, source, &opts).await?);
        return Ok(ExitCode::SUCCESS);
    };
    let sources = tilegate_pipeline::batch::sources(list)?;
    let mut jobs = Vec::with_capacity(sources.len());
    let mut failed = 0usize;
    for source in &sources {
        let item = match plan_one(b, source, &opts).await {
            Ok(doc) => Item::Done(doc),
            Err(e) => {
                failed += 1;
                Item::Failed {
                    source: tilegate_core::redact::redact(source).into_owned(),
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
        let planned = jobs.len() - failed;
        println!(
            "{}",
            tilegate_core::redact::redact(&out.json_of(&PlanBatch {
                jobs,
                planned,
                failed
            }))
        );
    }
    Ok(if failed == 0 {
        ExitCode::SUCCESS
    } else {
        Exit::Failed.into()
    })
}

/// `plan --estimate`: the job priced, nothing written.
async fn estimate(
    sel: &Selection,
    b: &Backends,
    source: &str,
    opts: &PlanOptions,
    prices: &PriceTable,
) -> anyhow::Result<PlanEstimate> {
    let services = sel.billed_services(b);
    let upload = Upload {
        multipart_threshold: tilegate_assembler::DEFAULT_MULTIPART_THRESHOLD,
        part_size: tilegate_assembler::DEFAULT_PART_SIZE,
    };
    let e = tilegate_pipeline::estimate::estimate(b, source, opts, services, upload)
        .await
        .with_context(|| format!("estimate {source}"))?;
    let windows = e.job.grid.len();
    Ok(PlanEstimate {
        job_id: e.job.job_id.clone(),
        already_planned: e.already_planned,
        source: e.job.source.uri.clone(),
        source_bytes: e.job.source.size,
        windows,
        window_px: e.job.recipe.window,
        sampled_windows: e.sampled_windows as u64,
        mean_tile_bytes: e.mean_tile_bytes,
        tile_bytes: e.tile_bytes(),
        scene_bytes: e.scene_bytes(),
        billed_services: services.billed(),
        cost: tilegate_report::cost::estimate(&e.counters, e.stored_bytes(), windows, prices),
    })
}

/// Plan one source: the `plan --json` document.
async fn plan_one(b: &Backends, source: &str, opts: &PlanOptions) -> anyhow::Result<PlanReport> {
    let started = Instant::now();
    let p = plan(b, source, opts)
        .await
        .with_context(|| format!("plan {source}"))?;
    tilegate_pipeline::run::record_job_counts(b, &p.job.job_id, &Counters::new()).await;
    Ok(PlanReport {
        job_id: p.job.job_id.clone(),
        windows: p.windows,
        enqueued: p.enqueued,
        already_recorded: p.already_recorded,
        newly_planned: p.newly_planned,
        source: p.job.source.uri.clone(),
        source_etag: p.job.source.etag.to_string(),
        tenant: p.job.tenant.to_string(),
        prefix: p.job.prefix.as_str().to_owned(),
        timings: PlanTimings {
            pin_source_s: p.timings.pin_s,
            probe_s: p.timings.probe_s,
            job_row_s: p.timings.job_row_s,
            enqueue_s: p.timings.enqueue_s,
        },
        elapsed_s: started.elapsed().as_secs_f64(),
    })
}

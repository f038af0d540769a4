//! `plan`: one job per source, printed as it is planned.

use crate::args::PlanArgs;
use crate::output::Out;
use crate::recipes::recipe_from;
use anyhow::Context;
use serde_json::json;
use std::process::ExitCode;
use std::time::Instant;
use tilegate_core::Backends;
use tilegate_core::Exit;
use tilegate_core::metrics::Counters;
use tilegate_planner::{PlanOptions, plan};

pub(super) async fn plan_cmd(out: &Out, b: &Backends, a: PlanArgs) -> anyhow::Result<ExitCode> {
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
                    "error": crate::errors::error_doc(&e),
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
        Exit::Failed.into()
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
        "job {} {}: {}, {} enqueued ({} already recorded) {}",
        doc["job_id"].as_str().unwrap_or(""),
        if doc["newly_planned"].as_bool() == Some(true) {
            "planned"
        } else {
            "already planned"
        },
        crate::output::counted(doc["windows"].as_u64().unwrap_or(0), "window"),
        doc["enqueued"],
        doc["already_recorded"],
        doc["source"].as_str().unwrap_or("")
    )
}

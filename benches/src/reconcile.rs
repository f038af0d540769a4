//! What one reconciler pass costs the stores, against the AWS emulator: the requests a pass of
//! `tilegate reconcile-jobs` sends, counted by service and operation on the wire as tilegate's
//! AWS stores count them — with 10 open jobs alone, then beside many finished (settled) jobs.
//! A pass reads the open jobs through the jobs table's sparse `by-open` index, so what it sends
//! follows the open jobs, never the finished ones.

use crate::scope::{counted, job, total};
use serde_json::{Value, json};
use tilegate_core::{Backends, Tenant};
use tilegate_pipeline::announce::Announcer;
use tilegate_pipeline::reconcile::{ReconcileOptions, Reconciler};

/// `open` open jobs: planned, enqueued, nothing recorded yet (a pass counts their rows and
/// reads the dead-letter queue once, and changes nothing).
async fn open_jobs(b: &Backends, open: usize) -> anyhow::Result<()> {
    let tenant = Tenant::parse("open")?;
    for n in 0..open {
        let mut j = job(&tenant, n, tilegate_core::now_millis());
        j.windows_enqueued = true;
        b.jobs.create_job(&j).await?;
    }
    Ok(())
}

/// `finished` settled jobs (published and announced).
async fn finished_jobs(b: &Backends, finished: usize) -> anyhow::Result<()> {
    let tenant = Tenant::parse("done")?;
    let now = tilegate_core::now_millis();
    let rows: Vec<_> = (0..finished)
        .map(|n| {
            let mut j = job(&tenant, n, now - 86_400_000 + n as i64);
            j.windows_enqueued = true;
            j.settled = true;
            j
        })
        .collect();
    futures::future::try_join_all(rows.chunks(finished.div_ceil(16).max(1)).map(
        |chunk| async move {
            for j in chunk {
                b.jobs.create_job(j).await?;
            }
            Ok::<_, tilegate_core::StoreError>(())
        },
    ))
    .await?;
    Ok(())
}

async fn pass(r: &Reconciler) -> anyhow::Result<Value> {
    let (report, n) = counted(r.pass()).await;
    let report = report?;
    Ok(json!({
        "open_jobs": report.open_jobs,
        "requests": total(&n),
        "by_operation": n,
    }))
}

pub fn run(
    tilegate: &std::path::Path,
    work: &std::path::Path,
    open: usize,
    finished: usize,
) -> anyhow::Result<Value> {
    let (objects, tables, queue) = crate::scope::emulator_deployment(tilegate, work, "tgrec")?;
    let rt = tokio::runtime::Runtime::new()?;
    rt.block_on(async {
        let b = tilegate_aws::AwsBackends::connect(&objects, &tables, &queue, 3).await?;
        open_jobs(&b, open).await?;
        let r = Reconciler::new(
            b.clone(),
            ReconcileOptions::new(tilegate_assembler::AssembleOptions::new(
                tilegate_claim::unique_owner("bench-reconcile"),
            )),
            Announcer::new(b.clone(), Vec::new()),
        );
        pass(&r).await?;
        let alone = pass(&r).await?;
        let started = std::time::Instant::now();
        finished_jobs(&b, finished).await?;
        let fill_s = started.elapsed().as_secs_f64();
        let crowded = pass(&r).await?;
        Ok::<_, anyhow::Error>(json!({
            "open": open,
            "finished": finished,
            "fill_s": fill_s,
            "alone": alone,
            "crowded": crowded,
        }))
    })
}

pub fn table(doc: &Value) -> String {
    let ops = |v: &Value| -> String {
        v["by_operation"]
            .as_object()
            .into_iter()
            .flatten()
            .map(|(k, n)| format!("{k} {n}"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    format!(
        "Requests one reconciler pass sends (AWS stores, counted on the wire, emulator)\n\n\
         | jobs | open jobs read | requests | by operation |\n|---|---:|---:|---|\n\
         | {} open | {} | {} | {} |\n| {} open + {} finished | {} | {} | {} |\n",
        doc["open"],
        doc["alone"]["open_jobs"],
        doc["alone"]["requests"],
        ops(&doc["alone"]),
        doc["open"],
        doc["finished"],
        doc["crowded"]["open_jobs"],
        doc["crowded"]["requests"],
        ops(&doc["crowded"]),
    )
}

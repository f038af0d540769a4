//! The ledger benchmark: one job with `attempts` attempts of each of `windows` windows on the
//! embedded backend (SQLite ledger, local object store; each attempt a small object at its
//! own key, uploaded and published through the same calls `regenerate` makes, so all but the
//! last of each window are retired), then one GC pass at a time when every retired attempt is
//! due — mark and sweep, each retired row's exact key deleted at its ETag — and `reconcile`
//! over all the job's rows. Prints rows per second of each.

use bytes::Bytes;
use futures::{StreamExt as _, TryStreamExt as _};
use serde_json::json;
use std::path::Path;
use std::time::Instant;
use tilegate_core::ledger::{DAY_MS, Retention, Subject};
use tilegate_core::recipe::Recipe;
use tilegate_core::source::{SceneMeta, SourceInfo};
use tilegate_core::table::JobRecord;
use tilegate_core::{Backends, ETag, Grid, JobId, Prefix, Tenant};
use tilegate_ledger::{attempt, gc, reconcile};

/// Requests in flight while building the ledger (SQLite serialises its writers anyway).
const SETUP_CONCURRENCY: usize = 32;

fn synthetic_job(windows: u32) -> JobRecord {
    // A grid of `windows` 512-pixel windows in one row band per 200 columns.
    let cols = windows.min(200);
    let rows = windows.div_ceil(cols);
    let grid = Grid::new(cols * 512, rows * 512, 512).expect("a valid grid");
    let source = SourceInfo {
        uri: format!("file:///bench/ledger-{windows}.tif"),
        etag: ETag::new("\"bench\""),
        size: 0,
        stat: None,
        assets: Vec::new(),
        signed: false,
    };
    let recipe = Recipe::copy_all();
    let prefix = Prefix::default();
    let tenant = Tenant::default();
    JobRecord {
        job_id: JobId::of(&source, &recipe, &prefix, &tenant),
        source,
        recipe,
        grid,
        prefix,
        tenant,
        scene: SceneMeta {
            width: grid.width,
            height: grid.height,
            bands: 1,
            dtype: "Byte".into(),
            crs_wkt: String::new(),
            geotransform: [0.0, 1.0, 0.0, 0.0, 0.0, -1.0],
            nodata: None,
            placement: None,
            datetime: None,
        },
        created_at: 0,
        scene_output: None,
        manifest_shards: 1,
        redrives: 0,
        outbox: Vec::new(),
        windows_enqueued: false,
        settled: false,
    }
}

async fn build(b: &Backends, job: &JobRecord, windows: u32, attempts: u32) -> anyhow::Result<()> {
    let subjects: Vec<_> = job.grid.windows().take(windows as usize).collect();
    futures::stream::iter(subjects)
        .map(|w| async move {
            for k in 0..attempts {
                let now = i64::from(k) * 1000;
                let row = attempt::begin(
                    b,
                    job,
                    Subject::Window(w),
                    attempt::new_id(),
                    Retention::default(),
                    false,
                    now,
                )
                .await?;
                let id = row.row.attempt.clone();
                let body = Bytes::from(format!("{w} attempt {k}"));
                attempt::upload(b, row, body, now).await?;
                attempt::accept_current(b, &job.job_id, Subject::Window(w), &id, now).await?;
            }
            anyhow::Ok(())
        })
        .buffer_unordered(SETUP_CONCURRENCY)
        .try_collect::<Vec<_>>()
        .await?;
    Ok(())
}

pub fn run(windows: u32, attempts: u32, work: &Path, json_out: bool) -> anyhow::Result<()> {
    let dir = work.join(format!("ledger-{windows}x{attempts}"));
    if dir.exists() {
        std::fs::remove_dir_all(&dir)?;
    }
    std::fs::create_dir_all(&dir)?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let b = tilegate_embedded::open_data_dir(&dir, 3)?;
    let job = synthetic_job(windows);
    rt.block_on(b.jobs.create_job(&job))?;
    let started = Instant::now();
    rt.block_on(build(&b, &job, windows, attempts))?;
    let setup_s = started.elapsed().as_secs_f64();
    let rows = u64::from(windows) * u64::from(attempts);

    // Every retired attempt is due 7 days after its retirement.
    let at = i64::from(attempts) * 1000 + 7 * DAY_MS as i64;
    let started = Instant::now();
    let (mut report, marked) = rt.block_on(gc::mark_pass(&b, &gc::GcOptions::at(at)))?;
    let mark_s = started.elapsed().as_secs_f64();
    let started = Instant::now();
    rt.block_on(gc::sweep_pass(
        &b,
        marked,
        &gc::GcOptions::at(at),
        &mut report,
    ))?;
    let sweep_s = started.elapsed().as_secs_f64();
    let expected = u64::from(windows) * u64::from(attempts.saturating_sub(1));
    anyhow::ensure!(
        report.marked == expected && report.deleted == expected,
        "gc marked {} and deleted {} of {expected} due rows",
        report.marked,
        report.deleted
    );

    let started = Instant::now();
    let rec = rt.block_on(reconcile::reconcile(&b, &job))?;
    let reconcile_s = started.elapsed().as_secs_f64();
    anyhow::ensure!(rec.is_clean(), "reconcile found disagreements: {rec:?}");
    anyhow::ensure!(rec.rows == rows, "reconcile compared {} rows", rec.rows);

    let per_s = |n: u64, s: f64| if s > 0.0 { n as f64 / s } else { 0.0 };
    let doc = json!({
        "windows": windows,
        "attempts_per_window": attempts,
        "rows": rows,
        "setup_s": setup_s,
        "gc": {
            "due_rows": report.due,
            "mark_s": mark_s,
            "sweep_s": sweep_s,
            "mark_rows_per_s": per_s(report.marked, mark_s),
            "sweep_rows_per_s": per_s(report.deleted, sweep_s),
            "rows_per_s": per_s(report.deleted, mark_s + sweep_s),
        },
        "reconcile": {
            "rows": rec.rows,
            "objects": rec.objects,
            "s": reconcile_s,
            "rows_per_s": per_s(rec.rows, reconcile_s),
        },
    });
    if json_out {
        println!("{}", serde_json::to_string_pretty(&doc)?);
    } else {
        println!(
            "| ledger rows | GC due | mark | sweep | GC rows/s | reconcile | reconcile rows/s |\n\
             |---|---|---|---|---|---|---|\n\
             | {rows} ({windows} windows × {attempts}) | {} | {mark_s:.1} s | {sweep_s:.1} s | {:.0} | {reconcile_s:.1} s | {:.0} |",
            report.due,
            per_s(report.deleted, mark_s + sweep_s),
            per_s(rec.rows, reconcile_s),
        );
        println!("(building the ledger took {setup_s:.1} s)");
    }
    std::fs::remove_dir_all(&dir)?;
    Ok(())
}

//! What a person looks at: `status` (once, or live with `--watch`), `report` (the HTML page)
//! and `stac` (the scenes' Items and a Collection). Every view reads one
//! [`tilegate_report::Gathered`] job, so they agree on every count.

use super::find_job;
use crate::args::{PriceArgs, ReportArgs, StacArgs, StatusArgs};
use crate::ctx::{Ctx, Selection};
use crate::errors::refused;
use crate::output::Out;
use crate::reports::{PageReport, RecentJob, StacReport, StatusReport, WatchFrame};
use anyhow::Context;
use serde_json::Value;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::io::{IsTerminal as _, Write as _};
use std::process::ExitCode;
use std::time::{Duration, Instant};
use tilegate_core::Backends;
use tilegate_core::lifecycle::{Counts, Lifecycle};
use tilegate_core::object::ObjectStoreExt as _;
use tilegate_core::{Exit, Reason};
use tilegate_report::html::{self, Extras};
use tilegate_report::{PriceTable, status};
use tilegate_stac as stac;

/// The price table the flags name (the built-in one by default).
pub(super) fn prices(path: Option<&std::path::Path>) -> anyhow::Result<PriceTable> {
    match path {
        None => Ok(PriceTable::default()),
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("read the price table {}", path.display()))?;
            PriceTable::parse(&text).with_context(|| format!("parse {}", path.display()))
        }
    }
}

/// `--print-prices`: the built-in table, to copy and edit.
fn printed_prices(a: &PriceArgs) -> Option<ExitCode> {
    a.print_prices.then(|| {
        print!("{}", tilegate_report::cost::DEFAULT_PRICES);
        ExitCode::SUCCESS
    })
}

impl StatusArgs {
    pub async fn exec(self, cx: &Ctx) -> anyhow::Result<ExitCode> {
        status(&cx.out, &cx.open_read_only().await?, self).await
    }
}

impl ReportArgs {
    pub async fn exec(self, cx: &Ctx) -> anyhow::Result<ExitCode> {
        report(&cx.out, &cx.sel, &cx.open_read_only().await?, self).await
    }
}

impl StacArgs {
    pub async fn exec(self, cx: &Ctx) -> anyhow::Result<ExitCode> {
        stac_cmd(&cx.out, &cx.open_read_only().await?, self).await
    }
}

async fn status(out: &Out, b: &Backends, a: StatusArgs) -> anyhow::Result<ExitCode> {
    if let Some(code) = printed_prices(&a.prices) {
        return Ok(code);
    }
    let prices = prices(a.prices.prices.as_deref())?;
    let job = find_job(b, a.job.as_deref()).await?;
    if a.watch {
        return watch(out, b, job, &prices, a.interval).await;
    }
    // Without a job: the newest job's status, and the recent jobs with their progress.
    let recent = match a.job {
        None => Some(recent_jobs(b).await?),
        Some(_) => None,
    };
    let g = status::gather(b, job, tilegate_core::now_millis()).await?;
    out.emit(&StatusReport {
        status: g.status(&prices),
        recent_jobs: recent,
        show_cost: a.cost,
    });
    Ok(ExitCode::SUCCESS)
}

/// How many recent jobs `status` lists.
const RECENT_JOBS: usize = 20;

/// The newest jobs, each with its state and counts: one manifest count and one pointer read
/// per job, and one read of the dead-letter queue for them all. The state and counts are
/// [`Lifecycle::of`] and [`Counts`] of the same figures a job's own `status` reads, so the
/// list and the detail never disagree.
async fn recent_jobs(b: &Backends) -> anyhow::Result<Vec<RecentJob>> {
    let jobs = b.jobs.list_jobs(RECENT_JOBS).await?;
    // Each job's dead-lettered windows (a window counted once however many letters name it).
    let mut dead: HashMap<tilegate_core::JobId, HashSet<String>> = HashMap::new();
    if !jobs.is_empty() {
        for d in b.queue.list_dead_letters(status::DEAD_LETTERS_READ).await? {
            if let Some(job) = status::dead_letter_job(&d.body) {
                let window = status::dead_letter_window(&d.body)
                    .map_or_else(|| d.message_id.clone(), |w| w.to_string());
                dead.entry(job).or_default().insert(window);
            }
        }
    }
    let mut out = Vec::with_capacity(jobs.len());
    for j in jobs {
        let row = j.row;
        let recorded = b.manifest.count_entries(&row.job_id).await?;
        let dead_lettered = dead.get(&row.job_id).map_or(0, |w| w.len() as u64);
        let counts = Counts::new(row.grid.len(), recorded, dead_lettered);
        let published = row.scene_output.is_some()
            || b.ledger
                .get_pointer(&row.job_id, tilegate_core::ledger::Subject::Scene)
                .await?
                .is_some();
        out.push(RecentJob {
            lifecycle: Lifecycle::of(&counts, published),
            counts,
            job_id: row.job_id.to_string(),
            source: tilegate_core::redact::redact(&row.source.uri).into_owned(),
            recipe: serde_json::to_value(&row.recipe.operation)
                .ok()
                .and_then(|v| v["op"].as_str().map(str::to_owned))
                .unwrap_or_default(),
            created_at: row.created_at,
        });
    }
    Ok(out)
}

/// `status --watch`: refresh until the job completes (exit 0), or until every window left
/// is dead-lettered (exit 3).
async fn watch(
    out: &Out,
    b: &Backends,
    job: tilegate_core::table::JobRecord,
    prices: &PriceTable,
    interval: f64,
) -> anyhow::Result<ExitCode> {
    if !interval.is_finite() {
        return Err(refused(
            Reason::BadOption,
            format!("--interval must be a number of seconds, not {interval}"),
        ));
    }
    let interval = Duration::from_secs_f64(interval.clamp(0.1, 3600.0));
    let tty = std::io::stdout().is_terminal() && !out.json;
    let started = Instant::now();
    let mut first: Option<(Instant, u64)> = None;
    let mut previous: Option<(Instant, u64, BTreeMap<String, u64>)> = None;
    let mut drawn_lines = 0usize;
    // When the job last moved: a watch of a job no worker takes says so, not "ETA —" forever.
    let mut last_moved = (Instant::now(), u64::MAX);
    let stalled_after = (interval * 3).max(Duration::from_secs(2));
    loop {
        let g = status::gather(b, job.clone(), tilegate_core::now_millis()).await?;
        let st = g.status(prices);
        let now = Instant::now();
        let done = st.manifest_rows;
        let (t0, d0) = *first.get_or_insert((now, done));
        let per_worker: BTreeMap<String, u64> = st
            .workers
            .iter()
            .map(|w| (w.worker.clone(), w.windows))
            .collect();
        let elapsed = now.duration_since(t0).as_secs_f64();
        let rate = if elapsed > 0.0 {
            done.saturating_sub(d0) as f64 / elapsed
        } else {
            0.0
        };
        let left = st.windows.saturating_sub(done);
        let eta = (rate > 0.0).then(|| left as f64 / rate);
        let finished = st.complete || st.window_states.missing == 0;
        // The operator's own look reads the queue's depth: always there.
        let queue = st.queue.unwrap_or_default();
        if done != last_moved.1 || queue.in_flight > 0 {
            last_moved = (now, done);
        }
        let idle = now.duration_since(last_moved.0);
        let hint = (!finished && queue.visible > 0 && idle >= stalled_after).then(|| {
            format!(
                "no worker is taking this job's windows ({} waiting, none in flight for {:.0} s): \
                 start one with `tilegate work`, or check the workers' logs",
                queue.visible,
                idle.as_secs_f64()
            )
        });
        let mut lines = vec![format!(
            "job {}  {done}/{} windows ({:.0}%)  {} dead-lettered  {} missing  {:.1} windows/s  ETA {}  [{:.0} s]",
            &st.job_id.as_str()[..12],
            st.windows,
            100.0 * done as f64 / st.windows.max(1) as f64,
            st.window_states.dead_lettered,
            st.window_states.missing,
            rate,
            eta.map_or_else(|| "—".to_owned(), |s| format!("{s:.0} s")),
            started.elapsed().as_secs_f64(),
        )];
        if tty {
            lines.push(format!(
                "  written {}  already present {}  encode skipped {}  queue: {} visible, {} in flight",
                st.window_states.written,
                st.window_states.already_present,
                st.window_states.encode_skipped,
                queue.visible,
                queue.in_flight
            ));
            for (reason, n) in &st.dead_letters_by_reason {
                lines.push(format!("  dead letters {reason}: {n}"));
            }
            for (w, n) in &per_worker {
                let recent = previous.as_ref().map_or(0, |(_, _, p)| {
                    n.saturating_sub(p.get(w).copied().unwrap_or(0))
                });
                lines.push(format!("  worker {w}: {n} windows (+{recent})"));
            }
        }
        if let Some(h) = &hint {
            lines.push(format!("  {h}"));
        }
        if out.json {
            let frame = WatchFrame {
                status: st.clone(),
                rate_windows_per_s: rate,
                eta_s: eta,
                hint: hint.clone(),
            };
            let doc =
                tilegate_core::time::with_utc(serde_json::to_value(&frame).expect("serialises"));
            println!("{}", serde_json::to_string(&doc).expect("serialises"));
        } else {
            let mut stdout = std::io::stdout().lock();
            if tty && drawn_lines > 0 {
                // Back over the previous frame, then clear to the end of the screen.
                write!(stdout, "\x1b[{drawn_lines}A\x1b[J")?;
            }
            for l in &lines {
                writeln!(stdout, "{l}")?;
            }
            stdout.flush()?;
            drawn_lines = lines.len();
        }
        if finished {
            return Ok(if st.complete {
                ExitCode::SUCCESS
            } else {
                Exit::Incomplete.into()
            });
        }
        previous = Some((now, done, per_worker));
        tokio::time::sleep(interval).await;
    }
}

/// A pyramid's map for its report: the tiles of the finest zoom that has at most 16, read from
/// its PMTiles archive (none for an archive over 256 MiB, or none published: a report is no
/// place to page through a large one).
async fn map_tiles(b: &Backends, key: &str) -> Vec<(u8, u32, u32, Vec<u8>)> {
    use tilegate_core::object::ObjectStoreExt as _;
    let Ok(key) = tilegate_core::ObjectKey::checked(key) else {
        return Vec::new();
    };
    let Ok(Some(meta)) = b.objects.head(&key).await else {
        return Vec::new();
    };
    if !key.as_str().ends_with(".pmtiles") || meta.size > 256 << 20 {
        return Vec::new();
    }
    let Ok(got) = b.objects.get_bytes(&key).await else {
        return Vec::new();
    };
    let Ok(reader) = tilegate_pmtiles::ArchiveReader::new(&got.bytes) else {
        return Vec::new();
    };
    let Ok(entries) = reader.tile_entries() else {
        return Vec::new();
    };
    let mut tiles: Vec<tilegate_pmtiles::Tile> = entries
        .iter()
        .flat_map(|e| {
            (0..u64::from(e.run_length.max(1)))
                .filter_map(move |i| tilegate_pmtiles::archive::tileid_to_zxy(e.tile_id + i))
        })
        .collect();
    tiles.sort();
    let mut per_zoom: BTreeMap<u8, Vec<tilegate_pmtiles::Tile>> = BTreeMap::new();
    for t in tiles {
        per_zoom.entry(t.z).or_default().push(t);
    }
    let Some((_, chosen)) = per_zoom.iter().rev().find(|(_, t)| t.len() <= 16) else {
        return Vec::new();
    };
    chosen
        .iter()
        .filter_map(|t| {
            let bytes = reader.tile(t.z, t.x, t.y).ok()??;
            Some((t.z, t.x, t.y, bytes.to_vec()))
        })
        .collect()
}

async fn report(
    out: &Out,
    sel: &Selection,
    b: &Backends,
    a: ReportArgs,
) -> anyhow::Result<ExitCode> {
    if let Some(code) = printed_prices(&a.prices) {
        return Ok(code);
    }
    let prices = prices(a.prices.prices.as_deref())?;
    let job = find_job(b, a.job.as_deref()).await?;
    let now = tilegate_core::now_millis();
    let g = status::gather(b, job, now).await?;
    let pyramid = matches!(
        g.job.recipe.operation,
        tilegate_core::recipe::Operation::Pyramid(_)
    );
    let map_tiles = match (&g.job.scene_output, a.no_thumbnail, pyramid) {
        (Some(scene), false, true) => map_tiles(b, &scene.key).await,
        _ => Vec::new(),
    };
    let thumbnail_png = match (&g.job.scene_output, a.no_thumbnail || pyramid) {
        (Some(scene), false) => {
            let path = sel.gdal_path_of_object(&scene.key);
            match tokio::task::spawn_blocking(move || tilegate_cog::thumbnail_png(&path, 256))
                .await
                .expect("thumbnail task panicked")
            {
                Ok(png) => Some(png),
                Err(e) => {
                    tracing::warn!(job_id = %g.job.job_id, key = %scene.key,
                        error = %tilegate_core::error::chain(&e), "no thumbnail of the scene");
                    None
                }
            }
        }
        _ => None,
    };
    let st = g.status(&prices);
    let page = html::render(
        &g,
        &st,
        &Extras {
            thumbnail_png,
            generated_at: Some(now),
            map_tiles,
        },
    );
    if a.out.as_os_str() == "-" {
        // `-o -`: the page is the output, on stdout; nothing else is printed there.
        use std::io::Write as _;
        let mut stdout = std::io::stdout().lock();
        stdout
            .write_all(page.as_bytes())
            .and_then(|()| stdout.flush())
            .context("write the report to stdout")?;
        return Ok(ExitCode::SUCCESS);
    }
    std::fs::write(&a.out, &page).with_context(|| format!("write {}", a.out.display()))?;
    out.emit(&PageReport {
        job_id: st.job_id.clone(),
        report: a.out,
        bytes: page.len(),
        lifecycle: st.lifecycle,
        counts: st.counts,
        windows: st.windows,
        window_states: st.window_states,
        complete: st.complete,
    });
    Ok(ExitCode::SUCCESS)
}

async fn stac_cmd(out: &Out, b: &Backends, a: StacArgs) -> anyhow::Result<ExitCode> {
    let jobs = if a.jobs.is_empty() {
        b.jobs
            .list_jobs(10_000)
            .await?
            .into_iter()
            .map(|v| v.row)
            .filter(|j| j.scene_output.is_some())
            .collect()
    } else {
        let mut v = Vec::new();
        for j in &a.jobs {
            v.push(find_job(b, Some(j)).await?);
        }
        v
    };
    let mut items = Vec::new();
    for job in &jobs {
        let Some(scene) = &job.scene_output else {
            return Err(refused(
                Reason::NoScene,
                format!(
                    "job {} has no assembled scene (run `tilegate assemble`)",
                    job.job_id
                ),
            ));
        };
        // A regenerated scene published by its pointer is what a reader gets: its Item is
        // built now from the attempt's bytes (attempts keep no Item beside them).
        if let Some(p) = b
            .ledger
            .get_pointer(&job.job_id, tilegate_core::ledger::Subject::Scene)
            .await?
        {
            let checksum = tilegate_assembler::checksum_of(b, &p.row.output).await?;
            items.push((
                stac::item(job, &p.row.output, &checksum),
                format!("{}{}", out.objects_root, p.row.output.key),
            ));
            continue;
        }
        let key = stac::item_key(&scene.key)?;
        // A scene assembled before scenes had Items has none until its next `assemble`.
        if a.jobs.is_empty() && b.objects.head(&key).await?.is_none() {
            eprintln!(
                "tilegate: job {} has no STAC Item yet; `tilegate assemble {}` publishes it",
                job.job_id, job.job_id
            );
            continue;
        }
        let bytes = b
            .objects
            .get_bytes(&key)
            .await
            .with_context(|| format!("read the STAC Item {key}"))?
            .bytes;
        let item: Value =
            serde_json::from_slice(&bytes).with_context(|| format!("parse the STAC Item {key}"))?;
        items.push((item, format!("{}{key}", out.objects_root)));
    }
    if let Some(path) = &a.stac_collection {
        let c = stac::collection(
            &a.collection_id,
            "Scenes assembled by tilegate, one Item per job.",
            &items,
        );
        std::fs::write(path, stac::to_bytes(&c))
            .with_context(|| format!("write {}", path.display()))?;
    }
    let (items, hrefs) = items.into_iter().unzip();
    out.emit(&StacReport {
        items,
        hrefs,
        collection: a.stac_collection,
        only_hrefs: a.hrefs,
    });
    Ok(ExitCode::SUCCESS)
}

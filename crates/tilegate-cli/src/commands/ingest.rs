//! `ingest`: arrivals (queue messages, files in watched directories) become planned jobs.

use crate::args::IngestArgs;
use crate::ctx::Ctx;
use crate::output::Out;
use crate::recipes::recipe_from;
use crate::reports::{IngestLine, IngestReport};
use std::process::ExitCode;
use std::time::{Duration, Instant};
use tilegate_core::Exit;
use tilegate_core::queue::{ReceiveOptions, Received, WorkQueue};
use tilegate_pipeline::ingest::{
    Disposition, Ingest, IngestConfig, IngestError, Ingested, Watch, retry_backoff,
};

/// How long a received arrival stays hidden: extended every third of it while it is planned (a
/// large scene's probe and tens of thousands of window messages take a while), so that the
/// arrival of a process that died comes back within this long.
const ARRIVAL_VISIBILITY: Duration = Duration::from_secs(30);

impl IngestArgs {
    pub async fn exec(self, cx: &Ctx) -> anyhow::Result<ExitCode> {
        ingest_cmd(cx, self).await
    }
}

async fn ingest_cmd(cx: &Ctx, a: IngestArgs) -> anyhow::Result<ExitCode> {
    let out = &cx.out;
    let (recipe, (prefix, tenant)) = recipe_from(&a.recipe)?;
    for b in &a.buckets {
        if !b.starts_with("s3://") || b.trim_end_matches('/')[5..].contains('/') {
            return Err(crate::errors::refused(
                tilegate_core::Reason::BadOption,
                format!("--bucket {b}: give a bucket as s3://BUCKET"),
            ));
        }
    }
    let cfg = IngestConfig {
        recipe,
        prefix,
        tenant,
        assets: a.recipe.assets.clone(),
        manifest_shards: a.recipe.manifest_shards,
        buckets: a
            .buckets
            .iter()
            .map(|b| b.trim_end_matches('/').to_owned())
            .collect(),
        key_prefixes: a.key_prefixes.clone(),
        key_suffixes: a.key_suffixes.clone(),
        collections: a.collections.clone(),
        product: a.product.clone(),
    };
    if a.print_config {
        println!("{}", serde_json::to_string(&cfg)?);
        return Ok(ExitCode::SUCCESS);
    }
    // A watched directory that is not there is the command line's mistake, said with its path
    // before anything is opened.
    if !(a.settle.is_finite() && (0.0..=86_400.0).contains(&a.settle)) {
        return Err(crate::errors::refused(
            tilegate_core::Reason::BadOption,
            format!(
                "--settle {}: give the seconds a file must stand still, 0 to 86400",
                a.settle
            ),
        ));
    }
    let settle = Duration::from_secs_f64(a.settle);
    for root in &a.watch {
        if !root.is_dir() {
            return Err(crate::errors::refused(
                tilegate_core::Reason::BadOption,
                format!("--watch {}: no such directory", root.display()),
            ));
        }
    }
    let b = cx.open().await?;
    let arrivals = cx.open_arrivals(a.arrivals.as_deref()).await?;
    let ingest = Ingest::new(b, cfg, cx.policies());
    // A file whose planning meets a passing fault is tried again by a later scan; a one-off
    // round gives it as many tries as an arrival gets receives, then says it refused.
    let mut watches: Vec<Watch> = a
        .watch
        .iter()
        .cloned()
        .map(|root| {
            let w = Watch::new(root).with_settle(settle);
            if a.until_idle {
                w.with_max_attempts(arrivals.max_receive_count())
            } else {
                w
            }
        })
        .collect();
    let stop = super::stop_on_signals();
    let poll = Duration::from_secs_f64(a.poll_s.clamp(0.05, 3600.0));
    if !cx.out.json {
        let dirs: Vec<String> = a.watch.iter().map(|d| d.display().to_string()).collect();
        let watching = if dirs.is_empty() {
            String::new()
        } else {
            format!(
                ", watching {} (a file is planned once still for {} s)",
                dirs.join(", "),
                a.settle
            )
        };
        eprintln!(
            "tilegate: ingesting from the {} arrivals queue{watching}; {}",
            arrivals.name(),
            if a.until_idle {
                "exits once a round finds nothing"
            } else {
                "Ctrl-C stops"
            }
        );
    }
    let mut report = IngestReport {
        messages: 0,
        files: 0,
        planned: 0,
        duplicates: 0,
        skipped: 0,
        refused: 0,
        retried: 0,
        arrivals: Vec::new(),
    };
    // A file is planned once it has stood still for the settle time: an idle round needs the
    // last scan to have found nothing still settling.
    let mut last_scan = Instant::now() - poll;
    loop {
        if *stop.borrow() {
            break;
        }
        let mut busy = false;
        if last_scan.elapsed() >= poll {
            last_scan = Instant::now();
            for w in &mut watches {
                let ready = w.scan().map_err(|e| {
                    anyhow::Error::new(e)
                        .context(format!("scan the watched directory {}", w.root().display()))
                })?;
                busy |= !ready.is_empty();
                for path in ready {
                    report.files += 1;
                    let outcome = ingest.local_file(w.root(), &path).await;
                    match outcome {
                        Ok(i) => note(out, &mut report, line_of(i)),
                        Err(e) => {
                            let retry = if e.is_retryable() {
                                w.retry_later(&path)
                            } else {
                                None
                            };
                            if let Some(wait) = retry {
                                report.retried += 1;
                                tracing::warn!(file = %path.display(), error = %e, retry_in_s = wait.as_secs(), "file not planned yet: a fault that may pass; a later scan tries it again");
                            } else {
                                // Said once: a refusal is final until the file changes.
                                let line = refused_file(path.display().to_string(), &e);
                                tracing::warn!(file = %path.display(), reason = e.reason_code().as_str(), why = line.why.as_deref().unwrap_or(""), "file refused");
                                report.refused += 1;
                                note(out, &mut report, line);
                            }
                        }
                    }
                }
            }
        }
        // A file still settling, or waiting to be tried again, is work to come.
        busy |= watches.iter().any(Watch::settling);
        let wait = if watches.is_empty() {
            Duration::from_secs(5)
        } else {
            Duration::ZERO
        };
        let received = arrivals
            .receive(ReceiveOptions {
                // One at a time: a message received is a message being planned, never one
                // held behind another while a crash would strand it.
                max: 1,
                wait: wait.min(poll),
                visibility: ARRIVAL_VISIBILITY,
            })
            .await?;
        let fresh = !received.is_empty();
        for msg in received {
            report.messages += 1;
            handle(out, &ingest, arrivals.as_ref(), &msg, &mut report).await?;
        }
        if a.until_idle && !busy && !fresh {
            let depth = arrivals.depth().await?;
            if depth.visible == 0 && depth.in_flight == 0 {
                break;
            }
        }
        if !fresh && !watches.is_empty() {
            let mut stop = stop.clone();
            tokio::select! {
                () = tokio::time::sleep(poll.saturating_sub(last_scan.elapsed())) => {}
                _ = stop.changed() => {}
            }
        }
    }
    if out.json {
        out.emit(&report);
    } else {
        eprintln!("{}", crate::output::Report::text(&report, out));
    }
    // A consumer stopped by a signal stopped cleanly; a one-off round says what it refused.
    Ok(if a.until_idle && report.refused > 0 {
        Exit::Failed.into()
    } else {
        ExitCode::SUCCESS
    })
}

/// Plan one message's arrivals, then acknowledge, dead-letter or release it.
async fn handle(
    out: &Out,
    ingest: &Ingest,
    arrivals: &dyn WorkQueue,
    msg: &Received,
    report: &mut IngestReport,
) -> anyhow::Result<()> {
    let planning = ingest.message(&msg.body);
    tokio::pin!(planning);
    let outcome = loop {
        tokio::select! {
            outcome = &mut planning => break outcome,
            () = tokio::time::sleep(ARRIVAL_VISIBILITY / 3) => {
                if let Err(e) = arrivals.change_visibility(&msg.receipt, ARRIVAL_VISIBILITY).await {
                    tracing::warn!(message_id = %msg.message_id, error = %e, "could not keep the arrival hidden while planning it");
                }
            }
        }
    };
    for i in outcome.ingested {
        note(out, report, line_of(i));
    }
    match outcome.disposition {
        Disposition::Done => {
            arrivals.ack(&msg.receipt).await?;
        }
        Disposition::DeadLetter(e) => {
            report.refused += 1;
            note(
                out,
                report,
                refused(format!("message {}", msg.message_id), &e),
            );
            arrivals.dead_letter(msg, &e.dead_letter_reason()).await?;
        }
        Disposition::Retry(e) => {
            report.retried += 1;
            tracing::warn!(message_id = %msg.message_id, error = %e, "arrival left for redelivery");
            arrivals
                .change_visibility(&msg.receipt, retry_backoff(msg.receive_count))
                .await?;
        }
    }
    Ok(())
}

fn line_of(i: Ingested) -> IngestLine {
    let blank = |outcome: &str, arrival: String| IngestLine {
        outcome: outcome.to_owned(),
        arrival: tilegate_core::redact::redact(&arrival).into_owned(),
        job_id: None,
        windows: None,
        enqueued: None,
        why: None,
        reason: None,
        product: None,
        tiles: Vec::new(),
    };
    match i {
        Ingested::Planned {
            arrival,
            job_id,
            windows,
            enqueued,
        } => IngestLine {
            job_id: Some(job_id.to_string()),
            windows: Some(windows),
            enqueued: Some(enqueued),
            ..blank("planned", arrival)
        },
        Ingested::Duplicate { arrival, job_id } => IngestLine {
            job_id: Some(job_id.to_string()),
            ..blank("duplicate", arrival)
        },
        Ingested::Skipped { arrival, why } => IngestLine {
            why: Some(why),
            ..blank("skipped", arrival)
        },
        Ingested::Product {
            arrival,
            product,
            tiles,
            duplicate,
            ..
        } => IngestLine {
            product: Some(product),
            windows: Some(tiles.iter().map(|t| t.windows).sum()),
            enqueued: Some(tiles.iter().map(|t| t.enqueued).sum()),
            tiles,
            ..blank(if duplicate { "duplicate" } else { "planned" }, arrival)
        },
    }
}

fn refused(arrival: String, e: &IngestError) -> IngestLine {
    IngestLine {
        outcome: "refused".to_owned(),
        arrival: tilegate_core::redact::redact(&arrival).into_owned(),
        job_id: None,
        windows: None,
        enqueued: None,
        why: Some(tilegate_core::redact::redact(&tilegate_core::error::chain(e)).into_owned()),
        reason: Some(e.reason_code().as_str().to_owned()),
        product: None,
        tiles: Vec::new(),
    }
}

/// A watched file's refusal: its path, and why without the path again.
fn refused_file(arrival: String, e: &IngestError) -> IngestLine {
    IngestLine {
        why: Some(e.cause()),
        ..refused(arrival, e)
    }
}

/// Count an arrival and, in text mode, say it as it happens.
fn note(out: &Out, report: &mut IngestReport, line: IngestLine) {
    match line.outcome.as_str() {
        "planned" => report.planned += 1,
        "duplicate" => report.duplicates += 1,
        "skipped" => report.skipped += 1,
        _ => {}
    }
    if !out.json {
        println!("{}", line.text());
    }
    report.arrivals.push(line);
}

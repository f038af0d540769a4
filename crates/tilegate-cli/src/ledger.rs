//! The commands over the ledger of regenerated outputs: regenerate, accept, attempts, hold,
//! gc, reconcile, url.

use crate::args::{
    AcceptArgs, AttemptsArgs, GcArgs, HoldArgs, ReconcileArgs, RegenerateArgs, UrlArgs, WindowRef,
};
use crate::commands::find_job;
use crate::errors::refused;
use crate::output::Out;
use anyhow::Context as _;
use serde_json::json;
use std::process::ExitCode;
use tilegate_core::Exit;
use tilegate_core::Reason;
use tilegate_core::ledger::{AttemptId, PublishOutcome, Retention, Subject};
use tilegate_core::message::WindowMessage;
use tilegate_core::table::JobRecord;
use tilegate_core::{Backends, Tenant, UnixMillis, Window, now_millis};
use tilegate_ledger::{attempt, gc, reconcile, url};

fn ms(d: std::time::Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

async fn subject_of(b: &Backends, at: &WindowRef) -> anyhow::Result<(JobRecord, Subject)> {
    let job = find_job(b, Some(&at.job)).await?;
    let Some(text) = at.window.as_deref().filter(|_| !at.scene) else {
        return Ok((job, Subject::Scene));
    };
    let window = Window::parse(text).ok_or_else(|| {
        refused(
            Reason::BadWindow,
            format!("`{text}` is not a window: expected ROW_COL, e.g. 3_12"),
        )
    })?;
    if !job.grid.contains(window) {
        return Err(refused(
            Reason::WindowOutsideScene,
            format!(
                "window {window} is outside job {}'s {}×{} grid",
                job.job_id,
                job.grid.rows(),
                job.grid.cols()
            ),
        ));
    }
    Ok((job, Subject::Window(window)))
}

fn attempt_id(s: &str) -> anyhow::Result<AttemptId> {
    AttemptId::parse(s).map_err(|e| refused(Reason::BadAttemptId, e.to_string()))
}

fn publish_doc(out: &PublishOutcome) -> serde_json::Value {
    match out {
        PublishOutcome::Published { previous } => {
            json!({"outcome": "published", "previous": previous})
        }
        PublishOutcome::Superseded { current } => json!({
            "outcome": "superseded",
            "current": current.as_ref().map(|c| c.row.attempt.clone()),
        }),
        PublishOutcome::NotPublishable(row) => json!({
            "outcome": "not-publishable",
            "state": row.as_ref().map(|r| r.row.state.name()),
            "published_before": row.as_ref().is_some_and(|r| r.row.ever_published()),
        }),
        PublishOutcome::Outdated { current } => json!({
            "outcome": "outdated",
            "current": current.as_ref().map(|c| c.row.attempt.clone()),
        }),
    }
}

fn publish_text(out: &PublishOutcome) -> String {
    match out {
        PublishOutcome::Published { previous: Some(p) } => {
            format!("published (the previous attempt {p} is retired)")
        }
        PublishOutcome::Published { previous: None } => "published".to_owned(),
        PublishOutcome::Superseded { current } => format!(
            "not published: the pointer moved meanwhile (now at {})",
            current
                .as_ref()
                .map_or("nothing".to_owned(), |c| c.row.attempt.to_string())
        ),
        PublishOutcome::NotPublishable(Some(r))
            if r.row.ever_published()
                && r.row.state != tilegate_core::ledger::AttemptState::Accepted =>
        {
            format!(
                "not published: the attempt was published before and is {} now (only `accept` \
                 re-links it)",
                r.row.state.name()
            )
        }
        PublishOutcome::NotPublishable(row) => format!(
            "not published: the attempt is {}",
            row.as_ref().map_or("unknown", |r| r.row.state.name())
        ),
        PublishOutcome::Outdated { current } => format!(
            "not published: a newer attempt was published (the pointer is at {}; only \
             `accept` moves it back)",
            current
                .as_ref()
                .map_or("nothing".to_owned(), |c| c.row.attempt.to_string())
        ),
    }
}

fn publish_code(out: Option<&PublishOutcome>) -> ExitCode {
    match out {
        None | Some(PublishOutcome::Published { .. }) => ExitCode::SUCCESS,
        Some(_) => Exit::NotPublished.into(),
    }
}

pub async fn regenerate(out: &Out, b: &Backends, a: RegenerateArgs) -> anyhow::Result<ExitCode> {
    let (job, subject) = subject_of(b, &a.at).await?;
    let id = a.attempt.as_deref().map(attempt_id).transpose()?;
    let retention = Retention {
        preview_ms: a.retain.map(ms),
        retired_ms: ms(a.keep_retired),
        upload_grace_ms: ms(a.upload_grace),
    };
    let req = tilegate_worker::regenerate::Request {
        id,
        retention,
        accept: !a.no_accept,
        policy: crate::sources::of(&job.tenant),
    };
    let done = match subject {
        Subject::Scene => {
            let opts = crate::commands::assemble_options(&a.assemble)?;
            let counters = tilegate_core::metrics::Counters::new();
            tilegate_pipeline::regenerate::scene(b, &job, req, opts, &counters, now_millis).await?
        }
        Subject::Window(window) if a.enqueue => {
            let (row, order) =
                tilegate_worker::regenerate::start(b, &job, window, req, now_millis()).await?;
            let msg = WindowMessage {
                attempt: Some(order),
                ..WindowMessage::for_job(&job, window)
            };
            b.queue.send_batch(&[msg.encode()]).await?;
            let doc = json!({"job_id": job.job_id, "subject": subject.to_string(), "attempt": row.row.attempt, "key": row.row.key, "state": row.row.state.name(), "enqueued": true});
            out.emit(&doc, || {
                format!(
                    "attempt {} of {subject} enqueued (key {})",
                    row.row.attempt, row.row.key
                )
            });
            return Ok(ExitCode::SUCCESS);
        }
        Subject::Window(window) => {
            tilegate_worker::regenerate::run(b, &job, window, req, now_millis).await?
        }
    };
    let r = &done.row.row;
    let doc = json!({
        "job_id": job.job_id,
        "subject": subject.to_string(),
        "attempt": r.attempt,
        "key": r.key,
        "size": r.size,
        "e_tag": r.e_tag,
        "delete_after": r.delete_after,
        "publish": done.published.as_ref().map(publish_doc),
    });
    out.emit(&doc, || {
        let published = done
            .published
            .as_ref()
            .map_or("not published (use `accept`)".to_owned(), publish_text);
        format!(
            "attempt {} of {subject} uploaded to {}; {published}",
            r.attempt, r.key
        )
    });
    Ok(publish_code(done.published.as_ref()))
}

pub async fn accept(out: &Out, b: &Backends, a: AcceptArgs) -> anyhow::Result<ExitCode> {
    let (job, subject) = subject_of(b, &a.at).await?;
    let id = attempt_id(&a.attempt)?;
    let outcome = match a.seen.as_deref() {
        None => attempt::accept_current(b, &job.job_id, subject, &id, now_millis()).await?,
        Some(seen) => {
            let seen = (seen != "none").then(|| attempt_id(seen)).transpose()?;
            attempt::accept(b, &job.job_id, subject, &id, seen, now_millis()).await?
        }
    };
    let doc = json!({"job_id": job.job_id, "subject": subject.to_string(), "attempt": id, "publish": publish_doc(&outcome)});
    out.emit(&doc, || format!("attempt {id}: {}", publish_text(&outcome)));
    Ok(publish_code(Some(&outcome)))
}

/// A time as a person reads it (RFC 3339, UTC), or `-`.
fn time(ms: Option<UnixMillis>) -> String {
    ms.map_or("-".to_owned(), tilegate_core::time::rfc3339)
}

pub async fn attempts(out: &Out, b: &Backends, a: AttemptsArgs) -> anyhow::Result<ExitCode> {
    let job = find_job(b, a.job.as_deref()).await?;
    let mut rows = b.ledger.list_attempts(&job.job_id).await?;
    rows.sort_by(|x, y| {
        (x.row.subject, x.row.created_at, &x.row.attempt).cmp(&(
            y.row.subject,
            y.row.created_at,
            &y.row.attempt,
        ))
    });
    let mut pointers = b.ledger.list_pointers(&job.job_id).await?;
    pointers.sort_by_key(|p| p.row.subject);
    let doc = json!({
        "job_id": job.job_id,
        "tenant": job.tenant,
        "attempts": rows.iter().map(|r| &r.row).collect::<Vec<_>>(),
        "pointers": pointers.iter().map(|p| &p.row).collect::<Vec<_>>(),
        "by_state": tilegate_ledger::count_by_state(&rows),
    });
    out.emit(&doc, || {
        let mut t = format!(
            "job {} (tenant {}): {} attempt(s), {} published\n",
            job.job_id,
            job.tenant,
            rows.len(),
            pointers.len()
        );
        for r in &rows {
            let r = &r.row;
            t.push_str(&format!(
                "  {} {} {:<9} delete after {} hold={} {}\n",
                r.subject,
                r.attempt,
                r.state.name(),
                time(r.delete_after),
                r.legal_hold,
                r.key
            ));
        }
        for p in &pointers {
            let p = &p.row;
            t.push_str(&format!(
                "  pointer {} -> {} (moved {})\n",
                p.subject,
                p.attempt,
                time(Some(p.moved_at))
            ));
        }
        t.trim_end().to_owned()
    });
    Ok(ExitCode::SUCCESS)
}

pub async fn hold(out: &Out, b: &Backends, a: HoldArgs) -> anyhow::Result<ExitCode> {
    let (job, subject) = subject_of(b, &a.at).await?;
    let id = attempt_id(&a.attempt)?;
    let row = attempt::set_hold(b, &job.job_id, subject, &id, !a.release).await?;
    let r = &row.row;
    let doc =
        json!({"attempt": id, "legal_hold": r.legal_hold, "state": r.state.name(), "key": r.key});
    out.emit(&doc, || {
        format!(
            "attempt {id}: legal hold {}",
            if r.legal_hold { "set" } else { "released" }
        )
    });
    Ok(ExitCode::SUCCESS)
}

pub async fn gc_cmd(out: &Out, b: &Backends, a: GcArgs) -> anyhow::Result<ExitCode> {
    let opts = gc::GcOptions {
        dry_run: a.dry_run,
        ..gc::GcOptions::at(a.test_now_ms.unwrap_or_else(now_millis))
    };
    let report = gc::gc(b, &opts).await?;
    let overdue = gc::oldest_overdue_seconds(b, opts.now).await?;
    let mut doc = serde_json::to_value(&report)?;
    doc["deletion_overdue_oldest_seconds"] = overdue.into();
    if a.emf {
        println!(
            "{}",
            tilegate_core::metrics::emf_gauges(
                "tilegate",
                "gc",
                &[
                    (
                        tilegate_core::metrics::DELETION_OVERDUE_OLDEST,
                        "Seconds",
                        overdue
                    ),
                    ("ledger_gc_due_rows", "Count", report.due),
                    ("ledger_gc_marked_rows", "Count", report.marked),
                    ("ledger_gc_deleted_rows", "Count", report.deleted),
                    (
                        "ledger_gc_skipped_rows",
                        "Count",
                        report.skipped_changed + report.skipped_mismatch
                    ),
                ],
                opts.now,
            )
        );
    }
    out.emit(&doc, || {
        if report.dry_run {
            let mut t = format!("dry run: {} due row(s) would be deleted", report.items.len());
            for i in &report.items {
                t.push_str(&format!("\n  {} ({})", i.key, i.state));
            }
            t
        } else {
            format!(
                "gc: {} due, {} marked, {} deleted ({} already absent), {} skipped (changed), {} skipped (object differs); oldest overdue {overdue} s",
                report.due,
                report.marked,
                report.deleted,
                report.already_absent,
                report.skipped_changed,
                report.skipped_mismatch
            )
        }
    });
    Ok(ExitCode::SUCCESS)
}

pub async fn reconcile_cmd(out: &Out, b: &Backends, a: ReconcileArgs) -> anyhow::Result<ExitCode> {
    let job = find_job(b, a.job.as_deref()).await?;
    let report = reconcile::reconcile(b, &job).await?;
    let doc = serde_json::to_value(&report)?;
    out.emit(&doc, || {
        let mut t = format!(
            "job {}: {} object(s), {} row(s): {} orphan(s), {} missing, {} mismatched",
            report.job_id,
            report.objects,
            report.rows,
            report.orphans.len(),
            report.missing.len(),
            report.mismatched.len()
        );
        // Keys shown escaped (`\u{..}`, `\t`) so that what is printed is unambiguous; --json
        // carries them byte for byte.
        for o in &report.orphans {
            t.push_str(&format!("\n  orphan   {:?} ({} bytes)", o.key, o.size));
        }
        for m in &report.missing {
            t.push_str(&format!("\n  missing  {:?} ({} row)", m.key, m.table));
        }
        for m in &report.mismatched {
            t.push_str(&format!(
                "\n  mismatch {:?}: row {} bytes {}, object {} bytes {}",
                m.key, m.row_size, m.row_e_tag, m.object_size, m.object_e_tag
            ));
        }
        t
    });
    Ok(if report.is_clean() {
        ExitCode::SUCCESS
    } else {
        Exit::Disagrees.into()
    })
}

pub async fn url_cmd(out: &Out, b: &Backends, a: UrlArgs) -> anyhow::Result<ExitCode> {
    let (job, subject) = subject_of(b, &a.at).await?;
    let tenant = Tenant::parse(&a.tenant).context("invalid --tenant")?;
    let g = url::grant(b, &job, subject, &tenant, a.expires, now_millis()).await?;
    let doc = serde_json::to_value(&g)?;
    out.emit_secret(&doc, || g.url.clone());
    Ok(ExitCode::SUCCESS)
}

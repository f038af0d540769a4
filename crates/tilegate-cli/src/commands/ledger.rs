//! The commands over the ledger of regenerated outputs: regenerate, accept, attempts, hold,
//! gc, reconcile, url.

use super::find_job;
use crate::args::{
    AcceptArgs, AttemptsArgs, GcArgs, HoldArgs, ReconcileArgs, RegenerateArgs, UrlArgs, WindowRef,
};
use crate::ctx::Ctx;
use crate::errors::refused;
use crate::output::Out;
use crate::reports::{
    AcceptReport, AttemptsReport, GcCmdReport, HoldReport, PublishDoc, RegenerateReport,
};
use anyhow::Context as _;
use std::process::ExitCode;
use tilegate_core::Exit;
use tilegate_core::Reason;
use tilegate_core::ledger::{AttemptId, PublishOutcome, Retention, Subject};
use tilegate_core::table::JobRecord;
use tilegate_core::{Backends, Tenant, Window, now_millis};
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
        PublishOutcome::AlreadyCurrent { .. } => {
            "already published: the pointer names this attempt; nothing changed".to_owned()
        }
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
        None | Some(PublishOutcome::Published { .. } | PublishOutcome::AlreadyCurrent { .. }) => {
            ExitCode::SUCCESS
        }
        Some(_) => Exit::NotPublished.into(),
    }
}

impl RegenerateArgs {
    pub async fn exec(self, cx: &Ctx) -> anyhow::Result<ExitCode> {
        regenerate(cx, &cx.open().await?, self).await
    }
}

impl AcceptArgs {
    pub async fn exec(self, cx: &Ctx) -> anyhow::Result<ExitCode> {
        accept(&cx.out, &cx.open().await?, self).await
    }
}

impl AttemptsArgs {
    pub async fn exec(self, cx: &Ctx) -> anyhow::Result<ExitCode> {
        attempts(&cx.out, &cx.open_read_only().await?, self).await
    }
}

impl HoldArgs {
    pub async fn exec(self, cx: &Ctx) -> anyhow::Result<ExitCode> {
        hold(&cx.out, &cx.open().await?, self).await
    }
}

impl GcArgs {
    pub async fn exec(self, cx: &Ctx) -> anyhow::Result<ExitCode> {
        gc_cmd(&cx.out, &cx.open().await?, self).await
    }
}

impl ReconcileArgs {
    pub async fn exec(self, cx: &Ctx) -> anyhow::Result<ExitCode> {
        reconcile_cmd(&cx.out, &cx.open().await?, self).await
    }
}

impl UrlArgs {
    pub async fn exec(self, cx: &Ctx) -> anyhow::Result<ExitCode> {
        url_cmd(&cx.out, &cx.open().await?, self).await
    }
}

async fn regenerate(cx: &Ctx, b: &Backends, a: RegenerateArgs) -> anyhow::Result<ExitCode> {
    let out = &cx.out;
    let (job, subject) = subject_of(b, &a.at).await?;
    let id = a.attempt.as_deref().map(attempt_id).transpose()?;
    let before = published_output(b, &job, subject).await?;
    let retention = Retention {
        preview_ms: a.retain.map(ms),
        retired_ms: ms(a.keep_retired),
        upload_grace_ms: ms(a.upload_grace),
    };
    let req = tilegate_worker::regenerate::Request {
        id,
        retention,
        accept: !a.no_accept,
        policy: cx.policy_of(&job.tenant),
    };
    let done = match subject {
        Subject::Scene => {
            let opts = super::assemble::assemble_options(&a.assemble)?;
            let counters = tilegate_core::metrics::Counters::new();
            tilegate_pipeline::regenerate::scene(b, &job, req, opts, &counters, now_millis).await?
        }
        Subject::Window(window) if a.enqueue => {
            let row =
                tilegate_worker::regenerate::enqueue(b, &job, window, req, now_millis()).await?;
            out.emit(&RegenerateReport {
                job_id: job.job_id.clone(),
                subject: subject.to_string(),
                attempt: row.row.attempt.to_string(),
                key: row.row.key.clone(),
                state: row.row.state.name().to_owned(),
                enqueued: true,
                size: None,
                e_tag: None,
                delete_after: row.row.delete_after,
                publish: None,
                same_bytes_as_previous: false,
                publish_text: String::new(),
            });
            return Ok(ExitCode::SUCCESS);
        }
        Subject::Window(window) => {
            tilegate_worker::regenerate::run(b, &job, window, req, now_millis).await?
        }
    };
    let r = &done.row.row;
    let same = match (&before, &r.e_tag, r.size) {
        (Some(b), Some(e), Some(size)) => b.e_tag.strong_eq(e) && b.size == size,
        _ => false,
    };
    out.emit(&RegenerateReport {
        job_id: job.job_id.clone(),
        subject: subject.to_string(),
        attempt: r.attempt.to_string(),
        key: r.key.clone(),
        state: r.state.name().to_owned(),
        enqueued: false,
        size: r.size,
        e_tag: r.e_tag.as_ref().map(ToString::to_string),
        delete_after: r.delete_after,
        publish: done.published.as_ref().map(PublishDoc::of),
        same_bytes_as_previous: same,
        publish_text: done
            .published
            .as_ref()
            .map_or("not published (use `accept`)".to_owned(), publish_text),
    });
    Ok(publish_code(done.published.as_ref()))
}

async fn accept(out: &Out, b: &Backends, a: AcceptArgs) -> anyhow::Result<ExitCode> {
    let (job, subject) = subject_of(b, &a.at).await?;
    let id = attempt_id(&a.attempt)?;
    let outcome = match a.seen.as_deref() {
        None => attempt::accept_current(b, &job.job_id, subject, &id, now_millis()).await?,
        Some(seen) => {
            let seen = (seen != "none").then(|| attempt_id(seen)).transpose()?;
            attempt::accept(b, &job.job_id, subject, &id, seen, now_millis()).await?
        }
    };
    out.emit(&AcceptReport {
        job_id: job.job_id.clone(),
        subject: subject.to_string(),
        attempt: id.to_string(),
        publish: PublishDoc::of(&outcome),
        publish_text: publish_text(&outcome),
    });
    Ok(publish_code(Some(&outcome)))
}

async fn attempts(out: &Out, b: &Backends, a: AttemptsArgs) -> anyhow::Result<ExitCode> {
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
    out.emit(&AttemptsReport {
        job_id: job.job_id.clone(),
        tenant: job.tenant.to_string(),
        by_state: tilegate_ledger::count_by_state(&rows),
        attempts: rows.into_iter().map(|r| r.row).collect(),
        pointers: pointers.into_iter().map(|p| p.row).collect(),
    });
    Ok(ExitCode::SUCCESS)
}

async fn hold(out: &Out, b: &Backends, a: HoldArgs) -> anyhow::Result<ExitCode> {
    let (job, subject) = subject_of(b, &a.at).await?;
    let id = attempt_id(&a.attempt)?;
    let row = attempt::set_hold(b, &job.job_id, subject, &id, !a.release).await?;
    let r = &row.row;
    out.emit(&HoldReport {
        attempt: id.to_string(),
        legal_hold: r.legal_hold,
        state: r.state.name().to_owned(),
        key: r.key.clone(),
    });
    Ok(ExitCode::SUCCESS)
}

async fn gc_cmd(out: &Out, b: &Backends, a: GcArgs) -> anyhow::Result<ExitCode> {
    let opts = gc::GcOptions {
        dry_run: a.dry_run,
        ..gc::GcOptions::at(a.test_now_ms.unwrap_or_else(now_millis))
    };
    let report = gc::gc(b, &opts).await?;
    let overdue = gc::oldest_overdue_seconds(b, opts.now).await?;
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
    out.emit(&GcCmdReport {
        gc: report,
        deletion_overdue_oldest_seconds: overdue,
    });
    Ok(ExitCode::SUCCESS)
}

async fn reconcile_cmd(out: &Out, b: &Backends, a: ReconcileArgs) -> anyhow::Result<ExitCode> {
    let job = find_job(b, a.job.as_deref()).await?;
    let report = reconcile::reconcile(b, &job).await?;
    out.emit(&report);
    Ok(if report.is_clean() {
        ExitCode::SUCCESS
    } else {
        Exit::Disagrees.into()
    })
}

async fn url_cmd(out: &Out, b: &Backends, a: UrlArgs) -> anyhow::Result<ExitCode> {
    let (job, subject) = subject_of(b, &a.at).await?;
    let tenant = Tenant::parse(&a.tenant).context("invalid --tenant")?;
    let g = url::grant(b, &job, subject, &tenant, a.expires, now_millis()).await?;
    out.emit_secret(&g);
    if !g.expiring {
        // The embedded store's "URL" is the file's path: say where an expiring one comes from.
        eprintln!(
            "tilegate: note: the embedded store signs nothing: this is the file's path, which no \
             expiry ends. For a link that expires, ask `tilegate serve` on this data directory \
             (`POST /v1/jobs/{}/urls`): it signs links of its own.",
            job.job_id
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// What a reader of `subject` gets now: the pointer's attempt, else the job's own output (the
/// manifest's tile, the assembled scene); none when nothing is published.
async fn published_output(
    b: &Backends,
    job: &JobRecord,
    subject: Subject,
) -> anyhow::Result<Option<tilegate_core::table::OutputRef>> {
    if let Some(p) = b.ledger.get_pointer(&job.job_id, subject).await? {
        return Ok(Some(p.row.output));
    }
    Ok(match subject {
        Subject::Scene => job.scene_output.clone(),
        Subject::Window(w) => {
            b.manifest
                .get_entry(&job.job_id, w)
                .await?
                .map(|e| tilegate_core::table::OutputRef {
                    key: e.row.key,
                    e_tag: e.row.e_tag,
                    size: e.row.size,
                })
        }
    })
}

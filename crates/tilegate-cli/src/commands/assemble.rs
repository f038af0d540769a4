//! `assemble`, `repair` and `cleanup-uploads`: the commands that write or withdraw outputs
//! after the windows are done.

use super::announce::{announcer, deliver_after};
use super::find_job;
use crate::args::{AssembleArgs, AssembleFlags, CleanupArgs, RepairArgs};
use crate::ctx::Ctx;
use crate::errors::refused;
use crate::output::Out;
use crate::reports::{
    AbortedUpload, AssembleBatch, AssembleResult, AssembleSummary, CleanupReport, ErrorDoc,
    FailedOutcome, Incomplete, NotAssembled, RepairReport, UploadLedger,
};
use anyhow::Context;
use std::process::ExitCode;
use std::time::{Duration, Instant};
use tilegate_core::Backends;
use tilegate_core::Exit;
use tilegate_core::Reason;
use tilegate_core::metrics::Counters;

pub(super) fn assemble_options(
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
                Reason::BadOption,
                format!("unknown resampling `{other}`: expected average or nearest"),
            ));
        }
    };
    o.pause_renewals_after_parts = f.test_pause_renewals_after_parts;
    o.part_delay = Duration::from_millis(f.test_part_delay_ms);
    Ok(o)
}

impl AssembleArgs {
    pub async fn exec(self, cx: &Ctx) -> anyhow::Result<ExitCode> {
        assemble_cmd(&cx.out, &cx.open().await?, self).await
    }
}

impl RepairArgs {
    pub async fn exec(self, cx: &Ctx) -> anyhow::Result<ExitCode> {
        repair_cmd(cx, &cx.open().await?, self).await
    }
}

impl CleanupArgs {
    pub async fn exec(self, cx: &Ctx) -> anyhow::Result<ExitCode> {
        cleanup_uploads(&cx.out, &cx.open().await?, self).await
    }
}

async fn assemble_cmd(out: &Out, b: &Backends, a: AssembleArgs) -> anyhow::Result<ExitCode> {
    if a.all {
        return assemble_all(out, b, &a.flags).await;
    }
    let job = find_job(b, a.job.as_deref()).await?;
    let started = Instant::now();
    let mut opts = assemble_options(&a.flags)?;
    // Ctrl-C or SIGTERM abandons the assembly and releases its claim.
    opts.stop = Some(super::stop_on_signals());
    let shown = assembling(out, &job);
    let (assembled, counters) = assemble_job(b, &job.job_id, &opts).await;
    shown.finish_and_clear();
    match assembled {
        Ok(r) => {
            deliver_after(announcer(b, &a.flags.announce).await?.as_ref(), &job.job_id).await;
            let mut summary = AssembleSummary::of(&r, &counters);
            summary.elapsed_s = Some(started.elapsed().as_secs_f64());
            out.emit(&AssembleResult::Assembled(summary));
            Ok(exit_of(&r.outcome))
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
            let message = format!(
                "{}; `tilegate work --until-empty` finishes the windows, `tilegate status` names \
                 the missing ones and their dead letters",
                tilegate_core::redact::redact(&e.to_string())
            );
            if out.json {
                out.emit(&AssembleResult::NotAssembled(NotAssembled {
                    job_id: job.job_id.clone(),
                    outcome: Incomplete::Incomplete,
                    manifest_rows: *have,
                    windows: *want,
                    missing: missing.iter().map(ToString::to_string).collect(),
                    error: Some(ErrorDoc {
                        reason: e.reason_code(),
                        message: message.clone(),
                    }),
                }));
            }
            eprintln!("tilegate: error[{}]: {message}", e.reason_code());
            Ok(Exit::ManifestShort.into())
        }
        Err(e) => Err(anyhow::Error::new(e)),
    }
}

async fn repair_cmd(cx: &Ctx, b: &Backends, a: RepairArgs) -> anyhow::Result<ExitCode> {
    let out = &cx.out;
    let job = find_job(b, Some(&a.job)).await?;
    let window = tilegate_core::Window::parse(&a.window).with_context(|| {
        format!(
            "`{}` is not a window: expected ROW_COL, e.g. 3_12",
            a.window
        )
    })?;
    let policy = cx.policy_of(&job.tenant);
    let prepared = tilegate_worker::repair::prepare(b, &policy, &job.job_id, window).await?;
    let key = prepared.key.to_string();
    let outcome = tilegate_worker::repair::commit(b, prepared).await?;
    out.emit(&match outcome {
        tilegate_worker::repair::RepairOutcome::Written { e_tag, size } => RepairReport::Written {
            key,
            e_tag: e_tag.to_string(),
            size,
        },
        tilegate_worker::repair::RepairOutcome::Superseded => RepairReport::Superseded { key },
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
                Some(match b.ledger.get_attempt(&job, subject, &attempt).await? {
                    Some(r) => UploadLedger {
                        attempt: attempt.to_string(),
                        state: Some(r.row.state.name().to_owned()),
                        note: if r.row.state == tilegate_core::ledger::AttemptState::Uploading {
                            "its row stays `uploading`; gc collects it after the upload grace"
                        } else {
                            "its row does not depend on this upload"
                        }
                        .to_owned(),
                    },
                    None => UploadLedger {
                        attempt: attempt.to_string(),
                        state: None,
                        note: "no ledger row: not tilegate's".to_owned(),
                    },
                })
            }
            None => None,
        };
        uploads.push(AbortedUpload {
            key: u.key.clone(),
            upload_id: u.upload_id.clone(),
            ledger,
        });
    }
    out.emit(&CleanupReport {
        aborted: stale.len(),
        uploads,
    });
    Ok(ExitCode::SUCCESS)
}

/// `assemble --all`: every open job whose windows are all recorded and whose scene is not yet
/// published, one after another (as `plan --from` planned them), each announced to
/// `--announce` (TILEGATE_ANNOUNCE) once published. A job with windows still to do is listed,
/// not assembled; a job that fails to assemble is reported and the rest go on.
async fn assemble_all(out: &Out, b: &Backends, flags: &AssembleFlags) -> anyhow::Result<ExitCode> {
    let opts = assemble_options(flags)?;
    let announcer = announcer(b, &flags.announce).await?;
    let mut jobs = Vec::new();
    let mut failed = 0usize;
    for job in b.jobs.list_open_jobs(ALL_JOBS).await? {
        let job = job.row;
        if job.scene_output.is_some() {
            continue;
        }
        let recorded = b.manifest.count_entries(&job.job_id).await?;
        let result = if recorded < job.grid.len() {
            AssembleResult::NotAssembled(NotAssembled {
                job_id: job.job_id.clone(),
                outcome: Incomplete::Incomplete,
                manifest_rows: recorded,
                windows: job.grid.len(),
                missing: Vec::new(),
                error: None,
            })
        } else {
            let (assembled, counters) = assemble_job(b, &job.job_id, &opts).await;
            match assembled {
                Ok(r) => {
                    deliver_after(announcer.as_ref(), &job.job_id).await;
                    AssembleResult::Assembled(AssembleSummary::of(&r, &counters))
                }
                Err(e) => {
                    failed += 1;
                    AssembleResult::Failed {
                        job_id: job.job_id.clone(),
                        outcome: FailedOutcome::Failed,
                        error: super::error_doc(&anyhow::Error::new(e)),
                    }
                }
            }
        };
        if !out.json {
            println!(
                "{}",
                tilegate_core::redact::redact(&AssembleBatch::line(&result, out))
            );
        }
        jobs.push(result);
    }
    let held = jobs
        .iter()
        .filter(|j| {
            matches!(j, AssembleResult::Assembled(s)
                if matches!(s.outcome, crate::reports::AssembleOutcome::HeldBy | crate::reports::AssembleOutcome::LeaseLost))
        })
        .count();
    if out.json {
        println!(
            "{}",
            tilegate_core::redact::redact(&out.json_of(&AssembleBatch { jobs, failed }))
        );
    } else if jobs.is_empty() {
        println!("no job is waiting to be assembled");
    }
    Ok(if failed > 0 {
        Exit::Failed.into()
    } else if held > 0 {
        Exit::Held.into()
    } else {
        ExitCode::SUCCESS
    })
}

/// On a terminal, say that `job`'s scene is being assembled (a long step that prints nothing
/// else: tens of seconds for a large scene): a spinner with the job, its size and how to stop
/// it, until the returned bar is cleared. Nothing on a pipe or with `--json` (the outcome's
/// own line and document follow at once there).
fn assembling(out: &Out, job: &tilegate_core::table::JobRecord) -> indicatif::ProgressBar {
    use std::io::IsTerminal as _;
    if out.json || !std::io::stderr().is_terminal() {
        return indicatif::ProgressBar::hidden();
    }
    let bar = crate::output::spinner();
    bar.set_message(format!(
        "assembling job {} ({} windows, {}×{}): the scene, its overviews, the upload; Ctrl-C \
         stops and releases its claim",
        job.job_id,
        job.grid.len(),
        job.scene.width,
        job.scene.height
    ));
    bar.enable_steady_tick(Duration::from_millis(100));
    bar
}

/// How an assembly that ran ends the process: published (by this process or before it) is
/// done; a claim another assembler holds, or took over, is not done here — said on stderr
/// with its reason, and a status of its own, so that a script does not take it for a scene.
fn exit_of(outcome: &tilegate_assembler::AssembleOutcome) -> ExitCode {
    use tilegate_assembler::AssembleOutcome as A;
    let (reason, why) = match outcome {
        A::Written | A::AlreadyDone | A::AlreadyPresent => return ExitCode::SUCCESS,
        A::HeldBy { owner, expires_at } => (
            Reason::ClaimHeld,
            format!(
                "another assembler ({owner}) holds the scene's claim until {}: nothing uploaded \
                 here; it publishes the scene (`tilegate status` shows it), or run `assemble` \
                 again once its lease lapses",
                tilegate_core::time::rfc3339(*expires_at)
            ),
        ),
        A::LeaseLost => (
            Reason::LeaseLost,
            "this assembler's claim lapsed and another took it over: the upload was aborted; \
             the new holder publishes the scene"
                .to_owned(),
        ),
    };
    eprintln!("tilegate: not done[{reason}]: {why}");
    Exit::Held.into()
}

/// Assemble one job with its requests metered to it and its counts recorded on its counters
/// (as `assemble` and `assemble --all` both do).
async fn assemble_job(
    b: &Backends,
    job: &tilegate_core::JobId,
    opts: &tilegate_assembler::AssembleOptions,
) -> (
    Result<tilegate_assembler::AssembleReport, tilegate_assembler::AssembleError>,
    Counters,
) {
    tilegate_retry::meter::set_job(job);
    let counters = Counters::new();
    let assembled = tilegate_assembler::assemble(b, job, opts, &counters).await;
    tilegate_pipeline::run::record_job_counts(b, job, &counters).await;
    (assembled, counters)
}

/// How many open jobs `assemble --all` looks through.
const ALL_JOBS: usize = 100_000;

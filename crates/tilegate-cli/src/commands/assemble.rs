//! `assemble`, `repair` and `cleanup-uploads`: the commands that write or withdraw outputs
//! after the windows are done.

use super::find_job;
use crate::args::{AssembleArgs, AssembleFlags, CleanupArgs, RepairArgs};
use crate::errors::refused;
use crate::output::{self, Out};
use anyhow::Context;
use serde_json::json;
use std::process::ExitCode;
use std::time::{Duration, Instant};
use tilegate_core::Backends;
use tilegate_core::Exit;
use tilegate_core::Reason;
use tilegate_core::metrics::{self as m, Counters};

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
                Reason::BadOption,
                format!("unknown resampling `{other}`: expected average or nearest"),
            ));
        }
    };
    o.pause_renewals_after_parts = f.test_pause_renewals_after_parts;
    o.part_delay = Duration::from_millis(f.test_part_delay_ms);
    Ok(o)
}

pub(super) fn assemble_doc(
    r: &tilegate_assembler::AssembleReport,
    counters: &Counters,
) -> serde_json::Value {
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

pub(super) async fn assemble_cmd(
    out: &Out,
    b: &Backends,
    a: AssembleArgs,
) -> anyhow::Result<ExitCode> {
    if a.all {
        return assemble_all(out, b, &a.flags).await;
    }
    let job = find_job(b, a.job.as_deref()).await?;
    let started = Instant::now();
    let (assembled, counters) = assemble_job(b, &job.job_id, &assemble_options(&a.flags)?).await;
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
            let message = format!(
                "{}; `tilegate work --until-empty` finishes the windows, `tilegate status` names \
                 the missing ones and their dead letters",
                tilegate_core::redact::redact(&e.to_string())
            );
            let doc = json!({
                "job_id": job.job_id,
                "outcome": "incomplete",
                "manifest_rows": have,
                "windows": want,
                "missing": missing.iter().map(|w| w.to_string()).collect::<Vec<_>>(),
                "error": {"reason": e.reason_code(), "message": message},
            });
            if out.json {
                out.emit(&doc, String::new);
            }
            eprintln!("tilegate: error[{}]: {message}", e.reason_code());
            Ok(Exit::ManifestShort.into())
        }
        Err(e) => Err(anyhow::Error::new(e)),
    }
}

pub(super) async fn repair_cmd(out: &Out, b: &Backends, a: RepairArgs) -> anyhow::Result<ExitCode> {
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

pub(super) async fn cleanup_uploads(
    out: &Out,
    b: &Backends,
    a: CleanupArgs,
) -> anyhow::Result<ExitCode> {
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

/// `assemble --all`: every job whose windows are all recorded and whose scene is not yet
/// published, one after another (as `plan --from` planned them). A job with windows still to
/// do is listed, not assembled; a job that fails to assemble is reported and the rest go on.
async fn assemble_all(out: &Out, b: &Backends, flags: &AssembleFlags) -> anyhow::Result<ExitCode> {
    let opts = assemble_options(flags)?;
    let mut docs = Vec::new();
    let mut failed = 0usize;
    for job in b.jobs.list_jobs(ALL_JOBS).await? {
        let job = job.row;
        if job.scene_output.is_some() {
            continue;
        }
        let recorded = b.manifest.count_entries(&job.job_id).await?;
        let doc = if recorded < job.grid.len() {
            json!({"job_id": job.job_id, "outcome": "incomplete",
                "manifest_rows": recorded, "windows": job.grid.len()})
        } else {
            let (assembled, counters) = assemble_job(b, &job.job_id, &opts).await;
            match assembled {
                Ok(r) => assemble_doc(&r, &counters),
                Err(e) => {
                    failed += 1;
                    let e = anyhow::Error::new(e);
                    json!({"job_id": job.job_id, "outcome": "failed",
                        "error": crate::errors::error_doc(&e)})
                }
            }
        };
        if !out.json {
            println!("{}", tilegate_core::redact::redact(&all_line(&doc)));
        }
        docs.push(doc);
    }
    if out.json {
        out.emit(&json!({"jobs": docs, "failed": failed}), String::new);
    } else if docs.is_empty() {
        println!("no job is waiting to be assembled");
    }
    Ok(if failed == 0 {
        ExitCode::SUCCESS
    } else {
        Exit::Failed.into()
    })
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

/// How many jobs `assemble --all` looks through.
const ALL_JOBS: usize = 100_000;

/// One line of `assemble --all`.
fn all_line(doc: &serde_json::Value) -> String {
    let job = doc["job_id"].as_str().unwrap_or_default();
    match doc["outcome"].as_str().unwrap_or_default() {
        "incomplete" => format!(
            "job {job}: not assembled, {} of {} windows recorded",
            doc["manifest_rows"], doc["windows"]
        ),
        "failed" => format!(
            "job {job}: error[{}] {}",
            doc["error"]["reason"].as_str().unwrap_or_default(),
            doc["error"]["message"].as_str().unwrap_or_default()
        ),
        _ => format!("job {job}: {}", output::assemble_text(doc)),
    }
}

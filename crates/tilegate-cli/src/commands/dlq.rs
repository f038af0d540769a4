//! `dlq list`, `dlq redrive` and `dlq purge`: dead letters read, sent back to the work queue
//! (each of their jobs in a new generation), or deleted for good.

use super::find_job;
use crate::args::DlqCommand;
use crate::ctx::Ctx;
use crate::output::Out;
use crate::reports;
use std::collections::BTreeSet;
use std::process::ExitCode;
use tilegate_core::message::WindowMessage;
use tilegate_core::queue::DeadLetter;
use tilegate_core::{Backends, JobId};
use tilegate_report::status::dead_letter_job;

/// How many dead letters `dlq --job` reads to find a job's.
const DLQ_SCAN: usize = 100_000;

/// The dead letters whose body names `job`.
async fn job_dead_letters(b: &Backends, job: &JobId) -> anyhow::Result<Vec<DeadLetter>> {
    let mut dead = b.queue.list_dead_letters(DLQ_SCAN).await?;
    dead.retain(|d| dead_letter_job(&d.body).as_ref() == Some(job));
    Ok(dead)
}

impl DlqCommand {
    pub async fn exec(self, cx: &Ctx) -> anyhow::Result<ExitCode> {
        let b = match self {
            DlqCommand::List { .. } => cx.open_read_only().await?,
            _ => cx.open().await?,
        };
        dlq(&cx.out, &b, self).await
    }
}

async fn dlq(out: &Out, b: &Backends, c: DlqCommand) -> anyhow::Result<ExitCode> {
    match c {
        DlqCommand::List { limit, job } => {
            let job = match job {
                Some(j) => Some(find_job(b, Some(&j)).await?.job_id),
                None => None,
            };
            let dead = match &job {
                Some(job) => job_dead_letters(b, job).await?,
                None => b.queue.list_dead_letters(limit).await?,
            };
            let rows: Vec<_> = dead
                .iter()
                .take(limit)
                .map(|d| reports::DeadLetterRow {
                    message_id: d.message_id.clone(),
                    reason: d.reason.clone(),
                    receive_count: d.receive_count,
                    dead_at_ms: d.dead_at,
                    job_id: dead_letter_job(&d.body),
                    window: WindowMessage::decode(&d.body)
                        .ok()
                        .map(|p| p.window.to_string()),
                    body_bytes: d.body.len(),
                })
                .collect();
            out.emit(&reports::DlqList {
                count: rows.len(),
                dead_letters: rows,
            });
        }
        DlqCommand::Redrive { ids, job } => redrive_cmd(out, b, ids, job).await?,
        DlqCommand::Purge { ids, job } => {
            let ids = match job {
                Some(j) => {
                    let job = find_job(b, Some(&j)).await?.job_id;
                    job_dead_letters(b, &job)
                        .await?
                        .into_iter()
                        .map(|d| d.message_id)
                        .collect()
                }
                None => ids,
            };
            let purged = if ids.is_empty() {
                0
            } else {
                b.queue.purge_dead_letters(&ids).await?
            };
            out.emit(&reports::DlqPurge { purged });
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// `dlq redrive [--id ID]… [--job JOB]`: [`redrive`], then say what moved.
async fn redrive_cmd(
    out: &Out,
    b: &Backends,
    ids: Vec<String>,
    job: Option<String>,
) -> anyhow::Result<()> {
    let job = match job {
        Some(j) => Some(find_job(b, Some(&j)).await?.job_id),
        None => None,
    };
    let which = match (&job, ids.as_slice()) {
        (Some(job), _) => Letters::Job(job),
        (None, []) => Letters::All,
        (None, ids) => Letters::Ids(ids),
    };
    let done = redrive(b, which).await?;
    if done.more {
        eprintln!(
            "tilegate: the dead-letter queue holds more than {REDRIVE_SCAN} letters; {} went back (their \
             jobs in a new generation), the rest wait: run `tilegate dlq redrive` again",
            done.moved
        );
    }
    out.emit(&reports::DlqRedrive {
        redriven: done.moved,
    });
    Ok(())
}

/// Dead letters one `dlq redrive` reads, and so redrives, at most; a dead-letter queue that
/// holds more is said, and the next `dlq redrive` takes the rest.
const REDRIVE_SCAN: usize = 100_000;

/// Which dead letters go back.
#[derive(Debug)]
enum Letters<'a> {
    /// Every one (up to [`REDRIVE_SCAN`]).
    All,
    /// Those with these message IDs.
    Ids(&'a [String]),
    /// Those whose body names this job.
    Job(&'a JobId),
}

/// What one redrive did.
#[derive(Debug, PartialEq, Eq)]
struct Redriven {
    /// Letters the queue moved back.
    pub moved: u64,
    /// Jobs that started a new generation.
    pub jobs: usize,
    /// The scan stopped at [`REDRIVE_SCAN`]: letters beyond it stay for the next redrive.
    pub more: bool,
}

/// Redrive with one scan of the dead-letter queue: the letters it read (those `which` names)
/// are exactly what goes back, and each of their jobs starts a new generation first, so that a
/// window dead-lettered again announces its job incomplete again. A letter that reaches the
/// queue after the scan, or lies beyond [`REDRIVE_SCAN`], stays where it is for the next
/// redrive; none goes back without its generation.
async fn redrive(b: &Backends, which: Letters<'_>) -> anyhow::Result<Redriven> {
    let scanned = b.queue.list_dead_letters(REDRIVE_SCAN).await?;
    let more = scanned.len() >= REDRIVE_SCAN;
    let chosen: Vec<&DeadLetter> = scanned
        .iter()
        .filter(|d| match which {
            Letters::All => true,
            Letters::Ids(ids) => ids.contains(&d.message_id),
            Letters::Job(job) => dead_letter_job(&d.body).as_ref() == Some(job),
        })
        .collect();
    let jobs: BTreeSet<JobId> = chosen
        .iter()
        .filter_map(|d| dead_letter_job(&d.body))
        .collect();
    for job in &jobs {
        tilegate_pipeline::announce::new_generation(b, job).await?;
    }
    let ids: Vec<String> = chosen.iter().map(|d| d.message_id.clone()).collect();
    let moved = if ids.is_empty() {
        0
    } else {
        b.queue.redrive(Some(&ids)).await?
    };
    if more {
        tracing::warn!(
            scanned = scanned.len(),
            moved,
            "the dead-letter queue holds more letters than one redrive reads; run `tilegate dlq redrive` again for the rest"
        );
    }
    Ok(Redriven {
        moved,
        jobs: jobs.len(),
        more,
    })
}

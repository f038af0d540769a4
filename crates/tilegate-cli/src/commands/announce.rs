//! `announce`, and the announcer that `work`, `run` and `assemble` use with `--announce`.

use super::find_job;
use crate::args::AnnounceArgs;
use crate::ctx::Ctx;
use crate::output::Out;
use crate::reports::AnnounceReport;
use std::process::ExitCode;
use tilegate_core::announce::SinkSpec;
use tilegate_core::{Backends, Exit, JobId};
use tilegate_pipeline::announce::{Announcer, Delivery};

/// The announcer for `specs` (none without sinks).
pub(super) async fn announcer(
    b: &Backends,
    specs: &[SinkSpec],
) -> anyhow::Result<Option<Announcer>> {
    if specs.is_empty() {
        return Ok(None);
    }
    let sinks = tilegate_backends::open_sinks(specs).await?;
    Ok(Some(Announcer::new(b.clone(), sinks)))
}

/// Deliver `job`'s announcements after a command published it; a failure is logged and left
/// pending (the command's own outcome stands).
pub(super) async fn deliver_after(announcer: Option<&Announcer>, job: &JobId) {
    let Some(a) = announcer else { return };
    match a.deliver(job).await {
        Ok(d) if d.pending > 0 => {
            tracing::warn!(job_id = %job, pending = d.pending, "some announcements were not delivered: `tilegate announce` delivers them later");
        }
        Ok(_) => {}
        Err(e) => {
            tracing::warn!(job_id = %job, error = %tilegate_core::error::chain(&e), "announcing failed: left pending");
        }
    }
}

impl AnnounceArgs {
    pub async fn exec(self, cx: &Ctx) -> anyhow::Result<ExitCode> {
        announce_cmd(&cx.out, &cx.open().await?, self).await
    }
}

async fn announce_cmd(out: &Out, b: &Backends, a: AnnounceArgs) -> anyhow::Result<ExitCode> {
    let announcer = announcer(b, &a.announce)
        .await?
        .expect("clap requires --announce");
    let (job, d): (Option<JobId>, Delivery) = match &a.job {
        Some(j) => {
            let job = find_job(b, Some(j)).await?.job_id;
            let d = announcer.deliver(&job).await?;
            (Some(job), d)
        }
        None => (None, announcer.sweep(a.limit).await?),
    };
    let report = AnnounceReport {
        job_id: job,
        sinks: announcer.sinks(),
        delivered: d.delivered,
        pending: d.pending,
        failures: d
            .failures
            .iter()
            .map(|f| tilegate_core::redact::redact(&f.to_string()).into_owned())
            .collect(),
    };
    out.emit(&report);
    Ok(if report.pending > 0 {
        Exit::Incomplete.into()
    } else {
        ExitCode::SUCCESS
    })
}

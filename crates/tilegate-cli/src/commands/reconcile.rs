//! `reconcile-jobs`: the reconciler ([`tilegate_pipeline::reconcile`]) once or on a period.

use super::assemble::assemble_options;
use super::stop_on_signals;
use crate::args::ReconcileJobsArgs;
use crate::ctx::Ctx;
use crate::output::Out;
use std::process::ExitCode;
use std::time::Duration;
use tilegate_core::{Backends, Exit};
use tilegate_pipeline::announce::Announcer;
use tilegate_pipeline::reconcile::{PassReport, ReconcileOptions, Reconciler};

/// The reconciler a command line (or the Lambda function's environment) describes.
async fn reconciler(b: &Backends, a: &ReconcileJobsArgs) -> anyhow::Result<Reconciler> {
    let mut opts = ReconcileOptions::new(assemble_options(&a.flags)?);
    opts.grace = Duration::from_secs_f64(a.grace.max(0.0));
    opts.limit = a.limit.max(1);
    opts.deliveries = a.deliveries;
    opts.max_assemble_bytes = a.max_assemble_bytes;
    let sinks = if a.flags.announce.is_empty() {
        Vec::new()
    } else {
        tilegate_backends::open_sinks(&a.flags.announce).await?
    };
    Ok(Reconciler::new(
        b.clone(),
        opts,
        Announcer::new(b.clone(), sinks),
    ))
}

impl ReconcileJobsArgs {
    pub async fn exec(self, cx: &Ctx) -> anyhow::Result<ExitCode> {
        reconcile_jobs(&cx.out, &cx.open().await?, self).await
    }
}

async fn reconcile_jobs(out: &Out, b: &Backends, a: ReconcileJobsArgs) -> anyhow::Result<ExitCode> {
    let r = reconciler(b, &a).await?;
    let Some(every) = a.every.filter(|_| !a.once) else {
        let report = r.pass().await?;
        out.emit(&report);
        return Ok(exit_of(&report));
    };
    let every = Duration::from_secs_f64(every.max(0.1));
    let mut stop = stop_on_signals();
    loop {
        match r.pass().await {
            Ok(report) => out.emit(&report),
            // A store that is down now may be up next pass: said, and tried again.
            Err(e) => eprintln!(
                "tilegate: error[{}]: reconcile pass: {}",
                tilegate_core::Reason::storage(e.is_retryable()),
                tilegate_core::redact::redact(&tilegate_core::error::chain(&e))
            ),
        }
        tokio::select! {
            () = tokio::time::sleep(every) => {}
            _ = stop.changed() => return Ok(ExitCode::SUCCESS),
        }
        if *stop.borrow() {
            return Ok(ExitCode::SUCCESS);
        }
    }
}

/// A pass that a store's failure stopped for some job exits `failed`; stalled jobs are said,
/// not failures (the next pass acts on them).
fn exit_of(report: &PassReport) -> ExitCode {
    if report.failures.is_empty() {
        ExitCode::SUCCESS
    } else {
        Exit::Failed.into()
    }
}

//! How the command line names a failure: beside the one-line message, a stable kebab-case
//! reason code — the same names the worker gives dead letters — so that scripts can branch on
//! it (`tilegate: error[corrupt-raster]: …`, or `{"error": {"reason": …}}` with `--json`).

use tilegate_cog::CogError;
use tilegate_core::StoreError;
use tilegate_core::keys::KeyError;
use tilegate_core::message::MessageError;
use tilegate_core::reason::{Reason, Refusal};
use tilegate_core::recipe::RecipeError;
use tilegate_planner::{PlanError, SourceError};

/// An [`anyhow::Error`] carrying `reason`: a refusal by the command line itself (a flag value
/// clap cannot check).
pub fn refused(reason: Reason, message: impl Into<String>) -> anyhow::Error {
    Refusal::new(reason, message).into()
}

/// A failure as one line a person or a log reads: the whole chain, secrets redacted.
pub fn one_line(err: &anyhow::Error) -> String {
    let message = format!("{err:#}").replace(['\n', '\r'], " ");
    tilegate_core::redact::redact(&message).into_owned()
}

/// The reason of the outermost error in the chain that names one; [`Reason::Unexpected`] for
/// an error nothing names yet (its message still says what happened).
pub fn reason_of(err: &anyhow::Error) -> Reason {
    for e in err.chain() {
        if let Some(r) = e.downcast_ref::<Refusal>() {
            return r.reason;
        }
        if let Some(e) = e.downcast_ref::<PlanError>() {
            return e.reason_code();
        }
        if let Some(e) = e.downcast_ref::<CogError>() {
            return e.reason_code();
        }
        if let Some(e) = e.downcast_ref::<SourceError>() {
            return e.reason_code();
        }
        if let Some(e) = e.downcast_ref::<tilegate_assembler::AssembleError>() {
            return e.reason_code();
        }
        if let Some(e) = e.downcast_ref::<tilegate_cogwrite::AssembleError>() {
            return e.reason_code();
        }
        if let Some(e) = e.downcast_ref::<tilegate_ledger::LedgerError>() {
            return e.reason_code();
        }
        if let Some(e) = e.downcast_ref::<tilegate_worker::regenerate::RegenerateError>() {
            return e.reason_code();
        }
        if let Some(e) = e.downcast_ref::<tilegate_worker::repair::RepairError>() {
            return e.reason_code();
        }
        if let Some(e) = e.downcast_ref::<tilegate_pipeline::regenerate::SceneError>() {
            return e.reason_code();
        }
        if let Some(e) = e.downcast_ref::<MessageError>() {
            return e.reason_code();
        }
        if let Some(e) = e.downcast_ref::<tilegate_backends::UnknownUrl>() {
            return e.reason_code();
        }
        if let Some(e) = e.downcast_ref::<tilegate_pipeline::batch::BatchError>() {
            return e.reason_code();
        }
        if e.is::<KeyError>() {
            return Reason::UnsafeKeySegment;
        }
        if e.is::<RecipeError>() {
            return Reason::BadRecipe;
        }
        if let Some(e) = e.downcast_ref::<StoreError>() {
            return Reason::storage(e.is_retryable());
        }
    }
    Reason::Unexpected
}

#[cfg(test)]
mod tests {
    use super::*;
    use anyhow::Context as _;

    #[test]
    fn the_outermost_named_error_wins_through_context() {
        let e = Err::<(), _>(PlanError::Recipe(RecipeError::NoBands))
            .context("plan scene.tif")
            .unwrap_err();
        assert_eq!(reason_of(&e), Reason::BadRecipe);
        let e = Err::<(), _>(refused(Reason::BadWindow, "window size 100"))
            .context("run")
            .unwrap_err();
        assert_eq!(reason_of(&e), Reason::BadWindow);
        assert_eq!(reason_of(&anyhow::anyhow!("plain")), Reason::Unexpected);
    }

    /// The README's table of reasons and exit statuses is the vocabulary itself, row for row.
    #[test]
    fn the_readme_lists_every_reason_and_exit_status() {
        let readme = include_str!("../../../README.md");
        let cells = |l: &str| -> Option<(String, String)> {
            let l = l.strip_prefix("| ")?.strip_suffix(" |")?;
            let (a, b) = l.split_once(" | ")?;
            Some((a.trim_matches('`').to_owned(), b.to_owned()))
        };
        let table = |head: &str| -> Vec<(String, String)> {
            readme
                .lines()
                .skip_while(|l| !l.starts_with(head))
                .skip(2)
                .map_while(cells)
                .collect()
        };
        let reasons: Vec<(String, String)> = Reason::ALL
            .iter()
            .map(|r| (r.as_str().to_owned(), r.meaning().to_owned()))
            .collect();
        assert_eq!(table("| reason | meaning |"), reasons);
        let exits: Vec<(String, String)> = tilegate_core::Exit::ALL
            .iter()
            .map(|e| (e.code().to_string(), e.meaning().to_owned()))
            .collect();
        assert_eq!(table("| exit status | meaning |"), exits);
    }
}

//! How the command line names a failure: beside the one-line message, a stable kebab-case
//! reason code — the same names the worker gives dead letters — so that scripts can branch on
//! it (`tilegate: error[corrupt-raster]: …`, or `{"error": {"reason": …}}` with `--json`).

use tilegate_cog::CogError;
use tilegate_core::StoreError;
use tilegate_core::keys::KeyError;
use tilegate_core::message::MessageError;
use tilegate_core::recipe::RecipeError;
use tilegate_planner::{PlanError, SourceError};

/// A refusal by the command line itself: a flag value clap cannot check.
#[derive(Debug)]
pub struct Refused {
    pub code: &'static str,
    pub message: String,
}

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Refused {}

/// An [`anyhow::Error`] carrying `code`.
pub fn refused(code: &'static str, message: impl Into<String>) -> anyhow::Error {
    Refused {
        code,
        message: message.into(),
    }
    .into()
}

/// The reason code of the outermost error in the chain that has one, else `error`.
pub fn reason_of(err: &anyhow::Error) -> &'static str {
    for e in err.chain() {
        if let Some(r) = e.downcast_ref::<Refused>() {
            return r.code;
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
        if e.is::<KeyError>() {
            return "unsafe-key-segment";
        }
        if e.is::<RecipeError>() {
            return "bad-recipe";
        }
        if e.is::<StoreError>() {
            return "storage";
        }
    }
    "error"
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
        assert_eq!(reason_of(&e), "bad-recipe");
        let e = Err::<(), _>(refused("bad-window", "window size 100"))
            .context("run")
            .unwrap_err();
        assert_eq!(reason_of(&e), "bad-window");
        assert_eq!(reason_of(&anyhow::anyhow!("plain")), "error");
    }
}

//! How the command line names a failure: beside the one-line message, a stable kebab-case
//! reason code — the same names the worker gives dead letters — so that scripts can branch on
//! it (`tilegate: error[corrupt-raster]: …`, or `{"error": {"reason": …}}` with `--json`).

use tilegate_core::StoreError;
use tilegate_core::keys::KeyError;
use tilegate_core::reason::{Reason, Refusal};
use tilegate_core::recipe::RecipeError;

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
    err.chain()
        .find_map(reason_named_by)
        .unwrap_or(Reason::Unexpected)
}

/// Declares [`reason_named_by`] over every error type with a `reason_code()`, and [`NAMED`]:
/// the same types by name, which a test compares with the workspace's.
macro_rules! reasons {
    ($($(#[$cfg:meta])* $ty:path),* $(,)?) => {
        /// Every error type whose `reason_code()` names its reason, as written below.
        #[cfg(test)]
        const NAMED: &[&str] = &[$(stringify!($ty)),*];

        /// The reason `e` itself names, if it is one of the types that name one.
        fn reason_named_by(e: &(dyn std::error::Error + 'static)) -> Option<Reason> {
            if let Some(r) = e.downcast_ref::<Refusal>() {
                return Some(r.reason);
            }
            $(
                $(#[$cfg])*
                {
                    if let Some(e) = e.downcast_ref::<$ty>() {
                        return Some(e.reason_code());
                    }
                }
            )*
            if e.is::<KeyError>() {
                return Some(Reason::UnsafeKeySegment);
            }
            if e.is::<RecipeError>() {
                return Some(Reason::BadRecipe);
            }
            e.downcast_ref::<StoreError>()
                .map(|e| Reason::storage(e.is_retryable()))
        }
    };
}

// The one mapping from an error to its reason: every type in the workspace with a
// `reason_code()` (a test greps for them), each of which knows its own.
reasons![
    tilegate_assembler::AssembleError,
    #[cfg(feature = "azure")]
    tilegate_azure::AzureError,
    tilegate_backends::UnknownUrl,
    tilegate_cog::CogError,
    tilegate_cogwrite::AssembleError,
    tilegate_core::message::MessageError,
    tilegate_ledger::LedgerError,
    tilegate_pipeline::batch::BatchError,
    tilegate_pipeline::estimate::EstimateError,
    tilegate_pipeline::ingest::IngestError,
    tilegate_pipeline::product_index::IndexError,
    tilegate_pipeline::regenerate::SceneError,
    tilegate_planner::PlanError,
    tilegate_source::SourceError,
    tilegate_worker::regenerate::RegenerateError,
    tilegate_worker::repair::RepairError,
];

#[cfg(test)]
mod tests {
    use super::*;
    use anyhow::Context as _;
    use tilegate_planner::PlanError;

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

    /// An estimate the planner refuses keeps the planner's reason (`plan --estimate`): the
    /// estimate's error is transparent over the planner's, so the planner's own error is not
    /// in the chain, only what lies under it (here a recipe error, which alone says
    /// `bad-recipe`).
    #[test]
    fn a_refused_estimate_keeps_the_planners_reason() {
        let e = tilegate_pipeline::estimate::EstimateError::from(PlanError::Recipe(
            RecipeError::BadExpression("b1 +".into()),
        ));
        let e = Err::<(), _>(e).context("estimate scene.tif").unwrap_err();
        assert_eq!(reason_of(&e), Reason::BadExpression);
    }

    /// Every type in the workspace with a `reason_code()` is in the one mapping (so a new one
    /// cannot be forgotten), and every type in the mapping is one of them.
    #[test]
    fn every_type_with_a_reason_code_is_mapped() {
        let crates = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let mut found = std::collections::BTreeSet::new();
        for krate in std::fs::read_dir(&crates).unwrap() {
            let krate = krate.unwrap().path();
            let name = krate
                .file_name()
                .unwrap()
                .to_string_lossy()
                .replace('-', "_");
            let mut files = vec![krate.join("src")];
            while let Some(path) = files.pop() {
                if path.is_dir() {
                    files.extend(std::fs::read_dir(&path).unwrap().map(|e| e.unwrap().path()));
                    continue;
                }
                if path.extension().is_none_or(|x| x != "rs") {
                    continue;
                }
                let text = std::fs::read_to_string(&path).unwrap();
                let mut owner = None;
                for line in text.lines() {
                    if let Some(rest) = line.strip_prefix("impl ") {
                        owner = rest.split([' ', '<', '{']).next().map(str::to_owned);
                    }
                    if line.trim_start().starts_with("pub fn reason_code(") {
                        let ty = owner.clone().expect("reason_code inside an impl");
                        found.insert(format!("{name}::{ty}"));
                    }
                }
            }
        }
        assert!(found.len() >= 14, "the scan found too few: {found:?}");
        // A mapped path names its crate first and its type last.
        let mapped: std::collections::BTreeSet<String> = NAMED
            .iter()
            .map(|p| {
                let segs: Vec<&str> = p.split("::").map(str::trim).collect();
                format!("{}::{}", segs[0], segs[segs.len() - 1])
            })
            .collect();
        let unmapped: Vec<_> = found.difference(&mapped).collect();
        assert!(
            unmapped.is_empty(),
            "types with a reason_code() missing from `reasons!` in errors.rs: {unmapped:?}"
        );
        let stale: Vec<_> = mapped.difference(&found).collect();
        assert!(
            stale.is_empty(),
            "mapped types with no reason_code(): {stale:?}"
        );
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

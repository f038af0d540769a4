//! What each command prints: one `Serialize` type per command, from which both its `--json`
//! document and its text come, so that the two cannot disagree and the compiler checks every
//! field. The JSON Schema of each document is generated from the same types ([`schemas`];
//! `tilegate schema COMMAND` prints one, `docs/json/` holds them all).
//!
//! Every time in a document is an integer of milliseconds since the epoch; `--json` prints a
//! readable copy beside it ([`tilegate_core::time::with_utc`]): `created_at` and
//! `created_at_utc`.

use crate::output::Out;
use schemars::JsonSchema;
use serde::Serialize;
use serde_json::Value;
use tilegate_core::Reason;

/// A command's result: its JSON document is the type itself, its text is [`Report::text`].
pub trait Report: Serialize {
    /// What a person reads; `out` says where the object keys live.
    fn text(&self, out: &Out) -> String;
}

/// A failure, as `--json` prints it: `{"error": {"reason": …, "message": …}}`.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct ErrorDoc {
    /// The stable reason code (README, "Reasons and exit statuses").
    pub reason: Reason,
    /// One line: the whole chain of causes, secrets redacted.
    pub message: String,
}

/// The document of a command that failed.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct Failed {
    pub error: ErrorDoc,
}

/// One item of a list command (`plan --from`, `run --from`): done, or the source's failure.
#[derive(Debug, Clone, Serialize, JsonSchema)]
#[serde(untagged)]
pub enum Item<T> {
    Done(T),
    Failed {
        /// The source as given (secrets redacted).
        source: String,
        error: ErrorDoc,
    },
}

impl<T: Report> Item<T> {
    pub fn line(&self, out: &Out) -> String {
        match self {
            Self::Done(t) => t.text(out),
            Self::Failed { source, error } => {
                format!("error[{}] {source}: {}", error.reason, error.message)
            }
        }
    }
}

mod ledger;
mod look;
mod pipeline;

pub use ledger::*;
pub use look::*;
pub use pipeline::*;

/// Each command's `--json` document: the command (as typed) and the JSON Schema of what it
/// prints on success. A failure prints [`Failed`] (`error`).
pub fn schemas() -> Vec<(&'static str, Value)> {
    use schemars::schema_for;
    let all = vec![
        ("init", schema_for!(InitReport)),
        ("sample-scene", schema_for!(SampleReport)),
        ("recipes", schema_for!(RecipesReport)),
        ("plan", schema_for!(PlanReport)),
        ("plan-from", schema_for!(PlanBatch)),
        ("plan-estimate", schema_for!(PlanEstimate)),
        ("backfill", schema_for!(BackfillReport)),
        ("work", schema_for!(WorkSummary)),
        ("run", schema_for!(RunReport)),
        ("run-from", schema_for!(RunBatch)),
        ("demo", schema_for!(RunReport)),
        ("assemble", schema_for!(AssembleResult)),
        ("assemble-all", schema_for!(AssembleBatch)),
        ("repair", schema_for!(RepairReport)),
        ("cleanup-uploads", schema_for!(CleanupReport)),
        ("status", schema_for!(StatusReport)),
        ("status-watch", schema_for!(WatchFrame)),
        ("report", schema_for!(PageReport)),
        ("stac", schema_for!(StacReport)),
        ("dlq-list", schema_for!(DlqList)),
        ("dlq-redrive", schema_for!(DlqRedrive)),
        ("announce", schema_for!(AnnounceReport)),
        (
            "reconcile-jobs",
            schema_for!(tilegate_pipeline::reconcile::PassReport),
        ),
        ("ingest", schema_for!(IngestReport)),
        ("regenerate", schema_for!(RegenerateReport)),
        ("accept", schema_for!(AcceptReport)),
        ("attempts", schema_for!(AttemptsReport)),
        ("hold", schema_for!(HoldReport)),
        ("gc", schema_for!(GcCmdReport)),
        (
            "reconcile",
            schema_for!(tilegate_ledger::reconcile::ReconcileReport),
        ),
        ("url", schema_for!(tilegate_ledger::url::Grant)),
        ("serve", schema_for!(crate::serve::Listening)),
        ("keys-create", schema_for!(crate::serve::KeyMade)),
        ("keys-list", schema_for!(crate::serve::KeyList)),
        ("keys-revoke", schema_for!(crate::serve::KeyRevoked)),
        ("error", schema_for!(Failed)),
    ];
    all.into_iter()
        .map(|(name, s)| {
            let mut s = s.to_value();
            add_utc_properties(&mut s);
            (name, s)
        })
        .collect()
}

/// The schema's side of [`with_utc`]: beside every time property, its readable copy. And every
/// object with named properties has only those (`additionalProperties: false`), so that a
/// field the types do not declare fails validation.
fn add_utc_properties(v: &mut Value) {
    use tilegate_core::time::{is_time_field, utc_name};
    match v {
        Value::Object(map) => {
            for v in map.values_mut() {
                add_utc_properties(v);
            }
            if let Some(Value::Object(props)) = map.get_mut("properties") {
                let times: Vec<String> = props
                    .iter()
                    .filter(|(k, s)| is_time_field(k) && is_integer_schema(s))
                    .map(|(k, _)| utc_name(k))
                    .collect();
                for name in times {
                    props.entry(name).or_insert_with(|| {
                        serde_json::json!({
                            "description": "The time beside it, in RFC 3339 (UTC).",
                            "type": ["string", "null"],
                            "format": "date-time",
                        })
                    });
                }
                map.entry("additionalProperties")
                    .or_insert(Value::Bool(false));
            }
        }
        Value::Array(items) => items.iter_mut().for_each(add_utc_properties),
        _ => {}
    }
}

fn is_integer_schema(s: &Value) -> bool {
    match &s["type"] {
        Value::String(t) => t == "integer",
        Value::Array(ts) => ts.iter().any(|t| t == "integer"),
        _ => false,
    }
}

//! `recipes` and `schema`: what this binary offers, and the list of every command's `--json`
//! document with its JSON Schema ([`schemas`]).

use crate::ctx::Ctx;
use crate::errors::refused;
use crate::reports::*;
use serde_json::Value;
use std::process::ExitCode;
use tilegate_core::Reason;

/// `recipes`: the recipes `--recipe` accepts.
/// `recipes`: no arguments.
#[derive(Debug, clap::Args)]
pub struct RecipesArgs {}

impl RecipesArgs {
    pub async fn exec(self, cx: &Ctx) -> anyhow::Result<ExitCode> {
        recipes(cx)
    }
}

/// `schema [NAME]`.
#[derive(Debug, clap::Args)]
pub struct SchemaArgs {
    /// A command (`status`, `run`, `dlq-list`, …; `plan-from`, `run-from` and
    /// `assemble-all` for the list forms, `error` for a failure's document).
    pub name: Option<String>,
}

impl SchemaArgs {
    pub async fn exec(self, _cx: &Ctx) -> anyhow::Result<ExitCode> {
        schema(self.name.as_deref())
    }
}

pub fn recipes(cx: &Ctx) -> anyhow::Result<ExitCode> {
    cx.out.emit(&RecipesReport {
        recipes: crate::recipes::catalogue(),
    });
    Ok(ExitCode::SUCCESS)
}

/// `schema [NAME]`: one document's JSON Schema, or the names.
pub fn schema(name: Option<&str>) -> anyhow::Result<ExitCode> {
    let all = schemas();
    let Some(name) = name else {
        for (n, _) in &all {
            println!("{n}");
        }
        return Ok(ExitCode::SUCCESS);
    };
    let (_, s) = all.iter().find(|(n, _)| *n == name).ok_or_else(|| {
        refused(
            Reason::BadOption,
            format!("no document `{name}` (`tilegate schema` lists them)"),
        )
    })?;
    println!("{}", serde_json::to_string_pretty(s)?);
    Ok(ExitCode::SUCCESS)
}

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
        ("product-plan", schema_for!(ProductPlanReport)),
        (
            "product-index",
            schema_for!(tilegate_pipeline::product_index::ProductIndex),
        ),
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
        ("dlq-purge", schema_for!(DlqPurge)),
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
        ("serve", schema_for!(Listening)),
        ("keys-create", schema_for!(KeyMade)),
        ("keys-list", schema_for!(KeyList)),
        ("keys-revoke", schema_for!(KeyRevoked)),
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

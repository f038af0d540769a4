//! Reconciliation: list a job's directories and compare, key by key and byte for byte, with
//! what the tables say should be there. Reports; never deletes.
//!
//! - `{root}/attempts/{job}/` against the ledger rows of the job;
//! - `{root}/tiles/{job}/` against its manifest rows;
//! - `{root}/scenes/{job}.tif` against the scene recorded on the job row.
//!
//! An object with no row is an **orphan**; a row whose object should exist and does not is
//! **missing**; a row and an object that disagree on size or ETag are **mismatched**. Keys
//! are compared as the stores return them, unchanged: an orphan named with a space, a `%` or
//! a non-ASCII character is reported with exactly those bytes (tilegate never writes such a
//! key — tenants and prefixes are refused at the boundary — so any such object is foreign).

use crate::LedgerError;
use serde::Serialize;
use std::collections::BTreeMap;
use tilegate_core::ledger::AttemptState;
use tilegate_core::object::ObjectMeta;
use tilegate_core::table::JobRecord;
use tilegate_core::{Backends, ETag};

/// An object no row accounts for.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub struct Orphan {
    pub key: String,
    pub size: u64,
    pub e_tag: String,
}

/// A row whose object is not there.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub struct Missing {
    pub key: String,
    /// `ledger`, `manifest` or `job`.
    pub table: &'static str,
    /// The ledger row's state, for ledger rows.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub state: Option<&'static str>,
}

/// A row and its object disagree.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub struct Mismatch {
    pub key: String,
    pub table: &'static str,
    pub row_size: u64,
    pub object_size: u64,
    pub row_e_tag: String,
    pub object_e_tag: String,
}

/// What `reconcile` found for one job.
#[derive(Debug, Clone, Default, Serialize, schemars::JsonSchema)]
pub struct ReconcileReport {
    pub job_id: String,
    pub tenant: String,
    /// Objects listed under the job's directories.
    pub objects: u64,
    /// Rows compared (ledger, manifest and the scene).
    pub rows: u64,
    pub orphans: Vec<Orphan>,
    pub missing: Vec<Missing>,
    pub mismatched: Vec<Mismatch>,
}

impl ReconcileReport {
    pub fn is_clean(&self) -> bool {
        self.orphans.is_empty() && self.missing.is_empty() && self.mismatched.is_empty()
    }
}

/// What a row expects at its key.
struct Expected {
    table: &'static str,
    state: Option<&'static str>,
    /// `None`: the object may or may not be there (an upload in flight, a sweep under way).
    want: Option<Option<(u64, ETag)>>,
}

/// Compare a job's objects with its rows.
pub async fn reconcile(b: &Backends, job: &JobRecord) -> Result<ReconcileReport, LedgerError> {
    let id = &job.job_id;
    let mut expected: BTreeMap<String, Expected> = BTreeMap::new();
    for r in b.ledger.list_attempts(id).await? {
        let r = r.row;
        let want = match r.state {
            AttemptState::Uploaded | AttemptState::Accepted | AttemptState::Retired => {
                match (r.size, r.e_tag.clone()) {
                    (Some(s), Some(e)) => Some(Some((s, e))),
                    _ => None,
                }
            }
            AttemptState::Deleted => Some(None),
            AttemptState::Uploading | AttemptState::Deleting => None,
        };
        expected.insert(
            r.key.clone(),
            Expected {
                table: "ledger",
                state: Some(r.state.name()),
                want,
            },
        );
    }
    for e in b.manifest.list_entries(id).await? {
        expected.insert(
            e.row.key.clone(),
            Expected {
                table: "manifest",
                state: None,
                want: Some(Some((e.row.size, e.row.e_tag.clone()))),
            },
        );
    }
    if let Some(scene) = &job.scene_output {
        expected.insert(
            scene.key.clone(),
            Expected {
                table: "job",
                state: None,
                want: Some(Some((scene.size, scene.e_tag.clone()))),
            },
        );
    }
    let mut listed: BTreeMap<String, ObjectMeta> = BTreeMap::new();
    for dir in [
        job.prefix.attempts_dir(id),
        job.prefix.tiles_dir(id),
        String::from(job.prefix.scene_key(id)),
    ] {
        for m in b.objects.list(&dir).await? {
            listed.insert(m.key.clone(), m);
        }
    }
    let mut report = ReconcileReport {
        job_id: id.to_string(),
        tenant: job.tenant.to_string(),
        objects: listed.len() as u64,
        rows: expected.len() as u64,
        ..ReconcileReport::default()
    };
    for (key, m) in &listed {
        let Some(exp) = expected.get(key) else {
            report.orphans.push(Orphan {
                key: key.clone(),
                size: m.size,
                e_tag: m.e_tag.to_string(),
            });
            continue;
        };
        match &exp.want {
            // A deleted row whose object is back: nothing vouches for it.
            Some(None) => report.orphans.push(Orphan {
                key: key.clone(),
                size: m.size,
                e_tag: m.e_tag.to_string(),
            }),
            Some(Some((size, e_tag))) if *size != m.size || *e_tag != m.e_tag => {
                report.mismatched.push(Mismatch {
                    key: key.clone(),
                    table: exp.table,
                    row_size: *size,
                    object_size: m.size,
                    row_e_tag: e_tag.to_string(),
                    object_e_tag: m.e_tag.to_string(),
                });
            }
            _ => {}
        }
    }
    for (key, exp) in &expected {
        if matches!(exp.want, Some(Some(_))) && !listed.contains_key(key) {
            report.missing.push(Missing {
                key: key.clone(),
                table: exp.table,
                state: exp.state,
            });
        }
    }
    tracing::info!(
        job_id = %id,
        objects = report.objects,
        rows = report.rows,
        orphans = report.orphans.len(),
        missing = report.missing.len(),
        mismatched = report.mismatched.len(),
        "reconcile"
    );
    Ok(report)
}

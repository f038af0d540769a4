//! The set of storage a pipeline stage works against, as trait objects. Stages receive a
//! [`Backends`]; only the CLI (or a test) decides which implementations fill it.

use crate::ledger::LedgerTable;
use crate::object::ObjectStore;
use crate::queue::WorkQueue;
use crate::source::SourceObjects;
use crate::table::{ClaimTable, CounterTable, JobTable, ManifestTable};
use std::sync::Arc;

/// Objects, tables and queue for one deployment.
#[derive(Debug, Clone)]
pub struct Backends {
    pub objects: Arc<dyn ObjectStore>,
    pub jobs: Arc<dyn JobTable>,
    pub manifest: Arc<dyn ManifestTable>,
    pub claims: Arc<dyn ClaimTable>,
    pub counters: Arc<dyn CounterTable>,
    /// Regenerated outputs: attempts, pointers, retention.
    pub ledger: Arc<dyn LedgerTable>,
    pub queue: Arc<dyn WorkQueue>,
    /// Where remote sources (`s3://`) are pinned; `None` if only local files can be read.
    pub sources: Option<Arc<dyn SourceObjects>>,
}

/// What an `init` did: each resource as `kind name`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct InitReport {
    /// Created by this call.
    pub created: Vec<String>,
    /// Already there (success: init is idempotent).
    pub existing: Vec<String>,
}

impl InitReport {
    /// Record one resource.
    pub fn note(&mut self, created: bool, what: String) {
        if created {
            self.created.push(what);
        } else {
            self.existing.push(what);
        }
    }
}

//! What every command is given: where its backends live ([`Selection`]), where its results
//! go ([`Out`]) and the source policy of each tenant, resolved once by the dispatcher from
//! flags, environment and the `--config` file. Nothing here is process-wide: a command sees
//! only what its [`Ctx`] carries.

use crate::output::Out;
use std::path::PathBuf;
use std::sync::Arc;
use tilegate_core::{Backends, Tenant};
use tilegate_source::{Policies, SourcePolicy};

/// A command's context.
#[derive(Debug, Clone)]
pub struct Ctx {
    /// Where results go.
    pub out: Out,
    /// Where the backends live.
    pub sel: Selection,
    /// What jobs may read (`--source-policy`), every tenant's.
    pub policies: Arc<Policies>,
}

impl Ctx {
    /// Open every role of the selection (see `tilegate-backends` for the schemes).
    pub async fn open(&self) -> anyhow::Result<Backends> {
        tilegate_backends::open(&self.sel.urls()).await
    }

    /// Open the backends to look, not to write (`status`, `report`, `stac`, `attempts`, `dlq
    /// list`): see [`tilegate_backends::open_read_only`].
    pub async fn open_read_only(&self) -> anyhow::Result<Backends> {
        tilegate_backends::open_read_only(&self.sel.urls()).await
    }

    /// The arrivals queue `ingest` consumes (see [`tilegate_backends::open_arrivals`]).
    pub async fn open_arrivals(
        &self,
        url: Option<&str>,
    ) -> anyhow::Result<Arc<dyn tilegate_core::queue::WorkQueue>> {
        tilegate_backends::open_arrivals(&self.sel.urls(), url).await
    }

    /// Every tenant's source policy.
    pub fn policies(&self) -> Arc<Policies> {
        Arc::clone(&self.policies)
    }

    /// The source policy of `tenant`'s jobs.
    pub fn policy_of(&self, tenant: &Tenant) -> Arc<SourcePolicy> {
        self.policies.of(tenant.as_str())
    }
}

/// Where each role lives, after flags, environment and config file are merged.
#[derive(Debug, Clone)]
pub struct Selection {
    pub data: PathBuf,
    pub objects: Option<String>,
    pub tables: Option<String>,
    pub queue: Option<String>,
}

impl Selection {
    /// Where object keys live, as a person would look for them.
    pub fn objects_root(&self) -> String {
        match self.objects.as_deref() {
            None => format!("{}/", self.data.join("objects").display()),
            Some(u) => format!("{}/", u.trim_start_matches("file://").trim_end_matches('/')),
        }
    }

    /// Where GDAL reads an object of the output store: a local path, or `/vsis3/…`,
    /// `/vsigs/…`, `/vsiaz/…`.
    pub fn gdal_path_of_object(&self, key: &str) -> String {
        let full = format!("{}{key}", self.objects_root());
        tilegate_core::source::gdal_path_of(&full).unwrap_or(full)
    }

    /// The URLs `tilegate-backends` opens.
    pub fn urls(&self) -> tilegate_backends::Urls {
        tilegate_backends::Urls {
            data: self.data.clone(),
            objects: self.objects.clone(),
            tables: self.tables.clone(),
            queue: self.queue.clone(),
        }
    }

    /// The services a run on this selection sends billed requests to, as the stores name them.
    pub fn billed_services(&self, b: &Backends) -> tilegate_pipeline::estimate::Services {
        let scheme =
            |url: &Option<String>, s: &str| url.as_deref().is_some_and(|u| u.starts_with(s));
        tilegate_pipeline::estimate::Services {
            objects: b.objects.name(),
            dynamodb: scheme(&self.tables, "dynamodb://"),
            sqs: scheme(&self.queue, "sqs://"),
        }
    }
}

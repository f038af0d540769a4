//! Where a command's backends live: flags, environment and the `--config` file merged into
//! one selection, opened by `tilegate-backends` (the one place that picks implementations).

use crate::args::Global;
use anyhow::Context;
use serde::Deserialize;
use std::path::PathBuf;
use tilegate_core::Backends;

/// Default data directory of the embedded backend.
pub const DEFAULT_DATA: &str = "./tilegate-data";

/// The `--config` file.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct ConfigFile {
    data: Option<PathBuf>,
    objects: Option<String>,
    tables: Option<String>,
    queue: Option<String>,
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
    pub fn from_global(g: &Global) -> anyhow::Result<Self> {
        let file = match &g.config {
            Some(path) => {
                let text = std::fs::read_to_string(path)
                    .with_context(|| format!("read config file {}", path.display()))?;
                toml::from_str::<ConfigFile>(&text)
                    .with_context(|| format!("parse config file {}", path.display()))?
            }
            None => ConfigFile::default(),
        };
        Ok(Self {
            data: g
                .data
                .clone()
                .or(file.data)
                .unwrap_or_else(|| PathBuf::from(DEFAULT_DATA)),
            objects: g.objects.clone().or(file.objects),
            tables: g.tables.clone().or(file.tables),
            queue: g.queue.clone().or(file.queue),
        })
    }
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
}

impl Selection {
    fn urls(&self) -> tilegate_backends::Urls {
        tilegate_backends::Urls {
            data: self.data.clone(),
            objects: self.objects.clone(),
            tables: self.tables.clone(),
            queue: self.queue.clone(),
        }
    }
}

impl Selection {
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

/// Open every role of `sel` (see `tilegate-backends` for the schemes).
pub async fn open(sel: &Selection) -> anyhow::Result<Backends> {
    tilegate_backends::open(&sel.urls()).await
}

/// `tilegate init`: create the cloud resources of the selection, idempotently.
pub async fn init(
    sel: &Selection,
    create_bucket: bool,
    arrivals: Option<&str>,
) -> anyhow::Result<crate::reports::InitReport> {
    let mut report = tilegate_backends::init(&sel.urls(), create_bucket).await?;
    if let Some(url) = arrivals {
        tilegate_backends::init_arrivals(url, &mut report).await?;
    }
    Ok(crate::reports::InitReport {
        created: report.created,
        existing: report.existing,
    })
}

/// Open the backends to look, not to write (`status`, `report`, `stac`, `attempts`, `dlq
/// list`): see [`tilegate_backends::open_read_only`].
pub async fn open_read_only(sel: &Selection) -> anyhow::Result<Backends> {
    tilegate_backends::open_read_only(&sel.urls()).await
}

/// The arrivals queue `ingest` consumes (see [`tilegate_backends::open_arrivals`]).
pub async fn open_arrivals(
    sel: &Selection,
    url: Option<&str>,
) -> anyhow::Result<std::sync::Arc<dyn tilegate_core::queue::WorkQueue>> {
    tilegate_backends::open_arrivals(&sel.urls(), url).await
}

//! Opening the backends a command works against — the only place that picks implementations.
//! Each role (objects, tables, queue) is chosen by its URL's scheme; a role without a URL uses
//! the embedded backend in the data directory.

use crate::args::Global;
use anyhow::{Context, bail};
use serde::Deserialize;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use tilegate_core::Backends;
use tilegate_core::object::ObjectStore;
use tilegate_core::queue::{DEFAULT_MAX_RECEIVE_COUNT, WorkQueue};
use tilegate_core::table::{ClaimTable, CounterTable, JobTable, ManifestTable};
use tilegate_embedded::{LocalObjectStore, QUEUE_NAME, SqliteBackend};

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
}

fn sqlite_path(url: &str) -> &Path {
    Path::new(url.trim_start_matches("sqlite://"))
}

/// Open every role of `sel`.
pub async fn open(sel: &Selection) -> anyhow::Result<Backends> {
    let embedded_db = || -> anyhow::Result<SqliteBackend> {
        std::fs::create_dir_all(&sel.data)
            .with_context(|| format!("create data directory {}", sel.data.display()))?;
        SqliteBackend::open(sel.data.join("tilegate.db"))
            .with_context(|| format!("open tables in {}", sel.data.display()))
    };
    let objects: Arc<dyn ObjectStore> = match sel.objects.as_deref() {
        None => {
            std::fs::create_dir_all(&sel.data)
                .with_context(|| format!("create data directory {}", sel.data.display()))?;
            Arc::new(LocalObjectStore::open(sel.data.join("objects"))?)
        }
        Some(u) if u.starts_with("file://") => {
            Arc::new(LocalObjectStore::open(u.trim_start_matches("file://"))?)
        }
        Some(u) if u.starts_with("s3://") => Arc::new(
            tilegate_aws::S3Store::connect(u)
                .await
                .with_context(|| format!("open objects {u}"))?,
        ),
        Some(u) => bail!("--objects `{u}`: expected file://DIR or s3://bucket/prefix"),
    };
    let db = match sel.tables.as_deref() {
        None => Some(embedded_db()?),
        Some(u) if u.starts_with("sqlite://") => Some(SqliteBackend::open(sqlite_path(u))?),
        Some(u) if u.starts_with("dynamodb://") => None,
        Some(u) => bail!("--tables `{u}`: expected sqlite://FILE or dynamodb://table-prefix"),
    };
    let tables = match &db {
        Some(db) => Tables::of(Arc::new(db.clone())),
        None => {
            let u = sel.tables.as_deref().expect("dynamodb url");
            Tables::of(Arc::new(
                tilegate_aws::DynamoTables::connect(u)
                    .await
                    .with_context(|| format!("open tables {u}"))?,
            ))
        }
    };
    let queue: Arc<dyn WorkQueue> = match sel.queue.as_deref() {
        None => Arc::new(
            db.clone()
                .map_or_else(embedded_db, Ok)?
                .queue(QUEUE_NAME, DEFAULT_MAX_RECEIVE_COUNT),
        ),
        Some(u) if u.starts_with("sqlite://") => Arc::new(
            SqliteBackend::open(sqlite_path(u))?.queue(QUEUE_NAME, DEFAULT_MAX_RECEIVE_COUNT),
        ),
        Some(u) if u.starts_with("sqs://") => Arc::new(
            tilegate_aws::SqsQueue::connect(u, DEFAULT_MAX_RECEIVE_COUNT)
                .await
                .with_context(|| format!("open queue {u} (run `tilegate init` first?)"))?,
        ),
        Some(u) => bail!("--queue `{u}`: expected sqlite://FILE or sqs://queue-name"),
    };
    Ok(Backends {
        objects,
        jobs: tables.jobs,
        manifest: tables.manifest,
        claims: tables.claims,
        counters: tables.counters,
        queue,
        // s3:// sources; AWS configuration is read only when one is used.
        sources: Some(Arc::new(tilegate_aws::S3Sources::new())),
    })
}

/// The four table roles, served by one implementation.
struct Tables {
    jobs: Arc<dyn JobTable>,
    manifest: Arc<dyn ManifestTable>,
    claims: Arc<dyn ClaimTable>,
    counters: Arc<dyn CounterTable>,
}

impl Tables {
    fn of<T: JobTable + ManifestTable + ClaimTable + CounterTable + 'static>(t: Arc<T>) -> Self {
        Self {
            jobs: t.clone(),
            manifest: t.clone(),
            claims: t.clone(),
            counters: t,
        }
    }
}

/// `tilegate init`: create the AWS resources of the selection, idempotently.
pub async fn init(sel: &Selection, create_bucket: bool) -> anyhow::Result<serde_json::Value> {
    let (Some(tables), Some(queue)) = (sel.tables.as_deref(), sel.queue.as_deref()) else {
        // The embedded backend creates what it needs when opened.
        open(sel).await?;
        return Ok(
            serde_json::json!({"created": [], "existing": ["embedded backend in data directory"]}),
        );
    };
    if !tables.starts_with("dynamodb://") || !queue.starts_with("sqs://") {
        bail!("init creates AWS resources: give --tables dynamodb://… and --queue sqs://…");
    }
    let objects = sel.objects.as_deref().filter(|u| u.starts_with("s3://"));
    let report = tilegate_aws::AwsBackends::init(
        objects,
        tables,
        queue,
        create_bucket,
        DEFAULT_MAX_RECEIVE_COUNT,
    )
    .await
    .context("initialise AWS resources")?;
    Ok(serde_json::json!({"created": report.created, "existing": report.existing}))
}

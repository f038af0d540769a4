//! The one place that picks store implementations: each role (objects, tables, queue) is
//! chosen by its URL's scheme, and a role without a URL uses the embedded backend in the data
//! directory. The CLI and the tests open their stores here; the Lambda function, which only
//! ever runs on AWS, opens its stores through `tilegate-aws` directly.
//!
//! | role    | schemes                                                              |
//! |---------|----------------------------------------------------------------------|
//! | objects | `file://DIR`, `s3://bucket/prefix`, `gs://bucket/prefix`, `az://account/container/prefix` |
//! | tables  | `sqlite://FILE`, `dynamodb://table-prefix`                           |
//! | queue   | `sqlite://FILE`, `sqs://queue-name`                                  |
//!
//! Each cloud is a cargo feature (`aws`, `gcs`, `azure`, all on by default), so a build
//! that does not use a provider does not link it.

use anyhow::{Context, bail};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use tilegate_core::ledger::LedgerTable;
use tilegate_core::object::ObjectStore;
use tilegate_core::queue::{DEFAULT_MAX_RECEIVE_COUNT, WorkQueue};
use tilegate_core::source::SourceObjects;
use tilegate_core::table::{ClaimTable, CounterTable, JobTable, ManifestTable};
use tilegate_core::{Backends, ETag, StoreError, StoreResult};
use tilegate_embedded::{LocalObjectStore, QUEUE_NAME, SqliteBackend};

/// Where each role lives. A role without a URL is served by the embedded backend in `data`.
#[derive(Debug, Clone)]
pub struct Urls {
    pub data: PathBuf,
    pub objects: Option<String>,
    pub tables: Option<String>,
    pub queue: Option<String>,
}

/// The object schemes this build can open, for messages.
fn object_schemes() -> String {
    let mut s = vec!["file://DIR"];
    if cfg!(feature = "aws") {
        s.push("s3://bucket/prefix");
    }
    if cfg!(feature = "gcs") {
        s.push("gs://bucket/prefix");
    }
    if cfg!(feature = "azure") {
        s.push("az://account/container/prefix");
    }
    s.join(", ")
}

fn sqlite_path(url: &str) -> &Path {
    Path::new(url.trim_start_matches("sqlite://"))
}

/// Open the object store at `url` (any scheme but the embedded default). A cloud store's
/// bucket or container is checked, with a hint to `tilegate init` when it is missing.
pub async fn open_objects(url: &str) -> anyhow::Result<Arc<dyn ObjectStore>> {
    #[cfg(any(feature = "aws", feature = "gcs", feature = "azure"))]
    let what = || format!("open objects {url}");
    let scheme = url.split_once("://").map_or("", |(s, _)| s);
    Ok(match scheme {
        "file" => Arc::new(LocalObjectStore::open(url.trim_start_matches("file://"))?),
        #[cfg(feature = "aws")]
        "s3" => Arc::new(
            tilegate_aws::S3Store::connect(url)
                .await
                .with_context(what)?,
        ),
        #[cfg(feature = "gcs")]
        "gs" => {
            let s = tilegate_gcs::GcsStore::connect(url)
                .await
                .with_context(what)?;
            s.check_bucket().await.with_context(what)?;
            Arc::new(s)
        }
        #[cfg(feature = "azure")]
        "az" => {
            let s = tilegate_azure::AzureStore::connect(url)
                .await
                .with_context(what)?;
            s.check_container().await.with_context(what)?;
            Arc::new(s)
        }
        _ => bail!("--objects `{url}`: expected one of {}", object_schemes()),
    })
}

/// Open every role of `urls`.
pub async fn open(urls: &Urls) -> anyhow::Result<Backends> {
    let embedded_db = || -> anyhow::Result<SqliteBackend> {
        std::fs::create_dir_all(&urls.data)
            .with_context(|| format!("create data directory {}", urls.data.display()))?;
        SqliteBackend::open(urls.data.join("tilegate.db"))
            .with_context(|| format!("open tables in {}", urls.data.display()))
    };
    let objects: Arc<dyn ObjectStore> = match urls.objects.as_deref() {
        None => {
            std::fs::create_dir_all(&urls.data)
                .with_context(|| format!("create data directory {}", urls.data.display()))?;
            Arc::new(LocalObjectStore::open(urls.data.join("objects"))?)
        }
        Some(u) => open_objects(u).await?,
    };
    let db = match urls.tables.as_deref() {
        None => Some(embedded_db()?),
        Some(u) if u.starts_with("sqlite://") => Some(SqliteBackend::open(sqlite_path(u))?),
        #[cfg(feature = "aws")]
        Some(u) if u.starts_with("dynamodb://") => None,
        Some(u) => bail!("--tables `{u}`: expected sqlite://FILE or dynamodb://table-prefix"),
    };
    let tables = match &db {
        Some(db) => Tables::of(Arc::new(db.clone())),
        None => aws_tables(urls.tables.as_deref().unwrap_or_default()).await?,
    };
    let queue: Arc<dyn WorkQueue> = match urls.queue.as_deref() {
        None => Arc::new(
            db.clone()
                .map_or_else(embedded_db, Ok)?
                .queue(QUEUE_NAME, DEFAULT_MAX_RECEIVE_COUNT),
        ),
        Some(u) if u.starts_with("sqlite://") => Arc::new(
            SqliteBackend::open(sqlite_path(u))?.queue(QUEUE_NAME, DEFAULT_MAX_RECEIVE_COUNT),
        ),
        #[cfg(feature = "aws")]
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
        ledger: tables.ledger,
        queue,
        sources: sources(),
    })
}

/// GDAL configuration options for reading cloud sources with the same endpoints and
/// credentials as the stores (`/vsis3/`, `/vsigs/`, and `/vsiaz/` pinned to the configured
/// account and endpoint).
pub fn gdal_config() -> Vec<(String, String)> {
    let parts: Vec<Vec<(String, String)>> = vec![
        #[cfg(feature = "aws")]
        tilegate_aws::gdal_s3_config(),
        #[cfg(feature = "gcs")]
        tilegate_gcs::gdal_gs_config(),
        #[cfg(feature = "azure")]
        tilegate_azure::gdal_az_config(),
    ];
    parts.into_iter().flatten().collect()
}

/// Cloud sources, each scheme served by its provider's lookup; the provider's configuration
/// is read only when one of its sources is used.
fn sources() -> Option<Arc<dyn SourceObjects>> {
    let all: Vec<Arc<dyn SourceObjects>> = vec![
        #[cfg(feature = "aws")]
        Arc::new(tilegate_aws::S3Sources::new()),
        #[cfg(feature = "gcs")]
        Arc::new(tilegate_gcs::GcsSources::new()),
        #[cfg(feature = "azure")]
        Arc::new(tilegate_azure::AzureSources::new()),
    ];
    (!all.is_empty()).then(|| Arc::new(Sources(all)) as Arc<dyn SourceObjects>)
}

/// Every provider's sources behind one [`SourceObjects`], dispatched by scheme.
#[derive(Debug)]
struct Sources(Vec<Arc<dyn SourceObjects>>);

const SOURCE_SCHEMES: &[&str] = &[
    #[cfg(feature = "aws")]
    "s3",
    #[cfg(feature = "gcs")]
    "gs",
    #[cfg(feature = "azure")]
    "az",
];

#[async_trait::async_trait]
impl SourceObjects for Sources {
    fn schemes(&self) -> &'static [&'static str] {
        SOURCE_SCHEMES
    }

    async fn head_source(&self, uri: &str) -> StoreResult<Option<(ETag, u64)>> {
        let scheme = uri.split_once("://").map_or("", |(s, _)| s);
        match self.0.iter().find(|s| s.schemes().contains(&scheme)) {
            Some(s) => s.head_source(uri).await,
            None => Err(StoreError::InvalidKey {
                key: uri.to_owned(),
                reason: format!("no source lookup for `{scheme}://` in this build"),
            }),
        }
    }
}

#[cfg(feature = "aws")]
async fn aws_tables(url: &str) -> anyhow::Result<Tables> {
    Ok(Tables::of(Arc::new(
        tilegate_aws::DynamoTables::connect(url)
            .await
            .with_context(|| format!("open tables {url}"))?,
    )))
}

#[cfg(not(feature = "aws"))]
async fn aws_tables(url: &str) -> anyhow::Result<Tables> {
    bail!("--tables `{url}`: this build has no AWS backend")
}

/// The table roles, served by one implementation.
struct Tables {
    jobs: Arc<dyn JobTable>,
    manifest: Arc<dyn ManifestTable>,
    claims: Arc<dyn ClaimTable>,
    counters: Arc<dyn CounterTable>,
    ledger: Arc<dyn LedgerTable>,
}

impl Tables {
    fn of<T>(t: Arc<T>) -> Self
    where
        T: JobTable + ManifestTable + ClaimTable + CounterTable + LedgerTable + 'static,
    {
        Self {
            jobs: t.clone(),
            manifest: t.clone(),
            claims: t.clone(),
            counters: t.clone(),
            ledger: t,
        }
    }
}

pub use tilegate_core::backends::InitReport;

/// `tilegate init`: create the cloud resources of the selection, idempotently ("already
/// exists" is success). The bucket or container of `--objects` is created only if
/// `create_bucket` (otherwise it is checked); AWS tables and queues are created when named.
pub async fn init(urls: &Urls, create_bucket: bool) -> anyhow::Result<InitReport> {
    let mut report = InitReport::default();
    let objects = urls.objects.as_deref();
    match objects.and_then(|u| u.split_once("://")).map(|(s, _)| s) {
        #[cfg(feature = "gcs")]
        Some("gs") => {
            let u = objects.unwrap_or_default();
            let s = tilegate_gcs::GcsStore::connect(u).await?;
            let created = if create_bucket {
                s.ensure_bucket().await.context("create the gcs bucket")?
            } else {
                s.check_bucket().await?;
                false
            };
            report.note(created, format!("gcs bucket {}", s.bucket()));
        }
        #[cfg(feature = "azure")]
        Some("az") => {
            let u = objects.unwrap_or_default();
            let s = tilegate_azure::AzureStore::connect(u).await?;
            let created = if create_bucket {
                s.ensure_container()
                    .await
                    .context("create the azure container")?
            } else {
                s.check_container().await?;
                false
            };
            report.note(created, format!("azure container {}", s.container()));
        }
        _ => {}
    }
    match (urls.tables.as_deref(), urls.queue.as_deref()) {
        (Some(tables), Some(queue)) => {
            init_aws(urls, tables, queue, create_bucket, &mut report).await?
        }
        (None, None) => {
            // The embedded backend creates what it needs when opened.
            open(&Urls {
                objects: None,
                ..urls.clone()
            })
            .await?;
            report.note(false, "embedded backend in data directory".to_owned());
        }
        _ => bail!("init: give both --tables and --queue, or neither (the embedded backend)"),
    }
    Ok(report)
}

#[cfg(feature = "aws")]
async fn init_aws(
    urls: &Urls,
    tables: &str,
    queue: &str,
    create_bucket: bool,
    report: &mut InitReport,
) -> anyhow::Result<()> {
    if !tables.starts_with("dynamodb://") || !queue.starts_with("sqs://") {
        bail!("init creates AWS tables and queues: give --tables dynamodb://… and --queue sqs://…");
    }
    let s3 = urls.objects.as_deref().filter(|u| u.starts_with("s3://"));
    let r = tilegate_aws::AwsBackends::init(
        s3,
        tables,
        queue,
        create_bucket,
        DEFAULT_MAX_RECEIVE_COUNT,
    )
    .await
    .context("initialise AWS resources")?;
    report.created.extend(r.created);
    report.existing.extend(r.existing);
    Ok(())
}

#[cfg(not(feature = "aws"))]
async fn init_aws(
    _: &Urls,
    tables: &str,
    _: &str,
    _: bool,
    _: &mut InitReport,
) -> anyhow::Result<()> {
    bail!("--tables `{tables}`: this build has no AWS backend")
}

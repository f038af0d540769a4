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

use anyhow::Context;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use tilegate_core::ledger::LedgerTable;
use tilegate_core::object::ObjectStore;
use tilegate_core::queue::{DEFAULT_MAX_RECEIVE_COUNT, WorkQueue};
use tilegate_core::reason::{Reason, Refusal};
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

/// A backend URL this build cannot open: a scheme it does not know, or one whose backend was
/// left out of the build.
#[derive(Debug)]
pub struct UnknownUrl {
    /// The flag that named it (`--objects`).
    pub flag: &'static str,
    pub url: String,
    /// What the flag accepts, as a person reads it.
    pub expected: String,
}

impl UnknownUrl {
    fn error(flag: &'static str, url: &str, expected: impl Into<String>) -> anyhow::Error {
        anyhow::Error::new(Self {
            flag,
            url: url.to_owned(),
            expected: expected.into(),
        })
    }

    /// The cargo feature that would have built this URL's backend, if it names one.
    fn missing_feature(&self) -> Option<&'static str> {
        let scheme = self.url.split_once("://").map_or("", |(s, _)| s);
        match scheme {
            "s3" | "dynamodb" | "sqs" if !cfg!(feature = "aws") => Some("aws"),
            "gs" if !cfg!(feature = "gcs") => Some("gcs"),
            "az" if !cfg!(feature = "azure") => Some("azure"),
            _ => None,
        }
    }

    /// [`Reason::BackendNotBuilt`] for a cloud this build leaves out, else
    /// [`Reason::BadOption`].
    pub fn reason_code(&self) -> Reason {
        if self.missing_feature().is_some() {
            Reason::BackendNotBuilt
        } else {
            Reason::BadOption
        }
    }
}

impl std::fmt::Display for UnknownUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let Self {
            flag,
            url,
            expected,
        } = self;
        write!(f, "{flag} `{url}`: expected {expected}")?;
        if let Some(feature) = self.missing_feature() {
            write!(
                f,
                " (this build of tilegate has no `{feature}` backend; build it with \
                 `--features {feature}`, which the default build includes)"
            )?;
        }
        Ok(())
    }
}

impl std::error::Error for UnknownUrl {}

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
        _ => {
            let expected = format!("one of {}", object_schemes());
            return Err(UnknownUrl::error("--objects", url, expected));
        }
    })
}

/// How the embedded backend is opened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Access {
    /// Created where missing: every command that writes.
    ReadWrite,
    /// Never created or written ([`open_read_only`]).
    ReadOnly,
}

/// Open every role of `urls`, creating the embedded backend's directory and database where
/// they are missing.
pub async fn open(urls: &Urls) -> anyhow::Result<Backends> {
    open_with(urls, Access::ReadWrite).await
}

/// Open every role of `urls` to look, not to write: the embedded backend's data directory,
/// database and objects must exist (a mistyped `--data` is refused, never created) and are
/// opened read-only, so that a colleague's or an archived run on a read-only directory can be
/// looked at. Cloud roles open as usual; nothing the caller does through them should write.
pub async fn open_read_only(urls: &Urls) -> anyhow::Result<Backends> {
    if urls.tables.is_none() && !urls.data.join("tilegate.db").is_file() {
        return Err(Refusal::new(
            Reason::NoJob,
            format!(
                "no tilegate data in {} (no job has been planned there; check --data or \
                 TILEGATE_DATA)",
                urls.data.display()
            ),
        )
        .into());
    }
    open_with(urls, Access::ReadOnly).await
}

fn open_sqlite(path: &Path, access: Access) -> anyhow::Result<SqliteBackend> {
    Ok(match access {
        Access::ReadWrite => SqliteBackend::open(path)?,
        Access::ReadOnly => SqliteBackend::open_read_only(path)?,
    })
}

async fn open_with(urls: &Urls, access: Access) -> anyhow::Result<Backends> {
    let create_data = || create_data_dir(&urls.data);
    let embedded_db = || embedded_db(&urls.data, access);
    let objects: Arc<dyn ObjectStore> = match urls.objects.as_deref() {
        None if access == Access::ReadOnly => {
            Arc::new(LocalObjectStore::open_read_only(urls.data.join("objects"))?)
        }
        None => {
            create_data()?;
            Arc::new(LocalObjectStore::open(urls.data.join("objects"))?)
        }
        Some(u) => open_objects(u).await?,
    };
    let db = match urls.tables.as_deref() {
        None => Some(embedded_db()?),
        Some(u) if u.starts_with("sqlite://") => Some(open_sqlite(sqlite_path(u), access)?),
        #[cfg(feature = "aws")]
        Some(u) if u.starts_with("dynamodb://") => None,
        Some(u) => {
            let expected = if cfg!(feature = "aws") {
                "sqlite://FILE or dynamodb://table-prefix"
            } else {
                "sqlite://FILE"
            };
            return Err(UnknownUrl::error("--tables", u, expected));
        }
    };
    let tables = match &db {
        Some(db) => Tables::of(Arc::new(db.clone())),
        None => aws_tables(urls.tables.as_deref().unwrap_or_default()).await?,
    };
    let queue = open_queue(
        "--queue",
        urls.queue.as_deref(),
        QUEUE_NAME,
        || db.clone().map_or_else(embedded_db, Ok),
        access,
    )
    .await?;
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

/// The queue URLs this build opens, for messages.
const QUEUE_URLS: &str = if cfg!(feature = "aws") {
    "sqlite://FILE or sqs://queue-name"
} else {
    "sqlite://FILE"
};

/// A queue: `url` (`sqlite://FILE` or `sqs://queue-name`, dead letters in `queue-name-dlq`),
/// or the queue `name` in the embedded database `embedded`.
async fn open_queue(
    flag: &'static str,
    url: Option<&str>,
    name: &str,
    embedded: impl FnOnce() -> anyhow::Result<SqliteBackend>,
    access: Access,
) -> anyhow::Result<Arc<dyn WorkQueue>> {
    Ok(match url {
        None => Arc::new(embedded()?.queue(name, DEFAULT_MAX_RECEIVE_COUNT)),
        Some(u) if u.starts_with("sqlite://") => {
            Arc::new(open_sqlite(sqlite_path(u), access)?.queue(name, DEFAULT_MAX_RECEIVE_COUNT))
        }
        #[cfg(feature = "aws")]
        Some(u) if u.starts_with("sqs://") => Arc::new(
            tilegate_aws::SqsQueue::connect(u, DEFAULT_MAX_RECEIVE_COUNT)
                .await
                .with_context(|| format!("open queue {u} (run `tilegate init` first?)"))?,
        ),
        Some(u) => {
            return Err(UnknownUrl::error(flag, u, QUEUE_URLS));
        }
    })
}

/// The name of the embedded arrivals queue (`ingest`'s, beside the work queue).
pub const ARRIVALS_QUEUE_NAME: &str = "arrivals";

/// The arrivals queue `tilegate ingest` consumes: `url` (`sqlite://FILE`, `sqs://queue-name`),
/// or the `arrivals` queue of the embedded database in `urls.data`.
pub async fn open_arrivals(urls: &Urls, url: Option<&str>) -> anyhow::Result<Arc<dyn WorkQueue>> {
    open_queue(
        "--arrivals",
        url,
        ARRIVALS_QUEUE_NAME,
        || embedded_db(&urls.data, Access::ReadWrite),
        Access::ReadWrite,
    )
    .await
}

fn create_data_dir(data: &Path) -> anyhow::Result<()> {
    std::fs::create_dir_all(data)
        .with_context(|| format!("create data directory {}", data.display()))
}

/// The embedded backend's database in `data` (the directory created first when writing).
fn embedded_db(data: &Path, access: Access) -> anyhow::Result<SqliteBackend> {
    if access == Access::ReadWrite {
        create_data_dir(data)?;
    }
    open_sqlite(&data.join("tilegate.db"), access)
        .with_context(|| format!("open tables in {}", data.display()))
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
    Err(UnknownUrl::error("--tables", url, "sqlite://FILE"))
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
/// `tilegate init --arrivals URL`: also create `ingest`'s arrivals queue (`sqs://name` and its
/// `name-dlq`; the embedded arrivals queue needs nothing created).
#[cfg_attr(
    not(feature = "aws"),
    expect(unused_variables, reason = "only an AWS queue is created")
)]
pub async fn init_arrivals(url: &str, report: &mut InitReport) -> anyhow::Result<()> {
    match url.split_once("://").map(|(s, _)| s) {
        #[cfg(feature = "aws")]
        Some("sqs") => {
            let r = tilegate_aws::AwsBackends::init_queue(url, DEFAULT_MAX_RECEIVE_COUNT)
                .await
                .context("create the arrivals queue")?;
            report.created.extend(r.created);
            report.existing.extend(r.existing);
            Ok(())
        }
        Some("sqlite") => Ok(()),
        _ => Err(UnknownUrl::error("--arrivals", url, QUEUE_URLS)),
    }
}

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
        _ => {
            return Err(Refusal::new(
                Reason::BadOption,
                "init: give both --tables and --queue, or neither (the embedded backend)",
            )
            .into());
        }
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
        return Err(Refusal::new(
            Reason::BadOption,
            "init creates AWS tables and queues: give --tables dynamodb://… and --queue sqs://…",
        )
        .into());
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
    Err(UnknownUrl::error("--tables", tables, "sqlite://FILE"))
}

/// The announcement sinks `specs` name ([`tilegate_core::announce::SinkSpec`]): SNS topics and
/// EventBridge buses on AWS (this build's `aws` feature), webhooks signed with
/// `TILEGATE_WEBHOOK_SECRET` (read from the environment, never from a command line).
pub async fn open_sinks(
    specs: &[tilegate_core::announce::SinkSpec],
) -> anyhow::Result<Vec<Arc<dyn tilegate_core::announce::Sink>>> {
    use tilegate_core::announce::SinkSpec;
    let secret = std::env::var("TILEGATE_WEBHOOK_SECRET")
        .ok()
        .filter(|s| !s.is_empty());
    let mut out: Vec<Arc<dyn tilegate_core::announce::Sink>> = Vec::new();
    // One SDK configuration for every AWS sink, loaded only when there is one.
    #[cfg(feature = "aws")]
    let sdk = if specs
        .iter()
        .any(|s| matches!(s, SinkSpec::Sns(_) | SinkSpec::EventBridge(_)))
    {
        Some(tilegate_aws::config::load_sdk_config().await)
    } else {
        None
    };
    for spec in specs {
        match spec {
            SinkSpec::Webhook(url) => {
                if secret.is_none() {
                    // Said at every start, on every process that delivers: a receiver of an
                    // unsigned body cannot tell tilegate's messages from a forger's.
                    tracing::warn!(
                        webhook = %tilegate_core::redact::redact(url.as_str()),
                        "TILEGATE_WEBHOOK_SECRET is not set: this webhook's messages go unsigned \
                         (no X-Tilegate-Signature); set it so that receivers can refuse forgeries"
                    );
                }
                let mut hook =
                    tilegate_webhook::Webhook::new(url, secret.as_deref().map(str::as_bytes))?;
                // Test hook: a shorter first backoff (milliseconds), so that a refused delivery
                // is retried quickly.
                if let Some(ms) = std::env::var("TILEGATE_TEST_WEBHOOK_BACKOFF_MS")
                    .ok()
                    .and_then(|v| v.parse().ok())
                {
                    hook = hook.with_retry(tilegate_retry::RetryPolicy {
                        max_attempts: 6,
                        base: std::time::Duration::from_millis(ms),
                        cap: std::time::Duration::from_millis(ms * 16),
                    });
                }
                out.push(Arc::new(hook));
            }
            #[cfg(feature = "aws")]
            SinkSpec::Sns(arn) => {
                let sdk = sdk.as_ref().expect("loaded for AWS sinks");
                out.push(Arc::new(tilegate_aws::announce::SnsTopic::new(sdk, arn)));
            }
            #[cfg(feature = "aws")]
            SinkSpec::EventBridge(bus) => {
                let sdk = sdk.as_ref().expect("loaded for AWS sinks");
                out.push(Arc::new(tilegate_aws::announce::EventBus::new(sdk, bus)));
            }
            #[cfg(not(feature = "aws"))]
            SinkSpec::Sns(_) | SinkSpec::EventBridge(_) => {
                anyhow::bail!("{spec:?}: this build has no AWS support (the `aws` feature)")
            }
        }
    }
    Ok(out)
}

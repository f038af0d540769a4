//! Ingest: a scene that lands becomes a planned job, with nobody typing `plan`.
//!
//! Arrivals come as queue messages ([`tilegate_core::arrival`]: S3 event notifications,
//! EventBridge events, SNS envelopes, STAC Items) or, on one machine, as files that appear in
//! a watched directory. Each passes the configuration's filters (the buckets whose
//! notifications are accepted, key prefixes and suffixes, STAC collections) and the tenant's
//! source policy, and is planned with the configured recipe, prefix and tenant.
//!
//! Duplicates cost nothing: the job ID is a function of the source's pin and the recipe, so a
//! repeated notification of the same object plans the same job, whose row says its windows
//! were enqueued ([`Enqueue::Once`]) or, while the row is younger than a planner takes, that
//! its planner is enqueueing them; nothing more is sent. A message is acknowledged only after
//! everything it names is planned, so a crash re-plans from the redelivery (one between the
//! row and its mark: a redelivery after that time, or the reconciler, enqueues the windows).
//!
//! Every message is hostile: a bucket not in the configuration is refused (`source-forbidden`,
//! dead-lettered, never read), a STAC Item's hrefs reach only what the policy lists, and no
//! message names a local file.

use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;
use tilegate_core::arrival::{self, Arrival, Record};
use tilegate_core::{Backends, JobId, Prefix, Reason, Recipe, Tenant};
use tilegate_planner::product::{PlannedTile, ProductOptions, plan_product_resolved};
use tilegate_planner::{Enqueue, PlanError, PlanOptions, plan_resolved};
use tilegate_source::{Origin, Policies, SourceError, resolve};

/// What `ingest` plans and which arrivals it takes: `tilegate ingest … --print-config` prints
/// it, the Lambda function reads it from `TILEGATE_INGEST`.
/// A field left out takes its value from [`IngestConfig::default`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct IngestConfig {
    /// The recipe every arrival is planned with.
    pub recipe: Recipe,
    pub prefix: Prefix,
    pub tenant: Tenant,
    /// A STAC Item's assets that become the job's bands, in order.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub assets: Vec<String>,
    pub manifest_shards: u32,
    /// Buckets whose object notifications are planned (`s3://bucket`); a notification from any
    /// other is refused. None: no object notification is accepted.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub buckets: Vec<String>,
    /// Plan only keys (or watched files' paths under the directory) starting with one of
    /// these; none: any.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub key_prefixes: Vec<String>,
    /// Plan only keys (or files) ending with one of these, e.g. `.tif`; none: any.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub key_suffixes: Vec<String>,
    /// Plan only STAC Items of these collections; none: any.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub collections: Vec<String>,
    /// Add each arrival to this product (defined before, under the prefix and tenant) and
    /// plan the tiles it touches, instead of planning it as a job with the recipe.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub product: Option<String>,
}

impl Default for IngestConfig {
    fn default() -> Self {
        Self {
            recipe: Recipe::copy_all(),
            prefix: Prefix::default(),
            tenant: Tenant::default(),
            assets: Vec::new(),
            manifest_shards: 1,
            buckets: Vec::new(),
            key_prefixes: Vec::new(),
            key_suffixes: Vec::new(),
            collections: Vec::new(),
            product: None,
        }
    }
}

impl IngestConfig {
    /// Whether a key (or a watched file's relative path) passes the prefix and suffix filters.
    pub fn accepts_key(&self, key: &str) -> bool {
        (self.key_prefixes.is_empty() || self.key_prefixes.iter().any(|p| key.starts_with(p)))
            && (self.key_suffixes.is_empty() || self.key_suffixes.iter().any(|s| key.ends_with(s)))
    }
}

/// What one arrival came to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum Ingested {
    /// Planned, its windows enqueued (a new job, or one whose enqueueing a crash cut short).
    Planned {
        arrival: String,
        job_id: JobId,
        windows: u64,
        enqueued: u64,
    },
    /// The job was planned and enqueued before: a duplicate notification, absorbed.
    Duplicate { arrival: String, job_id: JobId },
    /// Added to the configuration's product: the tiles it touches, each planned over its
    /// scenes. A scene the product had before plans nothing new ([`Ingested::Duplicate`]'s
    /// counterpart: `tiles` all unchanged).
    Product {
        arrival: String,
        product: String,
        scene: String,
        tiles: Vec<PlannedTile>,
        duplicate: bool,
    },
    /// Not for this configuration (a key or collection filtered out, a removal event).
    Skipped { arrival: String, why: String },
}

/// Why an arrival could not be planned.
#[derive(Debug, thiserror::Error)]
pub enum IngestError {
    #[error("{arrival}: {reason}")]
    Refused { arrival: String, reason: String },
    #[error("{0}")]
    BadMessage(#[from] arrival::ArrivalError),
    #[error("{arrival}: {source}")]
    Plan {
        arrival: String,
        #[source]
        source: Box<PlanError>,
    },
    /// A watched file that is not a whole raster: a TIFF whose directory or pixel data runs
    /// past the end of the file (a copy cut short). Final for that size and time: a writer
    /// that finishes it later changes both, and the finished file is planned.
    #[error("{arrival}: {what}")]
    Truncated { arrival: String, what: String },
}

impl IngestError {
    /// The dead-letter reason.
    pub fn reason_code(&self) -> Reason {
        match self {
            Self::Refused { .. } => Reason::SourceForbidden,
            Self::BadMessage(_) => Reason::BadArrival,
            Self::Plan { source, .. } => source.reason_code(),
            Self::Truncated { .. } => Reason::CorruptRaster,
        }
    }

    /// Why, without the arrival's name (said beside it): the cause and its chain, once.
    pub fn cause(&self) -> String {
        let why = match self {
            Self::Refused { reason, .. } => reason.clone(),
            Self::BadMessage(e) => tilegate_core::error::chain(e),
            Self::Plan { source, .. } => tilegate_core::error::chain(source.as_ref()),
            Self::Truncated { what, .. } => what.clone(),
        };
        tilegate_core::redact::redact(&why).into_owned()
    }

    /// The dead-letter queue's reason: the code, then the whole chain of causes (the source
    /// policy's rule among them), redacted.
    pub fn dead_letter_reason(&self) -> String {
        tilegate_core::redact::redact(&format!(
            "{}: {}",
            self.reason_code().as_str(),
            tilegate_core::error::chain(self)
        ))
        .into_owned()
    }

    /// Whether trying again later may succeed (a throttled table, a network fault).
    pub fn is_retryable(&self) -> bool {
        match self {
            Self::Plan { source, .. } => source.is_retryable(),
            _ => false,
        }
    }
}

/// How long an arrival whose planning met a passing fault stays hidden before it is tried
/// again: 5 s a receive so far, at most 5 minutes.
pub fn retry_backoff(receive_count: u32) -> std::time::Duration {
    std::time::Duration::from_secs(5 * u64::from(receive_count.clamp(1, 60)))
}

/// What to do with a message once its arrivals are handled.
#[derive(Debug)]
pub enum Disposition {
    /// Everything it names is planned (or skipped): acknowledge it.
    Done,
    /// It can never be planned: dead-letter it with this reason.
    DeadLetter(IngestError),
    /// A fault that may pass: leave it for redelivery.
    Retry(IngestError),
}

/// One message's outcome: what each of its arrivals came to, and what to do with it.
#[derive(Debug)]
pub struct MessageOutcome {
    pub ingested: Vec<Ingested>,
    pub disposition: Disposition,
}

/// Plans arrivals with one configuration.
#[derive(Debug, Clone)]
pub struct Ingest {
    b: Backends,
    cfg: Arc<IngestConfig>,
    policies: Arc<Policies>,
}

impl Ingest {
    pub fn new(b: Backends, cfg: IngestConfig, policies: Arc<Policies>) -> Self {
        Self {
            b,
            cfg: Arc::new(cfg),
            policies,
        }
    }

    pub fn config(&self) -> &IngestConfig {
        &self.cfg
    }

    fn plan_options(&self) -> PlanOptions {
        PlanOptions {
            recipe: self.cfg.recipe.clone(),
            prefix: self.cfg.prefix.clone(),
            policy: self.policies.of(self.cfg.tenant.as_str()),
            tenant: self.cfg.tenant.clone(),
            resume: true,
            assets: self.cfg.assets.clone(),
            manifest_shards: self.cfg.manifest_shards,
        }
    }

    /// Plan every arrival one message names.
    pub async fn message(&self, body: &str) -> MessageOutcome {
        let records = match arrival::parse(body) {
            Ok(r) => r,
            Err(e) => {
                return MessageOutcome {
                    ingested: Vec::new(),
                    disposition: Disposition::DeadLetter(e.into()),
                };
            }
        };
        let mut ingested = Vec::with_capacity(records.len());
        let mut failed: Option<IngestError> = None;
        for record in records {
            let outcome = match record {
                Record::Ignored(why) => Ok(Ingested::Skipped {
                    arrival: "-".to_owned(),
                    why,
                }),
                Record::Arrival(a) => self.arrival(a).await,
            };
            match outcome {
                Ok(i) => ingested.push(i),
                Err(e) => {
                    tracing::warn!(error = %e, "arrival not planned");
                    // A retryable fault wins: the redelivery plans the rest again (absorbed).
                    if failed.as_ref().is_none_or(|f| !f.is_retryable()) {
                        failed = Some(e);
                    }
                }
            }
        }
        let disposition = match failed {
            None => Disposition::Done,
            Some(e) if e.is_retryable() => Disposition::Retry(e),
            Some(e) => Disposition::DeadLetter(e),
        };
        MessageOutcome {
            ingested,
            disposition,
        }
    }

    /// Plan one arrival a message named.
    pub async fn arrival(&self, a: Arrival) -> Result<Ingested, IngestError> {
        let name = a.name();
        let refused = |reason: String| IngestError::Refused {
            arrival: tilegate_core::redact::redact(&name).into_owned(),
            reason,
        };
        let skipped = |why: String| {
            Ok(Ingested::Skipped {
                arrival: name.clone(),
                why,
            })
        };
        let opts = self.plan_options();
        let started = Instant::now();
        let resolved = match a {
            Arrival::Object {
                uri, bucket, key, ..
            } => {
                let listed = format!("s3://{bucket}");
                if !self
                    .cfg
                    .buckets
                    .iter()
                    .any(|b| b.trim_end_matches('/') == listed)
                {
                    return Err(refused(format!(
                        "notifications from `{listed}` are not accepted (ingest's buckets: {})",
                        if self.cfg.buckets.is_empty() {
                            "none".to_owned()
                        } else {
                            self.cfg.buckets.join(", ")
                        }
                    )));
                }
                if !self.cfg.accepts_key(&key) {
                    return skipped("the key does not match the prefix and suffix filters".into());
                }
                // The bucket is the configuration's; the policy judges the object as any
                // source the operator's pipeline names.
                resolve(&self.b, &opts.policy, &uri, Origin::Operator).await
            }
            Arrival::Item {
                collection, item, ..
            } => {
                if !self.cfg.collections.is_empty()
                    && !collection
                        .as_ref()
                        .is_some_and(|c| self.cfg.collections.contains(c))
                {
                    return skipped(format!(
                        "collection `{}` is not one of {}",
                        collection.as_deref().unwrap_or("(none)"),
                        self.cfg.collections.join(", ")
                    ));
                }
                tilegate_source::stac::resolve_message_item(
                    &self.b,
                    &opts.policy,
                    item,
                    &opts.assets,
                )
                .await
            }
        };
        self.plan(name, resolved, started, &opts).await
    }

    /// Plan a file that appeared under the watched directory `root` (the operator's).
    pub async fn local_file(&self, root: &Path, path: &Path) -> Result<Ingested, IngestError> {
        let name = path.display().to_string();
        let rel = path
            .strip_prefix(root)
            .map(|p| p.to_string_lossy().into_owned())
            .unwrap_or_default();
        if !self.cfg.accepts_key(&rel) {
            return Ok(Ingested::Skipped {
                arrival: name,
                why: "the path does not match the prefix and suffix filters".into(),
            });
        }
        let opts = self.plan_options();
        let started = Instant::now();
        // A link in the directory that leads out of it is not the directory's.
        let inside = std::fs::canonicalize(path)
            .ok()
            .zip(std::fs::canonicalize(root).ok())
            .is_some_and(|(p, r)| p.starts_with(r));
        if !inside {
            return Err(IngestError::Refused {
                arrival: name,
                reason: format!("it leads out of the watched directory {}", root.display()),
            });
        }
        // A TIFF cut short opens (a COG's directories come first) but its windows cannot be
        // read: refused here, once, rather than planned and dead-lettered window by window.
        match tiff_cut_short(path) {
            Ok(Some(what)) => {
                return Err(IngestError::Truncated {
                    arrival: name,
                    what,
                });
            }
            Ok(None) => {}
            // Unreadable now: the planner's own open says why.
            Err(e) => {
                tracing::debug!(file = %name, error = %e, "could not check the TIFF's extent")
            }
        }
        let resolved = resolve(&self.b, &opts.policy, &name, Origin::Operator).await;
        self.plan(name, resolved, started, &opts).await
    }

    async fn plan(
        &self,
        name: String,
        resolved: Result<tilegate_source::ResolvedSource, SourceError>,
        started: Instant,
        opts: &PlanOptions,
    ) -> Result<Ingested, IngestError> {
        if let Some(product) = &self.cfg.product {
            return self.add_to_product(product, name, resolved, opts).await;
        }
        let planned = match resolved {
            Ok(r) => plan_resolved(&self.b, r, started, opts, Enqueue::Once).await,
            Err(e) => Err(e.into()),
        };
        let p = planned.map_err(|source| IngestError::Plan {
            arrival: tilegate_core::redact::redact(&name).into_owned(),
            source: Box::new(source),
        })?;
        let job_id = p.job.job_id.clone();
        if p.enqueued == 0 && !p.newly_planned {
            tracing::info!(%job_id, arrival = %name, "duplicate arrival absorbed");
            return Ok(Ingested::Duplicate {
                arrival: name,
                job_id,
            });
        }
        tracing::info!(%job_id, arrival = %name, windows = p.windows, enqueued = p.enqueued, "arrival planned");
        Ok(Ingested::Planned {
            arrival: name,
            job_id,
            windows: p.windows,
            enqueued: p.enqueued,
        })
    }

    /// Add an arrival to the product: the tiles it touches, planned over their scenes.
    async fn add_to_product(
        &self,
        product: &str,
        name: String,
        resolved: Result<tilegate_source::ResolvedSource, SourceError>,
        opts: &PlanOptions,
    ) -> Result<Ingested, IngestError> {
        let planned = async {
            let resolved = resolved?;
            let root = opts.tenant.root(&opts.prefix)?;
            let definition = tilegate_planner::product::definition(&self.b, &root, product).await?;
            let popts = ProductOptions {
                definition,
                prefix: opts.prefix.clone(),
                tenant: opts.tenant.clone(),
                policy: opts.policy.clone(),
                manifest_shards: opts.manifest_shards,
            };
            plan_product_resolved(&self.b, &popts, vec![resolved]).await
        }
        .await
        .map_err(|source| IngestError::Plan {
            arrival: tilegate_core::redact::redact(&name).into_owned(),
            source: Box::new(source),
        })?;
        let duplicate = planned.changed_nothing();
        let scene = planned
            .scenes
            .first()
            .map(|s| s.id.clone())
            .unwrap_or_default();
        let tiles = planned.planned_tiles();
        tracing::info!(arrival = %name, %product, %scene, tiles = tiles.len(), duplicate,
            "arrival added to the product");
        Ok(Ingested::Product {
            arrival: name,
            product: product.to_owned(),
            scene,
            tiles,
            duplicate,
        })
    }
}

/// How long a watched file's size and time must stand still before it is planned, unless the
/// operator says otherwise (`ingest --settle`): longer than a writer's usual pause.
pub const DEFAULT_SETTLE: std::time::Duration = std::time::Duration::from_secs(10);

/// Files under a watched directory, and which of them have stood still long enough to plan.
///
/// A file is planned once its size and modification time have not changed for the settle time
/// ([`Watch::with_settle`], [`DEFAULT_SETTLE`]), measured from when this process first saw
/// that (size, time) — not counted in scans, so a writer that pauses longer than the scan
/// interval is still waited for. Hidden files (a name starting with `.`) are never planned:
/// a writer that writes `.name.tmp` and renames it into place is seen only under its final
/// name, and that file still waits the settle time (a scan cannot tell a rename from a writer
/// that paused; an inbox whose writers all rename may set it to zero).
///
/// A file is handed out once per process per (size, time); a restarted process plans them
/// again, which the job IDs absorb. A file whose planning met a fault that may pass
/// ([`Watch::retry_later`]) is handed out again by a later scan, after [`retry_backoff`]; a
/// refusal is final for that (size, time).
#[derive(Debug)]
pub struct Watch {
    root: PathBuf,
    /// Each file's (size, modified) on the last scan, when that was first seen, and where it
    /// stands.
    seen: std::collections::HashMap<PathBuf, Seen>,
    /// How long a file's (size, modified) must stand still before it is handed out.
    settle: std::time::Duration,
    /// Tries a file gets when its planning keeps meeting passing faults; none: no limit.
    max_attempts: Option<u32>,
}

/// A watched file as the scans saw it.
#[derive(Debug, Clone, Copy)]
struct Seen {
    stamp: (u64, std::time::SystemTime),
    /// When this process first saw `stamp`.
    since: Instant,
    state: Watched,
}

/// Where a watched file stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Watched {
    /// Seen, not yet standing still for the settle time.
    Settling,
    /// Handed out to be planned (planned, skipped or refused: done with).
    Handed {
        /// How many times it was handed out.
        attempts: u32,
    },
    /// Handed out, its planning met a passing fault: handed out again from `at`.
    Retry { attempts: u32, at: Instant },
}

impl Watch {
    pub fn new(root: PathBuf) -> Self {
        Self {
            root,
            seen: Default::default(),
            settle: DEFAULT_SETTLE,
            max_attempts: None,
        }
    }

    /// Hand a file out once its size and time have stood still this long (zero: on the first
    /// scan that sees it, for writers that only ever rename finished files into place).
    #[must_use]
    pub fn with_settle(mut self, settle: std::time::Duration) -> Self {
        self.settle = settle;
        self
    }

    /// Give a file at most `n` tries when its planning keeps meeting passing faults (a one-off
    /// round that must end); without it a file is tried again as long as the process runs.
    #[must_use]
    pub fn with_max_attempts(mut self, n: u32) -> Self {
        self.max_attempts = Some(n.max(1));
        self
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Whether a file seen on the last scan is still waiting to stand still, or to be tried
    /// again after a passing fault: work to come.
    pub fn settling(&self) -> bool {
        self.seen
            .values()
            .any(|s| matches!(s.state, Watched::Settling | Watched::Retry { .. }))
    }

    /// A file handed out by the last scan could not be planned because of a fault that may
    /// pass (a busy table, a network fault): hand it out again after [`retry_backoff`] of its
    /// tries so far. Returns when it will be tried again, or `None` if it has had its tries
    /// (then it is final, as a refusal is, until it changes).
    pub fn retry_later(&mut self, path: &Path) -> Option<std::time::Duration> {
        let seen = self.seen.get_mut(path)?;
        let Watched::Handed { attempts } = seen.state else {
            return None;
        };
        if self.max_attempts.is_some_and(|max| attempts >= max) {
            return None;
        }
        let wait = retry_backoff(attempts);
        seen.state = Watched::Retry {
            attempts,
            at: Instant::now() + wait,
        };
        Some(wait)
    }

    /// Scan the directory (recursively, hidden files and directories left out): the files
    /// whose size and time have stood still for the settle time and were not handed out yet,
    /// and those whose retry is due. A file gone from the directory is forgotten.
    pub fn scan(&mut self) -> std::io::Result<Vec<PathBuf>> {
        let mut files = Vec::new();
        let mut dirs = vec![self.root.clone()];
        while let Some(dir) = dirs.pop() {
            for entry in std::fs::read_dir(&dir)? {
                let entry = entry?;
                if entry.file_name().to_string_lossy().starts_with('.') {
                    continue;
                }
                let kind = entry.file_type()?;
                if kind.is_dir() {
                    dirs.push(entry.path());
                } else if let Ok(meta) = std::fs::metadata(entry.path())
                    && meta.is_file()
                {
                    let stamp = (meta.len(), meta.modified()?);
                    files.push((entry.path(), stamp));
                }
            }
        }
        let now = Instant::now();
        let present: std::collections::HashSet<&PathBuf> = files.iter().map(|(p, _)| p).collect();
        self.seen.retain(|p, _| present.contains(p));
        let mut ready = Vec::new();
        for (path, stamp) in files {
            let seen = self.seen.entry(path.clone()).or_insert(Seen {
                stamp,
                since: now,
                state: Watched::Settling,
            });
            if seen.stamp != stamp {
                // Changed: a new version, planned once it stands still (its tries start over).
                *seen = Seen {
                    stamp,
                    since: now,
                    state: Watched::Settling,
                };
            }
            match seen.state {
                Watched::Settling if now.duration_since(seen.since) >= self.settle => {
                    seen.state = Watched::Handed { attempts: 1 };
                    ready.push(path);
                }
                Watched::Retry { attempts, at } if at <= now => {
                    seen.state = Watched::Handed {
                        attempts: attempts + 1,
                    };
                    ready.push(path);
                }
                Watched::Settling | Watched::Retry { .. } | Watched::Handed { .. } => {}
            }
        }
        ready.sort();
        Ok(ready)
    }
}

/// Bytes of one directory's values read at most; a TIFF whose offset tables are larger is
/// left to GDAL.
const TIFF_TABLE_LIMIT: u64 = 256 << 20;

/// Whether a TIFF (classic or BigTIFF) is cut short: every directory, every value it keeps
/// outside itself and every strip or tile it points at must lie inside the file. Returns what
/// runs past the end, or `None` for a whole TIFF and for a file that is not a TIFF (GDAL judges
/// that one). Reads the directories, never the pixels.
pub fn tiff_cut_short(path: &Path) -> std::io::Result<Option<String>> {
    use std::os::unix::fs::FileExt as _;
    let file = std::fs::File::open(path)?;
    let len = file.metadata()?.len();
    let fits = |off: u64, n: u64| off.checked_add(n).is_some_and(|end| end <= len);
    let read = |off: u64, n: u64| -> std::io::Result<Vec<u8>> {
        let mut buf = vec![0; usize::try_from(n).unwrap_or(usize::MAX)];
        file.read_exact_at(&mut buf, off)?;
        Ok(buf)
    };
    let head = read(0, len.min(16))?;
    if head.len() < 8 {
        return Ok(None);
    }
    let le = match &head[..2] {
        b"II" => true,
        b"MM" => false,
        _ => return Ok(None),
    };
    // An unsigned integer of 1, 2, 4 or 8 bytes in the file's byte order.
    let uint = |b: &[u8]| -> u64 {
        let mut v = [0u8; 8];
        if le {
            v[..b.len()].copy_from_slice(b);
            u64::from_le_bytes(v)
        } else {
            v[8 - b.len()..].copy_from_slice(b);
            u64::from_be_bytes(v)
        }
    };
    let big = match uint(&head[2..4]) {
        42 => false,
        43 => true,
        _ => return Ok(None),
    };
    let past_end = |what: String| -> std::io::Result<Option<String>> {
        Ok(Some(format!(
            "{what}, past the end of the file ({len} bytes): a TIFF cut short"
        )))
    };
    let mut next = if big {
        if head.len() < 16 {
            return past_end("its header runs to byte 16".into());
        }
        uint(&head[8..16])
    } else {
        uint(&head[4..8])
    };
    let (count_len, entry_len, link_len, inline_len) =
        if big { (8, 20, 8, 8) } else { (2, 12, 4, 4) };
    let mut visited = std::collections::HashSet::new();
    let mut data_end = 0u64;
    while next != 0 && visited.insert(next) && visited.len() <= 100_000 {
        if !fits(next, count_len) {
            return past_end(format!("its directory starts at byte {next}"));
        }
        let n = uint(&read(next, count_len)?);
        let body = n.saturating_mul(entry_len).saturating_add(link_len);
        if !fits(next + count_len, body) {
            return past_end(format!(
                "its directory at byte {next} runs to byte {}",
                (next + count_len).saturating_add(body)
            ));
        }
        if body > TIFF_TABLE_LIMIT {
            return Ok(None);
        }
        let entries = read(next + count_len, body)?;
        let (mut offsets, mut counts) = (Vec::new(), Vec::new());
        for e in entries[..entries.len() - link_len as usize].chunks_exact(entry_len as usize) {
            let (tag, kind) = (uint(&e[0..2]), uint(&e[2..4]));
            let (n, value) = if big {
                (uint(&e[4..12]), &e[12..20])
            } else {
                (uint(&e[4..8]), &e[8..12])
            };
            let size = match kind {
                1 | 2 | 6 | 7 => 1,
                3 | 8 => 2,
                4 | 9 | 11 | 13 => 4,
                5 | 10 | 12 | 16 | 17 | 18 => 8,
                // A type this check does not know: its size is unknown, its value skipped.
                _ => continue,
            };
            let total = n.saturating_mul(size);
            let bytes = if total <= inline_len {
                value[..usize::try_from(total).unwrap_or(0)].to_vec()
            } else {
                let at = uint(value);
                if !fits(at, total) {
                    return past_end(format!(
                        "tag {tag}'s values run to byte {}",
                        at.saturating_add(total)
                    ));
                }
                // Only the strip and tile tables are read; the rest need only lie inside.
                if !matches!(tag, 273 | 279 | 324 | 325) {
                    continue;
                }
                if total > TIFF_TABLE_LIMIT {
                    return Ok(None);
                }
                read(at, total)?
            };
            let values = || {
                bytes
                    .chunks_exact(size as usize)
                    .map(uint)
                    .collect::<Vec<_>>()
            };
            match (tag, kind) {
                (273 | 324, 3 | 4 | 16) => offsets = values(),
                (279 | 325, 3 | 4 | 16) => counts = values(),
                _ => {}
            }
        }
        for (&at, &n) in offsets.iter().zip(&counts) {
            // A block with no bytes is sparse (GDAL's SPARSE_OK): nothing to read.
            if n > 0 {
                data_end = data_end.max(at.saturating_add(n));
            }
        }
        next = uint(&entries[entries.len() - link_len as usize..]);
    }
    if data_end > len {
        return past_end(format!("its pixel data runs to byte {data_end}"));
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The configuration deploy/aws/template.yaml gives the ingest function (its parameters'
    /// defaults), and what `--print-config` prints, read back.
    #[test]
    fn the_deployed_configuration_reads() {
        let deployed = r#"{"recipe":{"operation":{"op":"copy"},"window":512},
            "buckets":["s3://my-scenes"],"key_suffixes":[".tif",".TIF"]}"#;
        let cfg: IngestConfig = serde_json::from_str(deployed).unwrap();
        assert_eq!(cfg.recipe, Recipe::copy_all());
        assert_eq!(cfg.buckets, ["s3://my-scenes"]);
        assert!(cfg.accepts_key("incoming/a.TIF"));
        assert!(!cfg.accepts_key("incoming/a.json"));
        let again: IngestConfig =
            serde_json::from_str(&serde_json::to_string(&cfg).unwrap()).unwrap();
        assert_eq!(again, cfg);
        assert!(serde_json::from_str::<IngestConfig>(r#"{"bucket":["s3://x"]}"#).is_err());
    }

    /// A file handed out is handed out again after a passing fault, once its backoff is over,
    /// and never after a refusal; a round with a limit gives up after its tries.
    #[test]
    fn a_passing_fault_hands_a_file_out_again() {
        let dir = std::env::temp_dir().join(format!("tilegate-watch-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("a.tif");
        std::fs::write(&file, b"scene").unwrap();
        let mut w = Watch::new(dir.clone()).with_settle(std::time::Duration::ZERO);
        assert_eq!(w.scan().unwrap(), std::slice::from_ref(&file));
        assert!(w.scan().unwrap().is_empty(), "handed out once");
        assert!(!w.settling());
        assert_eq!(w.retry_later(&file), Some(retry_backoff(1)));
        assert!(w.settling(), "a retry to come is work to come");
        assert!(w.scan().unwrap().is_empty(), "not before its backoff");
        // The backoff over: handed out again, once.
        for seen in w.seen.values_mut() {
            if let Watched::Retry { at, .. } = &mut seen.state {
                *at = Instant::now();
            }
        }
        assert_eq!(w.scan().unwrap(), std::slice::from_ref(&file));
        assert!(w.scan().unwrap().is_empty());
        assert_eq!(w.retry_later(&file), Some(retry_backoff(2)));

        let mut once = Watch::new(dir.clone())
            .with_settle(std::time::Duration::ZERO)
            .with_max_attempts(1);
        assert_eq!(once.scan().unwrap(), std::slice::from_ref(&file));
        assert_eq!(once.retry_later(&file), None, "its one try is spent");
        assert!(!once.settling());
        assert!(once.scan().unwrap().is_empty());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// A file is handed out once its size and time have stood still for the settle time,
    /// counted from when that (size, time) was first seen: a change (a writer that paused,
    /// then wrote more) starts the wait over, however many scans saw the pause; a hidden file
    /// (one being written before its rename into place) is never handed out; a file removed
    /// is forgotten.
    #[test]
    fn a_file_waits_the_settle_time_from_its_last_change() {
        let dir = std::env::temp_dir().join(format!("tilegate-settle-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("a.tif");
        std::fs::write(&file, b"half").unwrap();
        std::fs::write(dir.join(".b.tif.tmp"), b"being written").unwrap();
        let mut w = Watch::new(dir.clone()).with_settle(std::time::Duration::from_secs(3600));
        for _ in 0..3 {
            assert!(
                w.scan().unwrap().is_empty(),
                "scans that agree are not enough"
            );
        }
        assert!(w.settling());
        // The settle time over for the half: then the writer writes the rest.
        let past = Instant::now()
            .checked_sub(std::time::Duration::from_secs(3601))
            .unwrap();
        w.seen.get_mut(&file).unwrap().since = past;
        std::fs::write(&file, b"half and the rest").unwrap();
        assert!(
            w.scan().unwrap().is_empty(),
            "changed: the wait starts over"
        );
        w.seen.get_mut(&file).unwrap().since = past;
        assert_eq!(w.scan().unwrap(), std::slice::from_ref(&file));
        assert!(w.scan().unwrap().is_empty(), "handed out once");
        assert!(!w.settling(), "the hidden file is not work to come");
        std::fs::remove_file(&file).unwrap();
        w.scan().unwrap();
        assert!(w.seen.is_empty(), "a removed file is forgotten");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// A GeoTIFF is whole; cut short anywhere — its pixels, its directory — it is said to be,
    /// with the byte it needed; a file that is not a TIFF is left to GDAL.
    #[test]
    fn a_tiff_cut_short_is_found_by_its_directories() {
        let dir = std::env::temp_dir().join(format!("tilegate-cut-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let whole = dir.join("whole.tif");
        tilegate_cog::sample_scene(&whole, &tilegate_cog::SampleOptions::new(256, 256)).unwrap();
        assert_eq!(tiff_cut_short(&whole).unwrap(), None);
        let bytes = std::fs::read(&whole).unwrap();
        let cut = dir.join("cut.tif");
        std::fs::write(&cut, &bytes[..bytes.len() / 2]).unwrap();
        let said = tiff_cut_short(&cut).unwrap().expect("cut short");
        assert!(said.contains("pixel data runs to byte"), "{said}");
        std::fs::write(&cut, &bytes[..20]).unwrap();
        let said = tiff_cut_short(&cut).unwrap().expect("cut short");
        assert!(said.contains("directory"), "{said}");
        for not_a_tiff in [&b"not a scene"[..], b"II", b""] {
            std::fs::write(&cut, not_a_tiff).unwrap();
            assert_eq!(tiff_cut_short(&cut).unwrap(), None);
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

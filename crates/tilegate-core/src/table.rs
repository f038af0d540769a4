//! The table contracts: jobs, the manifest, claims and per-job counters. Every write is
//! conditional in the storage engine itself (`attribute_not_exists`, a version guard, one
//! SQLite transaction); a failed condition is an outcome value, never an error.

use crate::UnixMillis;
use crate::error::StoreResult;
use crate::etag::ETag;
use crate::grid::{Grid, Window};
use crate::id::JobId;
use crate::keys::{Prefix, Tenant};
use crate::recipe::Recipe;
use crate::source::{SceneMeta, SourceInfo};
use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// A row with the version its last write gave it. Versions start at 1 and grow by one per
/// update; an update names the version it expects to replace.
#[derive(Debug, Clone, PartialEq)]
pub struct Versioned<T> {
    pub version: u64,
    pub row: T,
}

/// The result of a conditional create.
#[derive(Debug, Clone, PartialEq)]
pub enum CreateOutcome<T> {
    Created,
    /// A row was already there; here it is.
    AlreadyExists(Versioned<T>),
}

/// The result of a version-guarded update.
#[derive(Debug, Clone, PartialEq)]
pub enum UpdateOutcome<T> {
    Updated {
        version: u64,
    },
    /// The row is not at the expected version (or is gone); the current row if any.
    Superseded(Option<Versioned<T>>),
}

/// A planned job.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct JobRecord {
    pub job_id: JobId,
    pub source: SourceInfo,
    pub recipe: Recipe,
    pub grid: Grid,
    /// Where the outputs go: the tenant's root under the prefix the job was planned with.
    pub prefix: Prefix,
    #[serde(default, skip_serializing_if = "Tenant::is_default")]
    pub tenant: Tenant,
    pub scene: SceneMeta,
    pub created_at: UnixMillis,
    /// The assembled scene, once published.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scene_output: Option<OutputRef>,
    /// How many partitions the job's manifest rows are spread over (see
    /// [`manifest_partition`]); 1, the default, keeps them in one partition keyed by the job ID.
    #[serde(default = "one", skip_serializing_if = "is_one")]
    pub manifest_shards: u32,
    /// How often `tilegate dlq redrive` has resumed the job's dead-lettered windows: the
    /// generation an `incomplete` announcement belongs to.
    #[serde(default, skip_serializing_if = "is_zero_u32")]
    pub redrives: u32,
    /// The job's announcements, recorded with the changes they announce and marked as each
    /// sink acknowledges them ([`crate::announce`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub outbox: Vec<crate::announce::Announcement>,
    /// Whether every window was enqueued once (by `plan`, `ingest` or the reconciler): a
    /// duplicate notification of the same scene then enqueues nothing, and the reconciler
    /// knows a job whose planner died before enqueueing (`plan` itself still enqueues again
    /// on request).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub windows_enqueued: bool,
    /// Nothing is left to do for the job: it is published, or incomplete in its current
    /// redrive generation, and every announcement is delivered (`tilegate reconcile` sets it;
    /// a redrive clears it). A job that is not settled is **open**: every table keeps an index
    /// of open jobs with the row's own writes ([`JobTable::list_open_jobs`]), which the
    /// reconciler reads, so its cost follows the open jobs, never the finished ones.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub settled: bool,
}

impl JobRecord {
    /// Whether the job is in the index of open jobs.
    pub fn is_open(&self) -> bool {
        !self.settled
    }

    /// A job row as planning writes it: its ID derived from the source, recipe and where
    /// its outputs go, nothing recorded yet.
    pub fn planned(
        source: SourceInfo,
        recipe: Recipe,
        grid: Grid,
        prefix: Prefix,
        tenant: Tenant,
        scene: SceneMeta,
        manifest_shards: u32,
    ) -> Self {
        Self {
            job_id: JobId::of(&source, &recipe, &prefix, &tenant),
            source,
            recipe,
            grid,
            prefix,
            tenant,
            scene,
            created_at: crate::now_millis(),
            scene_output: None,
            manifest_shards: manifest_shards.clamp(1, MAX_MANIFEST_SHARDS),
            redrives: 0,
            outbox: Vec::new(),
            windows_enqueued: false,
            settled: false,
        }
    }

    /// What the job reads: its source, or a product tile's input scenes (its source is the
    /// tile itself, pinned by them). Every one is admitted and verified as a source is.
    pub fn sources(&self) -> Vec<&SourceInfo> {
        match &self.recipe.operation {
            crate::recipe::Operation::Product(p) => p.inputs.iter().map(|i| &i.source).collect(),
            _ => vec![&self.source],
        }
    }

    /// The job's published output: its scene COG, or a pyramid job's PMTiles archive — or,
    /// when its tiles go out as `z/x/y` objects alone, its TileJSON document.
    pub fn output_key(&self) -> crate::ObjectKey {
        match &self.recipe.operation {
            crate::recipe::Operation::Pyramid(p) if p.layout.pmtiles() => {
                self.prefix.pyramid_key(&self.job_id)
            }
            crate::recipe::Operation::Pyramid(_) => self.prefix.tilejson_key(&self.job_id),
            _ => self.prefix.scene_key(&self.job_id),
        }
    }
}

fn one() -> u32 {
    1
}

#[expect(
    clippy::trivially_copy_pass_by_ref,
    reason = "serde's skip_serializing_if passes a reference"
)]
fn is_one(v: &u32) -> bool {
    *v == 1
}

/// The most manifest shards a job may have (two decimal digits in the partition key).
pub const MAX_MANIFEST_SHARDS: u32 = 100;

/// The partition key of a job's manifest row for `window`: the job ID when the manifest is not
/// sharded, else `JOB#NN` with `NN` a hash of the window modulo `shards`. DynamoDB serves about
/// 1,000 writes/s per partition; `shards` partitions take `shards` times that.
pub fn manifest_partition(job: &JobId, window: Window, shards: u32) -> String {
    if shards <= 1 {
        return job.to_string();
    }
    format!("{job}#{:02}", manifest_shard(window, shards))
}

/// The shard (0-based) of `window`'s manifest row among `shards` (0 when not sharded).
pub fn manifest_shard(window: Window, shards: u32) -> u32 {
    if shards <= 1 {
        return 0;
    }
    // splitmix64 of the window: neighbouring windows (written together) land apart.
    let mut z =
        ((u64::from(window.row) << 32) | u64::from(window.col)).wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^= z >> 31;
    u32::try_from(z % u64::from(shards)).expect("below a u32")
}

/// Every partition key of a sharded manifest (one key when it is not sharded): counts and
/// listings query each.
pub fn manifest_partitions(job: &JobId, shards: u32) -> Vec<String> {
    if shards <= 1 {
        return vec![job.to_string()];
    }
    (0..shards).map(|n| format!("{job}#{n:02}")).collect()
}

/// How many of `grid`'s windows each of `shards` manifest partitions holds
/// ([`manifest_shard`]): a partition is complete when its row count reaches its size.
pub fn shard_sizes(grid: &Grid, shards: u32) -> Vec<u64> {
    let mut sizes = vec![0u64; shards.max(1) as usize];
    for w in grid.windows() {
        sizes[manifest_shard(w, shards) as usize] += 1;
    }
    sizes
}

/// Each job's manifest shard count, read from its job row once per process: the count never
/// changes after the row is created. A job without a row counts as unsharded and is not kept
/// (its row may come later).
#[derive(Debug, Default)]
pub struct ShardCounts(std::sync::Mutex<std::collections::HashMap<JobId, u32>>);

impl ShardCounts {
    /// `job`'s shard count, from `jobs` the first time.
    pub async fn of(&self, jobs: &dyn JobTable, job: &JobId) -> StoreResult<u32> {
        if let Some(n) = self.0.lock().expect("shard counts").get(job) {
            return Ok(*n);
        }
        let Some(row) = jobs.get_job(job).await? else {
            return Ok(1);
        };
        let n = row.row.manifest_shards.max(1);
        self.0.lock().expect("shard counts").insert(job.clone(), n);
        Ok(n)
    }
}

/// A published object, by exact key.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct OutputRef {
    pub key: String,
    pub e_tag: ETag,
    pub size: u64,
}

/// How a manifest row's tile came to be in place.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum TileOrigin {
    /// This worker's Create wrote it.
    Written,
    /// A duplicate had written it; size and ETag came from a HEAD.
    AlreadyPresent,
    /// A repair rewrote it under `If-Match`.
    Repaired,
}

/// One row per committed window.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ManifestEntry {
    pub job_id: JobId,
    pub window: Window,
    pub key: String,
    pub size: u64,
    pub e_tag: ETag,
    pub origin: TileOrigin,
    pub recorded_at: UnixMillis,
    /// What happened to the window and where its time went, for reports (empty on rows
    /// written before these were recorded, and on repairs).
    #[serde(default, skip_serializing_if = "WindowFacts::is_empty")]
    pub facts: WindowFacts,
}

/// What one window's worker saw, recorded on its manifest row so that a report is built from
/// rows, never from logs. Small on purpose: a few numbers and the worker's name.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct WindowFacts {
    /// The receive of the message that recorded the row (1 on a first delivery).
    #[serde(default, skip_serializing_if = "is_zero_u32")]
    pub attempt: u32,
    /// The worker that recorded the row (`host:pid`).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub worker: String,
    /// The tile was found in place before encoding, so encoding was skipped.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub encode_skipped: bool,
    /// Milliseconds from the message's enqueueing to its receive.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wait_ms: Option<u64>,
    /// Milliseconds reading the window from the source (the pin checks included).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub read_ms: Option<u64>,
    /// Milliseconds encoding the tile.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub encode_ms: Option<u64>,
    /// Milliseconds committing the tile (the create-if-absent write, and the HEAD after a
    /// refusal or before a skip).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub commit_ms: Option<u64>,
}

fn is_zero_u32(n: &u32) -> bool {
    *n == 0
}

impl WindowFacts {
    pub fn is_empty(&self) -> bool {
        *self == Self::default()
    }
}

/// Whether a claim's work is finished.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum ClaimState {
    Held,
    Done,
}

/// A lease on a resource (a scene output), guarded by owner and fencing token.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ClaimRecord {
    pub resource: String,
    pub owner: String,
    /// Grows by one on every successful acquisition, takeovers included.
    pub fencing_token: u64,
    pub expires_at: UnixMillis,
    pub state: ClaimState,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<OutputRef>,
}

impl ClaimRecord {
    /// Whether a new owner may take this claim at `now`: it expired and is not done.
    pub fn takeable(&self, now: UnixMillis) -> bool {
        self.expires_at < now && self.state != ClaimState::Done
    }

    /// The claim `owner` would hold after acquiring `resource` at `now` until `expires_at`,
    /// given what is stored (`current`): a first claim (token 1) or a takeover of an expired,
    /// unfinished one (token + 1), or the current claim if it cannot be taken.
    pub fn acquire(
        current: Option<&Versioned<Self>>,
        resource: &str,
        owner: &str,
        now: UnixMillis,
        expires_at: UnixMillis,
    ) -> AcquireOutcome {
        let (fencing_token, version) = match current {
            None => (1, 1),
            Some(c) if c.row.takeable(now) => (c.row.fencing_token + 1, c.version + 1),
            Some(c) => return AcquireOutcome::Existing(c.clone()),
        };
        AcquireOutcome::Acquired(Versioned {
            version,
            row: Self {
                resource: resource.to_owned(),
                owner: owner.to_owned(),
                fencing_token,
                expires_at,
                state: ClaimState::Held,
                output: None,
            },
        })
    }

    /// Whether `owner` with `fencing_token` may make `change`: it must hold the claim, and
    /// renew and complete only while the claim is held (not done).
    pub fn allows(&self, owner: &str, fencing_token: u64, change: &ClaimChange) -> bool {
        let holds = self.owner == owner && self.fencing_token == fencing_token;
        match change {
            ClaimChange::Renew { .. } | ClaimChange::Complete { .. } => {
                holds && self.state == ClaimState::Held
            }
            ClaimChange::Release => holds,
        }
    }

    /// The claim after `change` (which [`Self::allows`] allowed).
    pub fn changed(&self, change: ClaimChange) -> Self {
        let mut next = self.clone();
        match change {
            ClaimChange::Renew { expires_at } => next.expires_at = expires_at,
            ClaimChange::Complete { output } => {
                next.state = ClaimState::Done;
                next.output = Some(output);
            }
            // Expired at once: `expires_at < now` holds for any later acquirer. The state is
            // kept, so releasing a done claim never reopens it.
            ClaimChange::Release => next.expires_at = UnixMillis::MIN,
        }
        next
    }
}

/// The result of trying to acquire a claim.
#[derive(Debug, Clone, PartialEq)]
pub enum AcquireOutcome {
    /// This owner holds the claim now, with a new fencing token.
    Acquired(Versioned<ClaimRecord>),
    /// Someone else holds it (unexpired) or it is done.
    Existing(Versioned<ClaimRecord>),
}

/// A change a claim holder makes, guarded by owner and fencing token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClaimChange {
    /// Extend the lease.
    Renew { expires_at: UnixMillis },
    /// Mark the work done with its output.
    Complete { output: OutputRef },
    /// Give the claim up so another owner may take it at once.
    Release,
}

/// Jobs.
#[async_trait]
pub trait JobTable: Send + Sync + std::fmt::Debug {
    /// Create if absent; an existing row means "already planned".
    async fn create_job(&self, job: &JobRecord) -> StoreResult<CreateOutcome<JobRecord>>;
    async fn get_job(&self, id: &JobId) -> StoreResult<Option<Versioned<JobRecord>>>;
    /// Replace the row only if it is at `expected` version.
    async fn update_job(
        &self,
        job: &JobRecord,
        expected: u64,
    ) -> StoreResult<UpdateOutcome<JobRecord>>;
    /// Jobs, newest first, at most `limit`.
    async fn list_jobs(&self, limit: usize) -> StoreResult<Vec<Versioned<JobRecord>>>;
    /// `tenant`'s jobs, newest first (ties by job ID), at most `limit`: read through an index
    /// on (tenant, created_at), so the rows read are the tenant's own however many other
    /// tenants' jobs the table holds.
    async fn list_jobs_of(
        &self,
        tenant: &Tenant,
        limit: usize,
    ) -> StoreResult<Vec<Versioned<JobRecord>>>;
    /// Open jobs ([`JobRecord::is_open`]), oldest first (ties by job ID), at most `limit`:
    /// read through an index that holds open jobs only (a partial index, a sparse GSI), kept
    /// by the row's own writes — so the rows read are the open ones however many finished
    /// jobs the table holds.
    async fn list_open_jobs(&self, limit: usize) -> StoreResult<Vec<Versioned<JobRecord>>>;
}

/// The manifest: one row per committed window; the assembler counts these, never objects.
#[async_trait]
pub trait ManifestTable: Send + Sync + std::fmt::Debug {
    /// Create if absent, and count the row in its partition's counter in the same atomic step
    /// (a transaction, or the row's own presence where a count of it is as cheap): a row is
    /// counted exactly once however often it is put.
    async fn put_entry(&self, e: &ManifestEntry) -> StoreResult<CreateOutcome<ManifestEntry>>;
    /// Replace only if at `expected` version.
    async fn update_entry(
        &self,
        e: &ManifestEntry,
        expected: u64,
    ) -> StoreResult<UpdateOutcome<ManifestEntry>>;
    async fn get_entry(
        &self,
        job: &JobId,
        w: Window,
    ) -> StoreResult<Option<Versioned<ManifestEntry>>>;
    /// Every row of a job, ordered by window.
    async fn list_entries(&self, job: &JobId) -> StoreResult<Vec<Versioned<ManifestEntry>>>;
    /// Number of rows of a job in each of its manifest partitions ([`manifest_partitions`]
    /// order): the rows themselves counted, one count request per partition, as the backends
    /// store them — what the assembler checks before it mosaics.
    async fn count_partitions(&self, job: &JobId) -> StoreResult<Vec<(String, u64)>>;
    /// Rows recorded in one manifest partition of a job (`shard`, 0-based, of
    /// [`manifest_partitions`]), read from the partition's row counter, which
    /// [`put_entry`](Self::put_entry) advances in the same atomic step as the row it creates:
    /// one small strongly consistent read however many rows the partition holds — the cheap
    /// half of a completion check ([`shard_sizes`]).
    async fn recorded(&self, job: &JobId, shard: u32) -> StoreResult<u64>;
    /// Every partition's row counter ([`recorded`](Self::recorded)), in
    /// [`manifest_partitions`] order: one request where the table batches reads. By default
    /// the rows counted, for tables whose count of a partition is its counter.
    async fn recorded_all(&self, job: &JobId) -> StoreResult<Vec<u64>> {
        Ok(self
            .count_partitions(job)
            .await?
            .into_iter()
            .map(|(_, n)| n)
            .collect())
    }
    /// Number of rows of a job, across its partitions.
    async fn count_entries(&self, job: &JobId) -> StoreResult<u64> {
        Ok(self
            .count_partitions(job)
            .await?
            .iter()
            .map(|(_, n)| n)
            .sum())
    }
}

/// Claims (leases) for the claim gate.
#[async_trait]
pub trait ClaimTable: Send + Sync + std::fmt::Debug {
    /// Acquire in one conditional write: succeeds if no claim exists, or the existing one
    /// expired (`expires_at < now`) and is not done. The backend assigns the fencing token
    /// (previous + 1, or 1).
    async fn acquire(
        &self,
        resource: &str,
        owner: &str,
        now: UnixMillis,
        expires_at: UnixMillis,
    ) -> StoreResult<AcquireOutcome>;
    /// Apply a change only if `owner` and `fencing_token` still hold the claim (and, for
    /// renew and complete, it is not done).
    async fn change(
        &self,
        resource: &str,
        owner: &str,
        fencing_token: u64,
        change: ClaimChange,
    ) -> StoreResult<UpdateOutcome<ClaimRecord>>;
    async fn get_claim(&self, resource: &str) -> StoreResult<Option<Versioned<ClaimRecord>>>;
}

/// Per-job counters, added atomically by every worker (`ADD` on DynamoDB, `+=` in SQLite).
#[async_trait]
pub trait CounterTable: Send + Sync + std::fmt::Debug {
    async fn add_counters(&self, job: &JobId, deltas: &[(&str, u64)]) -> StoreResult<()>;
    async fn get_counters(&self, job: &JobId) -> StoreResult<BTreeMap<String, u64>>;
}

//! The service model: a wrapper over any [`Backends`] that turns each call into the billed
//! request(s) `tilegate-aws` would send for it (S3, DynamoDB, SQS), counts them, and — when
//! enforcing — delays each by a latency drawn from the service's distribution and refuses
//! what a partition's throughput limit would refuse, retrying as tilegate's AWS stores retry
//! (five attempts, full-jitter exponential backoff from 50 ms to 5 s; the SDK's own retries
//! are off). A request that is still throttled after the last attempt is a retryable
//! [`StoreError`], which the worker handles as it would handle a real one.
//!
//! Limits are per partition per second of (simulated) time, fixed windows:
//! DynamoDB 1,000 write units and 3,000 read units per partition key; S3 3,500 writes and
//! 5,500 reads per second per prefix (the key's parent "directory"); SQS standard queues have
//! no request-rate limit but 120,000 messages in flight. Randomness comes from one seeded
//! generator, drawn in request order: on a paused current-thread runtime that order, and so
//! the whole run, is the same for the same seed.

use async_trait::async_trait;
use bytes::Bytes;
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};
use tilegate_core::grid::Window;
use tilegate_core::id::JobId;
use tilegate_core::ledger::LedgerTable;
use tilegate_core::object::{
    DeleteOptions, DeleteOutcome, GetOptions, GetOutcome, MultipartUpload, ObjectMeta, ObjectStore,
    PartId, PutMode, PutOptions, PutOutcome,
};
use tilegate_core::queue::{
    AckOutcome, DeadLetter, QueueDepth, ReceiveOptions, Received, WorkQueue,
};
use tilegate_core::table::{
    AcquireOutcome, ClaimChange, ClaimRecord, ClaimTable, CounterTable, CreateOutcome, JobRecord,
    JobTable, ManifestEntry, ManifestTable, ShardCounts, UpdateOutcome, Versioned,
    manifest_partition,
};
use tilegate_core::{Backends, ObjectKey, Retry, StoreError, StoreResult, UnixMillis};

/// Bytes of a manifest row as DynamoDB sizes it (window facts included), for Query billing.
const MANIFEST_ROW_BYTES: u64 = 400;
/// DynamoDB returns at most 1 MB per Query page.
const QUERY_PAGE_BYTES: u64 = 1 << 20;
/// One read unit per 4 KB read (strongly consistent).
const READ_UNIT_BYTES: u64 = 4096;

/// A small, seedable generator (splitmix64): the same seed gives the same draws.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Self(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1).
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// A standard normal draw (Box–Muller).
    pub fn normal(&mut self) -> f64 {
        let u1 = self.unit().max(f64::MIN_POSITIVE);
        let u2 = self.unit();
        (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
    }
}

/// A stateless draw for `key` under `seed`: the same for the same inputs, whatever order
/// tasks run in.
pub fn hashed_unit(seed: u64, key: &[u64]) -> f64 {
    let mut r = Rng::new(seed);
    for k in key {
        r.0 ^= r.next_u64() ^ k;
    }
    r.unit()
}

/// A log-normal latency given by its median and 99th percentile, in milliseconds.
#[derive(Debug, Clone, Copy, serde::Serialize)]
pub struct Latency {
    pub median_ms: f64,
    pub p99_ms: f64,
}

impl Latency {
    pub const fn new(median_ms: f64, p99_ms: f64) -> Self {
        Self { median_ms, p99_ms }
    }

    /// A draw from the distribution.
    pub fn draw(&self, z: f64) -> Duration {
        if self.median_ms <= 0.0 {
            return Duration::ZERO;
        }
        let sigma = (self.p99_ms / self.median_ms).ln().max(0.0) / 2.326;
        Duration::from_secs_f64(self.median_ms * (sigma * z).exp() / 1000.0)
    }
}

/// The services' limits and latencies.
#[derive(Debug, Clone, serde::Serialize)]
pub struct ServiceModel {
    /// Apply latencies and limits (false: only count, as for an embedded run).
    pub enforce: bool,
    pub dynamo_writes_per_partition: f64,
    pub dynamo_reads_per_partition: f64,
    pub s3_writes_per_prefix: f64,
    pub s3_reads_per_prefix: f64,
    pub sqs_in_flight_limit: u64,
    pub s3_latency: Latency,
    pub s3_put_latency: Latency,
    pub dynamo_latency: Latency,
    pub sqs_latency: Latency,
    /// tilegate's retry of a throttled request: attempts, and the backoff's base and cap.
    pub retry_attempts: u32,
    pub retry_base: Duration,
    pub retry_cap: Duration,
}

impl Default for ServiceModel {
    fn default() -> Self {
        Self {
            enforce: true,
            dynamo_writes_per_partition: 1000.0,
            dynamo_reads_per_partition: 3000.0,
            s3_writes_per_prefix: 3500.0,
            s3_reads_per_prefix: 5500.0,
            sqs_in_flight_limit: 120_000,
            s3_latency: Latency::new(15.0, 80.0),
            s3_put_latency: Latency::new(35.0, 200.0),
            dynamo_latency: Latency::new(6.0, 25.0),
            sqs_latency: Latency::new(10.0, 50.0),
            retry_attempts: 5,
            retry_base: Duration::from_millis(50),
            retry_cap: Duration::from_secs(5),
        }
    }
}

impl ServiceModel {
    /// Count requests only: no latency, no limits.
    pub fn counting() -> Self {
        Self {
            enforce: false,
            ..Self::default()
        }
    }
}

/// What the model saw.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct Tally {
    /// Requests that the service accepted (the billed ones), by "service op".
    pub requests: BTreeMap<String, u64>,
    /// Requests refused for throughput (ProvisionedThroughputExceeded, SlowDown), by service.
    pub throttled: BTreeMap<String, u64>,
    /// Throttled requests by partition (DynamoDB key or S3 prefix), the hottest first when
    /// reported.
    pub throttled_partitions: BTreeMap<String, u64>,
    /// Retries after a throttle.
    pub retries: u64,
    /// Requests still throttled after the last attempt (a retryable error to the caller).
    pub exhausted: u64,
    /// The busiest second's units in the busiest partition, by "service read|write".
    pub peak_units_per_s: BTreeMap<String, f64>,
}

impl Tally {
    pub fn total_requests(&self) -> u64 {
        self.requests.values().sum()
    }

    pub fn requests_of(&self, service: &str) -> u64 {
        self.requests
            .iter()
            .filter(|(k, _)| k.split(' ').next() == Some(service))
            .map(|(_, v)| v)
            .sum()
    }
}

/// A partition's use of its per-second budget.
#[derive(Debug, Clone, Copy)]
enum Budget {
    DynamoWrite,
    DynamoRead,
    S3Write,
    S3Read,
}

impl Budget {
    fn name(self) -> &'static str {
        match self {
            Self::DynamoWrite | Self::S3Write => "write",
            Self::DynamoRead | Self::S3Read => "read",
        }
    }
}

/// One billed request.
struct Req<'a> {
    service: &'static str,
    op: &'static str,
    /// The partitions it lands on and what it uses on each (none: no partition limit; a
    /// transaction or a batch read lands on several, and is refused when any is over budget).
    partitions: &'a [(&'a str, Budget, f64)],
}

#[derive(Debug)]
struct State {
    rng: Rng,
    tally: Tally,
    /// (budget kind, partition) → (second, units used in it).
    buckets: HashMap<(u8, String), (u64, f64)>,
}

/// The model shared by every wrapped store of one simulation.
#[derive(Debug)]
pub struct Model {
    cfg: ServiceModel,
    start: tokio::time::Instant,
    state: Mutex<State>,
}

#[derive(Debug, thiserror::Error)]
#[error("{service} throttled the request ({code}) on `{partition}` {attempts} times")]
struct Throttled {
    service: &'static str,
    code: &'static str,
    partition: String,
    attempts: u32,
}

impl Model {
    pub fn new(cfg: ServiceModel, seed: u64) -> Arc<Self> {
        Arc::new(Self {
            cfg,
            start: tokio::time::Instant::now(),
            state: Mutex::new(State {
                rng: Rng::new(seed),
                tally: Tally::default(),
                buckets: HashMap::new(),
            }),
        })
    }

    pub fn tally(&self) -> Tally {
        self.state.lock().expect("model lock").tally.clone()
    }

    fn limit(&self, b: Budget) -> f64 {
        match b {
            Budget::DynamoWrite => self.cfg.dynamo_writes_per_partition,
            Budget::DynamoRead => self.cfg.dynamo_reads_per_partition,
            Budget::S3Write => self.cfg.s3_writes_per_prefix,
            Budget::S3Read => self.cfg.s3_reads_per_prefix,
        }
    }

    fn latency(&self, r: &Req<'_>) -> Latency {
        match (r.service, r.op) {
            ("s3", "PutObject" | "UploadPart" | "CompleteMultipartUpload") => {
                self.cfg.s3_put_latency
            }
            ("s3", _) => self.cfg.s3_latency,
            ("dynamodb", _) => self.cfg.dynamo_latency,
            _ => self.cfg.sqs_latency,
        }
    }

    /// Send one request: counted, delayed, and retried while its partition is over budget.
    async fn send(&self, r: Req<'_>) -> StoreResult<()> {
        let mut attempt = 0u32;
        loop {
            attempt += 1;
            let (refused_by, delay) = {
                let mut st = self.state.lock().expect("model lock");
                // The first partition over its budget, which refuses the whole request.
                let mut over: Option<(&str, Budget)> = None;
                if self.cfg.enforce && !r.partitions.is_empty() {
                    let second = self.start.elapsed().as_secs();
                    over = r.partitions.iter().find_map(|&(partition, budget, units)| {
                        let slot = st
                            .buckets
                            .entry((budget as u8, partition.to_owned()))
                            .or_insert((second, 0.0));
                        if slot.0 != second {
                            *slot = (second, 0.0);
                        }
                        (slot.1 + units > self.limit(budget)).then_some((partition, budget))
                    });
                    if over.is_none() {
                        for &(partition, budget, units) in r.partitions {
                            let slot = st
                                .buckets
                                .get_mut(&(budget as u8, partition.to_owned()))
                                .expect("entered above");
                            slot.1 += units;
                            let used = slot.1;
                            let peak = st
                                .tally
                                .peak_units_per_s
                                .entry(format!("{} {}", r.service, budget.name()))
                                .or_default();
                            *peak = peak.max(used);
                        }
                    }
                }
                let throttled = over.is_some();
                if let Some((p, budget)) = over {
                    *st.tally.throttled.entry(r.service.to_owned()).or_default() += 1;
                    let kind = budget.name();
                    *st.tally
                        .throttled_partitions
                        .entry(format!("{} {kind} {p}", r.service))
                        .or_default() += 1;
                } else {
                    *st.tally
                        .requests
                        .entry(format!("{} {}", r.service, r.op))
                        .or_default() += 1;
                }
                let delay = if self.cfg.enforce {
                    let z = st.rng.normal();
                    let mut d = self.latency(&r).draw(z);
                    if throttled {
                        let exp = self
                            .cfg
                            .retry_base
                            .saturating_mul(1u32 << (attempt - 1).min(16))
                            .min(self.cfg.retry_cap);
                        d += exp.mul_f64(st.rng.unit());
                        if attempt < self.cfg.retry_attempts {
                            st.tally.retries += 1;
                        } else {
                            st.tally.exhausted += 1;
                        }
                    }
                    d
                } else {
                    Duration::ZERO
                };
                (over.map(|(p, _)| p.to_owned()), delay)
            };
            if !delay.is_zero() {
                tokio::time::sleep(delay).await;
            }
            let Some(partition) = refused_by else {
                return Ok(());
            };
            if attempt >= self.cfg.retry_attempts {
                let code = if r.service == "s3" {
                    "SlowDown"
                } else {
                    "ProvisionedThroughputExceededException"
                };
                return Err(StoreError::backend(
                    r.op,
                    &partition,
                    Retry::Retryable,
                    Throttled {
                        service: r.service,
                        code,
                        partition: partition.clone(),
                        attempts: attempt,
                    },
                ));
            }
        }
    }

    async fn s3(&self, op: &'static str, key: &str, write: bool) -> StoreResult<()> {
        let prefix = key.rsplit_once('/').map_or("", |(p, _)| p);
        let budget = if write {
            Budget::S3Write
        } else {
            Budget::S3Read
        };
        self.send(Req {
            service: "s3",
            op,
            partitions: &[(prefix, budget, 1.0)],
        })
        .await
    }

    async fn dynamo(
        &self,
        op: &'static str,
        pk: &str,
        budget: Budget,
        units: f64,
    ) -> StoreResult<()> {
        self.send(Req {
            service: "dynamodb",
            op,
            partitions: &[(pk, budget, units)],
        })
        .await
    }

    /// One DynamoDB request landing on several partitions (a transaction, a batch read).
    async fn dynamo_across(
        &self,
        op: &'static str,
        partitions: &[(&str, Budget, f64)],
    ) -> StoreResult<()> {
        self.send(Req {
            service: "dynamodb",
            op,
            partitions,
        })
        .await
    }

    async fn sqs(&self, op: &'static str) -> StoreResult<()> {
        self.send(Req {
            service: "sqs",
            op,
            partitions: &[],
        })
        .await
    }

    /// A paged Query over `rows` rows of one partition: one request per 1 MB page, each
    /// billed its read units.
    async fn query(&self, pk: &str, rows: u64) -> StoreResult<()> {
        let bytes = rows * MANIFEST_ROW_BYTES;
        let pages = bytes.div_ceil(QUERY_PAGE_BYTES).max(1);
        for page in 0..pages {
            let in_page = (bytes - page * QUERY_PAGE_BYTES).min(QUERY_PAGE_BYTES);
            let units = in_page.div_ceil(READ_UNIT_BYTES).max(1) as f64;
            self.dynamo("Query", pk, Budget::DynamoRead, units).await?;
        }
        Ok(())
    }
}

/// The partition key of manifest partition `pk`'s row counter item (as `tilegate-aws` keys it).
fn rows_counter(pk: &str) -> String {
    format!("{pk}#rows")
}

/// [`Backends`] behind the model. The ledger and remote sources are passed through unmodelled
/// (a simulation does not regenerate).
#[derive(Debug, Clone)]
pub struct Modelled {
    inner: Backends,
    model: Arc<Model>,
    /// Each job's manifest shard count (read unbilled from the inner table once).
    shards: Arc<ShardCounts>,
    /// Fraction of sent messages that the queue delivers twice.
    duplicates: f64,
    dup_rng: Arc<Mutex<Rng>>,
    duplicated: Arc<std::sync::atomic::AtomicU64>,
}

impl Modelled {
    /// `inner` behind `model`; the queue delivers a `duplicates` fraction of messages twice.
    pub fn wrap(
        inner: Backends,
        model: Arc<Model>,
        duplicates: f64,
        seed: u64,
    ) -> (Backends, Self) {
        let me = Self {
            inner: inner.clone(),
            model,
            shards: Arc::default(),
            duplicates,
            dup_rng: Arc::new(Mutex::new(Rng::new(seed ^ 0xd1b5_4a32_d192_ed03))),
            duplicated: Arc::default(),
        };
        let b = Backends {
            objects: Arc::new(me.clone()),
            jobs: Arc::new(me.clone()),
            manifest: Arc::new(me.clone()),
            claims: Arc::new(me.clone()),
            counters: Arc::new(me.clone()),
            ledger: Arc::clone(&inner.ledger) as Arc<dyn LedgerTable>,
            queue: Arc::new(me.clone()),
            sources: inner.sources.clone(),
        };
        (b, me)
    }
}

impl Modelled {
    /// Messages the queue delivered a second time.
    pub fn duplicated(&self) -> u64 {
        self.duplicated.load(std::sync::atomic::Ordering::Relaxed)
    }

    async fn manifest_pk(&self, job: &JobId, w: Window) -> StoreResult<String> {
        let shards = self.shards.of(self.inner.jobs.as_ref(), job).await?;
        Ok(manifest_partition(job, w, shards))
    }
}

#[async_trait]
impl ObjectStore for Modelled {
    fn name(&self) -> &'static str {
        "modelled"
    }

    async fn head(&self, key: &ObjectKey) -> StoreResult<Option<ObjectMeta>> {
        self.model.s3("HeadObject", key, false).await?;
        self.inner.objects.head(key).await
    }

    async fn get_opts(&self, key: &ObjectKey, opts: GetOptions) -> StoreResult<GetOutcome> {
        self.model.s3("GetObject", key, false).await?;
        self.inner.objects.get_opts(key, opts).await
    }

    async fn put_opts(
        &self,
        key: &ObjectKey,
        bytes: Bytes,
        opts: PutOptions,
    ) -> StoreResult<PutOutcome> {
        self.model.s3("PutObject", key, true).await?;
        self.inner.objects.put_opts(key, bytes, opts).await
    }

    async fn delete_opts(
        &self,
        key: &ObjectKey,
        opts: DeleteOptions,
    ) -> StoreResult<DeleteOutcome> {
        self.model.s3("DeleteObject", key, true).await?;
        self.inner.objects.delete_opts(key, opts).await
    }

    async fn list(&self, prefix: &str) -> StoreResult<Vec<ObjectMeta>> {
        let listed = self.inner.objects.list(prefix).await?;
        // ListObjectsV2 returns 1,000 keys a page.
        for _ in 0..listed.len().div_ceil(1000).max(1) {
            self.model
                .s3("ListObjectsV2", &format!("{prefix}/"), false)
                .await?;
        }
        Ok(listed)
    }

    async fn create_multipart(&self, key: &ObjectKey, opts: &PutOptions) -> StoreResult<String> {
        self.model.s3("CreateMultipartUpload", key, true).await?;
        self.inner.objects.create_multipart(key, opts).await
    }

    async fn upload_part(
        &self,
        key: &ObjectKey,
        upload_id: &str,
        part_number: u32,
        bytes: Bytes,
    ) -> StoreResult<PartId> {
        self.model.s3("UploadPart", key, true).await?;
        self.inner
            .objects
            .upload_part(key, upload_id, part_number, bytes)
            .await
    }

    async fn complete_multipart(
        &self,
        key: &ObjectKey,
        upload_id: &str,
        parts: &[PartId],
        mode: &PutMode,
    ) -> StoreResult<PutOutcome> {
        self.model.s3("CompleteMultipartUpload", key, true).await?;
        self.inner
            .objects
            .complete_multipart(key, upload_id, parts, mode)
            .await
    }

    async fn abort_multipart(&self, key: &ObjectKey, upload_id: &str) -> StoreResult<()> {
        self.model.s3("AbortMultipartUpload", key, true).await?;
        self.inner.objects.abort_multipart(key, upload_id).await
    }

    async fn list_multipart(
        &self,
        prefix: &str,
        older_than: Option<SystemTime>,
    ) -> StoreResult<Vec<MultipartUpload>> {
        self.model
            .s3("ListMultipartUploads", &format!("{prefix}/"), false)
            .await?;
        self.inner.objects.list_multipart(prefix, older_than).await
    }
}

#[async_trait]
impl JobTable for Modelled {
    async fn create_job(&self, job: &JobRecord) -> StoreResult<CreateOutcome<JobRecord>> {
        // A job row with its CRS's WKT is a few KB: a few write units.
        self.model
            .dynamo("PutItem", job.job_id.as_str(), Budget::DynamoWrite, 4.0)
            .await?;
        self.inner.jobs.create_job(job).await
    }

    async fn get_job(&self, id: &JobId) -> StoreResult<Option<Versioned<JobRecord>>> {
        self.model
            .dynamo("GetItem", id.as_str(), Budget::DynamoRead, 1.0)
            .await?;
        self.inner.jobs.get_job(id).await
    }

    async fn update_job(
        &self,
        job: &JobRecord,
        expected: u64,
    ) -> StoreResult<UpdateOutcome<JobRecord>> {
        self.model
            .dynamo("PutItem", job.job_id.as_str(), Budget::DynamoWrite, 4.0)
            .await?;
        self.inner.jobs.update_job(job, expected).await
    }

    async fn list_jobs(&self, limit: usize) -> StoreResult<Vec<Versioned<JobRecord>>> {
        self.model
            .dynamo("Query", "job", Budget::DynamoRead, 1.0)
            .await?;
        self.inner.jobs.list_jobs(limit).await
    }

    async fn list_jobs_of(
        &self,
        tenant: &tilegate_core::Tenant,
        limit: usize,
    ) -> StoreResult<Vec<Versioned<JobRecord>>> {
        self.model
            .dynamo("Query", tenant.as_str(), Budget::DynamoRead, 1.0)
            .await?;
        self.inner.jobs.list_jobs_of(tenant, limit).await
    }

    async fn list_open_jobs(&self, limit: usize) -> StoreResult<Vec<Versioned<JobRecord>>> {
        self.model
            .dynamo("Query", "open", Budget::DynamoRead, 1.0)
            .await?;
        self.inner.jobs.list_open_jobs(limit).await
    }
}

#[async_trait]
impl ManifestTable for Modelled {
    async fn put_entry(&self, e: &ManifestEntry) -> StoreResult<CreateOutcome<ManifestEntry>> {
        // One TransactWriteItems: the row and its partition's counter item, each billed two
        // write units (a transaction's price).
        let pk = self.manifest_pk(&e.job_id, e.window).await?;
        let counter = rows_counter(&pk);
        self.model
            .dynamo_across(
                "TransactWriteItems",
                &[
                    (&pk, Budget::DynamoWrite, 2.0),
                    (&counter, Budget::DynamoWrite, 2.0),
                ],
            )
            .await?;
        self.inner.manifest.put_entry(e).await
    }

    async fn update_entry(
        &self,
        e: &ManifestEntry,
        expected: u64,
    ) -> StoreResult<UpdateOutcome<ManifestEntry>> {
        let pk = self.manifest_pk(&e.job_id, e.window).await?;
        self.model
            .dynamo("PutItem", &pk, Budget::DynamoWrite, 1.0)
            .await?;
        self.inner.manifest.update_entry(e, expected).await
    }

    async fn get_entry(
        &self,
        job: &JobId,
        w: Window,
    ) -> StoreResult<Option<Versioned<ManifestEntry>>> {
        let pk = self.manifest_pk(job, w).await?;
        self.model
            .dynamo("GetItem", &pk, Budget::DynamoRead, 1.0)
            .await?;
        self.inner.manifest.get_entry(job, w).await
    }

    async fn list_entries(&self, job: &JobId) -> StoreResult<Vec<Versioned<ManifestEntry>>> {
        for (pk, rows) in self.inner.manifest.count_partitions(job).await? {
            self.model.query(&pk, rows).await?;
        }
        self.inner.manifest.list_entries(job).await
    }

    async fn recorded(&self, job: &JobId, shard: u32) -> StoreResult<u64> {
        // One GetItem of the partition's counter item, strongly consistent.
        let counts = self.inner.manifest.count_partitions(job).await?;
        let Some((pk, rows)) = counts.get(shard as usize) else {
            return Ok(0);
        };
        self.model
            .dynamo("GetItem", &rows_counter(pk), Budget::DynamoRead, 1.0)
            .await?;
        Ok(*rows)
    }

    async fn recorded_all(&self, job: &JobId) -> StoreResult<Vec<u64>> {
        // One BatchGetItem of every partition's counter item.
        let counts = self.inner.manifest.count_partitions(job).await?;
        let counters: Vec<String> = counts.iter().map(|(pk, _)| rows_counter(pk)).collect();
        let reads: Vec<(&str, Budget, f64)> = counters
            .iter()
            .map(|c| (c.as_str(), Budget::DynamoRead, 1.0))
            .collect();
        self.model.dynamo_across("BatchGetItem", &reads).await?;
        Ok(counts.into_iter().map(|(_, n)| n).collect())
    }

    async fn count_partitions(&self, job: &JobId) -> StoreResult<Vec<(String, u64)>> {
        let counts = self.inner.manifest.count_partitions(job).await?;
        for (pk, rows) in &counts {
            self.model.query(pk, *rows).await?;
        }
        Ok(counts)
    }
}

#[async_trait]
impl ClaimTable for Modelled {
    async fn acquire(
        &self,
        resource: &str,
        owner: &str,
        now: UnixMillis,
        expires_at: UnixMillis,
    ) -> StoreResult<AcquireOutcome> {
        self.model
            .dynamo("UpdateItem", resource, Budget::DynamoWrite, 1.0)
            .await?;
        self.inner
            .claims
            .acquire(resource, owner, now, expires_at)
            .await
    }

    async fn change(
        &self,
        resource: &str,
        owner: &str,
        fencing_token: u64,
        change: ClaimChange,
    ) -> StoreResult<UpdateOutcome<ClaimRecord>> {
        self.model
            .dynamo("UpdateItem", resource, Budget::DynamoWrite, 1.0)
            .await?;
        self.inner
            .claims
            .change(resource, owner, fencing_token, change)
            .await
    }

    async fn get_claim(&self, resource: &str) -> StoreResult<Option<Versioned<ClaimRecord>>> {
        self.model
            .dynamo("GetItem", resource, Budget::DynamoRead, 1.0)
            .await?;
        self.inner.claims.get_claim(resource).await
    }
}

#[async_trait]
impl CounterTable for Modelled {
    async fn add_counters(&self, job: &JobId, deltas: &[(&str, u64)]) -> StoreResult<()> {
        // One UpdateItem with an ADD per counter on the job's counter item (a few KB).
        let pk = format!("counters/{job}");
        self.model
            .dynamo("UpdateItem", &pk, Budget::DynamoWrite, 3.0)
            .await?;
        self.inner.counters.add_counters(job, deltas).await
    }

    async fn get_counters(&self, job: &JobId) -> StoreResult<BTreeMap<String, u64>> {
        let pk = format!("counters/{job}");
        self.model
            .dynamo("GetItem", &pk, Budget::DynamoRead, 1.0)
            .await?;
        self.inner.counters.get_counters(job).await
    }
}

#[async_trait]
impl WorkQueue for Modelled {
    fn name(&self) -> &'static str {
        "modelled"
    }

    fn max_receive_count(&self) -> u32 {
        self.inner.queue.max_receive_count()
    }

    async fn send_batch(&self, bodies: &[String]) -> StoreResult<()> {
        let mut all: Vec<String> = bodies.to_vec();
        if self.duplicates > 0.0 {
            let mut rng = self.dup_rng.lock().expect("duplicate draws");
            for b in bodies {
                if rng.unit() < self.duplicates {
                    all.push(b.clone());
                    self.duplicated
                        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                }
            }
        }
        // SendMessageBatch carries 10 messages; SQS's own duplicate deliveries cost the sender
        // nothing, so only the sender's batches are billed.
        for _ in 0..bodies.len().div_ceil(10) {
            self.model.sqs("SendMessageBatch").await?;
        }
        self.inner.queue.send_batch(&all).await
    }

    async fn receive(&self, opts: ReceiveOptions) -> StoreResult<Vec<Received>> {
        let d = self.inner.queue.depth().await?;
        if self.model.cfg.enforce && d.in_flight >= self.model.cfg.sqs_in_flight_limit {
            // OverLimit: the receive returns nothing until messages are deleted.
            self.model.sqs("ReceiveMessage").await?;
            tokio::time::sleep(opts.wait).await;
            return Ok(Vec::new());
        }
        self.model.sqs("ReceiveMessage").await?;
        self.inner.queue.receive(opts).await
    }

    async fn ack(&self, receipt: &str) -> StoreResult<AckOutcome> {
        self.model.sqs("DeleteMessage").await?;
        self.inner.queue.ack(receipt).await
    }

    async fn ack_batch(&self, receipts: &[String]) -> StoreResult<Vec<AckOutcome>> {
        for _ in 0..receipts.len().div_ceil(10) {
            self.model.sqs("DeleteMessageBatch").await?;
        }
        self.inner.queue.ack_batch(receipts).await
    }

    async fn change_visibility(&self, receipt: &str, timeout: Duration) -> StoreResult<AckOutcome> {
        self.model.sqs("ChangeMessageVisibility").await?;
        self.inner.queue.change_visibility(receipt, timeout).await
    }

    async fn dead_letter(&self, msg: &Received, reason: &str) -> StoreResult<()> {
        // Sent to the dead-letter queue, then deleted from the work queue.
        self.model.sqs("SendMessageBatch").await?;
        self.model.sqs("DeleteMessage").await?;
        self.inner.queue.dead_letter(msg, reason).await
    }

    async fn list_dead_letters(&self, max: usize) -> StoreResult<Vec<DeadLetter>> {
        self.model.sqs("ReceiveMessage").await?;
        self.inner.queue.list_dead_letters(max).await
    }

    async fn purge_dead_letters(&self, message_ids: &[String]) -> StoreResult<u64> {
        let n = self.inner.queue.purge_dead_letters(message_ids).await?;
        for _ in 0..n.div_ceil(10).max(1) {
            self.model.sqs("ReceiveMessage").await?;
            self.model.sqs("DeleteMessageBatch").await?;
        }
        Ok(n)
    }

    async fn redrive(&self, message_ids: Option<&[String]>) -> StoreResult<u64> {
        let n = self.inner.queue.redrive(message_ids).await?;
        for _ in 0..n.div_ceil(10).max(1) {
            self.model.sqs("SendMessageBatch").await?;
            self.model.sqs("DeleteMessageBatch").await?;
        }
        Ok(n)
    }

    async fn depth(&self) -> StoreResult<QueueDepth> {
        // The work queue's and the dead-letter queue's attributes.
        self.model.sqs("GetQueueAttributes").await?;
        self.model.sqs("GetQueueAttributes").await?;
        self.inner.queue.depth().await
    }
}

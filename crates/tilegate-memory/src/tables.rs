//! Jobs, manifest rows, claims and counters in maps under one lock: every conditional write
//! reads and writes in one step, as a DynamoDB condition expression or an IMMEDIATE SQLite
//! transaction does. The manifest keeps DynamoDB's partitioning (`JOB#NN` when the job is
//! sharded), so per-partition counts and a service model's hot-partition accounting see the
//! same partitions a deployment would.

use crate::ledger::LedgerState;
use async_trait::async_trait;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};
use tilegate_core::grid::Window;
use tilegate_core::id::JobId;
use tilegate_core::table::{
    AcquireOutcome, ClaimChange, ClaimRecord, ClaimTable, CounterTable, CreateOutcome, JobRecord,
    JobTable, ManifestEntry, ManifestTable, UpdateOutcome, Versioned, manifest_partition,
    manifest_partitions,
};
use tilegate_core::{StoreResult, Tenant, UnixMillis};

/// The in-memory tables (jobs, manifest, claims, counters and the ledger). Clones share the
/// rows.
#[derive(Debug, Clone, Default)]
pub struct MemoryTables {
    state: Arc<Mutex<State>>,
}

#[derive(Debug, Default)]
pub(crate) struct State {
    jobs: BTreeMap<String, Versioned<JobRecord>>,
    /// Partition key (`JOB` or `JOB#NN`) → window → row.
    manifest: BTreeMap<String, BTreeMap<Window, Versioned<ManifestEntry>>>,
    claims: BTreeMap<String, Versioned<ClaimRecord>>,
    counters: BTreeMap<String, BTreeMap<String, u64>>,
    pub(crate) ledger: LedgerState,
}

impl State {
    /// The partition of `job`'s row for `w`, by the shard count on the job's row (1 without).
    fn partition(&self, job: &JobId, w: Window) -> String {
        manifest_partition(job, w, self.shards(job))
    }

    fn shards(&self, job: &JobId) -> u32 {
        self.jobs
            .get(job.as_str())
            .map_or(1, |j| j.row.manifest_shards.max(1))
    }
}

impl MemoryTables {
    /// Empty tables.
    pub fn new() -> Self {
        Self::default()
    }

    pub(crate) fn lock(&self) -> MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The manifest partition `job`'s row for `w` lives in (for a service model's accounting).
    pub fn manifest_partition_of(&self, job: &JobId, w: Window) -> String {
        self.lock().partition(job, w)
    }
}

#[async_trait]
impl JobTable for MemoryTables {
    async fn create_job(&self, job: &JobRecord) -> StoreResult<CreateOutcome<JobRecord>> {
        let mut st = self.lock();
        if let Some(existing) = st.jobs.get(job.job_id.as_str()) {
            return Ok(CreateOutcome::AlreadyExists(existing.clone()));
        }
        st.jobs.insert(
            job.job_id.to_string(),
            Versioned {
                version: 1,
                row: job.clone(),
            },
        );
        Ok(CreateOutcome::Created)
    }

    async fn get_job(&self, id: &JobId) -> StoreResult<Option<Versioned<JobRecord>>> {
        Ok(self.lock().jobs.get(id.as_str()).cloned())
    }

    async fn update_job(
        &self,
        job: &JobRecord,
        expected: u64,
    ) -> StoreResult<UpdateOutcome<JobRecord>> {
        let mut st = self.lock();
        match st.jobs.get_mut(job.job_id.as_str()) {
            Some(cur) if cur.version == expected => {
                *cur = Versioned {
                    version: expected + 1,
                    row: job.clone(),
                };
                Ok(UpdateOutcome::Updated {
                    version: expected + 1,
                })
            }
            cur => Ok(UpdateOutcome::Superseded(cur.cloned())),
        }
    }

    async fn list_jobs(&self, limit: usize) -> StoreResult<Vec<Versioned<JobRecord>>> {
        Ok(self.jobs_where(|_| true, Order::NewestFirst, limit))
    }

    /// The rows are in memory: the open ones, oldest first.
    async fn list_open_jobs(&self, limit: usize) -> StoreResult<Vec<Versioned<JobRecord>>> {
        Ok(self.jobs_where(JobRecord::is_open, Order::OldestFirst, limit))
    }

    /// The rows are in memory: filtered by tenant here, in the order of [`Self::list_jobs`].
    async fn list_jobs_of(
        &self,
        tenant: &Tenant,
        limit: usize,
    ) -> StoreResult<Vec<Versioned<JobRecord>>> {
        Ok(self.jobs_where(|j| &j.tenant == tenant, Order::NewestFirst, limit))
    }
}

/// The order of a listing of jobs (ties by job ID).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Order {
    NewestFirst,
    OldestFirst,
}

impl MemoryTables {
    /// At most `limit` jobs that `keep`, in `order`.
    fn jobs_where(
        &self,
        keep: impl Fn(&JobRecord) -> bool,
        order: Order,
        limit: usize,
    ) -> Vec<Versioned<JobRecord>> {
        let mut jobs: Vec<Versioned<JobRecord>> = self
            .lock()
            .jobs
            .values()
            .filter(|v| keep(&v.row))
            .cloned()
            .collect();
        jobs.sort_by(|a, b| {
            let by_date = match order {
                Order::NewestFirst => b.row.created_at.cmp(&a.row.created_at),
                Order::OldestFirst => a.row.created_at.cmp(&b.row.created_at),
            };
            by_date.then_with(|| a.row.job_id.as_str().cmp(b.row.job_id.as_str()))
        });
        jobs.truncate(limit);
        jobs
    }
}

#[async_trait]
impl ManifestTable for MemoryTables {
    async fn put_entry(&self, e: &ManifestEntry) -> StoreResult<CreateOutcome<ManifestEntry>> {
        let mut st = self.lock();
        let pk = st.partition(&e.job_id, e.window);
        let rows = st.manifest.entry(pk).or_default();
        if let Some(existing) = rows.get(&e.window) {
            return Ok(CreateOutcome::AlreadyExists(existing.clone()));
        }
        rows.insert(
            e.window,
            Versioned {
                version: 1,
                row: e.clone(),
            },
        );
        Ok(CreateOutcome::Created)
    }

    async fn update_entry(
        &self,
        e: &ManifestEntry,
        expected: u64,
    ) -> StoreResult<UpdateOutcome<ManifestEntry>> {
        let mut st = self.lock();
        let pk = st.partition(&e.job_id, e.window);
        match st.manifest.get_mut(&pk).and_then(|r| r.get_mut(&e.window)) {
            Some(cur) if cur.version == expected => {
                *cur = Versioned {
                    version: expected + 1,
                    row: e.clone(),
                };
                Ok(UpdateOutcome::Updated {
                    version: expected + 1,
                })
            }
            cur => Ok(UpdateOutcome::Superseded(cur.cloned())),
        }
    }

    async fn get_entry(
        &self,
        job: &JobId,
        w: Window,
    ) -> StoreResult<Option<Versioned<ManifestEntry>>> {
        let st = self.lock();
        let pk = st.partition(job, w);
        Ok(st.manifest.get(&pk).and_then(|r| r.get(&w)).cloned())
    }

    async fn list_entries(&self, job: &JobId) -> StoreResult<Vec<Versioned<ManifestEntry>>> {
        let st = self.lock();
        let mut out: Vec<Versioned<ManifestEntry>> = manifest_partitions(job, st.shards(job))
            .iter()
            .filter_map(|pk| st.manifest.get(pk))
            .flat_map(|rows| rows.values().cloned())
            .collect();
        out.sort_by_key(|v| v.row.window);
        Ok(out)
    }

    /// The partition's rows, counted under the lock that created them: the same atomic step.
    async fn recorded(&self, job: &JobId, shard: u32) -> StoreResult<u64> {
        let st = self.lock();
        let pk = manifest_partitions(job, st.shards(job))
            .into_iter()
            .nth(shard as usize);
        Ok(pk
            .and_then(|pk| st.manifest.get(&pk))
            .map_or(0, |r| r.len() as u64))
    }

    async fn count_partitions(&self, job: &JobId) -> StoreResult<Vec<(String, u64)>> {
        let st = self.lock();
        Ok(manifest_partitions(job, st.shards(job))
            .into_iter()
            .map(|pk| {
                let n = st.manifest.get(&pk).map_or(0, |r| r.len() as u64);
                (pk, n)
            })
            .collect())
    }
}

#[async_trait]
impl ClaimTable for MemoryTables {
    async fn acquire(
        &self,
        resource: &str,
        owner: &str,
        now: UnixMillis,
        expires_at: UnixMillis,
    ) -> StoreResult<AcquireOutcome> {
        let mut st = self.lock();
        let outcome =
            ClaimRecord::acquire(st.claims.get(resource), resource, owner, now, expires_at);
        if let AcquireOutcome::Acquired(claim) = &outcome {
            st.claims.insert(resource.to_owned(), claim.clone());
        }
        Ok(outcome)
    }

    async fn change(
        &self,
        resource: &str,
        owner: &str,
        fencing_token: u64,
        change: ClaimChange,
    ) -> StoreResult<UpdateOutcome<ClaimRecord>> {
        let mut st = self.lock();
        let Some(current) = st.claims.get_mut(resource) else {
            return Ok(UpdateOutcome::Superseded(None));
        };
        if !current.row.allows(owner, fencing_token, &change) {
            return Ok(UpdateOutcome::Superseded(Some(current.clone())));
        }
        current.row = current.row.changed(change);
        current.version += 1;
        Ok(UpdateOutcome::Updated {
            version: current.version,
        })
    }

    async fn get_claim(&self, resource: &str) -> StoreResult<Option<Versioned<ClaimRecord>>> {
        Ok(self.lock().claims.get(resource).cloned())
    }
}

#[async_trait]
impl CounterTable for MemoryTables {
    async fn add_counters(&self, job: &JobId, deltas: &[(&str, u64)]) -> StoreResult<()> {
        let mut st = self.lock();
        let counters = st.counters.entry(job.to_string()).or_default();
        for (name, delta) in deltas {
            let c = counters.entry((*name).to_owned()).or_default();
            *c = c.saturating_add(*delta);
        }
        Ok(())
    }

    async fn get_counters(&self, job: &JobId) -> StoreResult<BTreeMap<String, u64>> {
        Ok(self
            .lock()
            .counters
            .get(job.as_str())
            .cloned()
            .unwrap_or_default())
    }
}

//! The table contracts on SQLite: each row stored as JSON with a `version` (1 on create, +1 per
//! update); conditional creates by `INSERT ... ON CONFLICT DO NOTHING`, conditional updates by
//! `UPDATE ... WHERE version = ?`, each inside one IMMEDIATE transaction so the row read back
//! after a refused write is the row that refused it.

use super::{
    Cached as _, SqliteBackend, TxError, TxResult, decode, encode, select_versioned, to_i64, to_u64,
};
use crate::error::EmbeddedError;
use async_trait::async_trait;
use rusqlite::{Connection, OptionalExtension as _, params};
use std::collections::BTreeMap;
use tilegate_core::grid::Window;
use tilegate_core::id::JobId;
use tilegate_core::table::{
    AcquireOutcome, ClaimChange, ClaimRecord, ClaimState, ClaimTable, CounterTable, CreateOutcome,
    JobRecord, JobTable, ManifestEntry, ManifestTable, UpdateOutcome, Versioned,
    manifest_partitions, manifest_shard,
};
use tilegate_core::{Retry, StoreError, StoreResult, Tenant, UnixMillis};
use tracing::debug;

fn versioned<T: serde::de::DeserializeOwned>(
    what: &'static str,
    key: &str,
    (version, body): (i64, String),
) -> TxResult<Versioned<T>> {
    Ok(Versioned {
        version: to_u64(what, key, version)?,
        row: decode(what, key, &body)?,
    })
}

fn get_job_row(conn: &Connection, id: &str) -> TxResult<Option<Versioned<JobRecord>>> {
    select_versioned(
        conn,
        "SELECT version, body FROM jobs WHERE job_id = ?1",
        [id],
    )?
    .map(|r| versioned("job row", id, r))
    .transpose()
}

/// A listing's `LIMIT`.
fn to_limit(limit: usize) -> i64 {
    i64::try_from(limit).unwrap_or(i64::MAX)
}

/// The job rows `sql` (selecting `job_id, version, body`) reads with `params`, in its order.
fn job_rows(
    c: &Connection,
    sql: &str,
    params: impl rusqlite::Params,
) -> TxResult<Vec<Versioned<JobRecord>>> {
    let mut stmt = c.prepare_cached(sql)?;
    let rows = stmt.query_map(params, |r| {
        Ok((r.get::<_, String>(0)?, r.get(1)?, r.get(2)?))
    })?;
    let mut out = Vec::new();
    for row in rows {
        let (id, version, body) = row?;
        out.push(versioned("job row", &id, (version, body))?);
    }
    Ok(out)
}

#[async_trait]
impl JobTable for SqliteBackend {
    async fn create_job(&self, job: &JobRecord) -> StoreResult<CreateOutcome<JobRecord>> {
        let job = job.clone();
        let id = job.job_id.to_string();
        self.write("create job", &id.clone(), move |tx| {
            let body = encode("job row", &id, &job)?;
            let n = tx.exec(
                "INSERT INTO jobs (job_id, version, created_at, body, tenant, open)
                 VALUES (?1, 1, ?2, ?3, ?4, ?5)
                 ON CONFLICT (job_id) DO NOTHING",
                params![id, job.created_at, body, job.tenant.as_str(), job.is_open()],
            )?;
            if n == 1 {
                debug!(store = "sqlite", job_id = %id, outcome = "created", "create job");
                return Ok(CreateOutcome::Created);
            }
            let existing = get_job_row(tx, &id)?.ok_or_else(|| vanished("job row", &id))?;
            debug!(store = "sqlite", job_id = %id, outcome = "already-exists", "create job");
            Ok(CreateOutcome::AlreadyExists(existing))
        })
        .await
    }

    async fn get_job(&self, id: &JobId) -> StoreResult<Option<Versioned<JobRecord>>> {
        let id = id.to_string();
        self.with_conn("get job", &id.clone(), move |c| get_job_row(c, &id))
            .await
    }

    async fn update_job(
        &self,
        job: &JobRecord,
        expected: u64,
    ) -> StoreResult<UpdateOutcome<JobRecord>> {
        let job = job.clone();
        let id = job.job_id.to_string();
        self.write("update job", &id.clone(), move |tx| {
            let body = encode("job row", &id, &job)?;
            let exp = to_i64("version", &id, expected)?;
            let n = tx.exec(
                "UPDATE jobs SET version = version + 1, created_at = ?2, body = ?3, tenant = ?5,
                     open = ?6
                 WHERE job_id = ?1 AND version = ?4",
                params![
                    id,
                    job.created_at,
                    body,
                    exp,
                    job.tenant.as_str(),
                    job.is_open()
                ],
            )?;
            if n == 1 {
                return Ok(UpdateOutcome::Updated {
                    version: expected + 1,
                });
            }
            debug!(store = "sqlite", job_id = %id, outcome = "superseded", expected, "update job");
            Ok(UpdateOutcome::Superseded(get_job_row(tx, &id)?))
        })
        .await
    }

    async fn list_jobs(&self, limit: usize) -> StoreResult<Vec<Versioned<JobRecord>>> {
        self.with_conn("list jobs", "jobs", move |c| {
            job_rows(
                c,
                "SELECT job_id, version, body FROM jobs
                 ORDER BY created_at DESC, job_id LIMIT ?1",
                params![to_limit(limit)],
            )
        })
        .await
    }

    /// Read on the partial index of open jobs (`WHERE open = 1`): open rows only.
    async fn list_open_jobs(&self, limit: usize) -> StoreResult<Vec<Versioned<JobRecord>>> {
        self.with_conn("list open jobs", "jobs", move |c| {
            job_rows(
                c,
                "SELECT job_id, version, body FROM jobs INDEXED BY jobs_open WHERE open = 1
                 ORDER BY created_at, job_id LIMIT ?1",
                params![to_limit(limit)],
            )
        })
        .await
    }

    /// Read on the `(tenant, created_at, job_id)` index: the tenant's rows only.
    async fn list_jobs_of(
        &self,
        tenant: &Tenant,
        limit: usize,
    ) -> StoreResult<Vec<Versioned<JobRecord>>> {
        let tenant = tenant.as_str().to_owned();
        self.with_conn("list a tenant's jobs", &tenant.clone(), move |c| {
            job_rows(
                c,
                "SELECT job_id, version, body FROM jobs WHERE tenant = ?1
                 ORDER BY created_at DESC, job_id LIMIT ?2",
                params![tenant, to_limit(limit)],
            )
        })
        .await
    }
}

/// A row that the same transaction found conflicting is gone: impossible under IMMEDIATE
/// unless the database is damaged.
fn vanished(what: &'static str, key: &str) -> TxError {
    TxError::Store(StoreError::Corrupt {
        what,
        key: key.to_owned(),
        detail: "the row refused an insert but cannot be read back".to_owned(),
    })
}

fn manifest_key(job: &str, w: Window) -> String {
    format!("{job}/{w}")
}

fn get_entry_row(
    conn: &Connection,
    job: &str,
    w: Window,
) -> TxResult<Option<Versioned<ManifestEntry>>> {
    select_versioned(
        conn,
        "SELECT version, body FROM manifest WHERE job_id = ?1 AND win_row = ?2 AND win_col = ?3",
        params![job, w.row, w.col],
    )?
    .map(|r| versioned("manifest row", &manifest_key(job, w), r))
    .transpose()
}

#[async_trait]
impl ManifestTable for SqliteBackend {
    async fn put_entry(&self, e: &ManifestEntry) -> StoreResult<CreateOutcome<ManifestEntry>> {
        let e = e.clone();
        let key = manifest_key(e.job_id.as_str(), e.window);
        self.write("put manifest entry", &key.clone(), move |tx| {
            let body = encode("manifest row", &key, &e)?;
            let shard = manifest_shard(e.window, job_shards(tx, e.job_id.as_str())?);
            let n = tx.exec(
                "INSERT INTO manifest (job_id, win_row, win_col, version, body, shard)
                 VALUES (?1, ?2, ?3, 1, ?4, ?5) ON CONFLICT DO NOTHING",
                params![e.job_id.as_str(), e.window.row, e.window.col, body, shard],
            )?;
            if n == 1 {
                return Ok(CreateOutcome::Created);
            }
            let existing = get_entry_row(tx, e.job_id.as_str(), e.window)?
                .ok_or_else(|| vanished("manifest row", &key))?;
            debug!(store = "sqlite", job_id = %e.job_id, window = %e.window, outcome = "already-exists", "put manifest entry");
            Ok(CreateOutcome::AlreadyExists(existing))
        })
        .await
    }

    async fn update_entry(
        &self,
        e: &ManifestEntry,
        expected: u64,
    ) -> StoreResult<UpdateOutcome<ManifestEntry>> {
        let e = e.clone();
        let key = manifest_key(e.job_id.as_str(), e.window);
        self.write("update manifest entry", &key.clone(), move |tx| {
            let body = encode("manifest row", &key, &e)?;
            let exp = to_i64("version", &key, expected)?;
            let n = tx.exec(
                "UPDATE manifest SET version = version + 1, body = ?4
                 WHERE job_id = ?1 AND win_row = ?2 AND win_col = ?3 AND version = ?5",
                params![e.job_id.as_str(), e.window.row, e.window.col, body, exp],
            )?;
            if n == 1 {
                return Ok(UpdateOutcome::Updated {
                    version: expected + 1,
                });
            }
            Ok(UpdateOutcome::Superseded(get_entry_row(
                tx,
                e.job_id.as_str(),
                e.window,
            )?))
        })
        .await
    }

    async fn get_entry(
        &self,
        job: &JobId,
        w: Window,
    ) -> StoreResult<Option<Versioned<ManifestEntry>>> {
        let job = job.to_string();
        self.with_conn("get manifest entry", &manifest_key(&job, w), move |c| {
            get_entry_row(c, &job, w)
        })
        .await
    }

    async fn list_entries(&self, job: &JobId) -> StoreResult<Vec<Versioned<ManifestEntry>>> {
        let job = job.to_string();
        self.with_conn("list manifest entries", &job.clone(), move |c| {
            // (win_row, win_col) is the order of `Window`'s `Ord`.
            let mut stmt = c.prepare_cached(
                "SELECT win_row, win_col, version, body FROM manifest
                 WHERE job_id = ?1 ORDER BY win_row, win_col",
            )?;
            let rows = stmt.query_map([&job], |r| {
                Ok((
                    Window::new(r.get(0)?, r.get(1)?),
                    r.get::<_, i64>(2)?,
                    r.get::<_, String>(3)?,
                ))
            })?;
            let mut out = Vec::new();
            for row in rows {
                let (w, version, body) = row?;
                out.push(versioned(
                    "manifest row",
                    &manifest_key(&job, w),
                    (version, body),
                )?);
            }
            Ok(out)
        })
        .await
    }

    /// The partition's rows counted on the `(job_id, shard)` index, in the database that
    /// commits them: a row and its count are one transaction's by construction.
    async fn recorded(&self, job: &JobId, shard: u32) -> StoreResult<u64> {
        let job = job.to_string();
        self.with_conn("count manifest entries", &job.clone(), move |c| {
            let n: i64 = c.row(
                "SELECT COUNT(*) FROM manifest WHERE job_id = ?1 AND shard = ?2",
                params![&job, shard],
                |r| r.get(0),
            )?;
            to_u64("manifest count", &job, n)
        })
        .await
    }

    async fn count_partitions(&self, job: &JobId) -> StoreResult<Vec<(String, u64)>> {
        let id = job.clone();
        let job = job.to_string();
        self.with_conn("count manifest entries", &job.clone(), move |c| {
            // One count per partition: the same fan-out as a sharded DynamoDB manifest.
            let shards = job_shards(c, &job)?;
            let mut out = Vec::new();
            for (shard, pk) in manifest_partitions(&id, shards).into_iter().enumerate() {
                let n: i64 = c.row(
                    "SELECT COUNT(*) FROM manifest WHERE job_id = ?1 AND shard = ?2",
                    params![&job, shard],
                    |r| r.get(0),
                )?;
                out.push((pk, to_u64("manifest count", &job, n)?));
            }
            Ok(out)
        })
        .await
    }
}

/// The manifest shard count on `job`'s row (1 without a row, or for a row from before shards).
fn job_shards(c: &Connection, job: &str) -> TxResult<u32> {
    let shards: Option<i64> = c
        .prepare_cached(
            "SELECT COALESCE(json_extract(body, '$.manifest_shards'), 1) FROM jobs WHERE job_id = ?1",
        )?
        .query_row([job], |r| r.get(0))
        .optional()?;
    Ok(u32::try_from(shards.unwrap_or(1)).unwrap_or(1).max(1))
}

fn get_claim_row(conn: &Connection, resource: &str) -> TxResult<Option<Versioned<ClaimRecord>>> {
    select_versioned(
        conn,
        "SELECT version, body FROM claims WHERE resource = ?1",
        [resource],
    )?
    .map(|r| versioned("claim row", resource, r))
    .transpose()
}

fn state_name(s: ClaimState) -> &'static str {
    match s {
        ClaimState::Held => "held",
        ClaimState::Done => "done",
    }
}

/// Write `claim` as the row's new content at `version` (insert or replace). The caller has
/// already decided, inside the same IMMEDIATE transaction, that the write is allowed.
fn store_claim(tx: &Connection, claim: &ClaimRecord, version: u64) -> TxResult<()> {
    let r = claim.resource.as_str();
    tx.exec(
        "INSERT INTO claims (resource, version, owner, fencing_token, expires_at, state, body)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)
         ON CONFLICT (resource) DO UPDATE SET version = excluded.version, owner = excluded.owner,
           fencing_token = excluded.fencing_token, expires_at = excluded.expires_at,
           state = excluded.state, body = excluded.body",
        params![
            r,
            to_i64("version", r, version)?,
            claim.owner,
            to_i64("fencing token", r, claim.fencing_token)?,
            claim.expires_at,
            state_name(claim.state),
            encode("claim row", r, claim)?,
        ],
    )?;
    Ok(())
}

#[async_trait]
impl ClaimTable for SqliteBackend {
    async fn acquire(
        &self,
        resource: &str,
        owner: &str,
        now: UnixMillis,
        expires_at: UnixMillis,
    ) -> StoreResult<AcquireOutcome> {
        let (resource, owner) = (resource.to_owned(), owner.to_owned());
        self.write("acquire claim", &resource.clone(), move |tx| {
            // One IMMEDIATE transaction: the predicate (no row, or expired and not done) is
            // evaluated under the write lock, so two acquirers can never both see it true.
            let current = get_claim_row(tx, &resource)?;
            let outcome =
                ClaimRecord::acquire(current.as_ref(), &resource, &owner, now, expires_at);
            match &outcome {
                AcquireOutcome::Acquired(claim) => {
                    store_claim(tx, &claim.row, claim.version)?;
                    debug!(store = "sqlite", resource = %resource, owner = %owner, fencing_token = claim.row.fencing_token, outcome = "acquired", "acquire claim");
                }
                AcquireOutcome::Existing(c) => {
                    debug!(store = "sqlite", resource = %resource, owner = %owner, holder = %c.row.owner, outcome = "existing", "acquire claim");
                }
            }
            Ok(outcome)
        })
        .await
    }

    async fn change(
        &self,
        resource: &str,
        owner: &str,
        fencing_token: u64,
        change: ClaimChange,
    ) -> StoreResult<UpdateOutcome<ClaimRecord>> {
        let (resource, owner) = (resource.to_owned(), owner.to_owned());
        self.write("change claim", &resource.clone(), move |tx| {
            let Some(current) = get_claim_row(tx, &resource)? else {
                return Ok(UpdateOutcome::Superseded(None));
            };
            let c = &current.row;
            if !c.allows(&owner, fencing_token, &change) {
                debug!(store = "sqlite", resource = %resource, owner = %owner, fencing_token, holder = %c.owner, outcome = "superseded", "change claim");
                return Ok(UpdateOutcome::Superseded(Some(current)));
            }
            let next = c.changed(change);
            let version = current.version + 1;
            store_claim(tx, &next, version)?;
            Ok(UpdateOutcome::Updated { version })
        })
        .await
    }

    async fn get_claim(&self, resource: &str) -> StoreResult<Option<Versioned<ClaimRecord>>> {
        let resource = resource.to_owned();
        self.with_conn("get claim", &resource.clone(), move |c| {
            get_claim_row(c, &resource)
        })
        .await
    }
}

#[async_trait]
impl CounterTable for SqliteBackend {
    async fn add_counters(&self, job: &JobId, deltas: &[(&str, u64)]) -> StoreResult<()> {
        let job = job.to_string();
        let deltas: Vec<(String, u64)> =
            deltas.iter().map(|(n, d)| ((*n).to_owned(), *d)).collect();
        self.write("add counters", &job.clone(), move |tx| {
            for (name, delta) in &deltas {
                let d = to_i64("counter delta", &job, *delta)?;
                // `value = value + ?` in the storage engine, never read-modify-write here. The
                // guard keeps the sum an integer (SQLite would silently turn an overflowing
                // sum into a float).
                let n = tx.exec(
                    "INSERT INTO counters (job_id, name, value) VALUES (?1, ?2, ?3)
                     ON CONFLICT (job_id, name) DO UPDATE SET value = value + excluded.value
                     WHERE value <= 9223372036854775807 - excluded.value",
                    params![job, name, d],
                )?;
                if n == 0 {
                    return Err(TxError::Store(StoreError::backend(
                        "add counters",
                        format!("{job}/{name}"),
                        Retry::Permanent,
                        EmbeddedError::OutOfRange {
                            what: "counter sum",
                            value: u128::from(*delta),
                        },
                    )));
                }
            }
            Ok(())
        })
        .await
    }

    async fn get_counters(&self, job: &JobId) -> StoreResult<BTreeMap<String, u64>> {
        let job = job.to_string();
        self.with_conn("get counters", &job.clone(), move |c| {
            let mut stmt =
                c.prepare_cached("SELECT name, value FROM counters WHERE job_id = ?1")?;
            let rows = stmt.query_map([&job], |r| {
                Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)?))
            })?;
            let mut out = BTreeMap::new();
            for row in rows {
                let (name, v) = row?;
                out.insert(name, to_u64("counter", &job, v)?);
            }
            Ok(out)
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tilegate_core::ETag;
    use tilegate_core::table::TileOrigin;

    fn row(job: &JobId, w: Window) -> ManifestEntry {
        ManifestEntry {
            job_id: job.clone(),
            window: w,
            key: format!("tiles/{w}.tif"),
            size: 1,
            e_tag: ETag::new("\"e\""),
            origin: TileOrigin::Written,
            recorded_at: 0,
            facts: Default::default(),
        }
    }

    fn job_of(tenant: &str) -> JobRecord {
        use tilegate_core::grid::Grid;
        use tilegate_core::keys::Prefix;
        use tilegate_core::recipe::Recipe;
        use tilegate_core::source::{SceneMeta, SourceInfo};
        let tenant = Tenant::parse(tenant).unwrap();
        let source = SourceInfo {
            uri: format!("file:///{tenant}.tif"),
            etag: ETag::new("\"e\""),
            size: 1,
            stat: None,
            assets: Vec::new(),
            signed: false,
        };
        let (recipe, prefix) = (Recipe::copy_all(), Prefix::default());
        JobRecord {
            job_id: JobId::of(&source, &recipe, &prefix, &tenant),
            source,
            recipe,
            grid: Grid::new(512, 512, 512).unwrap(),
            prefix,
            tenant,
            scene: SceneMeta {
                width: 512,
                height: 512,
                bands: 1,
                dtype: "Byte".to_owned(),
                crs_wkt: String::new(),
                geotransform: [0.0, 1.0, 0.0, 0.0, 0.0, -1.0],
                nodata: None,
                placement: None,
                datetime: None,
            },
            created_at: 1,
            scene_output: None,
            manifest_shards: 1,
            redrives: 0,
            outbox: Vec::new(),
            windows_enqueued: false,
            settled: false,
        }
    }

    /// A version-3 database (no `tenant` column) opens with each job's tenant copied from its
    /// body into the indexed column: a tenant's listing holds the jobs written before.
    #[test]
    fn version_three_jobs_gain_the_tenant_column() {
        let dir = std::env::temp_dir().join(format!("tilegate-v3-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("db.sqlite");
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let (acme, operator) = (job_of("acme"), job_of(Tenant::DEFAULT));
        {
            let db = SqliteBackend::open(&path).unwrap();
            rt.block_on(db.create_job(&acme)).unwrap();
            rt.block_on(db.create_job(&operator)).unwrap();
        }
        let c = Connection::open(&path).unwrap();
        c.execute_batch(
            "DROP INDEX jobs_by_tenant; ALTER TABLE jobs DROP COLUMN tenant;
             PRAGMA user_version = 3;",
        )
        .unwrap();
        drop(c);
        let db = SqliteBackend::open(&path).unwrap();
        let of = |t: &str| {
            rt.block_on(db.list_jobs_of(&Tenant::parse(t).unwrap(), 10))
                .unwrap()
                .into_iter()
                .map(|v| v.row)
                .collect::<Vec<_>>()
        };
        assert_eq!(of("acme"), vec![acme]);
        assert_eq!(of(Tenant::DEFAULT), vec![operator]);
        assert!(of("other").is_empty());
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A version-2 database (no `shard` column) opens, keeps its rows in shard 0 and counts them.
    #[test]
    fn version_two_manifest_gains_the_shard_column() {
        let dir = std::env::temp_dir().join(format!("tilegate-v2-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("db.sqlite");
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let job = JobId::derive("file:///a.tif", "\"e\"", "copy", "prefix=tilegate");
        {
            let db = SqliteBackend::open(&path).unwrap();
            rt.block_on(db.put_entry(&row(&job, Window::new(0, 0))))
                .unwrap();
        }
        let c = Connection::open(&path).unwrap();
        c.execute_batch(
            "DROP INDEX manifest_by_shard; ALTER TABLE manifest DROP COLUMN shard;
             PRAGMA user_version = 2;",
        )
        .unwrap();
        drop(c);
        let db = SqliteBackend::open(&path).unwrap();
        rt.block_on(db.put_entry(&row(&job, Window::new(0, 1))))
            .unwrap();
        assert_eq!(
            rt.block_on(db.count_partitions(&job)).unwrap(),
            vec![(job.to_string(), 2)]
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}

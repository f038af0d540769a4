//! [`SqliteBackend`]: jobs, manifest, claims, counters (and, in [`queue`], the work queue) in
//! one SQLite file, correct across every process that opens it.
//!
//! Every conditional write is one statement or one `BEGIN IMMEDIATE` transaction. IMMEDIATE
//! takes SQLite's write lock at `BEGIN`, before anything is read, so read-compare-write inside
//! it is serialised against every other writer in every process; a deferred transaction would
//! read first and could fail to upgrade (`SQLITE_BUSY_SNAPSHOT`) or, worse, decide on a stale
//! read. WAL mode lets readers run beside the one writer; `busy_timeout` makes a contended
//! writer wait instead of failing at once, and a wait longer than that is a retryable error.
//!
//! Durability: `synchronous=NORMAL` in WAL mode never corrupts the database and loses nothing
//! when a process crashes; a power loss can roll back the last transactions before it.

mod ledger;
pub mod queue;
mod tables;

use crate::blocking;
use crate::error::{EmbeddedError, sql_error};
use rusqlite::{Connection, OpenFlags, OptionalExtension as _, Transaction, TransactionBehavior};
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;
use tilegate_core::{Retry, StoreError, StoreResult};
use tokio::sync::Notify;

pub use queue::SqliteQueue;

/// How long a writer waits for another process's write lock before a retryable error.
pub const BUSY_TIMEOUT: Duration = Duration::from_secs(15);

/// The schema version this build writes (`PRAGMA user_version`).
/// 2 added the ledger (an older build must not open a database whose ledger it ignores).
/// 3 added the manifest's `shard` column (a sharded job's rows would be miscounted by 2).
/// 4 added the jobs' `tenant` column and its index (a tenant's listing reads its own rows; a
/// job that 3 wrote would be missing from it).
/// 5 added the jobs' `open` column and its partial index (the reconciler reads open jobs only;
/// a job that 4 wrote would be missing from it).
const SCHEMA_VERSION: i64 = 5;

const SCHEMA: &str = r"
-- `tenant` is the job's tenant, as its body says: a tenant's jobs are listed on its index.
CREATE TABLE IF NOT EXISTS jobs (
    job_id      TEXT PRIMARY KEY,
    version     INTEGER NOT NULL,
    created_at  INTEGER NOT NULL,
    body        TEXT NOT NULL,
    tenant      TEXT NOT NULL DEFAULT 'default',
    open        INTEGER NOT NULL DEFAULT 1
);
CREATE INDEX IF NOT EXISTS jobs_by_created ON jobs (created_at DESC, job_id);
CREATE INDEX IF NOT EXISTS jobs_by_tenant ON jobs (tenant, created_at DESC, job_id);
-- `open` is 1 until the job is settled (its body's `settled`): the reconciler's index holds the
-- open jobs only.
CREATE INDEX IF NOT EXISTS jobs_open ON jobs (created_at, job_id) WHERE open = 1;

CREATE TABLE IF NOT EXISTS manifest (
    job_id      TEXT NOT NULL,
    win_row     INTEGER NOT NULL,
    win_col     INTEGER NOT NULL,
    version     INTEGER NOT NULL,
    body        TEXT NOT NULL,
    -- The row's manifest shard (`manifest_shard`; 0 when the job is not sharded): the
    -- partition is (job_id, shard), as DynamoDB's `JOB#NN`.
    shard       INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (job_id, win_row, win_col)
) WITHOUT ROWID;
-- Counting a job's rows reads this narrow index, not the rows: the count does not grow with
-- what a row records (its window facts). One count per partition, as on DynamoDB.
CREATE INDEX IF NOT EXISTS manifest_by_job ON manifest (job_id);
CREATE INDEX IF NOT EXISTS manifest_by_shard ON manifest (job_id, shard);

CREATE TABLE IF NOT EXISTS claims (
    resource      TEXT PRIMARY KEY,
    version       INTEGER NOT NULL,
    owner         TEXT NOT NULL,
    fencing_token INTEGER NOT NULL,
    expires_at    INTEGER NOT NULL,
    state         TEXT NOT NULL,
    body          TEXT NOT NULL
);

CREATE TABLE IF NOT EXISTS counters (
    job_id  TEXT NOT NULL,
    name    TEXT NOT NULL,
    value   INTEGER NOT NULL,
    PRIMARY KEY (job_id, name)
) WITHOUT ROWID;

CREATE TABLE IF NOT EXISTS queue_messages (
    seq           INTEGER PRIMARY KEY AUTOINCREMENT,
    queue         TEXT NOT NULL,
    message_id    TEXT NOT NULL UNIQUE,
    body          TEXT NOT NULL,
    sent_at       INTEGER NOT NULL,
    visible_at    INTEGER NOT NULL,
    receive_count INTEGER NOT NULL DEFAULT 0,
    receipt       TEXT UNIQUE
);
CREATE INDEX IF NOT EXISTS queue_messages_visible ON queue_messages (queue, visible_at);

CREATE TABLE IF NOT EXISTS queue_dead_letters (
    seq           INTEGER PRIMARY KEY AUTOINCREMENT,
    queue         TEXT NOT NULL,
    message_id    TEXT NOT NULL UNIQUE,
    body          TEXT NOT NULL,
    sent_at       INTEGER NOT NULL,
    reason        TEXT NOT NULL,
    receive_count INTEGER NOT NULL,
    dead_at       INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS queue_dead_letters_by_queue ON queue_dead_letters (queue, seq);
";

/// `file:` URI of `path` with `immutable=1`: every byte but the unreserved ones and `/`
/// percent-encoded, so that no `?` or `#` in a path is read as the URI's own.
fn immutable_uri(path: &Path) -> String {
    use std::os::unix::ffi::OsStrExt as _;
    let mut uri = String::from("file:");
    for &b in path.as_os_str().as_bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'/' | b'-' | b'_' | b'.' | b'~') {
            uri.push(char::from(b));
        } else {
            uri.push_str(&format!("%{b:02X}"));
        }
    }
    uri.push_str("?immutable=1");
    uri
}

/// Jobs, manifest, claims, counters and queues in one SQLite file. Cheap to clone; clones
/// share one connection.
#[derive(Clone)]
pub struct SqliteBackend {
    inner: Arc<Db>,
}

struct Db {
    path: PathBuf,
    /// One connection per process: SQLite serialises writers anyway, and a connection must not
    /// be used by two threads at once.
    conn: Mutex<Connection>,
    /// Wakes this process's long-polling receivers when this process sends; receivers in other
    /// processes find new messages by polling.
    sent: Notify,
}

impl fmt::Debug for SqliteBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SqliteBackend")
            .field("path", &self.inner.path)
            .finish_non_exhaustive()
    }
}

/// A failure inside a transaction: SQLite's, or one we raise ourselves (a corrupt row).
#[derive(Debug)]
pub(crate) enum TxError {
    Sql(rusqlite::Error),
    Store(StoreError),
}

impl From<rusqlite::Error> for TxError {
    fn from(e: rusqlite::Error) -> Self {
        Self::Sql(e)
    }
}

impl From<StoreError> for TxError {
    fn from(e: StoreError) -> Self {
        Self::Store(e)
    }
}

pub(crate) type TxResult<T> = Result<T, TxError>;

/// Whether SQLite said the database is busy or locked by another connection.
fn is_busy(e: &rusqlite::Error) -> bool {
    matches!(
        e.sqlite_error_code(),
        Some(rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked)
    )
}

impl SqliteBackend {
    /// Open (creating if needed) the database at `path`: WAL mode, `synchronous=NORMAL`,
    /// `busy_timeout` = [`BUSY_TIMEOUT`], schema created or checked.
    pub fn open(path: impl AsRef<Path>) -> StoreResult<Self> {
        let path = path.as_ref().to_path_buf();
        let shown = path.display().to_string();
        let conn = Self::connect_retrying(&path).map_err(|e| match e {
            TxError::Sql(e) => sql_error("open the database", &shown, e),
            TxError::Store(e) => e,
        })?;
        Ok(Self {
            inner: Arc::new(Db {
                path,
                conn: Mutex::new(conn),
                sent: Notify::new(),
            }),
        })
    }

    /// Open the database at `path` for reading only — `status`, `report`, `attempts`, `dlq
    /// list` and `stac` of a colleague's or an archived run, which may live on a read-only
    /// directory or file. Nothing is created: a missing file is [`StoreError::NotFound`]
    /// (a mistyped `--data` is said, not made), and no schema is written or migrated.
    ///
    /// SQLite reads a WAL database through its `-shm` index, which it must be able to create;
    /// where it cannot (a read-only directory), the file is opened `immutable`, which reads
    /// the main file alone: complete for a run whose last writer closed it (the log is
    /// checkpointed then), and short of the rows still in a `-wal` file otherwise (a warning
    /// says so).
    pub fn open_read_only(path: impl AsRef<Path>) -> StoreResult<Self> {
        let path = path.as_ref().to_path_buf();
        let shown = path.display().to_string();
        if !path.is_file() {
            return Err(StoreError::NotFound {
                what: "tilegate database",
                key: shown,
            });
        }
        let flags = OpenFlags::SQLITE_OPEN_READ_ONLY
            | OpenFlags::SQLITE_OPEN_URI
            | OpenFlags::SQLITE_OPEN_NO_MUTEX;
        let check = |conn: Connection| -> rusqlite::Result<Connection> {
            conn.busy_timeout(BUSY_TIMEOUT)?;
            conn.query_row("SELECT COUNT(*) FROM sqlite_master", [], |r| {
                r.get::<_, i64>(0)
            })?;
            Ok(conn)
        };
        let conn = match Connection::open_with_flags(&path, flags).and_then(check) {
            Ok(conn) => conn,
            Err(first) => {
                let wal = PathBuf::from(format!("{}-wal", path.display()));
                if wal.exists() {
                    tracing::warn!(database = %shown, "the database's directory cannot be \
                        written: reading it immutable, without the rows still in its -wal file");
                }
                Connection::open_with_flags(immutable_uri(&path), flags)
                    .and_then(check)
                    .map_err(|e| {
                        tracing::debug!(database = %shown, error = %first, "read-only open failed");
                        sql_error("open the database read-only", &shown, e)
                    })?
            }
        };
        let found: i64 = conn
            .query_row("PRAGMA user_version", [], |r| r.get(0))
            .map_err(|e| sql_error("open the database read-only", &shown, e))?;
        if found > SCHEMA_VERSION {
            return Err(StoreError::backend(
                "open the database read-only",
                shown,
                Retry::Permanent,
                EmbeddedError::SchemaTooNew {
                    found,
                    supported: SCHEMA_VERSION,
                },
            ));
        }
        Ok(Self {
            inner: Arc::new(Db {
                path,
                conn: Mutex::new(conn),
                sent: Notify::new(),
            }),
        })
    }

    /// [`Self::connect`], again while SQLite answers busy, up to [`BUSY_TIMEOUT`]: a few of
    /// the steps of opening (the switch to WAL, a WAL file being recovered) answer
    /// `SQLITE_BUSY` at once rather than through the busy handler, so that two processes
    /// opening a new data directory together could see "database is locked".
    fn connect_retrying(path: &Path) -> TxResult<Connection> {
        let started = std::time::Instant::now();
        let mut nap = Duration::from_millis(10);
        loop {
            match Self::connect(path) {
                Err(TxError::Sql(e)) if is_busy(&e) && started.elapsed() < BUSY_TIMEOUT => {
                    tracing::debug!(database = %path.display(), error = %e, "busy while opening; trying again");
                    std::thread::sleep(nap);
                    nap = (nap * 2).min(Duration::from_millis(200));
                }
                other => return other,
            }
        }
    }

    fn connect(path: &Path) -> TxResult<Connection> {
        let mut conn = Connection::open(path)?;
        // Set first, so that the journal-mode switch and schema creation below wait for a
        // concurrently opening process instead of failing.
        conn.busy_timeout(BUSY_TIMEOUT)?;
        // WAL is a property of the file: switching (which needs the file to itself) only when
        // it is not WAL yet keeps every later open out of the way of the others.
        let current: String = conn.query_row("PRAGMA journal_mode", [], |r| r.get(0))?;
        let mode: String = if current.eq_ignore_ascii_case("wal") {
            current
        } else {
            conn.query_row("PRAGMA journal_mode = WAL", [], |r| r.get(0))?
        };
        if !mode.eq_ignore_ascii_case("wal") {
            return Err(TxError::Store(StoreError::backend(
                "open the database",
                path.display().to_string(),
                Retry::Permanent,
                EmbeddedError::NoWal(mode),
            )));
        }
        conn.pragma_update(None, "synchronous", "NORMAL")?;
        // Every statement is prepared once per connection and reused (prepare_cached).
        conn.set_prepared_statement_cache_capacity(64);
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let found: i64 = tx.query_row("PRAGMA user_version", [], |r| r.get(0))?;
        if found > SCHEMA_VERSION {
            return Err(TxError::Store(StoreError::backend(
                "open the database",
                path.display().to_string(),
                Retry::Permanent,
                EmbeddedError::SchemaTooNew {
                    found,
                    supported: SCHEMA_VERSION,
                },
            )));
        }
        if found < 3 && found > 0 {
            // Version 2's manifest has no shard column: every row is in shard 0.
            let has_shard: bool = tx.query_row(
                "SELECT COUNT(*) FROM pragma_table_info('manifest') WHERE name = 'shard'",
                [],
                |r| r.get::<_, i64>(0).map(|n| n > 0),
            )?;
            if !has_shard {
                tx.execute_batch(
                    "ALTER TABLE manifest ADD COLUMN shard INTEGER NOT NULL DEFAULT 0",
                )?;
            }
        }
        if found < 4 && found > 0 {
            // Versions 1 to 3 keep a job's tenant in its body only: copy it to the column the
            // tenant index reads (a body without one is the default tenant's).
            let has_tenant: bool = tx.query_row(
                "SELECT COUNT(*) FROM pragma_table_info('jobs') WHERE name = 'tenant'",
                [],
                |r| r.get::<_, i64>(0).map(|n| n > 0),
            )?;
            if !has_tenant {
                tx.execute_batch(
                    "ALTER TABLE jobs ADD COLUMN tenant TEXT NOT NULL DEFAULT 'default';
                     UPDATE jobs SET tenant = COALESCE(json_extract(body, '$.tenant'), 'default');",
                )?;
            }
        }
        if found < 5 && found > 0 {
            // Versions 1 to 4 have no `open` column: every job is open until the reconciler
            // settles it (a body that says it is settled is not).
            let has_open: bool = tx.query_row(
                "SELECT COUNT(*) FROM pragma_table_info('jobs') WHERE name = 'open'",
                [],
                |r| r.get::<_, i64>(0).map(|n| n > 0),
            )?;
            if !has_open {
                tx.execute_batch(
                    "ALTER TABLE jobs ADD COLUMN open INTEGER NOT NULL DEFAULT 1;
                     UPDATE jobs SET open = 0 WHERE json_extract(body, '$.settled') = 1;",
                )?;
            }
        }
        tx.execute_batch(SCHEMA)?;
        tx.execute_batch(ledger::SCHEMA)?;
        tx.pragma_update(None, "user_version", SCHEMA_VERSION)?;
        tx.commit()?;
        Ok(conn)
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.inner.path
    }

    /// A work queue named `name` in this database, sharing this connection. Messages received
    /// `max_receive_count` times without an ack go to its dead letters on the next receive
    /// (at least 1).
    pub fn queue(&self, name: &str, max_receive_count: u32) -> SqliteQueue {
        SqliteQueue::new(self.clone(), name, max_receive_count)
    }

    /// Run `f` in one `BEGIN IMMEDIATE` transaction on the blocking pool, committing if it
    /// returns `Ok`; `operation` and `key` name the failure.
    pub(crate) async fn write<T, F>(
        &self,
        operation: &'static str,
        key: &str,
        f: F,
    ) -> StoreResult<T>
    where
        T: Send + 'static,
        F: FnOnce(&Transaction<'_>) -> TxResult<T> + Send + 'static,
    {
        let db = Arc::clone(&self.inner);
        let k = key.to_owned();
        blocking::run(operation, key, move || {
            let mut conn = db.conn.lock().unwrap_or_else(PoisonError::into_inner);
            let run = || -> TxResult<T> {
                let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
                let out = f(&tx)?;
                tx.commit()?;
                Ok(out)
            };
            run().map_err(|e| match e {
                TxError::Sql(e) => sql_error(operation, &k, e),
                TxError::Store(e) => e,
            })
        })
        .await
    }

    /// Run `f` on the connection (autocommit: each statement is its own transaction) on the
    /// blocking pool. For reads and single-statement writes.
    pub(crate) async fn with_conn<T, F>(
        &self,
        operation: &'static str,
        key: &str,
        f: F,
    ) -> StoreResult<T>
    where
        T: Send + 'static,
        F: FnOnce(&Connection) -> TxResult<T> + Send + 'static,
    {
        let db = Arc::clone(&self.inner);
        let k = key.to_owned();
        blocking::run(operation, key, move || {
            let conn = db.conn.lock().unwrap_or_else(PoisonError::into_inner);
            f(&conn).map_err(|e| match e {
                TxError::Sql(e) => sql_error(operation, &k, e),
                TxError::Store(e) => e,
            })
        })
        .await
    }

    pub(crate) fn sent(&self) -> &Notify {
        &self.inner.sent
    }
}

/// An unsigned number as SQLite's signed 64-bit integer, refusing what does not fit.
pub(crate) fn to_i64(what: &'static str, key: &str, v: u64) -> TxResult<i64> {
    i64::try_from(v).map_err(|_| {
        TxError::Store(StoreError::backend(
            "store",
            key,
            Retry::Permanent,
            EmbeddedError::OutOfRange {
                what,
                value: u128::from(v),
            },
        ))
    })
}

/// A stored signed integer that must be non-negative, as a `u64`.
pub(crate) fn to_u64(what: &'static str, key: &str, v: i64) -> TxResult<u64> {
    u64::try_from(v).map_err(|_| {
        TxError::Store(StoreError::Corrupt {
            what,
            key: key.to_owned(),
            detail: format!("negative value {v}"),
        })
    })
}

/// Decode a row's JSON body.
pub(crate) fn decode<T: serde::de::DeserializeOwned>(
    what: &'static str,
    key: &str,
    body: &str,
) -> TxResult<T> {
    serde_json::from_str(body).map_err(|e| {
        TxError::Store(StoreError::Corrupt {
            what,
            key: key.to_owned(),
            detail: e.to_string(),
        })
    })
}

/// Encode a row's JSON body.
pub(crate) fn encode<T: serde::Serialize>(
    what: &'static str,
    key: &str,
    row: &T,
) -> TxResult<String> {
    serde_json::to_string(row).map_err(|e| {
        TxError::Store(StoreError::backend(
            "encode",
            format!("{what} {key}"),
            Retry::Permanent,
            e,
        ))
    })
}

/// `execute` and `query_row` through the connection's statement cache: every statement is
/// prepared once per connection rather than on every call (parsing was ~8% of a worker's CPU).
pub(crate) trait Cached {
    fn exec(&self, sql: &str, params: impl rusqlite::Params) -> rusqlite::Result<usize>;
    fn row<T>(
        &self,
        sql: &str,
        params: impl rusqlite::Params,
        f: impl FnOnce(&rusqlite::Row<'_>) -> rusqlite::Result<T>,
    ) -> rusqlite::Result<T>;
}

impl Cached for Connection {
    fn exec(&self, sql: &str, params: impl rusqlite::Params) -> rusqlite::Result<usize> {
        self.prepare_cached(sql)?.execute(params)
    }

    fn row<T>(
        &self,
        sql: &str,
        params: impl rusqlite::Params,
        f: impl FnOnce(&rusqlite::Row<'_>) -> rusqlite::Result<T>,
    ) -> rusqlite::Result<T> {
        self.prepare_cached(sql)?.query_row(params, f)
    }
}

/// `SELECT version, body ... WHERE <key>` as an optional `(version, body)`.
pub(crate) fn select_versioned(
    conn: &Connection,
    sql: &str,
    params: impl rusqlite::Params,
) -> TxResult<Option<(i64, String)>> {
    Ok(conn
        .prepare_cached(sql)?
        .query_row(params, |r| Ok((r.get(0)?, r.get(1)?)))
        .optional()?)
}

#[cfg(test)]
mod open_tests {
    use super::SqliteBackend;

    /// Many processes opening a new data directory at once (here: connections on threads,
    /// which lock the file as processes do): every one opens. Before, an open could meet
    /// "database is locked" at once, without waiting, and its process exited.
    #[test]
    fn many_openers_of_a_new_database_all_open() {
        for round in 0..20 {
            let dir = tempfile::tempdir().expect("a temporary directory");
            let path = dir.path().join("tilegate.db");
            let barrier = std::sync::Arc::new(std::sync::Barrier::new(16));
            let openers: Vec<_> = (0..16)
                .map(|_| {
                    let (path, barrier) = (path.clone(), barrier.clone());
                    std::thread::spawn(move || {
                        barrier.wait();
                        SqliteBackend::open(&path).map(|_| ())
                    })
                })
                .collect();
            for o in openers {
                let opened = o.join().expect("an opener panicked");
                assert!(opened.is_ok(), "round {round}: {opened:?}");
            }
        }
    }
}

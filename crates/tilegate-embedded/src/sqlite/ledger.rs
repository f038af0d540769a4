//! The ledger contract on SQLite: attempt rows and pointers in two tables of the same file.
//! `publish` and `mark` are one IMMEDIATE transaction each, so the pointer and the rows it
//! concerns change together; `gc_due` (the row's `delete_after` while it is neither held nor
//! deleted, else NULL) is indexed, so GC finds due rows without a scan.

use super::{
    Cached as _, SqliteBackend, TxResult, decode, encode, select_versioned, to_i64, to_u64,
};
use async_trait::async_trait;
use rusqlite::{Connection, params};
use tilegate_core::id::JobId;
use tilegate_core::ledger::{
    AttemptId, AttemptRow, AttemptState, DuePage, LedgerTable, Pointer, Publish, PublishOutcome,
    Subject,
};
use tilegate_core::table::{CreateOutcome, UpdateOutcome, Versioned};
use tilegate_core::{StoreError, StoreResult, UnixMillis};
use tracing::debug;

pub(super) const SCHEMA: &str = r"
CREATE TABLE IF NOT EXISTS ledger_attempts (
    job_id      TEXT NOT NULL,
    subject     TEXT NOT NULL,
    attempt     TEXT NOT NULL,
    version     INTEGER NOT NULL,
    gc_due      INTEGER,
    body        TEXT NOT NULL,
    PRIMARY KEY (job_id, subject, attempt)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS ledger_attempts_due ON ledger_attempts (gc_due, job_id, subject, attempt)
    WHERE gc_due IS NOT NULL;

CREATE TABLE IF NOT EXISTS ledger_pointers (
    job_id      TEXT NOT NULL,
    subject     TEXT NOT NULL,
    attempt     TEXT NOT NULL,
    version     INTEGER NOT NULL,
    body        TEXT NOT NULL,
    PRIMARY KEY (job_id, subject)
) WITHOUT ROWID;
";

const ROW: &str = "ledger row";
const POINTER: &str = "ledger pointer";

fn gc_due(row: &AttemptRow) -> Option<UnixMillis> {
    row.in_due_index().then_some(row.delete_after).flatten()
}

fn get_row(
    c: &Connection,
    job: &str,
    subject: &str,
    attempt: &str,
) -> TxResult<Option<Versioned<AttemptRow>>> {
    let shown = format!("{job}/{subject}/{attempt}");
    select_versioned(
        c,
        "SELECT version, body FROM ledger_attempts
         WHERE job_id = ?1 AND subject = ?2 AND attempt = ?3",
        params![job, subject, attempt],
    )?
    .map(|(v, b)| {
        Ok(Versioned {
            version: to_u64("version", &shown, v)?,
            row: decode(ROW, &shown, &b)?,
        })
    })
    .transpose()
}

fn get_pointer_row(
    c: &Connection,
    job: &str,
    subject: &str,
) -> TxResult<Option<Versioned<Pointer>>> {
    let shown = format!("{job}/{subject}");
    select_versioned(
        c,
        "SELECT version, body FROM ledger_pointers WHERE job_id = ?1 AND subject = ?2",
        params![job, subject],
    )?
    .map(|(v, b)| {
        Ok(Versioned {
            version: to_u64("version", &shown, v)?,
            row: decode(POINTER, &shown, &b)?,
        })
    })
    .transpose()
}

/// Replace a row that this transaction read at `expected`.
fn write_row(c: &Connection, row: &AttemptRow, expected: u64) -> TxResult<bool> {
    let shown = row.shown();
    let body = encode(ROW, &shown, row)?;
    let exp = to_i64("version", &shown, expected)?;
    let n = c.exec(
        "UPDATE ledger_attempts SET version = version + 1, gc_due = ?4, body = ?5
         WHERE job_id = ?1 AND subject = ?2 AND attempt = ?3 AND version = ?6",
        params![
            row.job_id.as_str(),
            row.subject.to_string(),
            row.attempt.as_str(),
            gc_due(row),
            body,
            exp
        ],
    )?;
    Ok(n == 1)
}

fn put_pointer(c: &Connection, p: &Pointer) -> TxResult<()> {
    let shown = format!("{}/{}", p.job_id, p.subject);
    let body = encode(POINTER, &shown, p)?;
    c.exec(
        "INSERT INTO ledger_pointers (job_id, subject, attempt, version, body)
         VALUES (?1, ?2, ?3, 1, ?4)
         ON CONFLICT (job_id, subject)
         DO UPDATE SET attempt = excluded.attempt, version = version + 1, body = excluded.body",
        params![
            p.job_id.as_str(),
            p.subject.to_string(),
            p.attempt.as_str(),
            body
        ],
    )?;
    Ok(())
}

fn lost(what: &'static str, key: String) -> super::TxError {
    super::TxError::Store(StoreError::Corrupt {
        what,
        key,
        detail: "a row this transaction read cannot be updated".to_owned(),
    })
}

fn all_rows<T: serde::de::DeserializeOwned>(
    c: &Connection,
    sql: &str,
    job: &str,
    what: &'static str,
) -> TxResult<Vec<Versioned<T>>> {
    let mut stmt = c.prepare_cached(sql)?;
    let rows = stmt.query_map([job], |r| Ok((r.get::<_, i64>(0)?, r.get::<_, String>(1)?)))?;
    let mut out = Vec::new();
    for r in rows {
        let (v, b) = r?;
        out.push(Versioned {
            version: to_u64("version", job, v)?,
            row: decode(what, job, &b)?,
        });
    }
    Ok(out)
}

#[async_trait]
impl LedgerTable for SqliteBackend {
    async fn create_attempt(&self, row: &AttemptRow) -> StoreResult<CreateOutcome<AttemptRow>> {
        let row = row.clone();
        let shown = row.shown();
        self.write("create ledger row", &shown.clone(), move |tx| {
            let body = encode(ROW, &shown, &row)?;
            let subject = row.subject.to_string();
            let n = tx.exec(
                "INSERT INTO ledger_attempts (job_id, subject, attempt, version, gc_due, body)
                 VALUES (?1, ?2, ?3, 1, ?4, ?5) ON CONFLICT DO NOTHING",
                params![
                    row.job_id.as_str(),
                    subject,
                    row.attempt.as_str(),
                    gc_due(&row),
                    body
                ],
            )?;
            if n == 1 {
                return Ok(CreateOutcome::Created);
            }
            let existing = get_row(tx, row.job_id.as_str(), &subject, row.attempt.as_str())?
                .ok_or_else(|| lost(ROW, shown.clone()))?;
            Ok(CreateOutcome::AlreadyExists(existing))
        })
        .await
    }

    async fn get_attempt(
        &self,
        job: &JobId,
        subject: Subject,
        attempt: &AttemptId,
    ) -> StoreResult<Option<Versioned<AttemptRow>>> {
        let (job, subject, attempt) = (job.to_string(), subject.to_string(), attempt.to_string());
        let shown = format!("{job}/{subject}/{attempt}");
        self.with_conn("get ledger row", &shown, move |c| {
            get_row(c, &job, &subject, &attempt)
        })
        .await
    }

    async fn update_attempt(
        &self,
        row: &AttemptRow,
        expected: u64,
    ) -> StoreResult<UpdateOutcome<AttemptRow>> {
        let row = row.clone();
        let shown = row.shown();
        self.write("update ledger row", &shown, move |tx| {
            if write_row(tx, &row, expected)? {
                return Ok(UpdateOutcome::Updated {
                    version: expected + 1,
                });
            }
            Ok(UpdateOutcome::Superseded(get_row(
                tx,
                row.job_id.as_str(),
                &row.subject.to_string(),
                row.attempt.as_str(),
            )?))
        })
        .await
    }

    async fn list_attempts(&self, job: &JobId) -> StoreResult<Vec<Versioned<AttemptRow>>> {
        let job = job.to_string();
        self.with_conn("list ledger rows", &job.clone(), move |c| {
            all_rows(
                c,
                "SELECT version, body FROM ledger_attempts WHERE job_id = ?1",
                &job,
                ROW,
            )
        })
        .await
    }

    async fn get_pointer(
        &self,
        job: &JobId,
        subject: Subject,
    ) -> StoreResult<Option<Versioned<Pointer>>> {
        let (job, subject) = (job.to_string(), subject.to_string());
        self.with_conn(
            "get ledger pointer",
            &format!("{job}/{subject}"),
            move |c| get_pointer_row(c, &job, &subject),
        )
        .await
    }

    async fn list_pointers(&self, job: &JobId) -> StoreResult<Vec<Versioned<Pointer>>> {
        let job = job.to_string();
        self.with_conn("list ledger pointers", &job.clone(), move |c| {
            all_rows(
                c,
                "SELECT version, body FROM ledger_pointers WHERE job_id = ?1",
                &job,
                POINTER,
            )
        })
        .await
    }

    async fn publish(&self, p: &Publish) -> StoreResult<PublishOutcome> {
        let p = p.clone();
        let shown = format!("{}/{}/{}", p.job_id, p.subject, p.attempt);
        self.write("publish", &shown.clone(), move |tx| {
            let (job, subject) = (p.job_id.as_str(), p.subject.to_string());
            let current = get_pointer_row(tx, job, &subject)?;
            if let Some(refused) = p.superseded(current.as_ref()) {
                debug!(store = "sqlite", row = %shown, outcome = "superseded", "publish");
                return Ok(refused);
            }
            let new = get_row(tx, job, &subject, p.attempt.as_str())?;
            let prev = match &p.seen {
                Some(seen) => get_row(tx, job, &subject, seen.as_str())?,
                None => None,
            };
            let w = match p.plan(current.as_ref(), new.as_ref(), prev.as_ref()) {
                Ok(w) => w,
                Err(Some(refused)) => return Ok(*refused),
                Err(None) => return Err(lost(ROW, p.seen_shown())),
            };
            if let Some(prev) = &w.retired
                && !write_row(tx, &prev.row, prev.version)?
            {
                return Err(lost(ROW, prev.row.shown()));
            }
            if !write_row(tx, &w.accepted.row, w.accepted.version)? {
                return Err(lost(ROW, shown.clone()));
            }
            put_pointer(tx, &w.pointer)?;
            debug!(store = "sqlite", row = %shown, outcome = "published", "publish");
            Ok(p.published())
        })
        .await
    }

    async fn mark(
        &self,
        row: &Versioned<AttemptRow>,
        now: UnixMillis,
    ) -> StoreResult<UpdateOutcome<AttemptRow>> {
        let row = row.clone();
        let shown = row.row.shown();
        self.write("mark ledger row", &shown, move |tx| {
            let r = &row.row;
            let subject = r.subject.to_string();
            if !write_row(tx, &r.marked(now), row.version)? {
                return Ok(UpdateOutcome::Superseded(get_row(
                    tx,
                    r.job_id.as_str(),
                    &subject,
                    r.attempt.as_str(),
                )?));
            }
            if r.state == AttemptState::Accepted {
                // An expired preview: withdraw the pointer that names it, in this write.
                tx.exec(
                    "DELETE FROM ledger_pointers WHERE job_id = ?1 AND subject = ?2 AND attempt = ?3",
                    params![r.job_id.as_str(), subject, r.attempt.as_str()],
                )?;
            }
            Ok(UpdateOutcome::Updated {
                version: row.version + 1,
            })
        })
        .await
    }

    async fn due(
        &self,
        now: UnixMillis,
        cursor: Option<&str>,
        limit: usize,
    ) -> StoreResult<DuePage> {
        let after: (i64, String, String, String) = match cursor {
            None => (i64::MIN, String::new(), String::new(), String::new()),
            Some(c) => serde_json::from_str(c).map_err(|e| StoreError::Corrupt {
                what: "due cursor",
                key: c.to_owned(),
                detail: e.to_string(),
            })?,
        };
        self.with_conn("list due ledger rows", "ledger", move |c| {
            let lim = i64::try_from(limit).unwrap_or(i64::MAX);
            let mut stmt = c.prepare_cached(
                "SELECT gc_due, job_id, subject, attempt, version, body FROM ledger_attempts
                 WHERE gc_due IS NOT NULL AND gc_due <= ?1
                   AND (gc_due, job_id, subject, attempt) > (?2, ?3, ?4, ?5)
                 ORDER BY gc_due, job_id, subject, attempt LIMIT ?6",
            )?;
            let mut rows = stmt.query(params![now, after.0, after.1, after.2, after.3, lim])?;
            let mut page = DuePage::default();
            let mut last = None;
            while let Some(r) = rows.next()? {
                let key: (i64, String, String, String) =
                    (r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?);
                let shown = format!("{}/{}/{}", key.1, key.2, key.3);
                page.rows.push(Versioned {
                    version: to_u64("version", &shown, r.get(4)?)?,
                    row: decode(ROW, &shown, &r.get::<_, String>(5)?)?,
                });
                last = Some(key);
            }
            if page.rows.len() == limit {
                page.next = last.map(|k| serde_json::to_string(&k).expect("a tuple serialises"));
            }
            Ok(page)
        })
        .await
    }

    async fn oldest_due(&self, now: UnixMillis) -> StoreResult<Option<UnixMillis>> {
        self.with_conn("oldest due ledger row", "ledger", move |c| {
            Ok(c.row(
                "SELECT MIN(gc_due) FROM ledger_attempts WHERE gc_due IS NOT NULL AND gc_due <= ?1",
                [now],
                |r| r.get::<_, Option<i64>>(0),
            )?)
        })
        .await
    }
}

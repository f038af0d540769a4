//! The ledger in maps: attempt rows and pointers share the tables' lock, so `publish` and
//! `mark` change the pointer and the rows it concerns in one step, as one SQLite transaction
//! or one DynamoDB `TransactWriteItems` does. The due index is an ordered set kept beside the
//! rows (never a scan).

use crate::tables::MemoryTables;
use async_trait::async_trait;
use std::collections::{BTreeMap, BTreeSet};
use tilegate_core::id::JobId;
use tilegate_core::ledger::{
    AttemptId, AttemptRow, AttemptState, DuePage, LedgerTable, Pointer, Publish, PublishOutcome,
    Subject,
};
use tilegate_core::table::{CreateOutcome, UpdateOutcome, Versioned};
use tilegate_core::{StoreError, StoreResult, UnixMillis};

/// (job, subject, attempt): a row's key.
type RowKey = (String, String, String);

#[derive(Debug, Default)]
pub(crate) struct LedgerState {
    rows: BTreeMap<RowKey, Versioned<AttemptRow>>,
    pointers: BTreeMap<(String, String), Versioned<Pointer>>,
    /// (gc_due, job, subject, attempt) of every row in the due index.
    due: BTreeSet<(UnixMillis, String, String, String)>,
}

fn row_key(job: &JobId, subject: Subject, attempt: &AttemptId) -> RowKey {
    (job.to_string(), subject.to_string(), attempt.to_string())
}

fn key_of(row: &AttemptRow) -> RowKey {
    row_key(&row.job_id, row.subject, &row.attempt)
}

fn gc_due(row: &AttemptRow) -> Option<UnixMillis> {
    row.in_due_index().then_some(row.delete_after).flatten()
}

impl LedgerState {
    /// Store `row` at `version`, keeping the due index in step.
    fn put(&mut self, row: AttemptRow, version: u64) {
        let key = key_of(&row);
        if let Some(old) = self.rows.get(&key)
            && let Some(d) = gc_due(&old.row)
        {
            self.due
                .remove(&(d, key.0.clone(), key.1.clone(), key.2.clone()));
        }
        if let Some(d) = gc_due(&row) {
            self.due
                .insert((d, key.0.clone(), key.1.clone(), key.2.clone()));
        }
        self.rows.insert(key, Versioned { version, row });
    }

    /// Replace the row at `expected`; false if it is not there at that version.
    fn replace(&mut self, row: AttemptRow, expected: u64) -> bool {
        match self.rows.get(&key_of(&row)) {
            Some(cur) if cur.version == expected => {
                self.put(row, expected + 1);
                true
            }
            _ => false,
        }
    }
}

fn lost(key: String) -> StoreError {
    StoreError::Corrupt {
        what: "ledger row",
        key,
        detail: "a row this write read cannot be updated".to_owned(),
    }
}

#[async_trait]
impl LedgerTable for MemoryTables {
    async fn create_attempt(&self, row: &AttemptRow) -> StoreResult<CreateOutcome<AttemptRow>> {
        let mut st = self.lock();
        if let Some(existing) = st.ledger.rows.get(&key_of(row)) {
            return Ok(CreateOutcome::AlreadyExists(existing.clone()));
        }
        st.ledger.put(row.clone(), 1);
        Ok(CreateOutcome::Created)
    }

    async fn get_attempt(
        &self,
        job: &JobId,
        subject: Subject,
        attempt: &AttemptId,
    ) -> StoreResult<Option<Versioned<AttemptRow>>> {
        Ok(self
            .lock()
            .ledger
            .rows
            .get(&row_key(job, subject, attempt))
            .cloned())
    }

    async fn update_attempt(
        &self,
        row: &AttemptRow,
        expected: u64,
    ) -> StoreResult<UpdateOutcome<AttemptRow>> {
        let mut st = self.lock();
        if st.ledger.replace(row.clone(), expected) {
            return Ok(UpdateOutcome::Updated {
                version: expected + 1,
            });
        }
        Ok(UpdateOutcome::Superseded(
            st.ledger.rows.get(&key_of(row)).cloned(),
        ))
    }

    async fn list_attempts(&self, job: &JobId) -> StoreResult<Vec<Versioned<AttemptRow>>> {
        let st = self.lock();
        Ok(st
            .ledger
            .rows
            .iter()
            .filter(|(k, _)| k.0 == job.as_str())
            .map(|(_, v)| v.clone())
            .collect())
    }

    async fn get_pointer(
        &self,
        job: &JobId,
        subject: Subject,
    ) -> StoreResult<Option<Versioned<Pointer>>> {
        Ok(self
            .lock()
            .ledger
            .pointers
            .get(&(job.to_string(), subject.to_string()))
            .cloned())
    }

    async fn list_pointers(&self, job: &JobId) -> StoreResult<Vec<Versioned<Pointer>>> {
        let st = self.lock();
        Ok(st
            .ledger
            .pointers
            .iter()
            .filter(|(k, _)| k.0 == job.as_str())
            .map(|(_, v)| v.clone())
            .collect())
    }

    async fn publish(&self, p: &Publish) -> StoreResult<PublishOutcome> {
        let mut guard = self.lock();
        let st = &mut guard.ledger;
        let pkey = (p.job_id.to_string(), p.subject.to_string());
        let current = st.pointers.get(&pkey).cloned();
        let new = st
            .rows
            .get(&row_key(&p.job_id, p.subject, &p.attempt))
            .cloned();
        let prev = p
            .seen
            .as_ref()
            .and_then(|seen| st.rows.get(&row_key(&p.job_id, p.subject, seen)).cloned());
        let w = match p.plan(current.as_ref(), new.as_ref(), prev.as_ref()) {
            Ok(w) => w,
            Err(Some(refused)) => return Ok(*refused),
            Err(None) => return Err(lost(p.seen_shown())),
        };
        if let Some(prev) = w.retired {
            st.put(prev.row, prev.version + 1);
        }
        st.put(w.accepted.row, w.accepted.version + 1);
        let version = current.map_or(1, |c| c.version + 1);
        st.pointers.insert(
            pkey,
            Versioned {
                version,
                row: w.pointer,
            },
        );
        Ok(p.published())
    }

    async fn mark(
        &self,
        row: &Versioned<AttemptRow>,
        now: UnixMillis,
    ) -> StoreResult<UpdateOutcome<AttemptRow>> {
        let mut guard = self.lock();
        let st = &mut guard.ledger;
        let r = &row.row;
        if !st.replace(r.marked(now), row.version) {
            return Ok(UpdateOutcome::Superseded(st.rows.get(&key_of(r)).cloned()));
        }
        if r.state == AttemptState::Accepted {
            // An expired preview: withdraw the pointer that names it, in this write.
            let pkey = (r.job_id.to_string(), r.subject.to_string());
            if st
                .pointers
                .get(&pkey)
                .is_some_and(|p| p.row.attempt == r.attempt)
            {
                st.pointers.remove(&pkey);
            }
        }
        Ok(UpdateOutcome::Updated {
            version: row.version + 1,
        })
    }

    async fn due(
        &self,
        now: UnixMillis,
        cursor: Option<&str>,
        limit: usize,
    ) -> StoreResult<DuePage> {
        let after: Option<(UnixMillis, String, String, String)> = cursor
            .map(|c| {
                serde_json::from_str(c).map_err(|e| StoreError::Corrupt {
                    what: "due cursor",
                    key: c.to_owned(),
                    detail: e.to_string(),
                })
            })
            .transpose()?;
        let st = self.lock();
        let mut page = DuePage::default();
        let mut last = None;
        let start = match &after {
            Some(a) => std::ops::Bound::Excluded(a.clone()),
            None => std::ops::Bound::Unbounded,
        };
        for k in st
            .ledger
            .due
            .range((start, std::ops::Bound::Unbounded))
            .take_while(|k| k.0 <= now)
            .take(limit)
        {
            let row = st
                .ledger
                .rows
                .get(&(k.1.clone(), k.2.clone(), k.3.clone()))
                .cloned()
                .ok_or_else(|| lost(format!("{}/{}/{}", k.1, k.2, k.3)))?;
            page.rows.push(row);
            last = Some(k.clone());
        }
        if page.rows.len() == limit {
            page.next = last.map(|k| serde_json::to_string(&k).expect("a tuple serialises"));
        }
        Ok(page)
    }

    async fn oldest_due(&self, now: UnixMillis) -> StoreResult<Option<UnixMillis>> {
        Ok(self
            .lock()
            .ledger
            .due
            .first()
            .map(|k| k.0)
            .filter(|d| *d <= now))
    }
}

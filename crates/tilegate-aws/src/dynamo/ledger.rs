//! The ledger contract on DynamoDB: one table `P-ledger`, attempt rows and pointers side by
//! side, and a sparse GSI that finds due rows without a scan.
//!
//! | item | `pk` | `sk` | other attributes |
//! |---|---|---|---|
//! | attempt | `{job}#{NN}` | `a#{subject}#{attempt}` | `version`, `body` (JSON); while due-able (neither held nor deleted, with a deadline) `due_shard` = `due#{MM}` and `gc_due` = `delete_after` |
//! | pointer | `{job}#{NN}` | `p#{subject}` | `version`, `body`, `attempt` |
//!
//! `NN` is a hash of the subject modulo [`SHARDS`], so a 40,000-window job spreads its writes
//! over 16 partitions instead of one (about 1,000 writes/s each); listing a job fans out over
//! them. `MM` is a hash of the attempt ID: the due index (`due`, keyed `due_shard`/`gc_due`) has
//! no hot partition either, and GC queries each shard for `gc_due <= now`.
//!
//! `publish` and an accepted row's `mark` are `TransactWriteItems`: the pointer's condition
//! (the attempt the caller saw) and each row's version guard are evaluated together, and
//! nothing applies unless all hold. A cancelled transaction is re-read and reported as the
//! outcome it was (superseded, not publishable, or our own lost answer).

use super::model::{corrupt, decode_body, encode_body, get_n, n, names, s};
use super::versioned::CondWrite;
use super::{DynamoTables, Item};
use async_trait::async_trait;
use aws_sdk_dynamodb::types::{AttributeValue, Delete, Put, TransactWriteItem};
use std::collections::HashMap;
use tilegate_core::id::JobId;
use tilegate_core::ledger::{
    AttemptId, AttemptRow, AttemptState, DuePage, LedgerTable, Pointer, Publish, PublishOutcome,
    Subject,
};
use tilegate_core::table::{CreateOutcome, UpdateOutcome, Versioned};
use tilegate_core::{StoreError, StoreResult, UnixMillis};
use tracing::debug;

/// Partitions of one job's rows, and of the due index.
pub const SHARDS: u64 = 16;
/// The due index.
pub(super) const DUE_INDEX: &str = "due";

const ROW: &str = "ledger row";
const POINTER: &str = "ledger pointer";
/// How often a cancelled transaction whose cause moved on is re-read and tried again.
const TRANSACT_TRIES: u32 = 8;

/// FNV-1a: a stable shard of a string (the layout must not change between builds).
fn shard(v: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in v.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h % SHARDS
}

fn pk(job: &JobId, subject: Subject) -> String {
    format!("{job}#{:02}", shard(&subject.to_string()))
}

fn row_key(job: &JobId, subject: Subject, attempt: &AttemptId) -> Item {
    HashMap::from([
        ("pk".to_owned(), s(pk(job, subject))),
        ("sk".to_owned(), s(format!("a#{subject}#{attempt}"))),
    ])
}

fn pointer_key(job: &JobId, subject: Subject) -> Item {
    HashMap::from([
        ("pk".to_owned(), s(pk(job, subject))),
        ("sk".to_owned(), s(format!("p#{subject}"))),
    ])
}

fn row_item(row: &AttemptRow, version: u64) -> StoreResult<Item> {
    let shown = row.shown();
    let mut item = row_key(&row.job_id, row.subject, &row.attempt);
    item.insert("version".to_owned(), n(version));
    item.insert("body".to_owned(), s(encode_body(row, ROW, &shown)?));
    if let Some(due) = row.delete_after.filter(|_| row.in_due_index()) {
        item.insert(
            "due_shard".to_owned(),
            s(format!("due#{:02}", shard(row.attempt.as_str()))),
        );
        item.insert("gc_due".to_owned(), n(due));
    }
    Ok(item)
}

fn pointer_item(p: &Pointer, version: u64) -> StoreResult<Item> {
    let shown = format!("{}/{}", p.job_id, p.subject);
    let mut item = pointer_key(&p.job_id, p.subject);
    item.insert("version".to_owned(), n(version));
    item.insert("attempt".to_owned(), s(p.attempt.as_str()));
    item.insert("body".to_owned(), s(encode_body(p, POINTER, &shown)?));
    Ok(item)
}

fn guarded_put(
    table: &str,
    item: Item,
    condition: &str,
    attrs: &[(&str, &str)],
    values: Item,
) -> StoreResult<TransactWriteItem> {
    let put = Put::builder()
        .table_name(table)
        .set_item(Some(item))
        .condition_expression(condition)
        .set_expression_attribute_names(Some(names(attrs)))
        .set_expression_attribute_values((!values.is_empty()).then_some(values))
        .build()
        .map_err(|e| corrupt("transaction", table, e.to_string()))?;
    Ok(TransactWriteItem::builder().put(put).build())
}

/// A row put guarded by the version it was read at.
fn row_put(table: &str, row: &AttemptRow, read_at: u64) -> StoreResult<TransactWriteItem> {
    guarded_put(
        table,
        row_item(row, read_at + 1)?,
        "#v = :v",
        &[("#v", "version")],
        HashMap::from([(":v".to_owned(), n(read_at))]),
    )
}

impl DynamoTables {
    /// Every item of a job with `sk` beginning `prefix`, over all its partitions.
    async fn query_job(&self, job: &JobId, prefix: &str) -> StoreResult<Vec<Item>> {
        let mut out = Vec::new();
        for nn in 0..SHARDS {
            let pk = format!("{job}#{nn:02}");
            let mut start: Option<Item> = None;
            loop {
                let page = self
                    .sdk()
                    .send("list ledger", &pk, || {
                        self.client
                            .query()
                            .table_name(&self.ledger)
                            .key_condition_expression("#pk = :pk AND begins_with(#sk, :p)")
                            .expression_attribute_names("#pk", "pk")
                            .expression_attribute_names("#sk", "sk")
                            .expression_attribute_values(":pk", s(&pk))
                            .expression_attribute_values(":p", s(prefix))
                            .consistent_read(true)
                            .set_exclusive_start_key(start.clone())
                            .send()
                    })
                    .await?;
                start = page.last_evaluated_key.clone();
                out.extend(page.items.unwrap_or_default());
                if start.is_none() {
                    break;
                }
            }
        }
        Ok(out)
    }

    /// One page of the due index's shard `shard_pk`: rows with `gc_due <= now`, in deadline
    /// order, at most `limit`, from `start`.
    async fn due_query(
        &self,
        shard_pk: &str,
        now: UnixMillis,
        limit: i32,
        start: Option<Item>,
    ) -> StoreResult<aws_sdk_dynamodb::operation::query::QueryOutput> {
        self.sdk()
            .send("list due ledger rows", shard_pk, || {
                self.client
                    .query()
                    .table_name(&self.ledger)
                    .index_name(DUE_INDEX)
                    .key_condition_expression("#ds = :ds AND #due <= :now")
                    .expression_attribute_names("#ds", "due_shard")
                    .expression_attribute_names("#due", "gc_due")
                    .expression_attribute_values(":ds", s(shard_pk))
                    .expression_attribute_values(":now", n(now))
                    .limit(limit)
                    .set_exclusive_start_key(start.clone())
                    .send()
            })
            .await
    }

    /// The conditional put of an attempt row at `version`, guarded by `condition`.
    fn row_write<'a>(
        &'a self,
        operation: &'static str,
        condition: &'a str,
        shown: &'a str,
    ) -> CondWrite<'a> {
        CondWrite {
            operation,
            table: &self.ledger,
            condition,
            names: &[("#pk", "pk"), ("#v", "version")],
            shown,
        }
    }
}

/// The `#v` mention keeps the name map of a create valid (DynamoDB refuses unused names).
const CREATE_CONDITION: &str = "attribute_not_exists(#pk) AND attribute_not_exists(#v)";

#[async_trait]
impl LedgerTable for DynamoTables {
    async fn create_attempt(&self, row: &AttemptRow) -> StoreResult<CreateOutcome<AttemptRow>> {
        let shown = row.shown();
        self.create_versioned(
            self.row_write("create ledger row", CREATE_CONDITION, &shown),
            row_item(row, 1)?,
            row,
            ROW,
            || self.get_attempt(&row.job_id, row.subject, &row.attempt),
        )
        .await
    }

    async fn get_attempt(
        &self,
        job: &JobId,
        subject: Subject,
        attempt: &AttemptId,
    ) -> StoreResult<Option<Versioned<AttemptRow>>> {
        let shown = format!("{job}/{subject}/{attempt}");
        self.get_item(&self.ledger, row_key(job, subject, attempt), &shown)
            .await?
            .map(|item| decode_body(&item, ROW, &shown))
            .transpose()
    }

    async fn update_attempt(
        &self,
        row: &AttemptRow,
        expected: u64,
    ) -> StoreResult<UpdateOutcome<AttemptRow>> {
        let shown = row.shown();
        self.update_versioned(
            self.row_write(
                "update ledger row",
                "attribute_exists(#pk) AND #v = :v",
                &shown,
            ),
            row_item(row, expected + 1)?,
            &[(":v", n(expected))],
            row,
            expected,
            ROW,
        )
        .await
    }

    async fn list_attempts(&self, job: &JobId) -> StoreResult<Vec<Versioned<AttemptRow>>> {
        let shown = job.to_string();
        self.query_job(job, "a#")
            .await?
            .iter()
            .map(|item| decode_body(item, ROW, &shown))
            .collect()
    }

    async fn get_pointer(
        &self,
        job: &JobId,
        subject: Subject,
    ) -> StoreResult<Option<Versioned<Pointer>>> {
        let shown = format!("{job}/{subject}");
        self.get_item(&self.ledger, pointer_key(job, subject), &shown)
            .await?
            .map(|item| decode_body(&item, POINTER, &shown))
            .transpose()
    }

    async fn list_pointers(&self, job: &JobId) -> StoreResult<Vec<Versioned<Pointer>>> {
        let shown = job.to_string();
        self.query_job(job, "p#")
            .await?
            .iter()
            .map(|item| decode_body(item, POINTER, &shown))
            .collect()
    }

    async fn publish(&self, p: &Publish) -> StoreResult<PublishOutcome> {
        let shown = format!("{}/{}/{}", p.job_id, p.subject, p.attempt);
        for _ in 0..TRANSACT_TRIES {
            let current = self.get_pointer(&p.job_id, p.subject).await?;
            if let Some(refused) = p.superseded(current.as_ref()) {
                if let Some(c) = &current
                    && c.row.attempt == p.attempt
                    && c.row.moved_at == p.now
                {
                    // This publish's own transaction landed and its answer was lost.
                    return Ok(p.published());
                }
                debug!(store = "dynamodb", row = %shown, outcome = "superseded", "publish");
                return Ok(refused);
            }
            let row = self.get_attempt(&p.job_id, p.subject, &p.attempt).await?;
            let prev = match &p.seen {
                Some(seen) => self.get_attempt(&p.job_id, p.subject, seen).await?,
                None => None,
            };
            let w = match p.plan(current.as_ref(), row.as_ref(), prev.as_ref()) {
                Ok(w) => w,
                Err(Some(refused)) => return Ok(*refused),
                Err(None) => {
                    return Err(corrupt(
                        ROW,
                        &p.seen_shown(),
                        "the pointer names an attempt with no row",
                    ));
                }
            };
            let mut items = Vec::with_capacity(3);
            items.push(match (&current, &p.seen) {
                (Some(c), Some(seen)) => guarded_put(
                    &self.ledger,
                    pointer_item(&w.pointer, c.version + 1)?,
                    "#v = :v AND #att = :seen",
                    &[("#v", "version"), ("#att", "attempt")],
                    HashMap::from([
                        (":v".to_owned(), n(c.version)),
                        (":seen".to_owned(), s(seen.as_str())),
                    ]),
                )?,
                _ => guarded_put(
                    &self.ledger,
                    pointer_item(&w.pointer, 1)?,
                    "attribute_not_exists(#pk)",
                    &[("#pk", "pk")],
                    HashMap::new(),
                )?,
            });
            items.push(row_put(&self.ledger, &w.accepted.row, w.accepted.version)?);
            if let Some(prev) = &w.retired {
                items.push(row_put(&self.ledger, &prev.row, prev.version)?);
            }
            if self.transact(&shown, items).await?.1 {
                debug!(store = "dynamodb", row = %shown, outcome = "published", "publish");
                return Ok(p.published());
            }
            // Cancelled: something moved between the reads and the write. Look again.
        }
        Err(StoreError::backend(
            "publish",
            &shown,
            tilegate_core::Retry::Retryable,
            crate::error::AwsError::Contended {
                what: format!("ledger row {shown}"),
                attempts: TRANSACT_TRIES,
            },
        ))
    }

    async fn mark(
        &self,
        row: &Versioned<AttemptRow>,
        now: UnixMillis,
    ) -> StoreResult<UpdateOutcome<AttemptRow>> {
        let r = &row.row;
        if r.state != AttemptState::Accepted {
            return self.update_attempt(&r.marked(now), row.version).await;
        }
        // An expired preview: withdraw the pointer that names it in the same transaction.
        let shown = r.shown();
        let withdraw = Delete::builder()
            .table_name(&self.ledger)
            .set_key(Some(pointer_key(&r.job_id, r.subject)))
            .condition_expression("#att = :a")
            .expression_attribute_names("#att", "attempt")
            .expression_attribute_values(":a", s(r.attempt.as_str()))
            .build()
            .map_err(|e| corrupt("transaction", &shown, e.to_string()))?;
        let items = vec![
            row_put(&self.ledger, &r.marked(now), row.version)?,
            TransactWriteItem::builder().delete(withdraw).build(),
        ];
        if self.transact(&shown, items).await?.1 {
            return Ok(UpdateOutcome::Updated {
                version: row.version + 1,
            });
        }
        let current = self.get_attempt(&r.job_id, r.subject, &r.attempt).await?;
        if let Some(c) = &current
            && c.version == row.version + 1
            && c.row == r.marked(now)
        {
            return Ok(UpdateOutcome::Updated { version: c.version });
        }
        Ok(UpdateOutcome::Superseded(current))
    }

    async fn due(
        &self,
        now: UnixMillis,
        cursor: Option<&str>,
        limit: usize,
    ) -> StoreResult<DuePage> {
        // The cursor: the shard to continue and, within it, the last key returned.
        let (mut nn, mut start): (u64, Option<HashMap<String, String>>) = match cursor {
            None => (0, None),
            Some(c) => {
                serde_json::from_str(c).map_err(|e| corrupt("due cursor", c, e.to_string()))?
            }
        };
        let mut page = DuePage::default();
        while nn < SHARDS {
            let shard_pk = format!("due#{nn:02}");
            let exclusive = start.take().map(|m| decode_start(&m));
            let room =
                i32::try_from(limit.saturating_sub(page.rows.len()).max(1)).unwrap_or(i32::MAX);
            let got = self.due_query(&shard_pk, now, room, exclusive).await?;
            for item in got.items() {
                page.rows.push(decode_body(item, ROW, &shard_pk)?);
            }
            match &got.last_evaluated_key {
                Some(last) => start = Some(encode_start(last)),
                None => nn += 1,
            }
            if page.rows.len() >= limit && nn < SHARDS {
                page.next =
                    Some(serde_json::to_string(&(nn, &start)).expect("a cursor serialises"));
                return Ok(page);
            }
        }
        Ok(page)
    }

    async fn oldest_due(&self, now: UnixMillis) -> StoreResult<Option<UnixMillis>> {
        // The first item of each shard (the index is ordered by deadline within a shard).
        let mut oldest: Option<UnixMillis> = None;
        for nn in 0..SHARDS {
            let shard_pk = format!("due#{nn:02}");
            let got = self.due_query(&shard_pk, now, 1, None).await?;
            if let Some(item) = got.items().first() {
                let due: UnixMillis = get_n(item, "gc_due", ROW, &shard_pk)?;
                oldest = Some(oldest.map_or(due, |o| o.min(due)));
            }
        }
        Ok(oldest)
    }
}

/// A due-index start key as strings (`N:` numbers, `S:` strings) for the opaque cursor.
fn encode_start(key: &Item) -> HashMap<String, String> {
    key.iter()
        .filter_map(|(k, v)| match v {
            AttributeValue::S(x) => Some((k.clone(), format!("S:{x}"))),
            AttributeValue::N(x) => Some((k.clone(), format!("N:{x}"))),
            _ => None,
        })
        .collect()
}

fn decode_start(m: &HashMap<String, String>) -> Item {
    m.iter()
        .filter_map(|(k, v)| {
            let (t, x) = v.split_at_checked(2)?;
            match t {
                "S:" => Some((k.clone(), s(x))),
                "N:" => Some((k.clone(), n(x))),
                _ => None,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shards_are_stable_and_spread() {
        // The layout is stored: these values must never change.
        assert_eq!(shard("0000_0000"), shard("0000_0000"));
        let used: std::collections::HashSet<_> =
            (0..64).map(|c| shard(&format!("0000_{c:04}"))).collect();
        assert!(used.len() > 10, "{used:?}");
    }
}

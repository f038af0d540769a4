//! The manifest table ([`ManifestTable`]): one versioned row per window, in the job's partition
//! or spread over `job#NN` shards, and one row counter per partition in the counters table.
//!
//! A row is created in one `TransactWriteItems` with its partition's counter: the row's `Put`
//! on `attribute_not_exists(pk)` and the counter's `ADD rows 1`. Either both apply or neither,
//! so the counter is the number of rows however often a window is recorded, and a completion
//! check reads one small item instead of counting a partition. Each partition's counter is its
//! own item (`job_id` = the partition key + `#rows`): the counters take the manifest's
//! sharding, and no item takes more than its partition's share of the job's rows.

use super::model::{corrupt, decode_body, get_n, manifest_item, manifest_key, n, s};
use super::versioned::{CondWrite, own_lost_write};
use super::{DynamoTables, Item};
use async_trait::async_trait;
use aws_sdk_dynamodb::types::{KeysAndAttributes, Put, Select, TransactWriteItem, Update};
use std::collections::HashMap;
use tilegate_core::grid::Window;
use tilegate_core::id::JobId;
use tilegate_core::table::{
    CreateOutcome, ManifestEntry, ManifestTable, UpdateOutcome, Versioned, manifest_partition,
    manifest_partitions,
};
use tilegate_core::{Retry, StoreError, StoreResult};
use tracing::debug;

/// The row counter's attribute on its item.
const ROWS_ATTR: &str = "rows";
/// How often a create cancelled by another transaction on its partition's counter (not by an
/// existing row) is tried again.
const CREATE_TRIES: u32 = 8;

/// A retryable failure after `attempts` tries that kept meeting other writers.
fn contended(operation: &'static str, shown: &str, what: String, attempts: u32) -> StoreError {
    StoreError::backend(
        operation,
        shown,
        Retry::Retryable,
        crate::error::AwsError::Contended { what, attempts },
    )
}

/// The key of manifest partition `partition`'s row counter in the counters table.
fn rows_counter_key(partition: &str) -> Item {
    HashMap::from([("job_id".to_owned(), s(format!("{partition}#rows")))])
}

/// The number on a row counter item (0 when the item is absent: no row yet).
fn rows_of(item: Option<&Item>, shown: &str) -> StoreResult<u64> {
    item.map_or(Ok(0), |i| {
        get_n(i, ROWS_ATTR, "manifest row counter", shown)
    })
}

impl DynamoTables {
    /// Page through a `Query` on `pk = :pk` of the manifest (consistent), one manifest
    /// partition, calling `each` per page. `count_only` uses `Select=COUNT`.
    async fn query_partition<F>(&self, job: &str, count_only: bool, each: &mut F) -> StoreResult<()>
    where
        F: FnMut(i32, Vec<Item>) -> StoreResult<()>,
    {
        let operation = if count_only {
            "count manifest entries"
        } else {
            "list manifest entries"
        };
        let mut start: Option<Item> = None;
        loop {
            let page = self
                .sdk()
                .send(operation, job, || {
                    let mut req = self
                        .client
                        .query()
                        .table_name(&self.manifest)
                        .key_condition_expression("#pk = :pk")
                        .expression_attribute_names("#pk", "pk")
                        .expression_attribute_values(":pk", s(job))
                        .consistent_read(true)
                        .set_exclusive_start_key(start.clone());
                    if count_only {
                        req = req.select(Select::Count);
                    }
                    req.send()
                })
                .await?;
            let count = page.count();
            start = page.last_evaluated_key.clone();
            each(count, page.items.unwrap_or_default())?;
            if start.is_none() {
                return Ok(());
            }
        }
    }
}

#[async_trait]
impl ManifestTable for DynamoTables {
    async fn put_entry(&self, e: &ManifestEntry) -> StoreResult<CreateOutcome<ManifestEntry>> {
        let shown = format!("{}/{}", e.job_id, e.window);
        let shards = self.manifest_shards(&e.job_id).await?;
        let partition = manifest_partition(&e.job_id, e.window, shards);
        let built = |r: Result<TransactWriteItem, aws_sdk_dynamodb::error::BuildError>| {
            r.map_err(|b| corrupt("manifest transaction", &shown, b.to_string()))
        };
        let row = built(
            Put::builder()
                .table_name(&self.manifest)
                .set_item(Some(manifest_item(
                    manifest_key(&partition, e.window),
                    e,
                    1,
                    &shown,
                )?))
                .condition_expression("attribute_not_exists(#pk)")
                .expression_attribute_names("#pk", "pk")
                .build()
                .map(|p| TransactWriteItem::builder().put(p).build()),
        )?;
        let count = built(
            Update::builder()
                .table_name(&self.counters)
                .set_key(Some(rows_counter_key(&partition)))
                .update_expression("ADD #rows :one")
                .expression_attribute_names("#rows", ROWS_ATTR)
                .expression_attribute_values(":one", n(1))
                .build()
                .map(|u| TransactWriteItem::builder().update(u).build()),
        )?;
        for _ in 0..CREATE_TRIES {
            let (attempt, applied) = self
                .transact(&shown, vec![row.clone(), count.clone()])
                .await?;
            if applied {
                return Ok(CreateOutcome::Created);
            }
            // Cancelled: by the row's condition (the row is there), or by another transaction
            // on the partition's counter (it is not, and nothing applied): look.
            if let Some(existing) = self.get_entry(&e.job_id, e.window).await? {
                if own_lost_write(attempt, Some(&existing), |c| c.version == 1 && &c.row == e)
                    .is_some()
                {
                    return Ok(CreateOutcome::Created);
                }
                debug!(store = "dynamodb", job_id = %e.job_id, window = %e.window, outcome = "already-exists", "put manifest entry");
                return Ok(CreateOutcome::AlreadyExists(existing));
            }
        }
        Err(contended(
            "put manifest entry",
            &shown,
            format!("manifest row {shown}"),
            CREATE_TRIES,
        ))
    }

    async fn update_entry(
        &self,
        e: &ManifestEntry,
        expected: u64,
    ) -> StoreResult<UpdateOutcome<ManifestEntry>> {
        let shown = format!("{}/{}", e.job_id, e.window);
        self.update_versioned(
            CondWrite {
                operation: "update manifest entry",
                table: &self.manifest,
                condition: "#v = :expected",
                names: &[("#v", "version")],
                shown: &shown,
            },
            manifest_item(
                self.manifest_key(&e.job_id, e.window).await?,
                e,
                expected + 1,
                &shown,
            )?,
            &[(":expected", n(expected))],
            e,
            expected,
            "manifest row",
        )
        .await
    }

    async fn get_entry(
        &self,
        job: &JobId,
        w: Window,
    ) -> StoreResult<Option<Versioned<ManifestEntry>>> {
        let shown = format!("{job}/{w}");
        let key = self.manifest_key(job, w).await?;
        self.get_item(&self.manifest, key, &shown)
            .await?
            .map(|item| decode_body(&item, "manifest row", &shown))
            .transpose()
    }

    async fn list_entries(&self, job: &JobId) -> StoreResult<Vec<Versioned<ManifestEntry>>> {
        let shown = job.to_string();
        let mut out: Vec<Versioned<ManifestEntry>> = Vec::new();
        for pk in manifest_partitions(job, self.manifest_shards(job).await?) {
            self.query_partition(&pk, false, &mut |_, items| {
                for item in &items {
                    out.push(decode_body(item, "manifest row", &shown)?);
                }
                Ok(())
            })
            .await?;
        }
        // The sort key orders windows only below 10,000 rows and columns; sort by window.
        out.sort_by_key(|v| v.row.window);
        Ok(out)
    }

    async fn recorded(&self, job: &JobId, shard: u32) -> StoreResult<u64> {
        let Some(partition) = manifest_partitions(job, self.manifest_shards(job).await?)
            .into_iter()
            .nth(shard as usize)
        else {
            return Ok(0);
        };
        let item = self
            .get_item(&self.counters, rows_counter_key(&partition), &partition)
            .await?;
        rows_of(item.as_ref(), &partition)
    }

    /// One `BatchGetItem` (strongly consistent) of every partition's counter — at most
    /// [`MAX_MANIFEST_SHARDS`](tilegate_core::table::MAX_MANIFEST_SHARDS) = 100 keys, what one
    /// request may ask for — and again for any keys DynamoDB left unprocessed.
    async fn recorded_all(&self, job: &JobId) -> StoreResult<Vec<u64>> {
        let shown = job.to_string();
        let partitions = manifest_partitions(job, self.manifest_shards(job).await?);
        let mut found: HashMap<String, u64> = HashMap::new();
        let mut wanted: Vec<Item> = partitions.iter().map(|p| rows_counter_key(p)).collect();
        for _ in 0..CREATE_TRIES {
            if wanted.is_empty() {
                break;
            }
            let keys = KeysAndAttributes::builder()
                .set_keys(Some(wanted.clone()))
                .consistent_read(true)
                .build()
                .map_err(|b| corrupt("manifest row counters", &shown, b.to_string()))?;
            let out = self
                .sdk()
                .send("get manifest row counters", &shown, || {
                    self.client
                        .batch_get_item()
                        .request_items(&self.counters, keys.clone())
                        .send()
                })
                .await?;
            for item in out
                .responses
                .and_then(|mut r| r.remove(&self.counters))
                .unwrap_or_default()
            {
                let key = super::model::get_s(&item, "job_id", "manifest row counter", &shown)?
                    .to_owned();
                found.insert(key, rows_of(Some(&item), &shown)?);
            }
            wanted = out
                .unprocessed_keys
                .and_then(|mut u| u.remove(&self.counters))
                .map(|k| k.keys)
                .unwrap_or_default();
        }
        if !wanted.is_empty() {
            return Err(contended(
                "get manifest row counters",
                &shown,
                format!("manifest row counters of {shown}"),
                CREATE_TRIES,
            ));
        }
        Ok(partitions
            .iter()
            .map(|p| found.get(&format!("{p}#rows")).copied().unwrap_or(0))
            .collect())
    }

    async fn count_partitions(&self, job: &JobId) -> StoreResult<Vec<(String, u64)>> {
        let mut out = Vec::new();
        for pk in manifest_partitions(job, self.manifest_shards(job).await?) {
            let mut total = 0u64;
            self.query_partition(&pk, true, &mut |count, _| {
                total += u64::try_from(count).unwrap_or(0);
                Ok(())
            })
            .await?;
            out.push((pk, total));
        }
        Ok(out)
    }
}

//! The manifest table ([`ManifestTable`]): one versioned row per window, in the job's partition
//! or spread over `job#NN` shards.

use super::model::{decode_body, manifest_item, n, s};
use super::versioned::CondWrite;
use super::{DynamoTables, Item};
use async_trait::async_trait;
use aws_sdk_dynamodb::types::Select;
use tilegate_core::StoreResult;
use tilegate_core::grid::Window;
use tilegate_core::id::JobId;
use tilegate_core::table::{
    CreateOutcome, ManifestEntry, ManifestTable, UpdateOutcome, Versioned, manifest_partitions,
};
use tracing::debug;

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
        let out = self
            .create_versioned(
                CondWrite {
                    operation: "put manifest entry",
                    table: &self.manifest,
                    condition: "attribute_not_exists(#pk)",
                    names: &[("#pk", "pk")],
                    shown: &shown,
                },
                manifest_item(self.manifest_key(&e.job_id, e.window).await?, e, 1, &shown)?,
                e,
                "manifest row",
                || self.get_entry(&e.job_id, e.window),
            )
            .await?;
        if let CreateOutcome::AlreadyExists(_) = &out {
            debug!(store = "dynamodb", job_id = %e.job_id, window = %e.window, outcome = "already-exists", "put manifest entry");
        }
        Ok(out)
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

    async fn count_partition(&self, job: &JobId, shard: u32) -> StoreResult<u64> {
        let Some(pk) = manifest_partitions(job, self.manifest_shards(job).await?)
            .into_iter()
            .nth(shard as usize)
        else {
            return Ok(0);
        };
        let mut total = 0u64;
        self.query_partition(&pk, true, &mut |count, _| {
            total += u64::try_from(count).unwrap_or(0);
            Ok(())
        })
        .await?;
        Ok(total)
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

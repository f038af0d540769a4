//! The jobs table ([`JobTable`]): one versioned row per job, listed newest first through the
//! `by-created` index, and a tenant's through the `by-tenant` index.

use super::model::{decode_body, job_item, n, s};
use super::versioned::CondWrite;
use super::{
    DynamoTables, Item, JOBS_BY_CREATED, JOBS_BY_OPEN, JOBS_BY_TENANT, JOBS_LIST_PK, JOBS_OPEN_PK,
};
use crate::error::{AwsError, own_error};
use async_trait::async_trait;
use std::collections::HashMap;
use tilegate_core::id::JobId;
use tilegate_core::table::{CreateOutcome, JobRecord, JobTable, UpdateOutcome, Versioned};
use tilegate_core::{Retry, StoreResult, Tenant};
use tracing::debug;

#[async_trait]
impl JobTable for DynamoTables {
    async fn create_job(&self, job: &JobRecord) -> StoreResult<CreateOutcome<JobRecord>> {
        let id = job.job_id.to_string();
        let out = self
            .create_versioned(
                CondWrite {
                    operation: "create job",
                    table: &self.jobs,
                    condition: "attribute_not_exists(#pk)",
                    names: &[("#pk", "job_id")],
                    shown: &id,
                },
                job_item(job, 1)?,
                job,
                "job row",
                || self.get_job(&job.job_id),
            )
            .await?;
        let outcome = match &out {
            CreateOutcome::Created => "created",
            CreateOutcome::AlreadyExists(_) => "already-exists",
        };
        debug!(store = "dynamodb", job_id = %id, outcome, "create job");
        Ok(out)
    }

    async fn get_job(&self, id: &JobId) -> StoreResult<Option<Versioned<JobRecord>>> {
        let shown = id.to_string();
        let key = HashMap::from([("job_id".to_owned(), s(&shown))]);
        self.get_item(&self.jobs, key, &shown)
            .await?
            .map(|item| decode_body(&item, "job row", &shown))
            .transpose()
    }

    async fn update_job(
        &self,
        job: &JobRecord,
        expected: u64,
    ) -> StoreResult<UpdateOutcome<JobRecord>> {
        let id = job.job_id.to_string();
        let out = self
            .update_versioned(
                CondWrite {
                    operation: "update job",
                    table: &self.jobs,
                    condition: "#v = :expected",
                    names: &[("#v", "version")],
                    shown: &id,
                },
                job_item(job, expected + 1)?,
                &[(":expected", n(expected))],
                job,
                expected,
                "job row",
            )
            .await?;
        if let UpdateOutcome::Superseded(_) = &out {
            debug!(store = "dynamodb", job_id = %id, expected, outcome = "superseded", "update job");
        }
        Ok(out)
    }

    /// Newest first through the `by-created` GSI. GSI reads are eventually consistent on
    /// DynamoDB: a job created a moment ago may be missing from the list for a moment.
    async fn list_jobs(&self, limit: usize) -> StoreResult<Vec<Versioned<JobRecord>>> {
        self.query_newest(
            "list jobs",
            JOBS_BY_CREATED,
            ("list_pk", JOBS_LIST_PK),
            limit,
            false,
        )
        .await
    }

    /// Newest first through the `by-tenant` GSI (`tenant`, `created_at`): the tenant's items
    /// only, however many other tenants' the table holds. Eventually consistent, as
    /// [`Self::list_jobs`]. A table made before the index existed is refused with what to do
    /// (`tilegate init` adds the index and fills it).
    async fn list_jobs_of(
        &self,
        tenant: &Tenant,
        limit: usize,
    ) -> StoreResult<Vec<Versioned<JobRecord>>> {
        self.query_newest(
            "list a tenant's jobs",
            JOBS_BY_TENANT,
            ("tenant", tenant.as_str()),
            limit,
            false,
        )
        .await
    }

    /// Oldest first through the sparse `by-open` GSI (`open_pk`, `created_at`): an item has
    /// `open_pk` only while its job is open, so the index holds the open jobs alone and a
    /// settled job leaves it with the write that settles it. Eventually consistent.
    async fn list_open_jobs(&self, limit: usize) -> StoreResult<Vec<Versioned<JobRecord>>> {
        self.query_newest(
            "list open jobs",
            JOBS_BY_OPEN,
            ("open_pk", JOBS_OPEN_PK),
            limit,
            true,
        )
        .await
    }
}

impl DynamoTables {
    /// Up to `limit` job items whose `key` attribute has the value given, newest first (oldest
    /// first with `oldest_first`) through `index` (ranged on `created_at`), a page of at most
    /// 1,000 per request.
    async fn query_newest(
        &self,
        operation: &'static str,
        index: &'static str,
        (attr, value): (&'static str, &str),
        limit: usize,
        oldest_first: bool,
    ) -> StoreResult<Vec<Versioned<JobRecord>>> {
        let mut out: Vec<Versioned<JobRecord>> = Vec::new();
        let mut start: Option<Item> = None;
        while out.len() < limit {
            let want = i32::try_from(limit - out.len())
                .unwrap_or(i32::MAX)
                .min(1000);
            let page = self
                .sdk()
                .send_raw(operation, &self.jobs, || {
                    self.client
                        .query()
                        .table_name(&self.jobs)
                        .index_name(index)
                        .key_condition_expression("#k = :k")
                        .expression_attribute_names("#k", attr)
                        .expression_attribute_values(":k", s(value))
                        .scan_index_forward(oldest_first)
                        .limit(want)
                        .set_exclusive_start_key(start.clone())
                        .send()
                })
                .await;
            let page = match page {
                Ok(page) => page,
                // DynamoDB answers a query of an index the table lacks with a
                // ValidationException naming the index ("The table does not have the
                // specified index").
                Err(f)
                    if f.code.as_deref() == Some("ValidationException")
                        && f.error.to_string().contains("index") =>
                {
                    return Err(own_error(
                        operation,
                        &self.jobs,
                        Retry::Permanent,
                        AwsError::Misconfigured {
                            what: format!("table `{}`", self.jobs),
                            reason: format!(
                                "it has no `{index}` index (a table made by an older \
                                 tilegate): `tilegate init` adds it"
                            ),
                        },
                    ));
                }
                Err(f) => return Err(f.into_store(operation, &self.jobs)),
            };
            for item in page.items() {
                let shown = item
                    .get("job_id")
                    .and_then(|v| v.as_s().ok())
                    .cloned()
                    .unwrap_or_default();
                out.push(decode_body(item, "job row", &shown)?);
            }
            start = page.last_evaluated_key.clone();
            if start.is_none() {
                break;
            }
        }
        // Ties on created_at come back in no particular order; make them deterministic.
        out.sort_by(|a, b| {
            let (older, newer) = (&a.row, &b.row);
            let by_date = if oldest_first {
                older.created_at.cmp(&newer.created_at)
            } else {
                newer.created_at.cmp(&older.created_at)
            };
            by_date.then_with(|| older.job_id.cmp(&newer.job_id))
        });
        out.truncate(limit);
        Ok(out)
    }
}

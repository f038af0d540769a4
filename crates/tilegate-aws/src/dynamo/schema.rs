//! Table provisioning: the five tables' key schemas and indexes, created on demand
//! (`PAY_PER_REQUEST`) where missing and waited for until ACTIVE ([`DynamoTables::ensure_tables`]).

use super::model::corrupt;
use super::{DynamoTables, JOBS_BY_CREATED, JOBS_BY_OPEN, JOBS_BY_TENANT, SERVICE, ledger};
use crate::error::{AwsError, own_error};
use aws_sdk_dynamodb::types::{
    AttributeDefinition, BillingMode, CreateGlobalSecondaryIndexAction, GlobalSecondaryIndex,
    GlobalSecondaryIndexUpdate, IndexStatus, KeySchemaElement, KeyType, Projection, ProjectionType,
    ScalarAttributeType, TableStatus,
};
use std::time::{Duration, Instant};
use tilegate_core::{Retry, StoreError, StoreResult};
use tracing::{debug, info};

/// How long `ensure_tables` waits for a table to become ACTIVE.
const TABLE_READY_TIMEOUT: Duration = Duration::from_secs(300);

/// One table's definition for `ensure_tables`.
struct TableSpec {
    name: String,
    hash: &'static str,
    range: Option<&'static str>,
    /// Attribute types of every key attribute (table and GSI).
    attrs: &'static [(&'static str, ScalarAttributeType)],
    /// Global secondary indexes: (name, hash, range), each projecting every attribute.
    gsis: &'static [(&'static str, &'static str, &'static str)],
}

fn build_error(what: &str, e: impl std::fmt::Display) -> StoreError {
    StoreError::backend(
        "create table",
        what,
        Retry::Permanent,
        AwsError::Construction {
            service: SERVICE,
            detail: e.to_string(),
        },
    )
}

fn key_element(name: &str, kind: KeyType) -> StoreResult<KeySchemaElement> {
    KeySchemaElement::builder()
        .attribute_name(name)
        .key_type(kind)
        .build()
        .map_err(|e| build_error(name, e))
}

impl DynamoTables {
    fn specs(&self) -> Vec<TableSpec> {
        use ScalarAttributeType::{N, S};
        vec![
            TableSpec {
                name: self.jobs.clone(),
                hash: "job_id",
                range: None,
                attrs: &[
                    ("job_id", S),
                    ("list_pk", S),
                    ("created_at", N),
                    ("tenant", S),
                    ("open_pk", S),
                ],
                gsis: &[
                    (JOBS_BY_CREATED, "list_pk", "created_at"),
                    (JOBS_BY_TENANT, "tenant", "created_at"),
                    (JOBS_BY_OPEN, "open_pk", "created_at"),
                ],
            },
            TableSpec {
                name: self.manifest.clone(),
                hash: "pk",
                range: Some("sk"),
                attrs: &[("pk", S), ("sk", S)],
                gsis: &[],
            },
            TableSpec {
                name: self.claims.clone(),
                hash: "resource",
                range: None,
                attrs: &[("resource", S)],
                gsis: &[],
            },
            TableSpec {
                name: self.counters.clone(),
                hash: "job_id",
                range: None,
                attrs: &[("job_id", S)],
                gsis: &[],
            },
            TableSpec {
                name: self.ledger.clone(),
                hash: "pk",
                range: Some("sk"),
                attrs: &[("pk", S), ("sk", S), ("due_shard", S), ("gc_due", N)],
                gsis: &[(ledger::DUE_INDEX, "due_shard", "gc_due")],
            },
        ]
    }

    /// Create the tables (on-demand) where missing and wait until each is ACTIVE.
    /// Returns each table's name and whether this call created it; a table that exists
    /// already is success.
    pub async fn ensure_tables(&self) -> StoreResult<Vec<(String, bool)>> {
        let mut out = Vec::new();
        for spec in self.specs() {
            let created = self.create_table(&spec).await?;
            self.wait_active(&spec).await?;
            if !created && self.add_missing_indexes(&spec).await? {
                self.wait_active(&spec).await?;
            }
            out.push((spec.name, created));
        }
        Ok(out)
    }

    /// Add the indexes `spec` names that an existing table lacks (a table made by an older
    /// tilegate), one `UpdateTable` each (DynamoDB creates one index per update), then fill
    /// what they key on where older items lack it. Returns whether any was added.
    async fn add_missing_indexes(&self, spec: &TableSpec) -> StoreResult<bool> {
        let out = self
            .sdk()
            .send("describe table", &spec.name, || {
                self.client.describe_table().table_name(&spec.name).send()
            })
            .await?;
        let present: Vec<String> = out
            .table()
            .map(|t| {
                t.global_secondary_indexes()
                    .iter()
                    .filter_map(|i| i.index_name().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default();
        let mut added = false;
        for &(index, hash, range) in spec.gsis {
            if present.iter().any(|p| p == index) {
                continue;
            }
            if index == JOBS_BY_TENANT {
                // Before the index is made, so that it is built with every item in it.
                self.backfill_job_tenants().await?;
            }
            if index == JOBS_BY_OPEN {
                self.backfill_job_open().await?;
            }
            let attrs = spec
                .attrs
                .iter()
                .filter(|(a, _)| *a == hash || *a == range)
                .map(|(a, t)| {
                    AttributeDefinition::builder()
                        .attribute_name(*a)
                        .attribute_type(t.clone())
                        .build()
                        .map_err(|e| build_error(&spec.name, e))
                })
                .collect::<StoreResult<Vec<_>>>()?;
            let action = CreateGlobalSecondaryIndexAction::builder()
                .index_name(index)
                .key_schema(key_element(hash, KeyType::Hash)?)
                .key_schema(key_element(range, KeyType::Range)?)
                .projection(
                    Projection::builder()
                        .projection_type(ProjectionType::All)
                        .build(),
                )
                .build()
                .map_err(|e| build_error(&spec.name, e))?;
            self.sdk()
                .send("add an index", &spec.name, || {
                    self.client
                        .update_table()
                        .table_name(&spec.name)
                        .set_attribute_definitions(Some(attrs.clone()))
                        .global_secondary_index_updates(
                            GlobalSecondaryIndexUpdate::builder()
                                .create(action.clone())
                                .build(),
                        )
                        .send()
                })
                .await?;
            info!(table = %spec.name, index, outcome = "created", "add index");
            self.wait_active(spec).await?;
            added = true;
        }
        Ok(added)
    }

    /// Give every job item written before the `by-open` index existed, whose body says it is
    /// open, its `open_pk`: the reconciler then sees the jobs an older tilegate left open.
    async fn backfill_job_open(&self) -> StoreResult<()> {
        self.backfill_jobs("mark open jobs", "open_pk", |row| {
            row.is_open().then(|| super::JOBS_OPEN_PK.to_owned())
        })
        .await
    }

    /// Give every job item that lacks one a `tenant` attribute, from its body: items written
    /// before the `by-tenant` index existed, which the index would otherwise leave out.
    async fn backfill_job_tenants(&self) -> StoreResult<()> {
        self.backfill_jobs("fill job tenants", "tenant", |row| {
            Some(row.tenant.as_str().to_owned())
        })
        .await
    }

    /// Set `attr` (where an item lacks it) to what `value` makes of the item's row — `None`
    /// leaves it unset — on every job item: what an index added to an older table keys on.
    async fn backfill_jobs(
        &self,
        operation: &'static str,
        attr: &'static str,
        value: impl Fn(&tilegate_core::table::JobRecord) -> Option<String>,
    ) -> StoreResult<()> {
        let mut start = None;
        loop {
            let page = self
                .sdk()
                .send(operation, &self.jobs, || {
                    self.client
                        .scan()
                        .table_name(&self.jobs)
                        .filter_expression("attribute_not_exists(#a)")
                        .expression_attribute_names("#a", attr)
                        .set_exclusive_start_key(start.clone())
                        .send()
                })
                .await?;
            for item in page.items() {
                let id = item
                    .get("job_id")
                    .and_then(|v| v.as_s().ok())
                    .cloned()
                    .unwrap_or_default();
                let row: tilegate_core::table::Versioned<tilegate_core::table::JobRecord> =
                    super::model::decode_body(item, "job row", &id)?;
                let Some(v) = value(&row.row) else { continue };
                self.sdk()
                    .send(operation, &id, || {
                        self.client
                            .update_item()
                            .table_name(&self.jobs)
                            .key("job_id", super::model::s(&id))
                            .update_expression("SET #a = if_not_exists(#a, :v)")
                            .expression_attribute_names("#a", attr)
                            .expression_attribute_values(":v", super::model::s(&v))
                            .send()
                    })
                    .await?;
            }
            start = page.last_evaluated_key.clone();
            if start.is_none() {
                return Ok(());
            }
        }
    }

    async fn create_table(&self, spec: &TableSpec) -> StoreResult<bool> {
        let mut keys = vec![key_element(spec.hash, KeyType::Hash)?];
        if let Some(r) = spec.range {
            keys.push(key_element(r, KeyType::Range)?);
        }
        let attrs = spec
            .attrs
            .iter()
            .map(|(a, t)| {
                AttributeDefinition::builder()
                    .attribute_name(*a)
                    .attribute_type(t.clone())
                    .build()
                    .map_err(|e| build_error(&spec.name, e))
            })
            .collect::<StoreResult<Vec<_>>>()?;
        let gsi = if spec.gsis.is_empty() {
            None
        } else {
            Some(
                spec.gsis
                    .iter()
                    .map(|&(index, hash, range)| {
                        GlobalSecondaryIndex::builder()
                            .index_name(index)
                            .key_schema(key_element(hash, KeyType::Hash)?)
                            .key_schema(key_element(range, KeyType::Range)?)
                            .projection(
                                Projection::builder()
                                    .projection_type(ProjectionType::All)
                                    .build(),
                            )
                            .build()
                            .map_err(|e| build_error(&spec.name, e))
                    })
                    .collect::<StoreResult<Vec<_>>>()?,
            )
        };
        let r = self
            .sdk()
            .send_raw("create table", &spec.name, || {
                self.client
                    .create_table()
                    .table_name(&spec.name)
                    .billing_mode(BillingMode::PayPerRequest)
                    .set_key_schema(Some(keys.clone()))
                    .set_attribute_definitions(Some(attrs.clone()))
                    .set_global_secondary_indexes(gsi.clone())
                    .send()
            })
            .await;
        match r {
            Ok(_) => {
                info!(table = %spec.name, outcome = "created", "create table");
                Ok(true)
            }
            Err(f) if f.code.as_deref() == Some("ResourceInUseException") => {
                debug!(table = %spec.name, outcome = "already-present", "create table");
                Ok(false)
            }
            Err(f) => Err(f.into_store("create table", &spec.name)),
        }
    }

    /// Poll `DescribeTable` until the table and its indexes are ACTIVE, and check its key.
    async fn wait_active(&self, spec: &TableSpec) -> StoreResult<()> {
        let started = Instant::now();
        let mut nap = Duration::from_millis(200);
        loop {
            let out = self
                .sdk()
                .send("describe table", &spec.name, || {
                    self.client.describe_table().table_name(&spec.name).send()
                })
                .await?;
            let Some(table) = out.table() else {
                return Err(corrupt(
                    "table description",
                    &spec.name,
                    "DescribeTable had no table",
                ));
            };
            let hash = table
                .key_schema()
                .iter()
                .find(|k| k.key_type() == &KeyType::Hash)
                .map(|k| k.attribute_name().to_owned());
            if hash.as_deref() != Some(spec.hash) {
                return Err(own_error(
                    "use table",
                    &spec.name,
                    Retry::Permanent,
                    AwsError::Misconfigured {
                        what: format!("table `{}`", spec.name),
                        reason: format!(
                            "its partition key is {hash:?}, tilegate expects `{}`",
                            spec.hash
                        ),
                    },
                ));
            }
            let status = table.table_status().cloned();
            let indexes_active = table
                .global_secondary_indexes()
                .iter()
                .all(|i| i.index_status().is_none_or(|s| s == &IndexStatus::Active));
            if status == Some(TableStatus::Active) && indexes_active {
                return Ok(());
            }
            let waited = started.elapsed();
            if waited > TABLE_READY_TIMEOUT {
                return Err(own_error(
                    "wait for table",
                    &spec.name,
                    Retry::Retryable,
                    AwsError::NotReady {
                        what: format!("table `{}`", spec.name),
                        state: "ACTIVE",
                        current: status.map(|s| s.as_str().to_owned()).unwrap_or_default(),
                        waited,
                    },
                ));
            }
            tokio::time::sleep(nap).await;
            nap = (nap * 2).min(Duration::from_secs(2));
        }
    }
}

//! [`DynamoTables`]: the jobs, manifest, claims and counters contracts on DynamoDB. Every
//! write carries its condition (`attribute_not_exists`, a version guard, the claim predicate)
//! in the same request, and a refused condition comes back with the row that refused it
//! (`ReturnValuesOnConditionCheckFailure = ALL_OLD`), so no second read is needed.
//!
//! Key schema, for table prefix `P` (all tables on-demand, `PAY_PER_REQUEST`):
//!
//! | table | key | other attributes |
//! |---|---|---|
//! | `P-jobs` | `job_id` (S) | `version` (N), `body` (S, the JSON row), `created_at` (N), `list_pk` (S, always `job`); GSI `by-created` = (`list_pk`, `created_at`) for newest-first listing |
//! | `P-manifest` | `pk` (S) = job ID, or `JOB#NN` when the job's manifest is sharded; `sk` (S) = window `RRRR_CCCC` | `version` (N), `body` (S) |
//! | `P-claims` | `resource` (S) | `owner` (S), `fencing_token` (N), `expires_at` (N), `state` (S `held`/`done`), `output` (S, JSON, once done), `version` (N) |
//! | `P-counters` | `job_id` (S) | one numeric attribute `c_<name>` per counter, added with `ADD` |
//! | `P-ledger` | `pk` (S), `sk` (S) | attempt rows and pointers, see [`ledger`]; GSI `due` = (`due_shard`, `gc_due`) |
//!
//! The manifest's partition key is the job ID. DynamoDB allows about 1,000 writes/s per
//! partition, so a job planned with `manifest_shards` > 1 spreads its rows as `job_id#NN`
//! (NN = [`manifest_shard`] of the window, a hash modulo the shard count recorded on the job
//! row); count and list fan out over the shards, and the row format does not change. The shard
//! count never changes after the job row is created, so each process reads it once per job and
//! keeps it. The sort key is the window as in tile keys
//! (four digits each side); past 9,999 rows or columns its string order stops being the window
//! order, so listings are sorted by the decoded window, never by the key.
//!
//! Provider behaviour normalised here: a `ConditionalCheckFailedException` is an outcome, not
//! an error; where `ALL_OLD` is empty the row is absent (`Superseded(None)`). A write whose
//! answer was lost and which was re-sent is refused by its own earlier success; it is
//! recognised by comparing the returned row with the one written (and, for claims, owner,
//! token and expiry), and reported as the success it was.

mod ledger;

use crate::config::{dynamodb_client, load_sdk_config};
use crate::error::{AwsError, Failure, own_error};
use crate::retry::{self, Idempotency, RetryPolicy};
use crate::url::parse_dynamodb;
use async_trait::async_trait;
use aws_sdk_dynamodb::operation::put_item::PutItemError;
use aws_sdk_dynamodb::operation::update_item::UpdateItemError;
use aws_sdk_dynamodb::types::{
    AttributeDefinition, AttributeValue, BillingMode, GlobalSecondaryIndex, IndexStatus,
    KeySchemaElement, KeyType, Projection, ProjectionType, ReturnValue,
    ReturnValuesOnConditionCheckFailure, ScalarAttributeType, Select, TableStatus,
};
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tilegate_core::grid::Window;
use tilegate_core::id::JobId;
use tilegate_core::table::{
    AcquireOutcome, ClaimChange, ClaimRecord, ClaimState, ClaimTable, CounterTable, CreateOutcome,
    JobRecord, JobTable, ManifestEntry, ManifestTable, OutputRef, ShardCounts, UpdateOutcome,
    Versioned, manifest_partition, manifest_partitions,
};
use tilegate_core::{Retry, StoreError, StoreResult, UnixMillis};
use tracing::{debug, info};

const SERVICE: &str = "dynamodb";

type Item = HashMap<String, AttributeValue>;

/// The GSI that lists jobs newest first.
const JOBS_BY_CREATED: &str = "by-created";
/// The constant partition of that GSI (jobs are few: one per scene and recipe).
const JOBS_LIST_PK: &str = "job";
/// Counter attributes are `c_<name>`, apart from the key attribute.
const COUNTER_ATTR_PREFIX: &str = "c_";
/// How long `ensure_tables` waits for a table to become ACTIVE.
const TABLE_READY_TIMEOUT: Duration = Duration::from_secs(300);

/// The tables under one prefix. Cheap to clone.
#[derive(Debug, Clone)]
pub struct DynamoTables {
    client: aws_sdk_dynamodb::Client,
    prefix: String,
    jobs: String,
    manifest: String,
    claims: String,
    counters: String,
    ledger: String,
    retry: RetryPolicy,
    /// Each job's manifest shard count, read from its row once (it never changes).
    shards: Arc<ShardCounts>,
}

/// The answer to a conditional write: applied (with the provider's output), or refused with
/// the `ALL_OLD` row (`None`: no row).
enum Cond<T> {
    Applied(T),
    Refused(Option<Item>),
}

fn s(v: impl Into<String>) -> AttributeValue {
    AttributeValue::S(v.into())
}

fn n(v: impl ToString) -> AttributeValue {
    AttributeValue::N(v.to_string())
}

fn corrupt(what: &'static str, key: &str, detail: impl Into<String>) -> StoreError {
    StoreError::Corrupt {
        what,
        key: key.to_owned(),
        detail: detail.into(),
    }
}

fn get_s<'a>(item: &'a Item, attr: &str, what: &'static str, key: &str) -> StoreResult<&'a str> {
    item.get(attr)
        .and_then(|v| v.as_s().ok())
        .map(String::as_str)
        .ok_or_else(|| {
            corrupt(
                what,
                key,
                format!("attribute `{attr}` missing or not a string"),
            )
        })
}

fn get_n<T: std::str::FromStr>(
    item: &Item,
    attr: &str,
    what: &'static str,
    key: &str,
) -> StoreResult<T> {
    item.get(attr)
        .and_then(|v| v.as_n().ok())
        .and_then(|v| v.parse().ok())
        .ok_or_else(|| {
            corrupt(
                what,
                key,
                format!("attribute `{attr}` missing or not an integer"),
            )
        })
}

/// A row stored as `version` + JSON `body`.
fn decode_body<T: serde::de::DeserializeOwned>(
    item: &Item,
    what: &'static str,
    key: &str,
) -> StoreResult<Versioned<T>> {
    let version = get_n(item, "version", what, key)?;
    let body = get_s(item, "body", what, key)?;
    let row = serde_json::from_str(body).map_err(|e| corrupt(what, key, e.to_string()))?;
    Ok(Versioned { version, row })
}

fn encode_body<T: serde::Serialize>(row: &T, what: &'static str, key: &str) -> StoreResult<String> {
    serde_json::to_string(row).map_err(|e| {
        StoreError::backend(
            "encode row",
            key,
            Retry::Permanent,
            AwsError::Misconfigured {
                what: what.to_owned(),
                reason: e.to_string(),
            },
        )
    })
}

fn state_name(s: ClaimState) -> &'static str {
    match s {
        ClaimState::Held => "held",
        ClaimState::Done => "done",
    }
}

fn decode_claim(item: &Item, key: &str) -> StoreResult<Versioned<ClaimRecord>> {
    const WHAT: &str = "claim row";
    let state = match get_s(item, "state", WHAT, key)? {
        "held" => ClaimState::Held,
        "done" => ClaimState::Done,
        other => return Err(corrupt(WHAT, key, format!("unknown state `{other}`"))),
    };
    let output = match item.get("output").and_then(|v| v.as_s().ok()) {
        Some(json) => Some(
            serde_json::from_str::<OutputRef>(json)
                .map_err(|e| corrupt(WHAT, key, e.to_string()))?,
        ),
        None => None,
    };
    Ok(Versioned {
        version: get_n(item, "version", WHAT, key)?,
        row: ClaimRecord {
            resource: get_s(item, "resource", WHAT, key)?.to_owned(),
            owner: get_s(item, "owner", WHAT, key)?.to_owned(),
            fencing_token: get_n(item, "fencing_token", WHAT, key)?,
            expires_at: get_n(item, "expires_at", WHAT, key)?,
            state,
            output,
        },
    })
}

/// Map a PutItem error: a failed condition is an answer (with `ALL_OLD`), the rest failures.
fn put_item_answer<T>(
    e: aws_sdk_dynamodb::error::SdkError<PutItemError>,
) -> Result<Cond<T>, Failure> {
    if let Some(PutItemError::ConditionalCheckFailedException(c)) = e.as_service_error() {
        return Ok(Cond::Refused(c.item().cloned()));
    }
    Err(Failure::from_sdk(SERVICE, e))
}

fn update_item_answer<T>(
    e: aws_sdk_dynamodb::error::SdkError<UpdateItemError>,
) -> Result<Cond<T>, Failure> {
    if let Some(UpdateItemError::ConditionalCheckFailedException(c)) = e.as_service_error() {
        return Ok(Cond::Refused(c.item().cloned()));
    }
    Err(Failure::from_sdk(SERVICE, e))
}

/// What a conditional write is: where it goes, the condition, the attribute names the
/// expressions use (every name goes through a placeholder: `owner`, `state`, `version`,
/// `window` are DynamoDB reserved words), and the key for logs and errors.
struct CondWrite<'a> {
    operation: &'static str,
    table: &'a str,
    condition: &'a str,
    names: &'a [(&'a str, &'a str)],
    shown: &'a str,
}

impl CondWrite<'_> {
    fn names_map(&self) -> HashMap<String, String> {
        names(self.names)
    }
}

/// An `ExpressionAttributeNames` map from `(#placeholder, name)` pairs.
fn names(pairs: &[(&str, &str)]) -> HashMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

/// One table's definition for `ensure_tables`.
struct TableSpec {
    name: String,
    hash: &'static str,
    range: Option<&'static str>,
    /// Attribute types of every key attribute (table and GSI).
    attrs: &'static [(&'static str, ScalarAttributeType)],
    gsi: Option<(&'static str, &'static str, &'static str)>,
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
    /// The tables `{prefix}-jobs`, `-manifest`, `-claims`, `-counters`, `-ledger`, with the
    /// given client.
    pub fn new(client: aws_sdk_dynamodb::Client, prefix: &str) -> Self {
        Self {
            client,
            prefix: prefix.to_owned(),
            jobs: format!("{prefix}-jobs"),
            manifest: format!("{prefix}-manifest"),
            claims: format!("{prefix}-claims"),
            counters: format!("{prefix}-counters"),
            ledger: format!("{prefix}-ledger"),
            retry: RetryPolicy::default(),
            shards: Arc::default(),
        }
    }

    /// Open `dynamodb://table-prefix` with the standard AWS configuration.
    pub async fn connect(url: &str) -> StoreResult<Self> {
        let prefix = parse_dynamodb(url)?;
        let sdk = load_sdk_config().await;
        Ok(Self::new(dynamodb_client(&sdk), &prefix))
    }

    /// Replace the retry policy.
    pub fn with_retry_policy(mut self, policy: RetryPolicy) -> Self {
        self.retry = policy;
        self
    }

    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// The table names: jobs, manifest, claims, counters, ledger.
    pub fn table_names(&self) -> [&str; 5] {
        [
            &self.jobs,
            &self.manifest,
            &self.claims,
            &self.counters,
            &self.ledger,
        ]
    }

    fn specs(&self) -> Vec<TableSpec> {
        use ScalarAttributeType::{N, S};
        vec![
            TableSpec {
                name: self.jobs.clone(),
                hash: "job_id",
                range: None,
                attrs: &[("job_id", S), ("list_pk", S), ("created_at", N)],
                gsi: Some((JOBS_BY_CREATED, "list_pk", "created_at")),
            },
            TableSpec {
                name: self.manifest.clone(),
                hash: "pk",
                range: Some("sk"),
                attrs: &[("pk", S), ("sk", S)],
                gsi: None,
            },
            TableSpec {
                name: self.claims.clone(),
                hash: "resource",
                range: None,
                attrs: &[("resource", S)],
                gsi: None,
            },
            TableSpec {
                name: self.counters.clone(),
                hash: "job_id",
                range: None,
                attrs: &[("job_id", S)],
                gsi: None,
            },
            TableSpec {
                name: self.ledger.clone(),
                hash: "pk",
                range: Some("sk"),
                attrs: &[("pk", S), ("sk", S), ("due_shard", S), ("gc_due", N)],
                gsi: Some((ledger::DUE_INDEX, "due_shard", "gc_due")),
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
            out.push((spec.name, created));
        }
        Ok(out)
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
        let gsi = match spec.gsi {
            Some((index, hash, range)) => Some(vec![
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
                    .map_err(|e| build_error(&spec.name, e))?,
            ]),
            None => None,
        };
        let r = retry::run(
            &self.retry,
            Idempotency::Idempotent,
            "create table",
            &spec.name,
            |_| {
                let req = self
                    .client
                    .create_table()
                    .table_name(&spec.name)
                    .billing_mode(BillingMode::PayPerRequest)
                    .set_key_schema(Some(keys.clone()))
                    .set_attribute_definitions(Some(attrs.clone()))
                    .set_global_secondary_indexes(gsi.clone());
                async move { req.send().await.map_err(|e| Failure::from_sdk(SERVICE, e)) }
            },
        )
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
            let out = retry::run(
                &self.retry,
                Idempotency::Idempotent,
                "describe table",
                &spec.name,
                |_| {
                    let req = self.client.describe_table().table_name(&spec.name);
                    async move { req.send().await.map_err(|e| Failure::from_sdk(SERVICE, e)) }
                },
            )
            .await
            .map_err(|f| f.into_store("describe table", &spec.name))?;
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

    /// `GetItem` with a strongly consistent read.
    async fn get_item(&self, table: &str, key: Item, shown: &str) -> StoreResult<Option<Item>> {
        retry::run(
            &self.retry,
            Idempotency::Idempotent,
            "get item",
            shown,
            |_| {
                let req = self
                    .client
                    .get_item()
                    .table_name(table)
                    .set_key(Some(key.clone()))
                    .consistent_read(true);
                async move { req.send().await.map_err(|e| Failure::from_sdk(SERVICE, e)) }
            },
        )
        .await
        .map(|out| out.item)
        .map_err(|f| f.into_store("get item", shown))
    }

    /// A conditional `PutItem` returning `ALL_OLD` on refusal, and the attempt that answered.
    async fn put_conditional(
        &self,
        w: CondWrite<'_>,
        item: Item,
        values: &[(&str, AttributeValue)],
    ) -> StoreResult<(u32, Cond<()>)> {
        let names = w.names_map();
        let values: Option<Item> = (!values.is_empty()).then(|| {
            values
                .iter()
                .map(|(k, v)| ((*k).to_owned(), v.clone()))
                .collect()
        });
        retry::run(
            &self.retry,
            Idempotency::Idempotent,
            w.operation,
            w.shown,
            |attempt| {
                let req = self
                    .client
                    .put_item()
                    .table_name(w.table)
                    .set_item(Some(item.clone()))
                    .condition_expression(w.condition)
                    .set_expression_attribute_names(Some(names.clone()))
                    .set_expression_attribute_values(values.clone())
                    .return_values_on_condition_check_failure(
                        ReturnValuesOnConditionCheckFailure::AllOld,
                    );
                async move {
                    match req.send().await {
                        Ok(_) => Ok((attempt, Cond::Applied(()))),
                        Err(e) => put_item_answer(e).map(|c| (attempt, c)),
                    }
                }
            },
        )
        .await
        .map_err(|f| f.into_store(w.operation, w.shown))
    }

    /// A conditional `UpdateItem` returning `ALL_NEW` when applied and `ALL_OLD` on refusal.
    async fn update_conditional(
        &self,
        w: CondWrite<'_>,
        key: Item,
        update: &str,
        values: Item,
    ) -> StoreResult<(u32, Cond<Item>)> {
        let names = w.names_map();
        retry::run(
            &self.retry,
            Idempotency::Idempotent,
            w.operation,
            w.shown,
            |attempt| {
                let req = self
                    .client
                    .update_item()
                    .table_name(w.table)
                    .set_key(Some(key.clone()))
                    .update_expression(update)
                    .condition_expression(w.condition)
                    .set_expression_attribute_names(Some(names.clone()))
                    .set_expression_attribute_values(Some(values.clone()))
                    .return_values(ReturnValue::AllNew)
                    .return_values_on_condition_check_failure(
                        ReturnValuesOnConditionCheckFailure::AllOld,
                    );
                async move {
                    match req.send().await {
                        Ok(out) => Ok((attempt, Cond::Applied(out.attributes.unwrap_or_default()))),
                        Err(e) => update_item_answer(e).map(|c| (attempt, c)),
                    }
                }
            },
        )
        .await
        .map_err(|f| f.into_store(w.operation, w.shown))
    }

    /// The manifest shard count of `job` (1 when the job has no row: its rows, if any, were
    /// written unsharded).
    async fn manifest_shards(&self, job: &JobId) -> StoreResult<u32> {
        self.shards.of(self, job).await
    }

    /// The manifest key of `job`'s row for `w`, in the job's shard.
    async fn manifest_key(&self, job: &JobId, w: Window) -> StoreResult<Item> {
        let shards = self.manifest_shards(job).await?;
        Ok(manifest_key(&manifest_partition(job, w, shards), w))
    }

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
            let page = retry::run(&self.retry, Idempotency::Idempotent, operation, job, |_| {
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
                async move { req.send().await.map_err(|e| Failure::from_sdk(SERVICE, e)) }
            })
            .await
            .map_err(|f| f.into_store(operation, job))?;
            let count = page.count();
            start = page.last_evaluated_key.clone();
            each(count, page.items.unwrap_or_default())?;
            if start.is_none() {
                return Ok(());
            }
        }
    }
}

fn job_item(job: &JobRecord, version: u64) -> StoreResult<Item> {
    let id = job.job_id.to_string();
    let body = encode_body(job, "job row", &id)?;
    Ok(HashMap::from([
        ("job_id".to_owned(), s(&id)),
        ("version".to_owned(), n(version)),
        ("body".to_owned(), s(body)),
        ("created_at".to_owned(), n(job.created_at)),
        ("list_pk".to_owned(), s(JOBS_LIST_PK)),
    ]))
}

fn manifest_key(partition: &str, w: Window) -> Item {
    HashMap::from([
        ("pk".to_owned(), s(partition)),
        ("sk".to_owned(), s(w.to_string())),
    ])
}

fn manifest_item(
    mut item: Item,
    e: &ManifestEntry,
    version: u64,
    shown: &str,
) -> StoreResult<Item> {
    item.insert("version".to_owned(), n(version));
    item.insert("body".to_owned(), s(encode_body(e, "manifest row", shown)?));
    Ok(item)
}

/// The row a refused write returned, decoded (`None`: there was no row).
fn refused_row<T: serde::de::DeserializeOwned>(
    old: Option<Item>,
    what: &'static str,
    key: &str,
) -> StoreResult<Option<Versioned<T>>> {
    old.map(|item| decode_body(&item, what, key)).transpose()
}

#[async_trait]
impl JobTable for DynamoTables {
    async fn create_job(&self, job: &JobRecord) -> StoreResult<CreateOutcome<JobRecord>> {
        let id = job.job_id.to_string();
        let (attempt, cond) = self
            .put_conditional(
                CondWrite {
                    operation: "create job",
                    table: &self.jobs,
                    condition: "attribute_not_exists(#pk)",
                    names: &[("#pk", "job_id")],
                    shown: &id,
                },
                job_item(job, 1)?,
                &[],
            )
            .await?;
        match cond {
            Cond::Applied(()) => {
                debug!(store = "dynamodb", job_id = %id, outcome = "created", "create job");
                Ok(CreateOutcome::Created)
            }
            Cond::Refused(old) => {
                let existing = match refused_row::<JobRecord>(old, "job row", &id)? {
                    Some(row) => row,
                    // A provider without ALL_OLD: read the row that refused us (report only).
                    None => self
                        .get_job(&job.job_id)
                        .await?
                        .ok_or_else(|| corrupt("job row", &id, "refused a create but is absent"))?,
                };
                if attempt > 1 && existing.version == 1 && &existing.row == job {
                    // Our own earlier attempt landed and its answer was lost.
                    return Ok(CreateOutcome::Created);
                }
                debug!(store = "dynamodb", job_id = %id, outcome = "already-exists", "create job");
                Ok(CreateOutcome::AlreadyExists(existing))
            }
        }
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
        let (attempt, cond) = self
            .put_conditional(
                CondWrite {
                    operation: "update job",
                    table: &self.jobs,
                    condition: "#v = :expected",
                    names: &[("#v", "version")],
                    shown: &id,
                },
                job_item(job, expected + 1)?,
                &[(":expected", n(expected))],
            )
            .await?;
        match cond {
            Cond::Applied(()) => Ok(UpdateOutcome::Updated {
                version: expected + 1,
            }),
            Cond::Refused(old) => {
                let current = refused_row::<JobRecord>(old, "job row", &id)?;
                if attempt > 1
                    && current
                        .as_ref()
                        .is_some_and(|c| c.version == expected + 1 && &c.row == job)
                {
                    return Ok(UpdateOutcome::Updated {
                        version: expected + 1,
                    });
                }
                debug!(store = "dynamodb", job_id = %id, expected, outcome = "superseded", "update job");
                Ok(UpdateOutcome::Superseded(current))
            }
        }
    }

    /// Newest first through the `by-created` GSI. GSI reads are eventually consistent on
    /// DynamoDB: a job created a moment ago may be missing from the list for a moment.
    async fn list_jobs(&self, limit: usize) -> StoreResult<Vec<Versioned<JobRecord>>> {
        let mut out: Vec<Versioned<JobRecord>> = Vec::new();
        let mut start: Option<Item> = None;
        while out.len() < limit {
            let want = i32::try_from(limit - out.len())
                .unwrap_or(i32::MAX)
                .min(1000);
            let page = retry::run(
                &self.retry,
                Idempotency::Idempotent,
                "list jobs",
                &self.jobs,
                |_| {
                    let req = self
                        .client
                        .query()
                        .table_name(&self.jobs)
                        .index_name(JOBS_BY_CREATED)
                        .key_condition_expression("#lp = :lp")
                        .expression_attribute_names("#lp", "list_pk")
                        .expression_attribute_values(":lp", s(JOBS_LIST_PK))
                        .scan_index_forward(false)
                        .limit(want)
                        .set_exclusive_start_key(start.clone());
                    async move { req.send().await.map_err(|e| Failure::from_sdk(SERVICE, e)) }
                },
            )
            .await
            .map_err(|f| f.into_store("list jobs", &self.jobs))?;
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
            b.row
                .created_at
                .cmp(&a.row.created_at)
                .then_with(|| a.row.job_id.cmp(&b.row.job_id))
        });
        out.truncate(limit);
        Ok(out)
    }
}

#[async_trait]
impl ManifestTable for DynamoTables {
    async fn put_entry(&self, e: &ManifestEntry) -> StoreResult<CreateOutcome<ManifestEntry>> {
        let shown = format!("{}/{}", e.job_id, e.window);
        let (attempt, cond) = self
            .put_conditional(
                CondWrite {
                    operation: "put manifest entry",
                    table: &self.manifest,
                    condition: "attribute_not_exists(#pk)",
                    names: &[("#pk", "pk")],
                    shown: &shown,
                },
                manifest_item(self.manifest_key(&e.job_id, e.window).await?, e, 1, &shown)?,
                &[],
            )
            .await?;
        match cond {
            Cond::Applied(()) => Ok(CreateOutcome::Created),
            Cond::Refused(old) => {
                let existing = match refused_row::<ManifestEntry>(old, "manifest row", &shown)? {
                    Some(row) => row,
                    None => self.get_entry(&e.job_id, e.window).await?.ok_or_else(|| {
                        corrupt("manifest row", &shown, "refused a create but is absent")
                    })?,
                };
                if attempt > 1 && existing.version == 1 && &existing.row == e {
                    return Ok(CreateOutcome::Created);
                }
                debug!(store = "dynamodb", job_id = %e.job_id, window = %e.window, outcome = "already-exists", "put manifest entry");
                Ok(CreateOutcome::AlreadyExists(existing))
            }
        }
    }

    async fn update_entry(
        &self,
        e: &ManifestEntry,
        expected: u64,
    ) -> StoreResult<UpdateOutcome<ManifestEntry>> {
        let shown = format!("{}/{}", e.job_id, e.window);
        let (attempt, cond) = self
            .put_conditional(
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
            )
            .await?;
        match cond {
            Cond::Applied(()) => Ok(UpdateOutcome::Updated {
                version: expected + 1,
            }),
            Cond::Refused(old) => {
                let current = refused_row::<ManifestEntry>(old, "manifest row", &shown)?;
                if attempt > 1
                    && current
                        .as_ref()
                        .is_some_and(|c| c.version == expected + 1 && &c.row == e)
                {
                    return Ok(UpdateOutcome::Updated {
                        version: expected + 1,
                    });
                }
                Ok(UpdateOutcome::Superseded(current))
            }
        }
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

fn claim_key(resource: &str) -> Item {
    HashMap::from([("resource".to_owned(), s(resource))])
}

#[async_trait]
impl ClaimTable for DynamoTables {
    async fn acquire(
        &self,
        resource: &str,
        owner: &str,
        now: UnixMillis,
        expires_at: UnixMillis,
    ) -> StoreResult<AcquireOutcome> {
        // One conditional write: no claim, or an expired one that is not done. The fencing
        // token and the version grow inside the same write.
        let values = HashMap::from([
            (":now".to_owned(), n(now)),
            (":done".to_owned(), s("done")),
            (":held".to_owned(), s("held")),
            (":o".to_owned(), s(owner)),
            (":exp".to_owned(), n(expires_at)),
            (":zero".to_owned(), n(0)),
            (":one".to_owned(), n(1)),
        ]);
        let (attempt, cond) = self
            .update_conditional(
                CondWrite {
                    operation: "acquire claim",
                    table: &self.claims,
                    condition: "attribute_not_exists(#r) OR (#exp < :now AND #st <> :done)",
                    names: &[
                        ("#r", "resource"),
                        ("#o", "owner"),
                        ("#exp", "expires_at"),
                        ("#st", "state"),
                        ("#ft", "fencing_token"),
                        ("#v", "version"),
                        ("#out", "output"),
                    ],
                    shown: resource,
                },
                claim_key(resource),
                "SET #o = :o, #exp = :exp, #st = :held, \
                 #ft = if_not_exists(#ft, :zero) + :one, #v = if_not_exists(#v, :zero) + :one \
                 REMOVE #out",
                values,
            )
            .await?;
        match cond {
            Cond::Applied(item) => {
                let claim = decode_claim(&item, resource)?;
                debug!(
                    store = "dynamodb",
                    resource,
                    owner,
                    fencing_token = claim.row.fencing_token,
                    outcome = "acquired",
                    "acquire claim"
                );
                Ok(AcquireOutcome::Acquired(claim))
            }
            Cond::Refused(old) => {
                let current = match old {
                    Some(item) => decode_claim(&item, resource)?,
                    None => self.get_claim(resource).await?.ok_or_else(|| {
                        corrupt("claim row", resource, "refused an acquire but is absent")
                    })?,
                };
                let c = &current.row;
                if attempt > 1
                    && c.owner == owner
                    && c.expires_at == expires_at
                    && c.state == ClaimState::Held
                {
                    // Our own earlier attempt acquired it and its answer was lost.
                    return Ok(AcquireOutcome::Acquired(current));
                }
                debug!(store = "dynamodb", resource, owner, holder = %c.owner, outcome = "existing", "acquire claim");
                Ok(AcquireOutcome::Existing(current))
            }
        }
    }

    async fn change(
        &self,
        resource: &str,
        owner: &str,
        fencing_token: u64,
        change: ClaimChange,
    ) -> StoreResult<UpdateOutcome<ClaimRecord>> {
        let mut values = HashMap::from([
            (":o".to_owned(), s(owner)),
            (":t".to_owned(), n(fencing_token)),
            (":one".to_owned(), n(1)),
        ]);
        let holds = "#o = :o AND #ft = :t";
        let holds_held = "#o = :o AND #ft = :t AND #st = :held";
        let (update, condition) = match &change {
            ClaimChange::Renew { expires_at } => {
                values.insert(":exp".to_owned(), n(expires_at));
                values.insert(":held".to_owned(), s("held"));
                ("SET #exp = :exp, #v = #v + :one", holds_held)
            }
            ClaimChange::Complete { output } => {
                let json = encode_body(output, "claim output", resource)?;
                values.insert(":out".to_owned(), s(json));
                values.insert(":held".to_owned(), s("held"));
                values.insert(":done".to_owned(), s(state_name(ClaimState::Done)));
                ("SET #st = :done, #out = :out, #v = #v + :one", holds_held)
            }
            // Expired at once, so any later acquirer's `expires_at < now` holds; the state is
            // kept, so releasing a done claim never reopens it.
            ClaimChange::Release => {
                values.insert(":exp".to_owned(), n(UnixMillis::MIN));
                ("SET #exp = :exp, #v = #v + :one", holds)
            }
        };
        let mut names = vec![("#o", "owner"), ("#ft", "fencing_token"), ("#v", "version")];
        match &change {
            ClaimChange::Renew { .. } => names.extend([("#exp", "expires_at"), ("#st", "state")]),
            ClaimChange::Complete { .. } => names.extend([("#st", "state"), ("#out", "output")]),
            ClaimChange::Release => names.push(("#exp", "expires_at")),
        }
        let (attempt, cond) = self
            .update_conditional(
                CondWrite {
                    operation: "change claim",
                    table: &self.claims,
                    condition,
                    names: &names,
                    shown: resource,
                },
                claim_key(resource),
                update,
                values,
            )
            .await?;
        match cond {
            Cond::Applied(item) => Ok(UpdateOutcome::Updated {
                version: get_n(&item, "version", "claim row", resource)?,
            }),
            Cond::Refused(old) => {
                let current = old.map(|item| decode_claim(&item, resource)).transpose()?;
                if let (ClaimChange::Complete { output }, Some(c)) = (&change, &current)
                    && attempt > 1
                    && c.row.owner == owner
                    && c.row.fencing_token == fencing_token
                    && c.row.state == ClaimState::Done
                    && c.row.output.as_ref() == Some(output)
                {
                    // Our own completion landed and its answer was lost.
                    return Ok(UpdateOutcome::Updated { version: c.version });
                }
                debug!(
                    store = "dynamodb",
                    resource,
                    owner,
                    fencing_token,
                    outcome = "superseded",
                    "change claim"
                );
                Ok(UpdateOutcome::Superseded(current))
            }
        }
    }

    async fn get_claim(&self, resource: &str) -> StoreResult<Option<Versioned<ClaimRecord>>> {
        self.get_item(&self.claims, claim_key(resource), resource)
            .await?
            .map(|item| decode_claim(&item, resource))
            .transpose()
    }
}

#[async_trait]
impl CounterTable for DynamoTables {
    /// One `UpdateItem` with `ADD` per counter, atomic in the storage engine. An `ADD` is not
    /// idempotent, so it is repeated only when DynamoDB proved it applied nothing (throttling);
    /// after a lost answer the error is returned (retryable), and a caller that retries may
    /// count twice — these are metrics, not outputs.
    async fn add_counters(&self, job: &JobId, deltas: &[(&str, u64)]) -> StoreResult<()> {
        let mut sums: BTreeMap<&str, u64> = BTreeMap::new();
        for (name, d) in deltas {
            let sum = sums.entry(name).or_insert(0);
            *sum = sum.saturating_add(*d);
        }
        if sums.is_empty() {
            return Ok(());
        }
        // This write is one of the job's requests too: it counts itself in what it adds and
        // is not metered again, so the counts stay equal to what DynamoDB saw.
        let own = tilegate_core::metrics::requests_by("dynamodb", "UpdateItem");
        *sums.entry(&own).or_insert(0) += 1;
        let shown = job.to_string();
        let mut names = HashMap::new();
        let mut values = HashMap::new();
        let mut adds = Vec::new();
        for (i, (name, d)) in sums.iter().enumerate() {
            names.insert(format!("#c{i}"), format!("{COUNTER_ATTR_PREFIX}{name}"));
            values.insert(format!(":d{i}"), n(d));
            adds.push(format!("#c{i} :d{i}"));
        }
        let update = format!("ADD {}", adds.join(", "));
        tilegate_retry::meter::unmetered(retry::run(
            &self.retry,
            Idempotency::NotIdempotent,
            "add counters",
            &shown,
            |_| {
                let req = self
                    .client
                    .update_item()
                    .table_name(&self.counters)
                    .key("job_id", s(&shown))
                    .update_expression(&update)
                    .set_expression_attribute_names(Some(names.clone()))
                    .set_expression_attribute_values(Some(values.clone()));
                async move { req.send().await.map_err(|e| Failure::from_sdk(SERVICE, e)) }
            },
        ))
        .await
        .map(|_| ())
        .map_err(|f| f.into_store("add counters", &shown))
    }

    async fn get_counters(&self, job: &JobId) -> StoreResult<BTreeMap<String, u64>> {
        let shown = job.to_string();
        let key = HashMap::from([("job_id".to_owned(), s(&shown))]);
        let Some(item) = self.get_item(&self.counters, key, &shown).await? else {
            return Ok(BTreeMap::new());
        };
        let mut out = BTreeMap::new();
        for (attr, v) in &item {
            if let Some(name) = attr.strip_prefix(COUNTER_ATTR_PREFIX) {
                let value = v
                    .as_n()
                    .ok()
                    .and_then(|v| v.parse::<u64>().ok())
                    .ok_or_else(|| {
                        corrupt("counter", &shown, format!("`{name}` is not a u64 number"))
                    })?;
                out.insert(name.to_owned(), value);
            }
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_claims() {
        let item = HashMap::from([
            ("resource".to_owned(), s("r")),
            ("owner".to_owned(), s("a")),
            ("fencing_token".to_owned(), n(3)),
            ("expires_at".to_owned(), n(i64::MIN)),
            ("state".to_owned(), s("done")),
            (
                "output".to_owned(),
                s(r#"{"key":"k","e_tag":"\"e\"","size":5}"#),
            ),
            ("version".to_owned(), n(7)),
        ]);
        let c = decode_claim(&item, "r").unwrap();
        assert_eq!(c.version, 7);
        assert_eq!(c.row.fencing_token, 3);
        assert_eq!(c.row.expires_at, i64::MIN);
        assert_eq!(c.row.state, ClaimState::Done);
        assert_eq!(c.row.output.unwrap().size, 5);
        let mut bad = item.clone();
        bad.insert("state".to_owned(), s("limbo"));
        assert!(matches!(
            decode_claim(&bad, "r"),
            Err(StoreError::Corrupt { .. })
        ));
    }
}

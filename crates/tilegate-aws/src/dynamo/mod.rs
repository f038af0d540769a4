//! [`DynamoTables`]: the jobs, manifest, claims and counters contracts on DynamoDB. Every
//! write carries its condition (`attribute_not_exists`, a version guard, the claim predicate)
//! in the same request, and a refused condition comes back with the row that refused it
//! (`ReturnValuesOnConditionCheckFailure = ALL_OLD`), so no second read is needed.
//!
//! Key schema, for table prefix `P` (all tables on-demand, `PAY_PER_REQUEST`):
//!
//! | table | key | other attributes |
//! |---|---|---|
//! | `P-jobs` | `job_id` (S) | `version` (N), `body` (S, the JSON row), `created_at` (N), `list_pk` (S, always `job`), `tenant` (S), `open_pk` (S, `open` while the job is open, absent once settled); GSI `by-created` = (`list_pk`, `created_at`) for newest-first listing, `by-tenant` = (`tenant`, `created_at`), and the sparse `by-open` = (`open_pk`, `created_at`), the reconciler's open jobs |
//! | `P-manifest` | `pk` (S) = job ID, or `JOB#NN` when the job's manifest is sharded; `sk` (S) = window `RRRR_CCCC` | `version` (N), `body` (S). Counted with `Select=COUNT` and pagination |
//! | `P-claims` | `resource` (S) | `owner` (S), `fencing_token` (N), `expires_at` (N), `state` (S `held`/`done`), `output` (S, JSON, once done), `version` (N) |
//! | `P-counters` | `job_id` (S) | one numeric attribute `c_<name>` per counter, added with `ADD` |
//! | `P-ledger` | `pk` (S) = `JOB#NN`, `sk` (S) = `a#SUBJECT#ATTEMPT` (attempt rows) or `p#SUBJECT` (pointers) | `version`, `body`; pointers also `attempt`; the sparse GSI `due` = (`due_shard`, `gc_due`) — see the `ledger` module |
//!
//! The manifest's partition key is the job ID. DynamoDB allows about 1,000 writes/s per
//! partition, so a job planned with `--manifest-shards N` (2–100) spreads its rows as
//! `job_id#NN` (NN = [`manifest_shard`](tilegate_core::table::manifest_shard) of the window, a
//! splitmix64 hash modulo N, so neighbouring windows, written together, land apart); writes
//! spread over N partitions, counts (`count_partitions`, one `Select=COUNT` query per shard)
//! and listings fan out over the shards, and the row format does not change. The default is
//! one partition keyed by the job ID. N is stored on the job row and never changes after it is
//! created, so every process agrees, reading it once per job and keeping it. (SQLite keeps the
//! same shard in a `shard` column and counts per shard.) The sort key is the window as in tile keys
//! (four digits each side); past 9,999 rows or columns its string order stops being the window
//! order, so listings are sorted by the decoded window, never by the key.
//!
//! Conditional creates use `attribute_not_exists`; reserved words (`window`, `owner`, `state`,
//! `version`) go through `ExpressionAttributeNames`. A claim acquire is one `UpdateItem` with
//! `attribute_not_exists(resource) OR (expires_at < :now AND #state <> :done)` that sets
//! `fencing_token = if_not_exists(fencing_token, 0) + 1`.
//!
//! Provider behaviour normalised here: a `ConditionalCheckFailedException` is an outcome, not
//! an error; where `ALL_OLD` is empty the row is absent (`Superseded(None)`). A write whose
//! answer was lost and which was re-sent is refused by its own earlier success; it is
//! recognised by comparing the returned row with the one written (and, for claims, owner,
//! token and expiry), and reported as the success it was.
//!
//! Layout: [`DynamoTables`] and its wiring here; the row codec in `model`, provisioning in
//! `schema`, the conditional writes and the lost-answer rule (once, for every table and the
//! ledger) in `versioned`; one module per table (`jobs`, `manifest`, `claims`, `counters`,
//! `ledger`).

mod claims;
mod counters;
mod jobs;
mod ledger;
mod manifest;
mod model;
mod schema;
mod versioned;

use crate::config::{dynamodb_client, load_sdk_config};
use crate::retry::{RetryPolicy, Sdk};
use crate::url::parse_dynamodb;
use aws_sdk_dynamodb::types::AttributeValue;
use model::manifest_key;
use std::collections::HashMap;
use std::sync::Arc;
use tilegate_core::StoreResult;
use tilegate_core::grid::Window;
use tilegate_core::id::JobId;
use tilegate_core::table::{ShardCounts, manifest_partition};

const SERVICE: &str = "dynamodb";

type Item = HashMap<String, AttributeValue>;

/// The GSI that lists jobs newest first.
const JOBS_BY_CREATED: &str = "by-created";
/// The constant partition of that GSI (jobs are few: one per scene and recipe).
const JOBS_LIST_PK: &str = "job";
/// The GSI that lists one tenant's jobs newest first: (`tenant`, `created_at`).
const JOBS_BY_TENANT: &str = "by-tenant";
/// The sparse GSI of open jobs, oldest first: (`open_pk`, `created_at`); an item has
/// `open_pk` only while its job is open.
const JOBS_BY_OPEN: &str = "by-open";
/// The value of `open_pk` on an open job's item.
const JOBS_OPEN_PK: &str = "open";

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

impl DynamoTables {
    /// This handle's SDK calls: [`SERVICE`] requests under its retry policy.
    fn sdk(&self) -> Sdk<'_> {
        Sdk::new(&self.retry, SERVICE)
    }

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

    /// `GetItem` with a strongly consistent read.
    async fn get_item(&self, table: &str, key: Item, shown: &str) -> StoreResult<Option<Item>> {
        self.sdk()
            .send("get item", shown, || {
                self.client
                    .get_item()
                    .table_name(table)
                    .set_key(Some(key.clone()))
                    .consistent_read(true)
                    .send()
            })
            .await
            .map(|out| out.item)
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
}

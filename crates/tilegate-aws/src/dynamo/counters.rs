//! The counters table ([`CounterTable`]): one numeric attribute per counter, added with `ADD`.

use super::DynamoTables;
use super::model::*;
use crate::retry::Idempotency;
use async_trait::async_trait;
use std::collections::{BTreeMap, HashMap};
use tilegate_core::StoreResult;
use tilegate_core::id::JobId;
use tilegate_core::table::*;

/// Counter attributes are `c_<name>`, apart from the key attribute.
const COUNTER_ATTR_PREFIX: &str = "c_";

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
        tilegate_retry::meter::unmetered(self.sdk().with(Idempotency::NotIdempotent).send(
            "add counters",
            &shown,
            || {
                self.client
                    .update_item()
                    .table_name(&self.counters)
                    .key("job_id", s(&shown))
                    .update_expression(&update)
                    .set_expression_attribute_names(Some(names.clone()))
                    .set_expression_attribute_values(Some(values.clone()))
                    .send()
            },
        ))
        .await
        .map(|_| ())
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

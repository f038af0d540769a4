//! Conditional writes of versioned rows: one conditional `PutItem` / `UpdateItem` whose
//! refusal comes back with the row that refused it (`ALL_OLD`), and the lost-answer rule —
//! a re-sent write refused by its own earlier success is reported as that success — written
//! once here for every table and the ledger.

use super::model::{corrupt, names, refused_row};
use super::{DynamoTables, Item, SERVICE};
use crate::error::{Failure, FailureOf as _};
use crate::retry::{self, Idempotency};
use aws_sdk_dynamodb::operation::put_item::PutItemError;
use aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsError;
use aws_sdk_dynamodb::operation::update_item::UpdateItemError;
use aws_sdk_dynamodb::types::{
    AttributeValue, ReturnValue, ReturnValuesOnConditionCheckFailure, TransactWriteItem,
};
use std::collections::HashMap;
use std::future::Future;
use tilegate_core::StoreResult;
use tilegate_core::table::{CreateOutcome, UpdateOutcome, Versioned};

/// The answer to a conditional write: applied (with the provider's output), or refused with
/// the `ALL_OLD` row (`None`: no row).
pub(super) enum Cond<T> {
    Applied(T),
    Refused(Option<Item>),
}

/// Map a PutItem error: a failed condition is an answer (with `ALL_OLD`), the rest failures.
pub(super) fn put_item_answer<T>(
    e: aws_sdk_dynamodb::error::SdkError<PutItemError>,
) -> Result<Cond<T>, Failure> {
    if let Some(PutItemError::ConditionalCheckFailedException(c)) = e.as_service_error() {
        return Ok(Cond::Refused(c.item().cloned()));
    }
    Err(Failure::from_sdk(SERVICE, e))
}

pub(super) fn update_item_answer<T>(
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
pub(super) struct CondWrite<'a> {
    pub(super) operation: &'static str,
    pub(super) table: &'a str,
    pub(super) condition: &'a str,
    pub(super) names: &'a [(&'a str, &'a str)],
    pub(super) shown: &'a str,
}

impl CondWrite<'_> {
    pub(super) fn names_map(&self) -> HashMap<String, String> {
        names(self.names)
    }
}

impl DynamoTables {
    /// Send the conditional write `w` through the retry loop (`send` builds and sends it
    /// afresh for each attempt), with the attempt that answered; the last failure becomes the
    /// contract's error.
    async fn send_conditional<T, F, Fut>(
        &self,
        w: &CondWrite<'_>,
        mut send: F,
    ) -> StoreResult<(u32, Cond<T>)>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<Cond<T>, Failure>>,
    {
        retry::run(
            &self.retry,
            Idempotency::Idempotent,
            w.operation,
            w.shown,
            |attempt| {
                let sent = send();
                async move { sent.await.map(|c| (attempt, c)) }
            },
        )
        .await
        .map_err(|f| f.into_store(w.operation, w.shown))
    }

    /// One `TransactWriteItems`: whether it applied (`false`: cancelled — a condition failed
    /// or another transaction held an item; the caller reads to tell which), and the attempt
    /// that answered, for the lost-answer rule.
    pub(super) async fn transact(
        &self,
        shown: &str,
        items: Vec<TransactWriteItem>,
    ) -> StoreResult<(u32, bool)> {
        retry::run(
            &self.retry,
            Idempotency::Idempotent,
            "transact write",
            shown,
            |attempt| {
                let req = self
                    .client
                    .transact_write_items()
                    .set_transact_items(Some(items.clone()));
                async move {
                    match req.send().await {
                        Ok(_) => Ok((attempt, true)),
                        Err(e) => match e.as_service_error() {
                            Some(TransactWriteItemsError::TransactionCanceledException(_)) => {
                                Ok((attempt, false))
                            }
                            _ => Err(Failure::from_sdk(SERVICE, e)),
                        },
                    }
                }
            },
        )
        .await
        .map_err(|f| f.into_store("transact write", shown))
    }

    /// A conditional `PutItem` returning `ALL_OLD` on refusal, and the attempt that answered.
    pub(super) async fn put_conditional(
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
        self.send_conditional(&w, || {
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
                    Ok(_) => Ok(Cond::Applied(())),
                    Err(e) => put_item_answer(e),
                }
            }
        })
        .await
    }

    /// A conditional `UpdateItem` returning `ALL_NEW` when applied and `ALL_OLD` on refusal.
    pub(super) async fn update_conditional(
        &self,
        w: CondWrite<'_>,
        key: Item,
        update: &str,
        values: Item,
    ) -> StoreResult<(u32, Cond<Item>)> {
        let names = w.names_map();
        self.send_conditional(&w, || {
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
                    Ok(out) => Ok(Cond::Applied(out.attributes.unwrap_or_default())),
                    Err(e) => update_item_answer(e),
                }
            }
        })
        .await
    }

    /// Create a versioned row (version 1) with the conditional put `w` (its condition refuses
    /// an existing row). The row that refused it is returned as `AlreadyExists` — read back
    /// with `read` when the provider sent no `ALL_OLD` — unless it is our own lost write.
    pub(super) async fn create_versioned<T, F, Fut>(
        &self,
        w: CondWrite<'_>,
        item: Item,
        row: &T,
        what: &'static str,
        read: F,
    ) -> StoreResult<CreateOutcome<T>>
    where
        T: serde::de::DeserializeOwned + PartialEq,
        F: FnOnce() -> Fut,
        Fut: Future<Output = StoreResult<Option<Versioned<T>>>>,
    {
        let shown = w.shown;
        let (attempt, cond) = self.put_conditional(w, item, &[]).await?;
        match cond {
            Cond::Applied(()) => Ok(CreateOutcome::Created),
            Cond::Refused(old) => {
                let existing = match refused_row::<T>(old, what, shown)? {
                    Some(row) => row,
                    // A provider without ALL_OLD: read the row that refused us (report only).
                    None => read()
                        .await?
                        .ok_or_else(|| corrupt(what, shown, "refused a create but is absent"))?,
                };
                if own_lost_write(attempt, Some(&existing), |c| {
                    c.version == 1 && &c.row == row
                })
                .is_some()
                {
                    return Ok(CreateOutcome::Created);
                }
                Ok(CreateOutcome::AlreadyExists(existing))
            }
        }
    }

    /// Replace a versioned row read at `expected` with `item` (version `expected + 1`), with
    /// the conditional put `w` whose condition (and `values`) guard the version. A refusal is
    /// `Superseded` with the current row, unless that row is our own lost write.
    pub(super) async fn update_versioned<T>(
        &self,
        w: CondWrite<'_>,
        item: Item,
        values: &[(&str, AttributeValue)],
        row: &T,
        expected: u64,
        what: &'static str,
    ) -> StoreResult<UpdateOutcome<T>>
    where
        T: serde::de::DeserializeOwned + PartialEq,
    {
        let shown = w.shown;
        let version = expected + 1;
        let (attempt, cond) = self.put_conditional(w, item, values).await?;
        match cond {
            Cond::Applied(()) => Ok(UpdateOutcome::Updated { version }),
            Cond::Refused(old) => {
                let current = refused_row::<T>(old, what, shown)?;
                if own_lost_write(attempt, current.as_ref(), |c| {
                    c.version == version && &c.row == row
                })
                .is_some()
                {
                    return Ok(UpdateOutcome::Updated { version });
                }
                Ok(UpdateOutcome::Superseded(current))
            }
        }
    }
}

/// The lost-answer rule. A conditional write that was re-sent (`attempt > 1`) because its
/// answer was lost is refused by its own earlier success; the row that refused it is ours when
/// `ours` recognises it (the row written, or for claims the owner, token and expiry). Returns
/// that row, to be reported as the success it was.
pub(super) fn own_lost_write<T>(
    attempt: u32,
    current: Option<&Versioned<T>>,
    ours: impl FnOnce(&Versioned<T>) -> bool,
) -> Option<&Versioned<T>> {
    current.filter(|c| attempt > 1 && ours(c))
}

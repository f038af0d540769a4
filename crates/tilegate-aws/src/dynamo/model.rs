//! The row codec of the DynamoDB tables: attribute values, items and keys to and from the
//! `tilegate-core` rows (`version` + JSON `body`, and the claim row's own attributes).

use super::{Item, JOBS_LIST_PK, JOBS_OPEN_PK};
use crate::error::AwsError;
use aws_sdk_dynamodb::types::AttributeValue;
use std::collections::HashMap;
use tilegate_core::grid::Window;
use tilegate_core::table::{
    ClaimRecord, ClaimState, JobRecord, ManifestEntry, OutputRef, Versioned,
};
use tilegate_core::{Retry, StoreError, StoreResult};

pub(super) fn s(v: impl Into<String>) -> AttributeValue {
    AttributeValue::S(v.into())
}

pub(super) fn n(v: impl ToString) -> AttributeValue {
    AttributeValue::N(v.to_string())
}

pub(super) fn corrupt(what: &'static str, key: &str, detail: impl Into<String>) -> StoreError {
    StoreError::Corrupt {
        what,
        key: key.to_owned(),
        detail: detail.into(),
    }
}

pub(super) fn get_s<'a>(
    item: &'a Item,
    attr: &str,
    what: &'static str,
    key: &str,
) -> StoreResult<&'a str> {
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

pub(super) fn get_n<T: std::str::FromStr>(
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
pub(super) fn decode_body<T: serde::de::DeserializeOwned>(
    item: &Item,
    what: &'static str,
    key: &str,
) -> StoreResult<Versioned<T>> {
    let version = get_n(item, "version", what, key)?;
    let body = get_s(item, "body", what, key)?;
    let row = serde_json::from_str(body).map_err(|e| corrupt(what, key, e.to_string()))?;
    Ok(Versioned { version, row })
}

pub(super) fn encode_body<T: serde::Serialize>(
    row: &T,
    what: &'static str,
    key: &str,
) -> StoreResult<String> {
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

pub(super) fn state_name(s: ClaimState) -> &'static str {
    match s {
        ClaimState::Held => "held",
        ClaimState::Done => "done",
    }
}

pub(super) fn decode_claim(item: &Item, key: &str) -> StoreResult<Versioned<ClaimRecord>> {
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

/// An `ExpressionAttributeNames` map from `(#placeholder, name)` pairs.
pub(super) fn names(pairs: &[(&str, &str)]) -> HashMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

pub(super) fn job_item(job: &JobRecord, version: u64) -> StoreResult<Item> {
    let id = job.job_id.to_string();
    let body = encode_body(job, "job row", &id)?;
    let mut item = HashMap::from([
        ("job_id".to_owned(), s(&id)),
        ("version".to_owned(), n(version)),
        ("body".to_owned(), s(body)),
        ("created_at".to_owned(), n(job.created_at)),
        ("list_pk".to_owned(), s(JOBS_LIST_PK)),
        ("tenant".to_owned(), s(job.tenant.as_str())),
    ]);
    // In the sparse `by-open` index while open; the (whole-item) write that settles the job
    // takes it out.
    if job.is_open() {
        item.insert("open_pk".to_owned(), s(JOBS_OPEN_PK));
    }
    Ok(item)
}

pub(super) fn manifest_key(partition: &str, w: Window) -> Item {
    HashMap::from([
        ("pk".to_owned(), s(partition)),
        ("sk".to_owned(), s(w.to_string())),
    ])
}

pub(super) fn manifest_item(
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
pub(super) fn refused_row<T: serde::de::DeserializeOwned>(
    old: Option<Item>,
    what: &'static str,
    key: &str,
) -> StoreResult<Option<Versioned<T>>> {
    old.map(|item| decode_body(&item, what, key)).transpose()
}

pub(super) fn claim_key(resource: &str) -> Item {
    HashMap::from([("resource".to_owned(), s(resource))])
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

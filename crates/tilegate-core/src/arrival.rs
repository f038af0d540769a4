//! Arrivals: the messages that say a scene has landed, read into what `ingest` plans.
//!
//! A message on the arrivals queue is one of
//! - an S3 event notification (`{"Records": [{"eventSource": "aws:s3", …}]}`; its object keys
//!   are URL-encoded, `+` for a space, and are decoded here), including the `s3:TestEvent` S3
//!   sends when a notification is configured;
//! - an EventBridge event from S3 (`"source": "aws.s3"`, `"detail-type": "Object Created"`;
//!   its keys are not encoded);
//! - an SNS envelope (`"Type": "Notification"`) around either of those or a STAC Item, at most
//!   [`MAX_ENVELOPES`] deep;
//! - a STAC Item (`"type": "Feature"` with `stac_version`), or an ItemCollection of them, the
//!   shape STAC publishers put on SNS and SQS.
//!
//! Every message is hostile input: whoever may send to the queue wrote it. Nothing here reads
//! or trusts what a message names; it only says what the message claims. `ingest` filters the
//! claims against its configuration and the source policy before anything is read.

use serde_json::Value;

/// The largest arrival message read, in bytes (SQS's own limit is 1 MiB; SNS's 256 KiB).
pub const MAX_ARRIVAL_BYTES: usize = 1 << 20;

/// Envelopes (SNS around EventBridge around …) unwrapped before a message is refused.
pub const MAX_ENVELOPES: usize = 2;

/// Something a message says has landed.
#[derive(Debug, Clone, PartialEq)]
pub enum Arrival {
    /// An object was created in a bucket.
    Object {
        /// `s3://bucket/key`.
        uri: String,
        bucket: String,
        /// The decoded key.
        key: String,
        /// The object's size, as the event states it.
        size: Option<u64>,
    },
    /// A STAC Item arrived in the message itself.
    Item {
        id: String,
        collection: Option<String>,
        /// The item as it arrived.
        item: Value,
    },
}

impl Arrival {
    /// How the arrival is named in logs and reports: the object's URI or the item's
    /// `collection/id`.
    pub fn name(&self) -> String {
        match self {
            Self::Object { uri, .. } => uri.clone(),
            Self::Item { id, collection, .. } => match collection {
                Some(c) => format!("{c}/{id}"),
                None => id.clone(),
            },
        }
    }
}

/// What one record of a message is.
#[derive(Debug, Clone, PartialEq)]
pub enum Record {
    /// Something to plan.
    Arrival(Arrival),
    /// A record that is not an arrival (an `ObjectRemoved` event, S3's test event), with why.
    Ignored(String),
}

/// Why a message is not an arrival message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ArrivalError {
    #[error("the arrival message is {size} bytes, more than the {max} read")]
    TooLarge { size: usize, max: usize },
    #[error("the arrival message is not JSON: {0}")]
    NotJson(String),
    #[error(
        "the arrival message is not an S3 event, an EventBridge event, an SNS envelope or a STAC Item: {0}"
    )]
    Unrecognised(String),
    #[error("the arrival message has more than {MAX_ENVELOPES} envelopes")]
    TooDeep,
}

/// Read one arrival message's records.
pub fn parse(body: &str) -> Result<Vec<Record>, ArrivalError> {
    if body.len() > MAX_ARRIVAL_BYTES {
        return Err(ArrivalError::TooLarge {
            size: body.len(),
            max: MAX_ARRIVAL_BYTES,
        });
    }
    let doc: Value =
        serde_json::from_str(body).map_err(|e| ArrivalError::NotJson(e.to_string()))?;
    records(doc, 0)
}

fn records(doc: Value, depth: usize) -> Result<Vec<Record>, ArrivalError> {
    let unrecognised = |why: &str| ArrivalError::Unrecognised(why.to_owned());
    let Value::Object(map) = &doc else {
        return Err(unrecognised("not a JSON object"));
    };
    let text = |k: &str| map.get(k).and_then(Value::as_str);
    // SNS: the payload is a string inside the envelope.
    if text("Type") == Some("Notification") {
        if depth >= MAX_ENVELOPES {
            return Err(ArrivalError::TooDeep);
        }
        let inner =
            text("Message").ok_or_else(|| unrecognised("an SNS envelope without Message"))?;
        let inner: Value = serde_json::from_str(inner)
            .map_err(|e| ArrivalError::NotJson(format!("the SNS Message: {e}")))?;
        return records(inner, depth + 1);
    }
    if let Some(list) = map.get("Records") {
        let list = list
            .as_array()
            .ok_or_else(|| unrecognised("`Records` is not a list"))?;
        return list.iter().map(s3_record).collect();
    }
    if text("Event") == Some("s3:TestEvent") {
        return Ok(vec![Record::Ignored("S3's test event".to_owned())]);
    }
    if text("source") == Some("aws.s3") && map.contains_key("detail-type") {
        return Ok(vec![eventbridge(map)?]);
    }
    match text("type") {
        Some("Feature") => Ok(vec![item(doc)?]),
        Some("FeatureCollection") => {
            let Some(Value::Array(features)) = map.get("features") else {
                return Err(unrecognised("a FeatureCollection without `features`"));
            };
            features.iter().cloned().map(item).collect()
        }
        _ => Err(unrecognised(
            "no `Records`, EventBridge `source`, SNS `Type` or STAC `type`",
        )),
    }
}

/// One record of an S3 event notification.
fn s3_record(r: &Value) -> Result<Record, ArrivalError> {
    let unrecognised = |why: &str| ArrivalError::Unrecognised(format!("an S3 record {why}"));
    let source = r.get("eventSource").and_then(Value::as_str);
    if source != Some("aws:s3") {
        return Err(unrecognised("whose eventSource is not aws:s3"));
    }
    let name = r
        .get("eventName")
        .and_then(Value::as_str)
        .ok_or_else(|| unrecognised("without eventName"))?;
    if !name.starts_with("ObjectCreated:") {
        return Ok(Record::Ignored(format!("an S3 `{name}` event")));
    }
    let s3 = r.get("s3").ok_or_else(|| unrecognised("without `s3`"))?;
    let bucket = s3
        .pointer("/bucket/name")
        .and_then(Value::as_str)
        .ok_or_else(|| unrecognised("without s3.bucket.name"))?;
    let key = s3
        .pointer("/object/key")
        .and_then(Value::as_str)
        .ok_or_else(|| unrecognised("without s3.object.key"))?;
    let key = decode_key(key).ok_or_else(|| unrecognised("whose key is not URL-encoded UTF-8"))?;
    object(
        bucket,
        key,
        s3.pointer("/object/size").and_then(Value::as_u64),
    )
}

/// An EventBridge event from S3.
fn eventbridge(map: &serde_json::Map<String, Value>) -> Result<Record, ArrivalError> {
    let unrecognised =
        |why: &str| ArrivalError::Unrecognised(format!("an EventBridge event {why}"));
    let kind = map.get("detail-type").and_then(Value::as_str).unwrap_or("");
    if kind != "Object Created" {
        return Ok(Record::Ignored(format!("an S3 `{kind}` event")));
    }
    let detail = map
        .get("detail")
        .ok_or_else(|| unrecognised("without detail"))?;
    let bucket = detail
        .pointer("/bucket/name")
        .and_then(Value::as_str)
        .ok_or_else(|| unrecognised("without detail.bucket.name"))?;
    let key = detail
        .pointer("/object/key")
        .and_then(Value::as_str)
        .ok_or_else(|| unrecognised("without detail.object.key"))?;
    object(
        bucket,
        key.to_owned(),
        detail.pointer("/object/size").and_then(Value::as_u64),
    )
}

fn object(bucket: &str, key: String, size: Option<u64>) -> Result<Record, ArrivalError> {
    let ok_bucket = !bucket.is_empty()
        && bucket.len() <= 63
        && bucket
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.');
    if !ok_bucket {
        return Err(ArrivalError::Unrecognised(format!(
            "`{}` is not an S3 bucket name",
            crate::redact::redact(bucket)
        )));
    }
    if key.is_empty() || key.len() > 1024 || key.chars().any(char::is_control) {
        return Err(ArrivalError::Unrecognised(
            "an object key that is empty, longer than 1024 bytes or has control characters"
                .to_owned(),
        ));
    }
    Ok(Record::Arrival(Arrival::Object {
        uri: format!("s3://{bucket}/{key}"),
        bucket: bucket.to_owned(),
        key,
        size,
    }))
}

/// A STAC Item: it must say it is one.
fn item(doc: Value) -> Result<Record, ArrivalError> {
    let unrecognised = |why: &str| ArrivalError::Unrecognised(format!("a STAC Item {why}"));
    if doc.get("type").and_then(Value::as_str) != Some("Feature") {
        return Err(unrecognised("whose `type` is not Feature"));
    }
    if doc.get("stac_version").and_then(Value::as_str).is_none() {
        return Err(unrecognised("without stac_version"));
    }
    let id = doc
        .get("id")
        .and_then(Value::as_str)
        .filter(|id| !id.is_empty() && id.len() <= 1024 && !id.chars().any(char::is_control))
        .ok_or_else(|| unrecognised("without a usable `id`"))?
        .to_owned();
    let collection = doc
        .get("collection")
        .and_then(Value::as_str)
        .map(str::to_owned);
    Ok(Record::Arrival(Arrival::Item {
        id,
        collection,
        item: doc,
    }))
}

/// An S3 event's key: `+` is a space and `%XX` a byte; the bytes must be UTF-8.
pub fn decode_key(key: &str) -> Option<String> {
    let bytes = key.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' => {
                let hex = bytes.get(i + 1..i + 3)?;
                let hex = std::str::from_utf8(hex).ok()?;
                out.push(u8::from_str_radix(hex, 16).ok()?);
                i += 2;
            }
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8(out).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// S3's documented notification (notification-content-structure.html), key encoded.
    const S3_EVENT: &str = r#"{"Records":[{"eventVersion":"2.1","eventSource":"aws:s3",
        "awsRegion":"us-east-1","eventTime":"2026-12-06T00:00:00.000Z",
        "eventName":"ObjectCreated:Put","s3":{"s3SchemaVersion":"1.0","configurationId":"c",
        "bucket":{"name":"scenes","arn":"arn:aws:s3:::scenes"},
        "object":{"key":"incoming/my+scene%C3%A9.tif","size":1024,"eTag":"abc"}}}]}"#;

    fn object_uri(r: &Record) -> &str {
        match r {
            Record::Arrival(Arrival::Object { uri, .. }) => uri,
            other => panic!("not an object: {other:?}"),
        }
    }

    #[test]
    fn an_s3_event_names_its_object_with_the_key_decoded() {
        let r = parse(S3_EVENT).unwrap();
        assert_eq!(r.len(), 1);
        assert_eq!(object_uri(&r[0]), "s3://scenes/incoming/my sceneé.tif");
    }

    #[test]
    fn an_sns_envelope_around_an_s3_event_is_unwrapped() {
        let env = serde_json::json!({"Type": "Notification", "MessageId": "m",
            "TopicArn": "arn:aws:sns:us-east-1:1:t", "Message": S3_EVENT});
        let r = parse(&env.to_string()).unwrap();
        assert_eq!(object_uri(&r[0]), "s3://scenes/incoming/my sceneé.tif");
    }

    #[test]
    fn an_eventbridge_event_names_its_object_as_it_is() {
        let ev = serde_json::json!({"version": "0", "id": "1", "detail-type": "Object Created",
            "source": "aws.s3", "account": "1", "time": "2026-12-06T00:00:00Z",
            "region": "us-east-1", "resources": ["arn:aws:s3:::scenes"],
            "detail": {"version": "0", "bucket": {"name": "scenes"},
                "object": {"key": "a b+c.tif", "size": 5, "etag": "e"}}});
        let r = parse(&ev.to_string()).unwrap();
        assert_eq!(object_uri(&r[0]), "s3://scenes/a b+c.tif");
    }

    #[test]
    fn removals_and_test_events_are_ignored_not_refused() {
        let removed = S3_EVENT.replace("ObjectCreated:Put", "ObjectRemoved:Delete");
        assert!(matches!(&parse(&removed).unwrap()[0], Record::Ignored(_)));
        let test = r#"{"Service":"Amazon S3","Event":"s3:TestEvent","Time":"t","Bucket":"b"}"#;
        assert!(matches!(&parse(test).unwrap()[0], Record::Ignored(_)));
    }

    #[test]
    fn a_stac_item_and_a_collection_of_them_arrive_as_items() {
        let item = serde_json::json!({"type": "Feature", "stac_version": "1.0.0", "id": "S2A_1",
            "collection": "sentinel-2-l2a", "assets": {}});
        match &parse(&item.to_string()).unwrap()[0] {
            Record::Arrival(a @ Arrival::Item { .. }) => {
                assert_eq!(a.name(), "sentinel-2-l2a/S2A_1");
            }
            other => panic!("{other:?}"),
        }
        let coll = serde_json::json!({"type": "FeatureCollection", "features": [item, item]});
        assert_eq!(parse(&coll.to_string()).unwrap().len(), 2);
    }

    #[test]
    fn hostile_messages_are_refused_with_a_reason() {
        for body in [
            "not json",
            "[]",
            r#"{"hello":"world"}"#,
            r#"{"Records":[{"eventSource":"aws:sqs"}]}"#,
            // A bucket name that is a path.
            &S3_EVENT.replace("\"name\":\"scenes\"", "\"name\":\"../etc\""),
            // A key with a control character once decoded.
            &S3_EVENT.replace("my+scene", "my%0Ascene"),
            // Not UTF-8 once decoded.
            &S3_EVENT.replace("%C3%A9", "%FF"),
            r#"{"type":"Feature","id":"x"}"#,
        ] {
            assert!(parse(body).is_err(), "accepted: {body}");
        }
        // Envelopes nest at most MAX_ENVELOPES deep.
        let mut body = S3_EVENT.to_owned();
        for _ in 0..=MAX_ENVELOPES {
            body = serde_json::json!({"Type": "Notification", "Message": body}).to_string();
        }
        assert_eq!(parse(&body), Err(ArrivalError::TooDeep));
        let big = " ".repeat(MAX_ARRIVAL_BYTES + 1);
        assert!(matches!(parse(&big), Err(ArrivalError::TooLarge { .. })));
    }
}

//! Announcement sinks on AWS: an SNS topic (`sns:ARN`) and an EventBridge bus
//! (`eventbridge:BUS`). Each message is the announcement's JSON; its idempotency key travels
//! beside it (an SNS message attribute, and on a FIFO topic the deduplication ID; inside the
//! EventBridge event's `detail`), so subscribers drop the duplicates at-least-once delivery
//! allows.

use crate::config;
use crate::retry::Sdk;
use aws_config::SdkConfig;
use tilegate_core::announce::{Message, Sink, SinkError};
use tilegate_retry::RetryPolicy;

/// The `source` of tilegate's EventBridge events.
pub const EVENT_SOURCE: &str = "tilegate";

/// An SNS topic.
#[derive(Debug, Clone)]
pub struct SnsTopic {
    id: String,
    arn: String,
    client: aws_sdk_sns::Client,
    retry: RetryPolicy,
}

impl SnsTopic {
    pub fn new(sdk: &SdkConfig, arn: &str) -> Self {
        Self::with_client(config::sns_client(sdk), arn)
    }

    /// The topic `arn` reached through `client` (one with its own endpoint, say).
    pub fn with_client(client: aws_sdk_sns::Client, arn: &str) -> Self {
        Self {
            id: format!("sns:{arn}"),
            arn: arn.to_owned(),
            client,
            retry: RetryPolicy::default(),
        }
    }
}

fn failed(sink: &str, e: &tilegate_core::StoreError) -> SinkError {
    SinkError {
        sink: sink.to_owned(),
        retryable: e.is_retryable(),
        detail: tilegate_core::error::chain(e),
    }
}

fn attribute(v: &str) -> aws_sdk_sns::types::MessageAttributeValue {
    aws_sdk_sns::types::MessageAttributeValue::builder()
        .data_type("String")
        .string_value(v)
        .build()
        .expect("data type is set")
}

#[async_trait::async_trait]
impl Sink for SnsTopic {
    fn id(&self) -> &str {
        &self.id
    }

    async fn deliver(&self, message: &Message, body: &[u8]) -> Result<(), SinkError> {
        let text = String::from_utf8_lossy(body).into_owned();
        let fifo = self.arn.ends_with(".fifo");
        // A FIFO topic's deduplication ID is at most 128 characters.
        let dedup: String = message.idempotency_key.chars().take(128).collect();
        Sdk::new(&self.retry, "sns")
            .send("publish announcement", &self.arn, || {
                let mut req = self
                    .client
                    .publish()
                    .topic_arn(&self.arn)
                    .message(text.clone())
                    .message_attributes("idempotency_key", attribute(&message.idempotency_key))
                    .message_attributes("type", attribute(&message.kind));
                if fifo {
                    req = req
                        .message_group_id(message.job_id.as_str())
                        .message_deduplication_id(dedup.clone());
                }
                req.send()
            })
            .await
            .map(|_| ())
            .map_err(|e| failed(&self.id, &e))
    }
}

/// An EventBridge event bus.
#[derive(Debug, Clone)]
pub struct EventBus {
    id: String,
    bus: String,
    client: aws_sdk_eventbridge::Client,
    retry: RetryPolicy,
}

impl EventBus {
    pub fn new(sdk: &SdkConfig, bus: &str) -> Self {
        Self {
            id: format!("eventbridge:{bus}"),
            bus: bus.to_owned(),
            client: config::eventbridge_client(sdk),
            retry: RetryPolicy::default(),
        }
    }
}

#[async_trait::async_trait]
impl Sink for EventBus {
    fn id(&self) -> &str {
        &self.id
    }

    async fn deliver(&self, message: &Message, body: &[u8]) -> Result<(), SinkError> {
        let entry = aws_sdk_eventbridge::types::PutEventsRequestEntry::builder()
            .event_bus_name(&self.bus)
            .source(EVENT_SOURCE)
            .detail_type(&message.kind)
            .detail(String::from_utf8_lossy(body).into_owned())
            .build();
        let out = Sdk::new(&self.retry, "eventbridge")
            .send("put announcement event", &self.bus, || {
                self.client.put_events().entries(entry.clone()).send()
            })
            .await
            .map_err(|e| failed(&self.id, &e))?;
        // PutEvents answers 200 with per-entry failures.
        if out.failed_entry_count() > 0 {
            let why = out
                .entries()
                .iter()
                .filter_map(|e| {
                    e.error_code()
                        .map(|c| format!("{c}: {}", e.error_message().unwrap_or("")))
                })
                .collect::<Vec<_>>()
                .join("; ");
            return Err(SinkError {
                sink: self.id.clone(),
                retryable: true,
                detail: format!("the bus refused the event ({why})"),
            });
        }
        Ok(())
    }
}

//! [`SqsQueue`]: the [`WorkQueue`] contract on an SQS standard queue and its dead-letter queue
//! `{name}-dlq`, attached by the main queue's `RedrivePolicy` (`maxReceiveCount`, default 3).
//!
//! - Sends go out in `SendMessageBatch` calls of at most 10 entries (and 256 KiB); entries that
//!   fail inside a partly failed batch are re-sent, bounded, and never dropped silently.
//! - Receives long-poll (`WaitTimeSeconds` ≤ 20) and ask for `ApproximateReceiveCount`.
//! - `dead_letter` sends the body to the DLQ with `tilegate-reason` and then deletes the
//!   original; `list_dead_letters` receives from the DLQ with a short visibility and makes the
//!   messages visible again afterwards; `redrive` sends to the main queue, then deletes from
//!   the DLQ (at least once: a crash in between leaves a copy in both).
//!
//! Message identity: a message moved by `dead_letter` or `redrive` is a new SQS message, so it
//! carries the ID it was first sent with in the `tilegate-message-id` attribute, and
//! [`Received::message_id`] / [`DeadLetter::message_id`] report that ID. A message moved by
//! SQS's own redrive policy keeps its SQS ID; its receive count is `maxReceiveCount` (the
//! policy moves it after exactly that many receives) and its `dead_at` is its SentTimestamp
//! (SQS records no move time).
//!
//! Stale receipts: SQS accepts a `DeleteMessage` with an outdated receipt ("the request
//! succeeds, but the message might not be deleted") and moto 5.2.5 even deletes the message
//! with any receipt it ever had. So [`AckOutcome::Stale`] is reported where the provider says
//! so (`ReceiptHandleIsInvalid`, `MessageNotInflight`, an invalid receipt on a visibility
//! change) and where this handle itself knows the receipt is superseded: it received the same
//! message again, or already acknowledged or dead-lettered it. A receipt made stale by a
//! receive in *another* process cannot be recognised and is acknowledged as SQS answers.

use crate::config::{load_sdk_config, sqs_client};
use crate::error::{Answer, AwsError, Failure, own_error};
use crate::retry::{self, Idempotency, RetryPolicy};
use crate::url::{parse_sqs, validate_queue_name};
use async_trait::async_trait;
use aws_sdk_sqs::types::{
    ChangeMessageVisibilityBatchRequestEntry, DeleteMessageBatchRequestEntry, Message,
    MessageAttributeValue, MessageSystemAttributeName, QueueAttributeName,
    SendMessageBatchRequestEntry,
};
use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;
use tilegate_core::queue::{
    AckOutcome, DEFAULT_MAX_RECEIVE_COUNT, DeadLetter, QueueDepth, ReceiveOptions, Received,
    WorkQueue, refuse_oversized,
};
use tilegate_core::{Retry, StoreError, StoreResult, now_millis};
use tracing::{debug, info, warn};

const SERVICE: &str = "sqs";

/// SQS's batch limits: 10 entries and 256 KiB of payload per `SendMessageBatch`.
const MAX_BATCH: usize = 10;
const MAX_BATCH_BYTES: usize = 256 * 1024;
/// SQS's longest long poll.
const MAX_WAIT_SECONDS: i32 = 20;
/// SQS's longest visibility timeout (12 h).
const MAX_VISIBILITY_SECONDS: i32 = 43_200;
/// How often entries refused inside a batch are re-sent before the send fails.
const BATCH_ATTEMPTS: u32 = 5;
/// How long `list_dead_letters` and `redrive` hide the dead letters they look at.
const SCAN_VISIBILITY_SECONDS: i32 = 30;
/// At most this many dead letters are gathered to order them.
const SCAN_CAP: usize = 1000;
/// Receipts this handle remembers for stale detection.
const LEDGER_CAP: usize = 20_000;
/// The longest dead-letter reason kept (SQS counts attributes into the message size).
const MAX_REASON_BYTES: usize = 4096;

/// Message attributes tilegate sets.
const ATTR_MESSAGE_ID: &str = "tilegate-message-id";
const ATTR_REASON: &str = "tilegate-reason";
const ATTR_RECEIVE_COUNT: &str = "tilegate-receive-count";
const ATTR_DEAD_AT: &str = "tilegate-dead-at";

/// The name of a queue's dead-letter queue.
pub fn dead_letter_queue_name(name: &str) -> String {
    format!("{name}-dlq")
}

/// Receipts this handle knows are no longer current (see the module docs).
#[derive(Debug, Default)]
struct Ledger {
    /// SQS message ID → the latest receipt this handle got for it.
    latest: HashMap<String, String>,
    stale: HashSet<String>,
    /// Receipts in the order they were learnt, for eviction.
    order: VecDeque<(String, String)>,
}

impl Ledger {
    fn received(&mut self, sqs_id: &str, receipt: &str) {
        if let Some(old) = self.latest.insert(sqs_id.to_owned(), receipt.to_owned())
            && old != receipt
        {
            self.stale.insert(old);
        }
        self.order
            .push_back((sqs_id.to_owned(), receipt.to_owned()));
        while self.order.len() > LEDGER_CAP {
            if let Some((id, r)) = self.order.pop_front() {
                self.stale.remove(&r);
                if self.latest.get(&id) == Some(&r) {
                    self.latest.remove(&id);
                }
            }
        }
    }

    /// The message behind `receipt` is gone (acknowledged or dead-lettered).
    fn finished(&mut self, receipt: &str) {
        self.stale.insert(receipt.to_owned());
        self.order.push_back((String::new(), receipt.to_owned()));
    }

    fn is_stale(&self, receipt: &str) -> bool {
        self.stale.contains(receipt)
    }
}

/// An SQS work queue with its dead-letter queue. Cheap to clone; clones share the receipt
/// ledger.
#[derive(Debug, Clone)]
pub struct SqsQueue {
    client: aws_sdk_sqs::Client,
    name: String,
    url: String,
    dlq_url: String,
    max_receive_count: u32,
    ledger: Arc<Mutex<Ledger>>,
    retry: RetryPolicy,
}

fn string_attr(v: &str) -> StoreResult<MessageAttributeValue> {
    attr("String", v)
}

fn number_attr(v: impl ToString) -> StoreResult<MessageAttributeValue> {
    attr("Number", &v.to_string())
}

fn attr(kind: &str, v: &str) -> StoreResult<MessageAttributeValue> {
    MessageAttributeValue::builder()
        .data_type(kind)
        .string_value(v)
        .build()
        .map_err(|e| construction("message attribute", e))
}

fn construction(what: &str, e: impl std::fmt::Display) -> StoreError {
    StoreError::backend(
        "build request",
        what,
        Retry::Permanent,
        AwsError::Construction {
            service: SERVICE,
            detail: e.to_string(),
        },
    )
}

fn secs_ceil(d: Duration, max: i32) -> i32 {
    let s = d.as_secs() + u64::from(d.subsec_nanos() > 0);
    i32::try_from(s).unwrap_or(max).min(max)
}

fn attr_str<'a>(m: &'a Message, name: &str) -> Option<&'a str> {
    m.message_attributes()
        .and_then(|a| a.get(name))
        .and_then(|v| v.string_value())
}

fn sys_attr<'a>(m: &'a Message, name: &MessageSystemAttributeName) -> Option<&'a str> {
    m.attributes().and_then(|a| a.get(name)).map(String::as_str)
}

/// The ID tilegate reports for a message: the one it was first sent with.
fn logical_id(m: &Message) -> String {
    attr_str(m, ATTR_MESSAGE_ID)
        .or(m.message_id())
        .unwrap_or_default()
        .to_owned()
}

/// A receipt-handle error on a visibility change. SQS answers an outdated receipt there with
/// `InvalidParameterValue` ("Value ... for parameter ReceiptHandle is invalid. Reason: Message
/// does not exist or is not available for visibility timeout change"), a code the classifier
/// cannot tell apart from other bad parameters without the message.
fn is_stale_receipt(f: &Failure) -> bool {
    f.answer == Answer::StaleReceipt
        || (f.code.as_deref() == Some("InvalidParameterValue")
            && matches!(&*f.error, AwsError::Service { message, .. } if message.contains("ReceiptHandle")))
}

/// Refuse a queue name SQS would refuse, before any request.
fn check_queue_name(operation: &'static str, name: &str) -> StoreResult<()> {
    validate_queue_name(name).map_err(|reason| {
        own_error(
            operation,
            name,
            Retry::Permanent,
            AwsError::InvalidUrl {
                url: name.to_owned(),
                reason,
            },
        )
    })
}

impl SqsQueue {
    /// Open `name` and its dead-letter queue (created by [`SqsQueue::ensure`] or
    /// `AwsBackends::init`). `max_receive_count` is what the caller expects; the queue's own
    /// `RedrivePolicy` is what SQS enforces, so that is the value reported (with a warning if
    /// they differ).
    pub async fn open(
        client: aws_sdk_sqs::Client,
        name: &str,
        max_receive_count: u32,
    ) -> StoreResult<Self> {
        check_queue_name("open queue", name)?;
        let retry = RetryPolicy::default();
        let url = queue_url(&client, &retry, name).await?;
        let dlq_url = queue_url(&client, &retry, &dead_letter_queue_name(name)).await?;
        let attrs =
            queue_attributes(&client, &retry, &url, &[QueueAttributeName::RedrivePolicy]).await?;
        let provider_max = attrs
            .get(&QueueAttributeName::RedrivePolicy)
            .and_then(|p| serde_json::from_str::<serde_json::Value>(p).ok())
            .and_then(|v| match &v["maxReceiveCount"] {
                serde_json::Value::Number(n) => n.as_u64(),
                serde_json::Value::String(s) => s.parse().ok(),
                _ => None,
            })
            .and_then(|n| u32::try_from(n).ok())
            .ok_or_else(|| {
                own_error(
                    "open queue",
                    name,
                    Retry::Permanent,
                    AwsError::Misconfigured {
                        what: format!("queue `{name}`"),
                        reason: "it has no RedrivePolicy with a maxReceiveCount; run `tilegate \
                                 init` to attach the dead-letter queue"
                            .to_owned(),
                    },
                )
            })?;
        if provider_max != max_receive_count {
            warn!(
                queue = name,
                expected = max_receive_count,
                configured = provider_max,
                "the queue's RedrivePolicy differs from the requested maxReceiveCount; SQS enforces the queue's"
            );
        }
        Ok(Self {
            client,
            name: name.to_owned(),
            url,
            dlq_url,
            max_receive_count: provider_max,
            ledger: Arc::new(Mutex::new(Ledger::default())),
            retry,
        })
    }

    /// A queue known by its URL and its dead-letter queue's URL, opened without a request:
    /// for hosts whose role may use the queues but not look them up (an SQS-triggered function
    /// has no `sqs:GetQueueUrl` or `sqs:GetQueueAttributes` to spare). `max_receive_count` is
    /// taken as given; the queue's own `RedrivePolicy` still decides.
    pub fn from_urls(
        client: aws_sdk_sqs::Client,
        url: &str,
        dlq_url: &str,
        max_receive_count: u32,
    ) -> Self {
        Self {
            client,
            name: url.rsplit('/').next().unwrap_or(url).to_owned(),
            url: url.to_owned(),
            dlq_url: dlq_url.to_owned(),
            max_receive_count,
            ledger: Arc::new(Mutex::new(Ledger::default())),
            retry: RetryPolicy::default(),
        }
    }

    /// Open `sqs://queue-name` with the standard AWS configuration.
    pub async fn connect(url: &str, max_receive_count: u32) -> StoreResult<Self> {
        let name = parse_sqs(url)?;
        let sdk = load_sdk_config().await;
        Self::open(sqs_client(&sdk), &name, max_receive_count).await
    }

    /// Create the dead-letter queue and the queue with its `RedrivePolicy` where missing, and
    /// set the policy on an existing queue. Returns whether this call created the main queue;
    /// a queue that exists already is success.
    pub async fn ensure(
        client: &aws_sdk_sqs::Client,
        name: &str,
        max_receive_count: u32,
    ) -> StoreResult<bool> {
        check_queue_name("create queue", name)?;
        let retry = RetryPolicy::default();
        let max = if max_receive_count == 0 {
            DEFAULT_MAX_RECEIVE_COUNT
        } else {
            max_receive_count
        };
        let dlq_name = dead_letter_queue_name(name);
        // Dead letters keep their original enqueue time, so the DLQ keeps them as long as SQS
        // allows (14 days).
        let dlq_url = create_queue(
            client,
            &retry,
            &dlq_name,
            &[(
                QueueAttributeName::MessageRetentionPeriod,
                "1209600".to_owned(),
            )],
        )
        .await?;
        let dlq_arn = queue_attributes(client, &retry, &dlq_url, &[QueueAttributeName::QueueArn])
            .await?
            .remove(&QueueAttributeName::QueueArn)
            .ok_or_else(|| StoreError::Corrupt {
                what: "queue attributes",
                key: dlq_name.clone(),
                detail: "GetQueueAttributes returned no QueueArn".to_owned(),
            })?;
        let policy = serde_json::json!({
            "deadLetterTargetArn": dlq_arn,
            "maxReceiveCount": max.to_string(),
        })
        .to_string();
        let created =
            match try_queue_url(client, &retry, name).await? {
                Some(url) => {
                    // Exists: make sure the redrive policy is the requested one (idempotent).
                    retry::run(&retry, Idempotency::Idempotent, "set queue attributes", name, |_| {
                    let req = client
                        .set_queue_attributes()
                        .queue_url(&url)
                        .attributes(QueueAttributeName::RedrivePolicy, &policy);
                    async move { req.send().await.map_err(|e| Failure::from_sdk(SERVICE, e)) }
                })
                .await
                .map_err(|f| f.into_store("set queue attributes", name))?;
                    false
                }
                None => {
                    create_queue(
                        client,
                        &retry,
                        name,
                        &[(QueueAttributeName::RedrivePolicy, policy)],
                    )
                    .await?;
                    true
                }
            };
        info!(queue = name, dead_letter_queue = %dlq_name, max_receive_count = max, outcome = if created { "created" } else { "already-present" }, "ensure queue");
        Ok(created)
    }

    /// Replace the retry policy.
    pub fn with_retry_policy(mut self, policy: RetryPolicy) -> Self {
        self.retry = policy;
        self
    }

    pub fn queue_name(&self) -> &str {
        &self.name
    }

    pub fn queue_url(&self) -> &str {
        &self.url
    }

    pub fn dead_letter_queue_url(&self) -> &str {
        &self.dlq_url
    }

    fn ledger(&self) -> std::sync::MutexGuard<'_, Ledger> {
        self.ledger.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Send entries (id, body, attributes) to `url` in batches; entries refused inside a batch
    /// are re-sent up to [`BATCH_ATTEMPTS`] times, a sender fault fails at once.
    async fn send_entries(
        &self,
        url: &str,
        entries: Vec<SendMessageBatchRequestEntry>,
    ) -> StoreResult<()> {
        let total = entries.len();
        let mut pending = entries;
        for attempt in 1..=BATCH_ATTEMPTS {
            let mut refused: Vec<SendMessageBatchRequestEntry> = Vec::new();
            let mut last_detail = String::new();
            for batch in batches(pending) {
                let by_id: HashMap<String, SendMessageBatchRequestEntry> = batch
                    .iter()
                    .map(|e| (e.id().to_owned(), e.clone()))
                    .collect();
                // The whole call is re-sent after a lost answer: at-least-once, as SQS is.
                let out = retry::run(
                    &self.retry,
                    Idempotency::Idempotent,
                    "send",
                    &self.name,
                    |_| {
                        let req = self
                            .client
                            .send_message_batch()
                            .queue_url(url)
                            .set_entries(Some(batch.clone()));
                        async move { req.send().await.map_err(|e| Failure::from_sdk(SERVICE, e)) }
                    },
                )
                .await
                .map_err(|f| f.into_store("send", &self.name))?;
                for failed in out.failed() {
                    last_detail = format!(
                        "`{}`: {}",
                        failed.code(),
                        failed.message().unwrap_or_default()
                    );
                    if failed.sender_fault() {
                        return Err(own_error(
                            "send",
                            &self.name,
                            Retry::Permanent,
                            AwsError::BatchRefused {
                                failed: out.failed().len(),
                                total,
                                detail: last_detail,
                            },
                        ));
                    }
                    if let Some(e) = by_id.get(failed.id()) {
                        refused.push(e.clone());
                    }
                }
            }
            if refused.is_empty() {
                return Ok(());
            }
            warn!(queue = %self.name, refused = refused.len(), attempt, detail = %last_detail, "batch entries refused; re-sending them");
            if attempt == BATCH_ATTEMPTS {
                return Err(own_error(
                    "send",
                    &self.name,
                    Retry::Retryable,
                    AwsError::BatchRefused {
                        failed: refused.len(),
                        total,
                        detail: last_detail,
                    },
                ));
            }
            tokio::time::sleep(self.retry.backoff(attempt, None)).await;
            pending = refused;
        }
        Ok(())
    }

    /// One `ReceiveMessage` on `url`.
    async fn receive_raw(
        &self,
        url: &str,
        max: i32,
        wait_seconds: i32,
        visibility_seconds: i32,
    ) -> StoreResult<Vec<Message>> {
        retry::run(
            &self.retry,
            Idempotency::Idempotent,
            "receive",
            &self.name,
            |_| {
                let req = self
                    .client
                    .receive_message()
                    .queue_url(url)
                    .max_number_of_messages(max)
                    .wait_time_seconds(wait_seconds)
                    .visibility_timeout(visibility_seconds)
                    .message_system_attribute_names(
                        MessageSystemAttributeName::ApproximateReceiveCount,
                    )
                    .message_system_attribute_names(MessageSystemAttributeName::SentTimestamp)
                    .message_attribute_names("All");
                async move { req.send().await.map_err(|e| Failure::from_sdk(SERVICE, e)) }
            },
        )
        .await
        .map(|out| out.messages.unwrap_or_default())
        .map_err(|f| f.into_store("receive", &self.name))
    }

    /// Receive every dead letter (up to [`SCAN_CAP`]), hidden for a short while.
    async fn scan_dead_letters(&self) -> StoreResult<Vec<Message>> {
        let expected = self.depth_of(&self.dlq_url).await?;
        let expected = usize::try_from(expected.0 + expected.1).unwrap_or(usize::MAX);
        let mut got: Vec<Message> = Vec::new();
        let mut seen = HashSet::new();
        while got.len() < SCAN_CAP {
            // The count is approximate (and lags on SQS): it ends the scan early once reached,
            // but a count of zero still gets one look.
            if !got.is_empty() && got.len() >= expected {
                break;
            }
            // A 1 s long poll asks every SQS server (a short poll samples only some).
            let page = self
                .receive_raw(&self.dlq_url, 10, 1, SCAN_VISIBILITY_SECONDS)
                .await?;
            if page.is_empty() {
                break;
            }
            for m in page {
                if seen.insert(m.message_id().unwrap_or_default().to_owned()) {
                    got.push(m);
                }
            }
        }
        Ok(got)
    }

    fn dead_letter_of(&self, m: &Message) -> DeadLetter {
        let sent_at = sys_attr(m, &MessageSystemAttributeName::SentTimestamp)
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        match attr_str(m, ATTR_REASON) {
            Some(reason) => DeadLetter {
                message_id: logical_id(m),
                body: m.body().unwrap_or_default().to_owned(),
                reason: reason.to_owned(),
                receive_count: attr_str(m, ATTR_RECEIVE_COUNT)
                    .and_then(|v| v.parse().ok())
                    .unwrap_or(0),
                dead_at: attr_str(m, ATTR_DEAD_AT)
                    .and_then(|v| v.parse().ok())
                    .unwrap_or(sent_at),
            },
            // Moved by the RedrivePolicy: after exactly maxReceiveCount receives.
            None => DeadLetter {
                message_id: logical_id(m),
                body: m.body().unwrap_or_default().to_owned(),
                reason: format!(
                    "max-receives-exceeded: received {} times without being acknowledged",
                    self.max_receive_count
                ),
                receive_count: self.max_receive_count,
                dead_at: sent_at,
            },
        }
    }

    /// Make received DLQ messages visible again at once.
    async fn release(&self, url: &str, messages: &[Message]) -> StoreResult<()> {
        for chunk in messages.chunks(MAX_BATCH) {
            let entries = chunk
                .iter()
                .enumerate()
                .map(|(i, m)| {
                    ChangeMessageVisibilityBatchRequestEntry::builder()
                        .id(i.to_string())
                        .receipt_handle(m.receipt_handle().unwrap_or_default())
                        .visibility_timeout(0)
                        .build()
                        .map_err(|e| construction("visibility entry", e))
                })
                .collect::<StoreResult<Vec<_>>>()?;
            retry::run(
                &self.retry,
                Idempotency::Idempotent,
                "release dead letters",
                &self.name,
                |_| {
                    let req = self
                        .client
                        .change_message_visibility_batch()
                        .queue_url(url)
                        .set_entries(Some(entries.clone()));
                    async move { req.send().await.map_err(|e| Failure::from_sdk(SERVICE, e)) }
                },
            )
            .await
            .map_err(|f| f.into_store("release dead letters", &self.name))?;
        }
        Ok(())
    }

    async fn delete_batch(&self, url: &str, messages: &[Message]) -> StoreResult<()> {
        for chunk in messages.chunks(MAX_BATCH) {
            let entries = chunk
                .iter()
                .enumerate()
                .map(|(i, m)| (i, m.receipt_handle().unwrap_or_default()));
            let out = self
                .delete_message_batch(url, entries, "delete dead letters")
                .await?;
            for failed in out.failed() {
                warn!(queue = %self.name, code = failed.code(), "a redriven dead letter could not be deleted from the dead-letter queue; it may be redriven twice");
            }
        }
        Ok(())
    }

    /// One `DeleteMessageBatch` of at most ten `(entry ID, receipt)` pairs, retried as a whole.
    async fn delete_message_batch<'a>(
        &self,
        url: &str,
        receipts: impl Iterator<Item = (usize, &'a str)>,
        what: &'static str,
    ) -> StoreResult<aws_sdk_sqs::operation::delete_message_batch::DeleteMessageBatchOutput> {
        let entries = receipts
            .map(|(id, receipt)| {
                DeleteMessageBatchRequestEntry::builder()
                    .id(id.to_string())
                    .receipt_handle(receipt)
                    .build()
                    .map_err(|e| construction("delete entry", e))
            })
            .collect::<StoreResult<Vec<_>>>()?;
        retry::run(
            &self.retry,
            Idempotency::Idempotent,
            what,
            &self.name,
            |_| {
                let req = self
                    .client
                    .delete_message_batch()
                    .queue_url(url)
                    .set_entries(Some(entries.clone()));
                async move { req.send().await.map_err(|e| Failure::from_sdk(SERVICE, e)) }
            },
        )
        .await
        .map_err(|f| f.into_store(what, &self.name))
    }

    /// (visible, not visible) of one queue.
    async fn depth_of(&self, url: &str) -> StoreResult<(u64, u64)> {
        let attrs = queue_attributes(
            &self.client,
            &self.retry,
            url,
            &[
                QueueAttributeName::ApproximateNumberOfMessages,
                QueueAttributeName::ApproximateNumberOfMessagesNotVisible,
                QueueAttributeName::ApproximateNumberOfMessagesDelayed,
            ],
        )
        .await?;
        let get = |a: &QueueAttributeName| {
            attrs
                .get(a)
                .and_then(|v| v.parse::<u64>().ok())
                .unwrap_or(0)
        };
        Ok((
            get(&QueueAttributeName::ApproximateNumberOfMessages)
                + get(&QueueAttributeName::ApproximateNumberOfMessagesDelayed),
            get(&QueueAttributeName::ApproximateNumberOfMessagesNotVisible),
        ))
    }
}

/// Split entries into SQS batches: at most 10 entries and 256 KiB of bodies and attributes.
fn batches(entries: Vec<SendMessageBatchRequestEntry>) -> Vec<Vec<SendMessageBatchRequestEntry>> {
    let size = |e: &SendMessageBatchRequestEntry| {
        e.message_body().len()
            + e.message_attributes().map_or(0, |a| {
                a.iter()
                    .map(|(k, v)| {
                        k.len() + v.data_type().len() + v.string_value().map_or(0, str::len)
                    })
                    .sum()
            })
    };
    let mut out: Vec<Vec<SendMessageBatchRequestEntry>> = Vec::new();
    let mut cur = Vec::new();
    let mut bytes = 0;
    for e in entries {
        let n = size(&e);
        if !cur.is_empty() && (cur.len() == MAX_BATCH || bytes + n > MAX_BATCH_BYTES) {
            out.push(std::mem::take(&mut cur));
            bytes = 0;
        }
        bytes += n;
        cur.push(e);
    }
    if !cur.is_empty() {
        out.push(cur);
    }
    out
}

async fn try_queue_url(
    client: &aws_sdk_sqs::Client,
    retry: &RetryPolicy,
    name: &str,
) -> StoreResult<Option<String>> {
    let r = retry::run(
        retry,
        Idempotency::Idempotent,
        "get queue url",
        name,
        |_| {
            let req = client.get_queue_url().queue_name(name);
            async move { req.send().await.map_err(|e| Failure::from_sdk(SERVICE, e)) }
        },
    )
    .await;
    match r {
        Ok(out) => Ok(out.queue_url().map(str::to_owned)),
        Err(f) if f.answer == Answer::MissingResource => Ok(None),
        Err(f) => Err(f.into_store("get queue url", name)),
    }
}

async fn queue_url(
    client: &aws_sdk_sqs::Client,
    retry: &RetryPolicy,
    name: &str,
) -> StoreResult<String> {
    try_queue_url(client, retry, name).await?.ok_or_else(|| {
        own_error(
            "open queue",
            name,
            Retry::Permanent,
            AwsError::Misconfigured {
                what: format!("queue `{name}`"),
                reason: "it does not exist; run `tilegate init`".to_owned(),
            },
        )
    })
}

async fn create_queue(
    client: &aws_sdk_sqs::Client,
    retry: &RetryPolicy,
    name: &str,
    attributes: &[(QueueAttributeName, String)],
) -> StoreResult<String> {
    let out = retry::run(retry, Idempotency::Idempotent, "create queue", name, |_| {
        let mut req = client.create_queue().queue_name(name);
        for (k, v) in attributes {
            req = req.attributes(k.clone(), v);
        }
        async move { req.send().await.map_err(|e| Failure::from_sdk(SERVICE, e)) }
    })
    .await
    .map_err(|f| f.into_store("create queue", name))?;
    out.queue_url()
        .map(str::to_owned)
        .ok_or_else(|| StoreError::Corrupt {
            what: "queue",
            key: name.to_owned(),
            detail: "CreateQueue returned no QueueUrl".to_owned(),
        })
}

async fn queue_attributes(
    client: &aws_sdk_sqs::Client,
    retry: &RetryPolicy,
    url: &str,
    names: &[QueueAttributeName],
) -> StoreResult<HashMap<QueueAttributeName, String>> {
    retry::run(
        retry,
        Idempotency::Idempotent,
        "get queue attributes",
        url,
        |_| {
            let req = client
                .get_queue_attributes()
                .queue_url(url)
                .set_attribute_names(Some(names.to_vec()));
            async move { req.send().await.map_err(|e| Failure::from_sdk(SERVICE, e)) }
        },
    )
    .await
    .map(|out| out.attributes.unwrap_or_default())
    .map_err(|f| f.into_store("get queue attributes", url))
}

#[async_trait]
impl WorkQueue for SqsQueue {
    fn name(&self) -> &'static str {
        "sqs"
    }

    fn max_receive_count(&self) -> u32 {
        self.max_receive_count
    }

    async fn send_batch(&self, bodies: &[String]) -> StoreResult<()> {
        refuse_oversized(&self.name, bodies)?;
        let entries = bodies
            .iter()
            .enumerate()
            .map(|(i, body)| {
                SendMessageBatchRequestEntry::builder()
                    .id(i.to_string())
                    .message_body(body)
                    .build()
                    .map_err(|e| construction("send entry", e))
            })
            .collect::<StoreResult<Vec<_>>>()?;
        if entries.is_empty() {
            return Ok(());
        }
        self.send_entries(&self.url, entries).await?;
        debug!(store = "sqs", queue = %self.name, messages = bodies.len(), "sent");
        Ok(())
    }

    async fn receive(&self, opts: ReceiveOptions) -> StoreResult<Vec<Received>> {
        let max = i32::try_from(opts.max.clamp(1, 10)).unwrap_or(10);
        let messages = self
            .receive_raw(
                &self.url,
                max,
                secs_ceil(opts.wait, MAX_WAIT_SECONDS),
                secs_ceil(opts.visibility, MAX_VISIBILITY_SECONDS),
            )
            .await?;
        let mut ledger = self.ledger();
        let mut out = Vec::with_capacity(messages.len());
        for m in &messages {
            let (Some(sqs_id), Some(receipt)) = (m.message_id(), m.receipt_handle()) else {
                continue;
            };
            ledger.received(sqs_id, receipt);
            out.push(Received {
                message_id: logical_id(m),
                receipt: receipt.to_owned(),
                body: m.body().unwrap_or_default().to_owned(),
                receive_count: sys_attr(m, &MessageSystemAttributeName::ApproximateReceiveCount)
                    .and_then(|v| v.parse().ok())
                    .unwrap_or(1),
                sent_at: sys_attr(m, &MessageSystemAttributeName::SentTimestamp)
                    .and_then(|v| v.parse().ok()),
            });
        }
        Ok(out)
    }

    async fn ack(&self, receipt: &str) -> StoreResult<AckOutcome> {
        if self.ledger().is_stale(receipt) {
            debug!(store = "sqs", queue = %self.name, outcome = "stale", "ack");
            return Ok(AckOutcome::Stale);
        }
        let r = retry::run(
            &self.retry,
            Idempotency::Idempotent,
            "ack",
            &self.name,
            |_| {
                let req = self
                    .client
                    .delete_message()
                    .queue_url(&self.url)
                    .receipt_handle(receipt);
                async move { req.send().await.map_err(|e| Failure::from_sdk(SERVICE, e)) }
            },
        )
        .await;
        match r {
            Ok(_) => {
                self.ledger().finished(receipt);
                Ok(AckOutcome::Deleted)
            }
            Err(f) if is_stale_receipt(&f) => Ok(AckOutcome::Stale),
            Err(f) => Err(f.into_store("ack", &self.name)),
        }
    }

    async fn ack_batch(&self, receipts: &[String]) -> StoreResult<Vec<AckOutcome>> {
        let mut out = vec![AckOutcome::Stale; receipts.len()];
        let live: Vec<usize> = {
            let ledger = self.ledger();
            (0..receipts.len())
                .filter(|&i| !ledger.is_stale(&receipts[i]))
                .collect()
        };
        for chunk in live.chunks(MAX_BATCH) {
            let entries = chunk.iter().map(|&i| (i, receipts[i].as_str()));
            let answer = self.delete_message_batch(&self.url, entries, "ack").await?;
            for ok in answer.successful() {
                if let Ok(i) = ok.id().parse::<usize>() {
                    self.ledger().finished(&receipts[i]);
                    out[i] = AckOutcome::Deleted;
                }
            }
            // An entry the batch refused is acknowledged on its own, which names a stale
            // receipt as such and retries anything else.
            for failed in answer.failed() {
                if let Ok(i) = failed.id().parse::<usize>() {
                    out[i] = self.ack(&receipts[i]).await?;
                }
            }
        }
        debug!(store = "sqs", queue = %self.name, messages = receipts.len(), "acknowledged");
        Ok(out)
    }

    async fn change_visibility(&self, receipt: &str, timeout: Duration) -> StoreResult<AckOutcome> {
        if self.ledger().is_stale(receipt) {
            return Ok(AckOutcome::Stale);
        }
        let secs = secs_ceil(timeout, MAX_VISIBILITY_SECONDS);
        let r = retry::run(
            &self.retry,
            Idempotency::Idempotent,
            "change visibility",
            &self.name,
            |_| {
                let req = self
                    .client
                    .change_message_visibility()
                    .queue_url(&self.url)
                    .receipt_handle(receipt)
                    .visibility_timeout(secs);
                async move { req.send().await.map_err(|e| Failure::from_sdk(SERVICE, e)) }
            },
        )
        .await;
        match r {
            Ok(_) => Ok(AckOutcome::Deleted),
            Err(f) if is_stale_receipt(&f) => Ok(AckOutcome::Stale),
            Err(f) => Err(f.into_store("change visibility", &self.name)),
        }
    }

    async fn dead_letter(&self, msg: &Received, reason: &str) -> StoreResult<()> {
        let mut cut = reason.len().min(MAX_REASON_BYTES);
        while !reason.is_char_boundary(cut) {
            cut -= 1;
        }
        let reason = &reason[..cut];
        let entry = SendMessageBatchRequestEntry::builder()
            .id("0")
            .message_body(&msg.body)
            .message_attributes(ATTR_REASON, string_attr(reason)?)
            .message_attributes(ATTR_MESSAGE_ID, string_attr(&msg.message_id)?)
            .message_attributes(ATTR_RECEIVE_COUNT, number_attr(msg.receive_count)?)
            .message_attributes(ATTR_DEAD_AT, number_attr(now_millis())?)
            .build()
            .map_err(|e| construction("dead-letter entry", e))?;
        // Send first, delete after: a crash in between leaves the message in both queues,
        // never in neither.
        self.send_entries(&self.dlq_url, vec![entry]).await?;
        match self.ack(&msg.receipt).await? {
            AckOutcome::Deleted => {}
            AckOutcome::Stale => {
                warn!(store = "sqs", queue = %self.name, message_id = %msg.message_id, "dead-lettered a message whose receipt was stale; another receiver may still process it")
            }
        }
        let code = reason.split(':').next().unwrap_or(reason);
        info!(store = "sqs", queue = %self.name, message_id = %msg.message_id, reason = code, "dead-lettered");
        Ok(())
    }

    async fn list_dead_letters(&self, max: usize) -> StoreResult<Vec<DeadLetter>> {
        let messages = self.scan_dead_letters().await?;
        let mut dead: Vec<DeadLetter> = messages.iter().map(|m| self.dead_letter_of(m)).collect();
        // Make them visible again before anything can fail.
        self.release(&self.dlq_url, &messages).await?;
        dead.sort_by_key(|d| d.dead_at);
        dead.truncate(max);
        Ok(dead)
    }

    async fn redrive(&self, message_ids: Option<&[String]>) -> StoreResult<u64> {
        let messages = self.scan_dead_letters().await?;
        let wanted: Option<HashSet<&str>> =
            message_ids.map(|ids| ids.iter().map(String::as_str).collect());
        let (moving, staying): (Vec<Message>, Vec<Message>) = messages.into_iter().partition(|m| {
            wanted
                .as_ref()
                .is_none_or(|w| w.contains(logical_id(m).as_str()))
        });
        self.release(&self.dlq_url, &staying).await?;
        if moving.is_empty() {
            return Ok(0);
        }
        let entries = moving
            .iter()
            .enumerate()
            .map(|(i, m)| {
                SendMessageBatchRequestEntry::builder()
                    .id(i.to_string())
                    .message_body(m.body().unwrap_or_default())
                    .message_attributes(ATTR_MESSAGE_ID, string_attr(&logical_id(m))?)
                    .build()
                    .map_err(|e| construction("redrive entry", e))
            })
            .collect::<StoreResult<Vec<_>>>()?;
        if let Err(e) = self.send_entries(&self.url, entries).await {
            // Nothing is deleted from the DLQ unless it was sent; release and report.
            let _ = self.release(&self.dlq_url, &moving).await;
            return Err(e);
        }
        self.delete_batch(&self.dlq_url, &moving).await?;
        let n = moving.len() as u64;
        info!(store = "sqs", queue = %self.name, redriven = n, "redrive");
        Ok(n)
    }

    async fn depth(&self) -> StoreResult<QueueDepth> {
        let (visible, in_flight) = self.depth_of(&self.url).await?;
        let (dead_visible, dead_hidden) = self.depth_of(&self.dlq_url).await?;
        Ok(QueueDepth {
            visible,
            in_flight,
            dead: dead_visible + dead_hidden,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(i: usize, len: usize) -> SendMessageBatchRequestEntry {
        SendMessageBatchRequestEntry::builder()
            .id(i.to_string())
            .message_body("x".repeat(len))
            .build()
            .unwrap()
    }

    #[test]
    fn batches_respect_count_and_size() {
        let b = batches((0..25).map(|i| entry(i, 10)).collect());
        assert_eq!(b.iter().map(Vec::len).collect::<Vec<_>>(), vec![10, 10, 5]);
        let b = batches((0..4).map(|i| entry(i, 100 * 1024)).collect());
        assert_eq!(b.iter().map(Vec::len).collect::<Vec<_>>(), vec![2, 2]);
        assert!(batches(Vec::new()).is_empty());
    }

    #[test]
    fn ledger_marks_superseded_and_finished_receipts() {
        let mut l = Ledger::default();
        l.received("m1", "r1");
        assert!(!l.is_stale("r1"));
        l.received("m1", "r2");
        assert!(l.is_stale("r1"));
        assert!(!l.is_stale("r2"));
        l.finished("r2");
        assert!(l.is_stale("r2"));
        for i in 0..LEDGER_CAP + 10 {
            l.received(&format!("m{i}"), &format!("x{i}"));
        }
        assert!(l.order.len() <= LEDGER_CAP);
    }

    #[test]
    fn seconds_round_up_and_cap() {
        assert_eq!(secs_ceil(Duration::from_millis(500), 20), 1);
        assert_eq!(secs_ceil(Duration::ZERO, 20), 0);
        assert_eq!(secs_ceil(Duration::from_secs(60), 20), 20);
    }
}

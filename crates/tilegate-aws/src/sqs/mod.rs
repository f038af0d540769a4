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

mod dead_letters;
mod provision;

use crate::error::{Answer, AwsError, Failure, own_error};
use crate::retry::{RetryPolicy, Sdk};
use crate::url::validate_queue_name;
use async_trait::async_trait;
use aws_sdk_sqs::types::{
    DeleteMessageBatchRequestEntry, Message, MessageAttributeValue, MessageSystemAttributeName,
    QueueAttributeName, SendMessageBatchRequestEntry,
};
use provision::queue_attributes;
use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;
use tilegate_core::queue::{
    AckOutcome, DeadLetter, QueueDepth, ReceiveOptions, Received, WorkQueue, refuse_oversized,
};
use tilegate_core::{Retry, StoreError, StoreResult};
use tracing::{debug, warn};

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
/// How long `list_dead_letters` and `redrive` hide the dead letters they look at, at least: a
/// scan of many pages hides them longer (`dead_letters::scan_visibility`).
const SCAN_VISIBILITY_SECONDS: i32 = 30;
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
    /// This handle's SDK calls: [`SERVICE`] requests under its retry policy.
    fn sdk(&self) -> Sdk<'_> {
        Sdk::new(&self.retry, SERVICE)
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
                let out = self
                    .sdk()
                    .send("send", &self.name, || {
                        self.client
                            .send_message_batch()
                            .queue_url(url)
                            .set_entries(Some(batch.clone()))
                            .send()
                    })
                    .await?;
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
        self.sdk()
            .send("receive", &self.name, || {
                self.client
                    .receive_message()
                    .queue_url(url)
                    .max_number_of_messages(max)
                    .wait_time_seconds(wait_seconds)
                    .visibility_timeout(visibility_seconds)
                    .message_system_attribute_names(
                        MessageSystemAttributeName::ApproximateReceiveCount,
                    )
                    .message_system_attribute_names(MessageSystemAttributeName::SentTimestamp)
                    .message_attribute_names("All")
                    .send()
            })
            .await
            .map(|out| out.messages.unwrap_or_default())
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
        self.sdk()
            .send(what, &self.name, || {
                self.client
                    .delete_message_batch()
                    .queue_url(url)
                    .set_entries(Some(entries.clone()))
                    .send()
            })
            .await
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
        let r = self
            .sdk()
            .send_raw("ack", &self.name, || {
                self.client
                    .delete_message()
                    .queue_url(&self.url)
                    .receipt_handle(receipt)
                    .send()
            })
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
        let r = self
            .sdk()
            .send_raw("change visibility", &self.name, || {
                self.client
                    .change_message_visibility()
                    .queue_url(&self.url)
                    .receipt_handle(receipt)
                    .visibility_timeout(secs)
                    .send()
            })
            .await;
        match r {
            Ok(_) => Ok(AckOutcome::Deleted),
            Err(f) if is_stale_receipt(&f) => Ok(AckOutcome::Stale),
            Err(f) => Err(f.into_store("change visibility", &self.name)),
        }
    }

    async fn dead_letter(&self, msg: &Received, reason: &str) -> StoreResult<()> {
        self.send_to_dead_letters(msg, reason).await
    }

    async fn list_dead_letters(&self, max: usize) -> StoreResult<Vec<DeadLetter>> {
        self.read_dead_letters(max).await
    }

    async fn redrive(&self, message_ids: Option<&[String]>) -> StoreResult<u64> {
        self.redrive_dead_letters(message_ids).await
    }

    async fn purge_dead_letters(&self, message_ids: &[String]) -> StoreResult<u64> {
        self.purge_dead_letters_named(message_ids).await
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

//! The work-queue contract: at-least-once delivery with visibility timeouts, receive counts,
//! a dead-letter queue after `max_receive_count` receives, and redrive.

use crate::UnixMillis;
use crate::error::StoreResult;
use async_trait::async_trait;
use std::time::Duration;

/// Default receives before a message is dead-lettered.
pub const DEFAULT_MAX_RECEIVE_COUNT: u32 = 3;
/// Largest message body accepted, in bytes (SQS's limit).
pub const MAX_MESSAGE_BYTES: usize = 256 * 1024;

/// A message larger than [`MAX_MESSAGE_BYTES`], refused before anything is sent.
#[derive(Debug, thiserror::Error)]
#[error("send a message of {size} bytes: the limit is {limit}")]
pub struct MessageTooLarge {
    pub size: usize,
    pub limit: usize,
}

/// Refuse a batch holding a message larger than the contract allows (every queue, before
/// sending any of it): a permanent [`crate::StoreError`] naming `queue`.
pub fn refuse_oversized(queue: &str, bodies: &[String]) -> StoreResult<()> {
    match bodies.iter().find(|b| b.len() > MAX_MESSAGE_BYTES) {
        Some(big) => Err(crate::StoreError::backend(
            "send",
            queue,
            crate::Retry::Permanent,
            MessageTooLarge {
                size: big.len(),
                limit: MAX_MESSAGE_BYTES,
            },
        )),
        None => Ok(()),
    }
}

/// A received message. The receipt is valid until the visibility timeout lapses and the
/// message is received again.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Received {
    pub message_id: String,
    pub receipt: String,
    pub body: String,
    /// How many times it has been received, this time included.
    pub receive_count: u32,
    /// When the message was (last) sent to the queue, if the queue says.
    pub sent_at: Option<UnixMillis>,
}

/// Receive parameters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReceiveOptions {
    /// At most this many messages (SQS caps it at 10).
    pub max: u32,
    /// Long-poll up to this long for the first message.
    pub wait: Duration,
    /// Hide received messages for this long.
    pub visibility: Duration,
}

impl Default for ReceiveOptions {
    fn default() -> Self {
        Self {
            max: 10,
            wait: Duration::from_secs(1),
            visibility: Duration::from_secs(60),
        }
    }
}

/// The result of acknowledging (deleting) a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AckOutcome {
    Deleted,
    /// The receipt is no longer current (the message was received again, or is gone).
    Stale,
}

/// A message in the dead-letter queue.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeadLetter {
    pub message_id: String,
    pub body: String,
    /// Why it was dead-lettered: a named reason code, `:`, and detail.
    pub reason: String,
    pub receive_count: u32,
    pub dead_at: UnixMillis,
}

/// Approximate queue depths.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct QueueDepth {
    pub visible: u64,
    pub in_flight: u64,
    pub dead: u64,
}

/// A work queue with its dead-letter queue.
#[async_trait]
pub trait WorkQueue: Send + Sync + std::fmt::Debug {
    fn name(&self) -> &'static str;
    /// Receives after which a message goes to the dead-letter queue instead of a worker.
    fn max_receive_count(&self) -> u32;
    /// Send messages (split into provider batches internally; a partially failed batch is
    /// re-sent, never dropped).
    async fn send_batch(&self, bodies: &[String]) -> StoreResult<()>;
    async fn receive(&self, opts: ReceiveOptions) -> StoreResult<Vec<Received>>;
    async fn ack(&self, receipt: &str) -> StoreResult<AckOutcome>;
    /// Acknowledge several received messages in as few requests as the provider allows (SQS:
    /// one `DeleteMessageBatch` per ten; SQLite: one transaction). One outcome per receipt, in
    /// order. The default acknowledges them one by one.
    async fn ack_batch(&self, receipts: &[String]) -> StoreResult<Vec<AckOutcome>> {
        let mut out = Vec::with_capacity(receipts.len());
        for r in receipts {
            out.push(self.ack(r).await?);
        }
        Ok(out)
    }
    /// Reset a received message's visibility timeout (extend while working; zero releases it).
    async fn change_visibility(&self, receipt: &str, timeout: Duration) -> StoreResult<AckOutcome>;
    /// Move a received message to the dead-letter queue at once, with its reason.
    async fn dead_letter(&self, msg: &Received, reason: &str) -> StoreResult<()>;
    /// Dead letters, oldest first, at most `max`.
    async fn list_dead_letters(&self, max: usize) -> StoreResult<Vec<DeadLetter>>;
    /// Return dead letters to the work queue with a fresh receive count: those named, or all.
    /// Returns how many moved.
    async fn redrive(&self, message_ids: Option<&[String]>) -> StoreResult<u64>;
    /// Delete the dead letters with these message IDs for good (an abandoned job's, which
    /// nobody will redrive). Returns how many were deleted; an ID not found is skipped.
    async fn purge_dead_letters(&self, message_ids: &[String]) -> StoreResult<u64>;
    async fn depth(&self) -> StoreResult<QueueDepth>;
    /// The bodies of the messages on the queue now (visible or in flight, not dead letters)
    /// that contain `needle` — or `None` when this queue cannot list what it holds (SQS,
    /// Pub/Sub and Azure queues show a few messages at a time, hiding them as they do).
    /// A planner asks before enqueueing a job's windows again, so that a window whose message
    /// is still waiting is not sent twice (and encoded twice).
    async fn holding(&self, needle: &str) -> StoreResult<Option<Vec<String>>> {
        let _ = needle;
        Ok(None)
    }
}

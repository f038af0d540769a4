//! Dead letters: moving a message to the dead-letter queue with its reason, listing the
//! dead-letter queue without consuming it, and redriving dead letters to the main queue.

use super::{
    ATTR_DEAD_AT, ATTR_MESSAGE_ID, ATTR_REASON, ATTR_RECEIVE_COUNT, MAX_BATCH, MAX_REASON_BYTES,
    SCAN_CAP, SCAN_VISIBILITY_SECONDS, SqsQueue, attr_str, construction, logical_id, number_attr,
    string_attr, sys_attr,
};
use aws_sdk_sqs::types::{
    ChangeMessageVisibilityBatchRequestEntry, Message, MessageSystemAttributeName,
    SendMessageBatchRequestEntry,
};
use std::collections::HashSet;
use tilegate_core::queue::{AckOutcome, DeadLetter, Received, WorkQueue};
use tilegate_core::{StoreResult, now_millis};
use tracing::{info, warn};

impl SqsQueue {
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
                    "{}: received {} times without being acknowledged",
                    tilegate_core::Reason::MaxReceivesExceeded,
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
            self.sdk()
                .send("release dead letters", &self.name, || {
                    self.client
                        .change_message_visibility_batch()
                        .queue_url(url)
                        .set_entries(Some(entries.clone()))
                        .send()
                })
                .await?;
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

    pub(super) async fn send_to_dead_letters(
        &self,
        msg: &Received,
        reason: &str,
    ) -> StoreResult<()> {
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

    pub(super) async fn read_dead_letters(&self, max: usize) -> StoreResult<Vec<DeadLetter>> {
        let messages = self.scan_dead_letters().await?;
        let mut dead: Vec<DeadLetter> = messages.iter().map(|m| self.dead_letter_of(m)).collect();
        // Make them visible again before anything can fail.
        self.release(&self.dlq_url, &messages).await?;
        dead.sort_by_key(|d| d.dead_at);
        dead.truncate(max);
        Ok(dead)
    }

    pub(super) async fn redrive_dead_letters(
        &self,
        message_ids: Option<&[String]>,
    ) -> StoreResult<u64> {
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
}

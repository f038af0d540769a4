//! Dead letters: moving a message to the dead-letter queue with its reason, listing the
//! dead-letter queue without consuming it, and redriving dead letters to the main queue.

use super::{
    ATTR_DEAD_AT, ATTR_MESSAGE_ID, ATTR_REASON, ATTR_RECEIVE_COUNT, MAX_BATCH, MAX_REASON_BYTES,
    SCAN_VISIBILITY_SECONDS, SqsQueue, attr_str, construction, logical_id, number_attr,
    string_attr, sys_attr,
};
use aws_sdk_sqs::types::{
    ChangeMessageVisibilityBatchRequestEntry, Message, MessageSystemAttributeName,
    SendMessageBatchRequestEntry,
};
use std::collections::{HashMap, HashSet};
use tilegate_core::queue::{AckOutcome, DeadLetter, Received, WorkQueue};
use tilegate_core::{StoreResult, now_millis};
use tracing::{info, warn};

/// How long a scan that expects `expected` dead letters hides them: 30 s plus 0.1 s per page of
/// ten (a page is one receive, tens of milliseconds), so that the first letters are still
/// hidden, their receipts current, when the last page arrives; at most 15 minutes.
fn scan_visibility(expected: usize) -> i32 {
    let pages = i32::try_from(expected / 10).unwrap_or(i32::MAX);
    (SCAN_VISIBILITY_SECONDS + pages / 10).clamp(SCAN_VISIBILITY_SECONDS, 900)
}

impl SqsQueue {
    /// Receive dead letters, page by page, until `cap` are gathered, every one in `wanted` is
    /// (when given), the queue's approximate count is reached or a page comes back empty;
    /// hidden while the scan lasts. No cap of its own: a caller asking for 100,000 gets as
    /// many as the queue holds up to that.
    async fn scan_dead_letters(
        &self,
        cap: usize,
        wanted: Option<&HashSet<&str>>,
    ) -> StoreResult<Vec<Message>> {
        let expected = self.depth_of(&self.dlq_url).await?;
        let expected = usize::try_from(expected.0 + expected.1).unwrap_or(usize::MAX);
        let visibility = scan_visibility(expected.min(cap));
        let mut got: Vec<Message> = Vec::new();
        let mut at: HashMap<String, usize> = HashMap::new();
        let mut found = 0usize;
        while got.len() < cap {
            // The count is approximate (and lags on SQS): it ends the scan early once reached,
            // but a count of zero still gets one look.
            if !got.is_empty() && got.len() >= expected {
                break;
            }
            if wanted.is_some_and(|w| found >= w.len()) {
                break;
            }
            // A 1 s long poll asks every SQS server (a short poll samples only some).
            let page = self.receive_raw(&self.dlq_url, 10, 1, visibility).await?;
            if page.is_empty() {
                break;
            }
            for m in page {
                let id = logical_id(&m);
                match at.get(&id) {
                    // Seen before (its hiding lapsed): keep the newest receipt, the only one
                    // SQS honours for a delete or a visibility change.
                    Some(&i) => got[i] = m,
                    None => {
                        if wanted.is_some_and(|w| w.contains(id.as_str())) {
                            found += 1;
                        }
                        at.insert(id, got.len());
                        got.push(m);
                    }
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
        let messages = self.scan_dead_letters(max, None).await?;
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
        let wanted: Option<HashSet<&str>> =
            message_ids.map(|ids| ids.iter().map(String::as_str).collect());
        // All of them, or until every one named is found: never a silent first page.
        let messages = self.scan_dead_letters(usize::MAX, wanted.as_ref()).await?;
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

    /// Delete the named dead letters from the DLQ (scanned until every one is found); the
    /// others scanned are made visible again.
    pub(super) async fn purge_dead_letters_named(
        &self,
        message_ids: &[String],
    ) -> StoreResult<u64> {
        let wanted: HashSet<&str> = message_ids.iter().map(String::as_str).collect();
        if wanted.is_empty() {
            return Ok(0);
        }
        let messages = self.scan_dead_letters(usize::MAX, Some(&wanted)).await?;
        let (going, staying): (Vec<Message>, Vec<Message>) = messages
            .into_iter()
            .partition(|m| wanted.contains(logical_id(m).as_str()));
        self.release(&self.dlq_url, &staying).await?;
        self.delete_batch(&self.dlq_url, &going).await?;
        let n = going.len() as u64;
        info!(store = "sqs", queue = %self.name, purged = n, "purged dead letters");
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::scan_visibility;

    /// A page of the scan costs 0.1 s of hiding: a first page's letters stay hidden while a
    /// 100,000-letter scan reads its last page, within 15 minutes.
    #[test]
    fn a_long_scan_hides_its_letters_longer() {
        assert_eq!(scan_visibility(0), 30);
        assert_eq!(scan_visibility(1000), 40);
        assert_eq!(scan_visibility(50_000), 530);
        assert_eq!(scan_visibility(100_000), 900);
        assert_eq!(scan_visibility(usize::MAX), 900);
    }
}

//! Acknowledgements sent together: a pool's finished windows are acknowledged ten at a time
//! (one `DeleteMessageBatch` on SQS, one transaction on SQLite) instead of one request each.
//!
//! An acknowledgement only waits while more windows are finishing: a full batch is sent by the
//! handler that fills it, and the receive loop sends what is left once the oldest has waited
//! [`ACK_LINGER`], before it looks whether the job is done, before a long poll and when it
//! stops. A worker killed with acknowledgements pending loses nothing but those
//! acknowledgements: their windows are recorded, and the redelivered messages find their tiles
//! present (the redelivery's HEAD skips the encode).

use crate::pool::Shared;
use std::sync::Mutex;
use std::time::Duration;
use tilegate_core::JobId;
use tilegate_core::error::chain;
use tokio::time::Instant;

/// A batch is full at this many acknowledgements (SQS's batch limit).
pub(crate) const ACK_BATCH: usize = 10;
/// The longest an acknowledgement waits for nine others, counted from the first one waiting.
pub(crate) const ACK_LINGER: Duration = Duration::from_millis(500);

/// Acknowledgements not yet sent, with the job each message's requests are charged to.
#[derive(Default)]
pub(crate) struct PendingAcks(Mutex<Pending>);

#[derive(Default)]
struct Pending {
    acks: Vec<(Option<JobId>, String)>,
    since: Option<Instant>,
}

impl PendingAcks {
    /// Add one; a batch that is now full is returned for the caller to send.
    pub(crate) fn push(
        &self,
        job: Option<JobId>,
        receipt: String,
    ) -> Option<Vec<(Option<JobId>, String)>> {
        let mut p = self.0.lock().expect("pending acks lock");
        p.since.get_or_insert_with(Instant::now);
        p.acks.push((job, receipt));
        (p.acks.len() >= ACK_BATCH).then(|| {
            p.since = None;
            std::mem::take(&mut p.acks)
        })
    }

    /// Everything pending — or, with `linger`, only if the oldest has waited that long.
    pub(crate) fn take(&self, linger: Option<Duration>) -> Vec<(Option<JobId>, String)> {
        let mut p = self.0.lock().expect("pending acks lock");
        let due = match (linger, p.since) {
            (_, None) => false,
            (None, Some(_)) => true,
            (Some(l), Some(since)) => since.elapsed() >= l,
        };
        if !due {
            return Vec::new();
        }
        p.since = None;
        std::mem::take(&mut p.acks)
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.0.lock().expect("pending acks lock").acks.is_empty()
    }

    /// Hand a batch back (its send did not finish): it is sent with the next ones.
    fn put_back(&self, batch: Vec<(Option<JobId>, String)>) {
        let mut p = self.0.lock().expect("pending acks lock");
        p.since.get_or_insert_with(Instant::now);
        p.acks.extend(batch);
    }

    /// A batch on its way: dropped before [`Sending::sent`] (its handler aborted by a shutdown
    /// whose grace ran out), it goes back to the pending acknowledgements, which the pool sends
    /// when it stops.
    pub(crate) fn sending(&self, batch: &[(Option<JobId>, String)]) -> Sending<'_> {
        Sending {
            pending: self,
            batch: Some(batch.to_vec()),
        }
    }
}

/// See [`PendingAcks::sending`].
pub(crate) struct Sending<'a> {
    pending: &'a PendingAcks,
    batch: Option<Vec<(Option<JobId>, String)>>,
}

impl Sending<'_> {
    pub(crate) fn sent(mut self) {
        self.batch = None;
    }
}

impl Drop for Sending<'_> {
    fn drop(&mut self) {
        if let Some(batch) = self.batch.take() {
            self.pending.put_back(batch);
        }
    }
}

/// Send a full batch from a handler. A handler aborted part-way (the shutdown grace ran out)
/// hands the batch back to the pending acknowledgements instead of dropping it with itself; a
/// receipt sent twice is harmless, one never sent would cost its window a receive, and a
/// window recorded long ago could then be dead-lettered as `max-receives-exceeded`.
pub(crate) async fn send_full(shared: &Shared, full: Vec<(Option<JobId>, String)>) {
    let guard = shared.acks.sending(&full);
    send(shared, full).await;
    guard.sent();
}

/// Send `acks`, ten to a request, each request charged to the job of the messages in it. A
/// failed acknowledgement is logged and left: its window is done and recorded, so the message
/// coming back is a harmless duplicate.
pub(crate) async fn send(shared: &Shared, mut acks: Vec<(Option<JobId>, String)>) {
    acks.sort_by(|a, b| a.0.cmp(&b.0));
    for group in acks.chunk_by(|a, b| a.0 == b.0) {
        let job = group[0].0.clone();
        let receipts: Vec<String> = group.iter().map(|(_, r)| r.clone()).collect();
        for batch in receipts.chunks(ACK_BATCH) {
            let sent =
                tilegate_retry::meter::scope(job.clone(), shared.b.queue.ack_batch(batch)).await;
            if let Err(e) = sent {
                tracing::warn!(messages = batch.len(), error = %chain(&e),
                    "acknowledgement failed; the windows are recorded, a redelivery is harmless");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tenth_acknowledgement_hands_back_a_full_batch() {
        let p = PendingAcks::default();
        for i in 0..9 {
            assert!(p.push(None, format!("r{i}")).is_none());
        }
        let full = p.push(None, "r9".into()).expect("a full batch");
        assert_eq!(full.len(), ACK_BATCH);
        assert!(p.is_empty());
        assert!(p.take(None).is_empty());
    }

    #[test]
    fn a_batch_whose_send_was_abandoned_goes_back() {
        let p = PendingAcks::default();
        let full: Vec<_> = (0..ACK_BATCH).map(|i| (None, format!("r{i}"))).collect();
        drop(p.sending(&full));
        assert_eq!(p.take(None).len(), ACK_BATCH, "abandoned: handed back");
        p.sending(&full).sent();
        assert!(p.is_empty(), "sent: not handed back");
    }

    #[tokio::test(start_paused = true)]
    async fn a_partial_batch_is_due_after_the_linger() {
        let p = PendingAcks::default();
        p.push(None, "r0".into());
        assert!(p.take(Some(ACK_LINGER)).is_empty(), "not due yet");
        tokio::time::advance(ACK_LINGER).await;
        p.push(None, "r1".into());
        // The linger counts from the first acknowledgement waiting.
        assert_eq!(p.take(Some(ACK_LINGER)).len(), 2);
        p.push(None, "r2".into());
        assert_eq!(p.take(None).len(), 1, "everything, when asked for");
    }
}

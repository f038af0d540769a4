//! A work queue in a map with SQS's semantics: visibility timeouts, receipts that go stale on
//! redelivery, receive counts, a redrive policy to the dead letters at `max_receive_count`,
//! batches of at most 10, long polls woken by sends.

use crate::clock::Clock;
use async_trait::async_trait;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;
use tilegate_core::queue::{
    AckOutcome, DeadLetter, QueueDepth, ReceiveOptions, Received, WorkQueue, refuse_oversized,
};
use tilegate_core::{StoreResult, UnixMillis};
use tokio::sync::Notify;

/// The most messages one receive returns (SQS's limit).
pub const MAX_BATCH: u32 = 10;

/// An in-memory queue with its dead letters. Clones share the messages.
#[derive(Debug, Clone)]
pub struct MemoryQueue {
    name: String,
    max_receive_count: u32,
    clock: Arc<dyn Clock>,
    state: Arc<Mutex<State>>,
    /// Woken by anything that makes a message visible (sends, releases, redrives).
    ready: Arc<Notify>,
}

#[derive(Debug, Default)]
struct State {
    /// Send order → message.
    messages: BTreeMap<u64, Message>,
    /// (visible_at, send order) of every message: receives take from its front.
    by_visible: BTreeSet<(UnixMillis, u64)>,
    /// Current receipt → send order.
    receipts: HashMap<String, u64>,
    dead: Vec<DeadLetter>,
    seq: u64,
}

#[derive(Debug)]
struct Message {
    id: String,
    body: String,
    sent_at: UnixMillis,
    visible_at: UnixMillis,
    receive_count: u32,
    receipt: Option<String>,
}

fn millis(d: Duration) -> UnixMillis {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

impl State {
    fn insert(&mut self, seq: u64, m: Message) {
        self.by_visible.insert((m.visible_at, seq));
        self.messages.insert(seq, m);
    }

    fn remove(&mut self, seq: u64) -> Option<Message> {
        let m = self.messages.remove(&seq)?;
        self.by_visible.remove(&(m.visible_at, seq));
        Some(m)
    }

    fn set_visible_at(&mut self, seq: u64, at: UnixMillis) {
        let m = self.messages.get_mut(&seq).expect("a listed message");
        self.by_visible.remove(&(m.visible_at, seq));
        m.visible_at = at;
        self.by_visible.insert((at, seq));
    }

    fn bury(&mut self, seq: u64, reason: String, now: UnixMillis) -> bool {
        let Some(m) = self.remove(seq) else {
            return false;
        };
        if let Some(r) = &m.receipt {
            self.receipts.remove(r);
        }
        self.dead.push(DeadLetter {
            message_id: m.id,
            body: m.body,
            reason,
            receive_count: m.receive_count,
            dead_at: now,
        });
        true
    }
}

impl MemoryQueue {
    /// An empty queue named `name` (for messages and logs) on `clock`.
    pub fn new(name: &str, max_receive_count: u32, clock: Arc<dyn Clock>) -> Self {
        Self {
            name: name.to_owned(),
            max_receive_count: max_receive_count.max(1),
            clock,
            state: Arc::default(),
            ready: Arc::new(Notify::new()),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Take what is visible now; the time of the next message to become visible otherwise.
    fn take(&self, opts: ReceiveOptions) -> (Vec<Received>, Option<UnixMillis>) {
        let now = self.clock.now_millis();
        let want = opts.max.clamp(1, MAX_BATCH) as usize;
        let mut st = self.lock();
        let mut out = Vec::new();
        while out.len() < want {
            let Some(&(at, seq)) = st.by_visible.first() else {
                break;
            };
            if at > now {
                break;
            }
            let count = st.messages[&seq].receive_count;
            if count >= self.max_receive_count {
                // The redrive policy: received max_receive_count times already, so to the
                // dead letters instead of to a worker.
                st.bury(
                    seq,
                    format!(
                        "{}: received {count} times without being acknowledged",
                        tilegate_core::Reason::MaxReceivesExceeded
                    ),
                    now,
                );
                continue;
            }
            st.seq += 1;
            let receipt = format!("r{:016x}", st.seq);
            let m = st.messages.get_mut(&seq).expect("listed above");
            if let Some(old) = m.receipt.replace(receipt.clone()) {
                st.receipts.remove(&old);
            }
            st.set_visible_at(seq, now.saturating_add(millis(opts.visibility)));
            let m = st.messages.get_mut(&seq).expect("listed above");
            m.receive_count += 1;
            out.push(Received {
                message_id: m.id.clone(),
                receipt: receipt.clone(),
                body: m.body.clone(),
                receive_count: m.receive_count,
                sent_at: Some(m.sent_at),
            });
            st.receipts.insert(receipt, seq);
        }
        let next = st.by_visible.first().map(|(at, _)| *at);
        (out, next)
    }
}

#[async_trait]
impl WorkQueue for MemoryQueue {
    fn name(&self) -> &'static str {
        "memory"
    }

    fn max_receive_count(&self) -> u32 {
        self.max_receive_count
    }

    async fn send_batch(&self, bodies: &[String]) -> StoreResult<()> {
        refuse_oversized(&self.name, bodies)?;
        let now = self.clock.now_millis();
        {
            let mut st = self.lock();
            for body in bodies {
                st.seq += 1;
                let seq = st.seq;
                st.insert(
                    seq,
                    Message {
                        id: format!("m{seq:016x}"),
                        body: body.clone(),
                        sent_at: now,
                        visible_at: now,
                        receive_count: 0,
                        receipt: None,
                    },
                );
            }
        }
        self.ready.notify_waiters();
        Ok(())
    }

    async fn receive(&self, opts: ReceiveOptions) -> StoreResult<Vec<Received>> {
        let deadline = self.clock.now_millis().saturating_add(millis(opts.wait));
        loop {
            // Register before looking, so a send between the look and the wait still wakes us.
            let woken = self.ready.notified();
            tokio::pin!(woken);
            woken.as_mut().enable();
            let (got, next) = self.take(opts);
            let now = self.clock.now_millis();
            if !got.is_empty() || now >= deadline {
                return Ok(got);
            }
            let until = next.map_or(deadline, |n| n.clamp(now + 1, deadline));
            let nap = Duration::from_millis(u64::try_from(until - now).unwrap_or(1));
            tokio::select! {
                biased;
                () = &mut woken => {}
                () = tokio::time::sleep(nap) => {}
            }
        }
    }

    async fn ack(&self, receipt: &str) -> StoreResult<AckOutcome> {
        let mut st = self.lock();
        let Some(seq) = st.receipts.remove(receipt) else {
            return Ok(AckOutcome::Stale);
        };
        st.remove(seq);
        Ok(AckOutcome::Deleted)
    }

    async fn change_visibility(&self, receipt: &str, timeout: Duration) -> StoreResult<AckOutcome> {
        let now = self.clock.now_millis();
        {
            let mut st = self.lock();
            let Some(seq) = st.receipts.get(receipt).copied() else {
                return Ok(AckOutcome::Stale);
            };
            st.set_visible_at(seq, now.saturating_add(millis(timeout)));
        }
        if timeout.is_zero() {
            self.ready.notify_waiters();
        }
        Ok(AckOutcome::Deleted)
    }

    async fn dead_letter(&self, msg: &Received, reason: &str) -> StoreResult<()> {
        let now = self.clock.now_millis();
        let mut st = self.lock();
        // A stale receipt: the message was acked, or another worker owns it now; leave it.
        if let Some(seq) = st.receipts.get(&msg.receipt).copied() {
            st.bury(seq, reason.to_owned(), now);
        }
        Ok(())
    }

    async fn purge_dead_letters(&self, message_ids: &[String]) -> StoreResult<u64> {
        let mut st = self.lock();
        let before = st.dead.len();
        st.dead.retain(|d| !message_ids.contains(&d.message_id));
        Ok((before - st.dead.len()) as u64)
    }

    async fn holding(&self, needle: &str) -> StoreResult<Option<Vec<String>>> {
        let st = self.lock();
        Ok(Some(
            st.messages
                .values()
                .filter(|m| m.body.contains(needle))
                .map(|m| m.body.clone())
                .collect(),
        ))
    }

    async fn list_dead_letters(&self, max: usize) -> StoreResult<Vec<DeadLetter>> {
        Ok(self.lock().dead.iter().take(max).cloned().collect())
    }

    async fn redrive(&self, message_ids: Option<&[String]>) -> StoreResult<u64> {
        let now = self.clock.now_millis();
        let moved = {
            let mut st = self.lock();
            let (back, keep): (Vec<DeadLetter>, Vec<DeadLetter>) = std::mem::take(&mut st.dead)
                .into_iter()
                .partition(|d| message_ids.is_none_or(|ids| ids.contains(&d.message_id)));
            st.dead = keep;
            for d in &back {
                st.seq += 1;
                let seq = st.seq;
                st.insert(
                    seq,
                    Message {
                        id: d.message_id.clone(),
                        body: d.body.clone(),
                        sent_at: now,
                        visible_at: now,
                        receive_count: 0,
                        receipt: None,
                    },
                );
            }
            back.len() as u64
        };
        self.ready.notify_waiters();
        Ok(moved)
    }

    async fn depth(&self) -> StoreResult<QueueDepth> {
        let now = self.clock.now_millis();
        let st = self.lock();
        // Counts the messages in flight (a few per worker), not the visible backlog: workers ask
        // for the depth whenever they fall idle, and a simulation's receives check it.
        let in_flight = st.by_visible.range((now.saturating_add(1), 0)..).count() as u64;
        Ok(QueueDepth {
            visible: st.messages.len() as u64 - in_flight,
            in_flight,
            dead: st.dead.len() as u64,
        })
    }
}

//! [`SqliteQueue`]: an SQS-shaped work queue in the SQLite file — visibility timeouts, receipt
//! handles, receive counts, a dead-letter table filled by a redrive policy, and redrive back.
//!
//! A receive is one IMMEDIATE transaction: it picks visible messages oldest first, gives each a
//! fresh random receipt and hides it until `now + visibility`. Because the pick and the hide
//! happen under SQLite's write lock, two receivers (in any processes) never get the same
//! message within one visibility window. A receipt stays valid until the message is received
//! again, so an ack with an old receipt is refused (`Stale`) exactly when someone else may be
//! working on the message.

use super::{Cached as _, SqliteBackend, TxResult, to_u64};

use async_trait::async_trait;
use rusqlite::{Connection, OptionalExtension as _, params};
use std::time::{Duration, Instant};
use tilegate_core::queue::{
    AckOutcome, DeadLetter, QueueDepth, ReceiveOptions, Received, WorkQueue, refuse_oversized,
};
use tilegate_core::{StoreResult, UnixMillis, now_millis};
use tracing::{debug, info, warn};

/// SQS returns at most 10 messages per receive; so does this queue, so that workers behave the
/// same on both.
const MAX_BATCH: u32 = 10;
/// Long-poll intervals: start quick, back off to this.
const POLL_MIN: Duration = Duration::from_millis(20);
const POLL_MAX: Duration = Duration::from_millis(100);

/// A named queue in a [`SqliteBackend`]'s file. Cheap to clone.
#[derive(Debug, Clone)]
pub struct SqliteQueue {
    db: SqliteBackend,
    queue: String,
    max_receive_count: u32,
}

fn millis(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

/// Move the message `seq` to the dead letters with `reason`, in the caller's transaction.
fn move_to_dead(tx: &Connection, seq: i64, reason: &str, now: UnixMillis) -> TxResult<usize> {
    let n = tx.exec(
        "INSERT INTO queue_dead_letters (queue, message_id, body, sent_at, reason, receive_count, dead_at)
         SELECT queue, message_id, body, sent_at, ?2, receive_count, ?3
         FROM queue_messages WHERE seq = ?1",
        params![seq, reason, now],
    )?;
    tx.exec("DELETE FROM queue_messages WHERE seq = ?1", [seq])?;
    Ok(n)
}

impl SqliteQueue {
    pub(super) fn new(db: SqliteBackend, queue: &str, max_receive_count: u32) -> Self {
        Self {
            db,
            queue: queue.to_owned(),
            max_receive_count: max_receive_count.max(1),
        }
    }

    /// The queue's name within the database.
    pub fn queue_name(&self) -> &str {
        &self.queue
    }

    /// True if a message is visible now. A plain read (WAL readers never wait for the writer),
    /// so idle long-pollers in many processes do not queue up for the write lock.
    async fn any_visible(&self) -> StoreResult<bool> {
        let queue = self.queue.clone();
        self.db
            .with_conn("receive", &self.queue, move |c| {
                Ok(c.row(
                    "SELECT EXISTS (SELECT 1 FROM queue_messages WHERE queue = ?1 AND visible_at <= ?2)",
                    params![queue, now_millis()],
                    |r| r.get(0),
                )?)
            })
            .await
    }

    /// One receive attempt, without waiting.
    async fn receive_now(&self, opts: ReceiveOptions) -> StoreResult<Vec<Received>> {
        if !self.any_visible().await? {
            return Ok(Vec::new());
        }
        let queue = self.queue.clone();
        let max_rc = i64::from(self.max_receive_count);
        let want = opts.max.clamp(1, MAX_BATCH) as usize;
        let visibility = millis(opts.visibility);
        self.db
            .write("receive", &self.queue, move |tx| {
                let now = now_millis();
                let visible_at = now.saturating_add(visibility);
                let mut out = Vec::with_capacity(want);
                let mut after = i64::MIN;
                while out.len() < want {
                    let batch: Vec<(i64, String, String, i64, i64)> = {
                        let mut stmt = tx.prepare_cached(
                            "SELECT seq, message_id, body, receive_count, sent_at FROM queue_messages
                             WHERE queue = ?1 AND visible_at <= ?2 AND seq > ?3
                             ORDER BY seq LIMIT ?4",
                        )?;
                        let rows = stmt.query_map(
                            params![queue, now, after, (want - out.len()) as i64],
                            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?)),
                        )?;
                        rows.collect::<Result<_, _>>()?
                    };
                    if batch.is_empty() {
                        break;
                    }
                    for (seq, message_id, body, count, sent_at) in batch {
                        after = seq;
                        if count >= max_rc {
                            // SQS's redrive policy: a message already received
                            // maxReceiveCount times goes to the dead-letter queue instead of
                            // to a worker.
                            let reason = format!(
                                "{}: received {count} times without being acknowledged",
                                tilegate_core::Reason::MaxReceivesExceeded
                            );
                            move_to_dead(tx, seq, &reason, now)?;
                            info!(store = "sqlite", queue = %queue, message_id = %message_id, receive_count = count, reason = %tilegate_core::Reason::MaxReceivesExceeded, "dead-lettered");
                            continue;
                        }
                        let receipt = uuid::Uuid::new_v4().simple().to_string();
                        tx.exec(
                            "UPDATE queue_messages
                             SET receive_count = receive_count + 1, receipt = ?2, visible_at = ?3
                             WHERE seq = ?1",
                            params![seq, receipt, visible_at],
                        )?;
                        out.push(Received {
                            message_id,
                            receipt,
                            body,
                            receive_count: u32::try_from(count + 1).unwrap_or(u32::MAX),
                            sent_at: Some(sent_at),
                        });
                    }
                }
                Ok(out)
            })
            .await
    }
}

#[async_trait]
impl WorkQueue for SqliteQueue {
    fn name(&self) -> &'static str {
        "sqlite"
    }

    fn max_receive_count(&self) -> u32 {
        self.max_receive_count
    }

    async fn send_batch(&self, bodies: &[String]) -> StoreResult<()> {
        refuse_oversized(&self.queue, bodies)?;
        if bodies.is_empty() {
            return Ok(());
        }
        let queue = self.queue.clone();
        let bodies = bodies.to_vec();
        let n = bodies.len();
        self.db
            .write("send", &self.queue, move |tx| {
                let now = now_millis();
                let mut stmt = tx.prepare_cached(
                    "INSERT INTO queue_messages (queue, message_id, body, sent_at, visible_at)
                     VALUES (?1, ?2, ?3, ?4, ?4)",
                )?;
                for body in &bodies {
                    let id = uuid::Uuid::new_v4().to_string();
                    stmt.execute(params![queue, id, body, now])?;
                }
                Ok(())
            })
            .await?;
        debug!(store = "sqlite", queue = %self.queue, messages = n, "sent");
        self.db.sent().notify_waiters();
        Ok(())
    }

    async fn receive(&self, opts: ReceiveOptions) -> StoreResult<Vec<Received>> {
        let deadline = Instant::now() + opts.wait;
        let mut nap = POLL_MIN;
        loop {
            // Register for this process's send notifications before looking, so a send that
            // lands between the look and the nap still wakes us.
            let notified = self.db.sent().notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let got = self.receive_now(opts).await?;
            let now = Instant::now();
            if !got.is_empty() || now >= deadline {
                return Ok(got);
            }
            // Other processes' sends are found by polling.
            tokio::select! {
                () = tokio::time::sleep(nap.min(deadline - now)) => {}
                () = &mut notified => {}
            }
            nap = (nap * 2).min(POLL_MAX);
        }
    }

    async fn ack(&self, receipt: &str) -> StoreResult<AckOutcome> {
        let (queue, receipt) = (self.queue.clone(), receipt.to_owned());
        self.db
            .with_conn("ack", &self.queue, move |c| {
                let n = c.exec(
                    "DELETE FROM queue_messages WHERE queue = ?1 AND receipt = ?2",
                    params![queue, receipt],
                )?;
                Ok(if n == 1 {
                    AckOutcome::Deleted
                } else {
                    AckOutcome::Stale
                })
            })
            .await
    }

    async fn ack_batch(&self, receipts: &[String]) -> StoreResult<Vec<AckOutcome>> {
        if receipts.is_empty() {
            return Ok(Vec::new());
        }
        let (queue, receipts) = (self.queue.clone(), receipts.to_vec());
        self.db
            .write("ack", &self.queue, move |tx| {
                let mut stmt = tx.prepare_cached(
                    "DELETE FROM queue_messages WHERE queue = ?1 AND receipt = ?2",
                )?;
                let mut out = Vec::with_capacity(receipts.len());
                for r in &receipts {
                    out.push(if stmt.execute(params![queue, r])? == 1 {
                        AckOutcome::Deleted
                    } else {
                        AckOutcome::Stale
                    });
                }
                Ok(out)
            })
            .await
    }

    async fn change_visibility(&self, receipt: &str, timeout: Duration) -> StoreResult<AckOutcome> {
        let (queue, receipt) = (self.queue.clone(), receipt.to_owned());
        let timeout = millis(timeout);
        self.db
            .with_conn("change visibility", &self.queue, move |c| {
                let n = c.exec(
                    "UPDATE queue_messages SET visible_at = ?3 WHERE queue = ?1 AND receipt = ?2",
                    params![queue, receipt, now_millis().saturating_add(timeout)],
                )?;
                Ok(if n == 1 {
                    AckOutcome::Deleted
                } else {
                    AckOutcome::Stale
                })
            })
            .await
    }

    async fn dead_letter(&self, msg: &Received, reason: &str) -> StoreResult<()> {
        let (queue, receipt, why) = (self.queue.clone(), msg.receipt.clone(), reason.to_owned());
        let moved = self
            .db
            .write("dead-letter", &self.queue, move |tx| {
                let seq: Option<i64> = tx
                    .query_row(
                        "SELECT seq FROM queue_messages WHERE queue = ?1 AND receipt = ?2",
                        params![queue, receipt],
                        |r| r.get(0),
                    )
                    .optional()?;
                match seq {
                    Some(seq) => Ok(move_to_dead(tx, seq, &why, now_millis())? == 1),
                    None => Ok(false),
                }
            })
            .await?;
        if moved {
            let code = reason.split(':').next().unwrap_or(reason);
            info!(store = "sqlite", queue = %self.queue, message_id = %msg.message_id, reason = code, "dead-lettered");
        } else {
            // The receipt is stale: the message was acked, or received again by a worker that
            // now owns it. Taking it from that worker would be wrong, so leave it.
            warn!(store = "sqlite", queue = %self.queue, message_id = %msg.message_id, "dead-letter skipped: the receipt is no longer current");
        }
        Ok(())
    }

    async fn list_dead_letters(&self, max: usize) -> StoreResult<Vec<DeadLetter>> {
        let queue = self.queue.clone();
        self.db
            .with_conn("list dead letters", &self.queue, move |c| {
                let mut stmt = c.prepare_cached(
                    "SELECT message_id, body, reason, receive_count, dead_at
                     FROM queue_dead_letters WHERE queue = ?1 ORDER BY seq LIMIT ?2",
                )?;
                let rows = stmt.query_map(
                    params![queue, i64::try_from(max).unwrap_or(i64::MAX)],
                    |r| {
                        Ok((
                            r.get::<_, String>(0)?,
                            r.get::<_, String>(1)?,
                            r.get::<_, String>(2)?,
                            r.get::<_, i64>(3)?,
                            r.get::<_, i64>(4)?,
                        ))
                    },
                )?;
                let mut out = Vec::new();
                for row in rows {
                    let (message_id, body, reason, count, dead_at) = row?;
                    out.push(DeadLetter {
                        message_id,
                        body,
                        reason,
                        receive_count: u32::try_from(count).unwrap_or(u32::MAX),
                        dead_at,
                    });
                }
                Ok(out)
            })
            .await
    }

    async fn redrive(&self, message_ids: Option<&[String]>) -> StoreResult<u64> {
        let queue = self.queue.clone();
        let ids = message_ids.map(<[String]>::to_vec);
        let moved = self
            .db
            .write("redrive", &self.queue, move |tx| {
                let now = now_millis();
                const INSERT: &str = "INSERT INTO queue_messages
                        (queue, message_id, body, sent_at, visible_at, receive_count)
                    SELECT queue, message_id, body, sent_at, ?2, 0 FROM queue_dead_letters
                    WHERE queue = ?1";
                let mut moved = 0usize;
                match &ids {
                    None => {
                        moved += tx.exec(&format!("{INSERT} ORDER BY seq"), params![queue, now])?;
                        tx.exec("DELETE FROM queue_dead_letters WHERE queue = ?1", [&queue])?;
                    }
                    Some(ids) => {
                        for id in ids {
                            moved += tx.exec(
                                &format!("{INSERT} AND message_id = ?3"),
                                params![queue, now, id],
                            )?;
                            tx.exec(
                                "DELETE FROM queue_dead_letters WHERE queue = ?1 AND message_id = ?2",
                                params![queue, id],
                            )?;
                        }
                    }
                }
                Ok(u64::try_from(moved).unwrap_or(u64::MAX))
            })
            .await?;
        info!(store = "sqlite", queue = %self.queue, moved, "redrove dead letters");
        Ok(moved)
    }

    async fn purge_dead_letters(&self, message_ids: &[String]) -> StoreResult<u64> {
        let queue = self.queue.clone();
        let ids = message_ids.to_vec();
        let purged = self
            .db
            .write("purge dead letters", &self.queue, move |tx| {
                let mut purged = 0usize;
                for id in &ids {
                    purged += tx.exec(
                        "DELETE FROM queue_dead_letters WHERE queue = ?1 AND message_id = ?2",
                        params![queue, id],
                    )?;
                }
                Ok(u64::try_from(purged).unwrap_or(u64::MAX))
            })
            .await?;
        info!(store = "sqlite", queue = %self.queue, purged, "purged dead letters");
        Ok(purged)
    }

    async fn holding(&self, needle: &str) -> StoreResult<Option<Vec<String>>> {
        let queue = self.queue.clone();
        let needle = needle.to_owned();
        self.db
            .with_conn("holding", &self.queue, move |c| {
                let mut stmt = c.prepare_cached(
                    "SELECT body FROM queue_messages WHERE queue = ?1 AND instr(body, ?2) > 0",
                )?;
                let rows = stmt.query_map(params![queue, needle], |r| r.get(0))?;
                Ok(Some(rows.collect::<Result<_, _>>()?))
            })
            .await
    }

    async fn depth(&self) -> StoreResult<QueueDepth> {
        let queue = self.queue.clone();
        self.db
            .with_conn("depth", &self.queue, move |c| {
                let now = now_millis();
                let (visible, in_flight): (i64, i64) = c.row(
                    "SELECT COALESCE(SUM(visible_at <= ?2), 0), COALESCE(SUM(visible_at > ?2), 0)
                     FROM queue_messages WHERE queue = ?1",
                    params![queue, now],
                    |r| Ok((r.get(0)?, r.get(1)?)),
                )?;
                let dead: i64 = c.row(
                    "SELECT COUNT(*) FROM queue_dead_letters WHERE queue = ?1",
                    [&queue],
                    |r| r.get(0),
                )?;
                Ok(QueueDepth {
                    visible: to_u64("depth", &queue, visible)?,
                    in_flight: to_u64("depth", &queue, in_flight)?,
                    dead: to_u64("depth", &queue, dead)?,
                })
            })
            .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn max_receive_count_is_at_least_one() {
        let dir = std::env::temp_dir().join(format!("tilegate-q-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&dir).unwrap();
        let db = SqliteBackend::open(dir.join("db.sqlite")).unwrap();
        assert_eq!(db.queue("q", 0).max_receive_count(), 1);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn to_i64_refuses_huge() {
        assert!(super::super::to_i64("x", "k", u64::MAX).is_err());
    }
}

//! Announcing outcomes: a job's outbox ([`tilegate_core::announce`]) delivered to the
//! configured sinks — an SNS topic, an EventBridge bus, a signed webhook (opened by
//! `tilegate_backends::open_sinks`) — each acknowledgement marked on the job row.
//!
//! A process settles a job ([`Announcer::settle`]) once its own sinks have taken every
//! announcement and the outcome is recorded: give the workers and the reconciler the same sinks.
//!
//! Delivery is at least once: a sink that took a message but whose acknowledgement was not yet
//! marked when the process died gets the same message again, under the same idempotency key.
//! Nothing is lost: the announcement was recorded with the change it announces, and stays
//! pending on the row until every sink has acknowledged it. Who delivers: the worker that
//! assembles a completed job or dead-letters a window (at once), any duplicate completion
//! trigger (a redelivered last window), a pool as its queue drains, `tilegate announce`, and the
//! reconciler (`tilegate reconcile-jobs`, [`crate::reconcile`]) on every pass, with a backoff:
//! the schedule that runs it in `deploy/` is what delivers an announcement whose sink was down
//! for longer than every inline retry.

use std::sync::Arc;
use tilegate_core::announce::{Announcement, Message, Outcome, Sink, SinkError, change_job};
use tilegate_core::id::JobId;
use tilegate_core::object::ObjectStoreExt as _;
use tilegate_core::table::JobRecord;
use tilegate_core::{Backends, StoreError};

/// What one delivery round did.
#[derive(Debug, Default)]
pub struct Delivery {
    /// Messages a sink acknowledged (and the row now says so).
    pub delivered: u64,
    /// (announcement, sink) pairs still unacknowledged after this round.
    pub pending: u64,
    /// Why the pending ones were not taken.
    pub failures: Vec<SinkError>,
}

impl Delivery {
    fn add(&mut self, other: Self) {
        self.delivered += other.delivered;
        self.pending += other.pending;
        self.failures.extend(other.failures);
    }
}

/// Delivers jobs' announcements to a fixed set of sinks.
#[derive(Debug, Clone)]
pub struct Announcer {
    b: Backends,
    sinks: Vec<Arc<dyn Sink>>,
    /// One delivery round at a time in this process (clones share it): the windows that
    /// dead-letter together, or a trigger racing the exit sweep, then find the first round's
    /// acknowledgements on the row instead of sending the same message again. Other processes
    /// may still repeat a message — under the same key.
    one_at_a_time: Arc<tokio::sync::Mutex<()>>,
}

impl Announcer {
    pub fn new(b: Backends, sinks: Vec<Arc<dyn Sink>>) -> Self {
        Self {
            b,
            sinks,
            one_at_a_time: Arc::default(),
        }
    }

    /// The sinks' names.
    pub fn sinks(&self) -> Vec<String> {
        self.sinks.iter().map(|s| s.id().to_owned()).collect()
    }

    /// Deliver each of `job`'s announcements to every sink that has not acknowledged it. A
    /// sink's refusal leaves the announcement pending (reported, not an error); an error is
    /// the job row's store failing.
    pub async fn deliver(&self, job: &JobId) -> Result<Delivery, StoreError> {
        let mut out = Delivery::default();
        if self.sinks.is_empty() {
            return Ok(out);
        }
        let _round = self.one_at_a_time.lock().await;
        let Some(row) = self.b.jobs.get_job(job).await? else {
            return Ok(out);
        };
        for a in &row.row.outbox {
            let missing: Vec<&Arc<dyn Sink>> = self
                .sinks
                .iter()
                .filter(|s| !a.delivered.contains(s.id()))
                .collect();
            if missing.is_empty() {
                continue;
            }
            let message = Message::of(&row.row, a, self.item_of(a).await?);
            let body = serde_json::to_vec(&message).expect("a message serialises");
            for sink in missing {
                match sink.deliver(&message, &body).await {
                    Ok(()) => {
                        self.mark(job, &a.key, sink.id()).await?;
                        out.delivered += 1;
                        tracing::info!(job_id = %job, key = %a.key, sink = sink.id(), "announced");
                    }
                    Err(e) => {
                        tracing::warn!(job_id = %job, key = %a.key, sink = sink.id(), error = %e, "announcement not delivered: left pending");
                        out.pending += 1;
                        out.failures.push(e);
                    }
                }
            }
        }
        Ok(out)
    }

    /// Deliver what is pending on the newest `limit` jobs.
    pub async fn sweep(&self, limit: usize) -> Result<Delivery, StoreError> {
        let mut out = Delivery::default();
        if self.sinks.is_empty() {
            return Ok(out);
        }
        for row in self.b.jobs.list_jobs(limit).await? {
            if self.pending_on(&row.row) {
                out.add(self.deliver(&row.row.job_id).await?);
            }
        }
        Ok(out)
    }

    /// Whether some announcement of `job` waits for one of this announcer's sinks.
    pub fn pending_on(&self, job: &JobRecord) -> bool {
        job.outbox
            .iter()
            .any(|a| !a.delivered_to_all(self.sinks.iter().map(|s| s.id())))
    }

    /// Whether `a` was taken by every one of this announcer's sinks.
    pub fn delivered_to_mine(&self, a: &Announcement) -> bool {
        a.delivered_to_all(self.sinks.iter().map(|s| s.id()))
    }

    /// Settle `job` if nothing is left to do for it here: its outcome is recorded (published,
    /// or `incomplete` in its current redrive generation) and every announcement was taken by
    /// each of this announcer's sinks (with none, once the outcome is recorded). Settling takes
    /// the job out of the tables' index of open jobs, with the version guard of every row
    /// change; a redrive reopens it. Returns whether this call settled it.
    pub async fn settle(&self, job: &JobRecord) -> Result<bool, StoreError> {
        if !self.finished(job) {
            return Ok(false);
        }
        change_job(&*self.b.jobs, &job.job_id, "settle the job", |row| {
            if !self.finished(row) {
                return false;
            }
            row.settled = true;
            true
        })
        .await
    }

    fn finished(&self, job: &JobRecord) -> bool {
        !job.settled
            && (job.scene_output.is_some() || tilegate_core::stall::announced_incomplete(job))
            && !self.pending_on(job)
    }

    /// A published scene's STAC Item, as stored beside the scene (none if it is not there: the
    /// message then carries the scene's reference only).
    async fn item_of(&self, a: &Announcement) -> Result<Option<serde_json::Value>, StoreError> {
        let (Outcome::Published, Some(scene)) = (a.outcome, &a.scene) else {
            return Ok(None);
        };
        let Ok(key) = tilegate_stac::item_key(&scene.key) else {
            return Ok(None);
        };
        match self.b.objects.get_bytes(&key).await {
            Ok(got) => Ok(serde_json::from_slice(&got.bytes).ok()),
            Err(StoreError::NotFound { .. }) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Mark `sink`'s acknowledgement of announcement `key` on `job`'s row.
    async fn mark(&self, job: &JobId, key: &str, sink: &str) -> Result<(), StoreError> {
        change_job(
            &*self.b.jobs,
            job,
            "mark an announcement delivered",
            |row| {
                row.outbox
                    .iter_mut()
                    .find(|a| a.key == key)
                    .is_some_and(|a| a.delivered.insert(sink.to_owned()))
            },
        )
        .await
        .map(drop)
    }
}

/// Start `job`'s next redrive generation (before its dead letters go back to the queue): if
/// they are dead-lettered again, the job is announced `incomplete` again, under a new key.
pub async fn new_generation(b: &Backends, job: &JobId) -> Result<(), StoreError> {
    change_job(&*b.jobs, job, "start a redrive generation", |row| {
        row.redrives += 1;
        // Open again: the redriven windows may publish it, or be dead-lettered again.
        row.settled = false;
        true
    })
    .await
    .map(drop)
}

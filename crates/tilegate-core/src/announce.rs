//! Announcements: what a job's outcomes tell the world, and the outbox they leave through.
//!
//! An announcement is recorded on the job row in the same conditional write as the change it
//! announces — the assembler's recording of the published scene, a worker's dead-lettering of
//! a window — so a crash between the change and its delivery never loses one: whoever next
//! looks at the row (a duplicate completion trigger, a pool as its queue drains, `tilegate
//! announce`) delivers what is pending, to each sink that has not acknowledged it, and marks the
//! acknowledgement on the row. Each announcement's idempotency key is fixed when it is recorded
//! (the job ID and the scene's ETag for a published scene), so at-least-once delivery repeats
//! the same message under the same key and consumers drop the duplicates.

use crate::UnixMillis;
use crate::grid::Window;
use crate::id::JobId;
use crate::table::{JobRecord, JobTable, OutputRef, UpdateOutcome};
use crate::{Retry, StoreError, StoreResult};
use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;

/// The outcomes a job announces.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// The scene is published (assembled and recorded on the job row).
    Published,
    /// A window was dead-lettered: the job cannot be published until its cause is fixed and
    /// `tilegate dlq redrive` resumes it.
    Incomplete,
}

impl Outcome {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Published => "published",
            Self::Incomplete => "incomplete",
        }
    }
}

/// One announcement in a job row's outbox.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Announcement {
    /// What consumers deduplicate on: `JOB:published:ETAG`, or `JOB:incomplete:N` for the job's
    /// Nth redrive generation.
    pub key: String,
    pub outcome: Outcome,
    pub recorded_at: UnixMillis,
    /// The published scene.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scene: Option<OutputRef>,
    /// Why the job is incomplete: the reason code of the window dead-lettered first.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The window dead-lettered first.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub window: Option<Window>,
    /// The sinks that acknowledged it, by [`Sink::id`].
    #[serde(default, skip_serializing_if = "BTreeSet::is_empty")]
    pub delivered: BTreeSet<String>,
}

impl Announcement {
    /// The announcement of `job`'s published scene.
    pub fn published(job: &JobId, scene: &OutputRef, now: UnixMillis) -> Self {
        Self {
            key: format!("{job}:published:{}", scene.e_tag.as_str().trim_matches('"')),
            outcome: Outcome::Published,
            recorded_at: now,
            scene: Some(scene.clone()),
            reason: None,
            window: None,
            delivered: BTreeSet::new(),
        }
    }

    /// The announcement that `job` is incomplete in its redrive generation `generation`.
    pub fn incomplete(
        job: &JobId,
        generation: u32,
        reason: &str,
        window: Window,
        now: UnixMillis,
    ) -> Self {
        Self {
            key: format!("{job}:incomplete:{generation}"),
            outcome: Outcome::Incomplete,
            recorded_at: now,
            scene: None,
            reason: Some(reason.to_owned()),
            window: Some(window),
            delivered: BTreeSet::new(),
        }
    }

    /// Whether every one of `sinks` has acknowledged it.
    pub fn delivered_to_all<'a>(&self, mut sinks: impl Iterator<Item = &'a str>) -> bool {
        sinks.all(|s| self.delivered.contains(s))
    }
}

impl JobRecord {
    /// Add `a` to the outbox unless an announcement with its key is there: recording is
    /// idempotent. Returns whether it was added.
    pub fn record_announcement(&mut self, a: Announcement) -> bool {
        if self.outbox.iter().any(|o| o.key == a.key) {
            return false;
        }
        self.outbox.push(a);
        true
    }
}

/// Change `job`'s row with `change` under the row's version guard, re-reading on a race:
/// `change` edits the row and says whether it changed anything (false: nothing written).
/// Returns whether a change was written (false also when the job has no row).
pub async fn change_job(
    jobs: &dyn JobTable,
    job: &JobId,
    what: &'static str,
    change: impl Fn(&mut JobRecord) -> bool + Send + Sync,
) -> StoreResult<bool> {
    for _ in 0..16 {
        let Some(row) = jobs.get_job(job).await? else {
            return Ok(false);
        };
        let mut next = row.row.clone();
        if !change(&mut next) {
            return Ok(false);
        }
        match jobs.update_job(&next, row.version).await? {
            UpdateOutcome::Updated { .. } => return Ok(true),
            UpdateOutcome::Superseded(_) => {}
        }
    }
    Err(StoreError::backend(
        what,
        job.as_str(),
        Retry::Retryable,
        "job row kept changing",
    ))
}

/// Record the announcement `make` builds from `job`'s row in its outbox (idempotent by key):
/// returns whether this call added it (false also when the job has no row, or `make`
/// declines).
pub async fn record(
    jobs: &dyn JobTable,
    job: &JobId,
    make: impl Fn(&JobRecord) -> Option<Announcement> + Send + Sync,
) -> StoreResult<bool> {
    change_job(jobs, job, "record an announcement", |row| {
        make(row).is_some_and(|a| row.record_announcement(a))
    })
    .await
}

/// The document a sink delivers: the announcement with the job's identity and, for a published
/// scene, its STAC Item.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Message {
    /// `tilegate.job.published` or `tilegate.job.incomplete`.
    #[serde(rename = "type")]
    pub kind: String,
    pub idempotency_key: String,
    pub job_id: JobId,
    pub tenant: String,
    /// The job's source, as recorded (never with credentials: see `redact`).
    pub source: String,
    pub outcome: Outcome,
    pub recorded_at: UnixMillis,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scene: Option<OutputRef>,
    /// The published scene's STAC Item, as stored beside it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub item: Option<serde_json::Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub window: Option<String>,
}

impl Message {
    /// The message announcing `a` of `job`, with the scene's STAC Item when there is one.
    pub fn of(job: &JobRecord, a: &Announcement, item: Option<serde_json::Value>) -> Self {
        Self {
            kind: format!("tilegate.job.{}", a.outcome.as_str()),
            idempotency_key: a.key.clone(),
            job_id: job.job_id.clone(),
            tenant: job.tenant.to_string(),
            source: job.source.uri.clone(),
            outcome: a.outcome,
            recorded_at: a.recorded_at,
            scene: a.scene.clone(),
            item,
            reason: a.reason.clone(),
            window: a.window.map(|w| w.to_string()),
        }
    }
}

/// Why a sink did not take a message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{sink}: {detail}")]
pub struct SinkError {
    pub sink: String,
    /// Worth trying again later (the announcement stays pending either way).
    pub retryable: bool,
    pub detail: String,
}

/// Where announcements go: an SNS topic, an EventBridge bus, a signed webhook.
#[async_trait::async_trait]
pub trait Sink: Send + Sync + std::fmt::Debug {
    /// A stable name of this sink, recorded on the row when it acknowledges (`webhook:HOST/…`,
    /// `sns:ARN`, `eventbridge:BUS`): never a secret.
    fn id(&self) -> &str;
    /// Deliver one message (`body` is its JSON): `Ok` once the sink has acknowledged it.
    async fn deliver(&self, message: &Message, body: &[u8]) -> Result<(), SinkError>;
}

/// A sink as the operator names it (`--announce`, `TILEGATE_ANNOUNCE`): `sns:TOPIC_ARN`,
/// `eventbridge:BUS_NAME` (or its ARN), or an `https://` webhook URL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SinkSpec {
    Sns(String),
    EventBridge(String),
    Webhook(String),
}

impl std::str::FromStr for SinkSpec {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let s = s.trim();
        if let Some(arn) = s.strip_prefix("sns:") {
            if !arn.starts_with("arn:") || arn.split(':').count() != 6 {
                return Err(format!(
                    "`{s}`: an SNS sink is sns:arn:aws:sns:REGION:ACCOUNT:TOPIC"
                ));
            }
            return Ok(Self::Sns(arn.to_owned()));
        }
        if let Some(bus) = s.strip_prefix("eventbridge:") {
            if bus.is_empty() {
                return Err(format!(
                    "`{s}`: an EventBridge sink is eventbridge:BUS_NAME"
                ));
            }
            return Ok(Self::EventBridge(bus.to_owned()));
        }
        if s.starts_with("https://") || s.starts_with("http://") {
            return Ok(Self::Webhook(s.to_owned()));
        }
        Err(format!(
            "`{s}`: a sink is sns:TOPIC_ARN, eventbridge:BUS or an https:// webhook URL"
        ))
    }
}

/// The sinks named in `list`, comma-separated (`TILEGATE_ANNOUNCE`).
pub fn sink_specs(list: &str) -> Result<Vec<SinkSpec>, String> {
    list.split(',')
        .filter(|s| !s.trim().is_empty())
        .map(str::parse)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sinks_are_named_by_scheme() {
        assert_eq!(
            sink_specs("sns:arn:aws:sns:us-east-1:123456789012:scenes, eventbridge:default,https://h.example/x").unwrap(),
            vec![
                SinkSpec::Sns("arn:aws:sns:us-east-1:123456789012:scenes".into()),
                SinkSpec::EventBridge("default".into()),
                SinkSpec::Webhook("https://h.example/x".into()),
            ]
        );
        assert!("sns:scenes".parse::<SinkSpec>().is_err());
        assert!("ftp://h/x".parse::<SinkSpec>().is_err());
        assert!(sink_specs("").unwrap().is_empty());
    }

    #[test]
    fn recording_is_idempotent_by_key() {
        let scene = OutputRef {
            key: "tilegate/scenes/j.tif".into(),
            e_tag: crate::ETag::new("\"abc\""),
            size: 1,
        };
        let job = JobId::parse("0123456789abcdef0123456789abcdef").unwrap();
        let a = Announcement::published(&job, &scene, 1);
        assert_eq!(a.key, format!("{job}:published:abc"));
        let b = Announcement::published(&job, &scene, 2);
        assert_eq!(
            a.key, b.key,
            "the key does not depend on when it was recorded"
        );
    }
}

//! Why an open job is not moving: the one judgement `status`, the report, the service's job
//! document and the reconciler share. A job is stalled when an edge that should have moved it
//! on was lost — its planner died before enqueueing, its last window's trigger never assembled
//! it, a window left the queue without its announcement, or a sink has not taken an
//! announcement — for longer than a fast path takes.

use crate::UnixMillis;
use crate::announce::Outcome;
use crate::table::JobRecord;
use serde::Serialize;

/// How long an edge may take before a job waiting on it is called stalled: a planner's
/// enqueue, an assembly's start, an announcement's inline retries.
pub const STALL_AFTER_MS: i64 = 120_000;

/// Why an open job is not moving.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum StallReason {
    /// The job row was written and its windows never all enqueued (its planner or arrival
    /// was lost before it finished).
    EnqueueInterrupted,
    /// Every window is recorded and no scene is published (the last window's trigger was
    /// lost, or its assembler died).
    AssemblyPending,
    /// Windows left the queue (the queue's own redrive policy moved them to the dead-letter
    /// queue) and the job was never announced `incomplete`.
    WindowsLost,
    /// Announcements recorded and not taken by any sink.
    AnnouncementPending,
}

impl StallReason {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::EnqueueInterrupted => "enqueue-interrupted",
            Self::AssemblyPending => "assembly-pending",
            Self::WindowsLost => "windows-lost",
            Self::AnnouncementPending => "announcement-pending",
        }
    }
}

/// A stalled job: why, and how many of what (windows lost, announcements pending).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub struct Stall {
    pub reason: StallReason,
    pub count: u64,
}

/// What a job's stall is judged from besides its row.
#[derive(Debug, Clone, Copy, Default)]
pub struct Seen {
    /// Its manifest rows.
    pub recorded: u64,
    /// When the last of them was recorded.
    pub last_recorded_at: Option<UnixMillis>,
    /// Its letters in the dead-letter queue, where that was read (0 otherwise).
    pub dead_letters: u64,
}

/// Whether the job has an `incomplete` announcement for its current redrive generation.
pub fn announced_incomplete(job: &JobRecord) -> bool {
    job.outbox
        .iter()
        .any(|a| a.outcome == Outcome::Incomplete && a.key.ends_with(&format!(":{}", job.redrives)))
}

/// Why `job` is stalled at `now`, if it is: the first of enqueue-interrupted,
/// assembly-pending, windows-lost and announcement-pending that holds for longer than
/// [`STALL_AFTER_MS`].
pub fn stall_of(job: &JobRecord, seen: Seen, now: UnixMillis) -> Option<Stall> {
    let windows = job.grid.len();
    let published = job.scene_output.is_some();
    let old = |since: UnixMillis| now.saturating_sub(since) > STALL_AFTER_MS;
    let stall = |reason, count| Some(Stall { reason, count });
    if !published && !job.windows_enqueued && seen.recorded < windows && old(job.created_at) {
        return stall(StallReason::EnqueueInterrupted, windows - seen.recorded);
    }
    if !published
        && windows > 0
        && seen.recorded >= windows
        && old(seen.last_recorded_at.unwrap_or(job.created_at))
    {
        return stall(StallReason::AssemblyPending, 1);
    }
    if !published && seen.dead_letters > 0 && !announced_incomplete(job) {
        return stall(StallReason::WindowsLost, seen.dead_letters);
    }
    let pending = job
        .outbox
        .iter()
        .filter(|a| a.delivered.is_empty() && old(a.recorded_at))
        .count() as u64;
    if pending > 0 {
        return stall(StallReason::AnnouncementPending, pending);
    }
    None
}

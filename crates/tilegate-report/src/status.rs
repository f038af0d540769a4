//! A job's status: gathered once from its stored rows ([`gather`]), then read as one model
//! ([`JobStatus`]) by `status --json`, `status --watch` and the report, so that they agree on
//! every count. Text that may carry a secret (dead letters' reasons, the source URI) is
//! redacted in the model ([`tilegate_core::redact`]), so no view of it shows one.

use crate::cost::{self, CostEstimate, PriceTable};
use serde::Serialize;
use std::collections::{BTreeMap, HashMap};
use tilegate_core::lifecycle::{Counts, Lifecycle};
use tilegate_core::message::WindowMessage;
use tilegate_core::metrics as m;
use tilegate_core::queue::QueueDepth;
use tilegate_core::redact::redact;
use tilegate_core::table::{JobRecord, ManifestEntry, OutputRef, TileOrigin};
use tilegate_core::{Backends, JobId, StoreResult, UnixMillis, Window};

/// Dead letters read per status (the queue's oldest first).
pub const DEAD_LETTERS_READ: usize = 10_000;

/// What became of one window, as the report colours it.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, schemars::JsonSchema,
)]
#[serde(rename_all = "kebab-case")]
pub enum WindowState {
    /// A worker's Create wrote the tile (or a repair rewrote it).
    Written,
    /// The tile was encoded, and the store refused the Create: a duplicate had written it
    /// first (a duplicate absorbed).
    AlreadyPresent,
    /// The tile was found in place before encoding; encoding was skipped.
    EncodeSkipped,
    /// No manifest row, and the window's message is in the dead-letter queue.
    DeadLettered,
    /// No manifest row, and no dead letter: still queued, in flight, or lost.
    Missing,
}

impl WindowState {
    pub const ALL: [Self; 5] = [
        Self::Written,
        Self::AlreadyPresent,
        Self::EncodeSkipped,
        Self::DeadLettered,
        Self::Missing,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Self::Written => "written",
            Self::AlreadyPresent => "already-present",
            Self::EncodeSkipped => "encode-skipped",
            Self::DeadLettered => "dead-lettered",
            Self::Missing => "missing",
        }
    }

    /// The state of a window that has a manifest row.
    pub fn of_row(row: &ManifestEntry) -> Self {
        match row.origin {
            TileOrigin::Written | TileOrigin::Repaired => Self::Written,
            TileOrigin::AlreadyPresent if row.facts.encode_skipped => Self::EncodeSkipped,
            TileOrigin::AlreadyPresent => Self::AlreadyPresent,
        }
    }
}

/// Windows by state; they add up to the job's window count.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub struct StateCounts {
    pub written: u64,
    pub already_present: u64,
    pub encode_skipped: u64,
    pub dead_lettered: u64,
    pub missing: u64,
}

impl StateCounts {
    pub fn get(&self, s: WindowState) -> u64 {
        match s {
            WindowState::Written => self.written,
            WindowState::AlreadyPresent => self.already_present,
            WindowState::EncodeSkipped => self.encode_skipped,
            WindowState::DeadLettered => self.dead_lettered,
            WindowState::Missing => self.missing,
        }
    }

    fn bump(&mut self, s: WindowState) {
        *match s {
            WindowState::Written => &mut self.written,
            WindowState::AlreadyPresent => &mut self.already_present,
            WindowState::EncodeSkipped => &mut self.encode_skipped,
            WindowState::DeadLettered => &mut self.dead_lettered,
            WindowState::Missing => &mut self.missing,
        } += 1;
    }
}

/// A dead letter of the job, with its window where its body still says.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub struct JobDeadLetter {
    pub message_id: String,
    /// `ROW_COL`, as everywhere else.
    #[serde(serialize_with = "window_name")]
    #[schemars(with = "Option<String>")]
    pub window: Option<Window>,
    pub reason: String,
    pub receive_count: u32,
    pub dead_at_ms: UnixMillis,
}

impl JobDeadLetter {
    /// The reason's code (`source-changed`), without its detail.
    pub fn code(&self) -> &str {
        self.reason.split(':').next().unwrap_or("").trim()
    }
}

/// The job's ledger of regenerated outputs, in brief.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub struct LedgerSummary {
    pub attempts: u64,
    pub published: u64,
    pub by_state: BTreeMap<&'static str, u64>,
    pub deletion_overdue_oldest_seconds: u64,
    pub deletion_overdue_oldest_seconds_all_jobs: u64,
}

/// What a status reads beyond the job's own rows and counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reach {
    /// The shared dead-letter queue, read through for the job's letters (each one's window
    /// and reason). Without it, dead letters are counted from the job's own counters.
    pub dead_letter_queue: bool,
    /// The work queue's depth (every job's messages).
    pub queue_depth: bool,
    /// The ledger's oldest overdue deletion of every job.
    pub all_jobs: bool,
}

impl Reach {
    /// The operator's own look (`tilegate status`, the report command): everything.
    pub const OPERATOR: Self = Self {
        dead_letter_queue: true,
        queue_depth: true,
        all_jobs: true,
    };
    /// The job's own rows and counters only: what a tenant's request may cost, the same
    /// however many other jobs and dead letters the deployment holds.
    pub const JOB: Self = Self {
        dead_letter_queue: false,
        queue_depth: false,
        all_jobs: false,
    };
}

/// Everything stored about a job, read once.
#[derive(Debug, Clone)]
pub struct Gathered {
    pub job: JobRecord,
    /// Manifest rows, ordered by window.
    pub rows: Vec<ManifestEntry>,
    /// The job's letters in the dead-letter queue (empty when it was not read).
    pub dead: Vec<JobDeadLetter>,
    /// Whether the dead-letter queue was read ([`Reach::dead_letter_queue`]); if not, the
    /// job's dead letters are those its counters count.
    pub dead_letter_queue_read: bool,
    pub counters: BTreeMap<String, u64>,
    /// The work queue's depth, where it was read ([`Reach::queue_depth`]).
    pub queue: Option<QueueDepth>,
    pub ledger: LedgerSummary,
    /// The scene's pointer, when a regenerated scene is published by one.
    pub scene_pointer: Option<tilegate_core::ledger::Pointer>,
    /// When it was read.
    pub at: UnixMillis,
}

/// The job a dead letter belonged to, if its body still parses that far.
pub fn dead_letter_job(body: &str) -> Option<JobId> {
    let v: serde_json::Value = serde_json::from_str(body).ok()?;
    JobId::parse(v.get("job_id")?.as_str()?).ok()
}

fn window_name<S: serde::Serializer>(w: &Option<Window>, s: S) -> Result<S::Ok, S::Error> {
    match w {
        Some(w) => s.serialize_some(&w.to_string()),
        None => s.serialize_none(),
    }
}

/// Read a job's rows, counters, dead letters, queue depth and ledger.
pub async fn gather(b: &Backends, job: JobRecord, now: UnixMillis) -> StoreResult<Gathered> {
    gather_with(b, job, now, Reach::OPERATOR).await
}

/// Read a job's rows, counters and ledger, and what `reach` allows beyond them.
pub async fn gather_with(
    b: &Backends,
    job: JobRecord,
    now: UnixMillis,
    reach: Reach,
) -> StoreResult<Gathered> {
    let rows = b
        .manifest
        .list_entries(&job.job_id)
        .await?
        .into_iter()
        .map(|v| v.row)
        .collect();
    let mut counters = b.counters.get_counters(&job.job_id).await?;
    for name in m::ALL {
        counters.entry(name.to_owned()).or_insert(0);
    }
    let queue = match reach.queue_depth {
        true => Some(b.queue.depth().await?),
        false => None,
    };
    let letters = match reach.dead_letter_queue {
        true => b.queue.list_dead_letters(DEAD_LETTERS_READ).await?,
        false => Vec::new(),
    };
    let dead = letters
        .into_iter()
        .filter(|d| dead_letter_job(&d.body).as_ref() == Some(&job.job_id))
        .map(|d| JobDeadLetter {
            window: dead_letter_window(&d.body),
            message_id: d.message_id,
            // Also a reason stored before reasons were redacted as they were written.
            reason: redact(&d.reason).into_owned(),
            receive_count: d.receive_count,
            dead_at_ms: d.dead_at,
        })
        .collect();
    let attempts = b.ledger.list_attempts(&job.job_id).await?;
    let pointers = b.ledger.list_pointers(&job.job_id).await?;
    let overdue_all = match reach.all_jobs {
        true => tilegate_ledger::gc::oldest_overdue_seconds(b, now).await,
        false => Ok(0),
    }
    .map_err(|e| match e {
        tilegate_ledger::LedgerError::Store(e) => e,
        other => tilegate_core::StoreError::backend(
            "read the ledger's overdue deletions",
            job.job_id.as_str(),
            tilegate_core::Retry::Permanent,
            tilegate_core::error::chain(&other),
        ),
    })?;
    let overdue_job = attempts
        .iter()
        .filter(|r| r.row.in_due_index())
        .filter_map(|r| r.row.delete_after)
        .filter(|d| *d <= now)
        .min()
        .map_or(0, |d| u64::try_from((now - d) / 1000).unwrap_or(0));
    let scene_pointer = pointers
        .iter()
        .find(|p| p.row.subject == tilegate_core::ledger::Subject::Scene)
        .map(|p| p.row.clone());
    let ledger = LedgerSummary {
        attempts: attempts.len() as u64,
        published: pointers.len() as u64,
        by_state: tilegate_ledger::count_by_state(&attempts),
        deletion_overdue_oldest_seconds: overdue_job,
        deletion_overdue_oldest_seconds_all_jobs: overdue_all,
    };
    Ok(Gathered {
        job,
        rows,
        dead,
        dead_letter_queue_read: reach.dead_letter_queue,
        counters,
        queue,
        ledger,
        scene_pointer,
        at: now,
    })
}

/// The window a dead letter's body names: decoded as a window message, else read leniently
/// (a dead letter's body may be one the worker refused to decode).
pub fn dead_letter_window(body: &str) -> Option<Window> {
    WindowMessage::decode(body)
        .ok()
        .map(|w| w.window)
        .or_else(|| window_of(body))
}

/// The window a message body names, read leniently (a dead letter's body may be one the
/// worker refused to decode).
fn window_of(body: &str) -> Option<Window> {
    let v: serde_json::Value = serde_json::from_str(body).ok()?;
    serde_json::from_value(v.get("window")?.clone()).ok()
}

impl Gathered {
    /// Every window of the grid in grid order, with its state, its row (if any) and its dead
    /// letter (if it has no row).
    pub fn windows(
        &self,
    ) -> Vec<(
        Window,
        WindowState,
        Option<&ManifestEntry>,
        Option<&JobDeadLetter>,
    )> {
        let rows: HashMap<Window, &ManifestEntry> =
            self.rows.iter().map(|r| (r.window, r)).collect();
        let mut dead: HashMap<Window, &JobDeadLetter> = HashMap::new();
        for d in &self.dead {
            if let Some(w) = d.window {
                dead.entry(w).or_insert(d);
            }
        }
        self.job
            .grid
            .windows()
            .map(|w| match rows.get(&w) {
                Some(r) => (w, WindowState::of_row(r), Some(*r), None),
                None => match dead.get(&w) {
                    Some(d) => (w, WindowState::DeadLettered, None, Some(*d)),
                    None => (w, WindowState::Missing, None, None),
                },
            })
            .collect()
    }

    /// Bytes of the job's outputs: the tiles its rows name and the scene.
    pub fn stored_bytes(&self) -> u64 {
        self.rows.iter().map(|r| r.size).sum::<u64>()
            + self.job.scene_output.as_ref().map_or(0, |o| o.size)
    }

    /// The status model.
    pub fn status(&self, prices: &PriceTable) -> JobStatus {
        let job = &self.job;
        let windows = self.windows();
        let mut states = StateCounts::default();
        for (_, s, _, _) in &windows {
            states.bump(*s);
        }
        let counted = |name: &str| self.counters.get(name).copied().unwrap_or(0);
        let mut by_reason: BTreeMap<String, u64> = BTreeMap::new();
        let dead_letters_for_job = if self.dead_letter_queue_read {
            for d in &self.dead {
                *by_reason.entry(d.code().to_owned()).or_default() += 1;
            }
            self.dead.len() as u64
        } else {
            // Not read from the queue: the windows the job's workers dead-lettered, by its
            // counters (in its whole life, redriven ones included), at most the windows that
            // have no row.
            for (name, n) in &self.counters {
                if let Some(reason) = m::dead_letter_reason(name).filter(|_| *n > 0) {
                    by_reason.insert(reason.to_owned(), *n);
                }
            }
            let dead = counted(m::DEAD_LETTERED).min(states.missing);
            states.missing -= dead;
            states.dead_lettered += dead;
            counted(m::DEAD_LETTERED)
        };
        let missing: Vec<String> = windows
            .iter()
            .filter(|(_, _, row, _)| row.is_none())
            .map(|(w, ..)| w.to_string())
            .collect();
        let mut workers: BTreeMap<&str, WorkerActivity> = BTreeMap::new();
        for r in &self.rows {
            let name = if r.facts.worker.is_empty() {
                "unrecorded"
            } else {
                r.facts.worker.as_str()
            };
            let a = workers.entry(name).or_insert_with(|| WorkerActivity {
                worker: name.to_owned(),
                windows: 0,
                first_recorded_at: r.recorded_at,
                last_recorded_at: r.recorded_at,
            });
            a.windows += 1;
            a.first_recorded_at = a.first_recorded_at.min(r.recorded_at);
            a.last_recorded_at = a.last_recorded_at.max(r.recorded_at);
        }
        let windows_total = job.grid.len();
        let manifest_rows = self.rows.len() as u64;
        // The one count of the job's windows; the states' dead-lettered and missing are its.
        let counts = Counts::new(windows_total, manifest_rows, states.dead_lettered);
        states.dead_lettered = counts.dead_lettered;
        states.missing = counts.missing;
        let first = self.rows.iter().map(|r| r.recorded_at).min();
        let last = self.rows.iter().map(|r| r.recorded_at).max();
        let published = job.scene_output.is_some() || self.scene_pointer.is_some();
        JobStatus {
            job_id: job.job_id.clone(),
            lifecycle: Lifecycle::of(&counts, published),
            counts,
            tenant: job.tenant.to_string(),
            source: redact(&job.source.uri).into_owned(),
            source_etag: job.source.etag.to_string(),
            recipe: job.recipe.fingerprint(),
            prefix: job.prefix.to_string(),
            created_at: job.created_at,
            scene: SceneBrief {
                width: job.grid.width,
                height: job.grid.height,
                bands: job.scene.bands,
                dtype: job.scene.dtype.clone(),
            },
            window: job.grid.window,
            windows: windows_total,
            manifest_rows,
            missing_windows: counts.unrecorded(),
            missing: missing.iter().take(50).cloned().collect(),
            complete: counts.complete(),
            window_states: states,
            duplicates_absorbed: states.already_present + states.encode_skipped,
            tiles_prefix: job.prefix.tiles_dir(&job.job_id),
            scene_output: job.scene_output.clone(),
            published_scene: match &self.scene_pointer {
                Some(p) => Some(PublishedScene {
                    output: p.output.clone(),
                    attempt: Some(p.attempt.to_string()),
                }),
                None => job.scene_output.clone().map(|output| PublishedScene {
                    output,
                    attempt: None,
                }),
            },
            counters: self.counters.clone(),
            queue: self.queue.map(|q| QueueBrief {
                visible: q.visible,
                in_flight: q.in_flight,
                dead: q.dead,
            }),
            dead_letters_for_job,
            dead_letters_by_reason: by_reason,
            dead_letters: self.dead.iter().take(50).cloned().collect(),
            announcements: job.outbox.clone(),
            settled: job.settled,
            workers: workers.into_values().collect(),
            first_recorded_at: first,
            last_recorded_at: last,
            ledger: self.ledger.clone(),
            cost: cost::estimate(&self.counters, self.stored_bytes(), windows_total, prices),
            stalled: (!job.settled)
                .then(|| {
                    tilegate_core::stall::stall_of(
                        job,
                        tilegate_core::stall::Seen {
                            recorded: manifest_rows,
                            last_recorded_at: last,
                            dead_letters: if self.dead_letter_queue_read {
                                self.dead.len() as u64
                            } else {
                                0
                            },
                        },
                        self.at,
                    )
                })
                .flatten(),
        }
    }
}

/// One worker's share of a job, from the rows it recorded.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub struct WorkerActivity {
    pub worker: String,
    pub windows: u64,
    pub first_recorded_at: UnixMillis,
    pub last_recorded_at: UnixMillis,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub struct SceneBrief {
    pub width: u32,
    pub height: u32,
    pub bands: u32,
    pub dtype: String,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub struct QueueBrief {
    pub visible: u64,
    pub in_flight: u64,
    pub dead: u64,
}

/// The scene a reader gets, and the attempt that made it (none: the assembled scene).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub struct PublishedScene {
    #[serde(flatten)]
    pub output: OutputRef,
    pub attempt: Option<String>,
}

/// A job's status: what `status --json` prints and the report shows.
#[derive(Debug, Clone, PartialEq, Serialize, schemars::JsonSchema)]
pub struct JobStatus {
    pub job_id: JobId,
    /// Where the job is: planned, partial, incomplete, not_assembled or published
    /// ([`Lifecycle`], the same name every output gives the job).
    pub lifecycle: Lifecycle,
    /// The job's windows: recorded, dead-lettered and missing, adding up to `windows` (the
    /// same figures every output gives the job).
    pub counts: Counts,
    pub tenant: String,
    pub source: String,
    pub source_etag: String,
    /// The recipe's fingerprint (part of the job ID).
    pub recipe: String,
    pub prefix: String,
    pub created_at: UnixMillis,
    pub scene: SceneBrief,
    pub window: u32,
    pub windows: u64,
    pub manifest_rows: u64,
    /// Windows without a manifest row: `counts.dead_lettered + counts.missing`.
    pub missing_windows: u64,
    /// The first 50 of them.
    pub missing: Vec<String>,
    pub complete: bool,
    pub window_states: StateCounts,
    /// Windows whose tile a duplicate had written (already present, or encode skipped).
    pub duplicates_absorbed: u64,
    pub tiles_prefix: String,
    /// The scene assembled from the windows (recorded on the job row).
    pub scene_output: Option<OutputRef>,
    /// The scene a reader gets now: a regenerated scene's attempt where a pointer names one,
    /// else the assembled scene.
    pub published_scene: Option<PublishedScene>,
    pub counters: BTreeMap<String, u64>,
    /// The work queue's depth (every job's messages): absent where the reader may not see
    /// it (a tenant, through the service).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue: Option<QueueBrief>,
    /// The job's dead letters: those in the dead-letter queue where it was read (`tilegate
    /// status`), else those the job's counters count (the service: windows its workers
    /// dead-lettered, redriven ones included).
    pub dead_letters_for_job: u64,
    pub dead_letters_by_reason: BTreeMap<String, u64>,
    /// The first 50 of the job's dead letters (empty where the queue was not read).
    pub dead_letters: Vec<JobDeadLetter>,
    /// The job's outbox: each announcement (published, incomplete) with the sinks that
    /// acknowledged it.
    pub announcements: Vec<tilegate_core::announce::Announcement>,
    /// The job is settled: out of the open jobs, nothing delivers its announcements on its own
    /// any more (a `run` with no sink settles its job once published). One no sink took stays
    /// recorded; `tilegate announce JOB --announce SINK` delivers it.
    pub settled: bool,
    pub workers: Vec<WorkerActivity>,
    pub first_recorded_at: Option<UnixMillis>,
    pub last_recorded_at: Option<UnixMillis>,
    pub ledger: LedgerSummary,
    pub cost: CostEstimate,
    /// Why the job is not moving, when an edge that should have moved it was lost for longer
    /// than the fast path takes (`enqueue-interrupted`, `assembly-pending`, `windows-lost`,
    /// `announcement-pending`, with how many): what `tilegate reconcile-jobs` acts on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stalled: Option<tilegate_core::stall::Stall>,
}

//! The reports of the commands that plan, work and assemble.

use super::{ErrorDoc, Item, Report};
use crate::output::{Out, counted};
use schemars::JsonSchema;
use serde::Serialize;
use std::collections::BTreeMap;
use std::path::PathBuf;
use tilegate_core::lifecycle::{Lifecycle, RunCounts};
use tilegate_core::table::JobRecord;
use tilegate_core::{JobId, UnixMillis};

/// `init`: the cloud resources created and those already there.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct InitReport {
    pub created: Vec<String>,
    pub existing: Vec<String>,
}

impl Report for InitReport {
    fn text(&self, _: &Out) -> String {
        format!(
            "created: {}\nalready there: {}",
            self.created.join(", "),
            self.existing.join(", ")
        )
    }
}

/// `sample-scene`: the scene written.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct SampleReport {
    pub path: PathBuf,
    pub width: u32,
    pub height: u32,
    pub bands: u32,
    pub dtype: String,
    pub nodata: Option<f64>,
    pub elapsed_s: f64,
}

impl Report for SampleReport {
    fn text(&self, _: &Out) -> String {
        format!(
            "wrote {} ({}×{}, {} band(s) {}) in {:.2} s",
            self.path.display(),
            self.width,
            self.height,
            self.bands,
            self.dtype,
            self.elapsed_s
        )
    }
}

/// `recipes`: the built-in and registered recipes.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct RecipesReport {
    pub recipes: Vec<RecipeEntry>,
}

impl Report for RecipesReport {
    fn text(&self, _: &Out) -> String {
        catalogue_text(&self.recipes)
    }
}

/// `plan`: one planned job.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct PlanReport {
    pub job_id: JobId,
    pub windows: u64,
    pub enqueued: u64,
    pub already_recorded: u64,
    /// False when the job was planned before (the same source, recipe and prefix).
    pub newly_planned: bool,
    pub source: String,
    pub source_etag: String,
    pub tenant: String,
    pub prefix: String,
    pub timings: PlanTimings,
    pub elapsed_s: f64,
}

/// Where planning spent its time, in seconds.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct PlanTimings {
    pub pin_source_s: f64,
    pub probe_s: f64,
    pub job_row_s: f64,
    pub enqueue_s: f64,
}

impl Report for PlanReport {
    fn text(&self, _: &Out) -> String {
        format!(
            "job {} {}: {}, {} enqueued ({} already recorded) {}",
            self.job_id,
            if self.newly_planned {
                "planned"
            } else {
                "already planned"
            },
            counted(self.windows, "window"),
            self.enqueued,
            self.already_recorded,
            self.source
        )
    }
}

/// `plan --estimate`: what the job would cost; nothing is planned.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct PlanEstimate {
    /// The job's ID if it were planned (the same as `plan` would give).
    pub job_id: JobId,
    /// A job row with this ID exists already: the source was planned before.
    pub already_planned: bool,
    pub source: String,
    /// Bytes of the source (each window reads its part of it; not priced: a source's reads
    /// are not counted by the stores).
    pub source_bytes: u64,
    pub windows: u64,
    pub window_px: u32,
    /// Windows encoded here to learn the tiles' size, and their mean size.
    pub sampled_windows: u64,
    pub mean_tile_bytes: u64,
    /// Predicted bytes of all tiles, and of the scene COG.
    pub tile_bytes: u64,
    pub scene_bytes: u64,
    /// The services the run sends billed requests to (none on the embedded backend).
    pub billed_services: Vec<String>,
    /// The predicted requests, priced as `status --cost` prices a job's counted ones.
    pub cost: tilegate_report::cost::CostEstimate,
}

impl Report for PlanEstimate {
    fn text(&self, _: &Out) -> String {
        let mb = |b: u64| match b {
            0..1_000_000 => format!("{:.0} kB", b as f64 / 1e3),
            _ => format!("{:.1} MB", b as f64 / 1e6),
        };
        format!(
            "job {} {}: nothing planned, nothing written\n  source       {} ({})\n  windows      {}, {} px square\n  tiles        {} ({} a tile, from {} encoded here)\n  scene        {}\n  billed       {}\n{}",
            self.job_id,
            if self.already_planned {
                "was planned before"
            } else {
                "would be planned"
            },
            self.source,
            mb(self.source_bytes),
            self.windows,
            self.window_px,
            mb(self.tile_bytes),
            mb(self.mean_tile_bytes),
            counted(self.sampled_windows, "window"),
            mb(self.scene_bytes),
            if self.billed_services.is_empty() {
                "nothing (local stores)".to_owned()
            } else {
                self.billed_services.join(", ")
            },
            super::cost_text(&self.cost),
        )
    }
}

/// `plan --from LIST`: a job per source, or its failure.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct PlanBatch {
    pub jobs: Vec<Item<PlanReport>>,
    pub planned: usize,
    pub failed: usize,
}

/// `backfill`: the windows enqueued again.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct BackfillReport {
    pub job_id: JobId,
    pub enqueued: u64,
    pub already_recorded: u64,
    /// With --missing: windows without a row whose message is still on the queue (not sent
    /// again; 0 where the queue cannot say, as on SQS).
    pub still_queued: u64,
    pub windows: u64,
}

impl Report for BackfillReport {
    fn text(&self, _: &Out) -> String {
        let queued = if self.still_queued > 0 {
            format!("; {} still queued, not sent again", self.still_queued)
        } else {
            String::new()
        };
        format!(
            "enqueued {} window(s) of job {} ({} of {} already recorded{queued})",
            self.enqueued, self.job_id, self.already_recorded, self.windows
        )
    }
}

/// `work`: what the pool did before it stopped.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct WorkSummary {
    pub handled: u64,
    pub written: u64,
    pub already_present: u64,
    pub skipped: u64,
    pub accepts_refused: u64,
    pub dead_lettered: u64,
    pub retried: u64,
    pub released: u64,
    pub counters: BTreeMap<String, u64>,
    /// Requests charged to no job (receives and queue-depth checks come before a message
    /// names its job); every other request is in its job's counters.
    pub unattributed_requests: BTreeMap<String, u64>,
    pub elapsed_s: f64,
}

impl Report for WorkSummary {
    fn text(&self, _: &Out) -> String {
        format!(
            "handled {} message(s): {} written, {} already present, {} skipped, {} accept(s) \
             refused, {} dead-lettered, {} retried ({:.2} s)",
            self.handled,
            self.written,
            self.already_present,
            self.skipped,
            self.accepts_refused,
            self.dead_lettered,
            self.retried,
            self.elapsed_s
        )
    }
}

/// What a job writes: the grid and the output's bands (the recipe's, not the source's).
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct RasterBrief {
    pub width: u32,
    pub height: u32,
    /// Bands of the output (an `expr` recipe's expressions, a `copy --bands` selection).
    pub bands: u32,
    pub dtype: String,
    /// The window's side in pixels.
    pub window: u32,
}

impl RasterBrief {
    pub fn of(job: &JobRecord) -> Self {
        let spec = job.recipe.output_spec(&job.scene);
        Self {
            width: job.grid.width,
            height: job.grid.height,
            bands: spec.bands,
            dtype: spec.dtype,
            window: job.grid.window,
        }
    }
}

/// `run` and `demo`: a job planned, worked and (unless `--no-assemble`) assembled.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct RunReport {
    pub job_id: JobId,
    pub output: RasterBrief,
    /// Where the job is when the run ends: the state `status` gives it.
    pub lifecycle: Lifecycle,
    /// The job's windows when the run ends: recorded (those whose tile this run wrote, and
    /// those already present), dead-lettered and missing, adding up to `windows`.
    #[serde(flatten)]
    pub counts: RunCounts,
    /// `recorded`, under the name the manifest gives it.
    pub manifest_rows: u64,
    pub duplicate_encodes_skipped: u64,
    pub retried: u64,
    pub complete: bool,
    pub tiles_prefix: String,
    pub counters: BTreeMap<String, u64>,
    pub elapsed_s: f64,
    /// The assembly, when the job completed and was assembled.
    pub scene: Option<AssembleSummary>,
    /// The copy `--out FILE` wrote.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub out: Option<NamedCopy>,
}

/// The copy of the published scene that `run -o FILE` wrote.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct NamedCopy {
    pub path: String,
    pub size: u64,
}

impl Report for RunReport {
    fn text(&self, out: &Out) -> String {
        let o = &self.output;
        let mut s = format!(
            "job {}  {}×{} {} band(s) {}, {} of {} px\n",
            self.job_id,
            o.width,
            o.height,
            o.bands,
            o.dtype,
            counted(self.counts.counts.windows, "window"),
            o.window
        );
        let c = &self.counts;
        for (label, n) in [
            ("tiles written", c.tiles_written),
            ("already present", c.already_present),
            ("duplicate encodes skipped", self.duplicate_encodes_skipped),
            ("manifest rows", c.counts.recorded),
            ("dead-lettered", c.counts.dead_lettered),
            ("missing", c.counts.missing),
        ] {
            s.push_str(&format!("  {label:<27}{n:>8}\n"));
        }
        s.push_str(&format!("  {:<27}{:>8.2} s\n", "elapsed", self.elapsed_s));
        s.push_str(&format!(
            "  {:<27}{:>8}\n",
            "state",
            self.lifecycle.as_str()
        ));
        if !self.complete {
            // What is left, and the one thing that moves it: a stopped run resumes by running
            // again; dead letters need their cause fixed first.
            let c = &c.counts;
            let mut left = Vec::new();
            if c.missing > 0 {
                left.push(format!(
                    "{} window(s) still to do: run again to resume",
                    c.missing
                ));
            }
            if c.dead_lettered > 0 {
                left.push(format!(
                    "{} window(s) dead-lettered: see `tilegate dlq list`, fix the cause, then \
                     `tilegate dlq redrive`",
                    c.dead_lettered
                ));
            }
            s.push_str(&format!("  INCOMPLETE: {}", left.join("; ")));
            return s;
        }
        s.push_str(&format!(
            "  tiles in {}{}",
            out.objects_root, self.tiles_prefix
        ));
        if let Some(scene) = &self.scene {
            s.push_str(&format!(
                "\n  scene    {}{} ({})",
                out.objects_root,
                scene.scene_key,
                scene.outcome.as_str()
            ));
        }
        if let Some(copy) = &self.out {
            s.push_str(&format!("\n  copied to {}", copy.path));
        }
        s
    }
}

impl RunReport {
    /// The job's state at the end of a run: its counts, and whether the run's assembly left a
    /// published scene.
    pub fn lifecycle_of(counts: &RunCounts, scene: Option<&AssembleSummary>) -> Lifecycle {
        let published = scene.is_some_and(|a| {
            matches!(
                a.outcome,
                AssembleOutcome::Written
                    | AssembleOutcome::AlreadyDone
                    | AssembleOutcome::AlreadyPresent
            )
        });
        Lifecycle::of(&counts.counts, published)
    }
}

/// `run --from LIST`: a job per source, or its failure.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct RunBatch {
    pub jobs: Vec<Item<RunReport>>,
    pub complete: usize,
    pub incomplete: usize,
    pub failed: usize,
}

/// How an assembly ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum AssembleOutcome {
    /// This assembler published the scene.
    Written,
    /// Another assembler holds the claim; nothing was uploaded.
    HeldBy,
    /// The scene was already published.
    AlreadyDone,
    /// The lease lapsed and was taken over mid-upload; the upload was aborted.
    LeaseLost,
    /// The scene was in place, published by an assembler that stopped before recording it.
    AlreadyPresent,
}

impl AssembleOutcome {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Written => "written",
            Self::HeldBy => "held_by",
            Self::AlreadyDone => "already_done",
            Self::LeaseLost => "lease_lost",
            Self::AlreadyPresent => "already_present",
        }
    }
}

/// The claim another assembler holds.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct HeldBy {
    pub owner: String,
    pub expires_at_ms: UnixMillis,
}

/// `assemble`: one job's scene assembled (or found published, or held by another).
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct AssembleSummary {
    pub job_id: JobId,
    pub outcome: AssembleOutcome,
    pub scene_key: String,
    pub scene_etag: Option<String>,
    pub scene_size: Option<u64>,
    /// How the scene was laid out (`Streamed`, `Spooled`, …), when this assembler built it.
    pub assembly_path: Option<String>,
    pub multipart: bool,
    pub build_s: f64,
    pub upload_s: f64,
    pub reduced_windows_reused: u64,
    pub claims_won_total: u64,
    pub claims_lost_total: u64,
    pub multipart_bytes_uploaded_total: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub held_by: Option<HeldBy>,
    /// The command's wall time (absent inside `run`, whose own figure covers it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub elapsed_s: Option<f64>,
}

impl AssembleSummary {
    pub fn of(
        r: &tilegate_assembler::AssembleReport,
        counters: &tilegate_core::metrics::Counters,
    ) -> Self {
        use tilegate_assembler::AssembleOutcome as A;
        use tilegate_core::metrics as m;
        let (outcome, held_by) = match &r.outcome {
            A::Written => (AssembleOutcome::Written, None),
            A::AlreadyDone => (AssembleOutcome::AlreadyDone, None),
            A::LeaseLost => (AssembleOutcome::LeaseLost, None),
            A::AlreadyPresent => (AssembleOutcome::AlreadyPresent, None),
            A::HeldBy { owner, expires_at } => (
                AssembleOutcome::HeldBy,
                Some(HeldBy {
                    owner: owner.clone(),
                    expires_at_ms: *expires_at,
                }),
            ),
        };
        Self {
            job_id: r.job_id.clone(),
            outcome,
            scene_key: r.scene_key.clone(),
            scene_etag: r.scene_etag.as_ref().map(ToString::to_string),
            scene_size: r.scene_size,
            assembly_path: r.path.map(|p| format!("{p:?}")),
            multipart: r.multipart,
            build_s: r.build_s,
            upload_s: r.upload_s,
            reduced_windows_reused: r.reduced_windows_reused,
            claims_won_total: counters.get(m::CLAIMS_WON),
            claims_lost_total: counters.get(m::CLAIMS_LOST),
            multipart_bytes_uploaded_total: counters.get(m::MULTIPART_BYTES_UPLOADED),
            held_by,
            elapsed_s: None,
        }
    }
}

impl Report for AssembleSummary {
    fn text(&self, _: &Out) -> String {
        let key = &self.scene_key;
        let etag = self.scene_etag.as_deref().unwrap_or("");
        match self.outcome {
            AssembleOutcome::Written => format!(
                "published {key} ({} bytes, {etag}) in {:.2} s; {} multipart bytes uploaded",
                self.scene_size.unwrap_or(0),
                self.elapsed_s.unwrap_or(self.build_s + self.upload_s),
                self.multipart_bytes_uploaded_total
            ),
            AssembleOutcome::AlreadyDone => format!("{key} was already published ({etag})"),
            AssembleOutcome::AlreadyPresent => format!(
                "{key} was already in place ({etag}), published by an assembler that stopped \
                 before recording it; recorded now, nothing uploaded"
            ),
            AssembleOutcome::HeldBy => format!(
                "another assembler holds the claim on {key} ({}); nothing uploaded",
                self.held_by.as_ref().map_or("", |h| h.owner.as_str())
            ),
            AssembleOutcome::LeaseLost => format!("{key}: lease lost mid-upload; upload aborted"),
        }
    }
}

/// A job that could not be assembled because windows are not recorded yet.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct NotAssembled {
    pub job_id: JobId,
    /// Always `incomplete`.
    pub outcome: Incomplete,
    pub manifest_rows: u64,
    pub windows: u64,
    /// The windows without a row (`ROW_COL`), when the assembler named them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub missing: Vec<String>,
    /// What `assemble JOB` says of it (exit status 4).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<ErrorDoc>,
}

/// The outcome `incomplete`.
#[derive(Debug, Clone, Copy, Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Incomplete {
    Incomplete,
}

/// The outcome `failed`.
#[derive(Debug, Clone, Copy, Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum FailedOutcome {
    Failed,
}

/// One job of `assemble` or `assemble --all`.
#[derive(Debug, Clone, Serialize, JsonSchema)]
#[serde(untagged)]
pub enum AssembleResult {
    Assembled(AssembleSummary),
    NotAssembled(NotAssembled),
    Failed {
        job_id: JobId,
        outcome: FailedOutcome,
        error: ErrorDoc,
    },
}

impl Report for AssembleResult {
    fn text(&self, out: &Out) -> String {
        match self {
            Self::Assembled(a) => a.text(out),
            Self::NotAssembled(n) => format!(
                "not assembled, {} of {} windows recorded",
                n.manifest_rows, n.windows
            ),
            Self::Failed { error, .. } => format!("error[{}] {}", error.reason, error.message),
        }
    }
}

/// `assemble --all`: every job waiting to be assembled.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct AssembleBatch {
    pub jobs: Vec<AssembleResult>,
    pub failed: usize,
}

impl AssembleBatch {
    /// One line of `assemble --all` for `r`.
    pub fn line(r: &AssembleResult, out: &Out) -> String {
        let job = match r {
            AssembleResult::Assembled(a) => &a.job_id,
            AssembleResult::NotAssembled(n) => &n.job_id,
            AssembleResult::Failed { job_id, .. } => job_id,
        };
        format!("job {job}: {}", r.text(out))
    }
}

/// `repair`: the tile written again, or left alone because it changed meanwhile.
#[derive(Debug, Clone, Serialize, JsonSchema)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum RepairReport {
    Written {
        key: String,
        e_tag: String,
        size: u64,
    },
    Superseded {
        key: String,
    },
}

impl Report for RepairReport {
    fn text(&self, _: &Out) -> String {
        match self {
            Self::Written { key, e_tag, .. } => format!("repaired {key} (now {e_tag})"),
            Self::Superseded { key } => {
                format!("{key} changed while it was recomputed; left the newer tile in place")
            }
        }
    }
}

/// `cleanup-uploads`: the stale multipart uploads aborted.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct CleanupReport {
    pub aborted: usize,
    pub uploads: Vec<AbortedUpload>,
}

/// One aborted upload, with what the ledger says of its key.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct AbortedUpload {
    pub key: String,
    pub upload_id: String,
    /// For an attempt's key: its row; none for a scene's (the claim gate's) or a foreign key.
    pub ledger: Option<UploadLedger>,
}

/// An aborted upload's attempt row.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct UploadLedger {
    pub attempt: String,
    /// The row's state; none when no row names the attempt (not tilegate's).
    pub state: Option<String>,
    pub note: String,
}

impl Report for CleanupReport {
    fn text(&self, _: &Out) -> String {
        let mut t = format!("aborted {} stale multipart upload(s)", self.aborted);
        for u in &self.uploads {
            if let Some(l) = &u.ledger
                && let Some(state) = &l.state
            {
                t.push_str(&format!(
                    "\n  {} (attempt {}, row {state})",
                    u.key, l.attempt
                ));
            }
        }
        t
    }
}

/// `announce`: what was delivered to the sinks and what is still pending.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct AnnounceReport {
    /// The job asked for (none: every recent job with pending announcements).
    pub job_id: Option<JobId>,
    /// The sinks, by the names recorded on job rows when they acknowledge.
    pub sinks: Vec<String>,
    /// Messages a sink acknowledged in this run.
    pub delivered: u64,
    /// (announcement, sink) pairs still unacknowledged: delivered by a later run.
    pub pending: u64,
    /// Why each pending one was not taken.
    pub failures: Vec<String>,
}

impl Report for AnnounceReport {
    fn text(&self, _: &Out) -> String {
        let mut s = format!(
            "delivered {} announcement(s) to {}; {} pending",
            self.delivered,
            self.sinks.join(", "),
            self.pending
        );
        for f in &self.failures {
            s.push_str(&format!("\n  not delivered: {f}"));
        }
        s
    }
}

impl Report for tilegate_pipeline::reconcile::PassReport {
    fn text(&self, _: &Out) -> String {
        let mut s = format!(
            "reconcile: {} open job(s): {} enqueued ({} windows), {} assembled ({} held by \
             another assembler), {} recorded incomplete, {} announcement(s) delivered ({} \
             pending), {} settled",
            self.open_jobs,
            self.jobs_enqueued,
            self.windows_enqueued,
            self.assembled,
            self.assembly_held,
            self.incomplete_recorded,
            self.delivered,
            self.pending,
            self.settled
        );
        for j in &self.stalled {
            s.push_str(&format!(
                "\n  stalled {}  {} ({})",
                j.job_id,
                j.stall.reason.as_str(),
                j.stall.count
            ));
        }
        for f in &self.failures {
            s.push_str(&format!("\n  failed {f}"));
        }
        s
    }
}

/// `ingest`: what the arrivals came to, when it stops.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct IngestReport {
    /// Messages taken from the arrivals queue.
    pub messages: u64,
    /// Files found in the watched directories.
    pub files: u64,
    /// Arrivals planned (their windows enqueued).
    pub planned: u64,
    /// Arrivals whose job was planned before: duplicates absorbed.
    pub duplicates: u64,
    /// Arrivals not for this configuration (filtered out, removal events).
    pub skipped: u64,
    /// Messages and files refused for good (dead-lettered messages, with their reasons).
    pub refused: u64,
    /// Messages left for redelivery after a fault that may pass.
    pub retried: u64,
    /// Each arrival, in order.
    pub arrivals: Vec<IngestLine>,
}

/// One arrival.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct IngestLine {
    /// `planned`, `duplicate`, `skipped` or `refused`.
    pub outcome: String,
    /// The object's URI, the file's path or the item's `collection/id`.
    pub arrival: String,
    pub job_id: Option<String>,
    pub windows: Option<u64>,
    pub enqueued: Option<u64>,
    /// Why it was skipped or refused.
    pub why: Option<String>,
    /// The refusal's stable reason code.
    pub reason: Option<String>,
    /// The product the arrival was added to (`ingest --product`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub product: Option<String>,
    /// Each product tile the arrival touches, planned over its scenes.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tiles: Vec<tilegate_planner::product::PlannedTile>,
}

impl IngestLine {
    /// The line a person reads as it happens.
    pub fn text(&self) -> String {
        if let Some(product) = &self.product {
            let new = self.tiles.iter().filter(|t| t.newly_planned).count();
            return format!(
                "{:<10} {} → product {product}: {} tile(s) touched, {new} with a new input set, \
                 {} window(s) enqueued",
                self.outcome,
                self.arrival,
                self.tiles.len(),
                self.enqueued.unwrap_or(0)
            );
        }
        match (self.outcome.as_str(), &self.job_id) {
            ("planned", Some(job)) => format!(
                "planned    {} → job {job}: {} windows, {} enqueued",
                self.arrival,
                self.windows.unwrap_or(0),
                self.enqueued.unwrap_or(0)
            ),
            ("duplicate", Some(job)) => {
                format!("duplicate  {} → job {job} (planned before)", self.arrival)
            }
            (outcome, _) => format!(
                "{outcome:<10} {}: {}{}",
                self.arrival,
                self.reason
                    .as_deref()
                    .map(|r| format!("{r}: "))
                    .unwrap_or_default(),
                self.why.as_deref().unwrap_or("")
            ),
        }
    }
}

impl Report for IngestReport {
    fn text(&self, _: &Out) -> String {
        format!(
            "ingest: {} message(s), {} file(s): {} planned, {} duplicate(s), {} skipped, {} refused, {} left for retry",
            self.messages,
            self.files,
            self.planned,
            self.duplicates,
            self.skipped,
            self.refused,
            self.retried
        )
    }
}

/// One recipe as `tilegate recipes` lists it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, schemars::JsonSchema)]
pub struct RecipeEntry {
    pub name: &'static str,
    /// `built-in`, or `registered` by this binary.
    pub kind: &'static str,
    pub summary: &'static str,
    /// The flags (built-in) or `--param` names (registered) it takes, with their meaning.
    pub params: Vec<RecipeParam>,
}

/// A flag or parameter of a recipe.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, schemars::JsonSchema)]
pub struct RecipeParam {
    pub name: &'static str,
    pub meaning: &'static str,
}

/// `tilegate recipes` as text: one block per recipe.
pub fn catalogue_text(all: &[RecipeEntry]) -> String {
    let mut s = String::new();
    for r in all {
        s.push_str(&format!("{} ({}): {}\n", r.name, r.kind, r.summary));
        for p in &r.params {
            s.push_str(&format!("    {:<18} {}\n", p.name, p.meaning));
        }
    }
    s.push_str("--recipe NAME picks one; a registered recipe takes --param NAME=VALUE.");
    s
}

/// `product plan`: the scenes added and the tiles planned.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct ProductPlanReport {
    pub product: String,
    pub grid: String,
    pub scenes: Vec<tilegate_planner::product::AddedScene>,
    pub tiles: Vec<tilegate_planner::product::PlannedTile>,
    pub elapsed_s: f64,
}

impl Report for tilegate_pipeline::product_index::ProductIndex {
    fn text(&self, _: &Out) -> String {
        let mut s = format!(
            "product {}: {} tile(s) indexed\n  STAC Collection  {}\n  MosaicJSON       {} \
             (zooms {}–{}, {} quadkey(s))",
            self.product,
            self.tiles,
            self.collection,
            self.mosaicjson,
            self.minzoom,
            self.maxzoom,
            self.quadkeys
        );
        for v in &self.vrts {
            s.push_str(&format!(
                "\n  VRT {:<12} {} (EPSG:{}, {} tile(s), {}×{})",
                v.zone, v.key, v.epsg, v.tiles, v.width, v.height
            ));
        }
        s
    }
}

impl Report for ProductPlanReport {
    fn text(&self, _: &Out) -> String {
        let new = self.tiles.iter().filter(|t| t.newly_planned).count();
        let mut s = format!(
            "product {} ({}): {} scene(s) added, {} tile(s) touched, {} with a new input set",
            self.product,
            self.grid,
            self.scenes.len(),
            self.tiles.len(),
            new
        );
        for t in &self.tiles {
            s.push_str(&format!(
                "\n  {} job {} — {} input(s), {}",
                t.tile,
                t.job_id,
                t.inputs,
                if t.newly_planned {
                    format!("planned, {} window(s) enqueued", t.enqueued)
                } else {
                    "unchanged".to_owned()
                }
            ));
        }
        s
    }
}

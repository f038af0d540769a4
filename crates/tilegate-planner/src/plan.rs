//! `plan`: pin the source, derive the job, write the job row (create-if-absent), and enqueue
//! one self-contained message per window (or, resuming, per window with no manifest row).

use std::collections::HashSet;
use std::sync::Arc;
use tilegate_cog::CogError;
use tilegate_core::Reason;
use tilegate_core::grid::GridError;
use tilegate_core::message::WindowMessage;
use tilegate_core::recipe::{Operation, RecipeError};
use tilegate_core::source::SceneMeta;
use tilegate_core::stall::STALL_AFTER_MS;
use tilegate_core::table::{CreateOutcome, JobRecord};
use tilegate_core::{
    Backends, Grid, KeyError, Prefix, Recipe, StoreError, Tenant, Window, now_millis,
};
use tilegate_source::{Origin, ResolvedSource, SourceError, SourcePolicy, resolve};

/// What to plan.
#[derive(Debug, Clone)]
pub struct PlanOptions {
    pub recipe: Recipe,
    pub prefix: Prefix,
    /// Whose job it is; its outputs go under the tenant's root of `prefix`.
    pub tenant: Tenant,
    /// Enqueue only windows that have no manifest row yet.
    pub resume: bool,
    /// For a STAC Item source: the assets that become the job's bands, in order.
    pub assets: Vec<String>,
    /// Partitions of the job's manifest (1: one partition keyed by the job ID); see
    /// [`tilegate_core::table::manifest_partition`].
    pub manifest_shards: u32,
    /// What the job may read: the tenant's source policy. The source is the operator's
    /// reference; a STAC Item's hrefs are the item's.
    pub policy: Arc<SourcePolicy>,
}

impl Default for PlanOptions {
    /// A copy of every band in the default window, under the default prefix and tenant, the
    /// default source policy, one manifest partition.
    fn default() -> Self {
        Self {
            recipe: Recipe::copy_all(),
            prefix: Prefix::default(),
            tenant: Tenant::default(),
            resume: false,
            assets: Vec::new(),
            manifest_shards: 1,
            policy: Arc::default(),
        }
    }
}

/// What planning did.
#[derive(Debug, Clone)]
pub struct Plan {
    pub job: JobRecord,
    /// False if the job row already existed ("already planned").
    pub newly_planned: bool,
    pub windows: u64,
    /// Windows that already had a manifest row before this plan.
    pub already_recorded: u64,
    pub enqueued: u64,
    /// Where the time went.
    pub timings: PlanTimings,
}

/// Seconds spent in each step of planning.
#[derive(Debug, Clone, Copy, Default)]
pub struct PlanTimings {
    /// Pinning the source: its content hash (local) or HEAD (S3).
    pub pin_s: f64,
    /// Opening it with GDAL for size, bands and CRS.
    pub probe_s: f64,
    /// Writing the job row.
    pub job_row_s: f64,
    /// Building and sending the window messages.
    pub enqueue_s: f64,
}

/// Why planning failed.
#[derive(Debug, thiserror::Error)]
pub enum PlanError {
    #[error(transparent)]
    Source(#[from] SourceError),
    #[error(transparent)]
    Raster(#[from] CogError),
    #[error("plan the window grid")]
    Grid(#[from] GridError),
    #[error("plan the recipe")]
    Recipe(#[from] RecipeError),
    #[error("plan the output location")]
    Key(#[from] KeyError),
    #[error("plan: storage")]
    Store(#[from] StoreError),
}

impl PlanError {
    /// Whether planning again later may succeed: a storage or network fault that may pass.
    pub fn is_retryable(&self) -> bool {
        match self {
            Self::Source(e) => e.is_retryable(),
            Self::Raster(e) => e.is_retryable(),
            Self::Store(e) => e.is_retryable(),
            Self::Grid(_) | Self::Recipe(_) | Self::Key(_) => false,
        }
    }

    /// A stable kebab-case name of the failure (the same names as dead-letter reasons).
    pub fn reason_code(&self) -> Reason {
        match self {
            Self::Source(e) => e.reason_code(),
            Self::Raster(e) => e.reason_code(),
            Self::Grid(GridError::EmptyScene { .. }) => Reason::ZeroSizedRaster,
            Self::Grid(GridError::BadWindow(_) | GridError::WindowTooLarge(_)) => Reason::BadWindow,
            Self::Recipe(RecipeError::BadExpression(_)) => Reason::BadExpression,
            Self::Recipe(_) => Reason::BadRecipe,
            Self::Key(_) => Reason::UnsafeKeySegment,
            Self::Store(e) => Reason::storage(e.is_retryable()),
        }
    }
}

/// Messages sent per queue call; the queue splits them into its provider's batches.
const SEND_CHUNK: usize = 1000;

/// Plan a job for `source` and enqueue its windows.
pub async fn plan(b: &Backends, source: &str, opts: &PlanOptions) -> Result<Plan, PlanError> {
    let clock = std::time::Instant::now();
    let resolved = resolve_source(b, source, opts).await?;
    plan_resolved(b, resolved, clock, opts, Enqueue::Always).await
}

/// [`plan`] of a source named by `origin` rather than the operator (a tenant's request to the
/// job service: `Origin::Document("message://…")`, which reaches no local file and only the
/// policy's listed hosts and buckets), with `enqueue`: [`Enqueue::Once`] for callers whose
/// requests repeat, so that a repeat enqueues nothing.
pub async fn plan_with(
    b: &Backends,
    source: &str,
    opts: &PlanOptions,
    enqueue: Enqueue,
    origin: Origin<'_>,
) -> Result<Plan, PlanError> {
    let clock = std::time::Instant::now();
    let resolved = resolve_source_from(b, source, opts, origin).await?;
    plan_resolved(b, resolved, clock, opts, enqueue).await
}

/// When [`plan_resolved`] enqueues a job's windows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Enqueue {
    /// Every time (`plan`, which plans again on request): all windows, or with
    /// [`PlanOptions::resume`] those not yet recorded.
    Always,
    /// Once per job (`ingest`, whose notifications repeat): the windows not yet recorded,
    /// unless the job row says they were all enqueued already; then the row says so. A row
    /// written by another planner and not yet marked is that planner's to enqueue while it is
    /// younger than a planner takes ([`STALL_AFTER_MS`]): a notification delivered twice at
    /// once enqueues nothing twice. A planner that died between the row and the mark is
    /// enqueued by a redelivery after that, or by the reconciler, never not at all.
    Once,
}

/// Plan a job for a source already pinned (`resolved`, pinning started at `started`).
pub async fn plan_resolved(
    b: &Backends,
    resolved: ResolvedSource,
    started: std::time::Instant,
    opts: &PlanOptions,
    enqueue: Enqueue,
) -> Result<Plan, PlanError> {
    let mut timings = PlanTimings {
        pin_s: started.elapsed().as_secs_f64(),
        ..PlanTimings::default()
    };
    let record = derive_resolved(resolved, opts, &mut timings).await?;
    plan_record(b, record, opts.resume, enqueue, timings).await
}

/// Write a derived job row (create-if-absent) and enqueue its windows as `enqueue` says:
/// what every plan does once its row is derived (a source's, a product tile's).
pub async fn plan_record(
    b: &Backends,
    record: JobRecord,
    resume: bool,
    enqueue: Enqueue,
    mut timings: PlanTimings,
) -> Result<Plan, PlanError> {
    let mut clock = std::time::Instant::now();
    let (job, newly_planned) = match b.jobs.create_job(&record).await? {
        CreateOutcome::Created => (record, true),
        CreateOutcome::AlreadyExists(existing) => (existing.row, false),
    };
    tracing::info!(job_id = %job.job_id, windows = job.grid.len(), newly_planned, "job planned");
    if newly_planned {
        warn_if_many_windows(&job);
    }
    // Crash tests: the row written, no window enqueued (a planner or an arrival lost here).
    tilegate_fault::point("after-job-row", 1);
    timings.job_row_s = clock.elapsed().as_secs_f64();
    clock = std::time::Instant::now();

    let mut plan = Plan {
        windows: job.grid.len(),
        already_recorded: 0,
        job,
        newly_planned,
        enqueued: 0,
        timings,
    };
    if enqueue == Enqueue::Once && plan.job.windows_enqueued {
        tracing::info!(job_id = %plan.job.job_id, "windows already enqueued: nothing to do");
        return Ok(plan);
    }
    let age_ms = now_millis().saturating_sub(plan.job.created_at);
    if enqueue == Enqueue::Once && !newly_planned && age_ms <= STALL_AFTER_MS {
        tracing::info!(
            job_id = %plan.job.job_id,
            row_age_s = age_ms / 1000,
            "the planner that wrote the row is enqueueing its windows: nothing to do \
             (if it died, a later delivery or the reconciler enqueues them)"
        );
        return Ok(plan);
    }
    if resume && !newly_planned && !plan.job.windows_enqueued && age_ms <= STALL_AFTER_MS {
        // A second `run` of the same job started beside the first: the first is enqueueing
        // its windows now. Wait for its mark, then send only what it did not (nothing, unless
        // it died), rather than a second copy of every window.
        wait_for_enqueue_mark(b, &mut plan.job).await?;
    }
    let only_missing = resume || enqueue == Enqueue::Once;
    let sent = enqueue_windows(b, &plan.job, only_missing).await?;
    (plan.enqueued, plan.already_recorded) = (sent.enqueued, sent.recorded);
    // Every plan marks the row once its windows are all enqueued: a row without the mark,
    // older than a planner takes, is one whose planner died (the reconciler enqueues it).
    if !plan.job.windows_enqueued {
        tilegate_core::announce::change_job(
            b.jobs.as_ref(),
            &plan.job.job_id,
            "mark the windows enqueued",
            |row| !std::mem::replace(&mut row.windows_enqueued, true),
        )
        .await?;
    }
    plan.timings.enqueue_s = clock.elapsed().as_secs_f64();
    Ok(plan)
}

/// Past this many windows a plan is said out loud: each window is an object, a queue message
/// and a manifest row, so a small `--window` on a large scene is rarely what was meant.
const MANY_WINDOWS: u64 = 4096;

/// Say (once, when the job is planned) that `job` makes many small tiles, and what 512 would.
fn warn_if_many_windows(job: &JobRecord) {
    let n = job.grid.len();
    if n <= MANY_WINDOWS {
        return;
    }
    let w = job.grid.window;
    let at_512 = Grid::new(job.scene.width, job.scene.height, 512).map_or(0, |g| g.len());
    tracing::warn!(
        job_id = %job.job_id,
        "this job has {n} windows of {w}×{w} px: {n} tile objects, queue messages and manifest \
         rows (--window 512 would make {at_512})"
    );
}

/// Wait until another planner marks `job`'s windows enqueued (the row is refreshed), or until
/// its row is older than a planner takes ([`STALL_AFTER_MS`]: that planner died).
async fn wait_for_enqueue_mark(b: &Backends, job: &mut JobRecord) -> Result<(), StoreError> {
    tracing::info!(job_id = %job.job_id, "another planner is enqueueing this job's windows: waiting for it");
    while now_millis().saturating_sub(job.created_at) <= STALL_AFTER_MS {
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        if let Some(row) = b.jobs.get_job(&job.job_id).await? {
            *job = row.row;
            if job.windows_enqueued {
                return Ok(());
            }
        }
    }
    Ok(())
}

/// The job `plan` would write for `source`, without writing anything: the source pinned and
/// probed, the recipe checked against it, the grid and the job's ID derived. `plan` writes
/// this row; `plan --estimate` prices it.
pub async fn derive(
    b: &Backends,
    source: &str,
    opts: &PlanOptions,
) -> Result<(JobRecord, PlanTimings), PlanError> {
    let clock = std::time::Instant::now();
    let resolved = resolve_source(b, source, opts).await?;
    let mut timings = PlanTimings {
        pin_s: clock.elapsed().as_secs_f64(),
        ..PlanTimings::default()
    };
    let record = derive_resolved(resolved, opts, &mut timings).await?;
    Ok((record, timings))
}

/// Pin the operator's `source`: a raster, or a STAC Item with `opts.assets`.
async fn resolve_source(
    b: &Backends,
    source: &str,
    opts: &PlanOptions,
) -> Result<ResolvedSource, PlanError> {
    resolve_source_from(b, source, opts, Origin::Operator).await
}

async fn resolve_source_from(
    b: &Backends,
    source: &str,
    opts: &PlanOptions,
    origin: Origin<'_>,
) -> Result<ResolvedSource, PlanError> {
    Ok(
        if !opts.assets.is_empty() || tilegate_source::stac::is_item(source) {
            tilegate_source::stac::resolve_item(b, &opts.policy, source, &opts.assets, origin)
                .await?
        } else {
            resolve(b, &opts.policy, source, origin).await?
        },
    )
}

/// The job row of a pinned source: probed, the recipe checked, the grid and ID derived.
async fn derive_resolved(
    resolved: ResolvedSource,
    opts: &PlanOptions,
    timings: &mut PlanTimings,
) -> Result<JobRecord, PlanError> {
    let mut clock = std::time::Instant::now();
    let mut lap = || {
        let s = clock.elapsed().as_secs_f64();
        clock = std::time::Instant::now();
        s
    };
    let gdal_path = resolved.gdal_path.clone();
    let operation = opts.recipe.operation.clone();
    // A pyramid's resampling is named to GDAL's warper: one of its names, or refused here.
    if let Operation::Pyramid(p) = &operation
        && !tilegate_core::recipe::WARP_RESAMPLINGS.contains(&p.resampling.as_str())
    {
        return Err(RecipeError::Custom(format!(
            "resampling `{}`: expected one of {}",
            p.resampling,
            tilegate_core::recipe::WARP_RESAMPLINGS.join(", ")
        ))
        .into());
    }
    let (scene, pyramid) = tokio::task::spawn_blocking(move || match operation {
        // The job's grid is the warp's target grid.
        Operation::Warp(spec) => tilegate_cog::warp_grid(&gdal_path, &spec).map(|s| (s, None)),
        // A pyramid's is its base zoom's, over whole windows of tiles.
        Operation::Pyramid(mut spec) => {
            tilegate_cog::pyramid_grid(&gdal_path, &mut spec).map(|s| (s, Some(spec)))
        }
        _ => tilegate_cog::probe(&gdal_path).map(|s| (s, None)),
    })
    .await
    .expect("planning task panicked")?;
    timings.probe_s = lap();
    opts.recipe.input_bands(scene.bands)?;
    let mut recipe = planned_recipe(&opts.recipe, &scene)?;
    if let Some(spec) = pyramid {
        check_pyramid(&spec, &scene)?;
        recipe.window = spec.tile_size * tilegate_core::recipe::PYRAMID_WINDOW_TILES;
        recipe.operation = Operation::Pyramid(spec);
    }
    recipe.window = Grid::fitted_window(scene.width, scene.height, recipe.window);
    let grid = Grid::new(scene.width, scene.height, recipe.window)?;
    let root = opts.tenant.root(&opts.prefix)?;
    let record = JobRecord::planned(
        resolved.info,
        recipe,
        grid,
        root,
        opts.tenant.clone(),
        scene,
        opts.manifest_shards,
    );
    Ok(record)
}

/// A pyramid's tiles are 8-bit images: the source's samples must be bytes, or one band of
/// elevation packed into RGB by `--encoding`.
fn check_pyramid(
    spec: &tilegate_core::recipe::PyramidSpec,
    scene: &SceneMeta,
) -> Result<(), PlanError> {
    let refuse = |s: String| Err(RecipeError::Custom(s).into());
    match spec.encoding {
        Some(e) if scene.bands != 1 => refuse(format!(
            "--encoding {} packs one band of elevation; the source has {} bands",
            e.name(),
            scene.bands
        )),
        None if scene.dtype != "Byte" => refuse(format!(
            "{} tiles hold 8-bit samples and the source is {}: scale it to Byte first, or give \
             --encoding terrarium|mapbox-terrain-rgb for elevation",
            spec.tile_format.extension().to_uppercase(),
            scene.dtype
        )),
        _ => Ok(()),
    }
}

/// The recipe as the job row keeps it, checked against the scene: an expression's bands must
/// exist, and a registered recipe declares its output for this source.
fn planned_recipe(recipe: &Recipe, scene: &SceneMeta) -> Result<Recipe, PlanError> {
    let mut recipe = recipe.clone();
    match &mut recipe.operation {
        Operation::Expr { expr, .. } => {
            let program = tilegate_expr::Program::parse(expr)
                .map_err(|e| RecipeError::BadExpression(e.to_string()))?;
            // A band the source lacks is the expression's fault: `bad-expression`, as a
            // malformed one is.
            if let Some(&band) = program.bands().iter().find(|&&b| b > scene.bands) {
                return Err(RecipeError::BadExpression(format!(
                    "b{band}: band {band} does not exist (the source has {} band(s), numbered \
                     from 1)",
                    scene.bands
                ))
                .into());
            }
        }
        Operation::Custom {
            name,
            params,
            output,
            ..
        } => {
            let custom = tilegate_cog::recipes::get(name)
                .ok_or_else(|| RecipeError::Custom(format!("no recipe `{name}` is registered")))?;
            let source = tilegate_cog::recipes::SourceSpec {
                bands: scene.bands,
                dtype: scene.dtype.clone(),
                nodata: vec![scene.nodata; scene.bands as usize],
            };
            let spec = custom
                .output(params, &source)
                .map_err(|e| RecipeError::Custom(format!("recipe `{name}`: {e}")))?;
            if spec.bands == 0 || tilegate_cog::Dtype::from_name(&spec.dtype).is_none() {
                return Err(RecipeError::Custom(format!(
                    "recipe `{name}` declares {} bands of `{}`",
                    spec.bands, spec.dtype
                ))
                .into());
            }
            *output = Some(spec);
        }
        _ => {}
    }
    Ok(recipe)
}

/// Enqueue one message per window of `job` — or, with `only_missing`, per window that has no
/// manifest row and no message waiting on the queue (when the queue can say: see
/// [`WorkQueue::holding`](tilegate_core::queue::WorkQueue::holding)). Says what it sent and
/// why it left the rest. Used by `plan`, `--resume`, `backfill` and the reconciler;
/// duplicates are allowed and absorbed by the workers, but a run resumed after an interrupt
/// does not send a window again whose message the interrupted run left waiting.
pub async fn enqueue_windows(
    b: &Backends,
    job: &JobRecord,
    only_missing: bool,
) -> Result<Sent, StoreError> {
    let recorded: HashSet<_> = b
        .manifest
        .list_entries(&job.job_id)
        .await?
        .into_iter()
        .map(|e| e.row.window)
        .collect();
    let queued = if only_missing {
        windows_queued(b, job).await?
    } else {
        Some(HashSet::new())
    };
    // Sent before, and not known to be gone (every window asked for, or a queue that cannot
    // say what it holds): the first copies may still be waiting, so these look for the tile
    // before encoding (a first delivery of an `unrecorded` message does not).
    let maybe_twice = job.windows_enqueued && (!only_missing || queued.is_none());
    let queued = queued.unwrap_or_default();
    let mut enqueued = 0u64;
    let mut chunk = Vec::with_capacity(SEND_CHUNK);
    for w in job.grid.windows() {
        let unrecorded = !recorded.contains(&w);
        if only_missing && (!unrecorded || queued.contains(&w)) {
            continue;
        }
        chunk.push(
            WindowMessage {
                unrecorded: unrecorded && !maybe_twice,
                ..WindowMessage::for_job(job, w)
            }
            .encode(),
        );
        if chunk.len() == SEND_CHUNK {
            b.queue.send_batch(&chunk).await?;
            enqueued += chunk.len() as u64;
            chunk.clear();
        }
    }
    if !chunk.is_empty() {
        b.queue.send_batch(&chunk).await?;
        enqueued += chunk.len() as u64;
    }
    tracing::info!(job_id = %job.job_id, enqueued, only_missing, still_queued = queued.len(), "windows enqueued");
    Ok(Sent {
        enqueued,
        recorded: recorded.len() as u64,
        queued: queued.len() as u64,
    })
}

/// What [`enqueue_windows`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sent {
    /// Messages sent.
    pub enqueued: u64,
    /// Windows with a manifest row (not sent when only the missing were asked for).
    pub recorded: u64,
    /// Windows without a row whose message is still on the queue (not sent again).
    pub queued: u64,
}

/// The windows of `job` whose tile messages are on the queue now (visible or in flight);
/// `None` when the queue cannot list what it holds.
async fn windows_queued(
    b: &Backends,
    job: &JobRecord,
) -> Result<Option<HashSet<Window>>, StoreError> {
    let Some(bodies) = b.queue.holding(job.job_id.as_str()).await? else {
        return Ok(None);
    };
    Ok(Some(
        bodies
            .iter()
            .filter_map(|body| WindowMessage::decode(body).ok())
            .filter(|m| m.job_id == job.job_id && m.attempt.is_none())
            .map(|m| m.window)
            .collect(),
    ))
}

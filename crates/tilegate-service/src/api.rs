//! The `/v1` operations. Each one proves its caller first ([`Caller`]), and every job it
//! touches is looked up through [`job_of`], which answers another tenant's job exactly as a
//! missing one.

use crate::Service;
use crate::auth::Caller;
use crate::error::{ApiError, shown};
use crate::extract::{Body, JobPath, Query};
use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Html;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::sync::Arc;
use std::time::Duration;
use tilegate_core::ledger::{AttemptId, Retention, Subject};
use tilegate_core::lifecycle::{Counts, Lifecycle};
use tilegate_core::object::ObjectStoreExt as _;
use tilegate_core::recipe::Recipe;
use tilegate_core::table::JobRecord;
use tilegate_core::{JobId, Prefix, Reason, UnixMillis, Window, now_millis};
use tilegate_planner::{Enqueue, PlanError, PlanOptions};
use tilegate_report::html::{self, Extras};
use tilegate_report::status::{self, JobStatus};
use tilegate_source::Origin;

/// Longest source reference a request may name.
pub const MAX_SOURCE_LEN: usize = 2048;

/// A job to plan for the caller's tenant.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct NewJob {
    /// What to tile: an `s3://`, `gs://`, `az://` or `https://` raster or STAC Item. The
    /// tenant's source policy decides what may be read; a request never reaches a local file,
    /// and reaches only the hosts and buckets the policy lists.
    #[schemars(length(min = 1, max = 2048))]
    pub source: String,
    /// The recipe (default: a copy of every band, DEFLATE, 512-pixel windows).
    #[serde(default)]
    pub recipe: Option<Recipe>,
    /// Where the outputs go, under the tenant's root (default `tilegate`): `/`-separated
    /// segments of `A-Z a-z 0-9 . _ -`.
    #[serde(default)]
    #[schemars(
        length(min = 1, max = 896),
        regex(
            pattern = r"^[A-Za-z0-9_-][A-Za-z0-9._-]{0,127}(/[A-Za-z0-9_-][A-Za-z0-9._-]{0,127}){0,15}$"
        )
    )]
    pub prefix: Option<String>,
    /// For a STAC Item: the assets that become the job's bands, in order.
    #[serde(default)]
    #[schemars(length(max = 64))]
    pub assets: Vec<String>,
}

/// Where a job's views are.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct JobLinks {
    #[serde(rename = "self")]
    pub this: String,
    pub report: String,
    pub stac: String,
    pub events: String,
    pub urls: String,
    /// A small PNG of the published scene.
    pub thumbnail: String,
}

/// A job, briefly.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct JobSummary {
    pub job_id: String,
    pub tenant: String,
    /// The source, with any credentials it carried removed.
    pub source: String,
    pub prefix: String,
    pub created_at: UnixMillis,
    /// Where the job is: the same state `tilegate status` and the job's status give it.
    pub lifecycle: Lifecycle,
    /// Its windows: recorded, dead-lettered (by the job's counters), missing.
    #[serde(flatten)]
    pub counts: Counts,
    /// Every window is recorded.
    pub complete: bool,
    /// The scene is published.
    pub published: bool,
    pub links: JobLinks,
}

/// `POST /v1/jobs`'s answer.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct Planned {
    /// False when the job already existed (the same source, recipe and prefix).
    pub created: bool,
    /// Windows sent to the work queue by this request.
    pub enqueued: u64,
    pub job: JobSummary,
}

/// The caller's jobs, newest first.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct JobList {
    pub jobs: Vec<JobSummary>,
}

/// `GET /v1/jobs`'s parameters.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ListParams {
    /// At most this many jobs (default 100).
    #[serde(default, deserialize_with = "crate::extract::whole")]
    #[schemars(range(min = 1, max = 1000))]
    pub limit: Option<u64>,
}

/// A signed URL's request.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct UrlRequest {
    /// The window as ROW_COL (e.g. `3_12`); absent: the scene.
    #[schemars(regex(pattern = r"^[0-9]{1,9}_[0-9]{1,9}$"))]
    pub window: Option<String>,
    /// How long the URL works, in seconds (default 900; at most 7 days, and never past a
    /// regenerated output's retention).
    #[serde(default, deserialize_with = "crate::extract::whole")]
    #[schemars(range(min = 1, max = 604800))]
    pub expires_s: Option<u64>,
}

/// A signed URL.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct SignedUrl {
    pub url: String,
    /// The object it reads.
    pub key: String,
    /// The regenerated attempt it reads; empty for the job's own output.
    pub attempt: String,
    pub expires_at: UnixMillis,
    /// The output's retention, not the request, set the expiry.
    pub capped_by_retention: bool,
}

/// A regeneration's request: a new attempt of one window, produced by a worker.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RegenerateRequest {
    /// The window as ROW_COL (e.g. `3_12`).
    #[schemars(regex(pattern = r"^[0-9]{1,9}_[0-9]{1,9}$"))]
    pub window: String,
    /// Publish the attempt when it is uploaded (default true); false: `accept` publishes it.
    #[serde(default)]
    pub accept: Option<bool>,
}

/// A regeneration sent to the workers.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct Regenerating {
    pub job_id: String,
    pub window: String,
    pub attempt: String,
    /// The attempt's own key (immutable).
    pub key: String,
    pub state: String,
}

/// An accept's request: publish an uploaded attempt.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AcceptRequest {
    /// The window as ROW_COL; absent: the scene.
    #[schemars(regex(pattern = r"^[0-9]{1,9}_[0-9]{1,9}$"))]
    pub window: Option<String>,
    /// The attempt to publish (32 lower-case hexadecimal digits).
    #[schemars(regex(pattern = r"^[0-9a-f]{32}$"))]
    pub attempt: String,
}

/// What an accept did.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct Accepted {
    pub job_id: String,
    pub subject: String,
    pub attempt: String,
    /// `published`, `already-current`, `superseded`, `not-publishable` or `outdated`.
    pub outcome: String,
}

/// The job `id`, if the caller may see it; otherwise the answer a missing job gets.
pub async fn job_of(s: &Service, caller: &Caller, id: &str) -> Result<JobRecord, ApiError> {
    let Ok(job_id) = JobId::parse(id) else {
        return Err(ApiError::no_such_job(id));
    };
    match s.backends.jobs.get_job(&job_id).await? {
        Some(j) if caller.sees(&j.row) => Ok(j.row),
        _ => Err(ApiError::no_such_job(id)),
    }
}

fn links(id: &JobId) -> JobLinks {
    let base = format!("/v1/jobs/{id}");
    JobLinks {
        report: format!("{base}/report"),
        stac: format!("{base}/stac"),
        events: format!("{base}/events"),
        urls: format!("{base}/urls"),
        thumbnail: format!("{base}/thumbnail.png"),
        this: base,
    }
}

/// Windows recorded for `job`, from its manifest partitions' row counters: one small read
/// however many rows the job (or any other) has — never a count of the rows.
pub async fn recorded(s: &Service, job: &JobId) -> Result<u64, ApiError> {
    Ok(s.backends.manifest.recorded_all(job).await?.iter().sum())
}

/// A job's state and counts from what a tenant's request may read: its row, its manifest
/// partitions' row counters, its own counters (the windows its workers dead-lettered) and its
/// scene pointer — the figures `GET /v1/jobs/{id}` reads, put through the one [`Lifecycle`]
/// and [`Counts`] every output uses.
pub async fn state_of(s: &Service, job: &JobRecord) -> Result<(Lifecycle, Counts), ApiError> {
    let recorded = recorded(s, &job.job_id).await?;
    let counters = s.backends.counters.get_counters(&job.job_id).await?;
    let dead = counters
        .get(tilegate_core::metrics::DEAD_LETTERED)
        .copied()
        .unwrap_or(0);
    let counts = Counts::new(job.grid.len(), recorded, dead);
    let published = job.scene_output.is_some()
        || s.backends
            .ledger
            .get_pointer(&job.job_id, Subject::Scene)
            .await?
            .is_some();
    Ok((Lifecycle::of(&counts, published), counts))
}

async fn summary(s: &Service, job: &JobRecord) -> Result<JobSummary, ApiError> {
    let (lifecycle, counts) = state_of(s, job).await?;
    Ok(JobSummary {
        job_id: job.job_id.to_string(),
        tenant: job.tenant.to_string(),
        source: tilegate_core::redact::redact(&job.source.uri).into_owned(),
        prefix: job.prefix.as_str().to_owned(),
        created_at: job.created_at,
        lifecycle,
        counts,
        complete: counts.complete(),
        published: lifecycle == Lifecycle::Published,
        links: links(&job.job_id),
    })
}

/// The newest `limit` jobs the caller may see: its tenant's, read through the table's tenant
/// index (never other tenants' rows); every tenant's for an operator.
async fn visible_jobs(
    s: &Service,
    caller: &Caller,
    limit: usize,
) -> Result<Vec<JobRecord>, ApiError> {
    let rows = match caller.role {
        crate::Role::Operator => s.backends.jobs.list_jobs(limit).await?,
        crate::Role::Tenant => s.backends.jobs.list_jobs_of(&caller.tenant, limit).await?,
    };
    Ok(rows
        .into_iter()
        .map(|v| v.row)
        .filter(|j| caller.sees(j))
        .collect())
}

/// Whether `s` is what the document's window pattern admits, `^[0-9]{1,9}_[0-9]{1,9}$`.
fn window_shaped(s: &str) -> bool {
    s.split_once('_').is_some_and(|(r, c)| {
        [r, c]
            .iter()
            .all(|p| (1..=9).contains(&p.len()) && p.bytes().all(|b| b.is_ascii_digit()))
    })
}

/// Whether `s` is what the document's prefix pattern admits: 1 to 16 `/`-separated segments
/// of 1 to 128 of `A-Z a-z 0-9 . _ -`, none starting with `.`.
fn prefix_shaped(s: &str) -> bool {
    let segments: Vec<&str> = s.split('/').collect();
    s.len() <= 896
        && segments.len() <= 16
        && segments.iter().all(|seg| {
            (1..=128).contains(&seg.len())
                && !seg.starts_with('.')
                && seg
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b))
        })
}

fn window_of(job: &JobRecord, text: &str) -> Result<Window, ApiError> {
    let w = Some(text)
        .filter(|t| window_shaped(t))
        .and_then(Window::parse)
        .ok_or_else(|| {
            ApiError::bad_request(
                Reason::BadWindow,
                format!(
                    "`{}` is not a window: expected ROW_COL, e.g. 3_12",
                    shown(text)
                ),
            )
        })?;
    if !job.grid.contains(w) {
        return Err(ApiError::unprocessable(
            Reason::WindowOutsideScene,
            format!(
                "window {w} is outside job {}'s {}×{} grid",
                job.job_id,
                job.grid.rows(),
                job.grid.cols()
            ),
        ));
    }
    Ok(w)
}

fn subject_of(job: &JobRecord, window: Option<&str>) -> Result<Subject, ApiError> {
    Ok(match window {
        None => Subject::Scene,
        Some(w) => Subject::Window(window_of(job, w)?),
    })
}

fn plan_error(e: PlanError) -> ApiError {
    let reason = e.reason_code();
    let message = tilegate_core::error::chain(&e);
    match reason {
        Reason::StorageUnavailable => ApiError::unavailable(&e),
        _ => ApiError::unprocessable(reason, message),
    }
}

fn ledger_error(e: tilegate_ledger::LedgerError) -> ApiError {
    match e {
        // Another tenant's row: the same answer as a missing job.
        tilegate_ledger::LedgerError::NotYourTenant { job, .. } => {
            ApiError::no_such_job(job.as_str())
        }
        tilegate_ledger::LedgerError::Store(e) => e.into(),
        e => ApiError::new(StatusCode::CONFLICT, e.reason_code(), e.to_string()),
    }
}

/// `POST /v1/jobs`: plan a job for the caller's tenant.
pub async fn create_job(
    State(s): State<Arc<Service>>,
    caller: Caller,
    Body(req): Body<NewJob>,
) -> Result<Json<Planned>, ApiError> {
    if req.source.is_empty() || req.source.chars().count() > MAX_SOURCE_LEN {
        return Err(ApiError::bad_request(
            Reason::BadRequest,
            format!("`source` must be 1 to {MAX_SOURCE_LEN} bytes"),
        ));
    }
    if req.assets.len() > 64 {
        return Err(ApiError::bad_request(
            Reason::BadRequest,
            "`assets` names at most 64 assets",
        ));
    }
    let prefix = match req.prefix.as_deref() {
        None => Prefix::default(),
        Some(p) if !prefix_shaped(p) => {
            return Err(ApiError::bad_request(
                Reason::UnsafeKeySegment,
                format!(
                    "`prefix` `{}` is not `/`-separated segments of A-Z a-z 0-9 . _ -",
                    shown(p)
                ),
            ));
        }
        // Shaped, but refused (a reserved segment): well formed, not accepted.
        Some(p) => Prefix::parse(p).map_err(|e| {
            ApiError::unprocessable(Reason::UnsafeKeySegment, format!("`prefix`: {e}"))
        })?,
    };
    if prefix.as_str().split('/').next() == Some(crate::keys::KEYS_SEGMENT) {
        return Err(ApiError::unprocessable(
            Reason::UnsafeKeySegment,
            format!(
                "`prefix`: the segment `{}` is the service's own",
                crate::keys::KEYS_SEGMENT
            ),
        ));
    }
    // A request never reaches the server's files: said here in the request's own words (the
    // policy names the rule for a message, of which a request is one kind).
    if let Ok(tilegate_core::reference::Reference::Local(_)) =
        tilegate_core::reference::Reference::parse(&req.source)
    {
        return Err(ApiError::unprocessable(
            Reason::SourceForbidden,
            format!(
                "forbidden by the source policy (local-file-from-request): `{}` is a file on \
                 the server, which a request may not name; name an http(s), s3, gs or az \
                 source the tenant's policy admits (`tilegate serve --demo` serves a sample \
                 scene to try)",
                shown(&req.source)
            ),
        ));
    }
    let recipe = req.recipe.unwrap_or_else(Recipe::copy_all);
    // Jobs in flight: the caller's tenant's jobs not yet published, all of them, read through
    // the tenant index. A request for one of them again (the same source, recipe and prefix)
    // is answered; a new one waits.
    let in_flight: Vec<JobRecord> = s
        .backends
        .jobs
        .list_jobs_of(&caller.tenant, usize::MAX)
        .await?
        .into_iter()
        .map(|v| v.row)
        .filter(|j| j.scene_output.is_none())
        .collect();
    let again = in_flight
        .iter()
        .any(|j| j.source.uri == req.source && j.recipe == recipe && j.prefix == prefix);
    if in_flight.len() >= s.limits.max_jobs_in_flight && !again {
        return Err(ApiError::too_many(
            Reason::TooManyJobsInFlight,
            format!(
                "tenant {} has {} jobs in flight, as many as this service allows",
                caller.tenant,
                in_flight.len()
            ),
            60,
        ));
    }
    let opts = PlanOptions {
        recipe,
        prefix,
        tenant: caller.tenant.clone(),
        resume: true,
        assets: req.assets,
        manifest_shards: 1,
        policy: s.policies.of(caller.tenant.as_str()),
    };
    // The source is the tenant's word, not the operator's: it is judged as a document that
    // arrived in a message is.
    let origin = format!("message://service/{}", caller.tenant);
    let p = tilegate_planner::plan_with(
        &s.backends,
        &req.source,
        &opts,
        Enqueue::Once,
        Origin::Document(&origin),
    )
    .await
    .map_err(plan_error)?;
    tilegate_pipeline::run::record_job_counts(
        &s.backends,
        &p.job.job_id,
        &tilegate_core::metrics::Counters::new(),
    )
    .await;
    tracing::info!(target: "tilegate::audit", tenant = %caller.tenant, caller = ?caller.credential,
        job = %p.job.job_id, created = p.newly_planned, enqueued = p.enqueued, "audit: job planned");
    Ok(Json(Planned {
        created: p.newly_planned,
        enqueued: p.enqueued,
        job: summary(&s, &p.job).await?,
    }))
}

/// `GET /v1/jobs`: the caller's jobs (every tenant's for an operator), newest first.
pub async fn list_jobs(
    State(s): State<Arc<Service>>,
    caller: Caller,
    Query(q): Query<ListParams>,
) -> Result<Json<JobList>, ApiError> {
    let limit = crate::extract::within("limit", q.limit, 1..=1000)?.unwrap_or(100) as usize;
    let mut jobs = Vec::new();
    for j in &visible_jobs(&s, &caller, limit).await? {
        jobs.push(summary(&s, j).await?);
    }
    Ok(Json(JobList { jobs }))
}

/// What the service reads for a status: the job's own rows and counters, and the work
/// queue's depth for an operator only. Never the shared dead-letter queue (a tenant's
/// request would cost a read of every job's letters, and hide them from their readers).
fn reach(caller: &Caller) -> status::Reach {
    status::Reach {
        queue_depth: caller.role == crate::Role::Operator,
        ..status::Reach::JOB
    }
}

/// `GET /v1/jobs/{id}`: the job's status.
pub async fn get_job(
    State(s): State<Arc<Service>>,
    caller: Caller,
    JobPath(id): JobPath,
) -> Result<Json<JobStatus>, ApiError> {
    let job = job_of(&s, &caller, &id).await?;
    let g = status::gather_with(&s.backends, job, now_millis(), reach(&caller)).await?;
    Ok(Json(g.status(&s.prices)))
}

/// `GET /v1/jobs/{id}/report`: the job's report page.
pub async fn report(
    State(s): State<Arc<Service>>,
    caller: Caller,
    JobPath(id): JobPath,
) -> Result<Html<String>, ApiError> {
    let job = job_of(&s, &caller, &id).await?;
    let now = now_millis();
    let g = status::gather_with(&s.backends, job, now, reach(&caller)).await?;
    let st = g.status(&s.prices);
    Ok(Html(html::render(
        &g,
        &st,
        &Extras {
            thumbnail_png: None,
            generated_at: Some(now),
            map_tiles: Vec::new(),
        },
    )))
}

/// `GET /v1/jobs/{id}/stac`: the STAC Item of the job's published scene.
pub async fn stac(
    State(s): State<Arc<Service>>,
    caller: Caller,
    JobPath(id): JobPath,
) -> Result<Json<serde_json::Value>, ApiError> {
    let job = job_of(&s, &caller, &id).await?;
    let Some(scene) = &job.scene_output else {
        return Err(ApiError::new(
            StatusCode::CONFLICT,
            Reason::NoScene,
            format!("job {} has no assembled scene yet", job.job_id),
        ));
    };
    let key = tilegate_stac::item_key(&scene.key)?;
    let bytes = s.backends.objects.get_bytes(&key).await?.bytes;
    let item = serde_json::from_slice(&bytes).map_err(|e| {
        tracing::warn!(key = %key.as_str(), error = %e, "a stored STAC Item does not parse");
        ApiError::new(
            StatusCode::CONFLICT,
            Reason::NoScene,
            format!("job {}'s STAC Item is unreadable", job.job_id),
        )
    })?;
    Ok(Json(item))
}

/// `POST /v1/jobs/{id}/urls`: a signed, expiring URL of a window's tile or the scene, as a
/// reader gets it now. Every URL issued is one audit line (never the URL itself).
pub async fn sign_url(
    State(s): State<Arc<Service>>,
    caller: Caller,
    JobPath(id): JobPath,
    Body(req): Body<UrlRequest>,
) -> Result<Json<SignedUrl>, ApiError> {
    let job = job_of(&s, &caller, &id).await?;
    let subject = subject_of(&job, req.window.as_deref())?;
    let expires_s =
        crate::extract::within("expires_s", req.expires_s, 1..=7 * 24 * 3600)?.unwrap_or(900);
    let (g, url) = published_url(&s, &job, subject, Duration::from_secs(expires_s)).await?;
    tracing::info!(target: "tilegate::audit", tenant = %caller.tenant, caller = ?caller.credential,
        job = %job.job_id, subject = %subject, object = %g.key, expires_at = g.expires_at, "audit: url issued");
    Ok(Json(SignedUrl {
        url,
        key: g.key,
        attempt: g.attempt,
        expires_at: g.expires_at,
        capped_by_retention: g.capped_by_retention,
    }))
}

/// A reader's URL of `job`'s published `subject`, valid for `expires`: the ledger's grant (the
/// job's tenant signs: an operator reads as the job's owner) and the URL — the store's, or,
/// for a store that signs nothing (the embedded store's `file://` path, which no expiry ends),
/// a link of the service's own to this job's object only.
pub(crate) async fn published_url(
    s: &Service,
    job: &JobRecord,
    subject: Subject,
    expires: Duration,
) -> Result<(tilegate_ledger::url::Grant, String), ApiError> {
    let g = tilegate_ledger::url::grant_published(
        &s.backends,
        job,
        subject,
        &job.tenant,
        expires,
        now_millis(),
    )
    .await
    .map_err(ledger_error)?;
    let url = match &s.links {
        Some(links) if !g.expiring => links.sign(job, &g.key, g.expires_at)?,
        _ => g.url.clone(),
    };
    Ok((g, url))
}

/// A PNG image.
#[derive(Debug)]
pub struct Png(pub Vec<u8>);

impl axum::response::IntoResponse for Png {
    fn into_response(self) -> axum::response::Response {
        let mut r = self.0.into_response();
        r.headers_mut().insert(
            http::header::CONTENT_TYPE,
            http::HeaderValue::from_static("image/png"),
        );
        r
    }
}

impl aide::OperationOutput for Png {
    type Inner = Vec<u8>;

    fn operation_response(
        _ctx: &mut aide::generate::GenContext,
        _op: &mut aide::openapi::Operation,
    ) -> Option<aide::openapi::Response> {
        Some(crate::error::documented_response(
            "A PNG picture of the scene, at most about 256 pixels on its longer side.",
            "image/png",
            schemars::json_schema!({"type": "string", "contentMediaType": "image/png"}),
        ))
    }

    fn inferred_responses(
        ctx: &mut aide::generate::GenContext,
        op: &mut aide::openapi::Operation,
    ) -> Vec<(Option<aide::openapi::StatusCode>, aide::openapi::Response)> {
        Self::operation_response(ctx, op)
            .map(|r| vec![(Some(aide::openapi::StatusCode::Code(200)), r)])
            .unwrap_or_default()
    }
}

/// `GET /v1/jobs/{id}/thumbnail.png`: a small picture of the published scene, drawn by GDAL
/// from its smallest overview (no full-resolution pixel is read).
pub async fn thumbnail(
    State(s): State<Arc<Service>>,
    caller: Caller,
    JobPath(id): JobPath,
) -> Result<Png, ApiError> {
    let job = job_of(&s, &caller, &id).await?;
    let Some(scene) = &job.scene_output else {
        return Err(ApiError::new(
            StatusCode::CONFLICT,
            Reason::NoScene,
            format!("job {} has no assembled scene yet", job.job_id),
        ));
    };
    let Some(root) = &s.objects_gdal_root else {
        return Err(ApiError::new(
            StatusCode::CONFLICT,
            Reason::NoScene,
            "this service draws no thumbnails (it does not know where GDAL reads its store)",
        ));
    };
    let full = format!("{root}{}", scene.key);
    let path = tilegate_core::source::gdal_path_of(&full).unwrap_or(full);
    let png = tokio::task::spawn_blocking(move || tilegate_cog::thumbnail_png(&path, 256))
        .await
        .map_err(|e| {
            ApiError::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                Reason::Unexpected,
                format!("drawing the thumbnail failed: {e}"),
            )
        })?
        .map_err(|e| {
            tracing::warn!(job = %job.job_id, key = %scene.key,
                error = %tilegate_core::error::chain(&e), "no thumbnail of the scene");
            ApiError::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                Reason::GdalError,
                format!("job {}'s scene could not be drawn", job.job_id),
            )
        })?;
    Ok(Png(png))
}

/// `POST /v1/jobs/{id}/regenerate`: a new attempt of one window, sent to the workers.
pub async fn regenerate(
    State(s): State<Arc<Service>>,
    caller: Caller,
    JobPath(id): JobPath,
    Body(req): Body<RegenerateRequest>,
) -> Result<Json<Regenerating>, ApiError> {
    let job = job_of(&s, &caller, &id).await?;
    let window = window_of(&job, &req.window)?;
    let r = tilegate_worker::regenerate::Request {
        id: None,
        retention: Retention::default(),
        accept: req.accept.unwrap_or(true),
        policy: s.policies.of(job.tenant.as_str()),
    };
    let row = tilegate_worker::regenerate::enqueue(&s.backends, &job, window, r, now_millis())
        .await
        .map_err(|e| match e {
            tilegate_worker::regenerate::RegenerateError::Ledger(e) => ledger_error(e),
            e => ApiError::new(StatusCode::CONFLICT, e.reason_code(), e.to_string()),
        })?;
    tracing::info!(target: "tilegate::audit", tenant = %caller.tenant, caller = ?caller.credential,
        job = %job.job_id, window = %window, attempt = %row.row.attempt, "audit: regeneration enqueued");
    Ok(Json(Regenerating {
        job_id: job.job_id.to_string(),
        window: window.to_string(),
        attempt: row.row.attempt.to_string(),
        key: row.row.key.clone(),
        state: row.row.state.name().to_owned(),
    }))
}

/// `POST /v1/jobs/{id}/accept`: publish an uploaded attempt of a window or the scene.
pub async fn accept(
    State(s): State<Arc<Service>>,
    caller: Caller,
    JobPath(id): JobPath,
    Body(req): Body<AcceptRequest>,
) -> Result<Json<Accepted>, ApiError> {
    use tilegate_core::ledger::PublishOutcome as P;
    let job = job_of(&s, &caller, &id).await?;
    let subject = subject_of(&job, req.window.as_deref())?;
    let attempt = Some(req.attempt.as_str())
        .filter(|a| {
            a.len() == 32
                && a.bytes()
                    .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
        })
        .and_then(|a| AttemptId::parse(a).ok())
        .ok_or_else(|| {
            ApiError::bad_request(
                Reason::BadAttemptId,
                format!(
                    "`{}` is not an attempt ID (32 lower-case hexadecimal digits)",
                    shown(&req.attempt)
                ),
            )
        })?;
    let out = tilegate_ledger::attempt::accept_current(
        &s.backends,
        &job.job_id,
        subject,
        &attempt,
        now_millis(),
    )
    .await
    .map_err(ledger_error)?;
    let outcome = match out {
        P::Published { .. } => "published",
        P::AlreadyCurrent { .. } => "already-current",
        P::Superseded { .. } => "superseded",
        P::NotPublishable(_) => "not-publishable",
        P::Outdated { .. } => "outdated",
    };
    tracing::info!(target: "tilegate::audit", tenant = %caller.tenant, caller = ?caller.credential,
        job = %job.job_id, subject = %subject, attempt = %attempt, outcome, "audit: accept");
    Ok(Json(Accepted {
        job_id: job.job_id.to_string(),
        subject: subject.to_string(),
        attempt: attempt.to_string(),
        outcome: outcome.to_owned(),
    }))
}

/// `GET /healthz`: the process is up (no backend is asked).
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct Health {
    pub ok: bool,
}

pub async fn healthz() -> Json<Health> {
    Json(Health { ok: true })
}

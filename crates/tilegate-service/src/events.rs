//! `GET /v1/jobs/{id}/events`: a job's progress as server-sent events. One `progress` event
//! at once and one whenever the figures change, comments as keep-alives, and the stream ends
//! after the event that says the scene is published, or after the service's longest stream
//! (a client reconnects; behind API Gateway a response must end within its timeout).
//!
//! A stream costs what the requests it replaces would: each look after the first spends one
//! of the tenant's requests (a look over the tenant's rate is skipped, not made), proves the
//! credential again (a key revoked or a token expired since ends the stream), and reads the
//! job's row and its manifest's row counters — never a count of rows. A tenant has at most
//! `--max-streams-per-tenant` streams open on a server (`429 too-many-streams`).

use crate::Service;
use crate::api::job_of;
use crate::auth::{Caller, StreamSlot};
use crate::error::ApiError;
use crate::extract::{JobPath, Query};
use aide::OperationOutput;
use aide::generate::GenContext;
use aide::openapi::{Operation, Response};
use axum::extract::State;
use axum::response::sse::{Event, KeepAlive, KeepAliveStream, Sse};
use axum::response::{IntoResponse, Response as AxumResponse};
use futures::Stream;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::convert::Infallible;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tilegate_core::table::JobRecord;

/// The shortest time between a stream's looks at its job.
pub const MIN_INTERVAL_MS: u64 = 1000;

/// One `progress` event's data.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, JsonSchema)]
pub struct Progress {
    pub job_id: String,
    /// The job's state, as every output names it (`planned`, `partial`, `incomplete`,
    /// `not_assembled`, `published`).
    pub lifecycle: String,
    pub windows: u64,
    pub recorded: u64,
    pub complete: bool,
    pub published: bool,
}

/// The stream's parameters.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct EventParams {
    /// Milliseconds between looks at the job (default 1000, at least 1000). Each look after
    /// the first is one of the tenant's requests.
    #[serde(default, deserialize_with = "crate::extract::whole")]
    #[schemars(range(min = 1000, max = 60000))]
    pub interval_ms: Option<u64>,
}

/// The job's progress now: its row, and its manifest partitions' row counters.
pub async fn progress(s: &Service, job: &JobRecord) -> Result<Progress, ApiError> {
    let row = s
        .backends
        .jobs
        .get_job(&job.job_id)
        .await?
        .map_or_else(|| job.clone(), |v| v.row);
    let (lifecycle, counts) = crate::api::state_of(s, &row).await?;
    Ok(Progress {
        job_id: row.job_id.to_string(),
        lifecycle: lifecycle.as_str().to_owned(),
        windows: counts.windows,
        recorded: counts.recorded,
        complete: counts.complete(),
        published: lifecycle == tilegate_core::lifecycle::Lifecycle::Published,
    })
}

type Events = Pin<Box<dyn Stream<Item = Result<Event, Infallible>> + Send>>;

/// A job's progress stream.
pub struct EventStream(Sse<KeepAliveStream<Events>>);

impl IntoResponse for EventStream {
    fn into_response(self) -> AxumResponse {
        let mut r = self.0.into_response();
        // No proxy may buffer it.
        r.headers_mut()
            .insert("x-accel-buffering", http::HeaderValue::from_static("no"));
        r
    }
}

impl OperationOutput for EventStream {
    type Inner = Progress;

    fn operation_response(ctx: &mut GenContext, _op: &mut Operation) -> Option<Response> {
        let progress = ctx.schema.subschema_for::<Progress>();
        Some(crate::error::documented_response(
            "Server-sent events: `progress` events whose data is a `Progress` document, the last \
             one when the scene is published. The schema is each event's.",
            "text/event-stream",
            schemars::json_schema!({
                "type": "object",
                "required": ["event", "data"],
                "properties": {
                    "event": {"const": "progress"},
                    "data": {
                        "type": "string",
                        "contentMediaType": "application/json",
                        "contentSchema": progress,
                    },
                    "id": {"type": "string"},
                    "retry": {"type": "integer"},
                },
            }),
        ))
    }

    fn inferred_responses(
        ctx: &mut GenContext,
        op: &mut Operation,
    ) -> Vec<(Option<aide::openapi::StatusCode>, Response)> {
        Self::operation_response(ctx, op)
            .map(|r| vec![(Some(aide::openapi::StatusCode::Code(200)), r)])
            .unwrap_or_default()
    }
}

struct Watch {
    s: Arc<Service>,
    caller: Caller,
    job: JobRecord,
    interval: Duration,
    until: Instant,
    last: Option<Progress>,
    first: bool,
    done: bool,
    /// The stream's place among its tenant's, freed when the stream is dropped.
    _slot: StreamSlot,
}

/// What one look after the first found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Look {
    /// The job's progress.
    Progress(Progress),
    /// The tenant is over its rate: nothing was read; look again next time.
    Skipped,
    /// The credential proves nothing any more (revoked, expired): the stream ends.
    Ended,
}

/// One look after the first: a request of the tenant's, the credential proved again, then
/// the job's progress. A backend that did not answer is an error (look again next time).
pub async fn look(s: &Service, caller: &Caller, job: &JobRecord) -> Result<Look, ApiError> {
    if s.rates
        .charge(caller.tenant.as_str(), s.limits.rate_per_s)
        .is_err()
    {
        return Ok(Look::Skipped);
    }
    if !crate::auth::still_proves(s, caller).await? {
        return Ok(Look::Ended);
    }
    Ok(Look::Progress(progress(s, job).await?))
}

/// `GET /v1/jobs/{id}/events`.
pub async fn events(
    State(s): State<Arc<Service>>,
    caller: Caller,
    JobPath(id): JobPath,
    Query(q): Query<EventParams>,
) -> Result<EventStream, ApiError> {
    let job = job_of(&s, &caller, &id).await?;
    let interval = Duration::from_millis(
        crate::extract::within("interval_ms", q.interval_ms, MIN_INTERVAL_MS..=60_000)?
            .unwrap_or(MIN_INTERVAL_MS),
    );
    let slot = s
        .streams
        .open(caller.tenant.as_str(), s.limits.max_streams_per_tenant)?;
    let w = Watch {
        until: Instant::now() + s.limits.max_stream,
        s,
        caller,
        job,
        interval,
        last: None,
        first: true,
        done: false,
        _slot: slot,
    };
    let stream = futures::stream::unfold(w, |mut w| async move {
        loop {
            if w.done || Instant::now() >= w.until {
                return None;
            }
            if !w.first {
                // Never past the stream's end, however long the interval asked.
                let left = w.until.saturating_duration_since(Instant::now());
                tokio::time::sleep(w.interval.min(left)).await;
                if Instant::now() >= w.until {
                    return None;
                }
            }
            // The first look is the request's own (charged and proved as it arrived).
            let looked = match std::mem::replace(&mut w.first, false) {
                true => progress(&w.s, &w.job).await.map(Look::Progress),
                false => look(&w.s, &w.caller, &w.job).await,
            };
            let p = match looked {
                Ok(Look::Progress(p)) => p,
                Ok(Look::Skipped) => continue,
                Ok(Look::Ended) => {
                    tracing::info!(tenant = %w.caller.tenant, caller = ?w.caller.credential,
                        "an event stream's credential proves nothing any more: stream ended");
                    return None;
                }
                // A backend that did not answer this time: look again next time.
                Err(_) => continue,
            };
            if w.last.as_ref() == Some(&p) {
                continue;
            }
            w.done = p.published;
            let data = serde_json::to_string(&p).expect("serialises");
            w.last = Some(p);
            return Some((Ok(Event::default().event("progress").data(data)), w));
        }
    });
    let stream: Events = Box::pin(stream);
    Ok(EventStream(Sse::new(stream).keep_alive(
        KeepAlive::new().interval(Duration::from_secs(15)),
    )))
}

//! `GET /v1/jobs/{id}/events`: a job's progress as server-sent events. One `progress` event
//! at once and one whenever the figures change, comments as keep-alives, and the stream ends
//! after the event that says the scene is published, or after the service's longest stream
//! (a client reconnects; behind API Gateway a response must end within its timeout).

use crate::Service;
use crate::api::job_of;
use crate::auth::Caller;
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

/// One `progress` event's data.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, JsonSchema)]
pub struct Progress {
    pub job_id: String,
    /// `planned`, `running`, `assembling` or `published`.
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
    /// Milliseconds between looks at the job (default 1000, at least 100).
    #[serde(default, deserialize_with = "crate::extract::whole")]
    #[schemars(range(min = 100, max = 60000))]
    pub interval_ms: Option<u64>,
}

async fn progress(s: &Service, job: &JobRecord) -> Result<Progress, ApiError> {
    let row = s
        .backends
        .jobs
        .get_job(&job.job_id)
        .await?
        .map_or_else(|| job.clone(), |v| v.row);
    let recorded = s.backends.manifest.count_entries(&row.job_id).await?;
    let windows = row.grid.len();
    let published = row.scene_output.is_some();
    let complete = recorded >= windows;
    let lifecycle = if published {
        "published"
    } else if complete {
        "assembling"
    } else if recorded > 0 {
        "running"
    } else {
        "planned"
    };
    Ok(Progress {
        job_id: row.job_id.to_string(),
        lifecycle: lifecycle.to_owned(),
        windows,
        recorded,
        complete,
        published,
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
    job: JobRecord,
    interval: Duration,
    until: Instant,
    last: Option<Progress>,
    first: bool,
    done: bool,
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
        crate::extract::within("interval_ms", q.interval_ms, 100..=60_000)?.unwrap_or(1000),
    );
    let w = Watch {
        until: Instant::now() + s.limits.max_stream,
        s,
        job,
        interval,
        last: None,
        first: true,
        done: false,
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
            w.first = false;
            let p = match progress(&w.s, &w.job).await {
                Ok(p) => p,
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

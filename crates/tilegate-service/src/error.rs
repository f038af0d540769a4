//! Every refusal the service answers with: an HTTP status, a stable reason code (the CLI's
//! codes, plus the service's own) and one line for a person. Another tenant's job is answered
//! exactly as a missing one.

use aide::OperationOutput;
use aide::generate::GenContext;
use aide::openapi::{MediaType, Operation, Response, SchemaObject};
use axum::Json;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response as AxumResponse};
use schemars::JsonSchema;
use serde::Serialize;
use tilegate_core::Reason;

/// The body of every refusal.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct Problem {
    /// The stable reason code (`unauthenticated`, `unknown-job`, `rate-limited`, ...).
    pub error: String,
    /// What went wrong, for a person.
    pub message: String,
    /// The HTTP status, repeated.
    pub status: u16,
}

/// A refused request.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{message}")]
pub struct ApiError {
    pub status: StatusCode,
    pub reason: Reason,
    pub message: String,
    /// Seconds to wait before asking again (429, 503).
    pub retry_after_s: Option<u64>,
}

impl ApiError {
    pub fn new(status: StatusCode, reason: Reason, message: impl Into<String>) -> Self {
        Self {
            status,
            reason,
            message: message.into(),
            retry_after_s: None,
        }
    }

    /// No credentials, or credentials that prove nothing. The message says which, never what
    /// the credential was.
    pub fn unauthenticated(message: impl Into<String>) -> Self {
        Self::new(StatusCode::UNAUTHORIZED, Reason::Unauthenticated, message)
    }

    /// A job that does not exist, or is another tenant's: the same answer for both.
    pub fn no_such_job(id: &str) -> Self {
        Self::new(
            StatusCode::NOT_FOUND,
            Reason::UnknownJob,
            format!("no job {}", shown(id)),
        )
    }

    pub fn bad_request(reason: Reason, message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, reason, message)
    }

    pub fn unprocessable(reason: Reason, message: impl Into<String>) -> Self {
        Self::new(StatusCode::UNPROCESSABLE_ENTITY, reason, message)
    }

    pub fn too_many(reason: Reason, message: impl Into<String>, retry_after_s: u64) -> Self {
        Self {
            retry_after_s: Some(retry_after_s.max(1)),
            ..Self::new(StatusCode::TOO_MANY_REQUESTS, reason, message)
        }
    }

    /// A backend failed: the request may succeed later. The chain is logged, not returned.
    pub fn unavailable(e: &(dyn std::error::Error + 'static)) -> Self {
        tracing::warn!(error = %tilegate_core::error::chain(e), "request failed in a backend");
        Self {
            retry_after_s: Some(5),
            ..Self::new(
                StatusCode::SERVICE_UNAVAILABLE,
                Reason::StorageUnavailable,
                "the service's storage did not answer; try again",
            )
        }
    }
}

impl From<tilegate_core::StoreError> for ApiError {
    fn from(e: tilegate_core::StoreError) -> Self {
        Self::unavailable(&e)
    }
}

/// At most 80 characters of something a caller sent, with control characters escaped.
pub fn shown(s: &str) -> String {
    let mut out: String = s.chars().take(80).flat_map(char::escape_default).collect();
    if s.chars().count() > 80 {
        out.push('…');
    }
    out
}

impl IntoResponse for ApiError {
    fn into_response(self) -> AxumResponse {
        let body = Problem {
            error: self.reason.as_str().to_owned(),
            message: tilegate_core::redact::redact(&self.message).into_owned(),
            status: self.status.as_u16(),
        };
        let mut r = (self.status, Json(body)).into_response();
        if let Some(s) = self.retry_after_s {
            r.headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(s));
        }
        if self.status == StatusCode::UNAUTHORIZED {
            r.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                HeaderValue::from_static("Bearer realm=\"tilegate\""),
            );
        }
        r
    }
}

/// A documented response: `description`, and one media type with its schema.
pub fn documented_response(
    description: &str,
    media_type: &str,
    json_schema: schemars::Schema,
) -> Response {
    Response {
        description: description.to_owned(),
        content: [(
            media_type.to_owned(),
            MediaType {
                schema: Some(SchemaObject {
                    json_schema,
                    example: None,
                    external_docs: None,
                }),
                ..Default::default()
            },
        )]
        .into_iter()
        .collect(),
        ..Default::default()
    }
}

/// The refusals every operation may answer with, as the OpenAPI document lists them.
pub const REFUSALS: &[(u16, &str)] = &[
    (
        400,
        "The request is malformed: a body, parameter or value the operation does not take.",
    ),
    (
        401,
        "No credentials, or a key or token that proves nothing (revoked, expired, signed by another key, for another audience).",
    ),
    (
        404,
        "No such job, or another tenant's: the two are indistinguishable.",
    ),
    (
        409,
        "The job is not in a state the operation needs: no scene assembled yet, or an attempt the ledger will not move to.",
    ),
    (413, "The request body is larger than the service accepts."),
    (415, "The body is not `application/json`."),
    (
        422,
        "The request is well formed but refused: a source the tenant's policy forbids, a window outside the grid, an attempt that does not exist.",
    ),
    (
        429,
        "Too many requests from this tenant, too many of its jobs in flight or of its event streams open; `Retry-After` says when to ask again.",
    ),
    (
        431,
        "The request's headers are larger than the service accepts.",
    ),
    (
        503,
        "A backend did not answer; `Retry-After` says when to ask again.",
    ),
];

impl OperationOutput for ApiError {
    type Inner = Problem;

    fn operation_response(ctx: &mut GenContext, _op: &mut Operation) -> Option<Response> {
        let schema = ctx.schema.subschema_for::<Problem>();
        Some(documented_response(
            "A refusal, with its reason code.",
            "application/json",
            schema,
        ))
    }

    fn inferred_responses(
        ctx: &mut GenContext,
        op: &mut Operation,
    ) -> Vec<(Option<aide::openapi::StatusCode>, Response)> {
        let Some(base) = Self::operation_response(ctx, op) else {
            return Vec::new();
        };
        REFUSALS
            .iter()
            .map(|(code, description)| {
                (
                    Some(aide::openapi::StatusCode::Code(*code)),
                    Response {
                        description: (*description).to_owned(),
                        ..base.clone()
                    },
                )
            })
            .collect()
    }
}

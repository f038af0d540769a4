//! axum's extractors with the service's refusals: a body, path or query the operation does not
//! take is a [`Problem`](crate::error::Problem) with a reason code, as every other refusal is.

use crate::error::ApiError;
use aide::OperationInput;
use aide::generate::GenContext;
use aide::openapi::Operation;
use axum::extract::rejection::JsonRejection;
use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::StatusCode;
use axum::http::request::Parts;
use schemars::JsonSchema;
use serde::Deserialize;
use serde::de::DeserializeOwned;
use tilegate_core::Reason;

/// A JSON body.
#[derive(Debug)]
pub struct Body<T>(pub T);

impl<S, T> FromRequest<S> for Body<T>
where
    T: DeserializeOwned,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        // An object, first: serde would also read a struct from an array.
        match axum::Json::<serde_json::Value>::from_request(req, state).await {
            Ok(axum::Json(v)) if v.is_object() => {
                serde_json::from_value(v).map(Self).map_err(|e| {
                    ApiError::unprocessable(
                        Reason::BadRequest,
                        format!("the body does not fit the operation: {e}"),
                    )
                })
            }
            Ok(_) => Err(ApiError::unprocessable(
                Reason::BadRequest,
                "the body must be a JSON object",
            )),
            Err(JsonRejection::MissingJsonContentType(_)) => Err(ApiError::new(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                Reason::BadRequest,
                "the body must be `Content-Type: application/json`",
            )),
            Err(JsonRejection::BytesRejection(e))
                if e.status() == StatusCode::PAYLOAD_TOO_LARGE =>
            {
                Err(ApiError::new(
                    StatusCode::PAYLOAD_TOO_LARGE,
                    Reason::RequestTooLarge,
                    "the body is larger than the service accepts",
                ))
            }
            Err(JsonRejection::JsonDataError(e)) => Err(ApiError::unprocessable(
                Reason::BadRequest,
                format!("the body does not fit the operation: {}", e.body_text()),
            )),
            Err(e) => Err(ApiError::bad_request(
                Reason::BadRequest,
                format!("the body is not JSON: {}", e.body_text()),
            )),
        }
    }
}

impl<T: JsonSchema> OperationInput for Body<T> {
    fn operation_input(ctx: &mut GenContext, operation: &mut Operation) {
        <axum::Json<T> as OperationInput>::operation_input(ctx, operation);
    }
}

/// Query parameters.
#[derive(Debug)]
pub struct Query<T>(pub T);

impl<S, T> FromRequestParts<S> for Query<T>
where
    T: DeserializeOwned,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        axum::extract::Query::<T>::from_request_parts(parts, state)
            .await
            .map(|q| Self(q.0))
            .map_err(|e| {
                ApiError::bad_request(
                    Reason::BadRequest,
                    format!(
                        "the query is not one the operation takes: {}",
                        e.body_text()
                    ),
                )
            })
    }
}

impl<T: JsonSchema> OperationInput for Query<T> {
    fn operation_input(ctx: &mut GenContext, operation: &mut Operation) {
        <axum::extract::Query<T> as OperationInput>::operation_input(ctx, operation);
    }
}

/// The `{id}` of a job's path.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct JobId {
    /// The job's ID (32 hexadecimal digits).
    pub id: String,
}

/// A job's ID from the path.
#[derive(Debug)]
pub struct JobPath(pub String);

impl<S: Send + Sync> FromRequestParts<S> for JobPath {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        axum::extract::Path::<JobId>::from_request_parts(parts, state)
            .await
            .map(|p| Self(p.0.id))
            .map_err(|_| ApiError::no_such_job(""))
    }
}

impl OperationInput for JobPath {
    fn operation_input(ctx: &mut GenContext, operation: &mut Operation) {
        <axum::extract::Path<JobId> as OperationInput>::operation_input(ctx, operation);
    }
}

/// An optional count that JSON may spell `300` or `300.0` (JSON Schema's `integer` admits
/// both): anything else — a fraction, a negative, past `u64` — is refused.
pub fn whole<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    use serde::de::Error as _;
    /// A JSON number, or a query string's text.
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum NumOrText {
        Num(serde_json::Number),
        Text(String),
    }
    let n = match Option::<NumOrText>::deserialize(d)? {
        None => return Ok(None),
        Some(NumOrText::Num(n)) => n,
        Some(NumOrText::Text(t)) => t.parse::<serde_json::Number>().map_err(|_| {
            D::Error::custom(format!("`{}` is not a number", crate::error::shown(&t)))
        })?,
    };
    if let Some(u) = n.as_u64() {
        return Ok(Some(u));
    }
    match n.as_f64() {
        Some(f) if f >= 0.0 && f.fract() == 0.0 && f <= u64::MAX as f64 => Ok(Some(f as u64)),
        _ => Err(D::Error::custom(format!(
            "{n} is not a whole number of 0 or more"
        ))),
    }
}

/// `Some(v)` within `range`, or a refusal naming `field`.
pub fn within(
    field: &str,
    v: Option<u64>,
    range: std::ops::RangeInclusive<u64>,
) -> Result<Option<u64>, ApiError> {
    match v {
        Some(n) if !range.contains(&n) => Err(ApiError::bad_request(
            Reason::BadRequest,
            format!(
                "`{field}` must be {} to {}, not {n}",
                range.start(),
                range.end()
            ),
        )),
        v => Ok(v),
    }
}

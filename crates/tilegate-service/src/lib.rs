//! tilegate as an HTTP job service (`tilegate serve`): tenants plan jobs and follow them, read
//! their reports and STAC Items, fetch their outputs through signed URLs, regenerate and
//! accept — each request proved by an API key or an OIDC token, scoped to the caller's tenant,
//! limited, and audited. Stateless over the backends the workers use: any number of servers
//! can answer behind a load balancer, and the same router answers API Gateway's HTTP API
//! events in a Lambda function ([`lambda`]).
//!
//! The OpenAPI 3.1 document at `/v1/openapi.json` is generated from the handlers' own types
//! (aide over schemars), so it cannot drift from what the handlers take and answer.

pub mod api;
pub mod auth;
pub mod error;
pub mod events;
pub mod extract;
pub mod jwt;
pub mod keys;
pub mod lambda;
pub mod links;
pub mod map;
pub mod metrics;

use aide::axum::ApiRouter;
use aide::axum::routing::{get_with, post_with};
use aide::openapi::{Info, OpenApi, ReferenceOr, SecurityScheme};
use axum::Json;
use axum::extract::{DefaultBodyLimit, Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{Html, IntoResponse, Response};
use std::sync::Arc;
use std::time::Duration;
use tilegate_core::{Backends, Reason};
use tilegate_report::PriceTable;
use tilegate_source::Policies;

pub use auth::Caller;
pub use error::ApiError;
pub use keys::{KeyStore, Role};

/// The service's limits.
#[derive(Debug, Clone)]
pub struct Limits {
    /// Requests a second per tenant (per process); 0: unlimited.
    pub rate_per_s: f64,
    /// A tenant's jobs not yet published, at most.
    pub max_jobs_in_flight: usize,
    /// Largest request body, bytes.
    pub body_bytes: usize,
    /// Largest total of a request's header names and values, bytes.
    pub header_bytes: usize,
    /// Longest time to the start of a response.
    pub request_timeout: Duration,
    /// Longest event stream.
    pub max_stream: Duration,
    /// A tenant's event streams open at once (per process).
    pub max_streams_per_tenant: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            rate_per_s: 20.0,
            max_jobs_in_flight: 10,
            body_bytes: 64 * 1024,
            header_bytes: 16 * 1024,
            request_timeout: Duration::from_secs(60),
            max_stream: Duration::from_secs(300),
            max_streams_per_tenant: 8,
        }
    }
}

/// What every request is answered from.
#[derive(Debug)]
pub struct Service {
    pub backends: Backends,
    pub policies: Arc<Policies>,
    pub keys: KeyStore,
    pub jwt: Option<jwt::JwtVerifier>,
    pub limits: Limits,
    pub rates: auth::Rates,
    pub streams: auth::Streams,
    pub prices: PriceTable,
    /// Links of the service's own, for a store that signs none (the embedded store); `None`:
    /// the store signs.
    pub links: Option<links::LinkSigner>,
    /// Where GDAL reads the output store's objects (`/data/objects/`, `/vsis3/bucket/`): for
    /// thumbnails. `None`: the service draws none.
    pub objects_gdal_root: Option<String>,
    /// `serve --demo`'s sample scene, served at `/demo/scene.tif`.
    pub demo: Option<Demo>,
    /// Where the map page's packages are installed (`web/node_modules`); `None`: no map.
    pub web_assets: Option<std::path::PathBuf>,
}

/// The sample scene `serve --demo` serves for its tenant to submit.
#[derive(Debug, Clone)]
pub struct Demo {
    /// The scene's bytes (a small GeoTIFF).
    pub scene: bytes::Bytes,
    /// Its ETag, from its content.
    pub etag: String,
    /// The URL a tenant submits: `http://127.0.0.1:PORT/demo/scene.tif`.
    pub source: String,
}

impl Demo {
    pub fn new(scene: bytes::Bytes, source: String) -> Self {
        let hash = aws_lc_rs::digest::digest(&aws_lc_rs::digest::SHA256, &scene);
        let hex: String = hash.as_ref()[..16]
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        Self {
            scene,
            etag: format!("\"{hex}\""),
            source,
        }
    }
}

impl Service {
    pub fn new(
        backends: Backends,
        policies: Arc<Policies>,
        jwt: Option<jwt::JwtVerifier>,
        limits: Limits,
        prices: PriceTable,
    ) -> Self {
        Self {
            keys: KeyStore::new(Arc::clone(&backends.objects)),
            backends,
            policies,
            jwt,
            limits,
            rates: auth::Rates::default(),
            streams: auth::Streams::default(),
            prices,
            links: None,
            objects_gdal_root: None,
            demo: None,
            web_assets: None,
        }
    }
}

/// The documented operations.
fn routes() -> ApiRouter<Arc<Service>> {
    ApiRouter::new()
        .api_route(
            "/v1/jobs",
            post_with(api::create_job, |op| {
                op.id("createJob").summary(
                    "Plan a job for the caller's tenant (idempotent: the same source, recipe \
                     and prefix answer the existing job)",
                )
            })
            .get_with(api::list_jobs, |op| {
                op.id("listJobs")
                    .summary("The caller's jobs, newest first (an operator's: every tenant's)")
            }),
        )
        .api_route(
            "/v1/jobs/{id}",
            get_with(api::get_job, |op| op.id("getJob").summary("A job's status")),
        )
        .api_route(
            "/v1/jobs/{id}/report",
            get_with(api::report, |op| {
                op.id("getReport").summary("A job's report page (HTML)")
            }),
        )
        .api_route(
            "/v1/jobs/{id}/stac",
            get_with(api::stac, |op| {
                op.id("getStacItem")
                    .summary("The STAC Item of a job's published scene")
            }),
        )
        .api_route(
            "/v1/jobs/{id}/thumbnail.png",
            get_with(api::thumbnail, |op| {
                op.id("getThumbnail")
                    .summary("A small PNG picture of a job's published scene")
            }),
        )
        .api_route(
            "/v1/jobs/{id}/map",
            get_with(map::map, |op| {
                op.id("getMap")
                    .summary("A web map of a pyramid job's PMTiles archive (HTML)")
            }),
        )
        .api_route(
            "/v1/jobs/{id}/events",
            get_with(events::events, |op| {
                op.id("jobEvents")
                    .summary("A job's progress as server-sent events")
            }),
        )
        .api_route(
            "/v1/jobs/{id}/urls",
            post_with(api::sign_url, |op| {
                op.id("signUrl")
                    .summary("A signed, expiring URL of a window's tile or the scene (audited)")
            }),
        )
        .api_route(
            "/v1/jobs/{id}/regenerate",
            post_with(api::regenerate, |op| {
                op.id("regenerate")
                    .summary("A new attempt of one window, produced by a worker")
            }),
        )
        .api_route(
            "/v1/jobs/{id}/accept",
            post_with(api::accept, |op| {
                op.id("accept")
                    .summary("Publish an uploaded attempt of a window or the scene")
            }),
        )
        .api_route(
            "/healthz",
            get_with(api::healthz, |op| {
                op.id("health")
                    .summary("The process is up (no credentials needed)")
            }),
        )
}

/// The OpenAPI document of [`routes`], with the bearer scheme.
pub fn openapi() -> serde_json::Value {
    let mut doc = OpenApi {
        info: Info {
            title: "tilegate".into(),
            version: env!("CARGO_PKG_VERSION").into(),
            description: Some(
                "tilegate's job service: plan raster tile jobs, follow them, and fetch their \
                 outputs. Every `/v1` operation needs `Authorization: Bearer` with an API key \
                 (`tgk_…`) or an OIDC token; another tenant's job is answered as a missing one."
                    .into(),
            ),
            ..Info::default()
        },
        ..OpenApi::default()
    };
    let _ = routes().finish_api(&mut doc);
    doc.components
        .get_or_insert_with(Default::default)
        .security_schemes
        .insert(
            auth::SCHEME.to_owned(),
            ReferenceOr::Item(SecurityScheme::Http {
                scheme: "bearer".into(),
                bearer_format: Some("API key (tgk_…) or JWT".into()),
                description: Some(
                    "An API key made by `tilegate keys create`, or a token of the configured \
                     OIDC issuer for the configured audience."
                        .into(),
                ),
                extensions: Default::default(),
            }),
        );
    without_null_defaults(doc)
}

/// The document without `"default": null`: schemars writes it for an `Option` field that
/// serde defaults, which is what an absent value means anyway, and where the schema's type
/// excludes null (a query parameter's) it makes the document invalid.
fn without_null_defaults(doc: OpenApi) -> serde_json::Value {
    fn strip(v: &mut serde_json::Value) {
        match v {
            serde_json::Value::Object(map) => {
                if map.get("default").is_some_and(serde_json::Value::is_null) {
                    map.remove("default");
                }
                map.values_mut().for_each(strip);
            }
            serde_json::Value::Array(items) => items.iter_mut().for_each(strip),
            _ => {}
        }
    }
    let mut v = serde_json::to_value(&doc).expect("the document serialises");
    strip(&mut v);
    v
}

/// The page for people: the caller's jobs, live.
const PAGE: &str = include_str!("page.html");

/// The page's policy: its one inline script by hash, nothing loaded from elsewhere.
static PAGE_CSP: std::sync::LazyLock<HeaderValue> = std::sync::LazyLock::new(|| {
    use base64::Engine as _;
    let script = PAGE
        .split_once("<script>")
        .and_then(|(_, rest)| rest.split_once("</script>"))
        .map(|(script, _)| script)
        .expect("the page has one inline script");
    let hash = aws_lc_rs::digest::digest(&aws_lc_rs::digest::SHA256, script.as_bytes());
    let hash = base64::engine::general_purpose::STANDARD.encode(hash.as_ref());
    HeaderValue::from_str(&format!(
        "default-src 'none'; script-src 'sha256-{hash}'; style-src 'unsafe-inline'; \
         connect-src 'self'; img-src 'self' data: blob:; frame-ancestors 'none'; base-uri 'none'; \
         form-action 'none'"
    ))
    .expect("a header value")
});

async fn page() -> Response {
    let mut r = Html(PAGE).into_response();
    let h = r.headers_mut();
    h.insert(header::CONTENT_SECURITY_POLICY, PAGE_CSP.clone());
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    r
}

fn no_demo() -> ApiError {
    ApiError::new(
        StatusCode::NOT_FOUND,
        Reason::BadRequest,
        "no such resource (`tilegate serve --demo` serves a sample scene here)",
    )
}

/// `GET /demo/scene.tif` (`serve --demo` only): the sample scene, with the ETag, HEAD and
/// ranges a source read through GDAL's `/vsicurl/` needs.
async fn demo_scene(State(s): State<Arc<Service>>, headers: http::HeaderMap) -> Response {
    match &s.demo {
        Some(d) => links::ranged(&headers, d.scene.clone(), &d.etag, "image/tiff"),
        None => no_demo().into_response(),
    }
}

/// What `serve --demo` offers the page to submit.
#[derive(Debug, serde::Serialize)]
struct DemoSource {
    source: String,
}

/// `GET /demo/source.json` (`serve --demo` only): the page fills its form with it.
async fn demo_source(State(s): State<Arc<Service>>) -> Result<Json<DemoSource>, ApiError> {
    s.demo
        .as_ref()
        .map(|d| {
            Json(DemoSource {
                source: d.source.clone(),
            })
        })
        .ok_or_else(no_demo)
}

/// Refuse a request whose headers are too large; stop one that takes too long to answer;
/// mark every answer as not to be cached or sniffed.
async fn guard(State(s): State<Arc<Service>>, req: Request, next: Next) -> Response {
    let header_bytes: usize = req
        .headers()
        .iter()
        .map(|(k, v)| k.as_str().len() + v.len() + 4)
        .sum();
    if header_bytes > s.limits.header_bytes {
        return ApiError::new(
            StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
            Reason::RequestTooLarge,
            format!(
                "the request's headers are {header_bytes} bytes; this service accepts {}",
                s.limits.header_bytes
            ),
        )
        .into_response();
    }
    let mut r = match tokio::time::timeout(s.limits.request_timeout, next.run(req)).await {
        Ok(r) => r,
        Err(_) => ApiError {
            retry_after_s: Some(5),
            ..ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                Reason::RequestTimeout,
                format!(
                    "no answer within the request timeout ({} s)",
                    s.limits.request_timeout.as_secs()
                ),
            )
        }
        .into_response(),
    };
    let h = r.headers_mut();
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.entry(header::CACHE_CONTROL)
        .or_insert(HeaderValue::from_static("no-store"));
    r
}

/// The service's router: the documented operations, the document, the page.
pub fn router(s: Arc<Service>) -> axum::Router {
    let doc = Arc::new(openapi());
    let body_limit = s.limits.body_bytes;
    routes()
        .finish_api(&mut OpenApi::default())
        .route(
            "/v1/openapi.json",
            axum::routing::get(move || {
                let doc = Arc::clone(&doc);
                async move { Json(doc) }
            }),
        )
        .route("/", axum::routing::get(page))
        // A link the service signed is its own credential: no bearer, not in the document.
        .route("/v1/objects/{*key}", axum::routing::get(links::object))
        .route("/demo/scene.tif", axum::routing::get(demo_scene))
        // The map page's scripts: the packages' own files, no credential.
        .route("/v1/assets/{name}", axum::routing::get(map::asset))
        .route("/demo/source.json", axum::routing::get(demo_source))
        .fallback(|| async {
            ApiError::new(
                StatusCode::NOT_FOUND,
                Reason::BadRequest,
                "no such resource",
            )
        })
        .layer(DefaultBodyLimit::max(body_limit))
        .layer(axum::middleware::from_fn_with_state(Arc::clone(&s), guard))
        .with_state(s)
}

/// Serve `router` on `listener` until SIGINT or SIGTERM, letting requests in flight finish.
pub async fn serve(listener: tokio::net::TcpListener, router: axum::Router) -> std::io::Result<()> {
    axum::serve(listener, router)
        .with_graceful_shutdown(async {
            let term = async {
                #[cfg(unix)]
                if let Ok(mut s) =
                    tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
                {
                    s.recv().await;
                    return;
                }
                std::future::pending::<()>().await;
            };
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = term => {}
            }
        })
        .await
}

/// The service's settings from the environment, as `tilegate serve` reads its flags' variables
/// (`TILEGATE_JWKS`, `TILEGATE_JWT_ISSUER`, `TILEGATE_JWT_AUDIENCE`, `TILEGATE_TENANT_CLAIM`,
/// `TILEGATE_ROLE_CLAIM`, `TILEGATE_RATE_LIMIT`, `TILEGATE_MAX_JOBS_IN_FLIGHT`,
/// `TILEGATE_MAX_STREAMS_PER_TENANT`, `TILEGATE_REQUEST_TIMEOUT` in seconds or as `25s`): for
/// the Lambda function, which has no
/// command line. A value that does not parse is an error, never a silent default.
pub fn settings_from_env() -> Result<(Option<jwt::JwtConfig>, Limits), String> {
    let var = |n: &str| std::env::var(n).ok().filter(|v| !v.is_empty());
    let mut limits = Limits::default();
    if let Some(v) = var("TILEGATE_RATE_LIMIT") {
        limits.rate_per_s = v
            .parse()
            .ok()
            .filter(|r: &f64| r.is_finite() && *r >= 0.0)
            .ok_or_else(|| format!("TILEGATE_RATE_LIMIT `{v}` is not a rate"))?;
    }
    if let Some(v) = var("TILEGATE_MAX_JOBS_IN_FLIGHT") {
        limits.max_jobs_in_flight = v
            .parse()
            .map_err(|_| format!("TILEGATE_MAX_JOBS_IN_FLIGHT `{v}` is not a count"))?;
    }
    if let Some(v) = var("TILEGATE_MAX_STREAMS_PER_TENANT") {
        limits.max_streams_per_tenant = v
            .parse()
            .map_err(|_| format!("TILEGATE_MAX_STREAMS_PER_TENANT `{v}` is not a count"))?;
    }
    if let Some(v) = var("TILEGATE_REQUEST_TIMEOUT") {
        let secs: u64 =
            v.strip_suffix('s').unwrap_or(&v).parse().map_err(|_| {
                format!("TILEGATE_REQUEST_TIMEOUT `{v}` is not a number of seconds")
            })?;
        limits.request_timeout = Duration::from_secs(secs.max(1));
    }
    let jwt = match var("TILEGATE_JWKS") {
        None => None,
        Some(jwks) => Some(jwt::JwtConfig {
            jwks: jwt::JwksSource::parse(&jwks),
            issuer: var("TILEGATE_JWT_ISSUER").ok_or("TILEGATE_JWKS needs TILEGATE_JWT_ISSUER")?,
            audience: var("TILEGATE_JWT_AUDIENCE")
                .ok_or("TILEGATE_JWKS needs TILEGATE_JWT_AUDIENCE")?,
            tenant_claim: var("TILEGATE_TENANT_CLAIM").unwrap_or_else(|| "tenant".into()),
            role_claim: var("TILEGATE_ROLE_CLAIM").unwrap_or_else(|| "tilegate_role".into()),
        }),
    };
    Ok((jwt, limits))
}

//! The map page of a pyramid job (`GET /v1/jobs/{id}/map`): MapLibre GL JS drawing the job's
//! PMTiles archive through the PMTiles reader, both served by this service from the project's
//! own install of them (`web/`, from npm; no CDN), at `/v1/assets/…`. The archive is read with
//! a signed, expiring link, as any reader of the job's outputs gets one.

use crate::error::ApiError;
use crate::extract::Query;
use axum::extract::{Path, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use std::sync::Arc;
use std::time::Duration;
use tilegate_core::Reason;
use tilegate_core::ledger::Subject;
use tilegate_core::recipe::Operation;

const PAGE: &str = include_str!("map.html");

/// The files `/v1/assets/{name}` serves, with their media types and where each is in the
/// installed packages (`web/node_modules`).
const ASSETS: [(&str, &str, &str); 4] = [
    (
        "maplibre-gl.mjs",
        "text/javascript",
        "maplibre-gl/dist/maplibre-gl.mjs",
    ),
    (
        "maplibre-gl-worker.mjs",
        "text/javascript",
        "maplibre-gl/dist/maplibre-gl-worker.mjs",
    ),
    (
        "maplibre-gl.css",
        "text/css",
        "maplibre-gl/dist/maplibre-gl.css",
    ),
    ("pmtiles.js", "text/javascript", "pmtiles/dist/pmtiles.js"),
];

/// The map page's options.
#[derive(Debug, serde::Deserialize, schemars::JsonSchema)]
pub struct MapQuery {
    /// How the tiles are drawn between zooms (default `linear`).
    pub resampling: Option<MapResampling>,
}

/// How the map draws tiles between zooms.
#[derive(Debug, Clone, Copy, serde::Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum MapResampling {
    Linear,
    /// Each pixel as stored (for comparing the map with the tiles).
    Nearest,
}

/// `GET /v1/jobs/{id}/map`: the page.
pub async fn map(
    State(s): State<Arc<crate::Service>>,
    caller: crate::auth::Caller,
    crate::extract::JobPath(id): crate::extract::JobPath,
    Query(q): Query<MapQuery>,
) -> Result<axum::response::Html<String>, ApiError> {
    let job = crate::api::job_of(&s, &caller, &id).await?;
    let Operation::Pyramid(spec) = &job.recipe.operation else {
        return Err(ApiError::new(
            StatusCode::CONFLICT,
            Reason::NoScene,
            format!(
                "job {} is not a web pyramid (plan it with --pyramid)",
                job.job_id
            ),
        ));
    };
    if !spec.layout.pmtiles() || job.scene_output.is_none() {
        return Err(ApiError::new(
            StatusCode::CONFLICT,
            Reason::NoScene,
            format!(
                "job {} has no published PMTiles archive to draw (its layout is {}, or it is not \
                 assembled yet)",
                job.job_id,
                spec.layout.name()
            ),
        ));
    }
    let resampling = match q.resampling {
        None | Some(MapResampling::Linear) => "linear",
        Some(MapResampling::Nearest) => "nearest",
    };
    let (g, archive) =
        crate::api::published_url(&s, &job, Subject::Scene, Duration::from_secs(3600)).await?;
    tracing::info!(target: "tilegate::audit", tenant = %caller.tenant, caller = ?caller.credential,
        job = %job.job_id, object = %g.key, expires_at = g.expires_at, "audit: map url issued");
    let tilejson = tilegate_assembler::tilejson(&job, spec)
        .map_err(|e| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, Reason::Unexpected, e))?;
    let config = serde_json::json!({
        "archive": archive,
        "tileSize": spec.tile_size,
        "bounds": tilejson["bounds"],
        "minzoom": spec.min_zoom,
        "maxzoom": spec.max_zoom,
        "encoding": spec.encoding.map(|e| e.name()),
        "resampling": resampling,
    });
    // The configuration is JSON inside a script: `<` is escaped so that no value can end it.
    let config = config.to_string().replace('<', "\\u003c");
    let html = PAGE
        .replace("{{CONFIG}}", &config)
        .replace("{{ASSETS}}", "/v1/assets")
        .replace("{{JOB}}", job.job_id.as_str())
        .replace("{{TMS}}", &html_escape(&spec.tms))
        .replace("{{MINZOOM}}", &spec.min_zoom.to_string())
        .replace("{{MAXZOOM}}", &spec.max_zoom.to_string());
    Ok(axum::response::Html(html))
}

fn html_escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// `GET /v1/assets/{name}`: one of the map page's scripts or its style sheet (no credentials:
/// they are the packages' own files).
pub async fn asset(
    State(s): State<Arc<crate::Service>>,
    Path(name): Path<String>,
) -> Result<Response, ApiError> {
    let Some((_, media, rel)) = ASSETS.iter().find(|(n, _, _)| *n == name) else {
        return Err(ApiError::new(
            StatusCode::NOT_FOUND,
            Reason::BadRequest,
            "no such asset",
        ));
    };
    let Some(dir) = &s.web_assets else {
        return Err(ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            Reason::Unexpected,
            "the map's scripts are not installed: `npm ci --prefix web` (or `bash .ci/setup`), \
             then `serve --web-assets web/node_modules`",
        ));
    };
    let bytes = tokio::fs::read(dir.join(rel)).await.map_err(|e| {
        ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            Reason::Unexpected,
            format!(
                "the map's scripts are not installed under {}: {e} (`npm ci --prefix web`)",
                dir.display()
            ),
        )
    })?;
    let mut r = bytes.into_response();
    r.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(media));
    r.headers_mut().insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static("public, max-age=3600"),
    );
    Ok(r)
}

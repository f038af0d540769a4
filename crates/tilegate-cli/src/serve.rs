//! `serve` (the job API over HTTP) and `keys` (the API keys it accepts).

use crate::args::{KeysCommand, ServeArgs};
use crate::backends::{self, Selection};
use crate::errors::refused;
use crate::output::Out;
use crate::reports::Report;
use schemars::JsonSchema;
use serde::Serialize;
use std::process::ExitCode;
use std::sync::Arc;
use tilegate_core::time::with_utc;
use tilegate_core::{Backends, Reason, Tenant, now_millis};
use tilegate_service::jwt::{JwksSource, JwtConfig, JwtVerifier};
use tilegate_service::keys::{KeyInfo, KeyStore, NewKey, Role};
use tilegate_service::{Limits, Service};

/// What `serve` prints once it listens.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct Listening {
    /// The address bound (the port chosen, for `:0`).
    pub listen: String,
    pub url: String,
    pub openapi: String,
    /// Whether OIDC tokens are accepted beside API keys.
    pub tokens: bool,
}

impl Report for Listening {
    fn text(&self, _out: &Out) -> String {
        format!(
            "tilegate serve: listening on {} (OpenAPI: {}; credentials: API keys{})",
            self.url,
            self.openapi,
            if self.tokens { " and OIDC tokens" } else { "" }
        )
    }
}

pub async fn serve_cmd(out: &Out, sel: &Selection, a: ServeArgs) -> anyhow::Result<ExitCode> {
    if a.print_openapi {
        println!(
            "{}",
            serde_json::to_string_pretty(&tilegate_service::openapi())?
        );
        return Ok(ExitCode::SUCCESS);
    }
    if !a.rate_limit.is_finite() || a.rate_limit < 0.0 {
        return Err(refused(
            Reason::BadOption,
            format!(
                "--rate-limit must be 0 or more requests a second, not {}",
                a.rate_limit
            ),
        ));
    }
    let jwt = match &a.jwks {
        None => None,
        Some(jwks) => Some(
            JwtVerifier::new(JwtConfig {
                jwks: JwksSource::parse(jwks),
                issuer: a.jwt_issuer.clone().unwrap_or_default(),
                audience: a.jwt_audience.clone().unwrap_or_default(),
                tenant_claim: a.tenant_claim.clone(),
                role_claim: a.role_claim.clone(),
            })
            .await
            .map_err(|e| refused(Reason::BadOption, e.to_string()))?,
        ),
    };
    let prices = crate::look::prices(a.prices.prices.as_deref())?;
    let b = backends::open(sel).await?;
    let limits = Limits {
        rate_per_s: a.rate_limit,
        max_jobs_in_flight: a.max_jobs_in_flight.max(1),
        request_timeout: a.request_timeout,
        max_stream: a.max_stream,
        max_streams_per_tenant: a.max_streams_per_tenant.max(1),
        ..Limits::default()
    };
    let tokens = jwt.is_some();
    let service = Arc::new(Service::new(b, crate::sources::all(), jwt, limits, prices));
    let listener = tokio::net::TcpListener::bind(&a.listen)
        .await
        .map_err(|e| refused(Reason::BadOption, format!("listen on {}: {e}", a.listen)))?;
    let addr = listener.local_addr()?;
    out.emit(&Listening {
        listen: addr.to_string(),
        url: format!("http://{addr}/"),
        openapi: format!("http://{addr}/v1/openapi.json"),
        tokens,
    });
    tilegate_service::serve(listener, tilegate_service::router(service)).await?;
    Ok(ExitCode::SUCCESS)
}

/// A key just made (`keys create`, `keys rotate`): printed once.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct KeyMade {
    #[serde(flatten)]
    pub key: NewKey,
    /// The key replaced and revoked (`keys rotate`).
    pub revoked: Option<String>,
}

impl Report for KeyMade {
    fn text(&self, _out: &Out) -> String {
        let r = &self.key.record;
        let mut s = format!(
            "{}\n\nkey {} for tenant {} ({}){}: shown once, only its hash is kept.\nUse it as `Authorization: Bearer {}`.",
            self.key.key,
            r.key_id,
            r.tenant,
            role_name(r.role),
            if r.label.is_empty() {
                String::new()
            } else {
                format!(", \"{}\"", r.label)
            },
            self.key.key,
        );
        if let Some(old) = &self.revoked {
            s.push_str(&format!("\nkey {old} is revoked."));
        }
        s
    }
}

fn role_name(r: Role) -> &'static str {
    match r {
        Role::Tenant => "tenant",
        Role::Operator => "operator",
    }
}

/// `keys list`.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct KeyList {
    pub keys: Vec<KeyInfo>,
}

impl Report for KeyList {
    fn text(&self, _out: &Out) -> String {
        if self.keys.is_empty() {
            return "no API keys (`tilegate keys create --tenant NAME` makes one)".to_owned();
        }
        let mut s = format!(
            "{:<16}  {:<20}  {:<8}  {:<24}  {:<24}  label",
            "key", "tenant", "role", "created", "revoked"
        );
        for k in &self.keys {
            let r = &k.record;
            let created = with_utc(serde_json::json!({ "t": r.created_at }));
            let revoked = k
                .revoked_at
                .map(|t| with_utc(serde_json::json!({ "t": t }))["t_utc"].clone());
            s.push_str(&format!(
                "\n{:<16}  {:<20}  {:<8}  {:<24}  {:<24}  {}",
                r.key_id,
                r.tenant,
                role_name(r.role),
                created["t_utc"].as_str().unwrap_or(""),
                revoked.as_ref().and_then(|v| v.as_str()).unwrap_or("-"),
                r.label
            ));
        }
        s
    }
}

/// `keys revoke`.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct KeyRevoked {
    pub key_id: String,
    pub tenant: String,
    pub revoked_at: i64,
}

impl Report for KeyRevoked {
    fn text(&self, _out: &Out) -> String {
        format!(
            "key {} of tenant {} is revoked: every request with it is refused from now on",
            self.key_id, self.tenant
        )
    }
}

fn key_error(e: tilegate_service::keys::KeyError) -> anyhow::Error {
    use tilegate_service::keys::KeyError as K;
    match e {
        K::Store(e) => e.into(),
        e @ (K::Unknown(_) | K::BadId(_) | K::AlreadyRevoked(_)) => {
            refused(Reason::BadOption, e.to_string())
        }
        e @ K::ReservedTenant => refused(Reason::UnsafeKeySegment, e.to_string()),
        e => anyhow::Error::from(e),
    }
}

pub async fn keys_cmd(out: &Out, b: &Backends, c: KeysCommand) -> anyhow::Result<ExitCode> {
    let keys = KeyStore::new(Arc::clone(&b.objects));
    let now = now_millis();
    match c {
        KeysCommand::Create {
            tenant,
            operator,
            label,
        } => {
            let tenant = Tenant::parse(&tenant)
                .map_err(|e| refused(Reason::UnsafeKeySegment, format!("--tenant: {e}")))?;
            let role = if operator {
                Role::Operator
            } else {
                Role::Tenant
            };
            let key = keys
                .create(tenant, role, label, None, now)
                .await
                .map_err(key_error)?;
            out.emit_secret(&KeyMade { key, revoked: None });
        }
        KeysCommand::List => {
            out.emit(&KeyList {
                keys: keys.list().await.map_err(key_error)?,
            });
        }
        KeysCommand::Revoke { key_id } => {
            let r = keys.revoke(&key_id, now).await.map_err(key_error)?;
            out.emit(&KeyRevoked {
                key_id: r.key_id,
                tenant: r.tenant.to_string(),
                revoked_at: now,
            });
        }
        KeysCommand::Rotate { key_id } => {
            let key = keys.rotate(&key_id, now).await.map_err(key_error)?;
            out.emit_secret(&KeyMade {
                key,
                revoked: Some(key_id),
            });
        }
    }
    Ok(ExitCode::SUCCESS)
}

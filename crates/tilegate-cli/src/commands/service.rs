//! `serve` (the job API over HTTP) and `keys` (the API keys it accepts).

use crate::args::{KeysCommand, ServeArgs};
use crate::ctx::Ctx;
use crate::errors::refused;
use crate::output::Out;
use crate::reports::{KeyList, KeyMade, KeyRevoked, Listening};
use std::process::ExitCode;
use std::sync::Arc;
use tilegate_core::{Backends, Reason, Tenant, now_millis};
use tilegate_service::jwt::{JwksSource, JwtConfig, JwtVerifier};
use tilegate_service::keys::{KeyStore, Role};
use tilegate_service::{Limits, Service};

impl ServeArgs {
    pub async fn exec(self, cx: &Ctx) -> anyhow::Result<ExitCode> {
        serve_cmd(cx, self).await
    }
}

impl KeysCommand {
    pub async fn exec(self, cx: &Ctx) -> anyhow::Result<ExitCode> {
        keys_cmd(&cx.out, &cx.open().await?, self).await
    }
}

async fn serve_cmd(cx: &Ctx, a: ServeArgs) -> anyhow::Result<ExitCode> {
    let out = &cx.out;
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
    let prices = super::look::prices(a.prices.prices.as_deref())?;
    let b = cx.open().await?;
    let limits = Limits {
        rate_per_s: a.rate_limit,
        max_jobs_in_flight: a.max_jobs_in_flight.max(1),
        request_timeout: a.request_timeout,
        max_stream: a.max_stream,
        max_streams_per_tenant: a.max_streams_per_tenant.max(1),
        ..Limits::default()
    };
    let tokens = jwt.is_some();
    let service = Arc::new(Service::new(b, cx.policies(), jwt, limits, prices));
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

async fn keys_cmd(out: &Out, b: &Backends, c: KeysCommand) -> anyhow::Result<ExitCode> {
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

//! `serve` (the job API over HTTP) and `keys` (the API keys it accepts).

use crate::args::{KeysCommand, ServeArgs};
use crate::ctx::Ctx;
use crate::errors::refused;
use crate::output::Out;
use crate::reports::{KeyList, KeyMade, KeyRevoked, Listening, ServeDemo};
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
    let listener = tokio::net::TcpListener::bind(&a.listen)
        .await
        .map_err(|e| refused(Reason::BadOption, format!("listen on {}: {e}", a.listen)))?;
    let addr = listener.local_addr()?;
    let base = match &a.public_url {
        Some(u) if u.starts_with("http://") || u.starts_with("https://") => {
            u.trim_end_matches('/').to_owned()
        }
        Some(u) => {
            return Err(refused(
                Reason::BadOption,
                format!("--public-url `{u}` is not an http:// or https:// URL"),
            ));
        }
        None => format!("http://{addr}"),
    };
    // The demo's scene is read from this server's own loopback address, which only the demo
    // tenant's policy admits.
    let demo = if a.demo {
        Some(demo_scene(cx, addr).await?)
    } else {
        None
    };
    let policies = match &demo {
        Some((_, ip)) => Arc::new(demo_policies(*ip)?),
        None => cx.policies(),
    };
    let mut service = Service::new(b.clone(), Arc::clone(&policies), jwt, limits, prices);
    service.objects_gdal_root = Some(cx.sel.objects_root());
    service.web_assets = a.web_assets.clone().or_else(|| {
        [
            std::path::PathBuf::from("web/node_modules"),
            std::path::PathBuf::from(concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/../../web/node_modules"
            )),
        ]
        .into_iter()
        .find(|p| p.join("maplibre-gl").is_dir())
    });
    if local_objects(cx) {
        // The embedded store signs nothing: the service signs links of its own.
        let secret = tilegate_service::links::load_or_create_secret(&cx.sel.data)
            .map_err(|e| refused(Reason::StorageRefused, format!("the link secret: {e}")))?;
        service.links = Some(tilegate_service::links::LinkSigner::new(&secret, &base));
    }
    let mut demo_report = None;
    let mut pool = None;
    if let Some((d, _)) = demo {
        let keys = KeyStore::new(Arc::clone(&b.objects));
        let key = keys
            .create(
                Tenant::parse(DEMO_TENANT).expect("a valid tenant"),
                Role::Tenant,
                "serve --demo".to_owned(),
                None,
                now_millis(),
            )
            .await
            .map_err(key_error)?;
        demo_report = Some(ServeDemo {
            tenant: DEMO_TENANT.to_owned(),
            page: format!("{base}/#key={}", key.key),
            key: key.key,
            source: d.source.clone(),
        });
        service.demo = Some(d);
        pool = Some(demo_pool(&b, policies));
    }
    let service = Arc::new(service);
    let listening = Listening {
        listen: addr.to_string(),
        url: format!("http://{addr}/"),
        openapi: format!("http://{addr}/v1/openapi.json"),
        tokens,
        demo: demo_report,
    };
    if listening.demo.is_some() {
        // The demo's key is the point of what is printed: shown once, as `keys create` shows it.
        out.emit_secret(&listening);
    } else {
        out.emit(&listening);
    }
    let served = tilegate_service::serve(listener, tilegate_service::router(service)).await;
    if let Some((stop, handle)) = pool {
        let _ = stop.send(true);
        match handle.await {
            Ok(Err(e)) => tracing::warn!(error = %e, "the demo's worker pool failed"),
            Err(e) => tracing::warn!(error = %e, "the demo's worker pool panicked"),
            Ok(Ok(_)) => {}
        }
    }
    served?;
    Ok(ExitCode::SUCCESS)
}

/// The tenant `serve --demo` makes a key for.
const DEMO_TENANT: &str = "demo";

/// Whether the output store is the embedded one (a local directory), which signs nothing.
fn local_objects(cx: &Ctx) -> bool {
    cx.sel
        .objects
        .as_deref()
        .is_none_or(|u| u.starts_with("file://") || u.starts_with('/'))
}

/// The demo's sample scene: `{data}/demo/scene.tif`, written if absent (1024×1024 UInt16, four
/// windows), and the address it is read from — this server's own, on loopback where it listens
/// on every address.
async fn demo_scene(
    cx: &Ctx,
    addr: std::net::SocketAddr,
) -> anyhow::Result<(tilegate_service::Demo, std::net::IpAddr)> {
    let dir = cx.sel.data.join("demo");
    std::fs::create_dir_all(&dir)
        .map_err(|e| refused(Reason::WriteFailed, format!("{}: {e}", dir.display())))?;
    let path = dir.join("scene.tif");
    if !path.exists() {
        let tmp = dir.join(format!("scene.{}.tmp.tif", std::process::id()));
        let opts = tilegate_cog::SampleOptions::new(1024, 1024);
        let t = tmp.clone();
        tokio::task::spawn_blocking(move || tilegate_cog::sample_scene(&t, &opts))
            .await?
            .map_err(|e| {
                refused(
                    Reason::WriteFailed,
                    format!("write the demo's sample scene: {e}"),
                )
            })?;
        std::fs::rename(&tmp, &path)
            .map_err(|e| refused(Reason::WriteFailed, format!("{}: {e}", path.display())))?;
    }
    let scene = std::fs::read(&path)
        .map_err(|e| refused(Reason::SourceUnreadable, format!("{}: {e}", path.display())))?;
    let ip = match addr.ip() {
        std::net::IpAddr::V4(v) if v.is_unspecified() => std::net::Ipv4Addr::LOCALHOST.into(),
        std::net::IpAddr::V6(v) if v.is_unspecified() => std::net::Ipv6Addr::LOCALHOST.into(),
        ip => ip,
    };
    let at = std::net::SocketAddr::new(ip, addr.port());
    let source = format!("http://{at}/demo/scene.tif");
    Ok((tilegate_service::Demo::new(scene.into(), source), ip))
}

/// The demo's source policy: the tenant `demo` may read this server's own address (and only
/// the listed host); every other tenant has the default.
fn demo_policies(ip: std::net::IpAddr) -> anyhow::Result<tilegate_source::Policies> {
    let prefix = if ip.is_ipv4() { 32 } else { 128 };
    let mut config = tilegate_core::source_policy::PolicyConfig::default();
    config.tenants.insert(
        DEMO_TENANT.to_owned(),
        tilegate_core::source_policy::PolicyFields {
            hosts: Some(vec![ip.to_string()]),
            allow_addresses: Some(vec![format!("{ip}/{prefix}")]),
            ..Default::default()
        },
    );
    tilegate_source::Policies::from_config(config)
        .map_err(|e| refused(Reason::BadSourcePolicy, e.to_string()))
}

type Pool = (
    tokio::sync::watch::Sender<bool>,
    tokio::task::JoinHandle<tilegate_core::StoreResult<tilegate_worker::WorkReport>>,
);

/// `serve --demo`'s worker pool, with the assembler on each job's completion: what `tilegate
/// work --assemble` runs beside a server, with the same source policy, in this process.
fn demo_pool(b: &Backends, policies: Arc<tilegate_source::Policies>) -> Pool {
    let mut cfg = tilegate_worker::WorkerConfig {
        stop: tilegate_worker::StopWhen::Signal,
        sources: policies,
        ..Default::default()
    };
    cfg.on_complete = Some(Arc::new(
        tilegate_pipeline::complete::AssembleOnComplete::new(
            b.clone(),
            tilegate_assembler::AssembleOptions::new(tilegate_claim::unique_owner("serve-demo")),
        ),
    ));
    let worker = tilegate_worker::Worker::new(
        b.clone(),
        cfg,
        Arc::new(tilegate_core::metrics::Counters::new()),
    );
    let (tx, rx) = tokio::sync::watch::channel(false);
    let handle = tokio::spawn(async move { worker.run(rx).await });
    (tx, handle)
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

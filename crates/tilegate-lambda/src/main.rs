//! The `tilegate-lambda` function (runtime `provided.al2023`, handler `bootstrap`). Configured
//! by its environment, as deploy/aws/template.yaml sets it: `TILEGATE_OBJECTS`
//! (`s3://bucket/prefix`), `TILEGATE_TABLES` (`dynamodb://prefix`), `TILEGATE_QUEUE_URL`,
//! `TILEGATE_DLQ_URL`, and optionally `TILEGATE_VISIBILITY_S` (the queue's visibility timeout,
//! default 720) and `TILEGATE_CONCURRENCY`. With `TILEGATE_ASSEMBLE=1` the function assembles
//! each job whose last window it records, when the job's tiles total at most
//! `TILEGATE_ASSEMBLE_MAX_BYTES` (default 4 GiB: a 10 GiB function assembling within its 15
//! minutes; deploy/aws/template.yaml sets 768 MiB for its 2 GiB function, the assembler holding
//! the scene in memory); a larger job is left `assembling` for the `tilegate assemble --all`
//! CronJob of deploy/k8s. `TILEGATE_ANNOUNCE` (`sns:TOPIC_ARN`, `eventbridge:BUS`, `https://`
//! webhooks, comma-separated; webhooks signed with `TILEGATE_WEBHOOK_SECRET`) announces each
//! scene the function publishes and each job it leaves incomplete.
//!
//! With `TILEGATE_MODE=ingest` the same binary is the ingest function, fed by the arrivals
//! queue (S3 notifications, EventBridge events, SNS envelopes, STAC Items): it plans each
//! arrival with the configuration in `TILEGATE_INGEST` (the JSON `tilegate ingest …
//! --print-config` prints) and dead-letters what it cannot plan to `TILEGATE_ARRIVALS_DLQ_URL`
//! (the arrivals queue is `TILEGATE_ARRIVALS_URL`).
//!
//! With `TILEGATE_MODE=reconcile` it is the reconciler: one pass over the open jobs per
//! invocation, on an EventBridge Scheduler schedule (see `tilegate reconcile-jobs`).
//!
//! With `TILEGATE_MODE=serve` it is the job service behind API Gateway's HTTP API: the router
//! of `tilegate serve`, configured by the same environment variables (`TILEGATE_JWKS`,
//! `TILEGATE_JWT_ISSUER`, `TILEGATE_JWT_AUDIENCE`, `TILEGATE_RATE_LIMIT`, …).

use lambda_runtime::{Error, LambdaEvent, service_fn};
use std::sync::Arc;
use std::time::Duration;
use tilegate_lambda::{Handler, HandlerConfig};

fn env(name: &str) -> Result<String, Error> {
    std::env::var(name).map_err(|_| format!("the function needs {name} in its environment").into())
}

#[tokio::main]
async fn main() -> Result<(), Error> {
    {
        use tracing_subscriber::util::SubscriberInitExt as _;
        // The same redacting format as the command line's: a store's error can name a signed
        // URL, and CloudWatch keeps what is written.
        tilegate_pipeline::logging::subscriber(
            tracing_subscriber::EnvFilter::try_from_env("TILEGATE_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
            false,
            std::io::stderr,
        )
        .init();
    }
    tilegate_cog::set_config_options(tilegate_aws::gdal_s3_config());
    let backends = tilegate_aws::AwsBackends::for_function(
        &env("TILEGATE_OBJECTS")?,
        &env("TILEGATE_TABLES")?,
        &env("TILEGATE_QUEUE_URL")?,
        &env("TILEGATE_DLQ_URL")?,
        tilegate_core::queue::DEFAULT_MAX_RECEIVE_COUNT,
    )
    .await?;
    if std::env::var("TILEGATE_MODE").is_ok_and(|m| m == "ingest") {
        return ingest(backends).await;
    }
    if std::env::var("TILEGATE_MODE").is_ok_and(|m| m == "serve") {
        return serve(backends).await;
    }
    if std::env::var("TILEGATE_MODE").is_ok_and(|m| m == "reconcile") {
        return reconcile(backends).await;
    }
    let mut cfg = HandlerConfig::default();
    if let Ok(name) = std::env::var("AWS_LAMBDA_FUNCTION_NAME") {
        cfg.function = name;
    }
    if let Some(s) = std::env::var("TILEGATE_VISIBILITY_S")
        .ok()
        .and_then(|s| s.parse().ok())
    {
        cfg.visibility = Duration::from_secs(s);
    }
    cfg.sources = policies()?;
    if let Some(n) = std::env::var("TILEGATE_CONCURRENCY")
        .ok()
        .and_then(|s| s.parse().ok())
    {
        cfg.concurrency = n;
    }
    if std::env::var("TILEGATE_ASSEMBLE").is_ok_and(|v| v == "1") {
        let max = std::env::var("TILEGATE_ASSEMBLE_MAX_BYTES")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(tilegate_pipeline::complete::LAMBDA_ASSEMBLE_MAX_BYTES);
        let opts = tilegate_assembler::AssembleOptions::new(tilegate_claim::unique_owner(
            "lambda-assemble",
        ));
        let mut hook = tilegate_pipeline::complete::AssembleOnComplete::new(backends.clone(), opts)
            .at_most(max);
        // TILEGATE_ANNOUNCE: where published scenes and incomplete jobs are announced.
        let specs = tilegate_core::announce::sink_specs(
            &std::env::var("TILEGATE_ANNOUNCE").unwrap_or_default(),
        )?;
        if !specs.is_empty() {
            let sinks = tilegate_backends::open_sinks(&specs).await?;
            hook = hook.announcing(tilegate_pipeline::announce::Announcer::new(
                backends.clone(),
                sinks,
            ));
        }
        cfg.on_complete = Some(Arc::new(hook));
    }
    let handler = Arc::new(Handler::new(backends, cfg));
    lambda_runtime::run(service_fn(
        move |event: LambdaEvent<aws_lambda_events::event::sqs::SqsEvent>| {
            let handler = handler.clone();
            async move {
                let result = handler.handle(event.payload).await;
                // CloudWatch reads Embedded Metric Format documents from the function's output.
                for line in &result.metrics {
                    println!("{line}");
                }
                Ok::<_, Error>(result.response)
            }
        },
    ))
    .await
}

/// `TILEGATE_SOURCE_POLICY`: a file in the function's package (the default policy without it).
fn policies() -> Result<Arc<tilegate_source::Policies>, Error> {
    Ok(Arc::new(
        match std::env::var_os("TILEGATE_SOURCE_POLICY").filter(|p| !p.is_empty()) {
            Some(path) => tilegate_source::policy::from_file(path.as_ref())?,
            None => tilegate_source::Policies::new(),
        },
    ))
}

/// The job service behind API Gateway's HTTP API (payload format 2.0): the same router as
/// `tilegate serve`, configured by the same variables ([`tilegate_service::settings_from_env`]).
/// Event streams end within 20 s (a Lambda response is sent whole); clients reconnect.
async fn serve(backends: tilegate_core::Backends) -> Result<(), Error> {
    let (jwt, mut limits) = tilegate_service::settings_from_env()?;
    limits.max_stream = Duration::from_secs(20);
    let jwt = match jwt {
        Some(cfg) => Some(tilegate_service::jwt::JwtVerifier::new(cfg).await?),
        None => None,
    };
    let service = Arc::new(tilegate_service::Service::new(
        backends,
        policies()?,
        jwt,
        limits,
        tilegate_report::PriceTable::default(),
    ));
    let router = tilegate_service::router(service);
    lambda_runtime::run(service_fn(move |event: LambdaEvent<serde_json::Value>| {
        let router = router.clone();
        async move {
            let r = tilegate_service::lambda::handle(router, event.payload).await?;
            Ok::<_, Error>(serde_json::to_value(r)?)
        }
    }))
    .await
}

/// The reconciler, one pass per invocation (an EventBridge Scheduler schedule invokes it):
/// `TILEGATE_ANNOUNCE` its sinks (the worker function's), `TILEGATE_ASSEMBLE_MAX_BYTES` the
/// largest job it assembles, `TILEGATE_RECONCILE_GRACE_S` (default 120) how long a planner
/// has to enqueue. Answers with the pass's report; a pass a store's failure stopped is an
/// error, so the schedule's retry policy and the function's metrics see it.
async fn reconcile(backends: tilegate_core::Backends) -> Result<(), Error> {
    let max = std::env::var("TILEGATE_ASSEMBLE_MAX_BYTES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(tilegate_pipeline::complete::LAMBDA_ASSEMBLE_MAX_BYTES);
    let mut opts = tilegate_pipeline::reconcile::ReconcileOptions::new(
        tilegate_assembler::AssembleOptions::new(tilegate_claim::unique_owner("lambda-reconcile")),
    );
    opts.max_assemble_bytes = Some(max);
    if let Some(grace) = std::env::var("TILEGATE_RECONCILE_GRACE_S")
        .ok()
        .and_then(|s| s.parse::<u64>().ok())
    {
        opts.grace = Duration::from_secs(grace);
    }
    let specs = tilegate_core::announce::sink_specs(
        &std::env::var("TILEGATE_ANNOUNCE").unwrap_or_default(),
    )?;
    let sinks = if specs.is_empty() {
        Vec::new()
    } else {
        tilegate_backends::open_sinks(&specs).await?
    };
    let reconciler = Arc::new(tilegate_pipeline::reconcile::Reconciler::new(
        backends.clone(),
        opts,
        tilegate_pipeline::announce::Announcer::new(backends, sinks),
    ));
    lambda_runtime::run(service_fn(move |_event: LambdaEvent<serde_json::Value>| {
        let reconciler = Arc::clone(&reconciler);
        async move {
            let report = reconciler.pass().await?;
            Ok::<_, Error>(serde_json::to_value(report)?)
        }
    }))
    .await
}

/// The ingest function: arrivals in, planned jobs out.
async fn ingest(backends: tilegate_core::Backends) -> Result<(), Error> {
    let cfg: tilegate_pipeline::ingest::IngestConfig =
        serde_json::from_str(&env("TILEGATE_INGEST")?)
            .map_err(|e| format!("TILEGATE_INGEST is not an ingest configuration: {e}"))?;
    let arrivals = tilegate_aws::AwsBackends::queue_for_function(
        &env("TILEGATE_ARRIVALS_URL")?,
        &env("TILEGATE_ARRIVALS_DLQ_URL")?,
        tilegate_core::queue::DEFAULT_MAX_RECEIVE_COUNT,
    )
    .await;
    let handler = Arc::new(tilegate_lambda::IngestHandler::new(
        tilegate_pipeline::ingest::Ingest::new(backends, cfg, policies()?),
        Arc::new(arrivals),
    ));
    lambda_runtime::run(service_fn(
        move |event: LambdaEvent<aws_lambda_events::event::sqs::SqsEvent>| {
            let handler = handler.clone();
            async move { Ok::<_, Error>(handler.handle(event.payload).await.response) }
        },
    ))
    .await
}

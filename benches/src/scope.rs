//! What one tenant's request costs the stores, against the AWS emulator: the requests a
//! status call (`GET /v1/jobs/{id}` — the credential proved, the job's status gathered), a
//! listing (`GET /v1/jobs`) and one look of an event stream send, counted by service and
//! operation as tilegate's AWS stores count every request they put on the wire — first in a
//! deployment that holds only the tenant's job, then with 10,000 other tenants' jobs and 1,000
//! dead letters of theirs. The service's handlers run in this process, over the same stores
//! `tilegate serve` opens; the operator's `tilegate status` (which reads the dead-letter
//! queue) is counted beside them for contrast.

use anyhow::Context as _;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::sync::Arc;
use tilegate_core::grid::Grid;
use tilegate_core::keys::Prefix;
use tilegate_core::queue::ReceiveOptions;
use tilegate_core::recipe::Recipe;
use tilegate_core::source::{SceneMeta, SourceInfo};
use tilegate_core::table::JobRecord;
use tilegate_core::{Backends, ETag, JobId, Tenant};
use tilegate_service::{Caller, Limits, Role, Service};

/// A job row of `tenant`'s, as the planner writes one (a source nobody reads).
pub(crate) fn job(tenant: &Tenant, n: usize, created_at: i64) -> JobRecord {
    let recipe = Recipe::copy_all();
    let source = SourceInfo {
        uri: format!("https://imagery.example/{tenant}/{n}.tif"),
        etag: ETag::new("\"e\""),
        size: 4096,
        stat: None,
        assets: Vec::new(),
        signed: false,
    };
    let prefix = tenant.root(&Prefix::default()).expect("a tenant root");
    JobRecord {
        job_id: JobId::of(&source, &recipe, &prefix, tenant),
        source,
        recipe,
        grid: Grid::new(2048, 2048, 512).expect("a grid"),
        prefix,
        tenant: tenant.clone(),
        scene: SceneMeta {
            width: 2048,
            height: 2048,
            bands: 1,
            dtype: "Byte".to_owned(),
            crs_wkt: String::new(),
            geotransform: [0.0, 10.0, 0.0, 0.0, 0.0, -10.0],
            nodata: None,
            placement: None,
            datetime: None,
        },
        created_at,
        scene_output: None,
        manifest_shards: 1,
        redrives: 0,
        outbox: Vec::new(),
        windows_enqueued: false,
        settled: false,
    }
}

/// Requests sent by `f`, by `service:Operation`.
pub(crate) async fn counted<F: Future>(f: F) -> (F::Output, BTreeMap<String, u64>) {
    let before = tilegate_retry::meter::unattributed();
    let out = f.await;
    let after = tilegate_retry::meter::unattributed();
    let mut diff = BTreeMap::new();
    for (name, n) in after {
        let Some(rest) = name.strip_prefix("requests_total{") else {
            continue;
        };
        let d = n - before.get(&name).copied().unwrap_or(0);
        if d > 0 {
            // `service="s3",op="GetObject"}` → `s3:GetObject`.
            let short = rest
                .trim_end_matches('}')
                .replace("service=\"", "")
                .replace("\",op=\"", ":")
                .replace('"', "");
            diff.insert(short, d);
        }
    }
    (out, diff)
}

pub(crate) fn total(c: &BTreeMap<String, u64>) -> u64 {
    c.values().sum()
}

/// The caller `key` proves, as a request carrying it would be proved.
async fn caller(s: &Service, key: &str) -> anyhow::Result<Caller> {
    let (parts, ()) = axum::http::Request::builder()
        .header("authorization", format!("Bearer {key}"))
        .body(())?
        .into_parts();
    tilegate_service::auth::authenticate(s, &parts)
        .await
        .map_err(|e| anyhow::anyhow!("authenticate: {}", e.message))
}

/// One of each of the tenant's requests, counted.
async fn measure(s: &Arc<Service>, key: &str, job: &JobRecord) -> anyhow::Result<Value> {
    use axum::extract::State;
    let id = job.job_id.to_string();
    let (status, status_n) = counted(async {
        let c = caller(s, key).await?;
        tilegate_service::api::get_job(
            State(Arc::clone(s)),
            c,
            tilegate_service::extract::JobPath(id.clone()),
        )
        .await
        .map_err(|e| anyhow::anyhow!("status: {}", e.message))
    })
    .await;
    let _ = status?;
    let (list, list_n) = counted(async {
        let c = caller(s, key).await?;
        tilegate_service::api::list_jobs(
            State(Arc::clone(s)),
            c,
            tilegate_service::extract::Query(serde_json::from_value(json!({}))?),
        )
        .await
        .map_err(|e| anyhow::anyhow!("list: {}", e.message))
    })
    .await;
    anyhow::ensure!(list?.0.jobs.len() == 1, "the tenant lists its one job");
    let c = caller(s, key).await?;
    let (look, look_n) = counted(tilegate_service::events::look(s, &c, job)).await;
    anyhow::ensure!(
        matches!(look, Ok(tilegate_service::events::Look::Progress(_))),
        "a look: {look:?}"
    );
    let (operator, operator_n) = counted(tilegate_report::status::gather(
        &s.backends,
        job.clone(),
        tilegate_core::now_millis(),
    ))
    .await;
    operator?;
    Ok(json!({
        "status_call": {"requests": total(&status_n), "by_operation": status_n},
        "listing": {"requests": total(&list_n), "by_operation": list_n},
        "stream_look": {"requests": total(&look_n), "by_operation": look_n},
        "operator_status": {"requests": total(&operator_n), "by_operation": operator_n},
    }))
}

/// Fill the deployment with `jobs` other tenants' jobs and `dead` dead letters of theirs.
async fn crowd(b: &Backends, jobs: usize, dead: usize) -> anyhow::Result<()> {
    let now = tilegate_core::now_millis();
    let tenants: Vec<Tenant> = (0..100)
        .map(|n| Tenant::parse(&format!("other{n}")))
        .collect::<Result<_, _>>()?;
    let rows: Vec<JobRecord> = (0..jobs)
        .map(|n| job(&tenants[n % tenants.len()], n, now + n as i64))
        .collect();
    futures::future::try_join_all(
        rows.chunks(jobs.div_ceil(16).max(1))
            .map(|chunk| async move {
                for j in chunk {
                    b.jobs.create_job(j).await?;
                }
                Ok::<_, tilegate_core::StoreError>(())
            }),
    )
    .await?;
    eprintln!("scope: {jobs} other tenants' jobs written");
    let bodies: Vec<String> = rows
        .iter()
        .take(dead)
        .map(|j| json!({"v": 1, "job_id": j.job_id, "window": [0, 0]}).to_string())
        .collect();
    for batch in bodies.chunks(10) {
        b.queue.send_batch(batch).await?;
    }
    let mut lettered = 0;
    while lettered < dead {
        let got = b
            .queue
            .receive(ReceiveOptions {
                max: 10,
                wait: std::time::Duration::from_secs(1),
                visibility: std::time::Duration::from_secs(120),
            })
            .await?;
        for m in &got {
            b.queue
                .dead_letter(m, "source-changed: another tenant's source changed")
                .await?;
        }
        lettered += got.len();
    }
    eprintln!("scope: {dead} dead letters moved");
    Ok(())
}

/// A fresh deployment on the AWS emulator for a benchmark (`name` names its bucket, tables
/// and queue): `tilegate init --create-bucket` run, its objects, tables and queue URLs.
pub(crate) fn emulator_deployment(
    tilegate: &std::path::Path,
    work: &std::path::Path,
    name: &str,
) -> anyhow::Result<(String, String, String)> {
    std::env::var("AWS_ENDPOINT_URL").context(
        "no AWS emulator: start it with eval \"$(bash .ci/aws-emulator start)\" (or use .ci/bench)",
    )?;
    let id = format!(
        "{name}{}-{}",
        std::process::id(),
        tilegate_core::now_millis() % 1_000_000
    );
    let data = work.join(name);
    std::fs::create_dir_all(&data)?;
    let objects = format!("s3://{id}/out");
    let tables = format!("dynamodb://{id}");
    let queue = format!("sqs://{id}");
    crate::measure::run(std::process::Command::new(tilegate).args([
        "--data",
        data.to_str().context("a UTF-8 path")?,
        "--objects",
        &objects,
        "--tables",
        &tables,
        "--queue",
        &queue,
        "init",
        "--create-bucket",
    ]))?;
    Ok((objects, tables, queue))
}

pub fn run(
    tilegate: &std::path::Path,
    work: &std::path::Path,
    others: usize,
    dead: usize,
) -> anyhow::Result<Value> {
    let (objects, tables, queue) = emulator_deployment(tilegate, work, "tgscope")?;
    let rt = tokio::runtime::Runtime::new()?;
    rt.block_on(async {
        let b = tilegate_aws::AwsBackends::connect(&objects, &tables, &queue, 3).await?;
        let tenant = Tenant::parse("acme")?;
        let mine = job(&tenant, 0, tilegate_core::now_millis() - 86_400_000);
        b.jobs.create_job(&mine).await?;
        let keys = tilegate_service::KeyStore::new(Arc::clone(&b.objects));
        let key = keys
            .create(tenant, Role::Tenant, String::new(), None, 0)
            .await?
            .key;
        let limits = Limits {
            rate_per_s: 0.0,
            ..Limits::default()
        };
        let s = Arc::new(Service::new(
            b.clone(),
            Arc::default(),
            None,
            limits,
            tilegate_report::PriceTable::default(),
        ));
        // Once before counting: the key's record is read once per process.
        measure(&s, &key, &mine).await?;
        let alone = measure(&s, &key, &mine).await?;
        let started = std::time::Instant::now();
        crowd(&b, others, dead).await?;
        let filled_s = started.elapsed().as_secs_f64();
        let crowded = measure(&s, &key, &mine).await?;
        Ok::<_, anyhow::Error>(json!({
            "other_tenants_jobs": others,
            "dead_letters": dead,
            "fill_s": filled_s,
            "alone": alone,
            "crowded": crowded,
        }))
    })
}

pub fn table(doc: &Value) -> String {
    let mut out = format!(
        "Requests one tenant's call sends (AWS stores, counted on the wire, emulator): alone, and \
         beside {} other tenants' jobs and {} dead letters\n\n\
         | call | alone | crowded | by operation (crowded) |\n|---|---:|---:|---|\n",
        doc["other_tenants_jobs"], doc["dead_letters"]
    );
    for (name, label) in [
        ("status_call", "`GET /v1/jobs/{id}` (credential + status)"),
        ("listing", "`GET /v1/jobs` (credential + listing)"),
        (
            "stream_look",
            "one event-stream look (charge, credential, progress)",
        ),
        (
            "operator_status",
            "`tilegate status` (the operator's; reads the DLQ)",
        ),
    ] {
        let ops: Vec<String> = doc["crowded"][name]["by_operation"]
            .as_object()
            .into_iter()
            .flatten()
            .map(|(k, v)| format!("{k} {v}"))
            .collect();
        out.push_str(&format!(
            "| {label} | {} | {} | {} |\n",
            doc["alone"][name]["requests"],
            doc["crowded"][name]["requests"],
            ops.join(", ")
        ));
    }
    out
}

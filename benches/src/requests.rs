//! Requests per window on AWS, against the local emulator: a scene on S3 planned and worked by
//! `tilegate` processes, the requests tilegate's stores sent counted by service and operation
//! (the counters every job keeps, `requests_total{service,op}`), the work stage's divided by
//! the windows. GDAL's own range reads of the source go through `/vsis3/`, not tilegate's
//! stores, and are not in the count.

use crate::measure::run;
use anyhow::{Context, bail};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use tilegate_core::object::ObjectStoreExt as _;

/// What to run.
#[derive(Debug, Clone)]
pub struct Config {
    /// Directory holding the `tilegate` binary.
    pub bin: PathBuf,
    pub work: PathBuf,
    /// Scene width and height, and the window size (400 windows by default).
    pub size: u32,
    pub window: u32,
    /// `tilegate work` processes.
    pub workers: u32,
}

/// (service, operation) → requests.
type Counts = BTreeMap<(String, String), u64>;

/// The job's counted requests, from `status --json`'s cost lines.
fn counted(status: &Value) -> Counts {
    status["cost"]["lines"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|l| {
            Some((
                (
                    l["service"].as_str()?.to_owned(),
                    l["op"].as_str()?.to_owned(),
                ),
                l["requests"].as_u64()?,
            ))
        })
        .collect()
}

pub fn run_requests(c: &Config) -> anyhow::Result<Value> {
    let endpoint = std::env::var("AWS_ENDPOINT_URL").context(
        "no AWS emulator: start it with eval \"$(bash .ci/aws-emulator start)\" (or use .ci/bench)",
    )?;
    let data = c.work.join("requests");
    if data.exists() {
        std::fs::remove_dir_all(&data)?;
    }
    std::fs::create_dir_all(&data)?;
    let id = format!(
        "tgreq{}-{}",
        std::process::id(),
        tilegate_core::now_millis() % 1_000_000
    );
    let args = [
        "--data".to_owned(),
        data.display().to_string(),
        "--objects".to_owned(),
        format!("s3://{id}/out"),
        "--tables".to_owned(),
        format!("dynamodb://{id}"),
        "--queue".to_owned(),
        format!("sqs://{id}"),
        "--json".to_owned(),
    ];
    let tg = |extra: &[&str]| -> anyhow::Result<Value> {
        let (_, out) = run(Command::new(c.bin.join("tilegate")).args(&args).args(extra))?;
        Ok(serde_json::from_slice(&out)?)
    };
    tg(&["init", "--create-bucket"])?;
    let scene = data.join("scene.tif");
    run(Command::new(c.bin.join("tilegate")).args([
        "--data",
        data.to_str().unwrap(),
        "sample-scene",
        scene.to_str().unwrap(),
        "--size",
        &c.size.to_string(),
        "--seed",
        "7",
    ]))?;
    let source = put_source(&id, &scene)?;
    let plan = tg(&["plan", &source, "--window", &c.window.to_string()])?;
    let job = plan["job_id"].as_str().context("job_id")?.to_owned();
    let windows = plan["windows"].as_u64().context("windows")?;
    let planned = counted(&tg(&["status", &job])?);
    let mut cmds: Vec<Command> = (0..c.workers)
        .map(|_| {
            let mut cmd = Command::new(c.bin.join("tilegate"));
            cmd.args(&args).args(["work", "--until-empty"]);
            cmd
        })
        .collect();
    let (_, outs) = crate::measure::run_all(&mut cmds)?;
    // Receives and queue-depth checks come before a message names its job: each worker
    // reports them as its own.
    let mut unattributed = Counts::new();
    for out in outs {
        let doc: Value = serde_json::from_slice(&out)?;
        for (name, n) in doc["unattributed_requests"]
            .as_object()
            .into_iter()
            .flatten()
        {
            if let Some((service, op)) = request_labels(name) {
                *unattributed.entry((service, op)).or_default() += n.as_u64().unwrap_or(0);
            }
        }
    }
    let status = tg(&["status", &job])?;
    if status["manifest_rows"].as_u64() != Some(windows)
        || status["counters"]["tiles_written_total"].as_u64() != Some(windows)
    {
        bail!("the job did not complete cleanly: {status}");
    }
    let mut worked: Counts = counted(&status)
        .into_iter()
        .map(|(k, n)| {
            let before = planned.get(&k).copied().unwrap_or(0);
            (k, n - before)
        })
        .filter(|(_, n)| *n > 0)
        .collect();
    for (k, n) in unattributed {
        *worked.entry(k).or_default() += n;
    }
    let total: u64 = worked.values().sum();
    let mut by_service: BTreeMap<String, u64> = BTreeMap::new();
    for ((service, _), n) in &worked {
        *by_service.entry(service.clone()).or_default() += n;
    }
    let per = |n: u64| n as f64 / windows as f64;
    Ok(json!({
        "endpoint": endpoint,
        "source": source,
        "windows": windows,
        "workers": c.workers,
        "requests_per_window": per(total),
        "by_service": by_service.iter().map(|(s, n)| (s.clone(), json!({"requests": n, "per_window": per(*n)}))).collect::<BTreeMap<_, _>>(),
        "by_operation": worked.iter().map(|((s, o), n)| json!({"service": s, "op": o, "requests": n, "per_window": per(*n)})).collect::<Vec<_>>(),
        "plan": planned.iter().map(|((s, o), n)| json!({"service": s, "op": o, "requests": n})).collect::<Vec<_>>(),
    }))
}

/// (service, op) of a `requests_total{service="s3",op="PutObject"}` counter name.
fn request_labels(name: &str) -> Option<(String, String)> {
    let (base, labels) = tilegate_core::metrics::split_labels(name);
    if base != tilegate_core::metrics::REQUESTS {
        return None;
    }
    let get = |k: &str| {
        labels
            .iter()
            .find(|(l, _)| *l == k)
            .map(|(_, v)| (*v).to_owned())
    };
    Some((get("service")?, get("op")?))
}

/// Upload the scene as the job's source: `s3://ID/sources/scene.tif`.
fn put_source(bucket: &str, scene: &Path) -> anyhow::Result<String> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let root = format!("s3://{bucket}");
    let store = rt.block_on(tilegate_aws::S3Store::connect(&root))?;
    let bytes = bytes::Bytes::from(std::fs::read(scene)?);
    rt.block_on(store.put_create(
        &tilegate_core::ObjectKey::parse("sources/scene.tif")?,
        bytes,
    ))?;
    Ok(format!("{root}/sources/scene.tif"))
}

/// The figures as Markdown lines.
pub fn table(doc: &Value) -> String {
    let mut md = format!(
        "{} windows, {} `tilegate work` process(es), source `{}`: **{:.2} requests per window**\n\n\
         | service | operation | requests | per window |\n|---|---|---|---|\n",
        doc["windows"],
        doc["workers"],
        doc["source"].as_str().unwrap_or(""),
        doc["requests_per_window"].as_f64().unwrap_or(f64::NAN)
    );
    for l in doc["by_operation"].as_array().into_iter().flatten() {
        md.push_str(&format!(
            "| {} | {} | {} | {:.3} |\n",
            l["service"].as_str().unwrap_or(""),
            l["op"].as_str().unwrap_or(""),
            l["requests"],
            l["per_window"].as_f64().unwrap_or(f64::NAN)
        ));
    }
    md
}

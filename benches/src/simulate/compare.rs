//! The simulation against a real run: the same planner, workers (with GDAL's encoder) and
//! assembler on the embedded backend (SQLite and local files), with every call counted as the
//! AWS request it would be (the model's counting-only mode: no latency, no limits). The two
//! request counts, side by side, say how far the simulation's accounting can be trusted.

use super::model::{Model, Modelled, ServiceModel};
use super::{Report, SimConfig, assemble_options, plan_options, scene_vrt, worker_config};
use anyhow::Context as _;
use serde::Serialize;
use std::collections::BTreeMap;
use std::sync::Arc;
use tilegate_core::Backends;
use tilegate_core::metrics::Counters;
use tilegate_embedded::{LocalObjectStore, SqliteBackend};
use tilegate_pipeline::{RunOptions, Until};

/// A real embedded run's counted requests beside the simulation's.
#[derive(Debug, Clone, Serialize)]
pub struct Comparison {
    pub embedded_requests: u64,
    pub simulated_requests: u64,
    /// simulated / embedded.
    pub ratio: f64,
    pub embedded_by_op: BTreeMap<String, u64>,
    pub simulated_by_op: BTreeMap<String, u64>,
    /// Per service: (embedded, simulated).
    pub by_service: BTreeMap<String, (u64, u64)>,
    /// The real run's per-window read + encode times, median and 99th percentile (ms).
    pub embedded_encode_ms: (u64, u64),
    pub embedded_wall_s: f64,
}

/// Run `cfg`'s job for real on the embedded backend and compare its counted requests with
/// `simulated`.
pub fn compare(cfg: &SimConfig, simulated: &Report) -> anyhow::Result<Comparison> {
    let vrt = scene_vrt(&cfg.work, cfg.windows, cfg.window)?;
    let dir = cfg.work.join("embedded");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir)?;
    let rt = tokio::runtime::Runtime::new()?;
    rt.block_on(async {
        let db = SqliteBackend::open(dir.join("tilegate.db"))?;
        let inner = Backends {
            objects: Arc::new(LocalObjectStore::open(dir.join("objects"))?),
            jobs: Arc::new(db.clone()),
            manifest: Arc::new(db.clone()),
            claims: Arc::new(db.clone()),
            counters: Arc::new(db.clone()),
            ledger: Arc::new(db.clone()),
            queue: Arc::new(db.queue("work", 3)),
            sources: None,
        };
        let model = Model::new(ServiceModel::counting(), cfg.seed);
        let (b, _) = Modelled::wrap(inner, Arc::clone(&model), 0.0, cfg.seed);
        let started = std::time::Instant::now();
        // The sequence `tilegate run` runs, but as a deployment runs it: the workers stop when
        // the queue drains and hand the assembler nothing (it reads the tiles back).
        let opts = RunOptions {
            plan: plan_options(cfg),
            worker: worker_config(cfg),
            pools: cfg.workers.max(1) as usize,
            until: Until::QueueDrained,
            assemble: (cfg.assemblers > 0)
                .then(|| assemble_options(cfg, "compared-assembler".to_owned())),
            reduced_budget: 0,
        };
        let vrt = vrt.to_str().context("a UTF-8 path")?;
        let counters = Arc::new(Counters::new());
        let run = tilegate_pipeline::run(&b, vrt, opts, &counters, super::never(), |_| ())
            .await
            .context("the embedded run")?;
        let plan = run.plan;
        let wall = started.elapsed().as_secs_f64();
        let mut times: Vec<u64> =
            tilegate_core::table::ManifestTable::list_entries(&db, &plan.job.job_id)
                .await?
                .iter()
                .map(|r| r.row.facts.read_ms.unwrap_or(0) + r.row.facts.encode_ms.unwrap_or(0))
                .collect();
        times.sort_unstable();
        let pct = |p: f64| {
            times
                .get(((times.len().saturating_sub(1)) as f64 * p).round() as usize)
                .copied()
                .unwrap_or(0)
        };
        let tally = model.tally();
        let mut by_service: BTreeMap<String, (u64, u64)> = BTreeMap::new();
        for service in ["s3", "dynamodb", "sqs"] {
            by_service.insert(
                service.to_owned(),
                (
                    tally.requests_of(service),
                    simulated.tally.requests_of(service),
                ),
            );
        }
        let embedded = tally.total_requests();
        anyhow::Ok(Comparison {
            embedded_requests: embedded,
            simulated_requests: simulated.requests,
            ratio: simulated.requests as f64 / embedded.max(1) as f64,
            embedded_by_op: tally.requests.clone(),
            simulated_by_op: simulated.tally.requests.clone(),
            by_service,
            embedded_encode_ms: (pct(0.5), pct(0.99)),
            embedded_wall_s: wall,
        })
    })
}

/// The comparison as text.
pub fn render(c: &Comparison) -> String {
    let mut out = format!(
        "compared with a real embedded run ({:.1} s wall; read+encode {} ms median, {} ms p99):\n  \
         requests: embedded {}, simulated {} (ratio {:.3})\n",
        c.embedded_wall_s,
        c.embedded_encode_ms.0,
        c.embedded_encode_ms.1,
        c.embedded_requests,
        c.simulated_requests,
        c.ratio
    );
    for (service, (e, s)) in &c.by_service {
        out.push_str(&format!("  {service}: embedded {e}, simulated {s}\n"));
    }
    let ops: std::collections::BTreeSet<&String> = c
        .embedded_by_op
        .keys()
        .chain(c.simulated_by_op.keys())
        .collect();
    for op in ops {
        let e = c.embedded_by_op.get(op).copied().unwrap_or(0);
        let s = c.simulated_by_op.get(op).copied().unwrap_or(0);
        out.push_str(&format!("    {op}: {e} / {s}\n"));
    }
    out
}

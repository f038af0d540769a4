//! The reports of the commands that look: status, report, stac, dlq.

use super::Report;
use crate::output::Out;
use schemars::JsonSchema;
use serde::Serialize;
use serde_json::Value;
use std::path::PathBuf;
use tilegate_core::lifecycle::{Counts, Lifecycle};
use tilegate_core::{JobId, UnixMillis};
use tilegate_report::JobStatus;

/// `status`: the job's status model, and without a job argument the recent jobs.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct StatusReport {
    #[serde(flatten)]
    pub status: JobStatus,
    /// The newest jobs (when no job was named).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub recent_jobs: Option<Vec<RecentJob>>,
    /// With `--cost`: the cost section is in `cost` either way; this says it was asked for.
    #[serde(skip)]
    pub show_cost: bool,
}

/// A recent job and its progress: the same state and counts as its own `status`.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct RecentJob {
    pub job_id: String,
    pub source: String,
    pub recipe: String,
    pub created_at: UnixMillis,
    /// Where the job is (planned, partial, incomplete, not_assembled, published).
    pub lifecycle: Lifecycle,
    /// Its windows: recorded, dead-lettered, missing.
    #[serde(flatten)]
    pub counts: Counts,
}

impl Report for StatusReport {
    fn text(&self, out: &Out) -> String {
        let mut s = crate::output::status_text(&self.status, &out.objects_root);
        if self.show_cost {
            s.push('\n');
            s.push_str(&cost_text(&self.status.cost));
        }
        if let Some(recent) = self.recent_jobs.as_ref().filter(|r| r.len() > 1) {
            s.push_str("\n\nrecent jobs (newest first)\n");
            for r in recent {
                let c = &r.counts;
                s.push_str(&format!(
                    "  {}  {:>7}/{:<7} {:>5.1}%  {:<13} {:<8} {}\n",
                    r.job_id,
                    c.recorded,
                    c.windows,
                    100.0 * c.recorded as f64 / c.windows.max(1) as f64,
                    r.lifecycle.as_str(),
                    r.recipe,
                    r.source
                ));
            }
        }
        s.trim_end().to_owned()
    }
}

/// One frame of `status --watch --json` (a line each refresh).
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct WatchFrame {
    #[serde(flatten)]
    pub status: JobStatus,
    pub rate_windows_per_s: f64,
    pub eta_s: Option<f64>,
    /// Why the job is not moving, when it is not.
    pub hint: Option<String>,
}

/// `report`: the HTML page written.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct PageReport {
    pub job_id: JobId,
    pub report: PathBuf,
    pub bytes: usize,
    /// The job's state, as `status` names it.
    pub lifecycle: Lifecycle,
    /// Its windows (recorded, dead-lettered, missing), as `status` counts them.
    pub counts: Counts,
    pub windows: u64,
    pub window_states: tilegate_report::status::StateCounts,
    pub complete: bool,
}

impl Report for PageReport {
    fn text(&self, _: &Out) -> String {
        let s = &self.window_states;
        format!(
            "wrote {} ({} bytes): job {}, {} of {} windows recorded; {} written, {} already \
             present, {} encode skipped, {} dead-lettered, {} missing",
            self.report.display(),
            self.bytes,
            self.lifecycle.as_str(),
            self.counts.recorded,
            self.windows,
            s.written,
            s.already_present,
            s.encode_skipped,
            s.dead_lettered,
            s.missing
        )
    }
}

/// `stac`: the scenes' STAC Items (each valid against STAC 1.1 and its extensions) and where
/// they are.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct StacReport {
    /// STAC Items (<https://schemas.stacspec.org/v1.1.0/item-spec/json-schema/item.json>).
    pub items: Vec<Value>,
    pub hrefs: Vec<String>,
    /// The Collection written with `--stac-collection`.
    pub collection: Option<PathBuf>,
    /// `--hrefs`: the text is where the Items are, not the Items.
    #[serde(skip)]
    pub only_hrefs: bool,
}

impl Report for StacReport {
    /// The Items, as the help says: one job's Item as it is, several as a STAC ItemCollection
    /// (a GeoJSON FeatureCollection, which `plan --from` reads). With `--hrefs`, where each is.
    fn text(&self, _: &Out) -> String {
        if self.only_hrefs {
            let mut s = self.hrefs.join("\n");
            if let Some(p) = &self.collection {
                s.push_str(&format!("\nwrote the Collection {}", p.display()));
            }
            return s.trim().to_owned();
        }
        if let Some(p) = &self.collection {
            // Stdout is the Items' JSON; the note goes beside it.
            eprintln!("tilegate: wrote the Collection {}", p.display());
        }
        let doc = match self.items.as_slice() {
            [item] => item.clone(),
            items => serde_json::json!({"type": "FeatureCollection", "features": items}),
        };
        serde_json::to_string_pretty(&doc).expect("items serialise")
    }
}

/// `dlq list`: dead letters, newest first.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct DlqList {
    pub dead_letters: Vec<DeadLetterRow>,
    pub count: usize,
}

/// One dead letter.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct DeadLetterRow {
    pub message_id: String,
    /// Why it was dead-lettered: a reason code and its detail.
    pub reason: String,
    pub receive_count: u32,
    pub dead_at_ms: UnixMillis,
    pub job_id: Option<JobId>,
    /// `ROW_COL`, as everywhere else.
    pub window: Option<String>,
    pub body_bytes: usize,
}

impl Report for DlqList {
    fn text(&self, _: &Out) -> String {
        if self.dead_letters.is_empty() {
            return "no dead letters".to_owned();
        }
        let mut s = format!("{} dead letter(s)\n", self.dead_letters.len());
        for r in &self.dead_letters {
            s.push_str(&format!(
                "  {}  job {}  window {}  received {}×  {}\n",
                r.message_id,
                r.job_id.as_ref().map_or("-", JobId::as_str),
                r.window.as_deref().unwrap_or("-"),
                r.receive_count,
                r.reason
            ));
        }
        s.trim_end().to_owned()
    }
}

/// `dlq redrive`: how many dead letters went back to the work queue.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct DlqRedrive {
    pub redriven: u64,
}

impl Report for DlqRedrive {
    fn text(&self, _: &Out) -> String {
        format!(
            "returned {} dead letter(s) to the work queue",
            self.redriven
        )
    }
}

/// `dlq purge`: how many dead letters were deleted for good.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct DlqPurge {
    pub purged: u64,
}

impl Report for DlqPurge {
    fn text(&self, _: &Out) -> String {
        format!("deleted {} dead letter(s) for good", self.purged)
    }
}

/// The cost section of `status --cost`.
pub fn cost_text(c: &tilegate_report::cost::CostEstimate) -> String {
    let mut s = format!(
        "cost (prices of {}, {})\n  {:<10} {:<28} {:>10} {:>14}\n",
        c.price_table_date, c.currency, "service", "operation", "requests", "estimate"
    );
    for l in &c.lines {
        let usd = l
            .usd_per_request
            .map_or_else(|| "not priced".to_owned(), |_| format!("{:.6}", l.usd));
        s.push_str(&format!(
            "  {:<10} {:<28} {:>10} {:>14}\n",
            l.service, l.op, l.requests, usd
        ));
    }
    if c.lines.is_empty() {
        s.push_str("  no billed requests (the embedded backend's stores are local)\n");
    }
    s.push_str(&format!(
        "  {} requests, {} bytes sent, {} bytes received\n  total {:.6} {cur} ({:.8} {cur} per window), storage {:.6} {cur} per month for {} bytes",
        c.requests,
        c.bytes_sent,
        c.bytes_received,
        c.total_usd,
        c.per_window_usd,
        c.storage_usd_per_month,
        c.stored_bytes,
        cur = c.currency
    ));
    s
}

//! tilegate's worker as an SQS-triggered AWS Lambda function.
//!
//! Each record of a batch runs through the same worker code as `tilegate work`
//! ([`Worker::handle_one`]); the function answers with a *partial batch response* that lists
//! only the records that met a genuine, retryable fault, so that SQS redelivers those and no
//! other:
//!
//! - a tile already in place (the Create refused, `AlreadyPresent`) is success;
//! - a permanent fault (malformed message, unknown job, changed source, …) is sent to the
//!   dead-letter queue by the handler itself, with its reason, and reported as success — one
//!   bad record never redelivers its batch;
//! - a retryable fault (throttling, a network error) is listed in `batchItemFailures`, its
//!   visibility set to a short backoff so that it returns soon rather than after the queue's
//!   visibility timeout.
//!
//! The handler never HEADs a tile before encoding (no skip-if-present optimisation) and relies
//! on the create-if-absent write alone: a role without `s3:ListBucket` gets 403, not 404, for
//! an absent key, and the deployment grants that action on the output bucket only because the
//! assembler's look for a scene already in place needs an honest 404. Counters go out as
//! CloudWatch Embedded Metric Format lines after each batch.

use aws_lambda_events::event::sqs::{BatchItemFailure, SqsBatchResponse, SqsEvent, SqsMessage};
use futures::StreamExt as _;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tilegate_core::metrics::{self, Counters};
use tilegate_core::queue::Received;
use tilegate_core::{Backends, now_millis};
use tilegate_worker::{StopWhen, WindowOutcome, Worker, WorkerConfig};

/// The SQS event types the function receives and answers with.
pub use aws_lambda_events::event::sqs as events;

/// The CloudWatch namespace of the function's metrics.
pub const METRICS_NAMESPACE: &str = "tilegate";

/// How the function works.
#[derive(Debug, Clone)]
pub struct HandlerConfig {
    /// Records handled at once.
    pub concurrency: usize,
    /// Encoder threads.
    pub threads: usize,
    /// The queue's visibility timeout: the heartbeat keeps long windows invisible this long.
    pub visibility: Duration,
    /// The function's name, the metrics' `function` dimension.
    pub function: String,
    /// What each job may read, by its tenant (`TILEGATE_SOURCE_POLICY`, a file in the
    /// function's package; the default policy without it).
    pub sources: Arc<tilegate_source::Policies>,
    /// What to do with a job whose last window the function records (`TILEGATE_ASSEMBLE=1`:
    /// assemble it, up to `TILEGATE_ASSEMBLE_MAX_BYTES`; see
    /// [`tilegate_pipeline::complete::AssembleOnComplete`]).
    pub on_complete: Option<Arc<dyn tilegate_worker::OnComplete>>,
}

impl Default for HandlerConfig {
    fn default() -> Self {
        let threads = std::thread::available_parallelism().map_or(2, |n| n.get());
        Self {
            concurrency: threads * 2,
            threads,
            visibility: Duration::from_secs(720),
            function: "tilegate-worker".to_owned(),
            sources: Arc::default(),
            on_complete: None,
        }
    }
}

/// The function's state across invocations of one execution environment.
#[derive(Debug)]
pub struct Handler {
    worker: Worker,
    counters: Arc<Counters>,
    cfg: HandlerConfig,
    /// Counter values already reported as metrics.
    reported: Mutex<BTreeMap<String, u64>>,
}

/// What one invocation produced.
#[derive(Debug)]
pub struct BatchResult {
    pub response: SqsBatchResponse,
    /// Each record's outcome, by message ID.
    pub outcomes: Vec<(String, WindowOutcome)>,
    /// CloudWatch Embedded Metric Format documents to print, one per line.
    pub metrics: Vec<String>,
}

impl Handler {
    pub fn new(b: Backends, cfg: HandlerConfig) -> Self {
        let counters = Arc::new(Counters::new());
        let worker_cfg = WorkerConfig {
            concurrency: cfg.concurrency,
            threads: cfg.threads,
            visibility: cfg.visibility,
            // The create-if-absent write decides; a HEAD first would only cost a request.
            skip_existing: false,
            stop: StopWhen::Signal,
            sources: Arc::clone(&cfg.sources),
            on_complete: cfg.on_complete.clone(),
            ..WorkerConfig::default()
        };
        Self {
            worker: Worker::new(b, worker_cfg, counters.clone()),
            counters,
            cfg,
            reported: Mutex::new(BTreeMap::new()),
        }
    }

    /// Handle one SQS batch.
    pub async fn handle(&self, event: SqsEvent) -> BatchResult {
        let outcomes: Vec<(String, WindowOutcome)> = futures::stream::iter(event.records)
            .map(|record| self.record(record))
            .buffer_unordered(self.cfg.concurrency.max(1))
            .collect()
            .await;
        self.worker.flush_counters().await;
        let batch_item_failures = outcomes
            .iter()
            .filter(|(_, o)| matches!(o, WindowOutcome::Retry(_)))
            .map(|(id, _)| {
                let mut f = BatchItemFailure::default();
                f.item_identifier = id.clone();
                f
            })
            .collect();
        let mut response = SqsBatchResponse::default();
        response.batch_item_failures = batch_item_failures;
        BatchResult {
            response,
            outcomes,
            metrics: self.metrics(),
        }
    }

    async fn record(&self, record: SqsMessage) -> (String, WindowOutcome) {
        let msg = received(record);
        let id = msg.message_id.clone();
        let outcome = self.worker.handle_one(msg).await;
        if let WindowOutcome::Retry(detail) = &outcome {
            tracing::warn!(message_id = %id, detail, "retryable fault: reported for redelivery");
        }
        (id, outcome)
    }

    /// EMF lines for the counters that moved since the last report.
    fn metrics(&self) -> Vec<String> {
        let now = self.counters.snapshot();
        let mut reported = self.reported.lock().expect("metrics lock");
        let deltas = metrics::deltas(&reported, &now);
        *reported = now;
        metrics::emf_lines(METRICS_NAMESPACE, &self.cfg.function, &deltas, now_millis())
    }
}

/// A Lambda SQS record as the worker's [`Received`]. The receive count comes from the
/// record's `ApproximateReceiveCount` attribute (1 if absent).
pub fn received(record: SqsMessage) -> Received {
    let receive_count = record
        .attributes
        .get("ApproximateReceiveCount")
        .and_then(|c| c.parse().ok())
        .unwrap_or(1);
    Received {
        message_id: record.message_id.unwrap_or_default(),
        receipt: record.receipt_handle.unwrap_or_default(),
        body: record.body.unwrap_or_default(),
        receive_count,
        sent_at: record
            .attributes
            .get("SentTimestamp")
            .and_then(|t| t.parse().ok()),
    }
}

/// The ingest function (`TILEGATE_MODE=ingest`): each record of a batch from the arrivals queue
/// is an arrival message (an S3 or EventBridge event, an SNS envelope, a STAC Item), planned
/// by [`tilegate_pipeline::ingest::Ingest`]. A message that can never be planned is
/// dead-lettered by the handler with its reason and reported as success; one whose planning
/// met a fault that may pass is listed in `batchItemFailures` with a short backoff. Planning is
/// idempotent (the job ID absorbs duplicate notifications), so a redelivered batch re-plans
/// nothing twice.
#[derive(Debug)]
pub struct IngestHandler {
    ingest: tilegate_pipeline::ingest::Ingest,
    arrivals: Arc<dyn tilegate_core::queue::WorkQueue>,
}

/// What one ingest invocation produced.
#[derive(Debug)]
pub struct IngestBatch {
    pub response: SqsBatchResponse,
    /// Each record's arrivals and what became of them, by message ID.
    pub outcomes: Vec<(String, Vec<tilegate_pipeline::ingest::Ingested>)>,
    /// Message IDs dead-lettered, with their reasons.
    pub dead_lettered: Vec<(String, String)>,
}

impl IngestHandler {
    pub fn new(
        ingest: tilegate_pipeline::ingest::Ingest,
        arrivals: Arc<dyn tilegate_core::queue::WorkQueue>,
    ) -> Self {
        Self { ingest, arrivals }
    }

    /// Handle one SQS batch of arrivals, one message after another.
    pub async fn handle(&self, event: SqsEvent) -> IngestBatch {
        use tilegate_pipeline::ingest::Disposition;
        let mut batch = IngestBatch {
            response: SqsBatchResponse::default(),
            outcomes: Vec::new(),
            dead_lettered: Vec::new(),
        };
        for record in event.records {
            let msg = received(record);
            let outcome = self.ingest.message(&msg.body).await;
            let retry = match outcome.disposition {
                Disposition::Done => None,
                Disposition::DeadLetter(e) => {
                    let reason = e.dead_letter_reason();
                    tracing::warn!(message_id = %msg.message_id, %reason, "arrival dead-lettered");
                    match self.arrivals.dead_letter(&msg, &reason).await {
                        Ok(()) => {
                            batch.dead_lettered.push((msg.message_id.clone(), reason));
                            None
                        }
                        Err(e) => Some(e.to_string()),
                    }
                }
                Disposition::Retry(e) => Some(e.to_string()),
            };
            if let Some(detail) = retry {
                tracing::warn!(message_id = %msg.message_id, detail, "arrival reported for redelivery");
                let backoff = tilegate_pipeline::ingest::retry_backoff(msg.receive_count);
                let _ = self.arrivals.change_visibility(&msg.receipt, backoff).await;
                let mut f = BatchItemFailure::default();
                f.item_identifier = msg.message_id.clone();
                batch.response.batch_item_failures.push(f);
            }
            batch.outcomes.push((msg.message_id, outcome.ingested));
        }
        batch
    }
}

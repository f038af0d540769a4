//! A worker pool in one process: a receive loop feeding bounded concurrent message handlers,
//! with encoding on a rayon pool (one GDAL dataset handle per thread).

use crate::acks::{self, ACK_LINGER, PendingAcks};
use crate::handle::{Ack, WindowOutcome, handle_guarded, panic_message};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;
use tilegate_cog::ReducedWindows;
use tilegate_core::metrics::Counters;
use tilegate_core::queue::{ReceiveOptions, Received};
use tilegate_core::table::JobRecord;
use tilegate_core::{Backends, JobId, StoreResult, Window};
use tilegate_source::{Policies, SourceGuard};
use tokio::sync::{Mutex, Semaphore, watch};
use tokio::task::JoinSet;

/// How often pending counter deltas are written to the counter table, by default.
pub const COUNTER_FLUSH_PERIOD: Duration = Duration::from_secs(1);

/// How long a pool with windows in flight and nothing queued waits before looking again (a
/// finishing window ends the wait sooner).
const IN_FLIGHT_WAIT: Duration = Duration::from_millis(200);

/// Backoff after a retryable queue fault (receive or depth): from 0.1 s, doubled per
/// consecutive fault up to 5 s, with full jitter so that a pool of workers does not come back
/// in step. Only the backoff is used: the loop itself never gives up on a retryable fault.
const QUEUE_FAULT_BACKOFF: tilegate_retry::RetryPolicy = tilegate_retry::RetryPolicy {
    max_attempts: u32::MAX,
    base: Duration::from_millis(100),
    cap: Duration::from_secs(5),
};

/// How many permits must be free before a pool with windows in flight receives again: two
/// thirds of its concurrency (at most SQS's batch of ten), at least one. The default
/// concurrency (2 × threads + 2) leaves at least `threads` windows in flight meanwhile.
fn receive_batch(concurrency: usize) -> usize {
    (concurrency.min(10) * 2 / 3).max(1)
}

/// When the receive loop ends.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StopWhen {
    /// Nothing visible and nothing in flight anywhere (crashed workers' messages are waited
    /// for until their visibility lapses).
    QueueDrained,
    /// The job's manifest holds every window — or it cannot: nothing is left to receive.
    JobComplete(JobId),
    /// Only when asked to stop.
    Signal,
}

/// Worker settings.
#[derive(Debug, Clone)]
pub struct WorkerConfig {
    /// Messages handled at once.
    pub concurrency: usize,
    /// Encoder threads.
    pub threads: usize,
    /// Visibility timeout of received messages; the heartbeat renews it while work runs.
    pub visibility: Duration,
    /// Long-poll wait per receive.
    pub wait: Duration,
    /// HEAD before encoding and skip windows whose tile exists (an optimisation, never the guard).
    pub skip_existing: bool,
    pub stop: StopWhen,
    /// After a stop is asked for: how long in-flight windows may take to finish. Those still
    /// running then are released (visibility reset to zero, so another worker takes them at
    /// once) and abandoned; whatever they had committed stays correct, as after a crash.
    pub shutdown_grace: Duration,
    /// Where to leave each written window's first overview level for this process's assembler
    /// (`tilegate run`); `None` for a pool whose tiles another process assembles.
    pub reduce_into: Option<Arc<ReducedWindows>>,
    /// How often this pool adds its counter deltas to the job's counter row. Every pool
    /// writes the same row (one DynamoDB partition, ~1,000 write units a second, an update of
    /// it costing about three): past a few hundred pools, lengthen it (CAPACITY.md).
    pub counter_flush: Duration,
    /// Encode with this instead of GDAL (a simulation's timed stand-in); `None`: GDAL, on a
    /// pool of `threads` encoder threads. With a stand-in no encoder thread is started.
    pub stand_in: Option<Arc<dyn StandInEncoder>>,
    /// What each job may read, by its tenant: checked again whenever a window opens its source.
    pub sources: Arc<Policies>,
    /// What to do with a job when this pool records (or finds recorded) its last window:
    /// `None` leaves it to `tilegate assemble` ([`crate::completion`]).
    pub on_complete: Option<Arc<dyn crate::completion::OnComplete>>,
}

/// An encoder that stands in for GDAL's: a window's tile bytes after the time it models. The
/// rest of the window's handling (pin checks, the create-if-absent write, the manifest row,
/// the acknowledgement) is the worker's own, unchanged.
#[async_trait::async_trait]
pub trait StandInEncoder: Send + Sync + std::fmt::Debug {
    /// The tile for `window` of `job` on receive `attempt`; `Err` is a retryable encoder fault.
    async fn encode(
        &self,
        job: &JobRecord,
        window: Window,
        attempt: u32,
    ) -> Result<bytes::Bytes, String>;
}

impl Default for WorkerConfig {
    fn default() -> Self {
        let threads = std::thread::available_parallelism().map_or(2, |n| n.get());
        Self {
            concurrency: threads * 2 + 2,
            threads,
            visibility: Duration::from_secs(120),
            wait: Duration::from_secs(1),
            skip_existing: true,
            stop: StopWhen::QueueDrained,
            shutdown_grace: Duration::from_secs(30),
            reduce_into: None,
            counter_flush: COUNTER_FLUSH_PERIOD,
            stand_in: None,
            sources: Arc::default(),
            on_complete: None,
        }
    }
}

/// What one `run` of the pool handled.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WorkReport {
    pub handled: u64,
    pub written: u64,
    pub already_present: u64,
    pub skipped: u64,
    /// Regeneration orders done whose accept the ledger refused (the pointer did not move).
    pub accepts_refused: u64,
    pub dead_lettered: u64,
    pub retried: u64,
    /// In flight when the shutdown grace ran out, or received while the pool was stopping:
    /// released to the queue unfinished.
    pub released: u64,
    /// Retryable queue faults (receive, depth) the loop rode out.
    pub queue_faults: u64,
    /// Reasons of this run's dead letters, in order.
    pub dead_letter_reasons: Vec<String>,
}

impl WorkReport {
    /// Add another pool's report to this one.
    pub fn merge(&mut self, o: WorkReport) {
        self.handled += o.handled;
        self.written += o.written;
        self.already_present += o.already_present;
        self.skipped += o.skipped;
        self.accepts_refused += o.accepts_refused;
        self.dead_lettered += o.dead_lettered;
        self.retried += o.retried;
        self.released += o.released;
        self.queue_faults += o.queue_faults;
        self.dead_letter_reasons.extend(o.dead_letter_reasons);
    }

    fn add(&mut self, o: &WindowOutcome) {
        self.handled += 1;
        match o {
            WindowOutcome::Written => self.written += 1,
            WindowOutcome::AlreadyPresent => self.already_present += 1,
            WindowOutcome::Skipped => self.skipped += 1,
            WindowOutcome::AcceptRefused(_) => self.accepts_refused += 1,
            WindowOutcome::DeadLettered(r) => {
                self.dead_lettered += 1;
                self.dead_letter_reasons.push(r.clone());
            }
            WindowOutcome::Retry(_) => self.retried += 1,
        }
    }
}

/// The windows being handled: their tasks, the receipt of each (to release it if the shutdown
/// grace runs out) and what the finished ones came to.
#[derive(Default)]
struct InFlight {
    tasks: JoinSet<WindowOutcome>,
    receipts: HashMap<tokio::task::Id, String>,
    report: WorkReport,
}

impl InFlight {
    fn is_empty(&self) -> bool {
        self.tasks.is_empty()
    }

    fn spawn(
        &mut self,
        receipt: String,
        task: impl Future<Output = WindowOutcome> + Send + 'static,
    ) {
        let id = self.tasks.spawn(task).id();
        self.receipts.insert(id, receipt);
    }

    /// Record a finished handler's outcome; its receipt is no longer in flight. Handlers catch
    /// their own panics ([`handle_guarded`]), so a join error is an abort at shutdown (whose
    /// receipt [`Worker::release`] hands back) or a panic outside the handler: logged, and its
    /// message left to its visibility timeout rather than taking the pool down.
    fn finished(&mut self, done: Result<(tokio::task::Id, WindowOutcome), tokio::task::JoinError>) {
        match done {
            Ok((id, outcome)) => {
                self.receipts.remove(&id);
                self.report.add(&outcome);
            }
            Err(e) if e.is_cancelled() => {}
            Err(e) => {
                self.receipts.remove(&e.id());
                let detail = e
                    .try_into_panic()
                    .map_or_else(|e| e.to_string(), |p| panic_message(p.as_ref()));
                tracing::error!(error = %detail, "window task failed outside its handler");
                self.report.add(&WindowOutcome::Retry(format!(
                    "{}: {detail}",
                    tilegate_core::Reason::HandlerPanicked
                )));
            }
        }
    }

    /// Record every handler that has finished, without waiting.
    fn reap(&mut self) {
        while let Some(done) = self.tasks.try_join_next_with_id() {
            self.finished(done);
        }
    }

    /// Wait until a window finishes (and record it), the stop signal changes, or `limit`
    /// passes (`None`: no limit).
    async fn wait(&mut self, stop: &mut StopSignal, limit: Option<Duration>) {
        let timer = async {
            match limit {
                Some(d) => tokio::time::sleep(d).await,
                None => std::future::pending().await,
            }
        };
        // Biased (in this order) rather than random: the same inputs take the same branch, so
        // a simulation on a paused clock replays exactly.
        tokio::select! {
            biased;
            done = self.tasks.join_next_with_id() => {
                if let Some(done) = done {
                    self.finished(done);
                }
            }
            () = timer => {}
            () = stop.changed() => {}
        }
    }
}

/// In the receive loop: the value of a queue call — or, on a retryable fault, wait out its
/// backoff (a finishing window or a stop cuts it short) and go round again; on a permanent one,
/// keep it in `$fatal` and leave the loop.
macro_rules! ride_out {
    ($call:expr, $faults:ident, $flight:ident, $stop:ident, $fatal:ident) => {
        match $faults.check($call) {
            Checked::Ok(v) => v,
            Checked::Retry(backoff) => {
                $flight.wait(&mut $stop, Some(backoff)).await;
                continue;
            }
            Checked::Fatal(e) => {
                $fatal = Some(e);
                break;
            }
        }
    };
}

/// Consecutive queue faults of the receive loop, for its backoff.
#[derive(Default)]
struct QueueFaults {
    consecutive: u32,
    total: u64,
}

/// What a queue call of the receive loop came to.
enum Checked<T> {
    Ok(T),
    /// A retryable fault: wait this long, then go round again.
    Retry(Duration),
    /// A permanent fault: stop receiving.
    Fatal(tilegate_core::StoreError),
}

impl QueueFaults {
    fn check<T>(&mut self, r: StoreResult<T>) -> Checked<T> {
        match r {
            Ok(v) => {
                self.consecutive = 0;
                Checked::Ok(v)
            }
            Err(e) if e.is_retryable() => {
                self.consecutive += 1;
                let backoff = QUEUE_FAULT_BACKOFF.backoff(self.consecutive, None);
                self.total += 1;
                tracing::warn!(error = %tilegate_core::error::chain(&e), consecutive = self.consecutive,
                    backoff_ms = backoff.as_millis() as u64, "queue fault; windows in flight carry on");
                Checked::Retry(backoff)
            }
            Err(e) => Checked::Fatal(e),
        }
    }
}

/// The pool's stop signal. A dropped sender means nobody can ask the pool to stop: the signal
/// is then no longer watched.
struct StopSignal {
    rx: watch::Receiver<bool>,
    open: bool,
}

impl StopSignal {
    fn asked(&self) -> bool {
        *self.rx.borrow()
    }

    /// Resolves when the signal changes or its sender goes; never after that.
    async fn changed(&mut self) {
        if !self.open {
            return std::future::pending().await;
        }
        self.open = self.rx.changed().await.is_ok();
    }
}

/// State shared by a pool's handlers.
pub(crate) struct Shared {
    pub(crate) b: Backends,
    pub(crate) cfg: WorkerConfig,
    pub(crate) counters: Arc<Counters>,
    pub(crate) guard: SourceGuard,
    /// GDAL's encoder threads (`None` with a stand-in encoder).
    pub(crate) pool: Option<rayon::ThreadPool>,
    pub(crate) pending: PendingCounters,
    /// Acknowledgements of finished windows waiting to be sent ten at a time.
    pub(crate) acks: PendingAcks,
    /// This process's name on the manifest rows it records (`host:pid`).
    pub(crate) worker_name: String,
    jobs: Mutex<HashMap<JobId, Arc<JobRecord>>>,
    /// Each job's windows per manifest partition, for the completion check.
    shard_sizes: std::sync::Mutex<HashMap<JobId, Arc<Vec<u64>>>>,
    /// Windows this pool is working on or has recorded (duplicates dropped before encoding).
    pub(crate) here: crate::here::WindowsHere,
}

/// Per-job counter deltas not yet added to the counter table. Flushed about once a second and
/// when the pool stops, so counting costs one table write per job per second, not per window.
/// A killed process loses at most its last second of counts; counters are observability, never
/// the proof of completion (that is the manifest).
#[derive(Default)]
pub(crate) struct PendingCounters(std::sync::Mutex<HashMap<JobId, HashMap<String, u64>>>);

impl PendingCounters {
    pub(crate) fn add(&self, job: JobId, deltas: Vec<(&'static str, u64)>) {
        self.add_owned(job, deltas.into_iter().map(|(k, v)| (k.to_owned(), v)));
    }

    fn add_owned(&self, job: JobId, deltas: impl IntoIterator<Item = (String, u64)>) {
        let mut deltas = deltas.into_iter().peekable();
        if deltas.peek().is_none() {
            return;
        }
        let mut m = self.0.lock().expect("pending counters lock");
        let entry = m.entry(job).or_default();
        for (name, n) in deltas {
            *entry.entry(name).or_default() += n;
        }
    }

    fn take(&self) -> HashMap<JobId, HashMap<String, u64>> {
        std::mem::take(&mut *self.0.lock().expect("pending counters lock"))
    }
}

/// This process's name on manifest rows: the host and the process ID.
pub fn worker_name() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_owned())
        .unwrap_or_else(|_| "host".into());
    format!("{host}:{}", std::process::id())
}

/// Write pending counter deltas, and the requests counted for each job since the last flush,
/// to the counter table; failed flushes are put back.
async fn flush_counters(shared: &Shared) {
    for (job, counts) in tilegate_retry::meter::take_jobs() {
        shared.pending.add_owned(job, counts);
    }
    for (job, deltas) in shared.pending.take() {
        let list: Vec<(&str, u64)> = deltas.iter().map(|(k, v)| (k.as_str(), *v)).collect();
        if let Err(e) = shared.b.counters.add_counters(&job, &list).await {
            tracing::warn!(job_id = %job, error = %tilegate_core::error::chain(&e), "counter flush failed; will retry");
            shared.pending.add_owned(job, deltas);
        }
    }
}

impl Shared {
    /// `job`'s windows per manifest partition, computed once per pool.
    pub(crate) fn shard_sizes(
        &self,
        job: &JobRecord,
        compute: impl FnOnce() -> Arc<Vec<u64>>,
    ) -> Arc<Vec<u64>> {
        let mut sizes = self.shard_sizes.lock().expect("shard sizes");
        Arc::clone(sizes.entry(job.job_id.clone()).or_insert_with(compute))
    }

    /// The job row, cached for the life of the pool (job rows are immutable for workers).
    /// The cache stays locked while a row is read, so the first windows of a job, arriving
    /// together, read its row once rather than once each.
    pub(crate) async fn job(&self, id: &JobId) -> StoreResult<Option<Arc<JobRecord>>> {
        let mut jobs = self.jobs.lock().await;
        if let Some(j) = jobs.get(id) {
            return Ok(Some(j.clone()));
        }
        let Some(row) = self.b.jobs.get_job(id).await? else {
            return Ok(None);
        };
        let job = Arc::new(row.row);
        jobs.insert(id.clone(), job.clone());
        Ok(Some(job))
    }
}

/// A worker pool bound to a set of backends.
pub struct Worker {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for Worker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Worker")
            .field("cfg", &self.shared.cfg)
            .finish()
    }
}

impl Worker {
    pub fn new(b: Backends, cfg: WorkerConfig, counters: Arc<Counters>) -> Self {
        let pool = cfg.stand_in.is_none().then(|| {
            rayon::ThreadPoolBuilder::new()
                .num_threads(cfg.threads.max(1))
                .thread_name(|i| format!("tilegate-encode-{i}"))
                // The encoder catches its own panics; this only keeps rayon from aborting the
                // process if anything else spawned here ever panics.
                .panic_handler(|p| {
                    tracing::error!(error = %panic_message(p.as_ref()), "encoder thread panicked");
                })
                .build()
                .expect("build the encoder thread pool")
        });
        Self {
            shared: Arc::new(Shared {
                b,
                cfg,
                counters,
                guard: SourceGuard::new(),
                pool,
                pending: PendingCounters::default(),
                acks: PendingAcks::default(),
                worker_name: worker_name(),
                jobs: Mutex::new(HashMap::new()),
                shard_sizes: std::sync::Mutex::default(),
                here: crate::here::WindowsHere::default(),
            }),
        }
    }

    /// Handle one message to its end — acknowledged, dead-lettered with its reason, or left for
    /// redelivery after a backoff ([`WindowOutcome::Retry`]) — outside the receive loop: for
    /// hosts that receive messages themselves (an SQS-triggered function). Counter deltas wait
    /// for [`Worker::flush_counters`].
    pub async fn handle_one(&self, msg: Received) -> WindowOutcome {
        handle_guarded(self.shared.clone(), msg, Ack::Now).await
    }

    /// Add the counter deltas not yet written to the counter table.
    pub async fn flush_counters(&self) {
        flush_counters(&self.shared).await;
    }

    /// Run until the stop condition holds, or `stop` becomes true: then stop receiving, give
    /// in-flight windows [`WorkerConfig::shutdown_grace`] to finish, release the rest, return.
    ///
    /// Every message the queue delivers ends handled or released: a receive in progress when a
    /// stop is asked for is finished, not dropped, and what it brought is handed straight back
    /// (visibility zero). A retryable queue fault (receive, depth) is ridden out with a backoff;
    /// a permanent one stops receiving, lets the windows in flight finish, and is returned.
    pub async fn run(&self, stop: watch::Receiver<bool>) -> StoreResult<WorkReport> {
        let shared = &self.shared;
        let cfg = &shared.cfg;
        let permits = Arc::new(Semaphore::new(cfg.concurrency.max(1)));
        let mut flight = InFlight::default();
        let mut stop = StopSignal {
            rx: stop,
            open: true,
        };
        let mut last_flush = tokio::time::Instant::now();
        let mut checked_at = None;
        let mut faults = QueueFaults::default();
        let mut fatal: Option<tilegate_core::StoreError> = None;
        loop {
            if last_flush.elapsed() >= cfg.counter_flush {
                flush_counters(shared).await;
                last_flush = tokio::time::Instant::now();
            }
            flight.reap();
            acks::send(shared, shared.acks.take(Some(ACK_LINGER))).await;
            if stop.asked() {
                break;
            }
            // Whenever the pool falls idle, see at once whether it is done (the job's last
            // window recorded, or the queue drained) rather than after another long poll.
            if flight.is_empty()
                && checked_at != Some(flight.report.handled)
                && cfg.stop != StopWhen::Signal
            {
                // The queue's depth counts unacknowledged messages as in flight.
                acks::send(shared, shared.acks.take(None)).await;
                if ride_out!(self.should_stop().await, faults, flight, stop, fatal) {
                    break;
                }
                checked_at = Some(flight.report.handled);
            }
            // Receive in batches: while windows are in flight, wait until two thirds of the
            // permits (up to SQS's ten) are free, so that a receive brings several messages rather than
            // one as each window finishes. The windows still in flight keep the encoders busy.
            let free = permits.available_permits();
            if free == 0 || (!flight.is_empty() && free < receive_batch(cfg.concurrency)) {
                let limit = (!shared.acks.is_empty()).then_some(ACK_LINGER);
                flight.wait(&mut stop, limit).await;
                continue;
            }
            // While windows are in flight, only look (no long poll): the wait for more work
            // happens below, where a finishing window can cut it short (a receive in progress
            // is never abandoned: it may already hold messages).
            let wait = if flight.is_empty() {
                // Nothing is finishing that could fill a batch while this poll waits.
                acks::send(shared, shared.acks.take(None)).await;
                cfg.wait
            } else {
                Duration::ZERO
            };
            let opts = ReceiveOptions {
                max: free.min(10) as u32,
                wait,
                visibility: cfg.visibility,
            };
            // Never abandoned half-way: a receive that has begun may already have taken messages
            // (on SQLite its transaction commits; on SQS they are on their way), and a dropped
            // future would leave them hidden for a whole visibility timeout. It is bounded by
            // `wait`, so a stop asked for meanwhile waits at most that long.
            let received = ride_out!(
                shared.b.queue.receive(opts).await,
                faults,
                flight,
                stop,
                fatal
            );
            if stop.asked() {
                // Asked to stop while the receive was in progress: hand its messages back.
                flight.report.released += self
                    .release_receipts(received.into_iter().map(|m| m.receipt))
                    .await;
                break;
            }
            if received.is_empty() {
                if flight.is_empty() {
                    acks::send(shared, shared.acks.take(None)).await;
                    if ride_out!(self.should_stop().await, faults, flight, stop, fatal) {
                        break;
                    }
                } else {
                    // Nothing queued while windows are in flight: look again when one finishes
                    // (the job may be complete then) or after a short while.
                    flight.wait(&mut stop, Some(IN_FLIGHT_WAIT)).await;
                }
                continue;
            }
            for msg in received {
                let permit = permits
                    .clone()
                    .acquire_owned()
                    .await
                    .expect("semaphore open");
                let shared = shared.clone();
                let receipt = msg.receipt.clone();
                flight.spawn(receipt, async move {
                    let outcome = handle_guarded(shared, msg, Ack::Batched).await;
                    drop(permit);
                    outcome
                });
            }
        }
        if let Some(e) = &fatal {
            tracing::error!(error = %tilegate_core::error::chain(e), in_flight = flight.tasks.len(),
                "queue fault: stopped receiving; finishing the windows in flight");
        }
        if !flight.is_empty() && stop.asked() {
            tracing::info!(
                in_flight = flight.tasks.len(),
                grace_s = cfg.shutdown_grace.as_secs_f64(),
                "stopping: finishing in-flight windows"
            );
        }
        // The windows in flight get the shutdown grace to finish — after a stop, and after a
        // permanent queue fault too (the loop is bounded either way) — and the
        // acknowledgements of those that finish are sent as they linger, not only at the end.
        let deadline = tokio::time::Instant::now() + cfg.shutdown_grace;
        loop {
            acks::send(shared, shared.acks.take(Some(ACK_LINGER))).await;
            let tick = deadline.min(tokio::time::Instant::now() + ACK_LINGER);
            match tokio::time::timeout_at(tick, flight.tasks.join_next_with_id()).await {
                Ok(Some(done)) => flight.finished(done),
                Ok(None) => break,
                Err(_elapsed) if tokio::time::Instant::now() >= deadline => {
                    flight.report.released = self.release(&mut flight).await;
                    break;
                }
                Err(_elapsed) => {}
            }
        }
        // Windows that finished are acknowledged, whatever stopped the pool.
        acks::send(shared, shared.acks.take(None)).await;
        flush_counters(shared).await;
        flight.report.queue_faults = faults.total;
        match fatal {
            Some(e) => Err(e),
            None => Ok(flight.report),
        }
    }

    /// Abandon the windows still in flight and hand their messages back to the queue at once
    /// (visibility zero) rather than after their visibility timeout. Returns how many.
    async fn release(&self, flight: &mut InFlight) -> u64 {
        flight.tasks.abort_all();
        // A handler that finished before the abort reached it is recorded, not released: its
        // window is done and its acknowledgement is on its way.
        while let Some(done) = flight.tasks.join_next_with_id().await {
            flight.finished(done);
        }
        let released = self
            .release_receipts(flight.receipts.drain().map(|(_, r)| r))
            .await;
        tracing::warn!(
            released,
            "shutdown grace ran out: released in-flight windows to the queue"
        );
        released
    }

    /// Hand received messages back to the queue at once (visibility zero). Returns how many.
    async fn release_receipts(&self, receipts: impl Iterator<Item = String>) -> u64 {
        let mut released = 0;
        for receipt in receipts {
            match self
                .shared
                .b
                .queue
                .change_visibility(&receipt, Duration::ZERO)
                .await
            {
                Ok(_) => released += 1,
                Err(e) => tracing::warn!(error = %tilegate_core::error::chain(&e),
                    "could not release a received message; it returns after its visibility timeout"),
            }
        }
        released
    }

    async fn should_stop(&self) -> StoreResult<bool> {
        let b = &self.shared.b;
        match &self.shared.cfg.stop {
            StopWhen::Signal => Ok(false),
            StopWhen::QueueDrained => {
                let d = b.queue.depth().await?;
                Ok(d.visible == 0 && d.in_flight == 0)
            }
            StopWhen::JobComplete(job) => {
                let Some(row) = b.jobs.get_job(job).await? else {
                    return Ok(true);
                };
                if b.manifest.count_entries(job).await? >= row.row.grid.len() {
                    return Ok(true);
                }
                let d = b.queue.depth().await?;
                Ok(d.visible == 0 && d.in_flight == 0)
            }
        }
    }
}

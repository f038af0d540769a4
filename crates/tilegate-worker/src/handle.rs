//! One message, start to finish: validate → (skip if present) → verify source → encode →
//! create-if-absent → manifest row → acknowledge.

use crate::fault;
use crate::pool::Shared;
use crate::regenerate::{self, RegenerateError};
use bytes::Bytes;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tilegate_cog::{CogError, EncodeRequest, ProductSource, ReducedWindow, StepTimes};
use tilegate_core::ObjectKey;
use tilegate_core::Reason;
use tilegate_core::announce::Announcement;
use tilegate_core::error::chain;
use tilegate_core::ledger::{AttemptOrder, AttemptState, Subject};
use tilegate_core::message::{MessageError, WindowMessage};
use tilegate_core::metrics as m;
use tilegate_core::object::{Describe, ObjectMeta, PutOptions, PutOutcome};
use tilegate_core::queue::Received;
use tilegate_core::recipe::Operation;
use tilegate_core::table::{CreateOutcome, JobRecord, ManifestEntry, TileOrigin, WindowFacts};
use tilegate_core::{JobId, SourceInfo, StoreError, Window, now_millis};
use tilegate_ledger::LedgerError;
use tilegate_source::{SourceError, gdal_path};
use tracing::Instrument as _;

/// What became of one message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WindowOutcome {
    /// This worker's Create wrote the tile.
    Written,
    /// The Create was refused: a duplicate had written the tile (the mechanism succeeding).
    AlreadyPresent,
    /// The tile was already there before encoding; encoding was skipped.
    Skipped,
    /// A regeneration order's attempt was uploaded, but the accept it asked for was refused by
    /// the ledger (for this reason): the order is done and acknowledged, the pointer did not
    /// move — a redelivered or late order never moves it back.
    AcceptRefused(&'static str),
    /// Permanently unusable: moved to the dead-letter queue with this reason.
    DeadLettered(String),
    /// A genuine, retryable fault: left for redelivery after a backoff.
    Retry(String),
}

impl WindowOutcome {
    /// The outcome's name in logs.
    pub fn name(&self) -> &'static str {
        match self {
            Self::Written => "written",
            Self::AlreadyPresent => "already-present",
            Self::Skipped => "skipped",
            Self::AcceptRefused(_) => "accept-refused",
            Self::DeadLettered(_) => "dead-lettered",
            Self::Retry(_) => "retry",
        }
    }
}

/// A fault of one message, permanent or retryable: its reason code and detail.
pub(crate) struct Fault {
    code: Reason,
    detail: String,
}

/// Why a message did not complete. Both kinds carry a named reason: a retryable fault that is
/// still there on the message's last receive is dead-lettered under its own name.
pub(crate) enum Failure {
    Permanent(Fault),
    Retryable(Fault),
}

impl Failure {
    pub(crate) fn permanent(code: Reason, detail: impl Into<String>) -> Self {
        Self::Permanent(Fault {
            code,
            detail: detail.into(),
        })
    }

    pub(crate) fn retryable(code: Reason, detail: impl Into<String>) -> Self {
        Self::Retryable(Fault {
            code,
            detail: detail.into(),
        })
    }

    fn classified(retryable: bool, code: Reason, detail: String) -> Self {
        if retryable {
            Self::retryable(code, detail)
        } else {
            Self::permanent(code, detail)
        }
    }
}

impl From<StoreError> for Failure {
    fn from(e: StoreError) -> Self {
        Self::classified(
            e.is_retryable(),
            Reason::storage(e.is_retryable()),
            chain(&e),
        )
    }
}

impl From<SourceError> for Failure {
    fn from(e: SourceError) -> Self {
        Self::classified(e.is_retryable(), e.reason_code(), chain(&e))
    }
}

impl From<CogError> for Failure {
    fn from(e: CogError) -> Self {
        Self::classified(e.is_retryable(), e.reason_code(), chain(&e))
    }
}

/// The text of a caught panic's payload.
pub(crate) fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic with a non-string payload".to_owned())
}

/// Per-message counter deltas, flushed to the job's counters once the message is done.
#[derive(Default)]
pub(crate) struct Deltas(Vec<(&'static str, u64)>);

impl Deltas {
    pub(crate) fn bump(&mut self, shared: &Shared, name: &'static str) {
        self.add(shared, name, 1);
    }

    pub(crate) fn add(&mut self, shared: &Shared, name: &'static str, n: u64) {
        if n > 0 {
            shared.counters.add(name, n);
            self.0.push((name, n));
        }
    }
}

/// How a handled message is acknowledged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Ack {
    /// At once, by the handler (a host that receives messages itself).
    Now,
    /// With others, ten to a request ([`crate::acks`]): the pool's receive loop.
    Batched,
}

/// Handle one received message to its end, keeping a panic anywhere in the handler inside
/// this message: it is counted, logged and answered like a retryable fault (the message comes
/// back after a backoff and is dead-lettered with `handler-panicked` after its last receive),
/// so one poison message cannot take down the process or the windows beside it.
pub(crate) async fn handle_guarded(shared: Arc<Shared>, msg: Received, ack: Ack) -> WindowOutcome {
    use futures::FutureExt as _;
    // Decoded once: the message's requests (its heartbeat's included) are charged to its job.
    let decoded = WindowMessage::decode(&msg.body);
    let job = decoded.as_ref().ok().map(|w| w.job_id.clone());
    tilegate_retry::meter::scope(job.clone(), async {
        let caught = std::panic::AssertUnwindSafe(handle(&shared, &msg, decoded, ack))
            .catch_unwind()
            .await;
        answer_panic(&shared, &msg, job, caught).await
    })
    .await
}

/// The outcome of a handler that may have panicked.
async fn answer_panic(
    shared: &Arc<Shared>,
    msg: &Received,
    job: Option<JobId>,
    caught: Result<WindowOutcome, Box<dyn std::any::Any + Send>>,
) -> WindowOutcome {
    match caught {
        Ok(outcome) => outcome,
        Err(payload) => {
            shared.counters.inc(m::WINDOW_PANICS);
            let fault = Fault {
                code: Reason::HandlerPanicked,
                detail: panic_message(payload.as_ref()),
            };
            tracing::error!(message_id = %msg.message_id, error = %fault.detail, "message handler panicked");
            let mut deltas = Deltas(vec![(m::WINDOW_PANICS, 1)]);
            let outcome = retry_or_dead_letter(shared, msg, fault, &mut deltas).await;
            if let Some(job) = job {
                shared.pending.add(job, deltas.0);
            }
            outcome
        }
    }
}

/// Dead-letter `msg` with `fault`'s reason.
async fn dead_letter(
    shared: &Shared,
    msg: &Received,
    fault: Fault,
    deltas: &mut Deltas,
) -> WindowOutcome {
    let reason =
        tilegate_core::redact::redact(&format!("{}: {}", fault.code, fault.detail)).into_owned();
    tracing::warn!(message_id = %msg.message_id, reason = %reason, "dead-lettering message");
    // The job's `incomplete` announcement goes in its outbox before the message leaves the
    // queue: a crash in between redelivers the message, and recording again is a no-op.
    // A regeneration's window leaves the published job as it was; and a message is input: it
    // speaks for a job only if it is one of that job's windows.
    let job = WindowMessage::decode(&msg.body)
        .ok()
        .filter(|wm| wm.attempt.is_none());
    if let Some(wm) = &job {
        let code = fault.code.as_str();
        let recorded = tilegate_core::announce::record(&*shared.b.jobs, &wm.job_id, |row| {
            (row.source == wm.source && row.grid == wm.grid && row.scene_output.is_none()).then(
                || {
                    Announcement::incomplete(
                        &row.job_id,
                        row.redrives,
                        code,
                        wm.window,
                        now_millis(),
                    )
                },
            )
        })
        .await;
        if let Err(e) = recorded {
            return WindowOutcome::Retry(format!(
                "recording the job's incomplete announcement failed: {}",
                chain(&e)
            ));
        }
    }
    match shared.b.queue.dead_letter(msg, &reason).await {
        Ok(()) => {
            shared.counters.dead_lettered(fault.code.as_str());
            deltas.0.push((m::DEAD_LETTERED, 1));
            // By reason on the job's own counters too: what the service's status reads,
            // never the shared dead-letter queue.
            deltas.0.push((dead_lettered_name(fault.code), 1));
            if let (Some(hook), Some(wm)) = (&shared.cfg.on_complete, &job) {
                hook.job_incomplete(&wm.job_id).await;
            }
            WindowOutcome::DeadLettered(reason)
        }
        Err(e) => WindowOutcome::Retry(format!("dead-letter failed: {}", chain(&e))),
    }
}

/// `dead_lettered_total{reason="…"}` for `reason`, named once per reason for the life of the
/// process (the job's counter deltas are named by `&'static str`).
fn dead_lettered_name(reason: Reason) -> &'static str {
    static NAMES: std::sync::LazyLock<std::collections::HashMap<Reason, &'static str>> =
        std::sync::LazyLock::new(|| {
            Reason::ALL
                .iter()
                .map(|r| {
                    let name: &'static str =
                        Box::leak(m::dead_lettered_by(r.as_str()).into_boxed_str());
                    (*r, name)
                })
                .collect()
        });
    NAMES.get(&reason).copied().unwrap_or(m::DEAD_LETTERED)
}

/// A retryable fault: hand the message back after a backoff (retries happen by visibility
/// expiry, not by a loop) — unless this was its last receive, in which case it is
/// dead-lettered now under the fault's own name rather than later as `max-receives-exceeded`.
async fn retry_or_dead_letter(
    shared: &Shared,
    msg: &Received,
    fault: Fault,
    deltas: &mut Deltas,
) -> WindowOutcome {
    let max = shared.b.queue.max_receive_count();
    if msg.receive_count >= max {
        let fault = Fault {
            code: fault.code,
            detail: format!(
                "{} (receive {} of {max}: not retried again)",
                fault.detail, msg.receive_count
            ),
        };
        return dead_letter(shared, msg, fault, deltas).await;
    }
    let backoff = Duration::from_secs(1 << msg.receive_count.min(5));
    let backoff = backoff.min(shared.cfg.visibility);
    tracing::warn!(message_id = %msg.message_id, receive_count = msg.receive_count,
        backoff_s = backoff.as_secs(), reason = %fault.code, error = %fault.detail,
        "retryable fault; will redeliver");
    let _ = shared
        .b
        .queue
        .change_visibility(&msg.receipt, backoff)
        .await;
    WindowOutcome::Retry(format!("{}: {}", fault.code, fault.detail))
}

/// Handle one received message to its end. Never returns an error: every path ends in an
/// acknowledgement, a dead letter, or a deliberate redelivery.
async fn handle(
    shared: &Arc<Shared>,
    msg: &Received,
    decoded: Result<WindowMessage, MessageError>,
    ack: Ack,
) -> WindowOutcome {
    let heartbeat = spawn_heartbeat(shared, msg);
    let mut deltas = Deltas::default();
    let mut job_for_counters: Option<JobId> = None;
    let result = process(shared, msg, decoded, &mut deltas, &mut job_for_counters).await;
    drop(heartbeat);

    let outcome = match result {
        Ok(outcome) if ack == Ack::Batched => {
            if let Some(full) = shared
                .acks
                .push(job_for_counters.clone(), msg.receipt.clone())
            {
                crate::acks::send_full(shared, full).await;
            }
            outcome
        }
        Ok(outcome) => match shared.b.queue.ack(&msg.receipt).await {
            Ok(_) => outcome,
            Err(e) => {
                // The work is done and recorded; a lost ack only means a harmless redelivery.
                tracing::warn!(message_id = %msg.message_id, error = %chain(&e), "ack failed");
                outcome
            }
        },
        Err(Failure::Permanent(p)) => dead_letter(shared, msg, p, &mut deltas).await,
        Err(Failure::Retryable(p)) => retry_or_dead_letter(shared, msg, p, &mut deltas).await,
    };
    if let Some(job) = job_for_counters {
        shared.pending.add(job, deltas.0);
    }
    outcome
}

/// The visibility heartbeat of one message; it stops when dropped, so a handler that is
/// abandoned (aborted at shutdown) stops extending a message that was handed back.
struct Heartbeat(tokio::task::JoinHandle<()>);

impl Drop for Heartbeat {
    fn drop(&mut self) {
        self.0.abort();
    }
}

fn spawn_heartbeat(shared: &Arc<Shared>, msg: &Received) -> Heartbeat {
    let queue = shared.b.queue.clone();
    let receipt = msg.receipt.clone();
    let visibility = shared.cfg.visibility;
    Heartbeat(tokio::spawn(tilegate_retry::meter::inherit(async move {
        let period = (visibility / 3).max(Duration::from_millis(200));
        loop {
            tokio::time::sleep(period).await;
            if let Err(e) = queue.change_visibility(&receipt, visibility).await {
                tracing::warn!(error = %chain(&e), "visibility heartbeat failed");
            }
        }
    })))
}

async fn process(
    shared: &Shared,
    msg: &Received,
    decoded: Result<WindowMessage, MessageError>,
    deltas: &mut Deltas,
    job_for_counters: &mut Option<JobId>,
) -> Result<WindowOutcome, Failure> {
    let received_at = now_millis();
    let wm = decoded.map_err(|e| Failure::permanent(e.reason_code(), e.to_string()))?;
    let job = shared.job(&wm.job_id).await?.ok_or_else(|| {
        Failure::permanent(
            Reason::UnknownJob,
            format!("job {} has no job row (never planned here)", wm.job_id),
        )
    })?;
    *job_for_counters = Some(job.job_id.clone());
    if wm.grid != job.grid || wm.prefix != job.prefix {
        return Err(Failure::permanent(
            Reason::MessageDisagreesWithJob,
            format!(
                "grid or prefix of the message differs from job {}'s row",
                job.job_id
            ),
        ));
    }
    let span = tracing::info_span!("window", job_id = %job.job_id, window = %wm.window,
        attempt = msg.receive_count, message_id = %msg.message_id);
    process_window(shared, msg, &wm, &job, received_at, deltas)
        .instrument(span)
        .await
}

/// The rest of [`process`], inside the window's span — attached to the future, so that it is
/// entered only while this window's work runs. A guard held across an `.await` would stay
/// entered on the thread while it ran other windows' tasks, nesting every later window's
/// log lines inside this one's.
async fn process_window(
    shared: &Shared,
    msg: &Received,
    wm: &WindowMessage,
    job: &JobRecord,
    received_at: tilegate_core::UnixMillis,
    deltas: &mut Deltas,
) -> Result<WindowOutcome, Failure> {
    let window = wm.window;
    if let Some(order) = &wm.attempt {
        return regenerate_window(shared, job, window, order, msg.receive_count, deltas).await;
    }
    // A second message for a window this pool recorded (or is encoding: then it waits) is
    // dropped here, before any request: an interrupted run's messages and its resume's.
    let turn = match shared.here.begin(&job.job_id, window).await {
        crate::here::Here::Recorded => {
            deltas.bump(shared, m::DUPLICATE_ENCODES_SKIPPED);
            tracing::info!(
                outcome = "skipped",
                "window already recorded by this pool; duplicate message dropped"
            );
            return Ok(WindowOutcome::Skipped);
        }
        crate::here::Here::Work(turn) => turn,
    };
    let key = job.prefix.tile_key(&job.job_id, window);
    let mut facts = WindowFacts {
        attempt: msg.receive_count,
        worker: shared.worker_name.clone(),
        wait_ms: msg
            .sent_at
            .map(|sent| u64::try_from(received_at - sent).unwrap_or(0)),
        ..WindowFacts::default()
    };

    let head_started = Instant::now();
    // A first delivery of a window that had no row when it was sent most likely has no tile:
    // the Create decides, one request fewer. Anything else (a redelivery, a duplicate sent for
    // a recorded window) looks first and skips the encode if the tile is there.
    let look_first = !(wm.unrecorded && msg.receive_count <= 1);
    if shared.cfg.skip_existing
        && look_first
        && let Some(meta) = head_if_allowed(shared, &key).await
    {
        // An optimisation only: the Create below would refuse the copy anyway.
        deltas.bump(shared, m::DUPLICATE_ENCODES_SKIPPED);
        facts.encode_skipped = true;
        facts.commit_ms = Some(millis(head_started.elapsed()));
        record(
            shared,
            job,
            window,
            &meta,
            TileOrigin::AlreadyPresent,
            facts,
            deltas,
        )
        .await?;
        turn.recorded();
        tracing::info!(outcome = "skipped", "tile already present; encode skipped");
        return Ok(WindowOutcome::Skipped);
    }

    fault::point("before-encode", msg.receive_count);
    if let Some(slow) = fault::window_delay() {
        tokio::time::sleep(slow).await;
    }
    // The policy judges the source before GDAL opens it: the job row is the operator's, but
    // this worker's policy (and the addresses a name resolves to now) decide what it reads.
    admit_sources(shared, job).await?;
    let (bytes, reduced, times, images) =
        encode(shared, job, window, msg.receive_count, deltas).await?;
    // Pinned after the read: a source that changed before or during the read no longer has
    // its planned pin, so what was read is not committed (one check per window: a check
    // before the read as well would only save the encode of a window that fails anyway).
    let pin_started = Instant::now();
    verify_source(shared, job, deltas).await?;
    facts.read_ms = Some(millis(times.read + pin_started.elapsed()));
    facts.encode_ms = Some(millis(times.encode));
    // A pyramid window's images go before its index, the window's output: an index in place
    // means every tile it lists is.
    if let Some(spec) = crate::pyramid::spec(job) {
        crate::pyramid::write_tiles(shared, job, spec, images, deltas).await?;
        fault::point("after-images", msg.receive_count);
    }

    let commit_started = Instant::now();
    // The row records the tile's size and ETag: the write's answer has both.
    let create = PutOptions {
        describe: Describe::FromAnswer,
        ..PutOptions::create()
    };
    let (meta, origin, outcome) = match shared.b.objects.put_opts(&key, bytes, create).await? {
        PutOutcome::Written(meta) => {
            deltas.bump(shared, m::TILES_WRITTEN);
            // Only this write's bytes are known to be these pixels.
            if let (Some(into), Some(r)) = (&shared.cfg.reduce_into, reduced) {
                into.insert(window, meta.e_tag.clone(), r);
            }
            (meta, TileOrigin::Written, WindowOutcome::Written)
        }
        PutOutcome::AlreadyPresent => {
            // The mechanism succeeding: a duplicate's tile is in place. Its size and ETag for
            // the manifest row come from a HEAD.
            deltas.bump(shared, m::PRECONDITION_FAILED);
            let meta = shared.b.objects.head(&key).await?.ok_or_else(|| {
                Failure::retryable(
                    Reason::StorageUnavailable,
                    format!("`{key}` was refused as present but is gone"),
                )
            })?;
            (
                meta,
                TileOrigin::AlreadyPresent,
                WindowOutcome::AlreadyPresent,
            )
        }
        PutOutcome::Superseded => {
            return Err(Failure::permanent(
                Reason::StorageRefused,
                format!("the store answered a Create of `{key}` with Superseded"),
            ));
        }
    };
    facts.commit_ms = Some(millis(commit_started.elapsed()));
    fault::point("after-commit", msg.receive_count);
    record(shared, job, window, &meta, origin, facts, deltas).await?;
    turn.recorded();
    tracing::info!(outcome = outcome.name(), size = meta.size, "tile commit");
    fault::point("before-ack", msg.receive_count);
    Ok(outcome)
}

/// A window message that carries an attempt: the window goes to the attempt's own key, under
/// the row its sender wrote; the tile key and the manifest are left alone.
async fn regenerate_window(
    shared: &Shared,
    job: &JobRecord,
    window: Window,
    order: &AttemptOrder,
    receive_count: u32,
    deltas: &mut Deltas,
) -> Result<WindowOutcome, Failure> {
    let subject = Subject::Window(window);
    let row = shared
        .b
        .ledger
        .get_attempt(&job.job_id, subject, &order.id)
        .await?
        .ok_or_else(|| {
            Failure::permanent(
                Reason::UnknownAttempt,
                format!(
                    "attempt {} of {} {window} has no ledger row",
                    order.id, job.job_id
                ),
            )
        })?;
    // A redelivery after the upload was recorded: only what is left (publishing) remains.
    let row = if row.row.state == AttemptState::Uploading {
        // The upload grace counts from here, not from when the order was sent: an order that
        // waited in a backlog is not collected for having waited.
        let row = tilegate_ledger::attempt::start_upload(&shared.b, row, now_millis())
            .await
            .map_err(attempt_failure)?;
        if row.row.state == AttemptState::Uploading {
            verify_source(shared, job, deltas).await?;
            admit_sources(shared, job).await?;
            let (bytes, _, _, _) = encode(shared, job, window, receive_count, deltas).await?;
            verify_source(shared, job, deltas).await?;
            let meta = tilegate_ledger::attempt::put(&shared.b, &row.row, bytes)
                .await
                .map_err(attempt_failure)?;
            // Killed here, the object is in place and the row still says `uploading`: a
            // redelivery records it, or GC collects both after the upload grace.
            fault::point("attempt-after-put", receive_count);
            tilegate_ledger::attempt::record(&shared.b, row, meta.size, meta.e_tag, now_millis())
                .await
                .map_err(attempt_failure)?
        } else {
            row
        }
    } else {
        row
    };
    let bytes = Bytes::new();
    match regenerate::finish(&shared.b, row, order, bytes, now_millis()).await {
        Ok(done) => {
            tracing::info!(attempt = %order.id, key = %done.row.row.key, published = ?done.published, "attempt uploaded");
            match done.accept_refused() {
                None => Ok(WindowOutcome::Written),
                Some(reason) => {
                    tracing::info!(attempt = %order.id, reason, outcome = "accept-refused",
                        "the order's accept was refused by the ledger; the pointer did not move");
                    deltas.bump(shared, m::ACCEPTS_REFUSED);
                    Ok(WindowOutcome::AcceptRefused(reason))
                }
            }
        }
        Err(RegenerateError::Ledger(e)) => Err(attempt_failure(e)),
        Err(e) => Err(Failure::permanent(e.reason_code(), chain(&e))),
    }
}

/// A ledger failure of a regeneration: storage faults keep their classification, the rest
/// (the attempt collected, a collision, no row) are permanent and named.
fn attempt_failure(e: LedgerError) -> Failure {
    match e {
        LedgerError::Store(e) => e.into(),
        e => Failure::permanent(e.reason_code(), chain(&e)),
    }
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// The skip-if-present HEAD. It only saves work, so a HEAD that fails (a role without
/// `s3:ListBucket` answers 403 for an absent key) is no reason to fail the window: encode, and
/// let the create-if-absent write decide.
async fn head_if_allowed(shared: &Shared, key: &ObjectKey) -> Option<ObjectMeta> {
    match shared.b.objects.head(key).await {
        Ok(meta) => meta,
        Err(e) => {
            tracing::debug!(key = %key, error = %chain(&e), "skip-if-present HEAD failed; encoding");
            None
        }
    }
}

async fn verify_source(
    shared: &Shared,
    job: &JobRecord,
    deltas: &mut Deltas,
) -> Result<(), Failure> {
    let policy = shared.cfg.sources.of(job.tenant.as_str());
    for source in job.sources() {
        tilegate_source::verify(&shared.b, &policy, &shared.guard, source)
            .await
            .map_err(|e| {
                if matches!(e, SourceError::Changed { .. }) {
                    deltas.bump(shared, m::SOURCE_CHANGED);
                }
                Failure::from(e)
            })?;
    }
    Ok(())
}

/// The policy's judgement of every source the job reads, right before GDAL opens them.
async fn admit_sources(shared: &Shared, job: &JobRecord) -> Result<(), Failure> {
    let policy = shared.cfg.sources.of(job.tenant.as_str());
    for source in job.sources() {
        tilegate_source::admit(&policy, source).await?;
    }
    Ok(())
}

/// A window's output, its first overview level when the pool collects them, the step times,
/// and a pyramid window's tile images (written before the output, its index).
type Encoded = (
    Bytes,
    Option<ReducedWindow>,
    StepTimes,
    Vec<crate::pyramid::Pending>,
);

/// The window's tile, and its reduction when the pool collects them. A panic in the encoder
/// (or in GDAL's Rust bindings under it) is caught on its rayon thread and becomes a retryable
/// `encoder-panicked` fault of this window alone; left uncaught, rayon would abort the process.
async fn encode(
    shared: &Shared,
    job: &JobRecord,
    window: Window,
    attempt: u32,
    deltas: &mut Deltas,
) -> Result<Encoded, Failure> {
    if let Some(stand_in) = &shared.cfg.stand_in {
        // On Tokio's clock: a simulation's stand-in takes simulated time.
        let started = tokio::time::Instant::now();
        let tile = stand_in
            .encode(job, window, attempt)
            .await
            .map_err(|e| Failure::retryable(Reason::EncoderFailed, e))?;
        let times = StepTimes {
            encode: started.elapsed(),
            ..StepTimes::default()
        };
        return Ok((tile, None, times, Vec::new()));
    }
    let req = encode_request(job, window)?;
    let inputs = product_sources(job)?;
    let pyramid = crate::pyramid::spec(job).is_some();
    let reduce = (shared.cfg.reduce_into.as_ref())
        .filter(|r| r.job() == &job.job_id)
        .map(|r| r.resampling());
    let (tx, rx) = tokio::sync::oneshot::channel();
    let pool = shared
        .pool
        .as_ref()
        .expect("GDAL's encoder threads without a stand-in");
    pool.spawn(move || {
        let encoded = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            fault::encoder_panic(&window.to_string(), attempt);
            if pyramid {
                let started = Instant::now();
                return tilegate_cog::encode_pyramid_window(&req).map(|tiles| {
                    let (index, images) = crate::pyramid::index(tiles);
                    let times = StepTimes {
                        encode: started.elapsed(),
                        ..StepTimes::default()
                    };
                    (index, None, times, images)
                });
            }
            if let Some(inputs) = &inputs {
                return tilegate_cog::encode_product_window(&req, inputs).map(|tile| {
                    (
                        Bytes::from(tile),
                        None,
                        tilegate_cog::last_step_times(),
                        Vec::new(),
                    )
                });
            }
            tilegate_cog::encode_window_reducing(&req, reduce).map(|(tile, reduced)| {
                (
                    Bytes::from(tile),
                    reduced,
                    tilegate_cog::last_step_times(),
                    Vec::new(),
                )
            })
        }));
        let _ = tx.send(encoded);
    });
    let detail = match rx.await {
        Ok(Ok(encoded)) => return Ok(encoded?),
        Ok(Err(payload)) => panic_message(payload.as_ref()),
        Err(_) => "the encoder thread ended without an answer".to_owned(),
    };
    deltas.bump(shared, m::WINDOW_PANICS);
    tracing::error!(error = %detail, "encoder panicked");
    Err(Failure::retryable(Reason::EncoderPanicked, detail))
}

/// What the encoder needs for one window of a job.
pub fn encode_request(job: &JobRecord, window: Window) -> Result<EncodeRequest, SourceError> {
    let rect = job
        .grid
        .rect(window)
        .expect("window was checked against the grid");
    let path = match job.recipe.operation {
        // A product tile reads its inputs ([`product_sources`]), never its own source.
        Operation::Product(_) => job.source.uri.clone(),
        _ => gdal_path(&job.source)?,
    };
    Ok(EncodeRequest {
        path,
        cache_key: cache_key(&job.source),
        scene: job.scene.clone(),
        recipe: job.recipe.clone(),
        rect,
    })
}

/// The cache key of a source's GDAL handles: it changes whenever the file may have, and the
/// handles are reopened then.
fn cache_key(source: &SourceInfo) -> String {
    match &source.stat {
        Some(s) => format!("{}:{}:{}:{}", s.dev, s.inode, s.size, s.mtime_ns),
        None => source.etag.to_string(),
    }
}

/// The encoding of one window of `job`, to run on a blocking thread outside a pool: what
/// `regenerate` and `repair` recompute (a product tile's from its inputs).
pub(crate) fn blocking_encoder(
    job: &JobRecord,
    window: Window,
) -> Result<impl FnOnce() -> Result<Vec<u8>, CogError> + Send + 'static, SourceError> {
    let req = encode_request(job, window)?;
    let inputs = product_sources(job)?;
    Ok(move || match inputs {
        Some(inputs) => tilegate_cog::encode_product_window(&req, &inputs),
        None => tilegate_cog::encode_window(&req),
    })
}

/// Verify every source `job` reads (see [`tilegate_source::verify`]).
pub(crate) async fn verify_sources(
    b: &tilegate_core::Backends,
    policy: &Arc<tilegate_source::SourcePolicy>,
    guard: &tilegate_source::SourceGuard,
    job: &JobRecord,
) -> Result<(), SourceError> {
    for source in job.sources() {
        tilegate_source::verify(b, policy, guard, source).await?;
    }
    Ok(())
}

/// A product tile's inputs as the encoder reads them (`None` for any other job).
pub fn product_sources(job: &JobRecord) -> Result<Option<Vec<ProductSource>>, SourceError> {
    let Operation::Product(spec) = &job.recipe.operation else {
        return Ok(None);
    };
    spec.inputs
        .iter()
        .map(|i| {
            Ok(ProductSource {
                path: gdal_path(&i.source)?,
                cache_key: cache_key(&i.source),
                scene: i.scene.clone(),
            })
        })
        .collect::<Result<_, _>>()
        .map(Some)
}

/// Write the manifest row, on both `Written` and `AlreadyPresent`: a worker may have crashed
/// between the object and the row.
async fn record(
    shared: &Shared,
    job: &JobRecord,
    window: Window,
    meta: &ObjectMeta,
    origin: TileOrigin,
    facts: WindowFacts,
    deltas: &mut Deltas,
) -> Result<(), Failure> {
    let attempt = facts.attempt;
    let entry = ManifestEntry {
        job_id: job.job_id.clone(),
        window,
        key: meta.key.clone(),
        size: meta.size,
        e_tag: meta.e_tag.clone(),
        origin,
        recorded_at: now_millis(),
        facts,
    };
    match shared.b.manifest.put_entry(&entry).await? {
        CreateOutcome::Created => deltas.bump(shared, m::MANIFEST_ROWS_WRITTEN),
        CreateOutcome::AlreadyExists(existing) => {
            let row = &existing.row;
            if row.size != entry.size || row.e_tag != entry.e_tag {
                // Acknowledged all the same (the row is not this worker's to change: a repair
                // moves it under its version guard), but named, so that assembly's later
                // `manifest-etag-mismatch` has an explanation in the counters and the log.
                deltas.bump(shared, m::MANIFEST_MISMATCH);
                tracing::warn!(key = %entry.key, row_size = row.size, row_e_tag = %row.e_tag,
                    tile_size = entry.size, tile_e_tag = %entry.e_tag,
                    "manifest row disagrees with the tile in place");
            }
        }
    }
    fault::point("after-manifest", attempt);
    crate::completion::after_record(shared, job, window, attempt).await
}

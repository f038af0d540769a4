//! Requests counted per job, by the store that sends them: what a job cost.
//!
//! A cloud store calls [`record`] once per request it puts on the wire (the AWS clients from an
//! SDK interceptor, so retries and read-backs are counted as sent). The request is charged to
//! the job of the task that sent it: a pipeline stage opens a [`scope`] for the job it works on
//! (a worker names the job once it has decoded a message, with [`set_job`]); a request outside
//! any job's scope (a receive that brought messages of several jobs, a pool's idle poll) is
//! kept apart as unattributed, and a command that serves one job hands those to it
//! ([`attribute_unscoped`]). Counts are taken out with [`take_jobs`] and added to the job's
//! counters like every other counter, under the names of `tilegate_core::metrics`
//! (`requests_total{service="s3",op="PutObject"}`, `bytes_sent_total{service="s3"}`, …).
//!
//! Writing the counts is itself a request: the counter table sends it [`unmetered`] and adds
//! its own request to the counts it writes, so the counts equal what the provider saw.

use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::sync::{LazyLock, Mutex};
use tilegate_core::JobId;
use tilegate_core::metrics as m;

tokio::task_local! {
    static SCOPE: Scope;
}

struct Scope {
    job: RefCell<Option<JobId>>,
    metered: bool,
}

type Counts = BTreeMap<String, u64>;

static METER: LazyLock<Mutex<HashMap<Option<JobId>, Counts>>> = LazyLock::new(Default::default);

fn meter() -> std::sync::MutexGuard<'static, HashMap<Option<JobId>, Counts>> {
    METER
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Run `f` with its requests charged to `job` (or unattributed until [`set_job`] names one).
pub async fn scope<F: Future>(job: Option<JobId>, f: F) -> F::Output {
    SCOPE
        .scope(
            Scope {
                job: RefCell::new(job),
                metered: true,
            },
            f,
        )
        .await
}

/// Run `f` in a new scope charged to the current task's job: for tasks a stage spawns on a
/// job's behalf (a heartbeat, a lease renewal), which do not inherit the spawner's scope.
pub fn inherit<F: Future>(f: F) -> impl Future<Output = F::Output> {
    scope(current_job(), f)
}

/// Name the job of the current scope (no effect outside one).
pub fn set_job(job: &JobId) {
    let _ = SCOPE.try_with(|s| *s.job.borrow_mut() = Some(job.clone()));
}

/// The job the current task's requests are charged to.
pub fn current_job() -> Option<JobId> {
    SCOPE.try_with(|s| s.job.borrow().clone()).ok().flatten()
}

/// Run `f` without counting its requests (the caller counts them itself).
pub async fn unmetered<F: Future>(f: F) -> F::Output {
    SCOPE
        .scope(
            Scope {
                job: RefCell::new(current_job()),
                metered: false,
            },
            f,
        )
        .await
}

/// Count one request of `service` (`s3`, `dynamodb`, `sqs`, …) and operation (the provider's
/// name for it, `PutObject`), with the bytes of its body sent.
pub fn record(service: &str, op: &str, sent: u64) {
    add(m::requests_by(service, op), 1);
    if sent > 0 {
        add(m::bytes_sent_by(service), sent);
    }
}

/// Count the bytes of a response body received by `service`.
pub fn received(service: &str, bytes: u64) {
    if bytes > 0 {
        add(m::bytes_received_by(service), bytes);
    }
}

/// Add `n` to counter `name` of the current scope's job, unless the scope is unmetered.
fn add(name: String, n: u64) {
    let (job, metered) = SCOPE
        .try_with(|s| (s.job.borrow().clone(), s.metered))
        .unwrap_or((None, true));
    if metered {
        *meter().entry(job).or_default().entry(name).or_default() += n;
    }
}

/// Take the counts charged to jobs; unattributed counts stay.
pub fn take_jobs() -> Vec<(JobId, Counts)> {
    let mut meter = meter();
    let jobs: Vec<JobId> = meter.keys().flatten().cloned().collect();
    jobs.into_iter()
        .filter_map(|j| meter.remove(&Some(j.clone())).map(|c| (j, c)))
        .collect()
}

/// The counts charged to no job so far (a worker's receives and queue-depth checks, which
/// happen before a message names its job), without taking them.
pub fn unattributed() -> Counts {
    meter().get(&None).cloned().unwrap_or_default()
}

/// Charge every unattributed request so far to `job`: for a command that works on one job
/// only (`run`, `plan`, `assemble`), whose requests before the job was known (planning) or
/// outside any scope (idle polls, lease renewals) were all made for it.
pub fn attribute_unscoped(job: &JobId) {
    let mut meter = meter();
    if let Some(counts) = meter.remove(&None) {
        let into = meter.entry(Some(job.clone())).or_default();
        for (k, v) in counts {
            *into.entry(k).or_default() += v;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(n: u8) -> JobId {
        JobId::parse(&format!("{n:032x}")).expect("hex id")
    }

    #[tokio::test]
    async fn requests_are_charged_to_the_scope_that_sent_them() {
        let (a, b) = (job(0xa1), job(0xb2));
        scope(Some(a.clone()), async {
            record("s3", "PutObject", 10);
            unmetered(async { record("s3", "PutObject", 10) }).await;
            inherit(async { record("s3", "HeadObject", 0) }).await;
        })
        .await;
        scope(None, async {
            record("sqs", "ReceiveMessage", 0);
            received("sqs", 5);
            set_job(&b);
            record("sqs", "DeleteMessage", 0);
        })
        .await;
        let taken: BTreeMap<JobId, Counts> = take_jobs().into_iter().collect();
        let ca = &taken[&a];
        assert_eq!(ca[&m::requests_by("s3", "PutObject")], 1);
        assert_eq!(ca[&m::requests_by("s3", "HeadObject")], 1);
        assert_eq!(ca[&m::bytes_sent_by("s3")], 10);
        assert_eq!(taken[&b][&m::requests_by("sqs", "DeleteMessage")], 1);
        assert!(!taken[&b].contains_key(&m::requests_by("sqs", "ReceiveMessage")));
        attribute_unscoped(&b);
        let taken: BTreeMap<JobId, Counts> = take_jobs().into_iter().collect();
        assert_eq!(taken[&b][&m::requests_by("sqs", "ReceiveMessage")], 1);
        assert_eq!(taken[&b][&m::bytes_received_by("sqs")], 5);
    }
}

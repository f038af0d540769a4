//! The ledger's protocol over each backend's tables and store (the functions of
//! `tilegate-ledger` and the worker's regeneration, which every deployment runs the same):
//! returning orders, orders that waited past the upload grace, and an upload that finds its row
//! collected — each on an injected clock.

use super::{Harness, tables::new_job, unique};
use crate::object_key;
use bytes::Bytes;
use tilegate_core::Backends;
use tilegate_core::ledger::{AttemptState, HOUR_MS, PublishOutcome, Retention, Subject};
use tilegate_core::object::{ATTEMPT_METADATA, PutOptions};
use tilegate_core::table::JobRecord;
use tilegate_core::{UnixMillis, Window};
use tilegate_ledger::gc::{self, GcOptions};
use tilegate_ledger::{LedgerError, attempt};
use tilegate_worker::regenerate::{self, Request};

async fn backends(h: &dyn Harness) -> Backends {
    Backends {
        objects: h.objects(),
        jobs: h.jobs(),
        manifest: h.manifest(),
        claims: h.claims(),
        counters: h.counters(),
        ledger: h.ledger(),
        queue: h.queue(&unique("ledger-protocol"), 3).await,
        sources: None,
    }
}

/// The injected clock's start (each test's backend is fresh, so GC passes see only its rows).
fn base() -> UnixMillis {
    1_700_000_000_000
}

const GRACE: Retention = Retention {
    preview_ms: None,
    retired_ms: 3 * HOUR_MS,
    upload_grace_ms: 2 * HOUR_MS,
};

fn request(accept: bool) -> Request {
    Request {
        id: None,
        retention: GRACE,
        accept,
        ..Request::default()
    }
}

fn tile(n: u8) -> Bytes {
    Bytes::from(vec![n; 64 + usize::from(n)])
}

/// GC at `now`, counting only this job's rows.
async fn gc_job(b: &Backends, job: &JobRecord, now: UnixMillis) -> (u64, u64) {
    let r = gc::gc(b, &GcOptions::at(now)).await.unwrap();
    let mine = |i: &&gc::GcItem| i.job_id == job.job_id.as_str();
    let deleted = r.items.iter().filter(mine).count() as u64;
    (r.marked, deleted)
}

/// Attempt A1 is published; A2 is published, retiring A1; A1's order comes back (an SQS
/// duplicate, a lost batched acknowledgement, a visibility timeout): the pointer stays on A2,
/// A2 stays accepted with no deadline, A1 stays retired.
pub async fn a_returning_order_does_not_republish_an_older_attempt(h: &dyn Harness) {
    let b = backends(h).await;
    let job = new_job("returning-order");
    let w = Window::new(1, 0);
    let s = Subject::Window(w);
    let t = base();
    let (r1, o1) = regenerate::start(&b, &job, w, request(true), t)
        .await
        .unwrap();
    let first = regenerate::finish(&b, r1, &o1, tile(1), t + 1)
        .await
        .unwrap();
    assert!(matches!(
        first.published,
        Some(PublishOutcome::Published { previous: None })
    ));
    let (r2, o2) = regenerate::start(&b, &job, w, request(true), t + 2)
        .await
        .unwrap();
    regenerate::finish(&b, r2, &o2, tile(2), t + 3)
        .await
        .unwrap();
    assert_eq!(
        b.ledger
            .get_pointer(&job.job_id, s)
            .await
            .unwrap()
            .unwrap()
            .row
            .attempt,
        o2.id
    );
    // The order of A1 again, as a worker receiving it would continue it.
    let again = attempt::row(&b, &job.job_id, s, &o1.id).await.unwrap();
    let done = regenerate::finish(&b, again, &o1, Bytes::new(), t + 4)
        .await
        .unwrap();
    assert_eq!(done.accept_refused(), Some("published-before"));
    let p = b.ledger.get_pointer(&job.job_id, s).await.unwrap().unwrap();
    assert_eq!(
        p.row.attempt, o2.id,
        "a returning order moved the pointer back"
    );
    let a2 = attempt::row(&b, &job.job_id, s, &o2.id).await.unwrap().row;
    assert_eq!((a2.state, a2.delete_after), (AttemptState::Accepted, None));
    let a1 = attempt::row(&b, &job.job_id, s, &o1.id).await.unwrap().row;
    assert_eq!(a1.state, AttemptState::Retired);
    // Only an explicit accept re-links it.
    let out = attempt::accept_current(&b, &job.job_id, s, &o1.id, t + 5)
        .await
        .unwrap();
    assert!(matches!(out, PublishOutcome::Published { .. }), "{out:?}");
}

/// An order that waits longer than the upload grace before a worker takes it (a backlog,
/// retries, a redrive) is neither collected while it waits nor when it is done: the grace
/// counts from the moment the upload begins.
pub async fn an_order_older_than_the_upload_grace_is_not_collected(h: &dyn Harness) {
    let b = backends(h).await;
    let job = new_job("old-order");
    let w = Window::new(2, 1);
    let s = Subject::Window(w);
    let t = base() + 10_000_000;
    let (row, order) = regenerate::start(&b, &job, w, request(true), t)
        .await
        .unwrap();
    assert_eq!(row.row.delete_after, None, "no deadline while it waits");
    let later = t + 3 * i64::try_from(GRACE.upload_grace_ms).unwrap();
    let (_, deleted) = gc_job(&b, &job, later).await;
    assert_eq!(deleted, 0);
    assert_eq!(
        attempt::row(&b, &job.job_id, s, &order.id)
            .await
            .unwrap()
            .row
            .state,
        AttemptState::Uploading,
        "the waiting order's row was collected"
    );
    // A worker takes it now.
    let row = attempt::row(&b, &job.job_id, s, &order.id).await.unwrap();
    let done = regenerate::finish(&b, row, &order, tile(3), later)
        .await
        .unwrap();
    assert!(
        matches!(done.published, Some(PublishOutcome::Published { .. })),
        "{:?}",
        done.published
    );
    assert_eq!(done.row.row.upload_started_at, Some(later));
    let (_, deleted) = gc_job(&b, &job, later + 60_000).await;
    assert_eq!(deleted, 0);
    assert!(
        b.objects
            .head(&object_key(&done.row.row.key))
            .await
            .unwrap()
            .is_some()
    );
}

/// Begin an upload at `t`, put its object, and let GC mark the row (its grace passed) without
/// sweeping it: the state in which a slow upload comes back to record itself.
async fn marked_before_record(
    b: &Backends,
    job: &JobRecord,
    w: Window,
    t: UnixMillis,
) -> (
    tilegate_core::table::Versioned<tilegate_core::ledger::AttemptRow>,
    tilegate_core::ETag,
) {
    let s = Subject::Window(w);
    let row = attempt::begin(b, job, s, attempt::new_id(), GRACE, false, t)
        .await
        .unwrap();
    let meta = attempt::put(b, &row.row, tile(4)).await.unwrap();
    let due = t + i64::try_from(GRACE.upload_grace_ms).unwrap() + 1;
    let (report, _) = gc::mark_pass(b, &GcOptions::at(due)).await.unwrap();
    assert!(report.marked >= 1);
    let marked = attempt::row(b, &job.job_id, s, &row.row.attempt)
        .await
        .unwrap();
    assert_eq!(marked.row.state, AttemptState::Deleting);
    (row, meta.e_tag)
}

/// A hold set after GC's mark, before the slow upload records itself: the upload is refused by
/// name, and its object — held — stays.
pub async fn a_late_record_leaves_a_held_object(h: &dyn Harness) {
    let b = backends(h).await;
    let job = new_job("late-record-held");
    let w = Window::new(1, 1);
    let s = Subject::Window(w);
    let t = base() + 20_000_000;
    let (row, e_tag) = marked_before_record(&b, &job, w, t).await;
    attempt::set_hold(&b, &job.job_id, s, &row.row.attempt, true)
        .await
        .unwrap();
    let err = attempt::record(&b, row.clone(), 68, e_tag, t + 1)
        .await
        .unwrap_err();
    assert!(
        matches!(err, LedgerError::CollectedWhileUploading { .. }),
        "{err:?}"
    );
    assert!(
        b.objects
            .head(&object_key(&row.row.key))
            .await
            .unwrap()
            .is_some(),
        "a held object was deleted by a late record"
    );
    let now = attempt::row(&b, &job.job_id, s, &row.row.attempt)
        .await
        .unwrap();
    assert!(now.row.legal_hold);
    assert_eq!(now.row.sweep_started_at, None);
}

/// Without a hold, the late record collects its own object through the sweep's claim: the row
/// ends `deleted` with the deletion verified, and the object is gone.
pub async fn a_late_record_sweeps_its_own_object_through_the_claim(h: &dyn Harness) {
    let b = backends(h).await;
    let job = new_job("late-record");
    let w = Window::new(0, 0);
    let s = Subject::Window(w);
    let t = base() + 30_000_000;
    let (row, e_tag) = marked_before_record(&b, &job, w, t).await;
    let err = attempt::record(&b, row.clone(), 68, e_tag, t + 1)
        .await
        .unwrap_err();
    assert!(
        matches!(err, LedgerError::CollectedWhileUploading { .. }),
        "{err:?}"
    );
    assert!(
        b.objects
            .head(&object_key(&row.row.key))
            .await
            .unwrap()
            .is_none()
    );
    let now = attempt::row(&b, &job.job_id, s, &row.row.attempt)
        .await
        .unwrap();
    assert_eq!(now.row.state, AttemptState::Deleted);
    assert!(
        now.row.sweep_started_at.is_some(),
        "deleted without the claim"
    );
    assert!(now.row.deletion_verified_at.is_some());
    // An object that lost its attempt token (a copy without metadata) at the attempt's key is
    // still the attempt's own: a put of the same attempt finds it and does not call it a
    // collision. (The cloud stores stamp every conditional write with a token of their own, so
    // only a store that can hold an object without one is asked.)
    let other = attempt::begin(&b, &job, s, attempt::new_id(), GRACE, false, t + 2)
        .await
        .unwrap();
    b.objects
        .put_opts(&object_key(&other.row.key), tile(5), PutOptions::create())
        .await
        .unwrap();
    let found = b
        .objects
        .head(&object_key(&other.row.key))
        .await
        .unwrap()
        .unwrap();
    if !found.metadata.contains_key(ATTEMPT_METADATA) {
        let meta = attempt::put(&b, &other.row, tile(5)).await.unwrap();
        assert_eq!(meta.e_tag, found.e_tag);
    }
}

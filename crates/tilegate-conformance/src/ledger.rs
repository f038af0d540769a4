//! Conformance of the ledger table: attempt rows, the pointer, publish's compare-and-swap, the
//! mark transaction and the due index.

use super::{Harness, unique};
use std::collections::HashSet;
use std::sync::Arc;
use tilegate_core::ledger::{
    AttemptId, AttemptRow, AttemptState, HOUR_MS, LedgerTable, Publish, PublishBy, PublishOutcome,
    Retention, Subject,
};
use tilegate_core::table::{CreateOutcome, UpdateOutcome, Versioned};
use tilegate_core::{ETag, JobId, Prefix, Tenant, Window};

fn job() -> JobId {
    JobId::derive(&unique("ledger"), "\"e\"", "r", "p")
}

fn id(n: u128) -> AttemptId {
    AttemptId::from_random(n)
}

fn begin(job: &JobId, w: Window, a: &AttemptId, retention: Retention, now: i64) -> AttemptRow {
    AttemptRow::begin(
        Tenant::default(),
        job.clone(),
        Subject::Window(w),
        a.clone(),
        &Prefix::default(),
        retention,
        now,
    )
}

/// Create a row and record its upload: `uploaded`, at version 2.
async fn uploaded(
    l: &dyn LedgerTable,
    job: &JobId,
    w: Window,
    a: &AttemptId,
    retention: Retention,
    now: i64,
) -> Versioned<AttemptRow> {
    let row = begin(job, w, a, retention, now);
    assert_eq!(
        l.create_attempt(&row).await.unwrap(),
        CreateOutcome::Created
    );
    let up = row.uploaded(10, ETag::new(format!("\"{a}\"")), now);
    assert_eq!(
        l.update_attempt(&up, 1).await.unwrap(),
        UpdateOutcome::Updated { version: 2 }
    );
    Versioned {
        version: 2,
        row: up,
    }
}

fn publish(job: &JobId, w: Window, a: &AttemptId, seen: Option<&AttemptId>, now: i64) -> Publish {
    Publish {
        job_id: job.clone(),
        subject: Subject::Window(w),
        attempt: a.clone(),
        seen: seen.cloned(),
        now,
        by: PublishBy::Explicit,
    }
}

/// An order's publish (a regeneration message, a `regenerate` that accepts).
fn order(job: &JobId, w: Window, a: &AttemptId, seen: Option<&AttemptId>, now: i64) -> Publish {
    Publish {
        by: PublishBy::Order,
        ..publish(job, w, a, seen, now)
    }
}

/// An order never moves the pointer back: not onto an attempt published before (a returning
/// order), not onto one begun before the newest published (a late order); an explicit accept
/// may, and the newest stays the bar for orders after it.
pub async fn ledger_an_order_never_moves_the_pointer_back(h: &dyn Harness) {
    let l = h.ledger();
    let job = job();
    let w = Window::new(3, 1);
    let s = Subject::Window(w);
    let (a1, a2, late, a4) = (id(21), id(22), id(23), id(24));
    uploaded(&*l, &job, w, &a1, Retention::default(), 1_000).await;
    uploaded(&*l, &job, w, &a2, Retention::default(), 2_000).await;
    // Begun between A1 and A2, uploaded last.
    uploaded(&*l, &job, w, &late, Retention::default(), 1_500).await;
    assert_eq!(
        l.publish(&order(&job, w, &a1, None, 3_000)).await.unwrap(),
        PublishOutcome::Published { previous: None }
    );
    assert_eq!(
        l.publish(&order(&job, w, &a2, Some(&a1), 4_000))
            .await
            .unwrap(),
        PublishOutcome::Published {
            previous: Some(a1.clone())
        }
    );
    // A1's order comes back: A1 was published before, so it stays retired.
    match l
        .publish(&order(&job, w, &a1, Some(&a2), 5_000))
        .await
        .unwrap()
    {
        PublishOutcome::NotPublishable(Some(r)) => {
            assert_eq!(r.row.state, AttemptState::Retired);
            assert!(r.row.ever_published());
        }
        other => panic!("a returning order re-published: {other:?}"),
    }
    // A late order, begun before A2: outdated.
    assert!(matches!(
        l.publish(&order(&job, w, &late, Some(&a2), 5_500)).await.unwrap(),
        PublishOutcome::Outdated { current: Some(c) } if c.row.attempt == a2
    ));
    let p = l.get_pointer(&job, s).await.unwrap().unwrap();
    assert_eq!(p.row.attempt, a2, "the pointer stays on the newest");
    assert_eq!(
        l.get_attempt(&job, s, &a2)
            .await
            .unwrap()
            .unwrap()
            .row
            .state,
        AttemptState::Accepted
    );
    // An explicit accept moves it back onto A1 ...
    assert_eq!(
        l.publish(&publish(&job, w, &a1, Some(&a2), 6_000))
            .await
            .unwrap(),
        PublishOutcome::Published {
            previous: Some(a2.clone())
        }
    );
    // ... after which a late order still cannot go below the newest ever named (A2) ...
    assert!(matches!(
        l.publish(&order(&job, w, &late, Some(&a1), 6_500))
            .await
            .unwrap(),
        PublishOutcome::Outdated { .. }
    ));
    assert_eq!(
        l.get_pointer(&job, s).await.unwrap().unwrap().row.attempt,
        a1
    );
    // ... and a newer attempt's order publishes as usual.
    uploaded(&*l, &job, w, &a4, Retention::default(), 7_000).await;
    assert_eq!(
        l.publish(&order(&job, w, &a4, Some(&a1), 8_000))
            .await
            .unwrap(),
        PublishOutcome::Published {
            previous: Some(a1.clone())
        }
    );
    let accepted: Vec<_> = l
        .list_attempts(&job)
        .await
        .unwrap()
        .into_iter()
        .filter(|r| r.row.state == AttemptState::Accepted)
        .map(|r| r.row.attempt)
        .collect();
    assert_eq!(accepted, vec![a4]);
}

pub async fn ledger_create_get_update(h: &dyn Harness) {
    let l = h.ledger();
    let job = job();
    let w = Window::new(0, 1);
    let row = begin(&job, w, &id(1), Retention::default(), 1_000);
    assert_eq!(
        l.create_attempt(&row).await.unwrap(),
        CreateOutcome::Created
    );
    // The same attempt again (a retry) finds its own row.
    match l.create_attempt(&row).await.unwrap() {
        CreateOutcome::AlreadyExists(v) => assert_eq!((v.version, &v.row), (1, &row)),
        other => panic!("{other:?}"),
    }
    let got = l
        .get_attempt(&job, Subject::Window(w), &id(1))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(got.row, row);
    assert_eq!(got.row.state, AttemptState::Uploading);
    assert!(
        l.get_attempt(&job, Subject::Window(w), &id(2))
            .await
            .unwrap()
            .is_none()
    );
    let up = row.uploaded(7, ETag::new("\"x\""), 2_000);
    assert_eq!(
        l.update_attempt(&up, 1).await.unwrap(),
        UpdateOutcome::Updated { version: 2 }
    );
    // A stale version is refused with the row that refused it.
    match l.update_attempt(&row, 1).await.unwrap() {
        UpdateOutcome::Superseded(Some(cur)) => assert_eq!((cur.version, cur.row), (2, up)),
        other => panic!("{other:?}"),
    }
    assert_eq!(l.list_attempts(&job).await.unwrap().len(), 1);
    assert!(l.list_pointers(&job).await.unwrap().is_empty());
}

pub async fn ledger_publish_moves_pointer_and_retires(h: &dyn Harness) {
    let l = h.ledger();
    let job = job();
    let w = Window::new(2, 3);
    let s = Subject::Window(w);
    let (a, b) = (id(10), id(11));
    uploaded(&*l, &job, w, &a, Retention::default(), 1_000).await;
    assert_eq!(
        l.publish(&publish(&job, w, &a, None, 5_000)).await.unwrap(),
        PublishOutcome::Published { previous: None }
    );
    let p = l.get_pointer(&job, s).await.unwrap().unwrap();
    assert_eq!(p.row.attempt, a);
    assert_eq!(p.row.output.e_tag, ETag::new(format!("\"{a}\"")));
    let ra = l.get_attempt(&job, s, &a).await.unwrap().unwrap();
    assert_eq!(ra.row.state, AttemptState::Accepted);
    assert_eq!(ra.row.delete_after, None, "an accepted attempt is kept");

    uploaded(&*l, &job, w, &b, Retention::default(), 6_000).await;
    // The caller saw no pointer, but there is one: nothing changes.
    match l.publish(&publish(&job, w, &b, None, 7_000)).await.unwrap() {
        PublishOutcome::Superseded { current: Some(c) } => assert_eq!(c.row.attempt, a),
        other => panic!("{other:?}"),
    }
    assert_eq!(
        l.publish(&publish(&job, w, &b, Some(&a), 8_000))
            .await
            .unwrap(),
        PublishOutcome::Published {
            previous: Some(a.clone())
        }
    );
    assert_eq!(
        l.get_pointer(&job, s).await.unwrap().unwrap().row.attempt,
        b
    );
    let ra = l.get_attempt(&job, s, &a).await.unwrap().unwrap();
    assert_eq!(ra.row.state, AttemptState::Retired);
    assert_eq!(
        ra.row.retired_at,
        Some(8_000),
        "retention counts from retirement"
    );
    assert_eq!(
        ra.row.delete_after,
        Some(8_000 + i64::try_from(Retention::default().retired_ms).unwrap())
    );
    let rb = l.get_attempt(&job, s, &b).await.unwrap().unwrap();
    assert_eq!(rb.row.state, AttemptState::Accepted);
    // Moving back onto the retired attempt is a publish like any other.
    assert_eq!(
        l.publish(&publish(&job, w, &a, Some(&b), 9_000))
            .await
            .unwrap(),
        PublishOutcome::Published {
            previous: Some(b.clone())
        }
    );
    let ra = l.get_attempt(&job, s, &a).await.unwrap().unwrap();
    assert_eq!(
        (ra.row.state, ra.row.delete_after),
        (AttemptState::Accepted, None)
    );
    let pointers = l.list_pointers(&job).await.unwrap();
    assert_eq!(pointers.len(), 1);
    assert_eq!(l.list_attempts(&job).await.unwrap().len(), 2);
}

pub async fn ledger_concurrent_accepts_one_wins(h: &dyn Harness) {
    let l = h.ledger();
    let job = job();
    let w = Window::new(0, 0);
    let s = Subject::Window(w);
    let first = id(100);
    uploaded(&*l, &job, w, &first, Retention::default(), 1).await;
    l.publish(&publish(&job, w, &first, None, 2)).await.unwrap();
    let mut seen = first;
    for round in 0..4u128 {
        let contenders: Vec<AttemptId> = (0..4).map(|i| id(1_000 + round * 10 + i)).collect();
        for c in &contenders {
            uploaded(&*l, &job, w, c, Retention::default(), 10).await;
        }
        let tasks: Vec<_> = contenders
            .iter()
            .map(|c| {
                let l = Arc::clone(&l);
                let p = publish(&job, w, c, Some(&seen), 20);
                tokio::spawn(async move { l.publish(&p).await.unwrap() })
            })
            .collect();
        let mut winners = Vec::new();
        for (c, t) in contenders.iter().zip(tasks) {
            match t.await.unwrap() {
                PublishOutcome::Published { previous } => {
                    assert_eq!(previous.as_ref(), Some(&seen));
                    winners.push(c.clone());
                }
                PublishOutcome::Superseded { .. } => {}
                other => panic!("{other:?}"),
            }
        }
        assert_eq!(winners.len(), 1, "exactly one accept wins: {winners:?}");
        let p = l.get_pointer(&job, s).await.unwrap().unwrap();
        assert_eq!(p.row.attempt, winners[0]);
        // The losers are untouched; the previous attempt retired exactly once.
        for c in &contenders {
            let r = l.get_attempt(&job, s, c).await.unwrap().unwrap();
            let want = if c == &winners[0] {
                AttemptState::Accepted
            } else {
                AttemptState::Uploaded
            };
            assert_eq!(r.row.state, want);
        }
        let prev = l.get_attempt(&job, s, &seen).await.unwrap().unwrap();
        assert_eq!(prev.row.state, AttemptState::Retired);
        seen = winners[0].clone();
    }
    let accepted = l
        .list_attempts(&job)
        .await
        .unwrap()
        .into_iter()
        .filter(|r| r.row.state == AttemptState::Accepted)
        .count();
    assert_eq!(accepted, 1, "one accepted row iff one pointer");
}

pub async fn ledger_publishable_states(h: &dyn Harness) {
    let l = h.ledger();
    let job = job();
    let w = Window::new(1, 1);
    let s = Subject::Window(w);
    // Uploading: nothing to publish yet.
    let a = id(1);
    let row = begin(&job, w, &a, Retention::default(), 1);
    l.create_attempt(&row).await.unwrap();
    assert!(matches!(
        l.publish(&publish(&job, w, &a, None, 2)).await.unwrap(),
        PublishOutcome::NotPublishable(Some(_))
    ));
    // Unknown attempt.
    assert_eq!(
        l.publish(&publish(&job, w, &id(99), None, 2))
            .await
            .unwrap(),
        PublishOutcome::NotPublishable(None)
    );
    // Marked but not yet swept: a re-link wins over the sweep.
    let b = id(2);
    let up = uploaded(&*l, &job, w, &b, Retention::default(), 1).await;
    assert_eq!(
        l.mark(&up, 3).await.unwrap(),
        UpdateOutcome::Updated { version: 3 }
    );
    assert_eq!(
        l.publish(&publish(&job, w, &b, None, 4)).await.unwrap(),
        PublishOutcome::Published { previous: None }
    );
    let rb = l.get_attempt(&job, s, &b).await.unwrap().unwrap();
    assert_eq!(rb.row.state, AttemptState::Accepted);
    // Claimed by a sweep: no longer publishable.
    let c = id(3);
    let up = uploaded(&*l, &job, w, &c, Retention::default(), 1).await;
    l.mark(&up, 5).await.unwrap();
    let marked = l.get_attempt(&job, s, &c).await.unwrap().unwrap();
    l.update_attempt(&marked.row.sweeping(6), marked.version)
        .await
        .unwrap();
    assert!(matches!(
        l.publish(&publish(&job, w, &c, Some(&b), 7)).await.unwrap(),
        PublishOutcome::NotPublishable(Some(_))
    ));
    assert_eq!(
        l.get_pointer(&job, s).await.unwrap().unwrap().row.attempt,
        b
    );
}

pub async fn ledger_due_index_pages(h: &dyn Harness) {
    let l = h.ledger();
    let job = job();
    // Far in the future, so rows of other tests sharing the table are not due at `now`.
    let base: i64 = 4_000_000_000_000 + i64::from(rand_small());
    let grace = Retention {
        upload_grace_ms: 1_000,
        ..Retention::default()
    };
    let mut due = HashSet::new();
    for i in 0..7u32 {
        let a = id(u128::from(i) + 1);
        let row = begin(&job, Window::new(0, i), &a, grace, base + i64::from(i));
        l.create_attempt(&row).await.unwrap();
        due.insert(a);
    }
    // Held: never due.
    let held = id(50);
    let mut row = begin(&job, Window::new(1, 0), &held, grace, base);
    row.legal_hold = true;
    l.create_attempt(&row).await.unwrap();
    // Not yet due.
    let young = id(51);
    l.create_attempt(&begin(
        &job,
        Window::new(1, 1),
        &young,
        grace,
        base + 100_000,
    ))
    .await
    .unwrap();
    // Deleted: gone from the index.
    let gone = id(52);
    let r = begin(&job, Window::new(1, 2), &gone, grace, base);
    l.create_attempt(&r).await.unwrap();
    l.update_attempt(&r.deleted(base), 1).await.unwrap();

    let now = base + 50_000;
    let mut found = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let page = l.due(now, cursor.as_deref(), 2).await.unwrap();
        assert!(page.rows.len() <= 2);
        found.extend(
            page.rows
                .into_iter()
                .filter(|r| r.row.job_id == job)
                .map(|r| r.row.attempt),
        );
        cursor = page.next;
        if cursor.is_none() {
            break;
        }
    }
    let set: HashSet<_> = found.iter().cloned().collect();
    assert_eq!(set.len(), found.len(), "no row twice across pages");
    assert_eq!(set, due, "exactly the due rows");
    let oldest = l.oldest_due(now).await.unwrap().unwrap();
    assert!(oldest <= base + 1_000, "{oldest} vs {base}");
}

/// A small per-process number, so parallel runs of the due test use distinct time ranges.
fn rand_small() -> u32 {
    std::process::id() % 100_000 * 10
}

pub async fn ledger_mark_withdraws_an_expired_preview(h: &dyn Harness) {
    let l = h.ledger();
    let job = job();
    let w = Window::new(0, 5);
    let s = Subject::Window(w);
    let a = id(7);
    let preview = Retention {
        preview_ms: Some(6 * HOUR_MS),
        ..Retention::default()
    };
    uploaded(&*l, &job, w, &a, preview, 1_000).await;
    l.publish(&publish(&job, w, &a, None, 2_000)).await.unwrap();
    let row = l.get_attempt(&job, s, &a).await.unwrap().unwrap();
    assert_eq!(row.row.state, AttemptState::Accepted);
    assert_eq!(
        row.row.delete_after,
        Some(1_000 + i64::try_from(6 * HOUR_MS).unwrap()),
        "a preview ends at its deadline, published or not"
    );
    // A stale version is refused and changes nothing.
    assert!(matches!(
        l.mark(
            &Versioned {
                version: row.version - 1,
                row: row.row.clone()
            },
            9
        )
        .await
        .unwrap(),
        UpdateOutcome::Superseded(_)
    ));
    assert!(l.get_pointer(&job, s).await.unwrap().is_some());
    assert_eq!(
        l.mark(&row, 9).await.unwrap(),
        UpdateOutcome::Updated {
            version: row.version + 1
        }
    );
    assert!(
        l.get_pointer(&job, s).await.unwrap().is_none(),
        "the pointer is withdrawn in the same write"
    );
    let r = l.get_attempt(&job, s, &a).await.unwrap().unwrap();
    assert_eq!(r.row.state, AttemptState::Deleting);
}

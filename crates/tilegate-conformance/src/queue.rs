//! Work-queue conformance: batches, visibility timeouts and receipts, receive counts, the
//! dead-letter queue (redrive policy and explicit), redrive, long polling, exclusive receives.

use super::{Harness, skip, unique};
use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tilegate_core::queue::{
    AckOutcome, MAX_MESSAGE_BYTES, QueueDepth, ReceiveOptions, Received, WorkQueue,
};

fn opts(max: u32, wait_ms: u64, visibility_s: u64) -> ReceiveOptions {
    ReceiveOptions {
        max,
        wait: Duration::from_millis(wait_ms),
        visibility: Duration::from_secs(visibility_s),
    }
}

fn bodies(tag: &str, n: usize) -> Vec<String> {
    (0..n).map(|i| format!("{tag}-{i:03}")).collect()
}

/// Receive until `n` messages arrived (or a generous deadline passes).
async fn receive_n(q: &dyn WorkQueue, n: usize, o: ReceiveOptions) -> Vec<Received> {
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut got = Vec::new();
    while got.len() < n && Instant::now() < deadline {
        got.extend(q.receive(o).await.unwrap());
    }
    got
}

async fn receive_one(q: &dyn WorkQueue, visibility_s: u64) -> Received {
    let mut got = receive_n(q, 1, opts(1, 2000, visibility_s)).await;
    assert_eq!(got.len(), 1, "expected one message");
    got.remove(0)
}

pub async fn send_receive_ack(h: &dyn Harness) {
    let q = h.queue(&unique("q-basic"), 3).await;
    let sent = bodies("m", 25);
    q.send_batch(&sent).await.unwrap();

    let first = q.receive(opts(10, 2000, 60)).await.unwrap();
    assert!(!first.is_empty() && first.len() <= 10, "{}", first.len());
    let mut batch = first;
    if batch.len() < 10 {
        // A provider may return fewer than asked per call; top up.
        let more = receive_n(
            &*q,
            10 - batch.len(),
            opts(10 - u32::try_from(batch.len()).unwrap(), 2000, 60),
        )
        .await;
        batch.extend(more);
    }
    assert_eq!(batch.len(), 10);
    let ids: BTreeSet<&str> = batch.iter().map(|m| m.message_id.as_str()).collect();
    assert_eq!(ids.len(), 10, "duplicate messages in one batch");
    for m in &batch {
        assert_eq!(m.receive_count, 1);
        assert!(sent.contains(&m.body));
    }
    for m in &batch {
        assert_eq!(q.ack(&m.receipt).await.unwrap(), AckOutcome::Deleted);
    }
    assert_eq!(q.ack(&batch[0].receipt).await.unwrap(), AckOutcome::Stale);

    let rest = receive_n(&*q, 15, opts(10, 2000, 60)).await;
    assert_eq!(rest.len(), 15);
    let all: BTreeSet<String> = batch
        .iter()
        .chain(rest.iter())
        .map(|m| m.body.clone())
        .collect();
    assert_eq!(all, sent.iter().cloned().collect());
    for m in &rest {
        assert_eq!(q.ack(&m.receipt).await.unwrap(), AckOutcome::Deleted);
    }
    assert!(q.receive(opts(10, 0, 60)).await.unwrap().is_empty());
    assert_eq!(q.depth().await.unwrap(), QueueDepth::default());
}

pub async fn visibility_expiry_redelivers(h: &dyn Harness) {
    let q = h.queue(&unique("q-visibility"), 5).await;
    q.send_batch(&bodies("v", 1)).await.unwrap();
    let first = receive_one(&*q, 1).await;
    assert_eq!(first.receive_count, 1);
    // Hidden while the visibility timeout runs.
    assert!(q.receive(opts(1, 0, 1)).await.unwrap().is_empty());
    let d = q.depth().await.unwrap();
    assert_eq!((d.visible, d.in_flight), (0, 1));

    tokio::time::sleep(Duration::from_millis(1500)).await;
    let second = receive_one(&*q, 30).await;
    assert_eq!(second.message_id, first.message_id);
    assert_eq!(second.body, first.body);
    assert_eq!(second.receive_count, 2);
    assert_ne!(second.receipt, first.receipt);
    // The first worker's receipt is stale: its late ack must not delete the redelivery.
    assert_eq!(q.ack(&first.receipt).await.unwrap(), AckOutcome::Stale);
    assert_eq!(
        q.change_visibility(&first.receipt, Duration::ZERO)
            .await
            .unwrap(),
        AckOutcome::Stale
    );
    assert_eq!(q.ack(&second.receipt).await.unwrap(), AckOutcome::Deleted);
}

pub async fn max_receives_dead_letters(h: &dyn Harness) {
    let q = h.queue(&unique("q-max"), 2).await;
    assert_eq!(q.max_receive_count(), 2);
    q.send_batch(&bodies("poison", 1)).await.unwrap();
    let mut id = String::new();
    for n in 1..=2 {
        let m = receive_one(&*q, 30).await;
        assert_eq!(m.receive_count, n);
        id.clone_from(&m.message_id);
        // The worker fails without acking; release it for the next receive at once.
        assert_eq!(
            q.change_visibility(&m.receipt, Duration::ZERO)
                .await
                .unwrap(),
            AckOutcome::Deleted
        );
    }
    // The third receive finds it at max_receive_count and moves it to the dead letters.
    assert!(q.receive(opts(10, 500, 30)).await.unwrap().is_empty());
    let dead = q.list_dead_letters(10).await.unwrap();
    assert_eq!(dead.len(), 1, "{dead:?}");
    assert_eq!(dead[0].message_id, id);
    assert_eq!(dead[0].body, "poison-000");
    assert_eq!(dead[0].receive_count, 2);
    assert!(
        dead[0].reason.starts_with("max-receives-exceeded"),
        "{}",
        dead[0].reason
    );
    let d = q.depth().await.unwrap();
    assert_eq!((d.visible, d.in_flight, d.dead), (0, 0, 1));

    // Redrive all: back with a fresh receive count.
    assert_eq!(q.redrive(None).await.unwrap(), 1);
    assert!(q.list_dead_letters(10).await.unwrap().is_empty());
    let m = receive_one(&*q, 30).await;
    assert_eq!(m.message_id, id);
    assert_eq!(m.receive_count, 1);
    assert_eq!(q.ack(&m.receipt).await.unwrap(), AckOutcome::Deleted);
}

pub async fn dead_letter_with_reason_and_redrive(h: &dyn Harness) {
    let q = h.queue(&unique("q-dlq"), 3).await;
    q.send_batch(&bodies("d", 3)).await.unwrap();
    let got = receive_n(&*q, 3, opts(10, 2000, 60)).await;
    assert_eq!(got.len(), 3);
    let reason = "malformed-message: expected JSON with job_id and window";
    q.dead_letter(&got[0], reason).await.unwrap();
    q.dead_letter(&got[1], "unknown-job: no job row")
        .await
        .unwrap();
    // A dead-lettered message's receipt is no longer acknowledgeable.
    assert_eq!(q.ack(&got[0].receipt).await.unwrap(), AckOutcome::Stale);

    let dead = q.list_dead_letters(10).await.unwrap();
    assert_eq!(dead.len(), 2);
    assert_eq!(dead[0].message_id, got[0].message_id);
    assert_eq!(dead[0].reason, reason);
    assert_eq!(dead[0].body, got[0].body);
    assert_eq!(dead[0].receive_count, 1);
    assert_eq!(dead[1].reason, "unknown-job: no job row");
    assert_eq!(q.list_dead_letters(1).await.unwrap().len(), 1);
    assert_eq!(q.depth().await.unwrap().dead, 2);

    // Redrive one by ID.
    let n = q
        .redrive(Some(std::slice::from_ref(&got[0].message_id)))
        .await
        .unwrap();
    assert_eq!(n, 1);
    let left = q.list_dead_letters(10).await.unwrap();
    assert_eq!(left.len(), 1);
    assert_eq!(left[0].message_id, got[1].message_id);
    let back = receive_one(&*q, 60).await;
    assert_eq!(back.message_id, got[0].message_id);
    assert_eq!(back.receive_count, 1);
    assert_eq!(q.ack(&back.receipt).await.unwrap(), AckOutcome::Deleted);
    assert_eq!(q.ack(&got[2].receipt).await.unwrap(), AckOutcome::Deleted);
}

pub async fn change_visibility_zero_releases(h: &dyn Harness) {
    let q = h.queue(&unique("q-cv"), 5).await;
    q.send_batch(&bodies("c", 1)).await.unwrap();
    let m = receive_one(&*q, 60).await;
    assert!(q.receive(opts(1, 0, 60)).await.unwrap().is_empty());
    // Extending works and keeps it hidden.
    assert_eq!(
        q.change_visibility(&m.receipt, Duration::from_secs(120))
            .await
            .unwrap(),
        AckOutcome::Deleted
    );
    assert!(q.receive(opts(1, 0, 60)).await.unwrap().is_empty());
    assert_eq!(
        q.change_visibility(&m.receipt, Duration::ZERO)
            .await
            .unwrap(),
        AckOutcome::Deleted
    );
    let again = receive_one(&*q, 60).await;
    assert_eq!(again.message_id, m.message_id);
    assert_eq!(again.receive_count, 2);
    assert_eq!(q.ack(&again.receipt).await.unwrap(), AckOutcome::Deleted);
}

pub async fn long_poll_returns_on_send(h: &dyn Harness) {
    let q = h.queue(&unique("q-long-poll"), 3).await;
    let sender = Arc::clone(&q);
    let send = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(200)).await;
        sender.send_batch(&bodies("late", 1)).await.unwrap();
    });
    let started = Instant::now();
    let got = q.receive(opts(10, 5000, 60)).await.unwrap();
    let took = started.elapsed();
    send.await.unwrap();
    assert_eq!(got.len(), 1, "long poll returned without the message");
    assert_eq!(got[0].body, "late-000");
    eprintln!("long poll returned after {took:?}");
    q.ack(&got[0].receipt).await.unwrap();
}

/// Two receivers drain one queue: no message goes to both within its visibility window.
pub async fn concurrent_receivers_exclusive(h: &dyn Harness) {
    if !h.caps().exclusive_receive {
        skip(
            "queue::concurrent_receivers_exclusive",
            "backend delivers at least once only",
        );
        return;
    }
    const N: usize = 60;
    let q = h.queue(&unique("q-exclusive"), 3).await;
    q.send_batch(&bodies("x", N)).await.unwrap();
    let mut tasks = Vec::new();
    for _ in 0..2 {
        let q = Arc::clone(&q);
        tasks.push(tokio::spawn(async move {
            let mut mine = Vec::new();
            loop {
                let got = q.receive(opts(3, 200, 120)).await.unwrap();
                if got.is_empty() {
                    return mine;
                }
                mine.extend(got.into_iter().map(|m| m.message_id));
            }
        }));
    }
    let mut all = Vec::new();
    for t in tasks {
        all.extend(t.await.unwrap());
    }
    let distinct: BTreeSet<&String> = all.iter().collect();
    assert_eq!(distinct.len(), all.len(), "a message went to two receivers");
    assert_eq!(all.len(), N);
}

/// Many acknowledgements at once: every one deletes its message, none brings another back
/// (a queue that rebuilt its message list per delete without a lock lost concurrent deletes,
/// and the "deleted" message returned once its visibility ran out).
pub async fn concurrent_acks_delete_every_message(h: &dyn Harness) {
    const N: usize = 120;
    let q = h.queue(&unique("q-acks"), 3).await;
    q.send_batch(&bodies("a", N)).await.unwrap();
    let got = receive_n(&*q, N, opts(10, 500, 120)).await;
    assert_eq!(got.len(), N);
    let receipts: Vec<String> = got.into_iter().map(|m| m.receipt).collect();
    let mut tasks = Vec::new();
    for chunk in receipts.chunks(N / 12) {
        let q = Arc::clone(&q);
        let chunk = chunk.to_vec();
        tasks.push(tokio::spawn(async move {
            for r in &chunk {
                assert_eq!(q.ack(r).await.unwrap(), AckOutcome::Deleted);
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    assert_eq!(
        q.depth().await.unwrap(),
        QueueDepth::default(),
        "an acknowledged message is still in the queue"
    );
}

/// Four processes drain one queue: every message exactly once across them.
pub async fn receivers_exclusive_cross_process(h: &dyn Harness) {
    let caps = h.caps();
    let Some(urls) = h
        .child_urls()
        .filter(|_| caps.cross_process && caps.exclusive_receive)
    else {
        skip(
            "queue::receivers_exclusive_cross_process",
            "no cross-process helper or not exclusive",
        );
        return;
    };
    const N: usize = 80;
    let name = unique("q-xproc");
    let q = h.queue(&name, 3).await;
    q.send_batch(&bodies("p", N)).await.unwrap();
    let dir = crate::tempdir();
    let args: Vec<Vec<String>> = (0..4)
        .map(|_| vec!["queue-drain".into(), name.clone()])
        .collect();
    let outcomes = crate::child::run_children(&urls, args, &dir.path().join("go")).await;
    let mut all = Vec::new();
    for lines in &outcomes {
        let (last, ids) = lines.split_last().expect("child printed nothing");
        assert_eq!(last, &format!("drained {}", ids.len()));
        all.extend(ids.iter().cloned());
    }
    let distinct: BTreeSet<&String> = all.iter().collect();
    assert_eq!(distinct.len(), all.len(), "a message went to two processes");
    assert_eq!(all.len(), N);
    assert_eq!(q.depth().await.unwrap(), QueueDepth::default());
}

pub async fn oversized_message_refused(h: &dyn Harness) {
    let q = h.queue(&unique("q-big"), 3).await;
    let err = q
        .send_batch(&["x".repeat(MAX_MESSAGE_BYTES + 1)])
        .await
        .unwrap_err();
    assert!(!err.is_retryable(), "{err:?}");
    assert_eq!(q.depth().await.unwrap().visible, 0);
}

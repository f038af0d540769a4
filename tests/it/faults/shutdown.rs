//! How a pool ends when its queue fails for good: the windows in flight get the shutdown grace
//! and no more, what finished is acknowledged, and what did not is handed back — on the
//! in-memory backend, on Tokio's paused clock (no real time passes).

use async_trait::async_trait;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, UNIX_EPOCH};
use tilegate_core::queue::{
    AckOutcome, DeadLetter, QueueDepth, ReceiveOptions, Received, WorkQueue,
};
use tilegate_core::recipe::Recipe;
use tilegate_core::table::JobRecord;
use tilegate_core::{Retry, StoreError, StoreResult, Window};
use tilegate_memory::{MemoryBackend, MemoryQueue, TokioClock};
use tilegate_planner::PlanOptions;
use tilegate_worker::{StandInEncoder, StopWhen, Worker, WorkerConfig};

/// The in-memory queue, whose receives fail permanently after the first.
#[derive(Debug)]
struct FailsAfterFirstReceive {
    inner: MemoryQueue,
    receives: AtomicU32,
}

#[async_trait]
impl WorkQueue for FailsAfterFirstReceive {
    fn name(&self) -> &'static str {
        "fails-after-first-receive"
    }
    fn max_receive_count(&self) -> u32 {
        self.inner.max_receive_count()
    }
    async fn send_batch(&self, bodies: &[String]) -> StoreResult<()> {
        self.inner.send_batch(bodies).await
    }
    async fn receive(&self, opts: ReceiveOptions) -> StoreResult<Vec<Received>> {
        if self.receives.fetch_add(1, Ordering::SeqCst) == 0 {
            return self.inner.receive(opts).await;
        }
        Err(StoreError::backend(
            "receive",
            "queue",
            Retry::Permanent,
            std::io::Error::other("the queue was deleted"),
        ))
    }
    async fn ack(&self, receipt: &str) -> StoreResult<AckOutcome> {
        self.inner.ack(receipt).await
    }
    async fn ack_batch(&self, receipts: &[String]) -> StoreResult<Vec<AckOutcome>> {
        self.inner.ack_batch(receipts).await
    }
    async fn change_visibility(&self, receipt: &str, timeout: Duration) -> StoreResult<AckOutcome> {
        self.inner.change_visibility(receipt, timeout).await
    }
    async fn dead_letter(&self, msg: &Received, reason: &str) -> StoreResult<()> {
        self.inner.dead_letter(msg, reason).await
    }
    async fn list_dead_letters(&self, max: usize) -> StoreResult<Vec<DeadLetter>> {
        self.inner.list_dead_letters(max).await
    }
    async fn redrive(&self, message_ids: Option<&[String]>) -> StoreResult<u64> {
        self.inner.redrive(message_ids).await
    }
    async fn purge_dead_letters(&self, ids: &[String]) -> StoreResult<u64> {
        self.inner.purge_dead_letters(ids).await
    }
    async fn depth(&self) -> StoreResult<QueueDepth> {
        self.inner.depth().await
    }
}

/// Tiles at once, except window 0_0, whose encoder never returns.
#[derive(Debug)]
struct OneStuck;

#[async_trait]
impl StandInEncoder for OneStuck {
    async fn encode(&self, _: &JobRecord, w: Window, _: u32) -> Result<bytes::Bytes, String> {
        if w == Window::new(0, 0) {
            std::future::pending::<()>().await;
        }
        Ok(bytes::Bytes::from(format!("tile {w}")))
    }
}

/// After a permanent queue fault the grace loop is bounded (it used to wait for every window in
/// flight, forever for one that never finished), the windows that finished are acknowledged,
/// and the stuck one is handed back to the queue.
#[test]
fn a_permanent_queue_fault_gives_windows_the_grace_and_acknowledges_the_finished() {
    let tmp = tilegate_tests::tempdir();
    let vrt = tmp.path().join("zeros.vrt");
    std::fs::write(
        &vrt,
        "<VRTDataset rasterXSize=\"512\" rasterYSize=\"512\">\n  <SRS>EPSG:32633</SRS>\n  \
         <GeoTransform>500000, 10, 0, 5000000, 0, -10</GeoTransform>\n  \
         <VRTRasterBand dataType=\"Byte\" band=\"1\"/>\n</VRTDataset>\n",
    )
    .unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()
        .unwrap();
    rt.block_on(async {
        let mem = MemoryBackend::new(Arc::new(TokioClock::starting_at(
            UNIX_EPOCH + Duration::from_secs(1_767_225_600),
        )));
        let inner = mem.queue("shutdown", 3);
        let mut b = mem.backends(inner.clone());
        let opts = PlanOptions {
            recipe: Recipe {
                window: 256,
                ..Recipe::copy_all()
            },
            ..PlanOptions::default()
        };
        let plan = tilegate_planner::plan(&b, vrt.to_str().unwrap(), &opts)
            .await
            .unwrap();
        assert_eq!(plan.job.grid.len(), 4);
        b.queue = Arc::new(FailsAfterFirstReceive {
            inner: inner.clone(),
            receives: AtomicU32::new(0),
        });
        let cfg = WorkerConfig {
            concurrency: 8,
            wait: Duration::ZERO,
            stop: StopWhen::JobComplete(plan.job.job_id.clone()),
            shutdown_grace: Duration::from_secs(30),
            stand_in: Some(Arc::new(OneStuck)),
            ..WorkerConfig::default()
        };
        let worker = Worker::new(
            b.clone(),
            cfg,
            Arc::new(tilegate_core::metrics::Counters::new()),
        );
        let (_tx, stop) = tokio::sync::watch::channel(false);
        let ran = tokio::time::timeout(Duration::from_secs(3600), worker.run(stop))
            .await
            .expect("the pool never returned after a permanent queue fault");
        assert!(ran.is_err(), "the queue fault is returned: {ran:?}");
        assert_eq!(
            b.manifest.count_entries(&plan.job.job_id).await.unwrap(),
            3,
            "the three windows that could finish did"
        );
        let depth = inner.depth().await.unwrap();
        assert_eq!(
            (depth.visible, depth.in_flight),
            (1, 0),
            "three acknowledged, the stuck one handed back: {depth:?}"
        );
    });
}

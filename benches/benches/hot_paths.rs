//! Micro-benchmarks of the hot paths: job-ID derivation, key validation, the embedded store's
//! Create and Update, the embedded queue's receive + ack, manifest write and count.
//! `cargo bench -p tilegate-benches --bench hot_paths`; under `cargo test --benches` each runs
//! once, as a smoke test.

use bytes::Bytes;
use criterion::{BatchSize, Criterion, criterion_group, criterion_main};
use std::hint::black_box;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use tilegate_core::keys::{Prefix, validate_key};
use tilegate_core::object::{ObjectStore as _, ObjectStoreExt as _, UpdateVersion};
use tilegate_core::queue::ReceiveOptions;
use tilegate_core::table::{ManifestEntry, TileOrigin};
use tilegate_core::{ETag, JobId, Window, now_millis};

fn object_key(k: impl AsRef<str>) -> tilegate_core::ObjectKey {
    tilegate_core::ObjectKey::parse(k.as_ref()).expect("a valid key")
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

fn identities(c: &mut Criterion) {
    let recipe = tilegate_core::Recipe::copy_all().fingerprint();
    c.bench_function("job_id_derive", |b| {
        b.iter(|| {
            JobId::derive(
                black_box("s3://scenes/LC09_L2SP_042034_20240704_02_T1_SR_B4.TIF"),
                black_box("\"9b2cf535f27731c974343645a3985328\""),
                black_box(&recipe),
                black_box("prefix=tilegate"),
            )
        })
    });
    let job = JobId::derive("u", "e", "r", "p");
    let prefix = Prefix::parse("tenant-a/out").unwrap();
    let key = prefix.tile_key(&job, Window::new(17, 3));
    c.bench_function("key_validate", |b| {
        b.iter(|| validate_key(black_box(&key)).is_ok())
    });
    c.bench_function("prefix_parse", |b| {
        b.iter(|| Prefix::parse(black_box("tenant-a/out/2026")).is_ok())
    });
}

fn objects(c: &mut Criterion) {
    let rt = rt();
    let dir = tempfile::tempdir().unwrap();
    let store = tilegate_embedded::LocalObjectStore::open(dir.path()).unwrap();
    let tile = Bytes::from(vec![7u8; 64 * 1024]);
    let n = AtomicU64::new(0);
    c.bench_function("local_create_64k", |b| {
        b.iter(|| {
            let key = format!("t/{}.tif", n.fetch_add(1, Ordering::Relaxed));
            rt.block_on(store.put_create(&object_key(&key), tile.clone()))
                .unwrap()
        })
    });
    c.bench_function("local_create_refused", |b| {
        rt.block_on(store.put_create(&object_key("t/fixed.tif"), tile.clone()))
            .unwrap();
        b.iter(|| {
            rt.block_on(store.put_create(&object_key("t/fixed.tif"), tile.clone()))
                .unwrap()
        })
    });
    c.bench_function("local_update_64k", |b| {
        rt.block_on(store.put_create(&object_key("t/cas.tif"), tile.clone()))
            .unwrap();
        b.iter(|| {
            let cur = rt
                .block_on(store.head(&object_key("t/cas.tif")))
                .unwrap()
                .unwrap();
            rt.block_on(store.put_update(
                &object_key("t/cas.tif"),
                tile.clone(),
                UpdateVersion::from(&cur),
            ))
            .unwrap()
        })
    });
}

fn queue_and_manifest(c: &mut Criterion) {
    use tilegate_core::queue::WorkQueue as _;
    use tilegate_core::table::ManifestTable as _;
    let rt = rt();
    let dir = tempfile::tempdir().unwrap();
    let db = tilegate_embedded::SqliteBackend::open(dir.path().join("t.db")).unwrap();
    let q = db.queue("bench", 3);
    let body = "x".repeat(430);
    let opts = ReceiveOptions {
        max: 10,
        wait: Duration::ZERO,
        visibility: Duration::from_secs(60),
    };
    c.bench_function("queue_receive_ack_10", |b| {
        b.iter_batched(
            || rt.block_on(q.send_batch(&vec![body.clone(); 10])).unwrap(),
            |()| {
                for m in rt.block_on(q.receive(opts)).unwrap() {
                    rt.block_on(q.ack(&m.receipt)).unwrap();
                }
            },
            BatchSize::PerIteration,
        )
    });
    let job = JobId::derive("u", "e", "manifest", "p");
    let w = AtomicU64::new(0);
    let entry = |job: &JobId, i: u64| ManifestEntry {
        job_id: job.clone(),
        window: Window::new((i / 10_000) as u32, (i % 10_000) as u32),
        key: format!("tilegate/tiles/{job}/{i}.tif"),
        size: 1,
        e_tag: ETag::new("\"e\""),
        origin: TileOrigin::Written,
        recorded_at: now_millis(),
        facts: Default::default(),
    };
    c.bench_function("manifest_put", |b| {
        b.iter(|| {
            rt.block_on(db.put_entry(&entry(&job, w.fetch_add(1, Ordering::Relaxed))))
                .unwrap()
        })
    });
    // A job of its own with a fixed number of rows (the put benchmark's job grows by however
    // many iterations criterion chose).
    let counted = JobId::derive("u", "e", "count", "p");
    for i in 0..10_000 {
        rt.block_on(db.put_entry(&entry(&counted, i))).unwrap();
    }
    c.bench_function("manifest_count_10k", |b| {
        b.iter(|| {
            let n = rt.block_on(db.count_entries(&counted)).unwrap();
            assert_eq!(n, 10_000);
        })
    });
}

criterion_group!(benches, identities, objects, queue_and_manifest);
criterion_main!(benches);

//! Crash safety of the embedded object store: a writer process SIGKILLed in the middle of its
//! writes, many times over. No object may ever be visible partially written (temp file, fsync,
//! then `link` or rename), and a later Create of the key it was writing still behaves: written
//! once, refused after.

use bytes::Bytes;
use std::io::{BufRead as _, BufReader};
use std::process::{Command, Stdio};
use std::time::Duration;
use tilegate_core::object::{ObjectStore, ObjectStoreExt, PutOutcome};
use tilegate_embedded::LocalObjectStore;
use tilegate_tests::object_key;
use tilegate_tests::{check_crash_payload, child_bin, crash_payload, tempdir};

const ROUNDS: u64 = 40;

#[test]
fn crash_safety_writer_killed_mid_put_never_leaves_a_partial_object() {
    let tmp = tempdir();
    let root = tmp.path().join("objects");
    let url = format!("file://{}", root.display());
    let rt = tokio::runtime::Runtime::new().unwrap();
    let mut killed_at = Vec::new();
    for round in 0..ROUNDS {
        let prefix = format!("round-{round}");
        let barrier = tmp.path().join(format!("go-{round}"));
        std::fs::write(&barrier, b"go").unwrap();
        let mut child = Command::new(child_bin())
            .args(["put-loop", &url, &prefix])
            .arg(&barrier)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn tilegate-test-child");
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        assert_eq!(line.trim(), "ready");
        // Somewhere within the first few writes (each ~2 MiB, written, fsynced, linked).
        std::thread::sleep(Duration::from_millis(3 + (round * 7919) % 400));
        child.kill().unwrap();
        child.wait().unwrap();

        // Every visible object is whole, and is what its key says.
        let store = LocalObjectStore::open(&root).unwrap();
        let listed = rt.block_on(store.list(&format!("{prefix}/"))).unwrap();
        let mut created = 0u64;
        let mut shared = None;
        for meta in &listed {
            let got = rt
                .block_on(store.get_bytes(&object_key(&meta.key)))
                .unwrap();
            let (key, version) = check_crash_payload(&got.bytes)
                .unwrap_or_else(|e| panic!("round {round}: `{}` is partial: {e}", meta.key));
            assert_eq!(key, meta.key, "round {round}: bytes of another key");
            assert_eq!(got.bytes.len() as u64, meta.size);
            if key.ends_with("/shared") {
                shared = Some(version);
            } else {
                created = created.max(version + 1);
            }
        }
        // `shared` is replaced with version i only after obj-i was created.
        if let Some(v) = shared {
            assert!(
                v < created,
                "round {round}: shared at {v}, only {created} created"
            );
        }
        // The key the writer was on when it died (and the next): Create writes it once,
        // unless the writer's own link landed first; either way a second Create is refused.
        for i in created..created + 2 {
            let key = format!("{prefix}/obj-{i}");
            let first = rt
                .block_on(store.put_create(&object_key(&key), Bytes::from(crash_payload(&key, i))))
                .unwrap();
            assert!(
                matches!(first, PutOutcome::Written(_)),
                "round {round}: `{key}` was not listed, yet Create says {first:?}"
            );
            let again = rt
                .block_on(store.put_create(&object_key(&key), Bytes::from_static(b"other")))
                .unwrap();
            assert_eq!(again, PutOutcome::AlreadyPresent, "round {round}: `{key}`");
            let got = rt.block_on(store.get_bytes(&object_key(&key))).unwrap();
            assert_eq!(check_crash_payload(&got.bytes).unwrap(), (key.clone(), i));
        }
        killed_at.push(created);
    }
    // The kills landed at different points, not all before the first write.
    let distinct: std::collections::BTreeSet<_> = killed_at.iter().collect();
    println!("crash_safety: {ROUNDS} writers killed after these many creates: {killed_at:?}");
    assert!(distinct.len() >= 3, "kills all landed alike: {killed_at:?}");
}

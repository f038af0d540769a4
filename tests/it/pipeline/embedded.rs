//! End-to-end pipeline tests through the `tilegate` binary on the embedded backend: the demo,
//! duplicates across worker processes, a SIGKILLed worker, and bad input.

use serde_json::Value;
use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;
use std::process::Command;
use tilegate_core::message::WindowMessage;
use tilegate_core::queue::WorkQueue;
use tilegate_core::table::{JobTable, ManifestTable, TileOrigin};
use tilegate_core::{ETag, JobId, Recipe, SourceInfo};
use tilegate_embedded::SqliteBackend;
use tilegate_tests::{
    sample, snapshot, tempdir, tg_json, tilegate_bin, tiles_dir, validate_cogs, work_until_fault,
};

#[test]
fn demo_makes_64_tiles_and_a_rerun_writes_nothing() {
    let tmp = tempdir();
    let data = tmp.path();
    let first = tg_json(data, &["demo"]);
    assert_eq!(first["windows"], 64);
    assert_eq!(first["tiles_written"], 64);
    assert_eq!(first["manifest_rows"], 64);
    assert_eq!(first["dead_lettered"], 0);
    assert_eq!(first["complete"], true);
    let job = first["job_id"].as_str().unwrap().to_owned();
    let dir = tiles_dir(data, &job);
    let before = snapshot(&dir);
    assert_eq!(before.len(), 64);

    let second = tg_json(data, &["demo"]);
    assert_eq!(second["job_id"], job.as_str());
    assert_eq!(second["tiles_written"], 0);
    assert_eq!(second["already_present"], 64);
    assert_eq!(second["manifest_rows"], 64);
    assert_eq!(snapshot(&dir), before, "a rerun changed a tile");

    let status = tg_json(data, &["status", &job]);
    assert_eq!(status["manifest_rows"], 64);
    assert_eq!(status["missing_windows"], 0);
    assert_eq!(status["counters"]["tiles_written_total"], 64);
}

/// Every window enqueued three times, four worker processes on one data directory (two of
/// them encoding even when the tile exists, so the Create itself refuses the copies).
#[test]
fn heavy_duplicates_across_four_processes_write_each_tile_once() {
    let tmp = tempdir();
    let data = tmp.path();
    let scene = data.join("scene-10240.tif");
    sample(data, &scene, 10240, 7);
    let mut job = String::new();
    // Every window three times: a plan, then two that ask for every window again (a plan
    // that resumes sends none of those still waiting on the queue).
    for i in 0..3 {
        let mut args = vec!["plan", scene.to_str().unwrap()];
        if i > 0 {
            args.push("--all-windows");
        }
        let p = tg_json(data, &args);
        assert_eq!(p["windows"], 400);
        assert_eq!(p["enqueued"], 400);
        job = p["job_id"].as_str().unwrap().to_owned();
    }
    let resumed = tg_json(data, &["plan", scene.to_str().unwrap()]);
    assert_eq!(resumed["enqueued"], 0, "{resumed}");
    let workers: Vec<_> = (0..4)
        .map(|i| {
            let mut cmd = Command::new(tilegate_bin());
            cmd.arg("--data")
                .arg(data)
                .args(["--json", "work", "--until-empty", "--threads", "1"]);
            if i % 2 == 1 {
                cmd.arg("--no-skip-existing");
            }
            cmd.stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .expect("start worker")
        })
        .collect();
    for w in workers {
        let out = w.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let status = tg_json(data, &["status", &job]);
    assert_eq!(status["manifest_rows"], 400);
    assert_eq!(status["queue"]["dead"], 0);
    let c = &status["counters"];
    let refused = c["conditional_write_precondition_failed_total"]
        .as_u64()
        .unwrap();
    let skipped = c["duplicate_encodes_skipped_total"].as_u64().unwrap();
    assert!(
        refused > 0,
        "the Create never refused a copy: the gate is untested"
    );
    assert!(
        refused + skipped >= 800,
        "refused {refused} + skipped {skipped} < 800"
    );
    assert_eq!(c["tiles_written_total"], 400);

    // Every tile: written once (its bytes and ETag are the manifest's, it predates its row),
    // a valid COG.
    let dir = tiles_dir(data, &job);
    let snap = snapshot(&dir);
    assert_eq!(snap.len(), 400);
    let db = SqliteBackend::open(data.join("tilegate.db")).unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let id = JobId::parse(&job).unwrap();
    let rows = rt.block_on(db.list_entries(&id)).unwrap();
    assert_eq!(rows.len(), 400);
    for r in &rows {
        let path = data.join("objects").join(&r.row.key);
        let meta = std::fs::metadata(&path).unwrap();
        assert_eq!(meta.len(), r.row.size, "{}", r.row.key);
        let mtime_ms = meta.mtime() * 1000 + meta.mtime_nsec() / 1_000_000;
        assert!(
            mtime_ms <= r.row.recorded_at,
            "{} was modified after its manifest row",
            r.row.key
        );
    }
    let paths: Vec<PathBuf> = snap.keys().cloned().collect();
    validate_cogs(&paths).unwrap();

    // Another round of duplicates that all encode: every Create is refused, nothing changes.
    tg_json(data, &["plan", scene.to_str().unwrap(), "--all-windows"]);
    let w = tg_json(data, &["work", "--until-empty", "--no-skip-existing"]);
    assert_eq!(w["already_present"], 400);
    assert_eq!(w["written"], 0);
    assert_eq!(snapshot(&dir), snap, "a refused Create changed a tile");
}

/// A job whose manifest is sharded: rows land in every shard, `status` and `assemble` count
/// across them, and a re-plan without the flag keeps the job's shard count.
#[test]
fn sharded_manifest_counts_and_assembles_across_shards() {
    let tmp = tempdir();
    let data = tmp.path();
    let scene = data.join("scene.tif");
    sample(data, &scene, 2048, 3);
    let src = scene.to_str().unwrap();
    let run = tg_json(
        data,
        &["run", src, "--window", "256", "--manifest-shards", "8"],
    );
    assert_eq!(run["complete"], true, "{run}");
    assert_eq!(run["manifest_rows"], 64);
    assert_eq!(run["scene"]["outcome"], "written", "{run}");
    let job = JobId::parse(run["job_id"].as_str().unwrap()).unwrap();
    let db = SqliteBackend::open(data.join("tilegate.db")).unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    assert_eq!(
        rt.block_on(db.get_job(&job))
            .unwrap()
            .unwrap()
            .row
            .manifest_shards,
        8
    );
    let parts = rt.block_on(db.count_partitions(&job)).unwrap();
    assert_eq!(parts.len(), 8);
    assert!(
        parts
            .iter()
            .all(|(pk, n)| pk.starts_with(job.as_str()) && *n > 0),
        "{parts:?}"
    );
    assert_eq!(parts.iter().map(|(_, n)| n).sum::<u64>(), 64);
    let again = tg_json(data, &["plan", src, "--window", "256"]);
    assert_eq!(again["job_id"], job.as_str());
    assert_eq!(rt.block_on(db.count_partitions(&job)).unwrap(), parts);
    let status = tg_json(data, &["status", job.as_str()]);
    assert_eq!(status["manifest_rows"], 64);
    assert_eq!(status["missing_windows"], 0);
}

#[test]
fn worker_killed_between_put_and_manifest_is_completed_by_the_next() {
    let tmp = tempdir();
    let data = tmp.path();
    let scene = data.join("scene.tif");
    sample(data, &scene, 1024, 3);
    let p = tg_json(data, &["plan", scene.to_str().unwrap()]);
    assert_eq!(p["windows"], 4);
    let job = p["job_id"].as_str().unwrap().to_owned();

    let killed = work_until_fault(data, "after-commit", 0);
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(
        killed.status.signal(),
        Some(libc::SIGKILL),
        "the fault did not fire"
    );
    let dir = tiles_dir(data, &job);
    assert_eq!(
        snapshot(&dir).len(),
        1,
        "exactly one tile should be in place"
    );
    let status = tg_json(data, &["status", &job]);
    assert_eq!(status["manifest_rows"], 0);

    let w = tg_json(data, &["work", "--until-empty"]);
    assert_eq!(w["dead_lettered"], 0);
    let status = tg_json(data, &["status", &job]);
    assert_eq!(status["manifest_rows"], 4);
    assert_eq!(snapshot(&dir).len(), 4);

    let db = SqliteBackend::open(data.join("tilegate.db")).unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let rows = rt
        .block_on(db.list_entries(&JobId::parse(&job).unwrap()))
        .unwrap();
    let from_present = rows
        .iter()
        .filter(|r| r.row.origin == TileOrigin::AlreadyPresent)
        .count();
    assert_eq!(
        from_present, 1,
        "the orphaned tile's row comes from the already-present path"
    );
}

#[test]
fn bad_input_is_dead_lettered_with_a_named_reason_and_overwrites_nothing() {
    let tmp = tempdir();
    let data = tmp.path();
    let scene = data.join("scene.tif");
    sample(data, &scene, 1024, 3);
    let run = tg_json(data, &["run", scene.to_str().unwrap()]);
    assert_eq!(run["tiles_written"], 4);
    let job = run["job_id"].as_str().unwrap().to_owned();
    let dir = tiles_dir(data, &job);
    let before = snapshot(&dir);

    let db = SqliteBackend::open(data.join("tilegate.db")).unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let queue = db.queue("work", 3);
    let row = rt
        .block_on(db.get_job(&JobId::parse(&job).unwrap()))
        .unwrap()
        .unwrap()
        .row;
    let msg = |w| WindowMessage::for_job(&row, w);
    // An unknown job: consistent ID, never planned.
    let ghost = SourceInfo {
        uri: "file:///nowhere/ghost.tif".into(),
        etag: ETag::new("\"ghost\""),
        size: 1,
        stat: None,
        assets: Vec::new(),
        signed: false,
    };
    let ghost_recipe = Recipe::copy_all();
    let ghost_id = JobId::of(&ghost, &ghost_recipe, &row.prefix, &row.tenant);
    let unknown = WindowMessage::new(
        ghost_id,
        ghost,
        ghost_recipe,
        row.grid,
        row.prefix.clone(),
        tilegate_core::Window::new(0, 0),
    )
    .encode();
    let mut unsafe_key: Value =
        serde_json::from_str(&msg(tilegate_core::Window::new(0, 0)).encode()).unwrap();
    unsafe_key["prefix"] = "../../etc".into();
    // The source changes after planning: every re-sent window of the job must be refused.
    sample(data, &scene, 1024, 4);
    let mut bodies = vec!["{not json".to_owned(), unknown, unsafe_key.to_string()];
    bodies.extend(row.grid.windows().map(|w| msg(w).encode()));
    rt.block_on(queue.send_batch(&bodies)).unwrap();

    let w = tg_json(data, &["work", "--until-empty", "--no-skip-existing"]);
    assert_eq!(w["dead_lettered"], 7, "{w}");
    let dlq = tg_json(data, &["dlq", "list"]);
    let mut reasons: Vec<String> = dlq["dead_letters"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| {
            d["reason"]
                .as_str()
                .unwrap()
                .split(':')
                .next()
                .unwrap()
                .to_owned()
        })
        .collect();
    reasons.sort();
    assert_eq!(
        reasons,
        [
            "malformed-message",
            "source-changed",
            "source-changed",
            "source-changed",
            "source-changed",
            "unknown-job",
            "unsafe-key-segment"
        ]
    );
    assert_eq!(snapshot(&dir), before, "a refused message overwrote a tile");
    let status = tg_json(data, &["status", &job]);
    assert_eq!(status["counters"]["source_changed_total"], 4);
}

/// `GET path` on the worker's endpoint: (status code, body), or `None` while it is not up.
fn http_get(port: u16, path: &str) -> Option<(u16, String)> {
    let r = tilegate_tests::http::try_get(
        &format!("127.0.0.1:{port}"),
        path,
        std::time::Duration::from_secs(60),
    )?;
    Some((r.status, r.text()))
}

/// A worker pool told to stop (SIGTERM) mid-job with no grace left hands every in-flight
/// message straight back to the queue — nothing waits out its 120 s visibility — and a second
/// pool finishes the job with every tile written once. Its `/metrics` endpoint serves the
/// counters in Prometheus text while it runs, and `/healthz` answers 200.
#[test]
fn sigterm_mid_job_releases_in_flight_windows_and_a_second_pool_finishes() {
    let tmp = tempdir();
    let data = tmp.path();
    let scene = data.join("scene.tif");
    sample(data, &scene, 4096, 11);
    let p = tg_json(data, &["plan", scene.to_str().unwrap()]);
    assert_eq!(p["windows"], 64);
    let job = p["job_id"].as_str().unwrap().to_owned();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let child = Command::new(tilegate_bin())
        .arg("--data")
        .arg(data)
        .args([
            "--json",
            "work",
            "--threads",
            "1",
            "--concurrency",
            "4",
            "--visibility",
            "120",
        ])
        .args([
            "--shutdown-grace-s",
            "0",
            "--metrics-addr",
            &format!("127.0.0.1:{port}"),
        ])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let db = SqliteBackend::open(data.join("tilegate.db")).unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let id = JobId::parse(&job).unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while rt.block_on(db.count_entries(&id)).unwrap() < 3 {
        assert!(
            std::time::Instant::now() < deadline,
            "the pool made no progress"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert_eq!(http_get(port, "/healthz"), Some((200, "ok\n".to_owned())));
    let (status, metrics) = http_get(port, "/metrics").expect("scrape /metrics");
    assert_eq!(status, 200);
    for name in tilegate_core::metrics::ALL {
        assert!(
            metrics.contains(&format!("# TYPE {name} counter")),
            "{name}:\n{metrics}"
        );
    }
    let written: u64 = metrics
        .lines()
        .find_map(|l| l.strip_prefix("tiles_written_total "))
        .expect("tiles_written_total sample")
        .parse()
        .unwrap();
    assert!(written >= 1, "{metrics}");
    assert_eq!(http_get(port, "/nope").map(|r| r.0), Some(404));

    // SIGTERM while windows are in flight.
    // SAFETY: kill(2) on our own child's pid.
    assert_eq!(unsafe { libc::kill(child.id() as i32, libc::SIGTERM) }, 0);
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(
        report["released"].as_u64().unwrap() >= 1,
        "nothing was in flight: {report}"
    );
    let rows = rt.block_on(db.count_entries(&id)).unwrap();
    assert!(rows < 64, "the job finished before SIGTERM: {report}");
    let depth = rt.block_on(db.queue("work", 3).depth()).unwrap();
    assert_eq!(depth.in_flight, 0, "a message was left in flight: {report}");
    // Every message not acknowledged is back. A window abandoned after its manifest row but
    // before its ack has both a row and a visible message (the next pool absorbs it).
    let acked = report["handled"].as_u64().unwrap();
    assert_eq!(
        depth.visible,
        64 - acked,
        "an unacknowledged message is not back: {report}"
    );
    assert!(rows + depth.visible >= 64, "a window was lost: {report}");

    // A second pool finishes the job at once (no message waits out its visibility).
    let w = tg_json(data, &["work", "--until-empty"]);
    assert_eq!(w["dead_lettered"], 0);
    let status = tg_json(data, &["status", &job]);
    assert_eq!(status["manifest_rows"], 64);
    assert_eq!(status["queue"]["dead"], 0);
    // Every tile in place once; a window abandoned after its Create landed is absorbed by the
    // second pool as already present (and its count died with the abandoned handler).
    assert!(status["counters"]["tiles_written_total"].as_u64().unwrap() <= 64);
    let tiles: Vec<PathBuf> = snapshot(&tiles_dir(data, &job)).into_keys().collect();
    assert_eq!(tiles.len(), 64);
    validate_cogs(&tiles).unwrap();
}

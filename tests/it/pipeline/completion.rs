//! The pipeline runs itself: pools started with `work --assemble` publish each job's scene
//! when its last window is recorded, nobody typing `assemble` — once, however many pools race,
//! and even when the worker that recorded the last row dies before it could assemble.

use crate::per_backend::per_backend;
use std::path::Path;
use std::process::Stdio;
use tilegate_tests::{
    Target, assert_scene_matches_source, sample, tempdir, tg, tg_json, work_one_at_a_time,
};

fn status(data: &Path, job: &str) -> serde_json::Value {
    tg_json(data, &["status", job])
}

/// The published scene's file.
fn scene_path(data: &Path, st: &serde_json::Value) -> std::path::PathBuf {
    data.join("objects").join(
        st["scene_output"]["key"]
            .as_str()
            .expect("a published scene"),
    )
}

per_backend!(racing_pools_assemble_a_completed_job_once);

/// Three deliveries of every window, two pools racing with `--assemble`: the scene is
/// published once (one claim won), matches the source, and has its STAC Item.
fn racing_pools_assemble_a_completed_job_once(target: Target) {
    let tmp = tempdir();
    let data = tmp.path().join("data");
    let scene = tmp.path().join("scene.tif");
    sample(&data, &scene, 512, 11);
    let s = scene.to_str().unwrap();
    let plan = ["plan", s, "--window", "64", "--manifest-shards", "4"];
    let p = target.json(&data, &plan);
    let job = p["job_id"].as_str().unwrap().to_owned();
    assert_eq!(
        target.json(&data, &["status", &job])["lifecycle"],
        "planned"
    );
    for _ in 0..2 {
        target.json(&data, &[&plan[..], &["--all-windows"]].concat());
    }
    let pools: Vec<_> = (0..2)
        .map(|_| {
            target
                .command(&data)
                .args(["--json", "work", "--until-empty", "--assemble"])
                .args(["--threads", "1", "--concurrency", "2"])
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    for p in pools {
        let out = p.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "{}: {}",
            target.name(),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let st = target.json(&data, &["status", &job]);
    assert_eq!(st["lifecycle"], "published", "{st}");
    assert_eq!(st["counters"]["claims_won_total"], 1, "{st}");
    assert_eq!(st["counters"]["tiles_written_total"], 64, "{st}");
    assert_eq!(st["queue"]["dead"], 0, "{st}");
    // The published scene, read back through the store.
    let published = tmp.path().join("published.tif");
    let key = st["scene_output"]["key"].as_str().unwrap();
    target.copy_object(&data, key, &published);
    assert_scene_matches_source(&published, &scene);
    let stac = target.json(&data, &["stac", &job]);
    assert_eq!(stac["items"].as_array().unwrap().len(), 1, "{stac}");
    let text = String::from_utf8_lossy(
        &target
            .command(&data)
            .args(["status", &job])
            .output()
            .unwrap()
            .stdout,
    )
    .into_owned();
    assert!(text.contains("  state        published\n"), "{text}");
}

/// A worker SIGKILLed right after recording the last window's row, before it could notice the
/// job was complete: the job waits `not_assembled`, and the message's redelivery to the next
/// pool assembles it.
#[test]
fn a_worker_killed_after_the_last_row_still_gets_its_job_assembled() {
    let tmp = tempdir();
    let data = tmp.path().join("data");
    let scene = tmp.path().join("scene.tif");
    sample(&data, &scene, 128, 12);
    let p = tg_json(&data, &["plan", scene.to_str().unwrap(), "--window", "64"]);
    let job = p["job_id"].as_str().unwrap().to_owned();
    let out = work_one_at_a_time(
        &data,
        &["--assemble"],
        &[
            ("TILEGATE_FAULT", "after-manifest"),
            ("TILEGATE_FAULT_SKIP", "3"),
        ],
    );
    assert!(!out.status.success(), "the fault should have killed it");
    let st = status(&data, &job);
    assert_eq!(st["manifest_rows"], 4, "{st}");
    assert_eq!(st["lifecycle"], "not_assembled", "{st}");
    assert!(st["scene_output"].is_null(), "{st}");

    let out = work_one_at_a_time(&data, &["--assemble"], &[]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let st = status(&data, &job);
    assert_eq!(st["lifecycle"], "published", "{st}");
    assert_scene_matches_source(&scene_path(&data, &st), &scene);
}

/// The assembler that won the claim is SIGKILLed before it uploads anything, its lease still
/// live: the redelivery of its trigger finds the claim held. It must not take the holder's word
/// for it — the holder is dead — so it waits for the lease to lapse (or to be renewed, proof of
/// a live holder) and, finding it lapsed, assembles: the job is published with no other
/// command, not left `not_assembled` forever.
#[test]
fn a_claim_holder_killed_mid_assembly_does_not_take_the_trigger_with_it() {
    let tmp = tempdir();
    let data = tmp.path().join("data");
    let scene = tmp.path().join("scene.tif");
    sample(&data, &scene, 128, 15);
    let p = tg_json(&data, &["plan", scene.to_str().unwrap(), "--window", "64"]);
    let job = p["job_id"].as_str().unwrap().to_owned();
    let pool = ["--assemble", "--lease-ttl-ms", "3000"];
    let out = work_one_at_a_time(&data, &pool, &[("TILEGATE_FAULT", "after-claim")]);
    assert!(!out.status.success(), "the fault should have killed it");
    let st = status(&data, &job);
    assert_eq!(st["lifecycle"], "not_assembled", "{st}");

    // The next pool gets the trigger back while the dead holder's lease is still live.
    let out = work_one_at_a_time(&data, &pool, &[]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let st = status(&data, &job);
    assert_eq!(st["lifecycle"], "published", "{st}");
    assert_eq!(st["queue"]["dead"], 0, "{st}");
    assert_scene_matches_source(&scene_path(&data, &st), &scene);
}

/// A job whose windows are dead-lettered ends `incomplete`, named with its reasons and
/// announced once to a signed webhook; once the cause is fixed, `dlq redrive` and the running
/// pool publish it with no other command, and the published scene is announced once with its
/// STAC Item — the first delivery refused (503) and retried, a later `announce` sending nothing
/// again.
#[test]
fn an_incomplete_job_is_said_and_a_redrive_publishes_it() {
    let tmp = tempdir();
    let data = tmp.path().join("data");
    let scene = tmp.path().join("scene.tif");
    sample(&data, &scene, 128, 13);
    let hook = tilegate_tests::webhook::WebhookReceiver::start();
    let env = [
        ("TILEGATE_WEBHOOK_SECRET", "s3cret"),
        ("TILEGATE_TEST_WEBHOOK_BACKOFF_MS", "20"),
    ];
    let work = [
        "work",
        "--until-empty",
        "--assemble",
        "--announce",
        hook.url.as_str(),
    ];
    let p = tg_json(&data, &["plan", scene.to_str().unwrap(), "--window", "64"]);
    let job = p["job_id"].as_str().unwrap().to_owned();
    // The source changes under the job: every window is refused as `source-changed`.
    sample(&data, &scene, 128, 14);
    assert!(tg(&data, &work, &env).status.success());
    let st = status(&data, &job);
    assert_eq!(st["lifecycle"], "incomplete", "{st}");
    assert_eq!(st["dead_letters_by_reason"]["source-changed"], 4, "{st}");
    let text = String::from_utf8_lossy(&tg(&data, &["status", &job], &[]).stdout).into_owned();
    assert!(text.contains("  state        incomplete\n"), "{text}");
    // Four dead letters, one announcement: the job's first generation.
    let got = hook.received();
    assert_eq!(got.len(), 1, "{got:?}");
    let incomplete = got[0].json();
    assert_eq!(incomplete["type"], "tilegate.job.incomplete");
    assert_eq!(incomplete["idempotency_key"], format!("{job}:incomplete:0"));
    assert_eq!(incomplete["reason"], "source-changed");
    assert_eq!(
        st["announcements"][0]["delivered"][0], "webhook:127.0.0.1/hook",
        "{st}"
    );

    // The fix: the source as it was planned (the same bytes again).
    sample(&data, &scene, 128, 13);
    tg_json(&data, &["dlq", "redrive", "--job", &job]);
    hook.fail_next(1);
    assert!(tg(&data, &work, &env).status.success());
    let st = status(&data, &job);
    assert_eq!(st["lifecycle"], "published", "{st}");
    assert_scene_matches_source(&scene_path(&data, &st), &scene);

    let got = hook.received();
    assert_eq!(
        got.len(),
        3,
        "the incomplete one, a refused and a retried published one"
    );
    let (refused, published) = (&got[1], &got[2]);
    assert_eq!(
        refused.body, published.body,
        "a retry sends the same message"
    );
    let body = published.json();
    let etag = st["scene_output"]["e_tag"]
        .as_str()
        .unwrap()
        .trim_matches('"');
    assert_eq!(body["type"], "tilegate.job.published");
    assert_eq!(body["idempotency_key"], format!("{job}:published:{etag}"));
    assert_eq!(
        published.header("idempotency-key"),
        body["idempotency_key"].as_str()
    );
    assert_eq!(body["item"]["id"], job.as_str());
    let item = tmp.path().join("announced-item.json");
    std::fs::write(&item, serde_json::to_vec(&body["item"]).unwrap()).unwrap();
    tilegate_tests::validate_stac(&item).unwrap();
    // The signature: HMAC-SHA256 of "t.body" under the secret.
    let sig = published.header("x-tilegate-signature").unwrap();
    let t: u64 = sig
        .strip_prefix("t=")
        .and_then(|s| s.split(',').next())
        .unwrap()
        .parse()
        .unwrap();
    assert_eq!(
        sig,
        tilegate_webhook::signature(b"s3cret", t, &published.body)
    );

    // Nothing is pending: another delivery sends nothing.
    let again = tg_json(&data, &["announce", &job, "--announce", hook.url.as_str()]);
    assert_eq!(again["delivered"], 0, "{again}");
    assert_eq!(again["pending"], 0, "{again}");
    assert_eq!(hook.received().len(), 3);
}

/// A sink that refuses every delivery leaves the published scene's announcement pending on the
/// job row — nothing lost — and `tilegate announce` delivers it once the sink is back.
#[test]
fn a_refused_announcement_stays_pending_until_announce_delivers_it() {
    let tmp = tempdir();
    let data = tmp.path().join("data");
    let scene = tmp.path().join("scene.tif");
    sample(&data, &scene, 128, 15);
    let hook = tilegate_tests::webhook::WebhookReceiver::start();
    hook.set_failing(true);
    let p = tg_json(&data, &["plan", scene.to_str().unwrap(), "--window", "64"]);
    let job = p["job_id"].as_str().unwrap().to_owned();
    let env = [
        ("TILEGATE_ANNOUNCE", hook.url.as_str()),
        ("TILEGATE_TEST_WEBHOOK_BACKOFF_MS", "20"),
    ];
    assert!(
        tg(&data, &["work", "--until-empty", "--assemble"], &env)
            .status
            .success()
    );
    let st = status(&data, &job);
    assert_eq!(st["lifecycle"], "published", "{st}");
    assert_eq!(st["announcements"][0]["outcome"], "published", "{st}");
    assert!(st["announcements"][0]["delivered"].is_null(), "{st}");
    let refused = hook.received().len();
    assert!(refused >= 6, "retried: {refused}");
    let text = String::from_utf8_lossy(&tg(&data, &["status", &job], &[]).stdout).into_owned();
    assert!(text.contains("pending: no sink has taken it yet"), "{text}");

    hook.set_failing(false);
    let d = tg_json(&data, &["announce", "--announce", hook.url.as_str()]);
    assert_eq!(d["delivered"], 1, "{d}");
    assert_eq!(d["pending"], 0, "{d}");
    let st = status(&data, &job);
    assert_eq!(
        st["announcements"][0]["delivered"][0], "webhook:127.0.0.1/hook",
        "{st}"
    );
    let keys: std::collections::BTreeSet<String> = hook
        .received()
        .iter()
        .map(|d| d.json()["idempotency_key"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(
        keys.len(),
        1,
        "one announcement, however often sent: {keys:?}"
    );
}

/// `dlq redrive` (all) reads the dead-letter queue once, and that one scan is both what starts
/// the new generations and what goes back. With more letters than one redrive reads (100,000
/// of one job's, then the newest, the only one of another job's), no letter goes back without
/// its job's generation: the scan's letters go back with the first job's generation, the one
/// beyond it stays dead-lettered (and the redrive says so) until the next redrive, which starts
/// the second job's.
#[test]
fn a_redrive_sends_no_letter_back_without_its_jobs_generation() {
    use std::time::Duration;
    use tilegate_core::queue::{ReceiveOptions, WorkQueue};
    use tilegate_core::table::JobTable;
    use tilegate_embedded::{QUEUE_NAME, SqliteBackend};
    const SCAN: usize = 100_000;
    // Making 100,001 dead letters through the queue takes 10,001 receives, a transaction each:
    // in memory (tmpfs) where there is one, their syncs cost nothing.
    let shm = Path::new("/dev/shm");
    let tmp = if shm.is_dir() {
        tempfile::tempdir_in(shm).unwrap()
    } else {
        tempdir()
    };
    let data = tmp.path().join("data");
    let started = std::time::Instant::now();
    let jobs: Vec<String> = [21, 22]
        .iter()
        .map(|seed| {
            let scene = tmp.path().join(format!("scene-{seed}.tif"));
            sample(&data, &scene, 128, *seed);
            let p = tg_json(&data, &["plan", scene.to_str().unwrap(), "--window", "64"]);
            p["job_id"].as_str().unwrap().to_owned()
        })
        .collect();
    let db = SqliteBackend::open(data.join("tilegate.db")).unwrap();
    // A message received once goes to the dead-letter queue on its next receive.
    let q = db.queue(QUEUE_NAME, 1);
    let rt = tokio::runtime::Runtime::new().unwrap();
    let receive = |visibility: Duration| {
        rt.block_on(q.receive(ReceiveOptions {
            max: 10,
            wait: Duration::ZERO,
            visibility,
        }))
        .unwrap()
    };
    // The planned windows, taken off the queue: a body of each job's.
    let mut body = std::collections::BTreeMap::new();
    loop {
        let got = receive(Duration::from_secs(600));
        if got.is_empty() {
            break;
        }
        for m in got {
            let job = tilegate_report::status::dead_letter_job(&m.body).unwrap();
            body.insert(job.to_string(), m.body.clone());
            rt.block_on(q.ack(&m.receipt)).unwrap();
        }
    }
    let (first, second) = (&jobs[0], &jobs[1]);
    let mut bodies = vec![body[first].clone(); SCAN];
    bodies.push(body[second].clone());
    // A few hundred at a time: a receive sorts the visible messages, so a short queue keeps
    // it quick.
    for chunk in bodies.chunks(500) {
        rt.block_on(q.send_batch(chunk)).unwrap();
        loop {
            if receive(Duration::from_millis(1)).is_empty() {
                let d = rt.block_on(q.depth()).unwrap();
                if d.visible + d.in_flight == 0 {
                    break;
                }
                std::thread::sleep(Duration::from_millis(2));
            }
        }
    }
    assert_eq!(rt.block_on(q.depth()).unwrap().dead, SCAN as u64 + 1);
    println!("{} dead letters made in {:?}", SCAN + 1, started.elapsed());
    let redrives = |job: &str| {
        let id = tilegate_core::JobId::parse(job).unwrap();
        rt.block_on(db.get_job(&id)).unwrap().unwrap().row.redrives
    };
    // No letter goes back without its job's generation.
    let check = |round: &str| {
        let d = rt.block_on(q.depth()).unwrap();
        let dead = rt.block_on(q.list_dead_letters(SCAN + 1)).unwrap();
        let second_dead = dead.iter().any(|l| l.body == body[second]);
        assert!(
            second_dead || redrives(second) == 1,
            "{round}: the second job's letter went back without a new generation \
             (redrives {}, {} letters back, {} still dead)",
            redrives(second),
            d.visible,
            d.dead
        );
        d
    };

    let out = tg(&data, &["--json", "dlq", "redrive"], &[]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let d = check("the first redrive");
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["redriven"], SCAN, "{report}");
    assert_eq!((d.visible, d.dead), (SCAN as u64, 1));
    assert_eq!((redrives(first), redrives(second)), (1, 0));
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(said.contains("run `tilegate dlq redrive` again"), "{said}");

    let out = tg(&data, &["--json", "dlq", "redrive"], &[]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let d = check("the second redrive");
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["redriven"], 1, "{report}");
    assert_eq!((d.visible, d.dead), (SCAN as u64 + 1, 0));
    assert_eq!((redrives(first), redrives(second)), (1, 1));
}

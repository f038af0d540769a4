//! Nothing waits on a lost trigger (issue 46): each edge of the unattended flow is deleted on
//! purpose, and then only the reconciler (`tilegate reconcile-jobs`) — with plain workers for
//! windows it enqueues, which assemble nothing — moves every job to its end: published and
//! announced exactly once, or incomplete and announced; and once settled, out of the index of
//! open jobs.

use crate::per_backend::per_backend;
use std::path::{Path, PathBuf};
use std::process::Output;
use tilegate_tests::webhook::WebhookReceiver;
use tilegate_tests::{Target, assert_scene_matches_source, sample, tempdir};

/// `tilegate ARGS` on `target` with `env`, the webhook's secret set.
fn tg(target: &Target, data: &Path, args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut cmd = target.command(data);
    cmd.args(args)
        .env("TILEGATE_WEBHOOK_SECRET", "s3cret")
        .env("TILEGATE_TEST_WEBHOOK_BACKOFF_MS", "20");
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().expect("run tilegate")
}

fn json(target: &Target, data: &Path, args: &[&str]) -> serde_json::Value {
    let mut all = vec!["--json"];
    all.extend_from_slice(args);
    tilegate_tests::json_of(args, &tg(target, data, &all, &[]))
}

/// A process killed at `point`: it must not have exited by itself.
fn killed_at(target: &Target, data: &Path, args: &[&str], point: &str) {
    let out = tg(target, data, args, &[("TILEGATE_FAULT", point)]);
    assert!(
        !out.status.success(),
        "{args:?} was not killed at {point}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn plan(target: &Target, data: &Path, scene: &Path, window: &str) -> String {
    json(
        target,
        data,
        &["plan", scene.to_str().unwrap(), "--window", window],
    )["job_id"]
        .as_str()
        .unwrap()
        .to_owned()
}

/// The ID `plan` gives `scene` (`plan --estimate`, which writes nothing), and whether its
/// row exists.
fn job_of(target: &Target, data: &Path, scene: &Path, window: &str) -> (String, bool) {
    let e = json(
        target,
        data,
        &[
            "plan",
            scene.to_str().unwrap(),
            "--window",
            window,
            "--estimate",
        ],
    );
    (
        e["job_id"].as_str().unwrap().to_owned(),
        e["already_planned"].as_bool().unwrap(),
    )
}

per_backend!(every_lost_edge_is_moved_on_by_the_reconciler);

fn every_lost_edge_is_moved_on_by_the_reconciler(target: Target) {
    let tmp = tempdir();
    let data = tmp.path().join("data");
    let scenes: Vec<PathBuf> = (1..=6)
        .map(|i| {
            let p = tmp.path().join(format!("scene{i}.tif"));
            sample(tmp.path(), &p, 128, 40 + i);
            p
        })
        .collect();
    let hook = WebhookReceiver::start();
    let [j1, j2, j3, j4, j5, j6] = lose_every_edge(&target, &data, &scenes, &hook);
    let announce = ["--announce", hook.url.as_str()];

    // Only the reconciler from here (and plain workers for the windows it enqueues).
    hook.set_failing(false);
    let seen_before = hook.received().len();
    let reconcile = [
        &[
            "reconcile-jobs",
            "--once",
            "--grace",
            "0",
            "--lease-ttl-ms",
            "2000",
        ][..],
        &announce,
    ]
    .concat();
    let passes = reconcile_until_settled(&target, &data, &reconcile);
    let total = |field: &str| -> u64 { passes.iter().map(|p| p[field].as_u64().unwrap()).sum() };
    assert_eq!(total("jobs_enqueued"), 1, "{passes:#?}");
    assert_eq!(total("incomplete_recorded"), 1, "{passes:#?}");
    assert!(total("assembled") >= 3, "{passes:#?}");
    assert_eq!(total("settled"), 6, "{passes:#?}");

    // Every job at its end: five published scenes equal to their sources, one incomplete.
    for (job, scene) in [
        (&j1, &scenes[0]),
        (&j2, &scenes[1]),
        (&j3, &scenes[2]),
        (&j4, &scenes[3]),
        (&j6, &scenes[5]),
    ] {
        let st = json(&target, &data, &["status", job]);
        assert_eq!(st["lifecycle"], "published", "{st}");
        assert!(st.get("stalled").is_none(), "{st}");
        let copy = tmp.path().join(format!("{job}.tif"));
        target.copy_object(&data, st["scene_output"]["key"].as_str().unwrap(), &copy);
        assert_scene_matches_source(&copy, scene);
    }
    let st5 = json(&target, &data, &["status", &j5]);
    assert_eq!(st5["lifecycle"], "incomplete", "{st5}");

    // Announced exactly once each, after the sink came back: five published, one incomplete.
    let after: Vec<serde_json::Value> = hook.received()[seen_before..]
        .iter()
        .map(tilegate_tests::webhook::Delivery::json)
        .collect();
    let mut keys: Vec<String> = after
        .iter()
        .map(|m| m["idempotency_key"].as_str().unwrap().to_owned())
        .collect();
    keys.sort();
    let n = keys.len();
    keys.dedup();
    assert_eq!(n, keys.len(), "an announcement delivered twice: {keys:?}");
    for job in [&j1, &j2, &j3, &j4, &j6] {
        let published: Vec<_> = after
            .iter()
            .filter(|m| m["job_id"] == job.as_str() && m["type"] == "tilegate.job.published")
            .collect();
        assert_eq!(published.len(), 1, "{job}: {after:#?}");
    }
    let incomplete: Vec<_> = after
        .iter()
        .filter(|m| m["job_id"] == j5.as_str())
        .collect();
    assert_eq!(incomplete.len(), 1, "{after:#?}");
    assert_eq!(incomplete[0]["type"], "tilegate.job.incomplete");
    assert_eq!(incomplete[0]["reason"], "max-receives-exceeded");
    assert_eq!(after.len(), 6, "{after:#?}");

    // Settled: another pass finds nothing open and delivers nothing again.
    let last = json(&target, &data, &reconcile);
    assert_eq!(last["open_jobs"], 0, "{last}");
    assert_eq!(hook.received().len(), seen_before + 6);
}

/// Each edge of the flow lost on purpose, one job each (numbered as the faults are); returns
/// the six jobs, `j1` … `j6`.
fn lose_every_edge(
    target: &Target,
    data: &Path,
    scenes: &[PathBuf],
    hook: &WebhookReceiver,
) -> [String; 6] {
    let announce = ["--announce", hook.url.as_str()];
    let no_reconcile = ["--reconcile-every", "0"];

    // 6. A sink down for longer than every inline retry: published, its announcement pending.
    let j6 = plan(target, data, &scenes[5], "64");
    hook.set_failing(true);
    let out = tg(
        target,
        data,
        &[
            &["work", "--until-empty", "--assemble"][..],
            &announce,
            &no_reconcile,
        ]
        .concat(),
        &[],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // 2, 3, 4: every window recorded by workers that assemble nothing.
    let j2 = plan(target, data, &scenes[1], "64");
    let j3 = plan(target, data, &scenes[2], "64");
    let j4 = plan(target, data, &scenes[3], "64");
    let out = tg(target, data, &["work", "--until-empty"], &[]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // 2. The last window's trigger: lost (nobody assembles it).
    // 3. The assembler after publishing: the scene object is there, the row does not say so,
    //    and the dead assembler's claim lapses in 2 s.
    killed_at(
        target,
        data,
        &["assemble", &j3, "--lease-ttl-ms", "2000"],
        "after-publish",
    );
    // 4. The announcement after recording: published, and no sink told.
    let out = tg(target, data, &["assemble", &j4], &[]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // 5. A window the queue's own redrive policy moves to the dead-letter queue: its handler
    //    is killed on every receive, and the receive after the third moves it.
    let j5 = plan(target, data, &scenes[4], "128");
    for _ in 0..3 {
        killed_at(
            target,
            data,
            &[
                "work",
                "--until-empty",
                "--threads",
                "1",
                "--visibility",
                "1",
            ],
            "before-encode",
        );
        std::thread::sleep(std::time::Duration::from_millis(1200));
    }
    let out = tg(target, data, &["--json", "work", "--until-empty"], &[]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // 1. The arrival after the row: the planner dies with the row written, nothing enqueued.
    killed_at(
        target,
        data,
        &["plan", scenes[0].to_str().unwrap(), "--window", "64"],
        "after-job-row",
    );
    let (j1, planned) = job_of(target, data, &scenes[0], "64");
    assert!(planned, "the killed planner wrote no row");
    let before = json(target, data, &["status", &j1]);
    assert_eq!(before["lifecycle"], "planned", "{before}");

    [j1, j2, j3, j4, j5, j6]
}

/// Reconciler passes (and plain workers for the windows a pass enqueues) until no job is open,
/// at most 30; every pass's document.
fn reconcile_until_settled(
    target: &Target,
    data: &Path,
    reconcile: &[&str],
) -> Vec<serde_json::Value> {
    let mut passes = Vec::new();
    for round in 0..30 {
        let pass = json(target, data, reconcile);
        passes.push(pass.clone());
        if pass["windows_enqueued"].as_u64().unwrap_or(0) > 0 {
            let out = tg(target, data, &["work", "--until-empty"], &[]);
            assert!(
                out.status.success(),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        if pass["open_jobs"] == 0 {
            break;
        }
        assert!(round < 29, "jobs still open after 30 passes: {passes:#?}");
        std::thread::sleep(std::time::Duration::from_millis(700));
    }
    passes
}

/// Fault 2: `assemble --all` announces what it publishes (a job too large for the Lambda
/// function is published by the CronJob; its announcement no longer waits in the outbox).
#[test]
fn assemble_all_announces_what_it_publishes() {
    let target = Target::Embedded;
    let tmp = tempdir();
    let data = tmp.path().join("data");
    let scene = tmp.path().join("scene.tif");
    sample(tmp.path(), &scene, 128, 7);
    let job = plan(&target, &data, &scene, "64");
    let out = tg(&target, &data, &["work", "--until-empty"], &[]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let hook = WebhookReceiver::start();
    let all = json(
        &target,
        &data,
        &["assemble", "--all", "--announce", hook.url.as_str()],
    );
    assert_eq!(all["failed"], 0, "{all}");
    let got = hook.received();
    assert_eq!(got.len(), 1, "{got:?}");
    assert_eq!(got[0].json()["type"], "tilegate.job.published");
    assert_eq!(got[0].json()["job_id"], job.as_str());
    let st = json(&target, &data, &["status", &job]);
    assert_eq!(
        st["announcements"][0]["delivered"][0], "webhook:127.0.0.1/hook",
        "{st}"
    );
}

per_backend!(an_arrival_dead_lettered_after_its_row_strands_no_job);

/// Fault 1: an arrival that leaves the arrivals queue after its job row was written (its
/// ingest killed then, the arrival sent to the arrivals' dead-letter queue — as three crashes
/// against `maxReceiveCount 3` would) leaves a job `planned` with nothing enqueued; the
/// reconciler enqueues its windows, and once workers have done them, assembles and settles it.
fn an_arrival_dead_lettered_after_its_row_strands_no_job(target: Target) {
    use tilegate_core::queue::ReceiveOptions;
    let tmp = tempdir();
    let data = tmp.path().join("data");
    std::fs::create_dir_all(&data).unwrap();
    let www = tmp.path().join("www");
    std::fs::create_dir_all(&www).unwrap();
    sample(tmp.path(), &www.join("B04.tif"), 128, 61);
    let http = tilegate_tests::HttpServer::start(&www);
    // A message's item reaches listed hosts only.
    let policy = tmp.path().join("arrivals-policy.toml");
    std::fs::write(
        &policy,
        "hosts = [\"127.0.0.1\"]\nallow_addresses = [\"127.0.0.0/8\"]\n",
    )
    .unwrap();
    let policy = policy.to_str().unwrap().to_owned();
    let env = [("TILEGATE_SOURCE_POLICY", policy.as_str())];
    let arrivals = match &target {
        Target::Aws(aws) => {
            let a = format!("{}-arrivals", aws.queue);
            json(&target, &data, &["init", "--arrivals", &a]);
            Some(a)
        }
        _ => None,
    };
    let rt = tokio::runtime::Runtime::new().unwrap();
    let queue = rt
        .block_on(tilegate_backends::open_arrivals(
            &tilegate_backends::Urls {
                data: data.clone(),
                objects: None,
                tables: None,
                queue: None,
            },
            arrivals.as_deref(),
        ))
        .unwrap();
    let item = serde_json::json!({
        "type": "Feature", "stac_version": "1.0.0", "id": "scene-a", "collection": "c",
        "geometry": null, "properties": {"datetime": "2026-12-07T00:00:00Z"}, "links": [],
        "assets": {"B04": {"href": http.url("B04.tif")}}
    });
    rt.block_on(queue.send_batch(&[item.to_string()])).unwrap();
    let mut ingest = vec![
        "ingest",
        "--until-idle",
        "--assets",
        "B04",
        "--window",
        "64",
    ];
    if let Some(a) = &arrivals {
        ingest.extend(["--arrivals", a.as_str()]);
    }
    let out = tg(
        &target,
        &data,
        &ingest,
        &[env[0], ("TILEGATE_FAULT", "after-job-row")],
    );
    assert!(!out.status.success(), "ingest was not killed after the row");
    // The arrival comes back after its visibility (30 s), and goes to the dead-letter queue.
    std::thread::sleep(std::time::Duration::from_secs(31));
    let mut moved = false;
    for _ in 0..20 {
        let got = rt
            .block_on(queue.receive(ReceiveOptions {
                max: 1,
                wait: std::time::Duration::from_secs(1),
                visibility: std::time::Duration::from_secs(60),
            }))
            .unwrap();
        if let Some(m) = got.first() {
            rt.block_on(queue.dead_letter(m, "max-receives-exceeded: lost after its row"))
                .unwrap();
            moved = true;
            break;
        }
    }
    assert!(moved, "the arrival never came back");
    assert_eq!(rt.block_on(queue.list_dead_letters(10)).unwrap().len(), 1);
    // Left alone, the job would stay planned for good: nothing is enqueued.
    let st = json(&target, &data, &["status"]);
    let job = st["job_id"].as_str().unwrap().to_owned();
    assert_eq!(st["lifecycle"], "planned", "{st}");
    assert_eq!(st["manifest_rows"], 0, "{st}");
    let reconcile = ["--json", "reconcile-jobs", "--once", "--grace", "0"];
    let pass: serde_json::Value =
        serde_json::from_slice(&tg(&target, &data, &reconcile, &env).stdout).unwrap();
    assert_eq!(pass["jobs_enqueued"], 1, "{pass}");
    assert_eq!(pass["windows_enqueued"], 4, "{pass}");
    let out = tg(&target, &data, &["work", "--until-empty"], &env);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let pass: serde_json::Value =
        serde_json::from_slice(&tg(&target, &data, &reconcile, &env).stdout).unwrap();
    assert_eq!(pass["assembled"], 1, "{pass}");
    assert_eq!(pass["settled"], 1, "{pass}");
    let st = json(&target, &data, &["status", &job]);
    assert_eq!(st["lifecycle"], "published", "{st}");
    let copy = tmp.path().join("scene.tif");
    target.copy_object(&data, st["scene_output"]["key"].as_str().unwrap(), &copy);
    let got = tilegate_cog::read_raster(copy.to_str().unwrap(), None, None).unwrap();
    let want =
        tilegate_cog::read_raster(www.join("B04.tif").to_str().unwrap(), None, None).unwrap();
    assert!(
        got.bytes == want.bytes,
        "the scene's pixels are not its source's"
    );
}

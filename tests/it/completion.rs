//! The pipeline runs itself: pools started with `work --assemble` publish each job's scene
//! when its last window is recorded, nobody typing `assemble` — once, however many pools race,
//! and even when the worker that recorded the last row dies before it could assemble.

use crate::per_backend::per_backend;
use std::path::Path;
use std::process::Stdio;
use tilegate_core::object::ObjectStoreExt as _;
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
    let rt = tokio::runtime::Runtime::new().unwrap();
    let b = rt.block_on(target.backends(&data));
    let key = st["scene_output"]["key"].as_str().unwrap();
    let bytes = rt
        .block_on(b.objects.get_bytes(&tilegate_tests::object_key(key)))
        .unwrap()
        .bytes;
    let published = tmp.path().join("published.tif");
    std::fs::write(&published, &bytes).unwrap();
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
/// job was complete: the job waits `assembling`, and the message's redelivery to the next
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
    assert_eq!(st["lifecycle"], "assembling", "{st}");
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

/// A job whose windows are dead-lettered ends `incomplete`, named with its reasons; once the
/// cause is fixed, `dlq redrive` and the running pool publish it with no other command.
#[test]
fn an_incomplete_job_is_said_and_a_redrive_publishes_it() {
    let tmp = tempdir();
    let data = tmp.path().join("data");
    let scene = tmp.path().join("scene.tif");
    sample(&data, &scene, 128, 13);
    let p = tg_json(&data, &["plan", scene.to_str().unwrap(), "--window", "64"]);
    let job = p["job_id"].as_str().unwrap().to_owned();
    // The source changes under the job: every window is refused as `source-changed`.
    sample(&data, &scene, 128, 14);
    assert!(
        tg(&data, &["work", "--until-empty", "--assemble"], &[])
            .status
            .success()
    );
    let st = status(&data, &job);
    assert_eq!(st["lifecycle"], "incomplete", "{st}");
    assert_eq!(st["dead_letters_by_reason"]["source-changed"], 4, "{st}");
    let text = String::from_utf8_lossy(&tg(&data, &["status", &job], &[]).stdout).into_owned();
    assert!(text.contains("  state        incomplete\n"), "{text}");

    // The fix: the source as it was planned (the same bytes again).
    sample(&data, &scene, 128, 13);
    tg_json(&data, &["dlq", "redrive", "--job", &job]);
    assert!(
        tg(&data, &["work", "--until-empty", "--assemble"], &[])
            .status
            .success()
    );
    let st = status(&data, &job);
    assert_eq!(st["lifecycle"], "published", "{st}");
    assert_scene_matches_source(&scene_path(&data, &st), &scene);
}

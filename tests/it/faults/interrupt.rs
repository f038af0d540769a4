//! Interrupted and concurrent runs. Ctrl-C while a scene is being assembled: the assembler
//! releases its claim, aborts its upload and exits non-zero as `interrupted`, so the next
//! `assemble` publishes at once (before, the process died holding the claim, and for a lease's
//! length every `assemble` said another assembler held it, uploaded nothing and exited 0).
//! Ctrl-C during `run`, then the same `run`: each window is encoded once (before, the resume
//! sent every window left waiting a second time, and both copies were encoded). Two `run`s of
//! one job side by side: each window encoded once, both end with the same published scene
//! (before, most windows were encoded twice and the second run ended without a scene).

use serde_json::Value;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;
use tilegate_tests::{sample, tempdir, tg, tg_json, tilegate_bin};

#[test]
fn an_interrupted_assembly_releases_its_claim() {
    let tmp = tempdir();
    let data = tmp.path();
    let src = data.join("scene.tif");
    sample(data, &src, 2048, 7);
    let run = tg_json(data, &["run", src.to_str().unwrap(), "--no-assemble"]);
    let job = run["job_id"].as_str().unwrap().to_owned();
    // A multipart upload that waits 4 s after each part: the SIGINT lands while the scene is
    // being built or uploaded, long before it could be completed.
    let child = Command::new(tilegate_bin())
        .arg("--data")
        .arg(data)
        .args([
            "--json",
            "assemble",
            &job,
            "--multipart-threshold",
            "1048576",
            "--part-size",
            "5242880",
            "--lease-ttl-ms",
            "60000",
            "--test-part-delay-ms",
            "4000",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start the assembler");
    std::thread::sleep(Duration::from_millis(2500));
    // SAFETY: a plain kill(2) of our own child.
    let sent = unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGINT) };
    assert_eq!(sent, 0, "SIGINT not sent");
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success(),
        "an interrupted assembly exited 0: {stderr}"
    );
    assert!(stderr.contains("error[interrupted]"), "{stderr}");

    // The claim is free: the next assembler publishes now, not after the 60 s lease.
    let again = tg_json(data, &["assemble", &job]);
    assert_eq!(again["outcome"], "written", "{again}");
    let status = tg_json(data, &["status", &job]);
    assert_eq!(status["lifecycle"], "published", "{status}");
    // Nothing of the interrupted upload is left behind.
    let cleanup: Value = tg_json(data, &["cleanup-uploads", "--older-than-s", "0"]);
    assert_eq!(cleanup["aborted"], 0, "{cleanup}");
}

/// Start `tilegate --json ARGS` on `data` with `env`, its output piped.
fn spawn(data: &Path, args: &[&str], env: &[(&str, &str)]) -> Child {
    Command::new(tilegate_bin())
        .arg("--data")
        .arg(data)
        .arg("--json")
        .args(args)
        .envs(env.iter().copied())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start tilegate")
}

/// The job's counters, as `status --json` shows them.
fn counter(status: &Value, name: &str) -> u64 {
    status["counters"][name].as_u64().unwrap_or(0)
}

/// Every window encoded once over all the runs of the job: as many tiles written as windows,
/// and no encode the store had to refuse as a second copy.
fn assert_each_window_encoded_once(status: &Value, windows: u64) {
    assert_eq!(status["lifecycle"], "published", "{status}");
    assert_eq!(
        counter(status, "tiles_written_total"),
        windows,
        "{}",
        status["counters"]
    );
    assert_eq!(
        counter(status, "conditional_write_precondition_failed_total"),
        0,
        "windows encoded twice (the store refused the second copy): {}",
        status["counters"]
    );
}

#[test]
fn an_interrupted_run_resumes_without_encoding_a_window_twice() {
    let tmp = tempdir();
    let data = tmp.path();
    let src = data.join("scene.tif");
    sample(data, &src, 2048, 8);
    let args = [
        "run",
        src.to_str().unwrap(),
        "--window",
        "128",
        "--concurrency",
        "2",
    ];
    // Slow windows (150 ms each, 256 of them): the interrupt lands with most still waiting.
    let child = spawn(data, &args, &[("TILEGATE_SLOW_WINDOW_MS", "150")]);
    let mut recorded = 0;
    for _ in 0..200 {
        std::thread::sleep(Duration::from_millis(100));
        let out = tg(data, &["--json", "status"], &[]);
        if let Ok(st) = serde_json::from_slice::<Value>(&out.stdout) {
            recorded = st["counts"]["recorded"].as_u64().unwrap_or(0);
            if recorded >= 8 {
                break;
            }
        }
    }
    assert!(recorded >= 8, "the first run recorded no windows");
    // SAFETY: a plain kill(2) of our own child.
    assert_eq!(
        unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGINT) },
        0
    );
    let first = child.wait_with_output().unwrap();
    assert!(
        !first.status.success(),
        "an interrupted run exited 0: {}",
        String::from_utf8_lossy(&first.stderr)
    );
    let before = tg_json(data, &["status"]);
    let done_before = before["counts"]["recorded"].as_u64().unwrap();
    assert!(done_before < 256, "the run was not interrupted: {before}");

    // The same run again: it resumes the job and sends no window whose message is waiting.
    let again = tg_json(data, &args);
    assert_eq!(again["complete"], true, "{again}");
    assert_eq!(
        again["tiles_written"].as_u64().unwrap(),
        256 - done_before,
        "{again}"
    );
    let status = tg_json(data, &["status"]);
    assert_each_window_encoded_once(&status, 256);
    // Nothing is left on the queue for a later pool to encode again.
    let depth = &status["queue"];
    assert_eq!(depth["visible"], 0, "{status}");
    assert_eq!(depth["in_flight"], 0, "{status}");
}

#[test]
fn two_runs_of_one_job_encode_each_window_once_and_publish_one_scene() {
    let tmp = tempdir();
    let data = tmp.path();
    let src = data.join("scene.tif");
    sample(data, &src, 2048, 9);
    let args = [
        "run",
        src.to_str().unwrap(),
        "--window",
        "128",
        "--concurrency",
        "2",
    ];
    let slow = [("TILEGATE_SLOW_WINDOW_MS", "30")];
    let runs = [spawn(data, &args, &slow), spawn(data, &args, &slow)];
    let docs: Vec<Value> = runs
        .into_iter()
        .map(|c| {
            let out = c.wait_with_output().unwrap();
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert!(out.status.success(), "a run failed: {stderr}");
            assert!(!stderr.contains("database is locked"), "{stderr}");
            serde_json::from_slice(&out.stdout).unwrap()
        })
        .collect();
    // Both runs end with the job complete and the same published scene: one wrote it, the
    // other waited for it rather than ending without one.
    let scenes: Vec<&Value> = docs.iter().map(|d| &d["scene"]).collect();
    assert!(docs.iter().all(|d| d["complete"] == true), "{docs:#?}");
    assert_eq!(
        scenes.iter().filter(|s| s["outcome"] == "written").count(),
        1,
        "{docs:#?}"
    );
    assert_eq!(
        scenes[0]["scene_etag"], scenes[1]["scene_etag"],
        "{docs:#?}"
    );
    assert!(scenes[0]["scene_etag"].is_string(), "{docs:#?}");
    let written: u64 = docs
        .iter()
        .map(|d| d["tiles_written"].as_u64().unwrap())
        .sum();
    assert_eq!(written, 256, "{docs:#?}");
    assert_each_window_encoded_once(&tg_json(data, &["status"]), 256);
}

#[test]
fn assemble_while_another_holds_the_claim_exits_not_done() {
    let tmp = tempdir();
    let data = tmp.path();
    let src = data.join("scene.tif");
    sample(data, &src, 2048, 10);
    let run = tg_json(data, &["run", src.to_str().unwrap(), "--no-assemble"]);
    let job = run["job_id"].as_str().unwrap().to_owned();
    // One assembler holds the claim for a while (4 s per uploaded part)...
    let holder = spawn(
        data,
        &[
            "assemble",
            &job,
            "--multipart-threshold",
            "1048576",
            "--part-size",
            "5242880",
            "--test-part-delay-ms",
            "4000",
        ],
        &[],
    );
    std::thread::sleep(Duration::from_millis(1500));
    // ...and a second one, meanwhile, does nothing and says so: a status of its own, named.
    let second = tg(data, &["--json", "assemble", &job], &[]);
    let stderr = String::from_utf8_lossy(&second.stderr);
    assert_eq!(second.status.code(), Some(7), "{stderr}");
    assert!(stderr.contains("not done[claim-held]"), "{stderr}");
    let doc: Value = serde_json::from_slice(&second.stdout).unwrap();
    assert_eq!(doc["outcome"], "held_by", "{doc}");
    let holder = holder.wait_with_output().unwrap();
    assert!(
        holder.status.success(),
        "{}",
        String::from_utf8_lossy(&holder.stderr)
    );
    // Once the holder published, `assemble` is done: exit 0, already_done.
    let after = tg(data, &["--json", "assemble", &job], &[]);
    assert!(after.status.success());
    let doc: Value = serde_json::from_slice(&after.stdout).unwrap();
    assert_eq!(doc["outcome"], "already_done", "{doc}");
}

#[test]
fn ctrl_c_during_runs_assembly_releases_the_claim_and_exits_interrupted() {
    use std::io::BufRead as _;
    let tmp = tempdir();
    let data = tmp.path();
    let src = data.join("scene.tif");
    sample(data, &src, 2048, 12);
    // Text mode on a pipe: `run` says when the windows are done and the assembly starts; the
    // upload then waits 4 s after each part.
    let mut child = Command::new(tilegate_bin())
        .arg("--data")
        .arg(data)
        .args([
            "run",
            src.to_str().unwrap(),
            "--multipart-threshold",
            "1048576",
            "--part-size",
            "5242880",
            "--lease-ttl-ms",
            "60000",
            "--test-part-delay-ms",
            "4000",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start run");
    let mut err = std::io::BufReader::new(child.stderr.take().unwrap());
    let mut said = String::new();
    loop {
        let mut line = String::new();
        assert!(
            err.read_line(&mut line).unwrap() > 0,
            "run ended first: {said}"
        );
        said.push_str(&line);
        if line.contains("assembling the scene") {
            break;
        }
    }
    std::thread::sleep(Duration::from_millis(1500));
    // SAFETY: a plain kill(2) of our own child.
    assert_eq!(
        unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGINT) },
        0
    );
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut err, &mut rest).unwrap();
    let status = child.wait().unwrap();
    said.push_str(&rest);
    assert!(!status.success(), "an interrupted run exited 0: {said}");
    assert!(said.contains("error[interrupted]"), "{said}");
    // The claim was released: the next assembler publishes at once.
    let st = tg_json(data, &["status"]);
    assert_eq!(st["lifecycle"], "not_assembled", "{st}");
    let again = tg_json(data, &["assemble"]);
    assert_eq!(again["outcome"], "written", "{again}");
}

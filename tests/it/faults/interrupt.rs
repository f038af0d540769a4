//! Ctrl-C while a scene is being assembled: the assembler releases its claim, aborts its
//! upload and exits non-zero as `interrupted`, so the next `assemble` publishes at once
//! (before, the process died holding the claim, and for a lease's length every `assemble`
//! said another assembler held it and uploaded nothing).

use serde_json::Value;
use std::process::{Command, Stdio};
use std::time::Duration;
use tilegate_tests::{sample, tempdir, tg_json, tilegate_bin};

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

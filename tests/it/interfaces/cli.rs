//! The command line as a new user meets it: output piped into a reader that goes away, and
//! failures named by the one vocabulary of reasons.

use std::path::Path;
use std::process::{Command, Stdio};
use tilegate_core::Reason;
use tilegate_tests::{sample, tempdir, tg, tg_json, tilegate_bin};

/// Run `tilegate --data DATA ARGS` with its stdout a pipe whose reader has already gone (as in
/// `tilegate status | head -c1` once `head` has its byte), and return (exit code, signal,
/// stderr).
fn into_a_closed_pipe(data: &Path, args: &[&str]) -> (Option<i32>, Option<i32>, String) {
    use std::os::unix::process::ExitStatusExt as _;
    let mut child = Command::new(tilegate_bin())
        .arg("--data")
        .arg(data)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run tilegate");
    drop(child.stdout.take());
    let out = child.wait_with_output().expect("wait for tilegate");
    // What a long command says of itself as it goes (`work` starting, `run` on a pipe saying
    // how far it is) is not noise from the closed pipe.
    let said = String::from_utf8_lossy(&out.stderr)
        .lines()
        .filter(|l| {
            !(l.starts_with("tilegate: working the ")
                || l.starts_with("tilegate: every window recorded")
                || (l.starts_with("tilegate: job ") && l.contains(" windows recorded")))
        })
        .map(|l| format!("{l}\n"))
        .collect();
    (out.status.code(), out.status.signal(), said)
}

/// Every command that prints ends quietly when its reader goes away: no panic (exit 101), no
/// message on stderr — it ends as `head`'s writers do, by SIGPIPE, or having printed nothing.
#[test]
fn every_printing_command_ends_quietly_on_a_closed_pipe() {
    let tmp = tempdir();
    let dir = tmp.path();
    let data = dir.join("data");
    let scene = dir.join("scene.tif");
    sample(&data, &scene, 256, 7);
    let scene = scene.to_str().unwrap();
    let run = tg_json(&data, &["run", scene, "--window", "128"]);
    let job = run["job_id"].as_str().unwrap().to_owned();
    let report = dir.join("report.html");
    let report = report.to_str().unwrap();
    let other = dir.join("other.tif");
    let other = other.to_str().unwrap();
    let regen = tg_json(&data, &["regenerate", &job, "--window", "0_1"]);
    let attempt = regen["attempt"].as_str().unwrap().to_owned();
    let list = dir.join("sources.txt");
    std::fs::write(&list, format!("{scene}\n")).unwrap();
    let list = list.to_str().unwrap();
    let commands: Vec<Vec<&str>> = vec![
        vec!["sample-scene", other, "--size", "64"],
        vec!["init"],
        vec!["plan", scene, "--window", "128"],
        vec!["work", "--until-empty"],
        vec!["run", scene, "--window", "128"],
        vec!["assemble", &job],
        vec!["repair", &job, "--window", "0_0"],
        vec!["backfill", &job],
        vec!["cleanup-uploads"],
        vec!["status"],
        vec!["status", &job],
        vec!["report", &job, "--out", report],
        vec!["stac", &job],
        vec!["dlq", "list"],
        vec!["dlq", "redrive"],
        vec!["attempts", &job],
        vec!["gc"],
        vec!["reconcile", &job],
        vec!["assemble", "--all"],
        vec!["recipes"],
        vec!["dlq", "list", "--job", &job],
        vec!["regenerate", &job, "--window", "0_1"],
        vec!["regenerate", &job, "--window", "1_0", "--enqueue"],
        vec!["accept", &job, "--window", "0_1", "--attempt", &attempt],
        vec!["hold", &job, "--window", "0_1", "--attempt", &attempt],
        vec!["url", &job, "--window", "0_1"],
        vec!["plan", "--from", list],
        vec!["run", "--from", list],
        vec!["status", &job, "--watch"],
        vec!["schema"],
        vec!["schema", "status"],
        vec!["demo", "--size", "256"],
        vec!["--help"],
        vec!["status", "--help"],
    ];
    for args in &commands {
        for json in [false, true] {
            let mut a = Vec::new();
            if json {
                a.push("--json");
            }
            a.extend_from_slice(args);
            let (code, signal, stderr) = into_a_closed_pipe(&data, &a);
            assert_ne!(code, Some(101), "tilegate {a:?} panicked: {stderr}");
            assert!(
                stderr.is_empty(),
                "tilegate {a:?} (exit {code:?}, signal {signal:?}) wrote to stderr: {stderr}"
            );
            assert!(
                code == Some(0) || signal == Some(libc::SIGPIPE),
                "tilegate {a:?} ended with exit {code:?}, signal {signal:?}: {stderr}"
            );
        }
    }
}

/// The failures a new user meets first are named, never `error[error]` or `unexpected`.
#[test]
fn a_new_users_first_failures_have_names() {
    let tmp = tempdir();
    let data = tmp.path().join("data");
    let reason_of = |args: &[&str]| -> String {
        let mut a = vec!["--json"];
        a.extend_from_slice(args);
        let out = tg(&data, &a, &[]);
        assert_eq!(out.status.code(), Some(1), "tilegate {args:?}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        let doc: serde_json::Value = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("tilegate {args:?}: no JSON ({e}): {stderr}"));
        let reason = doc["error"]["reason"].as_str().unwrap().to_owned();
        assert!(
            stderr.starts_with(&format!("tilegate: error[{reason}]: ")),
            "{stderr}"
        );
        assert!(Reason::parse(&reason).is_some(), "{reason} is no Reason");
        reason
    };
    assert_eq!(reason_of(&["status"]), Reason::NoJob.as_str());
    assert_eq!(reason_of(&["assemble"]), Reason::NoJob.as_str());
    let scene = tmp.path().join("scene.tif");
    sample(&data, &scene, 128, 1);
    tg_json(&data, &["plan", scene.to_str().unwrap(), "--window", "64"]);
    assert_eq!(reason_of(&["status", "zzzz"]), Reason::UnknownJob.as_str());
    // Planned, not worked: the manifest is short, and assemble says so by name.
    let out = tg(&data, &["assemble"], &[]);
    assert_eq!(out.status.code(), Some(4));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.starts_with("tilegate: error[incomplete]: ")
            && stderr.contains("work --until-empty"),
        "{stderr}"
    );
    assert_eq!(
        reason_of(&["--objects", "ftp://host/x", "status"]),
        Reason::BadOption.as_str()
    );
}

/// A window larger than the scene is fitted to it (one window, as asked); one larger than
/// the largest block is refused when planning, not dead-lettered per delivery.
#[test]
fn window_sizes_are_checked_when_planning() {
    let tmp = tempdir();
    let data = tmp.path().join("data");
    let scene = tmp.path().join("scene.tif");
    sample(&data, &scene, 200, 3);
    let scene = scene.to_str().unwrap();
    let run = tg_json(&data, &["run", scene, "--window", "4096"]);
    assert_eq!(run["tiles_written"], 1, "{run}");
    assert_eq!(run["scene"]["outcome"], "written", "{run}");
    let job = tg_json(&data, &["status", run["job_id"].as_str().unwrap()]);
    assert_eq!(job["window"], 208, "{job}");
    let out = tg(&data, &["--json", "plan", scene, "--window", "100000"], &[]);
    assert_eq!(out.status.code(), Some(1));
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["error"]["reason"], Reason::BadWindow.as_str(), "{doc}");
}

/// Run `tilegate ARGS` as a user who may read `data` but not write it: as root, the command
/// runs as `nobody` (root's writes ignore permissions); otherwise the tree is made read-only.
fn as_a_reader(data: &Path, args: &[&str]) -> std::process::Output {
    let root = unsafe { libc::geteuid() } == 0;
    let mut cmd = if root {
        let mut c = Command::new("setpriv");
        c.args(["--reuid=65534", "--regid=65534", "--clear-groups"])
            .arg(tilegate_bin());
        c
    } else {
        let status = Command::new("chmod")
            .args(["-R", "a-w"])
            .arg(data)
            .status()
            .unwrap();
        assert!(status.success());
        Command::new(tilegate_bin())
    };
    cmd.arg("--data").arg(data).args(args);
    cmd.output().expect("run tilegate as a reader")
}

/// What every file of `dir` is: path, size and modification time.
fn listing(dir: &Path) -> Vec<(std::path::PathBuf, u64, std::time::SystemTime)> {
    let mut out = Vec::new();
    for entry in walkdir(dir) {
        let m = std::fs::metadata(&entry).unwrap();
        out.push((entry, m.len(), m.modified().unwrap()));
    }
    out.sort();
    out
}

fn walkdir(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            out.extend(walkdir(&p));
        }
        out.push(p);
    }
    out
}

/// A colleague's or an archived run — a data directory the reader cannot write — can be
/// looked at: `status`, `attempts`, `dlq list`, `stac` and `report` open it read-only and
/// write nothing to it. A mistyped `--data` is said, not created.
#[test]
fn a_data_directory_that_cannot_be_written_can_be_looked_at() {
    use std::os::unix::fs::PermissionsExt as _;
    let tmp = tempdir();
    std::fs::set_permissions(tmp.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let data = tmp.path().join("data");
    let scene = tmp.path().join("scene.tif");
    sample(&data, &scene, 128, 5);
    let run = tg_json(&data, &["run", scene.to_str().unwrap(), "--window", "64"]);
    let job = run["job_id"].as_str().unwrap().to_owned();
    let out_dir = tmp.path().join("out");
    std::fs::create_dir(&out_dir).unwrap();
    std::fs::set_permissions(&out_dir, std::fs::Permissions::from_mode(0o777)).unwrap();
    let report = out_dir.join("report.html");
    let before = listing(&data);
    for args in [
        vec!["--json", "status"],
        vec!["--json", "status", &job],
        vec!["status", &job],
        vec!["--json", "attempts", &job],
        vec!["--json", "dlq", "list"],
        vec!["--json", "stac", &job],
        vec!["report", &job, "--out", report.to_str().unwrap()],
    ] {
        let out = as_a_reader(&data, &args);
        assert!(
            out.status.success(),
            "tilegate {args:?} on a read-only data directory: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    assert!(report.is_file());
    assert_eq!(
        listing(&data),
        before,
        "looking wrote to the data directory"
    );

    let typo = tmp.path().join("dat");
    let out = tg(&typo, &["--json", "status"], &[]);
    assert_eq!(out.status.code(), Some(1));
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["error"]["reason"], Reason::NoJob.as_str(), "{doc}");
    assert!(!typo.exists(), "status created the mistyped data directory");
}

/// GDAL's failures read as sentences: the driver's message is kept, GDAL's framing of it
/// (`CPL error class: '3', error number: '4'`) never reaches a person.
#[test]
fn gdal_failures_are_said_as_sentences() {
    let tmp = tempdir();
    let data = tmp.path().join("data");
    let text = tmp.path().join("notes.tif");
    std::fs::write(&text, "these are my notes, not a raster\n").unwrap();
    let scene = tmp.path().join("scene.tif");
    sample(&data, &scene, 64, 2);
    for (args, reason) in [
        (vec!["plan", text.to_str().unwrap()], Reason::CorruptRaster),
        (
            vec![
                "plan",
                scene.to_str().unwrap(),
                "--recipe",
                "warp",
                "--t-srs",
                "nonsense",
            ],
            Reason::BadRecipe,
        ),
    ] {
        let out = tg(&data, &args, &[]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {stderr}");
        assert!(
            stderr.starts_with(&format!("tilegate: error[{reason}]: ")),
            "{args:?}: {stderr}"
        );
        assert!(!stderr.contains("CPL error"), "{args:?}: {stderr}");
        assert!(stderr.contains("GDAL: "), "{args:?}: {stderr}");
    }
}

/// `status` as text says where the scene is or what stands between the job and it, and its
/// counts are the JSON's: a dead-lettered window is counted once, as dead-lettered.
#[test]
fn status_says_where_the_scene_is_and_counts_agree() {
    let tmp = tempdir();
    let data = tmp.path().join("data");
    let scene = tmp.path().join("scene.tif");
    sample(&data, &scene, 128, 4);
    let scene_arg = scene.to_str().unwrap();
    let planned = tg_json(&data, &["plan", scene_arg, "--window", "64"]);
    let job = planned["job_id"].as_str().unwrap().to_owned();
    let text = |job: &str| {
        let out = tg(&data, &["status", job], &[]);
        assert!(out.status.success());
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let t = text(&job);
    assert!(
        t.contains("windows      0 of 4 recorded (4 not: 0 dead-lettered, 4 missing)"),
        "{t}"
    );
    assert!(
        t.contains("scene        not assembled: 4 window(s) still to do"),
        "{t}"
    );

    // The source changes under the job: every window is dead-lettered, and said once.
    sample(&data, &scene, 128, 5);
    let out = tg(&data, &["work", "--until-empty"], &[]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let doc = tg_json(&data, &["status", &job]);
    assert_eq!(doc["window_states"]["dead_lettered"], 4, "{doc}");
    // A window is ROW_COL in --json as everywhere else, never {"row": …, "col": …}.
    let window = doc["dead_letters"][0]["window"].as_str().unwrap();
    assert!(tilegate_core::Window::parse(window).is_some(), "{doc}");
    let t = text(&job);
    assert!(
        t.contains("windows      0 of 4 recorded (4 not: 4 dead-lettered, 0 missing)"),
        "{t}"
    );
    assert!(
        t.contains("not assembled: 4 window(s) dead-lettered"),
        "{t}"
    );
    // The dead letters name their job, and a job's can be returned on their own.
    let out = tg(&data, &["dlq", "list"], &[]);
    let listed = String::from_utf8_lossy(&out.stdout);
    assert_eq!(listed.matches(&format!("job {job}")).count(), 4, "{listed}");
    let listed = tg_json(&data, &["dlq", "list", "--job", &job[..8]]);
    assert_eq!(listed["count"], 4, "{listed}");
    let moved = tg_json(&data, &["dlq", "redrive", "--job", &job]);
    assert_eq!(moved["redriven"], 4, "{moved}");

    let run = tg_json(&data, &["run", scene_arg, "--window", "64"]);
    let job = run["job_id"].as_str().unwrap();
    let doc = tg_json(&data, &["status", job]);
    let key = doc["scene_output"]["key"].as_str().unwrap();
    let t = text(job);
    assert!(t.contains("windows      4 of 4 recorded\n"), "{t}");
    let line = t.lines().find(|l| l.starts_with("  scene ")).unwrap();
    let path = data.join("objects").join(key);
    assert!(
        line.ends_with(&format!(
            "{} ({} bytes)",
            path.display(),
            doc["scene_output"]["size"]
        )),
        "{t}"
    );
}

/// The smaller stumbles: counts in words, bands counted from 1, money without float noise,
/// times a person reads, `run`'s sources as `plan`'s, and a watch that says no worker is on
/// the job.
#[test]
fn the_smaller_stumbles() {
    let tmp = tempdir();
    let data = tmp.path().join("data");
    let scene = tmp.path().join("scene.tif");
    sample(&data, &scene, 100, 6);
    let scene = scene.to_str().unwrap();
    let out = tg(&data, &["run", scene, "--window", "128"], &[]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains(", 1 window of 112 px"), "{text}");

    let out = tg(&data, &["plan", scene, "--bands", "0"], &[]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.starts_with("tilegate: error[bad-recipe]: ") && stderr.contains("numbered from 1"),
        "{stderr}"
    );

    let out = tg(&data, &["--json", "status"], &[]);
    let json = String::from_utf8_lossy(&out.stdout);
    assert!(!json.contains("-0.0"), "{json}");
    let doc: serde_json::Value = serde_json::from_str(&json).unwrap();
    let job = doc["job_id"].as_str().unwrap().to_owned();
    for v in doc["cost"].as_object().unwrap().values() {
        if let Some(f) = v.as_f64() {
            assert!(f.to_string().len() <= 20, "{v}: float noise");
        }
    }

    let regen = tg_json(&data, &["regenerate", &job, "--window", "0_0"]);
    let attempt = regen["attempt"].as_str().unwrap();
    let out = tg(&data, &["attempts", &job], &[]);
    let text = String::from_utf8_lossy(&out.stdout);
    // Accepted: kept while published, so no deletion time.
    assert!(text.contains("accepted  delete after - "), "{text}");
    assert!(
        text.contains(&format!("pointer 0000_0000 -> {attempt} (moved 20")),
        "{text}"
    );

    let help = tg(&data, &["run", "--help"], &[]);
    assert!(String::from_utf8_lossy(&help.stdout).contains("s3://"));

    // A planned job that no worker takes: the watch says so instead of "ETA —" forever.
    let other = tmp.path().join("other.tif");
    sample(&data, &other, 64, 7);
    let planned = tg_json(&data, &["plan", other.to_str().unwrap(), "--window", "32"]);
    let mut child = Command::new(tilegate_bin())
        .arg("--data")
        .arg(&data)
        .args(["status", "--watch", "--interval", "0.2"])
        .arg(planned["job_id"].as_str().unwrap())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let saw = std::thread::spawn(move || {
        use std::io::BufRead as _;
        std::io::BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
            .find(|l| l.contains("no worker is taking this job's windows"))
    });
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while !saw.is_finished() && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    let _ = child.kill();
    let _ = child.wait();
    let line = saw.join().unwrap();
    assert!(line.is_some_and(|l| l.contains("tilegate work")));
}

/// Several scenes at once: `plan --from` then `work`, then `assemble --all` publishes every
/// job that is done; `run --from` does the same in one command.
#[test]
fn several_scenes_are_assembled_all_at_once() {
    let tmp = tempdir();
    let data = tmp.path().join("data");
    let list = tmp.path().join("scenes.txt");
    let mut lines = String::new();
    for (i, seed) in [11, 12].iter().enumerate() {
        let scene = tmp.path().join(format!("scene-{i}.tif"));
        sample(&data, &scene, 96, *seed);
        lines.push_str(&format!("{}\n", scene.display()));
    }
    std::fs::write(&list, &lines).unwrap();
    let list = list.to_str().unwrap();
    let planned = tg_json(&data, &["plan", "--from", list, "--window", "64"]);
    assert_eq!(planned["planned"], 2, "{planned}");
    let none = tg_json(&data, &["assemble", "--all"]);
    let outcomes: Vec<&str> = none["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| j["outcome"].as_str().unwrap())
        .collect();
    assert_eq!(outcomes, ["incomplete", "incomplete"], "{none}");
    let out = tg(&data, &["work", "--until-empty"], &[]);
    assert!(out.status.success());
    let all = tg_json(&data, &["assemble", "--all"]);
    let outcomes: Vec<&str> = all["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| j["outcome"].as_str().unwrap())
        .collect();
    assert_eq!(outcomes, ["written", "written"], "{all}");
    let again = tg_json(&data, &["assemble", "--all"]);
    assert_eq!(again["jobs"].as_array().unwrap().len(), 0, "{again}");

    let other = tmp.path().join("other");
    let ran = tg_json(&other, &["run", "--from", list, "--window", "32"]);
    assert_eq!(ran["complete"], 2, "{ran}");
    for job in ran["jobs"].as_array().unwrap() {
        assert_eq!(job["scene"]["outcome"], "written", "{job}");
    }
}

/// `run -o NAME` leaves the published scene also under a name of the user's choosing: the
/// same bytes as the store's scene, the store's scene untouched; a rerun writes it again.
#[test]
fn run_writes_the_scene_under_the_name_asked_for() {
    let tmp = tempdir();
    let data = tmp.path().join("data");
    let scene = tmp.path().join("scene.tif");
    sample(&data, &scene, 128, 8);
    let named = tmp.path().join("my scene.tif");
    let args = [
        "run",
        scene.to_str().unwrap(),
        "--window",
        "64",
        "-o",
        named.to_str().unwrap(),
    ];
    let run = tg_json(&data, &args);
    assert_eq!(run["out"]["path"], named.to_str().unwrap(), "{run}");
    let published = data
        .join("objects")
        .join(run["scene"]["scene_key"].as_str().unwrap());
    let bytes = std::fs::read(&named).unwrap();
    assert_eq!(bytes, std::fs::read(&published).unwrap());
    assert_eq!(run["out"]["size"], bytes.len());
    std::fs::remove_file(&named).unwrap();
    let again = tg_json(&data, &args);
    assert_eq!(again["scene"]["outcome"], "already_done", "{again}");
    assert_eq!(std::fs::read(&named).unwrap(), bytes);
    let leftovers: Vec<_> = std::fs::read_dir(tmp.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains(".tilegate-"))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
}

/// `work` on a terminal shows how it is getting on (under `script`, which gives it one); with
/// its output redirected it stays quiet until its summary.
#[test]
fn work_shows_progress_on_a_terminal() {
    let tmp = tempdir();
    let data = tmp.path().join("data");
    let scene = tmp.path().join("scene.tif");
    sample(&data, &scene, 256, 9);
    tg_json(&data, &["plan", scene.to_str().unwrap(), "--window", "32"]);
    let command = format!(
        "{} --data {} work --until-empty",
        tilegate_bin().display(),
        data.display()
    );
    let out = Command::new("script")
        .args(["-qec", &command, "/dev/null"])
        .stdin(Stdio::null())
        .output()
        .expect("run script");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let seen = String::from_utf8_lossy(&out.stdout);
    assert!(
        seen.contains(" written, ") && seen.contains("/s)"),
        "{seen}"
    );
    assert!(seen.contains("handled 64 message(s)"), "{seen}");
    let quiet = tg(&data, &["work", "--until-empty"], &[]);
    assert!(!String::from_utf8_lossy(&quiet.stderr).contains("/s)"));
}

/// The ledger as a new user meets it: accepting the attempt already published is done (not
/// "the pointer moved meanwhile"), a regeneration that changed nothing says so, a regenerated
/// scene is the one `status` and `stac` name, and `url` on the local store gives the file.
#[test]
fn the_ledger_says_what_it_did() {
    let tmp = tempdir();
    let data = tmp.path().join("data");
    let scene = tmp.path().join("scene.tif");
    sample(&data, &scene, 128, 6);
    let run = tg_json(&data, &["run", scene.to_str().unwrap(), "--window", "64"]);
    let job = run["job_id"].as_str().unwrap().to_owned();

    // The source is unchanged: the same bytes, and said.
    let regen = tg_json(&data, &["regenerate", &job, "--window", "0_1"]);
    assert_eq!(regen["same_bytes_as_previous"], true, "{regen}");
    let a1 = regen["attempt"].as_str().unwrap().to_owned();
    let out = tg(&data, &["regenerate", &job, "--window", "0_1"], &[]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("the same bytes as the attempt it replaces"),
        "{text}"
    );
    let a2 = tg_json(&data, &["attempts", &job])["pointers"][0]["attempt"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_ne!(a1, a2);

    // Accepting the attempt already published, with an outdated --seen: done, exit 0.
    let out = tg(
        &data,
        &[
            "accept",
            &job,
            "--window",
            "0_1",
            "--attempt",
            &a2,
            "--seen",
            &a1,
        ],
        &[],
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert!(text.contains("already published"), "{text}");
    let doc = tg_json(
        &data,
        &[
            "accept",
            &job,
            "--window",
            "0_1",
            "--attempt",
            &a2,
            "--seen",
            &a1,
        ],
    );
    assert_eq!(doc["publish"]["outcome"], "already-current", "{doc}");

    // The local store's URL is the file, and reads the published attempt's bytes.
    let g = tg_json(&data, &["url", &job, "--window", "0_1"]);
    assert_eq!(g["expiring"], false, "{g}");
    let path = g["url"].as_str().unwrap().strip_prefix("file://").unwrap();
    let attempt_file = data.join("objects").join(g["key"].as_str().unwrap());
    assert_eq!(
        std::fs::read(path).unwrap(),
        std::fs::read(attempt_file).unwrap()
    );

    // A regenerated scene: `status` and `stac` name its attempt, not scenes/JOB.tif.
    let regen = tg_json(&data, &["regenerate", &job, "--scene"]);
    let key = regen["key"].as_str().unwrap().to_owned();
    assert!(!key.ends_with(&format!("scenes/{job}.tif")), "{key}");
    let st = tg_json(&data, &["status", &job]);
    assert_eq!(st["published_scene"]["key"], key.as_str(), "{st}");
    let text = String::from_utf8_lossy(&tg(&data, &["status", &job], &[]).stdout).into_owned();
    assert!(
        text.contains(&key) && text.contains("regenerated, attempt"),
        "{text}"
    );
    let stac = tg_json(&data, &["stac", &job]);
    assert!(stac["hrefs"][0].as_str().unwrap().ends_with(&key), "{stac}");
    assert_eq!(
        stac["items"][0]["assets"]["data"]["file:size"], regen["size"],
        "{stac}"
    );
    let item = tmp.path().join("item.json");
    std::fs::write(&item, serde_json::to_vec(&stac["items"][0]).unwrap()).unwrap();
    tilegate_tests::validate_stac(&item).unwrap();
}

/// Planning a job again enqueues only its unrecorded windows; an `expr` run reports the
/// output's bands; an integer `--ot` asks for its nodata; `--help` lists the global flags
/// after a command's own; `--json` gives a readable time beside every epoch value.
#[test]
fn planning_recipes_and_help_say_what_they_do() {
    let tmp = tempdir();
    let data = tmp.path().join("data");
    let scene = tmp.path().join("scene.tif");
    sample(&data, &scene, 128, 6);
    let s = scene.to_str().unwrap();
    let run = tg_json(&data, &["run", s, "--window", "64"]);
    let again = tg_json(&data, &["plan", s, "--window", "64"]);
    assert_eq!(
        (
            again["enqueued"].as_u64(),
            again["already_recorded"].as_u64()
        ),
        (Some(0), Some(4)),
        "{again}"
    );
    let all = tg_json(&data, &["plan", s, "--window", "64", "--all-windows"]);
    assert_eq!(all["enqueued"], 4, "{all}");
    let _ = tg(&data, &["work", "--until-empty"], &[]);

    let expr = [
        "run",
        s,
        "--window",
        "64",
        "--recipe",
        "expr",
        "--expr",
        "b1; b1 * 2",
    ];
    let out = tg(&data, &expr, &[]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("2 band(s) Float32"), "{text}");

    let out = tg(
        &data,
        &[
            "plan", s, "--recipe", "expr", "--expr", "b1", "--ot", "Byte",
        ],
        &[],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.starts_with("tilegate: error[bad-recipe]: --ot Byte needs --out-nodata"),
        "{stderr}"
    );

    let help = String::from_utf8_lossy(&tg(&data, &["run", "--help"], &[]).stdout).into_owned();
    let global = help
        .find("Global options:")
        .expect("a heading for the global flags");
    assert!(help.find("--recipe").unwrap() < global, "{help}");
    assert!(
        help[global..].contains("--data") && !help[..global].contains("--data <DIR>"),
        "{help}"
    );

    let st = tg_json(&data, &["status", run["job_id"].as_str().unwrap()]);
    let created = st["created_at"].as_i64().unwrap();
    assert_eq!(
        st["created_at_utc"].as_str().unwrap(),
        tilegate_core::time::rfc3339(created),
        "{st}"
    );
}

/// A geostationary full disk (GOES-East's grid, whose corners look past the Earth) gets a STAC
/// Item with a footprint, a bbox, its CRS as PROJJSON and its own time, valid for
/// `stac-validator`.
#[test]
fn a_geostationary_scene_has_a_place_in_its_stac_item() {
    let tmp = tempdir();
    let data = tmp.path().join("data");
    let plain = tmp.path().join("plain.tif");
    sample(&data, &plain, 256, 3);
    let goes = tmp.path().join("goes.tif");
    let half = "5434894.885";
    let neg = format!("-{half}");
    let out = Command::new("gdal_translate")
        .args(["-q", "-a_srs"])
        .arg("+proj=geos +h=35786023 +lon_0=-75 +sweep=x +ellps=GRS80 +units=m +no_defs")
        .args(["-a_ullr", &neg, half, half, &neg])
        .args(["-mo", "time_coverage_start=2024-06-30T18:00:21.6Z"])
        .arg(&plain)
        .arg(&goes)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    tg_json(&data, &["run", goes.to_str().unwrap(), "--window", "128"]);
    let stac = tg_json(&data, &["stac"]);
    let item = &stac["items"][0];
    assert_eq!(item["geometry"]["type"], "Polygon", "{item}");
    let bbox: Vec<f64> = item["bbox"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_f64().unwrap())
        .collect();
    assert!(
        bbox[0] > -160.0 && bbox[2] < 10.0 && bbox[1] < -75.0 && bbox[3] > 75.0,
        "{bbox:?}"
    );
    assert!(item["properties"]["proj:projjson"].is_object(), "{item}");
    // Its time is the scene's (CF/ACDD `time_coverage_start`), not the planning time.
    assert_eq!(
        item["properties"]["datetime"], "2024-06-30T18:00:21.6Z",
        "{item}"
    );
    let path = tmp.path().join("goes.json");
    std::fs::write(&path, serde_json::to_vec(item).unwrap()).unwrap();
    tilegate_tests::validate_stac(&path).unwrap();
}

/// `report -o -` writes the page to stdout and nothing else there; before, it wrote a file
/// named `-` in the working directory.
#[test]
fn report_to_a_dash_writes_the_page_to_stdout() {
    let tmp = tempdir();
    let dir = tmp.path();
    let data = dir.join("data");
    let scene = dir.join("scene.tif");
    sample(&data, &scene, 256, 11);
    tg_json(&data, &["run", scene.to_str().unwrap(), "--window", "128"]);
    let out = Command::new(tilegate_bin())
        .current_dir(dir)
        .arg("--data")
        .arg(&data)
        .args(["report", "-o", "-", "--no-thumbnail"])
        .output()
        .expect("run tilegate");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let page = String::from_utf8_lossy(&out.stdout);
    assert!(
        page.starts_with("<!DOCTYPE html>"),
        "{}",
        &page[..page.len().min(200)]
    );
    assert!(
        page.trim_end().ends_with("</html>"),
        "more than the page on stdout"
    );
    assert!(!dir.join("-").exists(), "a file named `-` was written");
}

/// `ingest --watch` of a directory that is not there is the command line's mistake, named
/// with its path (before: `error[unexpected]` and no path).
#[test]
fn watching_a_missing_directory_is_named_with_its_path() {
    let tmp = tempdir();
    let missing = tmp.path().join("no-such-inbox");
    let out = tg(
        &tmp.path().join("data"),
        &[
            "ingest",
            "--watch",
            missing.to_str().unwrap(),
            "--until-idle",
        ],
        &[],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("error[bad-option]"), "{stderr}");
    assert!(stderr.contains(missing.to_str().unwrap()), "{stderr}");
}

/// A command line clap refuses, with `--json`, prints the error document the README promises
/// (reason `usage`) on stdout and exits 2; before, stdout was empty.
#[test]
fn a_refused_command_line_with_json_prints_an_error_document() {
    let tmp = tempdir();
    let out = tg(
        &tmp.path().join("data"),
        &["--json", "status", "--no-such-flag"],
        &[],
    );
    assert_eq!(out.status.code(), Some(2));
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "stdout is not a document ({e}): {}",
            String::from_utf8_lossy(&out.stdout)
        )
    });
    assert_eq!(doc["error"]["reason"], Reason::Usage.as_str(), "{doc}");
    assert!(
        doc["error"]["message"]
            .as_str()
            .unwrap()
            .contains("--no-such-flag"),
        "{doc}"
    );
    // Without --json: clap's message only, stdout empty.
    let plain = tg(&tmp.path().join("data"), &["status", "--no-such-flag"], &[]);
    assert_eq!(plain.status.code(), Some(2));
    assert!(plain.stdout.is_empty());
}

/// `run SRC -o SRC` is refused before any work and leaves the source as it was (before, the
/// scene silently replaced its own source); `-o` onto an existing file needs `--force`, which
/// says so; `-o` into a directory that does not exist fails before any work (before: after
/// all of it, naming a temporary file).
#[test]
fn run_refuses_to_write_over_its_source_or_an_existing_file() {
    let tmp = tempdir();
    let dir = tmp.path();
    let data = dir.join("data");
    let scene = dir.join("scene.tif");
    sample(&data, &scene, 256, 12);
    let before = std::fs::read(&scene).unwrap();
    let s = scene.to_str().unwrap();
    let refused = |args: &[&str], says: &str| {
        let out = tg(&data, args, &[]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {stderr}");
        assert!(
            stderr.contains("error[bad-option]") && stderr.contains(says),
            "{args:?}: {stderr}"
        );
    };
    refused(&["run", s, "--window", "128", "-o", s], "own source");
    refused(
        &["run", s, "--window", "128", "-o", s, "--force"],
        "own source",
    );
    assert_eq!(
        std::fs::read(&scene).unwrap(),
        before,
        "the source was replaced"
    );
    let other = dir.join("other.tif");
    std::fs::write(&other, b"keep me").unwrap();
    let o = other.to_str().unwrap();
    refused(
        &["run", s, "--window", "128", "-o", o],
        "--force replaces it",
    );
    assert_eq!(std::fs::read(&other).unwrap(), b"keep me");
    let nowhere = dir.join("no-such-dir").join("x.tif");
    refused(
        &["run", s, "--window", "128", "-o", nowhere.to_str().unwrap()],
        "does not exist",
    );
    // None of them planned anything.
    let st = tg(&data, &["status"], &[]);
    assert!(
        String::from_utf8_lossy(&st.stderr).contains("error[no-job]"),
        "a refused run planned a job"
    );
    // With --force the existing file is replaced by the scene, and that is said.
    let out = tg(
        &data,
        &["run", s, "--window", "128", "-o", o, "--force"],
        &[],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("will be replaced"), "{stderr}");
    let written = std::fs::read(&other).unwrap();
    assert!(
        written.starts_with(b"II"),
        "not the scene: {} bytes",
        written.len()
    );
}

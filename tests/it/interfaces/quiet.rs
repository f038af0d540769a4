//! Progress and quiet: long steps say that they run, large plans say what they make, a sink
//! that cannot be reached is named, and an abandoned job's dead letters can be dropped.
//! Before: `run` on a pipe printed nothing until the end, `assemble` was silent for the whole
//! assembly, `work` said nothing when it started, `--window 16` made thousands of tiles without
//! a word, an unreachable webhook's lines named neither its address nor its port, `recipes`
//! left out `--out-nodata`, and nothing could remove a dead letter but a redrive.

use serde_json::Value;
use std::process::{Command, Stdio};
use tilegate_tests::{sample, sample_with, tempdir, tg, tg_json, tilegate_bin};

fn stderr(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn a_run_on_a_pipe_says_how_far_it_is_and_that_it_assembles() {
    let tmp = tempdir();
    let data = tmp.path();
    let src = data.join("scene.tif");
    sample(data, &src, 1024, 3);
    // 64 windows of 200 ms, two at a time: past the first progress line (every 5 s).
    let out = tg(
        data,
        &[
            "run",
            src.to_str().unwrap(),
            "--window",
            "128",
            "--concurrency",
            "2",
        ],
        &[("TILEGATE_SLOW_WINDOW_MS", "200")],
    );
    let err = stderr(&out);
    assert!(out.status.success(), "{err}");
    assert!(
        err.lines()
            .any(|l| l.contains("windows recorded") && l.contains("/64")),
        "no progress line on a pipe: {err}"
    );
    assert!(
        err.contains("every window recorded: assembling the scene"),
        "{err}"
    );
    // `--json` keeps stderr to warnings: no progress lines there.
    let quiet = tg(
        data,
        &["--json", "run", src.to_str().unwrap(), "--window", "128"],
        &[],
    );
    assert!(
        !stderr(&quiet).contains("windows recorded"),
        "{}",
        stderr(&quiet)
    );
}

#[test]
fn work_ingest_and_assemble_say_that_they_started() {
    let tmp = tempdir();
    let data = tmp.path();
    let src = data.join("scene.tif");
    sample(data, &src, 256, 4);
    let plan = tg_json(data, &["plan", src.to_str().unwrap(), "--window", "128"]);
    let job = plan["job_id"].as_str().unwrap();
    let work = tg(data, &["work", "--until-empty", "--threads", "1"], &[]);
    assert!(work.status.success(), "{}", stderr(&work));
    let first = stderr(&work).lines().next().unwrap_or_default().to_owned();
    assert!(
        first.contains("working the sqlite queue") && first.contains("1 encoder thread"),
        "{}",
        stderr(&work)
    );
    let inbox = data.join("inbox");
    std::fs::create_dir_all(&inbox).unwrap();
    let ingest = tg(
        data,
        &[
            "ingest",
            "--watch",
            inbox.to_str().unwrap(),
            "--until-idle",
            "--poll-s",
            "0.1",
        ],
        &[],
    );
    assert!(ingest.status.success(), "{}", stderr(&ingest));
    assert!(
        stderr(&ingest).contains(&format!(
            "ingesting from the sqlite arrivals queue, watching {}",
            inbox.display()
        )),
        "{}",
        stderr(&ingest)
    );
    // `assemble` on a terminal (util-linux `script` gives it one): a spinner names the job
    // while it works.
    let line = format!(
        "{} --data {} assemble {job}",
        tilegate_bin().display(),
        data.display()
    );
    let tty = Command::new("script")
        .args(["-qec", &line, "/dev/null"])
        .stdin(Stdio::null())
        .output()
        .expect("util-linux script");
    let shown = String::from_utf8_lossy(&tty.stdout);
    assert!(tty.status.success(), "{shown}");
    assert!(
        shown.contains(&format!("assembling job {job} (4 windows, 256×256)")),
        "{shown}"
    );
    assert!(shown.contains("published tilegate/scenes/"), "{shown}");
}

#[test]
fn a_plan_of_many_small_windows_says_what_it_makes() {
    let tmp = tempdir();
    let data = tmp.path();
    let src = data.join("scene.tif");
    sample(data, &src, 1088, 5);
    let out = tg(
        data,
        &["--json", "plan", src.to_str().unwrap(), "--window", "16"],
        &[],
    );
    let err = stderr(&out);
    assert!(out.status.success(), "{err}");
    assert!(
        err.contains("this job has 4624 windows of 16×16 px")
            && err.contains("--window 512 would make 9"),
        "{err}"
    );
    // The default window says nothing.
    let calm = tg(data, &["--json", "plan", src.to_str().unwrap()], &[]);
    assert!(!stderr(&calm).contains("windows of"), "{}", stderr(&calm));
}

#[test]
fn an_unreachable_sink_is_named_with_its_port_and_the_job() {
    let tmp = tempdir();
    let data = tmp.path();
    let src = data.join("scene.tif");
    sample(data, &src, 128, 6);
    let run = tg_json(data, &["run", src.to_str().unwrap(), "--window", "64"]);
    let job = run["job_id"].as_str().unwrap();
    // A port nothing listens on.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let url = format!("http://127.0.0.1:{port}/hook");
    let out = tg(data, &["--json", "announce", job, "--announce", &url], &[]);
    let doc: Value =
        serde_json::from_slice(&out.stdout).unwrap_or_else(|_| panic!("{}", stderr(&out)));
    assert_eq!(doc["pending"], 1, "{doc}");
    let why = doc.to_string();
    assert!(
        why.contains(&format!("could not reach 127.0.0.1:{port}")) && why.contains("of 6"),
        "{why}"
    );
    assert!(stderr(&out).contains(job), "{}", stderr(&out));
}

#[test]
fn recipes_lists_every_flag_of_expr() {
    let out = Command::new(tilegate_bin())
        .arg("recipes")
        .stdout(Stdio::piped())
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("--out-nodata"), "{text}");
}

#[test]
fn an_abandoned_jobs_dead_letters_are_purged_and_no_others() {
    let tmp = tempdir();
    let data = tmp.path();
    // Two jobs whose sources change under them: every window of each is dead-lettered.
    let mut jobs = Vec::new();
    for (name, seed) in [("a.tif", 7), ("b.tif", 9)] {
        let src = data.join(name);
        sample(data, &src, 128, seed);
        let plan = tg_json(data, &["plan", src.to_str().unwrap(), "--window", "64"]);
        jobs.push(plan["job_id"].as_str().unwrap().to_owned());
        sample_with(data, &src, 128, &["--seed", &(seed + 1).to_string()]);
    }
    tg_json(data, &["work", "--until-empty"]);
    let all = tg_json(data, &["dlq", "list"]);
    assert_eq!(all["count"], 8, "{all}");

    let purged = tg_json(data, &["dlq", "purge", "--job", &jobs[0]]);
    assert_eq!(purged["purged"], 4, "{purged}");
    let left = tg_json(data, &["dlq", "list"]);
    assert_eq!(left["count"], 4, "{left}");
    assert!(
        left["dead_letters"]
            .as_array()
            .unwrap()
            .iter()
            .all(|d| d["job_id"] == jobs[1].as_str()),
        "{left}"
    );
    // Again: nothing left of that job's.
    assert_eq!(
        tg_json(data, &["dlq", "purge", "--job", &jobs[0]])["purged"],
        0
    );
    // Neither --job nor --id: the command line is wrong.
    let bare = tg(data, &["dlq", "purge"], &[]);
    assert_eq!(bare.status.code(), Some(2), "{}", stderr(&bare));
}

#[test]
fn a_demo_job_with_no_sink_is_not_said_to_be_pending() {
    let tmp = tempdir();
    let data = tmp.path();
    let demo = tg(data, &["demo", "--size", "256"], &[]);
    assert!(demo.status.success(), "{}", stderr(&demo));
    let status = tg(data, &["status"], &[]);
    let text = String::from_utf8_lossy(&status.stdout);
    let line = text
        .lines()
        .find(|l| l.trim_start().starts_with("announced"))
        .unwrap_or_else(|| panic!("{text}"));
    assert!(
        line.contains("kept: no sink took it") && !line.contains("pending"),
        "{line}"
    );
    assert_eq!(tg_json(data, &["status"])["settled"], true);
}

#[test]
fn the_recent_jobs_list_names_each_jobs_recipe() {
    let tmp = tempdir();
    let data = tmp.path();
    let src = data.join("scene.tif");
    sample(data, &src, 128, 11);
    let copy = tg_json(data, &["run", src.to_str().unwrap(), "--window", "64"]);
    let expr = tg_json(
        data,
        &[
            "run",
            src.to_str().unwrap(),
            "--window",
            "64",
            "--recipe",
            "expr",
            "--expr",
            "b1*2",
        ],
    );
    let out = tg(data, &["status"], &[]);
    let text = String::from_utf8_lossy(&out.stdout);
    for (doc, recipe) in [(&copy, "copy"), (&expr, "expr")] {
        let id = doc["job_id"].as_str().unwrap();
        let line = text
            .lines()
            .find(|l| l.trim_start().starts_with(id))
            .unwrap_or_else(|| panic!("{id} not listed:\n{text}"));
        assert_eq!(line.split_whitespace().nth(4), Some(recipe), "{line}");
    }
}

/// With `-v`, a window's log lines carry that window's span and no other. Before, the span was
/// entered with a guard held across the handler's awaits: it stayed entered on the thread
/// while the thread ran other windows' tasks, so each later window's lines came nested inside
/// every earlier one's (`window{…0000_0000}:window{…0000_0001}:…`, 19 deep on 64 windows).
#[test]
fn each_windows_log_lines_name_that_window_alone() {
    let tmp = tempdir();
    let data = tmp.path();
    let src = data.join("scene.tif");
    sample(data, &src, 1024, 3);
    tg_json(data, &["plan", src.to_str().unwrap(), "--window", "128"]);
    let out = tg(
        data,
        &["-v", "work", "--until-empty", "--concurrency", "4"],
        &[],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let log = stderr(&out);
    let lines: Vec<&str> = log.lines().filter(|l| l.contains("window{")).collect();
    assert!(lines.len() >= 64, "a line per window at least:\n{log}");
    for l in &lines {
        assert_eq!(l.matches("window{").count(), 1, "{l}");
    }
}

//! One job, one state, one set of counts: jobs in every state — planned, partial (a worker
//! killed half-way), incomplete (every window dead-lettered), not assembled (`run
//! --no-assemble`) and published — rendered by `status` (text and `--json`, a job's detail
//! and the recent-jobs list), `report` (text, `--json` and the page) and the service's job
//! documents, which must all name the same state and give the same counts. And the run's own
//! summary after Ctrl-C: it says to run again, not to look at dead letters there are none of.
//! Then the two smaller promises of the README and `--help`: a band an `--expr` lacks is
//! `bad-expression`, and `stac` prints the Items.

use serde_json::Value;
use std::path::Path;
use std::process::{Command, Stdio};
use tilegate_tests::service::Server;
use tilegate_tests::{sample, tempdir, tg, tg_json, tilegate_bin, work_until_fault};

/// A job's state and counts as one output gives them: (state, windows, recorded,
/// dead-lettered, missing).
type Said = (String, u64, u64, u64, u64);

fn said(v: &Value, state: &str) -> Said {
    let n = |k: &str| {
        v[k].as_u64()
            .unwrap_or_else(|| panic!("no count `{k}` in {v}"))
    };
    (
        v[state]
            .as_str()
            .unwrap_or_else(|| panic!("no `{state}` in {v}"))
            .to_owned(),
        n("windows"),
        n("recorded"),
        n("dead_lettered"),
        n("missing"),
    )
}

fn text(out: &std::process::Output) -> String {
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `status JOB` as text: its state line and its windows line, read back into numbers.
fn said_by_status_text(data: &Path, job: &str) -> Said {
    let t = text(&tg(data, &["status", job], &[]));
    let field = |name: &str| {
        t.lines()
            .find_map(|l| l.strip_prefix(&format!("  {name:<13}")))
            .unwrap_or_else(|| panic!("no `{name}` line in\n{t}"))
            .to_owned()
    };
    let state = field("state");
    let windows = field("windows");
    // `R of W recorded` and, when some are not, `(U not: D dead-lettered, M missing)`.
    let nums: Vec<u64> = windows
        .split(|c: char| !c.is_ascii_digit())
        .filter(|s| !s.is_empty())
        .map(|s| s.parse().unwrap())
        .collect();
    let (recorded, total) = (nums[0], nums[1]);
    let (dead, missing) = if nums.len() >= 5 {
        (nums[3], nums[4])
    } else {
        (0, 0)
    };
    (state, total, recorded, dead, missing)
}

/// The report page's verdict: `<span id="lifecycle">STATE</span>: R of W windows recorded[;
/// D dead-lettered, M missing]`.
fn said_by_page(html: &str) -> Said {
    let at = html
        .find("<span id=\"lifecycle\">")
        .unwrap_or_else(|| panic!("no lifecycle in the page"));
    let rest = &html[at + "<span id=\"lifecycle\">".len()..];
    let state = rest[..rest.find('<').unwrap()].to_owned();
    let verdict = &rest[..rest.find("</p>").unwrap()];
    let verdict = &verdict[verdict.find("</span>").unwrap()..];
    let verdict = &verdict[..verdict.find(" — ").unwrap_or(verdict.len())];
    let nums: Vec<u64> = verdict
        .split(|c: char| !c.is_ascii_digit())
        .filter(|s| !s.is_empty())
        .map(|s| s.parse().unwrap())
        .collect();
    let (dead, missing) = if nums.len() >= 4 {
        (nums[2], nums[3])
    } else {
        (0, 0)
    };
    (state, nums[1], nums[0], dead, missing)
}

#[test]
fn every_output_gives_a_job_the_same_state_and_counts() {
    let tmp = tempdir();
    let data = tmp.path().join("data");
    let scene = |name: &str, seed: u64| {
        let p = tmp.path().join(name);
        sample(&data, &p, 128, seed);
        p.to_str().unwrap().to_owned()
    };
    let job_of = |v: &Value| v["job_id"].as_str().unwrap().to_owned();

    // Published: run to the end.
    let published = job_of(&tg_json(
        &data,
        &["run", &scene("p.tif", 1), "--window", "64"],
    ));
    // Every window recorded, nothing assembled: `run --no-assemble`.
    let not_assembled = job_of(&tg_json(
        &data,
        &["run", &scene("n.tif", 2), "--window", "64", "--no-assemble"],
    ));
    // Incomplete: the source changes under the job, so every window is dead-lettered.
    let changing = scene("i.tif", 3);
    let incomplete = job_of(&tg_json(&data, &["plan", &changing, "--window", "64"]));
    sample(&data, Path::new(&changing), 128, 4);
    text(&tg(&data, &["work", "--until-empty"], &[]));
    // Partial: a worker killed after recording its second window; two are left.
    let partial = job_of(&tg_json(
        &data,
        &["plan", &scene("r.tif", 5), "--window", "64"],
    ));
    let out = work_until_fault(&data, "after-manifest", 1);
    assert!(!out.status.success(), "the fault should have killed it");
    // Planned: nothing worked yet.
    let planned = job_of(&tg_json(
        &data,
        &["plan", &scene("q.tif", 6), "--window", "64"],
    ));

    let expected: [(&str, Said); 5] = [
        (&planned, ("planned".into(), 4, 0, 0, 4)),
        (&partial, ("partial".into(), 4, 2, 0, 2)),
        (&incomplete, ("incomplete".into(), 4, 0, 4, 0)),
        (&not_assembled, ("not_assembled".into(), 4, 4, 0, 0)),
        (&published, ("published".into(), 4, 4, 0, 0)),
    ];

    // The service, as an operator sees every job.
    let key = tg_json(&data, &["keys", "create", "--tenant", "ops", "--operator"])["key"]
        .as_str()
        .unwrap()
        .to_owned();
    let mut cmd = Command::new(tilegate_bin());
    cmd.arg("--data").arg(&data);
    let server = Server::start(cmd, &[], tmp.path().join("serve.log"));
    let listed = server.call("GET", "/v1/jobs", Some(&key), None);
    assert_eq!(listed.status, 200, "{}", server.log());
    let listed = listed.json();

    let recent = tg_json(&data, &["status"]);
    let recent_text = text(&tg(&data, &["status"], &[]));
    for (job, want) in &expected {
        let job = *job;
        let mut seen: Vec<(&str, Said)> = Vec::new();
        let st = tg_json(&data, &["status", job]);
        seen.push(("status --json lifecycle/counts", {
            let mut c = st["counts"].clone();
            c["lifecycle"] = st["lifecycle"].clone();
            said(&c, "lifecycle")
        }));
        // The states' own counts are the same figures.
        let ws = &st["window_states"];
        seen.push((
            "status --json window_states",
            (
                st["lifecycle"].as_str().unwrap().to_owned(),
                st["windows"].as_u64().unwrap(),
                st["manifest_rows"].as_u64().unwrap(),
                ws["dead_lettered"].as_u64().unwrap(),
                ws["missing"].as_u64().unwrap(),
            ),
        ));
        seen.push(("status text", said_by_status_text(&data, job)));
        let row = recent["recent_jobs"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["job_id"] == job)
            .unwrap_or_else(|| panic!("{job} is not among the recent jobs: {recent}"));
        seen.push(("status --json recent_jobs", said(row, "lifecycle")));
        let line = recent_text
            .lines()
            .find(|l| l.trim_start().starts_with(job))
            .unwrap_or_else(|| panic!("{job} is not in the recent-jobs list:\n{recent_text}"));
        let cols: Vec<&str> = line.split_whitespace().collect();
        let (rec, win) = cols[1].split_once('/').unwrap();
        seen.push((
            "status text recent jobs",
            (
                cols[3].to_owned(),
                win.parse().unwrap(),
                rec.parse().unwrap(),
                want.3,
                want.4,
            ),
        ));
        let page_path = tmp.path().join(format!("{job}.html"));
        let page = tg_json(&data, &["report", job, "-o", page_path.to_str().unwrap()]);
        seen.push(("report --json", {
            let mut c = page["counts"].clone();
            c["lifecycle"] = page["lifecycle"].clone();
            said(&c, "lifecycle")
        }));
        let report_text = text(&tg(
            &data,
            &["report", job, "-o", page_path.to_str().unwrap()],
            &[],
        ));
        assert!(
            report_text.contains(&format!(
                "job {}, {} of {} windows recorded",
                want.0, want.2, want.1
            )) && report_text.contains(&format!("{} dead-lettered, {} missing", want.3, want.4)),
            "{job}: {report_text}"
        );
        seen.push((
            "report page",
            said_by_page(&std::fs::read_to_string(&page_path).unwrap()),
        ));
        let detail = server.call("GET", &format!("/v1/jobs/{job}"), Some(&key), None);
        assert_eq!(detail.status, 200, "{}", server.log());
        let detail = detail.json();
        seen.push(("GET /v1/jobs/{id}", {
            let mut c = detail["counts"].clone();
            c["lifecycle"] = detail["lifecycle"].clone();
            said(&c, "lifecycle")
        }));
        let summary = listed["jobs"]
            .as_array()
            .unwrap()
            .iter()
            .find(|j| j["job_id"] == job)
            .unwrap_or_else(|| panic!("{job} is not listed: {listed}"));
        seen.push(("GET /v1/jobs", said(summary, "lifecycle")));
        for (output, got) in &seen {
            assert_eq!(got, want, "{job}: {output} disagrees");
        }
    }
}

/// Ctrl-C in the middle of a run: its summary counts windows (recorded + missing = windows, no
/// dead letters) and says to run again to resume, naming no `dlq list`; `status` says the same
/// state. The run again writes only what was left, and never counts more windows written and
/// already present than the job has.
#[test]
fn an_interrupted_run_says_to_run_again_and_counts_windows() {
    let tmp = tempdir();
    let data = tmp.path().join("data");
    let src = tmp.path().join("scene.tif");
    sample(&data, &src, 4096, 9);
    let src = src.to_str().unwrap();
    let child = Command::new(tilegate_bin())
        .arg("--data")
        .arg(&data)
        .args([
            "run",
            src,
            "--window",
            "128",
            "--threads",
            "1",
            "--concurrency",
            "1",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start the run");
    // Interrupt it once it has recorded something (and long before its 1024 windows).
    let mut recorded = 0;
    for _ in 0..600 {
        let out = tg(&data, &["--json", "status"], &[]);
        if out.status.success() {
            let st: Value = serde_json::from_slice(&out.stdout).unwrap();
            recorded = st["manifest_rows"].as_u64().unwrap_or(0);
            if recorded > 0 {
                break;
            }
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    assert!(recorded > 0, "the run recorded nothing");
    // SAFETY: a plain kill(2) of our own child.
    let sent = unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGINT) };
    assert_eq!(sent, 0, "SIGINT not sent");
    let out = child.wait_with_output().unwrap();
    let summary = String::from_utf8_lossy(&out.stdout).into_owned();
    let st = tg_json(&data, &["status"]);
    assert_eq!(st["lifecycle"], "partial", "{st}");
    let c = &st["counts"];
    assert_eq!(c["dead_lettered"], 0, "{st}");
    assert!(c["missing"].as_u64() > Some(0), "{st}");
    assert!(
        summary.contains("INCOMPLETE: ") && summary.contains("run again to resume"),
        "{summary}"
    );
    assert!(
        !summary.contains("dlq"),
        "no dead letters to look at: {summary}"
    );
    let line = |label: &str, value: &str| format!("  {label:<27}{value:>8}\n");
    let missing = c["missing"].as_u64().unwrap().to_string();
    assert!(
        summary.contains(&line("missing", &missing))
            && summary.contains(&line("dead-lettered", "0"))
            && summary.contains(&line("state", "partial")),
        "{summary}"
    );

    // The run again resumes: it writes what was left and counts each window once.
    let again = tg_json(&data, &["run", src, "--window", "128"]);
    assert_eq!(again["lifecycle"], "published", "{again}");
    let windows = again["windows"].as_u64().unwrap();
    let (written, present) = (
        again["tiles_written"].as_u64().unwrap(),
        again["already_present"].as_u64().unwrap(),
    );
    assert_eq!(written + present, windows, "{again}");
    assert_eq!(present, c["recorded"].as_u64().unwrap(), "{again}");
    assert_eq!(
        (again["missing"].as_u64(), again["dead_lettered"].as_u64()),
        (Some(0), Some(0))
    );
}

/// A run whose windows are all dead-lettered says so and names `dlq list`, never "run again".
#[test]
fn a_run_left_with_dead_letters_names_dlq_list() {
    let tmp = tempdir();
    let data = tmp.path().join("data");
    let src = tmp.path().join("scene.tif");
    sample(&data, &src, 128, 3);
    let src = src.to_str().unwrap();
    let out = tg(
        &data,
        &["run", src, "--window", "64", "--visibility", "1"],
        &[("TILEGATE_PANIC_WINDOWS", "0000_0001")],
    );
    let summary = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(!out.status.success(), "{summary}");
    assert!(
        summary.contains("INCOMPLETE: 1 window(s) dead-lettered: see `tilegate dlq list`"),
        "{summary}"
    );
    assert!(!summary.contains("run again"), "{summary}");
    assert!(
        summary.contains(&format!("  {:<27}{:>8}\n", "state", "incomplete")),
        "{summary}"
    );
    let st = tg_json(&data, &["status"]);
    assert_eq!(st["lifecycle"], "incomplete", "{st}");
}

/// README: an `--expr` that names a band the source lacks is `error[bad-expression]`, as a
/// malformed one is — not `bad-recipe`.
#[test]
fn a_band_the_source_lacks_in_an_expression_is_bad_expression() {
    let tmp = tempdir();
    let data = tmp.path().join("data");
    let src = tmp.path().join("scene.tif");
    sample(&data, &src, 128, 3);
    for json in [false, true] {
        let mut args = vec![];
        if json {
            args.push("--json");
        }
        args.extend([
            "plan",
            src.to_str().unwrap(),
            "--recipe",
            "expr",
            "--expr",
            "b1 + b3",
        ]);
        let out = tg(&data, &args, &[]);
        assert_eq!(out.status.code(), Some(1));
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.starts_with("tilegate: error[bad-expression]: ")
                && stderr.contains("band 3 does not exist"),
            "{stderr}"
        );
        if json {
            let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
            assert_eq!(doc["error"]["reason"], "bad-expression", "{doc}");
        }
    }
}

/// `stac`'s help says it prints the STAC Items: one job's Item as it is, several as an
/// ItemCollection; `--hrefs` prints where they are stored.
#[test]
fn stac_prints_the_items() {
    let tmp = tempdir();
    let data = tmp.path().join("data");
    let mut jobs = Vec::new();
    for seed in [1, 2] {
        let src = tmp.path().join(format!("s{seed}.tif"));
        sample(&data, &src, 128, seed);
        let run = tg_json(&data, &["run", src.to_str().unwrap(), "--window", "64"]);
        jobs.push(run["job_id"].as_str().unwrap().to_owned());
    }
    let help = text(&tg(&data, &["stac", "--help"], &[]));
    assert!(help.contains("Print the STAC Items"), "{help}");

    let one: Value = serde_json::from_str(&text(&tg(&data, &["stac", &jobs[0]], &[])))
        .expect("`stac JOB` prints the Item");
    assert_eq!(one["type"], "Feature", "{one}");
    assert_eq!(one["id"].as_str(), Some(jobs[0].as_str()), "{one}");
    assert!(one["assets"].is_object(), "{one}");

    let all: Value = serde_json::from_str(&text(&tg(&data, &["stac"], &[])))
        .expect("`stac` prints an ItemCollection");
    assert_eq!(all["type"], "FeatureCollection", "{all}");
    let mut ids: Vec<&str> = all["features"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["id"].as_str().unwrap())
        .collect();
    ids.sort_unstable();
    let mut want: Vec<&str> = jobs.iter().map(String::as_str).collect();
    want.sort_unstable();
    assert_eq!(ids, want);

    let hrefs = text(&tg(&data, &["stac", "--hrefs", &jobs[0]], &[]));
    let href = hrefs.trim();
    assert!(href.ends_with(&format!("{}.json", jobs[0])), "{hrefs}");
    let stored: Value = serde_json::from_slice(&std::fs::read(href).unwrap()).unwrap();
    assert_eq!(stored, one);
}

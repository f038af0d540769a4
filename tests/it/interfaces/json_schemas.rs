//! Every command's `--json` document against its documented JSON Schema: the schemas in
//! `docs/json/` are the ones the binary generates from its report types (`tilegate schema`),
//! and what each command prints validates against its own (`.ci/json-validate`, Draft 2020-12,
//! every object closed to undeclared fields).

use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::process::Command;
use tilegate_tests::{sample, tempdir, tg, tilegate_bin};

fn docs_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/json")
}

fn schema_names() -> Vec<String> {
    let out = Command::new(tilegate_bin()).arg("schema").output().unwrap();
    assert!(out.status.success());
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(str::to_owned)
        .collect()
}

/// `docs/json/NAME.schema.json` is what `tilegate schema NAME` prints, for every document and
/// no other. `TILEGATE_BLESS=1` writes them.
#[test]
fn the_documented_schemas_are_the_generated_ones() {
    let names = schema_names();
    assert!(names.len() >= 25, "{names:?}");
    let bless = std::env::var_os("TILEGATE_BLESS").is_some();
    for name in &names {
        let out = Command::new(tilegate_bin())
            .args(["schema", name])
            .output()
            .unwrap();
        assert!(out.status.success(), "schema {name}");
        let generated = String::from_utf8(out.stdout).unwrap();
        let path = docs_dir().join(format!("{name}.schema.json"));
        if bless {
            std::fs::create_dir_all(docs_dir()).unwrap();
            std::fs::write(&path, &generated).unwrap();
        }
        let documented = std::fs::read_to_string(&path).unwrap_or_default();
        assert!(
            documented == generated,
            "{} is not what `tilegate schema {name}` prints (TILEGATE_BLESS=1 cargo nextest run \
             -E 'test(documented_schemas)' writes it)",
            path.display()
        );
    }
    let mut listed: Vec<String> = std::fs::read_dir(docs_dir())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter_map(|f| f.strip_suffix(".schema.json").map(str::to_owned))
        .collect();
    listed.sort();
    let mut names = names;
    names.sort();
    assert_eq!(listed, names, "docs/json/ holds a schema of no document");
}

/// The documents gathered by [`every_commands_json_validates`]: (schema name, document).
struct Cases {
    data: PathBuf,
    cases: Vec<(String, Value)>,
}

impl Cases {
    /// Run `tilegate --json ARGS`, require `code`, and keep its document for `schema`.
    fn run(&mut self, schema: &str, args: &[&str], code: i32) -> Value {
        let mut a = vec!["--json"];
        a.extend_from_slice(args);
        let out = tg(&self.data, &a, &[]);
        assert_eq!(
            out.status.code(),
            Some(code),
            "tilegate {a:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let doc: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
            panic!(
                "tilegate {a:?} printed no JSON document ({e}): {}",
                String::from_utf8_lossy(&out.stdout)
            )
        });
        self.cases.push((schema.to_owned(), doc.clone()));
        doc
    }
}

/// Every command, with `--json`, on the embedded backend: each document validates against the
/// schema of its command (a failure's against `error`), and every documented schema is used.
#[test]
fn every_commands_json_validates() {
    let tmp = tempdir();
    let dir = tmp.path();
    let data = dir.join("data");
    let scene = dir.join("scene.tif");
    sample(&data, &scene, 256, 7);
    let s = scene.to_str().unwrap();
    let mut c = Cases {
        data: data.clone(),
        cases: Vec::new(),
    };
    let job = planning_and_jobs(&mut c, dir, s);
    ingest(&mut c, dir, &data);
    ledger(&mut c, &job);
    dead_letters_and_announcements(&mut c, dir, &data, &job);
    demo_keys_and_service(&mut c, dir, &data);
    // Last: its tiles' windows stay on the queue.
    c.run(
        "product-plan",
        &[
            "product",
            "plan",
            "pj",
            s,
            "--grid",
            "utm:2km@10m",
            "--recipe",
            "mosaic",
        ],
        0,
    );
    // Nothing assembled yet: an index of no tile.
    c.run("product-index", &["product", "index", "pj"], 0);
    validate(&c, dir);
}

/// `sample-scene`, `init`, `recipes`, `plan` (with `--estimate` and `--from`), `run`,
/// `assemble` (of an incomplete job: exit 4), `repair`, `backfill`, `work`, `cleanup-uploads`,
/// `status`, `report`, `stac`. Returns the job that ran.
fn planning_and_jobs(c: &mut Cases, dir: &Path, s: &str) -> String {
    let other = dir.join("other.tif");
    c.run(
        "sample-scene",
        &["sample-scene", other.to_str().unwrap(), "--size", "128"],
        0,
    );
    c.run("init", &["init"], 0);
    c.run("recipes", &["recipes"], 0);
    c.run(
        "plan-estimate",
        &["plan", s, "--window", "128", "--estimate"],
        0,
    );
    // A job planned but not worked: assemble says it is incomplete (exit 4).
    let o = other.to_str().unwrap();
    let planned = c.run("plan", &["plan", o, "--window", "64"], 0);
    let pending = planned["job_id"].as_str().unwrap().to_owned();
    c.run("assemble", &["assemble", &pending], 4);
    c.run("assemble-all", &["assemble", "--all"], 0);
    c.run("work", &["work", "--until-empty"], 0);
    c.run("assemble-all", &["assemble", "--all"], 0);
    let list = dir.join("sources.txt");
    std::fs::write(&list, format!("{o}\n{}/missing.tif\n", dir.display())).unwrap();
    c.run(
        "plan-from",
        &["plan", "--from", list.to_str().unwrap(), "--window", "64"],
        1,
    );
    c.run(
        "run-from",
        &["run", "--from", list.to_str().unwrap(), "--window", "64"],
        1,
    );

    let run = c.run("run", &["run", s, "--window", "128"], 0);
    let job = run["job_id"].as_str().unwrap().to_owned();
    let copy = dir.join("named.tif");
    c.run(
        "run",
        &["run", s, "--window", "128", "-o", copy.to_str().unwrap()],
        0,
    );
    c.run("assemble", &["assemble", &job], 0);
    c.run("repair", &["repair", &job, "--window", "0_0"], 0);
    c.run("backfill", &["backfill", &job], 0);
    c.run("work", &["work", "--until-empty"], 0);
    c.run("cleanup-uploads", &["cleanup-uploads"], 0);
    c.run("status", &["status"], 0);
    c.run("status", &["status", &job, "--cost"], 0);
    let report = dir.join("report.html");
    c.run(
        "report",
        &["report", &job, "--out", report.to_str().unwrap()],
        0,
    );
    c.run("stac", &["stac", &job], 0);
    c.run("stac", &["stac"], 0);
    job
}

/// `ingest` of a watched directory: a scene planned, a file the filter leaves out.
fn ingest(c: &mut Cases, dir: &Path, data: &Path) {
    let inbox = dir.join("inbox");
    std::fs::create_dir_all(&inbox).unwrap();
    sample(data, &inbox.join("arrived.tif"), 128, 7);
    std::fs::write(inbox.join("readme.txt"), "not a scene").unwrap();
    let ingested = c.run(
        "ingest",
        &[
            "ingest",
            "--watch",
            inbox.to_str().unwrap(),
            "--key-suffix",
            ".tif",
            "--window",
            "64",
            "--until-idle",
            "--poll-s",
            "0.1",
            "--settle",
            "0.5",
        ],
        0,
    );
    assert_eq!(ingested["planned"], 1, "{ingested}");
    assert_eq!(ingested["skipped"], 1, "{ingested}");
    c.run("work", &["work", "--until-empty"], 0);
}

/// The ledger: a regenerated window, accepted, held, listed, collected; a URL of it.
fn ledger(c: &mut Cases, job: &str) {
    let regen = c.run(
        "regenerate",
        &["regenerate", job, "--window", "0_1", "--retain", "1h"],
        0,
    );
    let attempt = regen["attempt"].as_str().unwrap().to_owned();
    c.run(
        "regenerate",
        &["regenerate", job, "--window", "1_1", "--enqueue"],
        0,
    );
    c.run("work", &["work", "--until-empty"], 0);
    c.run(
        "accept",
        &["accept", job, "--window", "0_1", "--attempt", &attempt],
        0,
    );
    c.run(
        "hold",
        &["hold", job, "--window", "0_1", "--attempt", &attempt],
        0,
    );
    c.run("attempts", &["attempts", job], 0);
    c.run("gc", &["gc"], 0);
    c.run("gc", &["gc", "--dry-run"], 0);
    c.run("reconcile", &["reconcile", job], 0);
    c.run(
        "url",
        &["url", job, "--window", "0_1", "--tenant", "default"],
        0,
    );
}

/// Dead letters: the source changes under a planned job, so every window is refused; its
/// announcement, the reconciler's pass, `dlq`, and `status --watch`.
fn dead_letters_and_announcements(c: &mut Cases, dir: &Path, data: &Path, job: &str) {
    let changing = dir.join("changing.tif");
    sample(data, &changing, 128, 5);
    let planned = c.run(
        "plan",
        &["plan", changing.to_str().unwrap(), "--window", "64"],
        0,
    );
    let dead_job = planned["job_id"].as_str().unwrap().to_owned();
    sample(data, &changing, 128, 6);
    c.run("work", &["work", "--until-empty"], 0);
    c.run("status", &["status", &dead_job], 0);
    // The job's `incomplete` announcement, delivered to a webhook.
    let hook = tilegate_tests::webhook::WebhookReceiver::start();
    c.run(
        "announce",
        &["announce", &dead_job, "--announce", hook.url.as_str()],
        0,
    );
    assert_eq!(hook.received().len(), 1);
    // The reconciler's pass: the jobs above are published or incomplete and announced.
    c.run(
        "reconcile-jobs",
        &["reconcile-jobs", "--once", "--announce", hook.url.as_str()],
        0,
    );
    c.run("status", &["status", &dead_job], 0);
    c.run("dlq-list", &["dlq", "list"], 0);
    c.run("dlq-list", &["dlq", "list", "--job", &dead_job], 0);
    c.run("dlq-redrive", &["dlq", "redrive", "--job", &dead_job], 0);
    c.run("dlq-purge", &["dlq", "purge", "--job", &dead_job], 0);
    // `status --watch --json` prints a frame a line; a finished job prints one.
    let out = tg(data, &["--json", "status", job, "--watch"], &[]);
    assert!(out.status.success());
    for line in String::from_utf8(out.stdout).unwrap().lines() {
        c.cases.push((
            "status-watch".to_owned(),
            serde_json::from_str(line).unwrap(),
        ));
    }
}

/// `demo`, the service's keys, what `serve` prints once it listens, and a failure's document.
fn demo_keys_and_service(c: &mut Cases, dir: &Path, data: &Path) {
    c.run("demo", &["demo", "--size", "256"], 0);
    // The service's keys, and what `serve` prints once it listens.
    let made = c.run("keys-create", &["keys", "create", "--tenant", "acme"], 0);
    let id = made["key_id"].as_str().unwrap().to_owned();
    let rotated = c.run("keys-create", &["keys", "rotate", &id], 0);
    let new_id = rotated["key_id"].as_str().unwrap().to_owned();
    c.run("keys-list", &["keys", "list"], 0);
    c.run("keys-revoke", &["keys", "revoke", &new_id], 0);
    let mut serve = Command::new(tilegate_bin());
    serve.arg("--data").arg(data);
    let server = tilegate_tests::service::Server::start(serve, &[], dir.join("serve.log"));
    c.cases.push(("serve".to_owned(), server.listening.clone()));
    drop(server);
    // A failure's document.
    c.run("error", &["status", "zzzz"], 1);
}

/// Every schema was used, and every document validates against its schema.
fn validate(c: &Cases, dir: &Path) {
    let used: std::collections::BTreeSet<&str> = c.cases.iter().map(|(n, _)| n.as_str()).collect();
    for name in schema_names() {
        assert!(
            used.contains(name.as_str()),
            "no document of `{name}` was validated"
        );
    }
    let cases: Vec<Value> = c
        .cases
        .iter()
        .enumerate()
        .map(|(i, (name, doc))| {
            json!({
                "name": format!("#{i} {name}"),
                "schema": docs_dir().join(format!("{name}.schema.json")),
                "doc": doc,
            })
        })
        .collect();
    let file = dir.join("cases.json");
    std::fs::write(&file, serde_json::to_vec(&cases).unwrap()).unwrap();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../.ci/json-validate");
    let out = Command::new("bash")
        .arg(script)
        .arg(&file)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

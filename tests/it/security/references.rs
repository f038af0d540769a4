//! One parse of every reference (issue 45, items 1–3): the policy, tilegate's HTTP client,
//! GDAL, the job row, messages and announcements all get the reference's canonical form, and a
//! reference two parsers would read differently is refused by name, not repaired.
//!
//! Each attack names an address or bucket the policy allows and, behind a character that one
//! parser reads and another does not, one it refuses; the refused one records every request
//! it gets, and must get none.

use std::io::{BufRead as _, BufReader, Write as _};
use std::net::TcpListener;
use std::path::Path;
use std::process::{Command, Output};
use std::sync::{Arc, Mutex, PoisonError};
use tilegate_core::object::ObjectStoreExt as _;
use tilegate_tests::service::Server;
use tilegate_tests::{Target, sample, tempdir, tilegate_bin};

/// A server on `ip` that answers every request `200` with `body`, an ETag and a length (as an
/// attacker's public object would), and records each request line.
struct Recorder {
    port: u16,
    seen: Arc<Mutex<Vec<String>>>,
}

impl Recorder {
    fn start(ip: &str, body: Vec<u8>) -> Self {
        let listener = TcpListener::bind((ip, 0)).expect("bind the recorder");
        let port = listener.local_addr().unwrap().port();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let log = Arc::clone(&seen);
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                let Ok(mut conn) = conn else { continue };
                let mut reader = BufReader::new(conn.try_clone().unwrap());
                let mut line = String::new();
                if reader.read_line(&mut line).is_err() {
                    continue;
                }
                loop {
                    let mut h = String::new();
                    if reader.read_line(&mut h).map_or(true, |n| n == 0) || h == "\r\n" {
                        break;
                    }
                }
                log.lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .push(line.trim_end().to_owned());
                let head = format!(
                    "HTTP/1.1 200 OK\r\netag: \"attacker\"\r\ncontent-length: {}\r\n\
                     accept-ranges: bytes\r\nconnection: close\r\n\r\n",
                    body.len()
                );
                let _ = conn.write_all(head.as_bytes());
                if !line.starts_with("HEAD ") {
                    let _ = conn.write_all(&body);
                }
            }
        });
        Self { port, seen }
    }

    fn seen(&self) -> Vec<String> {
        self.seen
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

/// A policy that allows 127.0.0.1 (named as a host, so that a tenant's document may reach it)
/// and no other loopback address.
fn allow_one_address(dir: &Path) -> std::path::PathBuf {
    let policy = dir.join("policy.toml");
    std::fs::write(
        &policy,
        "hosts = [\"127.0.0.1\"]\nallow_addresses = [\"127.0.0.1/32\"]\n",
    )
    .unwrap();
    policy
}

fn tg(data: &Path, policy: &Path, args: &[&str]) -> Output {
    Command::new(tilegate_bin())
        .arg("--data")
        .arg(data)
        .args(args)
        .env("TILEGATE_SOURCE_POLICY", policy)
        .env_remove("TILEGATE_LOG")
        .env_remove("RUST_LOG")
        .output()
        .expect("run tilegate")
}

/// `http://ALLOWED\@REFUSED/x.tif`: the URL parser reads the host before the backslash, curl
/// (GDAL) the one after it. Planned from the command line it is refused as `malformed` before
/// any request; neither server hears of it.
#[test]
fn a_backslash_in_the_authority_reaches_neither_address_from_the_cli() {
    let tmp = tempdir();
    let scene = tmp.path().join("scene.tif");
    sample(tmp.path(), &scene, 256, 3);
    let bytes = std::fs::read(&scene).unwrap();
    let allowed = Recorder::start("127.0.0.1", bytes.clone());
    let refused = Recorder::start("127.0.0.2", bytes);
    let policy = allow_one_address(tmp.path());
    let url = format!(
        "http://127.0.0.1:{}\\@127.0.0.2:{}/x.tif",
        allowed.port, refused.port
    );
    let data = tmp.path().join("data");
    let out = tg(&data, &policy, &["plan", &url, "--window", "128"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "planned: {stderr}");
    assert!(stderr.contains("error[source-forbidden]"), "{stderr}");
    assert!(stderr.contains("(malformed)"), "{stderr}");
    assert!(stderr.contains("backslash"), "{stderr}");
    assert_eq!(
        refused.seen(),
        Vec::<String>::new(),
        "GDAL read the refused address"
    );
    assert_eq!(
        allowed.seen(),
        Vec::<String>::new(),
        "a request before the refusal"
    );
    // The refused address named plainly: refused by the policy, as it always was.
    let plain = tg(
        &data,
        &policy,
        &[
            "plan",
            &format!("http://127.0.0.2:{}/x.tif", refused.port),
            "--window",
            "128",
        ],
    );
    let stderr = String::from_utf8_lossy(&plain.stderr);
    assert!(stderr.contains("(host)"), "{stderr}");
    assert!(refused.seen().is_empty());
}

/// The same reference sent to `POST /v1/jobs` by a tenant: `422 source-forbidden` naming the
/// rule, nothing of GDAL's (no status or error chain of the address behind it: no port and
/// status oracle), and no request to either server.
#[test]
fn a_backslash_in_the_authority_reaches_neither_address_from_the_service() {
    let tmp = tempdir();
    let scene = tmp.path().join("scene.tif");
    sample(tmp.path(), &scene, 256, 3);
    let bytes = std::fs::read(&scene).unwrap();
    let allowed = Recorder::start("127.0.0.1", bytes.clone());
    let refused = Recorder::start("127.0.0.2", bytes);
    let policy = allow_one_address(tmp.path());
    let data = tmp.path().join("data");
    std::fs::create_dir_all(&data).unwrap();
    let mut create = Target::Embedded.command(&data);
    create
        .env("TILEGATE_SOURCE_POLICY", &policy)
        .args(["--json", "keys", "create", "--tenant", "a"]);
    let created: serde_json::Value =
        serde_json::from_slice(&create.output().unwrap().stdout).unwrap();
    let key = created["key"].as_str().unwrap().to_owned();
    let mut cmd = Target::Embedded.command(&data);
    cmd.env("TILEGATE_SOURCE_POLICY", &policy);
    let server = Server::start(cmd, &[], tmp.path().join("serve.log"));
    let source = format!(
        "http://127.0.0.1:{}\\@127.0.0.2:{}/x.tif",
        allowed.port, refused.port
    );
    let r = server.call(
        "POST",
        "/v1/jobs",
        Some(&key),
        Some(&serde_json::json!({ "source": source })),
    );
    let body = r.text();
    assert_eq!(r.status, 422, "{body}");
    assert_eq!(r.json()["error"], "source-forbidden", "{body}");
    assert!(body.contains("malformed"), "{body}");
    // The caller's own string comes back; nothing that reading it would have said (its own
    // ports taken out first: a port such as 44041 holds `404`).
    let said = body
        .replace(&allowed.port.to_string(), "PORT")
        .replace(&refused.port.to_string(), "PORT");
    for gdal in ["GDAL", "HTTP", "vsicurl", "curl", "Range", "404", "connect"] {
        assert!(!said.contains(gdal), "`{gdal}` in {body}");
    }
    assert!(refused.seen().is_empty(), "GDAL read the refused address");
    assert!(allowed.seen().is_empty(), "a request before the refusal");
    let listed = server.call("GET", "/v1/jobs", Some(&key), None).json();
    assert_eq!(listed["jobs"], serde_json::json!([]), "{listed}");
}

/// `gs://allowed/../victim/…` and `az://account/allowed/../victim/…`: the policy allows the
/// first bucket (container); GDAL would collapse the `..` and read the second with this
/// deployment's token. Both stores serve the victim's object; the reference is refused as
/// `malformed` and nothing is written.
fn dot_segments_leave_no_bucket(allowed: &str, victim: &str) {
    let tmp = tempdir();
    let src = tmp.path().join("scene.tif");
    sample(tmp.path(), &src, 256, 5);
    let rt = tokio::runtime::Runtime::new().unwrap();
    for (i, bucket) in [allowed, victim].into_iter().enumerate() {
        let init = Command::new(tilegate_bin())
            .arg("--data")
            .arg(tmp.path().join(format!("init-{i}")))
            .args(["--objects", bucket, "init", "--create-bucket"])
            .output()
            .unwrap();
        assert!(
            init.status.success(),
            "init {bucket}: {}",
            String::from_utf8_lossy(&init.stderr)
        );
    }
    rt.block_on(async {
        let s = tilegate_backends::open_objects(victim).await.unwrap();
        let bytes = bytes::Bytes::from(std::fs::read(&src).unwrap());
        s.put_create(&tilegate_tests::object_key("scenes/scene.tif"), bytes)
            .await
            .unwrap();
    });
    let policy = tmp.path().join("policy.toml");
    std::fs::write(&policy, format!("buckets = [\"{allowed}\"]\n")).unwrap();
    // `gs://allowed/../victim/scenes/scene.tif`; for Azure the container is the bucket.
    let victim_tail = victim.rsplit('/').next().unwrap();
    let uri = format!("{allowed}/../{victim_tail}/scenes/scene.tif");
    let data = tmp.path().join("data");
    let out = tg(&data, &policy, &["--json", "run", &uri, "--window", "128"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "ran: {stderr}");
    assert!(stderr.contains("error[source-forbidden]"), "{stderr}");
    assert!(stderr.contains("(malformed)"), "{stderr}");
    let written: Vec<_> = walkdir(&data.join("objects"));
    assert!(written.is_empty(), "outputs written: {written:?}");
    // The victim's object named plainly is refused by the bucket rule, as it always was.
    let plain = tg(
        &data,
        &policy,
        &[
            "run",
            &format!("{victim}/scenes/scene.tif"),
            "--window",
            "128",
        ],
    );
    let stderr = String::from_utf8_lossy(&plain.stderr);
    assert!(stderr.contains("(bucket)"), "{stderr}");
}

fn walkdir(dir: &Path) -> Vec<std::path::PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    entries
        .flatten()
        .flat_map(|e| {
            let p = e.path();
            if p.is_dir() { walkdir(&p) } else { vec![p] }
        })
        .collect()
}

#[test]
fn dot_segments_in_a_gs_key_leave_no_bucket() {
    let _ = tilegate_tests::gcs_emulator();
    dot_segments_leave_no_bucket(
        &format!("gs://{}", tilegate_tests::unique("tg-allowed")),
        &format!("gs://{}", tilegate_tests::unique("tg-victim")),
    );
}

#[test]
fn dot_segments_in_an_az_key_leave_no_container() {
    let account = tilegate_tests::azure_emulator();
    dot_segments_leave_no_bucket(
        &format!(
            "az://{}/{}",
            account.name,
            tilegate_tests::unique("tg-allowed")
        ),
        &format!(
            "az://{}/{}",
            account.name,
            tilegate_tests::unique("tg-victim")
        ),
    );
}

/// A STAC Item read through a presigned URL: the signature is used for that one GET and is
/// nowhere after — not in the job row, its ID, any message, any dead letter, the webhook's
/// bodies, `status`, or the log at `-vv`.
#[test]
fn a_presigned_item_url_keeps_its_credentials_in_the_process() {
    let tmp = tempdir();
    let www = tmp.path().join("www");
    std::fs::create_dir_all(&www).unwrap();
    sample(tmp.path(), &www.join("B04.tif"), 256, 21);
    sample(tmp.path(), &www.join("B08.tif"), 256, 22);
    let item = serde_json::json!({
        "type": "Feature", "stac_version": "1.0.0", "id": "scene-1",
        "geometry": null, "properties": {"datetime": "2026-12-01T00:00:00Z"},
        "links": [],
        "assets": {"B04": {"href": "./B04.tif"}, "B08": {"href": "B08.tif"}}
    });
    std::fs::write(www.join("item.json"), item.to_string()).unwrap();
    let server = tilegate_tests::HttpServer::start(&www);
    let secret = "c2lnbmF0dXJlLW5vdC10by1rZWVw";
    let url = format!(
        "{}?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=AKIAITEMEXAMPLE%2F20261207\
         &X-Amz-Signature={secret}&X-Amz-Expires=600",
        server.url("item.json")
    );
    let hook = tilegate_tests::webhook::WebhookReceiver::start();
    let data = tmp.path().join("data");
    let run = |args: &[&str]| {
        Command::new(tilegate_bin())
            .arg("--data")
            .arg(&data)
            .arg("-vv")
            .args(args)
            .env("TILEGATE_WEBHOOK_SECRET", "s3cret")
            .env("TILEGATE_TEST_WEBHOOK_BACKOFF_MS", "20")
            .env_remove("TILEGATE_LOG")
            .env_remove("RUST_LOG")
            .output()
            .expect("run tilegate")
    };
    let plan = run(&[
        "--json", "plan", &url, "--assets", "B04,B08", "--window", "128",
    ]);
    assert!(
        plan.status.success(),
        "{}",
        String::from_utf8_lossy(&plan.stderr)
    );
    let doc: serde_json::Value = serde_json::from_slice(&plan.stdout).unwrap();
    let job = doc["job_id"].as_str().unwrap().to_owned();
    // One band changes under the job: its windows are dead-lettered (their messages kept in the
    // dead-letter queue) and the job is announced `incomplete`.
    sample(tmp.path(), &www.join("B08.tif"), 256, 23);
    let work = run(&[
        "--json",
        "work",
        "--until-empty",
        "--assemble",
        "--announce",
        hook.url.as_str(),
    ]);
    let status = run(&["--json", "status", &job]);
    let st: serde_json::Value = serde_json::from_slice(&status.stdout).unwrap();
    assert_eq!(st["lifecycle"], "incomplete", "{st}");
    assert_eq!(st["source"], server.url("item.json"), "{st}");
    let dlq = run(&["--json", "dlq", "list"]);
    let delivered = hook.received();
    assert!(!delivered.is_empty(), "nothing announced");
    let mut seen = Vec::new();
    for out in [&plan, &work, &status, &dlq] {
        seen.extend_from_slice(&out.stdout);
        seen.extend_from_slice(&out.stderr);
    }
    for d in &delivered {
        seen.extend_from_slice(&d.body);
    }
    let db = std::fs::read(data.join("tilegate.db")).unwrap();
    for (what, text) in [
        ("outputs, logs and the webhook's bodies", &seen[..]),
        ("the database (job row, messages, dead letters)", &db[..]),
        ("the job ID", job.as_bytes()),
    ] {
        for needle in [
            secret,
            "AKIAITEMEXAMPLE",
            "X-Amz-Signature",
            "X-Amz-Credential",
        ] {
            let found = text.windows(needle.len()).any(|w| w == needle.as_bytes());
            assert!(!found, "`{needle}` is in {what}");
        }
    }
    let dead: serde_json::Value = serde_json::from_slice(&dlq.stdout).unwrap();
    assert!(
        dead.to_string().contains("source-changed"),
        "no dead letters to look in: {dead}"
    );
}

//! The job service costs and shows a tenant its own: its listing and its jobs-in-flight cap
//! are read through the jobs table's tenant index (right past 10,000 other tenants' jobs), a
//! status never reads the shared dead-letter queue or shows the work queue's depth to a
//! tenant, an event stream is charged per look, capped per tenant and ended by a revocation,
//! and a credential proves only what it should (`nbf`, the reserved tenant `default`, a
//! subject that cannot forge an audit line).

use crate::interfaces::service::{AUDIENCE, Deployment, ISSUER, key};
use serde_json::{Value, json};
use std::io::{Read as _, Write as _};
use std::time::{Duration, Instant};
use tilegate_core::grid::Grid;
use tilegate_core::keys::Prefix;
use tilegate_core::recipe::Recipe;
use tilegate_core::source::{SceneMeta, SourceInfo};
use tilegate_core::table::JobRecord;
use tilegate_core::{ETag, JobId, Tenant};
use tilegate_tests::Target;
use tilegate_tests::service::epoch_s;

/// A job row of `tenant`'s, made without planning (a source nobody reads).
fn row(tenant: &str, n: usize, created_at: i64) -> JobRecord {
    let recipe = Recipe::copy_all();
    let tenant = Tenant::parse(tenant).unwrap();
    let source = SourceInfo {
        uri: format!("https://imagery.example/{tenant}/{n}.tif"),
        etag: ETag::new("\"e\""),
        size: 4096,
        stat: None,
        assets: Vec::new(),
        signed: false,
    };
    let prefix = tenant.root(&Prefix::default()).unwrap();
    JobRecord {
        job_id: JobId::of(&source, &recipe, &prefix, &tenant),
        source,
        recipe,
        grid: Grid::new(1024, 1024, 512).unwrap(),
        prefix,
        tenant,
        scene: SceneMeta {
            width: 1024,
            height: 1024,
            bands: 1,
            dtype: "Byte".to_owned(),
            crs_wkt: String::new(),
            geotransform: [0.0, 10.0, 0.0, 0.0, 0.0, -10.0],
            nodata: None,
            placement: None,
            datetime: None,
        },
        created_at,
        scene_output: None,
        manifest_shards: 1,
        redrives: 0,
        outbox: Vec::new(),
        windows_enqueued: false,
        settled: false,
    }
}

/// Write `jobs` into the deployment's job table directly (many at once).
fn insert(d: &Deployment, jobs: Vec<JobRecord>) {
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let b = d.target.backends(&d.data).await;
        let b = &b;
        futures::future::join_all(jobs.chunks(500).map(|chunk| async move {
            for j in chunk {
                b.jobs.create_job(j).await.unwrap();
            }
        }))
        .await;
    });
}

fn job_ids(r: &tilegate_tests::service::Reply) -> Vec<String> {
    assert_eq!(r.status, 200, "{}", r.text());
    r.json()["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| j["job_id"].as_str().unwrap().to_owned())
        .collect()
}

/// Tenant A's one unpublished job is older than 10,001 jobs of other tenants: A's listing
/// still holds it, and A's cap of one job in flight still counts it (the service used to read
/// the newest 10,000 rows of every tenant and filter after the cut).
#[test]
fn a_tenants_listing_and_cap_are_right_past_10000_other_jobs() {
    let d = Deployment::new(
        Target::Embedded,
        &["--rate-limit", "0", "--max-jobs-in-flight", "1"],
    );
    let now = tilegate_core::now_millis();
    let mine = row("a", 0, now - 86_400_000);
    let mut jobs = vec![mine.clone()];
    jobs.extend((0..10_001).map(|n| row(&format!("t{}", n % 97), n, now - 1000 + n as i64)));
    let started = Instant::now();
    insert(&d, jobs);
    println!("10,002 job rows written in {:?}", started.elapsed());

    let listed = job_ids(&d.call("GET", "/v1/jobs", Some(&d.key_a), None));
    assert_eq!(listed, vec![mine.job_id.to_string()]);
    let listed = job_ids(&d.call("GET", "/v1/jobs", Some(&d.token_a), None));
    assert_eq!(listed, vec![mine.job_id.to_string()]);
    // B has none; the operator's newest 1,000 are other tenants'.
    assert!(job_ids(&d.call("GET", "/v1/jobs", Some(&d.key_b), None)).is_empty());
    assert_eq!(
        job_ids(&d.call("GET", "/v1/jobs?limit=1000", Some(&d.key_operator), None)).len(),
        1000
    );
    // A's one job in flight is counted: a new one waits (nothing planned, nothing read).
    let r = d.call(
        "POST",
        "/v1/jobs",
        Some(&d.key_a),
        Some(&json!({"source": format!("{}scene.tif", d.source)})),
    );
    assert_eq!(r.status, 429, "{}", r.text());
    assert_eq!(r.json()["error"], "too-many-jobs-in-flight");
    assert!(r.header("retry-after").is_some());
    // B, with none in flight, plans.
    d.plan(&d.key_b, "scene.tif");
}

/// A tenant's status is its job's rows and counters: dead letters counted from the job's own
/// counters, none read from the shared queue, and no queue depth (every job's) shown to it.
/// The operator sees the depth.
#[test]
fn a_tenants_status_reads_no_shared_queue() {
    let d = Deployment::new(Target::Embedded, &["--rate-limit", "0"]);
    let job = d.plan(&d.key_a, "scene.tif")["job"]["job_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let job_id = JobId::parse(&job).unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let b = d.target.backends(&d.data).await;
        // Another job's letter in the dead-letter queue, and A's job's dead letter counted.
        b.queue
            .send_batch(&[json!({"job_id": "0".repeat(64), "window": [0, 0]}).to_string()])
            .await
            .unwrap();
        let got = b
            .queue
            .receive(tilegate_core::queue::ReceiveOptions {
                max: 10,
                wait: Duration::from_secs(1),
                ..Default::default()
            })
            .await
            .unwrap();
        for m in got
            .iter()
            .filter(|m| !m.body.contains(&format!("\"{job}\"")))
        {
            b.queue
                .dead_letter(m, "source-changed: another tenant's")
                .await
                .unwrap();
        }
        b.counters
            .add_counters(
                &job_id,
                &[
                    ("dead_lettered_total", 1),
                    ("dead_lettered_total{reason=\"source-changed\"}", 1),
                ],
            )
            .await
            .unwrap();
    });
    let st = d.call("GET", &format!("/v1/jobs/{job}"), Some(&d.key_a), None);
    assert_eq!(st.status, 200, "{}", st.text());
    let st = st.json();
    assert_eq!(
        st["queue"],
        Value::Null,
        "a tenant sees no queue depth: {st}"
    );
    assert_eq!(st["dead_letters_for_job"], 1);
    assert_eq!(st["dead_letters_by_reason"], json!({"source-changed": 1}));
    assert_eq!(st["dead_letters"], json!([]));
    assert_eq!(st["window_states"]["dead_lettered"], 1);
    let report = d.call(
        "GET",
        &format!("/v1/jobs/{job}/report"),
        Some(&d.key_a),
        None,
    );
    assert_eq!(report.status, 200);
    assert!(!report.text().contains("another tenant"));
    let op = d.call(
        "GET",
        &format!("/v1/jobs/{job}"),
        Some(&d.key_operator),
        None,
    );
    assert!(
        op.json()["queue"]["dead"].as_u64().is_some(),
        "{}",
        op.text()
    );
}

/// Open an event stream on a socket of its own and read its head; the socket stays open.
fn open_stream(addr: &str, path: &str, auth: &str) -> (u16, std::net::TcpStream, String) {
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nhost: {addr}\r\nauthorization: Bearer {auth}\r\n\r\n"
    )
    .unwrap();
    let mut head = Vec::new();
    let mut b = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        assert_eq!(
            s.read(&mut b).unwrap(),
            1,
            "the server closed the connection"
        );
        head.push(b[0]);
    }
    let head = String::from_utf8_lossy(&head).to_ascii_lowercase();
    let status = head[9..12].parse().unwrap();
    (status, s, head)
}

/// Read a stream to its end; how long that took.
fn read_to_end(mut s: std::net::TcpStream) -> Duration {
    let started = Instant::now();
    let mut buf = [0u8; 4096];
    loop {
        match s.read(&mut buf) {
            Ok(0) => return started.elapsed(),
            Ok(_) => {
                // The last chunk ends a response whose connection the server keeps.
                if buf.windows(5).any(|w| w == b"0\r\n\r\n") {
                    return started.elapsed();
                }
            }
            Err(e) => panic!("the stream did not end: {e}"),
        }
    }
}

/// Each look of an event stream is one of the tenant's requests: with two streams open at
/// one look a second each, A's bucket (1 request a second) stays empty, and A's own request is
/// refused while B's is not (streams used to be charged once, when they opened).
#[test]
fn event_streams_are_charged_per_look() {
    let d = Deployment::new(Target::Embedded, &["--rate-limit", "1"]);
    let job = d.plan(&d.key_a, "scene.tif")["job"]["job_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let events = format!("/v1/jobs/{job}/events?interval_ms=1000");
    std::thread::sleep(Duration::from_secs(3));
    let (status, first, _) = open_stream(&d.server.addr, &events, &d.key_a);
    assert_eq!(status, 200);
    let (status, second, _) = open_stream(&d.server.addr, &events, &d.token_a);
    assert_eq!(status, 200);
    std::thread::sleep(Duration::from_millis(4500));
    let r = d.call("GET", "/v1/jobs", Some(&d.key_a), None);
    assert_eq!(r.status, 429, "looks are charged: {}", r.text());
    assert_eq!(r.json()["error"], "rate-limited");
    assert_eq!(d.call("GET", "/v1/jobs", Some(&d.key_b), None).status, 200);
    drop((first, second));
}

/// A look at most once a second; at most `--max-streams-per-tenant` streams of a tenant open
/// (`429 too-many-streams` with Retry-After; another tenant's are its own); and a key revoked
/// while its stream is open ends the stream at its next look (streams used to run on to
/// their longest).
#[test]
fn event_streams_are_capped_and_end_on_revocation() {
    let d = Deployment::new(
        Target::Embedded,
        &[
            "--rate-limit",
            "0",
            "--max-streams-per-tenant",
            "2",
            "--max-stream",
            "40s",
        ],
    );
    let job = d.plan(&d.key_a, "scene.tif")["job"]["job_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let events = format!("/v1/jobs/{job}/events");
    let r = d.call(
        "GET",
        &format!("{events}?interval_ms=100"),
        Some(&d.key_a),
        None,
    );
    assert_eq!(r.status, 400, "{}", r.text());
    assert_eq!(r.json()["error"], "bad-request");

    let (status, first, _) = open_stream(&d.server.addr, &events, &d.key_a);
    assert_eq!(status, 200);
    let (status, second, _) = open_stream(&d.server.addr, &events, &d.token_a);
    assert_eq!(status, 200);
    let (status, mut third, head) = open_stream(&d.server.addr, &events, &d.key_a);
    assert_eq!(status, 429, "{head}");
    assert!(head.contains("retry-after:"), "{head}");
    let mut body = [0u8; 512];
    let n = third.read(&mut body).unwrap();
    let body = String::from_utf8_lossy(&body[..n]);
    assert!(body.contains("too-many-streams"), "{body}");
    let b_job = d.plan(&d.key_b, "other.tif")["job"]["job_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let (status, b_stream, _) = open_stream(
        &d.server.addr,
        &format!("/v1/jobs/{b_job}/events"),
        &d.key_b,
    );
    assert_eq!(status, 200);
    drop((first, second, b_stream));

    // Tenant C's key, revoked while C's stream is open.
    let fresh = key(&d.target, &d.data, &["--tenant", "c"]);
    let c_job = d.plan(&fresh, "scene.tif")["job"]["job_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let (status, stream, _) =
        open_stream(&d.server.addr, &format!("/v1/jobs/{c_job}/events"), &fresh);
    assert_eq!(status, 200);
    let ended = std::thread::spawn(move || read_to_end(stream));
    std::thread::sleep(Duration::from_secs(2));
    let id = fresh.split('_').nth(1).unwrap();
    let revoked_at = Instant::now();
    d.target.json(&d.data, &["keys", "revoke", id]);
    let lasted = ended.join().unwrap();
    let after = revoked_at.elapsed();
    assert!(
        after < Duration::from_secs(10) && lasted < Duration::from_secs(15),
        "the stream outlived its key's revocation by {after:?}"
    );
}

/// A token is good from its `nbf` (with the leeway `exp` has), not from when it was signed.
#[test]
fn a_token_before_its_nbf_proves_nothing() {
    let d = Deployment::new(Target::Embedded, &["--rate-limit", "0"]);
    let now = epoch_s();
    let token = |nbf: i64| {
        d.issuer
            .token(&json!({"iss": ISSUER, "aud": AUDIENCE, "sub": "user-a",
            "tenant": "a", "iat": now, "nbf": nbf, "exp": now + 3600}))
    };
    let r = d.call("GET", "/v1/jobs", Some(&token(now + 600)), None);
    assert_eq!(r.status, 401, "{}", r.text());
    assert_eq!(r.json()["error"], "unauthenticated");
    assert_eq!(
        d.call("GET", "/v1/jobs", Some(&token(now - 60)), None)
            .status,
        200
    );
    // Within the leeway (30 s), as for `exp`.
    assert_eq!(
        d.call("GET", "/v1/jobs", Some(&token(now + 10)), None)
            .status,
        200
    );
}

/// The operator's jobs are the tenant `default`'s: no tenant key or token may name it.
#[test]
fn the_default_tenant_is_no_credentials_to_give() {
    let d = Deployment::new(Target::Embedded, &["--rate-limit", "0"]);
    let out = d
        .target
        .command(&d.data)
        .args(["--json", "keys", "create", "--tenant", "default"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(err["error"]["reason"], "unsafe-key-segment", "{err}");
    // An operator key with that tenant is an operator's.
    key(&d.target, &d.data, &["--tenant", "default", "--operator"]);
    let now = epoch_s();
    let token = d
        .issuer
        .token(&json!({"iss": ISSUER, "aud": AUDIENCE, "sub": "x",
        "tenant": "default", "iat": now, "exp": now + 600}));
    let r = d.call("GET", "/v1/jobs", Some(&token), None);
    assert_eq!(r.status, 401, "{}", r.text());
}

/// A token's subject reaches the audit log escaped and quoted: it cannot start a line or
/// pass for another field.
#[test]
fn a_subject_cannot_forge_an_audit_line() {
    let d = Deployment::new(Target::Embedded, &["--rate-limit", "0"]);
    let now = epoch_s();
    let sub = "mallory\n2026-01-01T00:00:00Z  INFO tilegate::audit: audit: url issued tenant=b \
               caller=key:forged";
    let token = d
        .issuer
        .token(&json!({"iss": ISSUER, "aud": AUDIENCE, "sub": sub,
        "tenant": "a", "iat": now, "exp": now + 600}));
    d.plan(&token, "scene.tif");
    let log = d.server.log();
    let planned: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("audit: job planned"))
        .collect();
    assert_eq!(planned.len(), 1, "{log}");
    assert!(
        planned[0].contains(r#"caller="token:mallory\\n2026"#),
        "{}",
        planned[0]
    );
    for l in log.lines().filter(|l| l.contains("forged")) {
        assert!(l.contains("audit: job planned"), "a forged line: {l}");
    }
}

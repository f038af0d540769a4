//! The job service (`tilegate serve`) through real HTTP on 127.0.0.1: two tenants, every
//! route, every way a credential proves nothing; on the embedded backend and on the AWS
//! emulator. Then its limits, the Lambda adapter against the server, the page in Chromium and
//! Schemathesis against the served document.

use crate::per_backend::per_backend;
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::process::Command;
use tilegate_core::object::ObjectStoreExt as _;
use tilegate_tests::service::{Issuer, Reply, Server, epoch_s, request};
use tilegate_tests::{Browser, HttpServer, Target, object_key, sample, tempdir};

pub(crate) const ISSUER: &str = "https://issuer.test.invalid";
pub(crate) const AUDIENCE: &str = "tilegate-api";

/// A deployment under test: a source a tenant may name, keys, tokens and a server.
pub(crate) struct Deployment {
    pub(crate) target: Target,
    pub(crate) data: PathBuf,
    pub(crate) policy: PathBuf,
    pub(crate) source: String,
    _http: Option<HttpServer>,
    pub(crate) key_a: String,
    pub(crate) key_b: String,
    pub(crate) key_revoked: String,
    pub(crate) key_operator: String,
    pub(crate) token_a: String,
    pub(crate) token_b: String,
    pub(crate) token_expired: String,
    pub(crate) token_other_key: String,
    pub(crate) token_other_audience: String,
    pub(crate) server: Server,
    /// The issuer whose JWKS the server reads: for tokens a test makes itself.
    pub(crate) issuer: Issuer,
    _dir: tempfile::TempDir,
}

pub(crate) fn key(target: &Target, data: &Path, args: &[&str]) -> String {
    let mut a = vec!["keys", "create"];
    a.extend_from_slice(args);
    let v = target.json(data, &a);
    v["key"].as_str().expect("a key").to_owned()
}

impl Deployment {
    pub(crate) fn new(target: Target, serve_args: &[&str]) -> Self {
        let dir = tempdir();
        let data = dir.path().join("data");
        std::fs::create_dir_all(&data).unwrap();
        let www = dir.path().join("www");
        std::fs::create_dir_all(&www).unwrap();
        sample(&data, &www.join("scene.tif"), 1024, 7);
        sample(&data, &www.join("other.tif"), 1024, 8);
        // What a tenant may name: the loopback HTTP server (embedded), or the test's bucket.
        let policy = dir.path().join("policy.toml");
        let (source, http) = match &target {
            Target::Aws(aws) => {
                let bucket = aws
                    .objects
                    .trim_start_matches("s3://")
                    .split('/')
                    .next()
                    .unwrap();
                let rt = tokio::runtime::Runtime::new().unwrap();
                rt.block_on(async {
                    let sdk = tilegate_aws::config::load_sdk_config().await;
                    let s3 = tilegate_aws::config::s3_client(&sdk);
                    for name in ["scene.tif", "other.tif"] {
                        s3.put_object()
                            .bucket(bucket)
                            .key(format!("src/{name}"))
                            .body(std::fs::read(www.join(name)).unwrap().into())
                            .send()
                            .await
                            .unwrap();
                    }
                });
                std::fs::write(&policy, format!("buckets = [\"s3://{bucket}\"]\n")).unwrap();
                (format!("s3://{bucket}/src/"), None)
            }
            _ => {
                let http = HttpServer::start(&www);
                std::fs::write(
                    &policy,
                    "hosts = [\"127.0.0.1\"]\nallow_addresses = [\"127.0.0.0/8\"]\n",
                )
                .unwrap();
                (format!("http://127.0.0.1:{}/", http.port), Some(http))
            }
        };
        // SAFETY: set before this test starts threads that read the environment.
        unsafe { std::env::set_var("TILEGATE_SOURCE_POLICY", &policy) };
        let key_a = key(&target, &data, &["--tenant", "a", "--label", "team a"]);
        let key_b = key(&target, &data, &["--tenant", "b"]);
        let key_revoked = key(&target, &data, &["--tenant", "a"]);
        let id = key_revoked.split('_').nth(1).unwrap();
        target.json(&data, &["keys", "revoke", id]);
        let key_operator = key(&target, &data, &["--tenant", "ops", "--operator"]);
        let issuer = Issuer::new("k1");
        let stranger = Issuer::new("k1");
        let jwks = dir.path().join("jwks.json");
        Issuer::write_jwks(&jwks, &[&issuer]);
        let now = epoch_s();
        let claims = |tenant: &str, aud: &str, exp: i64| {
            json!({"iss": ISSUER, "aud": aud, "sub": format!("user-{tenant}"), "tenant": tenant,
                   "iat": now, "exp": exp})
        };
        let mut args = vec![
            "--jwks",
            jwks.to_str().unwrap(),
            "--jwt-issuer",
            ISSUER,
            "--jwt-audience",
            AUDIENCE,
        ];
        args.extend_from_slice(serve_args);
        let server = Server::start(target.command(&data), &args, dir.path().join("serve.log"));
        Self {
            token_a: issuer.token(&claims("a", AUDIENCE, now + 600)),
            token_b: issuer.token(&claims("b", AUDIENCE, now + 600)),
            token_expired: issuer.token(&claims("a", AUDIENCE, now - 600)),
            token_other_key: stranger.token(&claims("a", AUDIENCE, now + 600)),
            token_other_audience: issuer.token(&claims("a", "someone-else", now + 600)),
            target,
            data,
            policy,
            source,
            _http: http,
            key_a,
            key_b,
            key_revoked,
            key_operator,
            server,
            issuer,
            _dir: dir,
        }
    }

    pub(crate) fn call(
        &self,
        method: &str,
        path: &str,
        auth: Option<&str>,
        body: Option<&Value>,
    ) -> Reply {
        self.server.call(method, path, auth, body)
    }

    /// Plan `name` (of the deployment's sources) for the caller `auth`.
    pub(crate) fn plan(&self, auth: &str, name: &str) -> Value {
        let r = self.call(
            "POST",
            "/v1/jobs",
            Some(auth),
            Some(&json!({"source": format!("{}{name}", self.source)})),
        );
        assert_eq!(r.status, 200, "{}", r.text());
        r.json()
    }

    /// Work the queue dry, assembling each job that completes.
    pub(crate) fn work(&self) {
        let out = self
            .target
            .command(&self.data)
            .env("TILEGATE_SOURCE_POLICY", &self.policy)
            .args([
                "--json",
                "work",
                "--until-empty",
                "--assemble",
                "--visibility",
                "5",
            ])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// The bytes a signed URL reads.
    fn fetch(&self, url: &str) -> Vec<u8> {
        if let Some(path) = url.strip_prefix("file://") {
            return std::fs::read(path).expect("read the file URL");
        }
        let rest = url
            .strip_prefix("http://")
            .expect("an http:// URL from the emulator");
        let (host, path) = rest.split_at(rest.find('/').unwrap());
        let r = request(host, "GET", path, &[], None);
        assert_eq!(r.status, 200, "{}", r.text());
        r.body
    }

    fn object(&self, key: &str) -> Vec<u8> {
        let rt = tokio::runtime::Runtime::new().unwrap();
        let b = rt.block_on(self.target.backends(&self.data));
        rt.block_on(b.objects.get_bytes(&object_key(key)))
            .expect("read the object")
            .bytes
            .to_vec()
    }
}

fn job_ids(r: &Reply) -> Vec<String> {
    assert_eq!(r.status, 200, "{}", r.text());
    r.json()["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| j["job_id"].as_str().unwrap().to_owned())
        .collect()
}

fn every_route_keeps_tenants_apart(target: Target) {
    let name = target.name();
    let d = Deployment::new(target, &["--rate-limit", "0"]);
    let planned = d.plan(&d.key_a, "scene.tif");
    assert_eq!(planned["created"], true, "{planned}");
    let job = planned["job"]["job_id"].as_str().unwrap().to_owned();
    // The same request again answers the same job and enqueues nothing.
    let again = d.plan(&d.token_a, "scene.tif");
    assert_eq!(again["job"]["job_id"], job.as_str(), "{again}");
    assert_eq!(
        (again["created"].clone(), again["enqueued"].clone()),
        (json!(false), json!(0))
    );
    // Tenant B naming the same scene gets a job of its own, never A's.
    let b_job = d.plan(&d.key_b, "scene.tif")["job"]["job_id"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_ne!(b_job, job);
    d.work();

    b_is_refused_everywhere_and_no_credential_proves_anything(&d, name, &job);
    // Listing: each tenant sees its own; the operator sees both.
    let list = |auth: &str| job_ids(&d.call("GET", "/v1/jobs", Some(auth), None));
    assert_eq!(list(&d.key_a), vec![job.clone()]);
    assert_eq!(list(&d.token_b), vec![b_job.clone()]);
    let all = list(&d.key_operator);
    assert!(all.contains(&job) && all.contains(&b_job), "{all:?}");
    let anonymous = d.call("GET", "/v1/jobs", None, None);
    assert_eq!(anonymous.status, 401);
    // Its words survive the redaction every answer passes (they read `Bearer REDACTED`).
    assert!(
        anonymous.text().contains("Bearer scheme") && !anonymous.text().contains("REDACTED"),
        "{}",
        anonymous.text()
    );
    assert_eq!(
        d.call("GET", "/v1/jobs", Some(&d.key_revoked), None).status,
        401
    );

    let st = a_sees_its_own_job(&d, name, &job);
    urls_read_a_s_bytes_and_are_audited(&d, name, &job, &st);
    // A's regeneration is accepted; B's was refused before anything was written.
    let r = d.call(
        "POST",
        &format!("/v1/jobs/{job}/regenerate"),
        Some(&d.key_a),
        Some(&json!({"window": "1_1", "accept": false})),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    let attempts = d.target.json(&d.data, &["attempts", &job]);
    assert_eq!(
        attempts["attempts"].as_array().unwrap().len(),
        1,
        "{attempts}"
    );
}

/// Every route naming A's job: B (by key or token) gets 404 `unknown-job`, and no credentials,
/// a revoked key, an expired token, a token signed by another key or for another audience get
/// 401 `unauthenticated` with `WWW-Authenticate`.
fn b_is_refused_everywhere_and_no_credential_proves_anything(
    d: &Deployment,
    name: &str,
    job: &str,
) {
    let routes: Vec<(&str, String, Option<Value>)> = vec![
        ("GET", format!("/v1/jobs/{job}"), None),
        ("GET", format!("/v1/jobs/{job}/report"), None),
        ("GET", format!("/v1/jobs/{job}/stac"), None),
        ("GET", format!("/v1/jobs/{job}/map"), None),
        (
            "GET",
            format!("/v1/jobs/{job}/events?interval_ms=1000"),
            None,
        ),
        (
            "POST",
            format!("/v1/jobs/{job}/urls"),
            Some(json!({"window": "0_0"})),
        ),
        ("POST", format!("/v1/jobs/{job}/urls"), Some(json!({}))),
        (
            "POST",
            format!("/v1/jobs/{job}/regenerate"),
            Some(json!({"window": "1_1", "accept": false})),
        ),
        (
            "POST",
            format!("/v1/jobs/{job}/accept"),
            Some(json!({"window": "0_0", "attempt": "0".repeat(32)})),
        ),
    ];
    for (method, path, body) in &routes {
        for (who, auth) in [("B's key", &d.key_b), ("B's token", &d.token_b)] {
            let r = d.call(method, path, Some(auth), body.as_ref());
            assert_eq!(r.status, 404, "{name}: {who} {method} {path}: {}", r.text());
            assert_eq!(
                r.json()["error"],
                "unknown-job",
                "{name}: {who} {method} {path}"
            );
        }
        for (who, auth) in [
            ("no credentials", None),
            ("a revoked key", Some(&d.key_revoked)),
            ("an expired token", Some(&d.token_expired)),
            ("a token signed by another key", Some(&d.token_other_key)),
            (
                "a token for another audience",
                Some(&d.token_other_audience),
            ),
        ] {
            let r = d.call(method, path, auth.map(String::as_str), body.as_ref());
            assert_eq!(r.status, 401, "{name}: {who} {method} {path}: {}", r.text());
            assert_eq!(r.json()["error"], "unauthenticated");
            assert!(r.header("www-authenticate").is_some());
        }
    }
}

/// A's own views: the job, the report page, the STAC Item, the event stream. Returns the job.
fn a_sees_its_own_job(d: &Deployment, name: &str, job: &str) -> Reply {
    let st = d.call("GET", &format!("/v1/jobs/{job}"), Some(&d.token_a), None);
    assert_eq!(st.status, 200, "{}", st.text());
    assert_eq!(st.json()["lifecycle"], "published", "{name}: {}", st.text());
    let page = d.call(
        "GET",
        &format!("/v1/jobs/{job}/report"),
        Some(&d.key_a),
        None,
    );
    assert_eq!(page.status, 200);
    assert!(page.text().contains(job) && page.text().starts_with("<!DOCTYPE html>"));
    let item = d.call("GET", &format!("/v1/jobs/{job}/stac"), Some(&d.key_a), None);
    assert_eq!(item.status, 200, "{}", item.text());
    assert_eq!(item.json()["type"], "Feature");
    let events = d.call(
        "GET",
        &format!("/v1/jobs/{job}/events?interval_ms=1000"),
        Some(&d.key_a),
        None,
    );
    assert_eq!(events.status, 200);
    assert!(
        events.text().contains("event: progress") && events.text().contains("\"published\":true"),
        "{}",
        events.text()
    );
    st
}

/// A URL obtained by A reads A's bytes (the window's tile, then the scene); every URL issued is
/// an audit line, with the caller's key and never the URL.
fn urls_read_a_s_bytes_and_are_audited(d: &Deployment, name: &str, job: &str, st: &Reply) {
    // A URL obtained by A reads A's bytes: the window's tile, then the scene.
    for (body, key_of) in [
        (json!({"window": "0_0", "expires_s": 300}), None),
        (
            json!({}),
            Some(
                st.json()["scene_output"]["key"]
                    .as_str()
                    .unwrap()
                    .to_owned(),
            ),
        ),
    ] {
        let r = d.call(
            "POST",
            &format!("/v1/jobs/{job}/urls"),
            Some(&d.key_a),
            Some(&body),
        );
        assert_eq!(r.status, 200, "{}", r.text());
        let g = r.json();
        let key = key_of.unwrap_or_else(|| g["key"].as_str().unwrap().to_owned());
        assert_eq!(g["key"], key.as_str());
        let got = d.fetch(g["url"].as_str().unwrap());
        assert_eq!(
            got,
            d.object(&key),
            "{name}: the URL reads the object's bytes"
        );
        assert!(got.starts_with(b"II*\0") || got.starts_with(b"II+\0"));
    }
    // Every URL issued is an audit line, with the caller's key and never the URL.
    let log = d.server.log();
    let a_id = d.key_a.split('_').nth(1).unwrap();
    let audits: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("audit: url issued"))
        .collect();
    assert_eq!(audits.len(), 2, "{log}");
    assert!(
        audits
            .iter()
            .all(|l| l.contains(&format!("key:{a_id}")) && l.contains("expires_at")),
        "{audits:?}"
    );
    assert!(
        !log.contains("X-Amz-Signature") && !log.contains("file://"),
        "{log}"
    );
}

per_backend!(every_route_keeps_tenants_apart);

#[test]
fn limits_refuse_with_named_reasons() {
    let d = Deployment::new(
        Target::Embedded,
        &["--rate-limit", "1", "--max-jobs-in-flight", "1"],
    );
    // One job in flight: a second job waits, the first asked again is answered.
    d.plan(&d.key_a, "scene.tif");
    std::thread::sleep(std::time::Duration::from_secs(2));
    let r = d.call(
        "POST",
        "/v1/jobs",
        Some(&d.key_a),
        Some(&json!({"source": format!("{}other.tif", d.source)})),
    );
    assert_eq!(r.status, 429, "{}", r.text());
    assert_eq!(r.json()["error"], "too-many-jobs-in-flight");
    assert!(r.header("retry-after").is_some());
    // The rate: a burst of two, then 429 with Retry-After; another tenant's bucket is its own.
    std::thread::sleep(std::time::Duration::from_secs(3));
    let statuses: Vec<u16> = (0..4)
        .map(|_| d.call("GET", "/v1/jobs", Some(&d.key_a), None).status)
        .collect();
    assert_eq!(&statuses[..2], &[200, 200], "{statuses:?}");
    assert_eq!(statuses[3], 429, "{statuses:?}");
    let r = d.call("GET", "/v1/jobs", Some(&d.key_a), None);
    assert_eq!(r.json()["error"], "rate-limited");
    assert!(r.header("retry-after").unwrap().parse::<u64>().unwrap() >= 1);
    assert_eq!(d.call("GET", "/v1/jobs", Some(&d.key_b), None).status, 200);
    // Headers and bodies past the caps.
    let big = vec![("x-filler".to_owned(), "x".repeat(20_000))];
    let r = request(&d.server.addr, "GET", "/healthz", &big, None);
    assert_eq!(r.status, 431, "{}", r.text());
    assert_eq!(r.json()["error"], "request-too-large");
    std::thread::sleep(std::time::Duration::from_secs(3));
    let body = json!({"source": "x".repeat(100_000)});
    let r = d.call("POST", "/v1/jobs", Some(&d.key_b), Some(&body));
    assert_eq!(r.status, 413, "{}", r.text());
    // A tenant's source never reaches a local file, whatever the policy lists.
    std::thread::sleep(std::time::Duration::from_secs(3));
    let r = d.call(
        "POST",
        "/v1/jobs",
        Some(&d.key_b),
        Some(&json!({"source": "/etc/passwd"})),
    );
    assert_eq!(r.status, 422, "{}", r.text());
    assert_eq!(r.json()["error"], "source-forbidden");
}

/// A request that does not finish within `--request-timeout` (here, a body that never
/// arrives) is answered `503 request-timeout` with `Retry-After`, not held open.
#[test]
fn a_stalled_request_is_answered_request_timeout() {
    use std::io::{Read as _, Write as _};
    let d = Deployment::new(Target::Embedded, &["--request-timeout", "1s"]);
    let mut s = std::net::TcpStream::connect(&d.server.addr).unwrap();
    s.set_read_timeout(Some(std::time::Duration::from_secs(60)))
        .unwrap();
    write!(
        s,
        "POST /v1/jobs HTTP/1.1\r\nhost: {}\r\nauthorization: Bearer {}\r\n\
         content-type: application/json\r\ncontent-length: 100\r\n\r\n{{",
        d.server.addr, d.key_a
    )
    .unwrap();
    let mut buf = [0u8; 8192];
    let n = s.read(&mut buf).expect("an answer before the body arrives");
    let text = String::from_utf8_lossy(&buf[..n]).to_ascii_lowercase();
    assert!(text.starts_with("http/1.1 503"), "{text}");
    assert!(text.contains("\"request-timeout\""), "{text}");
    assert!(text.contains("retry-after: 5"), "{text}");
}

#[test]
fn keys_are_shown_once_stored_hashed_and_rotate() {
    let dir = tempdir();
    let data = dir.path().join("data");
    let t = Target::Embedded;
    let made = t.json(
        &data,
        &["keys", "create", "--tenant", "acme", "--label", "ci"],
    );
    let key = made["key"].as_str().unwrap();
    let id = made["key_id"].as_str().unwrap();
    // Nothing stored holds the secret.
    let secret = key.rsplit('_').next().unwrap();
    for entry in walk(&data) {
        let bytes = std::fs::read(&entry).unwrap();
        assert!(
            !String::from_utf8_lossy(&bytes).contains(secret),
            "{} holds the secret",
            entry.display()
        );
    }
    let list = t.json(&data, &["keys", "list"]);
    assert_eq!(list["keys"][0]["key_id"], id);
    assert!(!list.to_string().contains(secret));
    let rotated = t.json(&data, &["keys", "rotate", id]);
    assert_eq!(rotated["revoked"], id);
    assert_eq!(rotated["replaces"], id);
    assert_eq!(rotated["tenant"], "acme");
    let list = t.json(&data, &["keys", "list"]);
    let revoked: Vec<bool> = list["keys"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| !k["revoked_at"].is_null())
        .collect();
    assert_eq!(revoked.len(), 2);
    assert_eq!(revoked.iter().filter(|r| **r).count(), 1);
}

/// `keys list` shows every key, a revoked one with the time it was revoked, in columns that
/// line up whatever the lengths of tenants and labels.
#[test]
fn keys_list_shows_revocations_in_aligned_columns() {
    let dir = tempdir();
    let data = dir.path().join("data");
    let t = Target::Embedded;
    key(&t, &data, &["--tenant", "a", "--label", "first"]);
    let long = key(
        &t,
        &data,
        &[
            "--tenant",
            "a-tenant-with-a-long-name",
            "--label",
            "second key",
        ],
    );
    key(&t, &data, &["--tenant", "ops", "--operator"]);
    let revoked_id = long.split('_').nth(1).unwrap();
    t.json(&data, &["keys", "revoke", revoked_id]);
    let listed = t.json(&data, &["keys", "list"]);
    let revoked_at = listed["keys"]
        .as_array()
        .unwrap()
        .iter()
        .find(|k| k["key_id"] == revoked_id)
        .and_then(|k| k["revoked_at_utc"].as_str())
        .expect("the revoked key's time")
        .to_owned();
    let out = t.command(&data).args(["keys", "list"]).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    let head = lines[0];
    let rows: Vec<&str> = lines[1..]
        .iter()
        .copied()
        .filter(|l| {
            l.split(' ')
                .next()
                .is_some_and(|id| id.len() == 16 && id.chars().all(|c| c.is_ascii_hexdigit()))
        })
        .collect();
    assert_eq!(rows.len(), 3, "{text}");
    // The revoked key says when; the others say they are not.
    let row_of = |id: &str| rows.iter().find(|r| r.starts_with(id)).copied().unwrap();
    assert!(row_of(revoked_id).contains(&revoked_at), "{text}");
    let at = head.find("revoked").unwrap();
    let not_revoked = rows
        .iter()
        .filter(|r| r.get(at..).and_then(|c| c.split(' ').next()) == Some("-"))
        .count();
    assert_eq!(not_revoked, 2, "{text}");
    assert!(text.contains("3 keys, 1 revoked"), "{text}");
    // Every column starts where its heading does, after two spaces.
    for col in ["tenant", "role", "created", "revoked", "label"] {
        let at = head
            .find(col)
            .unwrap_or_else(|| panic!("no {col} heading: {text}"));
        for r in &rows {
            // (An empty last cell leaves nothing to align.)
            let cell = r.get(at..).unwrap_or("");
            assert!(
                (r.len() <= at && col == "label")
                    || (r.get(at - 2..at) == Some("  ") && !cell.starts_with(' ')),
                "column {col} is not aligned:\n{text}"
            );
        }
    }
}

/// A request that names a local file is refused in a request's words, not a message's.
#[test]
fn a_request_naming_a_local_file_is_refused_as_a_request() {
    let d = Deployment::new(Target::Embedded, &["--rate-limit", "0"]);
    for source in ["/etc/passwd", "file:///etc/passwd"] {
        let r = d.call(
            "POST",
            "/v1/jobs",
            Some(&d.key_a),
            Some(&json!({ "source": source })),
        );
        assert_eq!(r.status, 422, "{}", r.text());
        let v = r.json();
        assert_eq!(v["error"], "source-forbidden");
        let m = v["message"].as_str().unwrap();
        assert!(
            m.contains("local-file-from-request") && m.contains("a request may not name"),
            "{m}"
        );
        assert!(!m.contains("message"), "{m}");
    }
}

/// A job's thumbnail is drawn once its scene is published, for its tenant only. On the
/// embedded store, `POST …/urls` answers a link of the server's own: it reads the
/// object (whole, or a range) until it expires, then `403 link-expired`; altered — another
/// signature, another key, no signature — it is `403 link-signature-invalid`; a key that is not
/// one is `400 unsafe-key-segment`.
#[test]
fn the_servers_own_links_read_expire_and_refuse_tampering() {
    let d = Deployment::new(Target::Embedded, &["--rate-limit", "0"]);
    let job = d.plan(&d.key_a, "scene.tif")["job"]["job_id"]
        .as_str()
        .unwrap()
        .to_owned();
    // The thumbnail: none before the scene is published, none for another tenant.
    let thumb = format!("/v1/jobs/{job}/thumbnail.png");
    let r = d.call("GET", &thumb, Some(&d.key_a), None);
    assert_eq!(r.status, 409, "{}", r.text());
    assert_eq!(r.json()["error"], "no-scene");
    d.work();
    let r = d.call("GET", &thumb, Some(&d.key_a), None);
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.header("content-type"), Some("image/png"));
    assert!(r.body.starts_with(b"\x89PNG\r\n\x1a\n"));
    let r = d.call("GET", &thumb, Some(&d.key_b), None);
    assert_eq!(r.status, 404, "{}", r.text());
    let sign = |body: Value| {
        let r = d.call(
            "POST",
            &format!("/v1/jobs/{job}/urls"),
            Some(&d.key_a),
            Some(&body),
        );
        assert_eq!(r.status, 200, "{}", r.text());
        r.json()
    };
    let scene = sign(json!({"expires_s": 4}));
    let url = scene["url"].as_str().unwrap().to_owned();
    let prefix = format!("http://{}/v1/objects/", d.server.addr);
    assert!(url.starts_with(&prefix), "{url}");
    let path = &url[prefix.len() - "/v1/objects/".len()..];
    let path = &path[path.find('/').unwrap()..];
    let key = scene["key"].as_str().unwrap();
    assert!(
        path.starts_with(&format!("/v1/objects/{key}?expires=")),
        "{path}"
    );
    let get =
        |p: &str, headers: &[(String, String)]| request(&d.server.addr, "GET", p, headers, None);
    // Valid: the object's bytes, whole and by range.
    let whole = get(path, &[]);
    assert_eq!(whole.status, 200, "{}", whole.text());
    assert_eq!(whole.body, d.object(key));
    assert_eq!(whole.header("accept-ranges"), Some("bytes"));
    let part = get(path, &[("range".to_owned(), "bytes=0-3".to_owned())]);
    assert_eq!(part.status, 206, "{}", part.text());
    assert_eq!(part.body, d.object(key)[..4].to_vec());
    assert_eq!(
        part.header("content-range"),
        Some(format!("bytes 0-3/{}", whole.body.len()).as_str())
    );
    // Tampered: the signature, the key (another of the job's objects), or no signature.
    let (before_sig, sig) = path.split_once("&sig=").unwrap();
    let mut other_sig: Vec<char> = sig.chars().collect();
    other_sig[0] = if other_sig[0] == 'A' { 'B' } else { 'A' };
    let tile = sign(json!({"window": "0_0"}));
    let tile_key = tile["key"].as_str().unwrap();
    for p in [
        format!("{before_sig}&sig={}", other_sig.iter().collect::<String>()),
        path.replace(key, tile_key),
        before_sig.to_owned(),
        format!("/v1/objects/{key}"),
    ] {
        let r = get(&p, &[]);
        assert_eq!(r.status, 403, "{p}: {}", r.text());
        assert_eq!(r.json()["error"], "link-signature-invalid", "{p}");
    }
    // Not a key at all.
    let r = get(&path.replace("/scenes/", "/../scenes/"), &[]);
    assert_eq!(r.status, 400, "{}", r.text());
    assert_eq!(r.json()["error"], "unsafe-key-segment");
    // Expired.
    let until = scene["expires_at"].as_i64().unwrap();
    while tilegate_core::now_millis() <= until {
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    let r = get(path, &[]);
    assert_eq!(r.status, 403, "{}", r.text());
    assert_eq!(r.json()["error"], "link-expired");
    // The secret is the data directory's, readable by its owner only.
    let secret = d.data.join("service-link.secret");
    use std::os::unix::fs::PermissionsExt as _;
    assert_eq!(
        std::fs::metadata(&secret).unwrap().permissions().mode() & 0o777,
        0o600
    );
    assert!(
        !d.server.log().contains(sig),
        "a link's signature is never logged"
    );
    // `tilegate url` has no server: on the embedded store it gives the file's path, and says
    // where a link that expires comes from.
    let regen = d
        .target
        .json(&d.data, &["regenerate", &job, "--window", "0_0"]);
    assert!(regen["attempt"].is_string(), "{regen}");
    let out = d
        .target
        .command(&d.data)
        .args(["url", &job, "--window", "0_0", "--tenant", "a"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(String::from_utf8_lossy(&out.stdout).contains("file://"));
    assert!(
        stderr.contains("tilegate serve") && stderr.contains(&format!("POST /v1/jobs/{job}/urls")),
        "{stderr}"
    );
}

fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(walk(&p));
        } else {
            out.push(p);
        }
    }
    out
}

/// One request as API Gateway's HTTP API hands it to a function (payload format 2.0, the
/// shape of the AWS documentation's example event).
fn http_api_event(method: &str, path: &str, auth: Option<&str>, body: Option<&Value>) -> Value {
    let (raw_path, query) = path.split_once('?').unwrap_or((path, ""));
    let mut headers = json!({
        "accept": "*/*", "host": "abc123.execute-api.us-east-1.amazonaws.com",
        "user-agent": "tilegate-tests", "x-forwarded-proto": "https",
    });
    if let Some(a) = auth {
        headers["authorization"] = json!(format!("Bearer {a}"));
    }
    if body.is_some() {
        headers["content-type"] = json!("application/json");
    }
    json!({
        "version": "2.0",
        "routeKey": "ANY /v1/{proxy+}",
        "rawPath": raw_path,
        "rawQueryString": query,
        "cookies": [],
        "headers": headers,
        "requestContext": {
            "accountId": "123456789012", "apiId": "abc123",
            "domainName": "abc123.execute-api.us-east-1.amazonaws.com", "domainPrefix": "abc123",
            "http": {"method": method, "path": raw_path, "protocol": "HTTP/1.1",
                     "sourceIp": "192.0.2.1", "userAgent": "tilegate-tests"},
            "requestId": "JKJaXmPLvHcESHA=", "routeKey": "ANY /v1/{proxy+}", "stage": "$default",
            "time": "10/Mar/2026:19:03:58 +0000", "timeEpoch": 1_773_169_438_000_i64
        },
        "body": body.map(Value::to_string),
        "isBase64Encoded": false
    })
}

/// What two answers must agree on: the status and the body, less what changes per call.
fn comparable(status: u16, content_type: &str, body: &[u8]) -> (u16, Value) {
    if !content_type.contains("json") {
        return (status, json!(!body.is_empty()));
    }
    let mut v: Value = serde_json::from_slice(body).unwrap();
    for f in ["url", "expires_at", "generated_at"] {
        if let Some(o) = v.as_object_mut() {
            o.remove(f);
        }
    }
    (status, v)
}

#[test]
fn the_lambda_adapter_answers_as_the_server_does() {
    let d = Deployment::new(Target::Embedded, &["--rate-limit", "0"]);
    let job = d.plan(&d.key_a, "scene.tif")["job"]["job_id"]
        .as_str()
        .unwrap()
        .to_owned();
    d.work();
    // The same router, in this process, answering events.
    let rt = tokio::runtime::Runtime::new().unwrap();
    let router = rt.block_on(async {
        let b = tilegate_embedded::open_data_dir(&d.data, 3).unwrap();
        let policies = tilegate_source::policy::from_file(&d.policy).unwrap();
        let jwks = d.data.parent().unwrap().join("jwks.json");
        let jwt = tilegate_service::jwt::JwtVerifier::new(tilegate_service::jwt::JwtConfig {
            jwks: tilegate_service::jwt::JwksSource::File(jwks),
            issuer: ISSUER.into(),
            audience: AUDIENCE.into(),
            tenant_claim: "tenant".into(),
            role_claim: "tilegate_role".into(),
        })
        .await
        .unwrap();
        let limits = tilegate_service::Limits {
            rate_per_s: 0.0,
            ..Default::default()
        };
        tilegate_service::router(std::sync::Arc::new(tilegate_service::Service::new(
            b,
            std::sync::Arc::new(policies),
            Some(jwt),
            limits,
            Default::default(),
        )))
    });
    let cases: Vec<(&str, String, Option<&String>, Option<Value>)> = vec![
        ("GET", "/healthz".into(), None, None),
        ("GET", "/v1/jobs".into(), None, None),
        ("GET", "/v1/jobs".into(), Some(&d.key_revoked), None),
        ("GET", "/v1/jobs".into(), Some(&d.token_expired), None),
        ("GET", "/v1/jobs".into(), Some(&d.key_a), None),
        ("GET", "/v1/jobs?limit=1".into(), Some(&d.token_a), None),
        ("GET", "/v1/jobs?limit=zero".into(), Some(&d.token_a), None),
        ("GET", "/v1/jobs".into(), Some(&d.key_operator), None),
        ("GET", format!("/v1/jobs/{job}"), Some(&d.key_b), None),
        ("GET", format!("/v1/jobs/{job}/stac"), Some(&d.key_a), None),
        (
            "GET",
            format!("/v1/jobs/{job}/report"),
            Some(&d.key_a),
            None,
        ),
        (
            "GET",
            format!("/v1/jobs/{job}/events"),
            Some(&d.key_a),
            None,
        ),
        (
            "POST",
            format!("/v1/jobs/{job}/urls"),
            Some(&d.key_a),
            Some(json!({"window": "0_1"})),
        ),
        (
            "POST",
            format!("/v1/jobs/{job}/urls"),
            Some(&d.key_b),
            Some(json!({"window": "0_1"})),
        ),
        (
            "POST",
            format!("/v1/jobs/{job}/urls"),
            Some(&d.key_a),
            Some(json!({"window": "9_9"})),
        ),
        (
            "POST",
            format!("/v1/jobs/{job}/accept"),
            Some(&d.key_a),
            Some(json!({"window": "0_0", "attempt": "f".repeat(32)})),
        ),
        (
            "POST",
            "/v1/jobs".into(),
            Some(&d.key_a),
            Some(json!({"source": 7})),
        ),
        (
            "POST",
            "/v1/jobs".into(),
            Some(&d.key_a),
            Some(json!({"source": format!("{}scene.tif", d.source)})),
        ),
        ("GET", "/no/such/route".into(), None, None),
    ];
    for (method, path, auth, body) in &cases {
        let served = d.call(method, path, auth.map(String::as_str), body.as_ref());
        let event = http_api_event(method, path, auth.map(String::as_str), body.as_ref());
        let answered = rt
            .block_on(tilegate_service::lambda::handle(router.clone(), event))
            .expect("the adapter answers");
        let ct = |h: Option<&str>| h.unwrap_or("").to_owned();
        assert!(!answered.is_base64_encoded, "{method} {path}");
        assert_eq!(
            comparable(
                served.status,
                &ct(served.header("content-type")),
                &served.body
            ),
            comparable(
                answered.status_code,
                &ct(answered.headers.get("content-type").map(String::as_str)),
                answered.body.as_bytes()
            ),
            "{method} {path}"
        );
        assert_eq!(
            served.header("content-type"),
            answered.headers.get("content-type").map(String::as_str),
            "{method} {path}"
        );
    }
}

const ROWS: &str = "return document.body.dataset.loaded === 'true' && \
    Array.from(document.querySelectorAll('tr.job')).map(r => \
      [r.dataset.job, Number(r.dataset.recorded), r.dataset.lifecycle]);";

/// The rows once some job has published, or null while none has.
const PUBLISHED: &str = "const rows = document.body.dataset.loaded === 'true' ? \
    Array.from(document.querySelectorAll('tr.job')).map(r => \
      [r.dataset.job, Number(r.dataset.recorded), r.dataset.lifecycle]) : []; \
    return rows.some(r => r[2] === 'published') ? rows : null;";

#[test]
fn the_page_shows_a_tenants_jobs_live_in_chromium() {
    let Some(browser) = Browser::start() else {
        return;
    };
    let d = Deployment::new(Target::Embedded, &["--rate-limit", "0"]);
    let mine = d.plan(&d.key_a, "scene.tif")["job"]["job_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let theirs = d.plan(&d.key_b, "other.tif")["job"]["job_id"]
        .as_str()
        .unwrap()
        .to_owned();
    // The key travels in the fragment, which no request carries. A link is anyone's to make
    // (login CSRF): its key fills the form and is used only when the person asks.
    browser.post(
        "url",
        json!({"url": format!("http://{}/#key={}", d.server.addr, d.key_a)}),
    );
    browser.wait_for(
        30,
        "return !document.getElementById('login').hidden && \
         document.getElementById('key').value.startsWith('tgk_')",
    );
    assert_eq!(browser.script("return location.hash"), json!(""));
    assert_eq!(
        browser.script("return document.body.dataset.loaded || null"),
        Value::Null,
        "nothing listed before the person asks"
    );
    browser.script("document.querySelector('#login button').click(); return true;");
    let rows = browser.wait_for(30, ROWS);
    assert_eq!(
        rows,
        json!([[mine, 0, "planned"]]),
        "only A's job, not {theirs}"
    );
    // A tab that holds a key ignores a link's: B's key does not replace A's.
    browser.post(
        "url",
        json!({"url": format!("http://{}/?again#key={}", d.server.addr, d.key_b)}),
    );
    let rows = browser.wait_for(30, ROWS);
    assert_eq!(rows, json!([[mine, 0, "planned"]]));
    assert_eq!(browser.script("return location.hash"), json!(""));
    assert!(!d.server.log().contains(&d.key_a));
    // Windows complete while the page is open: its progress follows without a reload.
    d.work();
    let rows = browser.wait_for(30, PUBLISHED);
    assert_eq!(rows, json!([[mine, 4, "published"]]));
    let links = browser.script(
        "return Array.from(document.querySelectorAll('tr.job .outputs a')).map(a => a.className);",
    );
    assert_eq!(links, json!(["report", "scene", "stac"]));
}

/// The documented operations.
const OPERATIONS: &[&str] = &[
    "createJob",
    "listJobs",
    "getJob",
    "getReport",
    "getStacItem",
    "getThumbnail",
    "getMap",
    "jobEvents",
    "signUrl",
    "regenerate",
    "accept",
    "health",
];

#[test]
fn schemathesis_finds_nothing_against_the_served_document() {
    // Event streams end after 2 s, so a stream of a job nobody works is not a hang.
    let d = Deployment::new(
        Target::Embedded,
        &["--rate-limit", "0", "--max-stream", "2s"],
    );
    let job = d.plan(&d.key_a, "scene.tif")["job"]["job_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../.ci/schemathesis");
    let out = Command::new("bash")
        .arg(script)
        .arg(format!("http://{}", d.server.addr))
        .arg(&d.key_a)
        .arg(&job)
        .output()
        .expect("run .ci/schemathesis");
    let text = format!(
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    println!("{text}");
    assert!(out.status.success(), "schemathesis found problems:\n{text}");
    // It tested every operation.
    assert!(
        text.contains(&format!("Selected: {n}/{n}", n = OPERATIONS.len()))
            && text.contains(&format!("Tested: {}", OPERATIONS.len())),
        "not every operation was tested:\n{text}"
    );
    assert!(!d.server.log().contains("panicked"), "{}", d.server.log());
}

/// `docs/openapi.json` is the document the handlers generate (`serve --print-openapi`), the
/// one the server serves, and a valid OpenAPI 3.1 document (openapi-spec-validator).
/// `TILEGATE_BLESS=1` writes it.
#[test]
fn the_openapi_document_is_committed_served_and_valid() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/openapi.json");
    let out = Command::new(tilegate_tests::tilegate_bin())
        .args(["serve", "--print-openapi"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let generated = String::from_utf8(out.stdout).unwrap();
    if std::env::var_os("TILEGATE_BLESS").is_some() {
        std::fs::write(&path, &generated).unwrap();
    }
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        committed == generated,
        "docs/openapi.json is not what `tilegate serve --print-openapi` prints \
         (TILEGATE_BLESS=1 cargo nextest run -E 'test(openapi_document)' writes it)"
    );
    let d = Deployment::new(Target::Embedded, &[]);
    let served = d.call("GET", "/v1/openapi.json", None, None);
    assert_eq!(served.status, 200);
    let committed: Value = serde_json::from_str(&committed).unwrap();
    assert_eq!(served.json(), committed);
    assert_eq!(committed["openapi"], "3.1.0");
    let ops: Vec<&str> = committed["paths"]
        .as_object()
        .unwrap()
        .values()
        .flat_map(|p| p.as_object().unwrap().values())
        .filter_map(|op| op["operationId"].as_str())
        .collect();
    assert_eq!(ops.len(), OPERATIONS.len(), "{ops:?}");
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../.ci/schemathesis");
    let out = Command::new("bash")
        .arg(script)
        .arg("--validate")
        .arg(&path)
        .output()
        .expect("run .ci/schemathesis --validate");
    assert!(
        out.status.success(),
        "docs/openapi.json is not a valid OpenAPI 3.1 document: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The command lines of the README's "Try it on one machine" (comments removed).
fn readme_quick_start() -> Vec<Vec<String>> {
    let readme =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../README.md"))
            .unwrap();
    let section = readme
        .split("\n### Try it on one machine\n")
        .nth(1)
        .expect("README has a \"Try it on one machine\" section")
        .split("\n#")
        .next()
        .unwrap();
    let block = section
        .split("```sh\n")
        .nth(1)
        .and_then(|b| b.split("```").next())
        .expect("the section has a sh block");
    block
        .lines()
        .map(|l| l.split(" #").next().unwrap().trim())
        .filter(|l| !l.is_empty())
        .map(|l| l.split_whitespace().map(str::to_owned).collect())
        .collect()
}

/// The README's quick start, as written, in an empty directory (the port aside: any free one,
/// through `TILEGATE_LISTEN`): `tilegate serve --demo` prints the page's link; in Chromium the
/// link's key lists the tenant's jobs, **Submit** plans the sample scene it fills in, and the
/// job reaches `published` with its thumbnail drawn.
#[test]
fn the_readme_quick_start_reaches_a_published_job_with_its_thumbnail_in_chromium() {
    let commands = readme_quick_start();
    assert_eq!(
        commands,
        vec![vec!["tilegate", "serve", "--demo"]],
        "the quick start is one command"
    );
    let Some(browser) = Browser::start() else {
        return;
    };
    let dir = tempdir();
    let log = dir.path().join("serve.log");
    let args: Vec<&str> = commands[0][1..].iter().map(String::as_str).collect();
    let demo = tilegate_tests::service::Demo::start(dir.path(), &args, &log);
    let (printed, base, addr, key) = (&demo.printed, &demo.base, &demo.addr, &demo.key);
    let link = format!("{base}/#key={key}");
    assert!(
        link.starts_with("http://127.0.0.1:") && key.starts_with("tgk_"),
        "{link}"
    );
    assert!(
        printed.contains(&format!("{base}/demo/scene.tif")),
        "{printed}"
    );
    // A fresh data directory, where the README says.
    assert!(dir.path().join("tilegate-data/demo/scene.tif").exists());
    // The page: the link's key, "Show my jobs", then "Submit" with the sample scene filled in.
    browser.post("url", json!({ "url": link }));
    browser.wait_for(
        30,
        "return !document.getElementById('login').hidden && \
         document.getElementById('key').value.startsWith('tgk_')",
    );
    browser.script("document.querySelector('#login button').click(); return true;");
    let filled = browser.wait_for(
        30,
        "return !document.getElementById('submit').hidden && \
         document.body.dataset.loaded === 'true' && \
         document.getElementById('source').value || null",
    );
    assert_eq!(filled, json!(format!("{base}/demo/scene.tif")));
    browser.script("document.querySelector('#submit button').click(); return true;");
    let rows = browser.wait_for(
        180,
        "const rows = Array.from(document.querySelectorAll('tr.job')).map(r => { \
           const img = r.querySelector('img.thumb'); \
           return [r.dataset.job, r.dataset.lifecycle, r.dataset.thumb || null, \
                   img ? img.naturalWidth : 0, \
                   Array.from(r.querySelectorAll('.outputs a')).map(a => a.className)]; }); \
         return rows.some(r => r[2] === 'loaded') ? rows : null;",
    );
    let rows = rows.as_array().unwrap();
    assert_eq!(rows.len(), 1, "{rows:?}");
    let row = &rows[0];
    assert_eq!(row[1], "published", "{row}");
    assert!(
        row[3].as_u64().unwrap() > 0,
        "the thumbnail has no width: {row}"
    );
    assert_eq!(row[4], json!(["report", "scene", "stac"]), "{row}");
    // The API agrees: the demo tenant's job, published.
    let r = request(
        addr,
        "GET",
        "/v1/jobs",
        &[("authorization".to_owned(), format!("Bearer {key}"))],
        None,
    );
    assert_eq!(r.status, 200, "{}", r.text());
    let jobs = r.json()["jobs"].clone();
    assert_eq!(jobs[0]["job_id"], row[0]);
    assert_eq!(jobs[0]["tenant"], "demo");
    assert_eq!(jobs[0]["published"], true);
    let serve_log = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(!serve_log.contains("panicked"), "{serve_log}");
}

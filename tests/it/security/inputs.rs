//! Sources and the documents that name them, queue messages and tenants' parameters: each
//! attack a test, each refusal named, nothing of the forbidden content in any output.

use crate::per_backend::per_backend;
use std::collections::HashMap;
use std::io::{BufRead as _, BufReader, Write as _};
use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use tilegate_core::ledger::{AttemptId, AttemptOrder, AttemptState, Subject};
use tilegate_core::message::WindowMessage;
use tilegate_core::{JobId, Window};
use tilegate_tests::{Target, sample, tempdir, tg};

/// A 1024² sample scene in 256-pixel windows, run to its tiles.
fn tiles(target: &Target, data: &Path) -> JobId {
    let src = data.join("scene.tif");
    sample(data, &src, 1024, 11);
    let run = target.json(
        data,
        &[
            "run",
            src.to_str().unwrap(),
            "--window",
            "256",
            "--no-assemble",
        ],
    );
    assert_eq!(run["complete"], true, "{run}");
    JobId::parse(run["job_id"].as_str().unwrap()).unwrap()
}

/// Anyone who can send to the queue can send a regeneration order; what it may change is what
/// the job's ledger rows allow. An attempt regenerated with `--no-accept` is not published by a
/// forged message that says `accept: true`: the worker reads the accept from the attempt's row.
fn a_forged_accept_message_does_not_publish_an_attempt(target: Target) {
    let tmp = tempdir();
    let data = tmp.path();
    let a = tiles(&target, data);
    let out = target.json(
        data,
        &[
            "regenerate",
            a.as_str(),
            "--window",
            "1_3",
            "--enqueue",
            "--no-accept",
        ],
    );
    let id = AttemptId::parse(out["attempt"].as_str().unwrap()).unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let b = rt.block_on(target.backends(data));
    let job = rt.block_on(b.jobs.get_job(&a)).unwrap().unwrap().row;
    let w = Window::new(1, 3);
    let forged = WindowMessage {
        attempt: Some(AttemptOrder {
            id: id.clone(),
            accept: true,
        }),
        ..WindowMessage::for_job(&job, w)
    };
    rt.block_on(b.queue.send_batch(&[forged.encode()])).unwrap();
    let work = target.json(data, &["work", "--until-empty", "--threads", "1"]);
    assert_eq!(work["dead_lettered"], 0, "{work}");
    let s = Subject::Window(w);
    assert!(
        rt.block_on(b.ledger.get_pointer(&a, s)).unwrap().is_none(),
        "a forged message published an attempt on {}",
        target.name()
    );
    let row = rt
        .block_on(b.ledger.get_attempt(&a, s, &id))
        .unwrap()
        .unwrap()
        .row;
    assert_eq!(row.state, AttemptState::Uploaded, "uploaded, not accepted");
}

per_backend!(a_forged_accept_message_does_not_publish_an_attempt);

// ---------------------------------------------------------------------------------------------
// Sources and the documents that name them.

/// A web site on a loopback address: fixed answers by path (status, headers, body) to any
/// number of HEADs and GETs, and the request lines it saw.
struct Site {
    addr: SocketAddr,
    seen: Arc<Mutex<Vec<String>>>,
}

type Routes = HashMap<String, (u16, Vec<(String, String)>, Vec<u8>)>;

impl Site {
    fn start(ip: &str, routes: Routes) -> Self {
        let listener = TcpListener::bind((ip, 0)).expect("bind a loopback address");
        let addr = listener.local_addr().unwrap();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let log = Arc::clone(&seen);
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                let Ok(mut conn) = conn else { continue };
                let mut r = BufReader::new(conn.try_clone().unwrap());
                let mut line = String::new();
                if r.read_line(&mut line).is_err() {
                    continue;
                }
                loop {
                    let mut h = String::new();
                    if r.read_line(&mut h).unwrap_or(0) == 0 || h == "\r\n" {
                        break;
                    }
                }
                log.lock().unwrap().push(line.trim().to_owned());
                let mut parts = line.split_whitespace();
                let method = parts.next().unwrap_or("");
                let path = parts.next().unwrap_or("/").to_owned();
                let (status, headers, body) =
                    routes
                        .get(&path)
                        .cloned()
                        .unwrap_or((404, Vec::new(), Vec::new()));
                let mut out = format!(
                    "HTTP/1.1 {status} X\r\ncontent-length: {}\r\nconnection: close\r\n\
                     etag: \"v1\"\r\n",
                    body.len()
                );
                for (k, v) in headers {
                    out.push_str(&format!("{k}: {v}\r\n"));
                }
                out.push_str("\r\n");
                let _ = conn.write_all(out.as_bytes());
                if method != "HEAD" {
                    let _ = conn.write_all(&body);
                }
            }
        });
        Self { addr, seen }
    }

    fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    fn requests(&self) -> Vec<String> {
        self.seen.lock().unwrap().clone()
    }
}

fn ok(body: impl Into<Vec<u8>>) -> (u16, Vec<(String, String)>, Vec<u8>) {
    (200, Vec::new(), body.into())
}

fn redirect(to: &str) -> (u16, Vec<(String, String)>, Vec<u8>) {
    (
        302,
        vec![("location".to_owned(), to.to_owned())],
        Vec::new(),
    )
}

/// A source policy file with `text`.
fn policy(dir: &Path, text: &str) -> PathBuf {
    let path = dir.join(format!(
        "policy-{}.toml",
        blake3::hash(text.as_bytes()).to_hex()
    ));
    std::fs::write(&path, text).unwrap();
    path
}

const LOOPBACK: &str = "allow_addresses = [\"127.0.0.0/8\"]\n";

/// `tilegate --json --source-policy POLICY ARGS…` with data directory `data`.
fn with_policy(data: &Path, policy: &Path, args: &[&str]) -> std::process::Output {
    let mut all = vec!["--json", "--source-policy", policy.to_str().unwrap()];
    all.extend_from_slice(args);
    tg(data, &all, &[])
}

/// A STAC Item whose one asset is `href`.
fn item(href: &str) -> Vec<u8> {
    serde_json::to_vec(&serde_json::json!({
        "type": "Feature", "stac_version": "1.0.0", "id": "evil",
        "geometry": null, "properties": {"datetime": "2026-12-01T10:00:00Z"}, "links": [],
        "assets": {"B1": {"href": href, "type": "image/tiff; application=geotiff"}}
    }))
    .unwrap()
}

/// A refused plan: the named reason on stderr and in `--json`, no job row, nothing enqueued,
/// and none of `secret` anywhere in what the command printed.
fn assert_refused(data: &Path, out: &std::process::Output, rule: &str, secret: &[u8]) {
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "planned: {stdout}");
    assert!(
        stderr.contains("error[source-forbidden]") && stderr.contains(rule),
        "{stderr}"
    );
    let doc: serde_json::Value = serde_json::from_str(stdout.trim()).expect("--json error");
    assert_eq!(doc["error"]["reason"], "source-forbidden", "{doc}");
    for text in [&stdout, &stderr] {
        let found = text.as_bytes().windows(secret.len()).any(|w| w == secret);
        assert!(!found, "the secret came out: {text}");
    }
    let status = tg(data, &["--json", "status"], &[]);
    let status = String::from_utf8_lossy(&status.stdout);
    assert!(
        !status.contains("\"job_id\""),
        "a job was planned: {status}"
    );
}

/// A VRT with a raw band over `secret`: what an attacker would have GDAL copy into a tile.
fn raw_band_vrt(dir: &Path, secret: &Path) -> PathBuf {
    let vrt = dir.join("evil.vrt");
    std::fs::write(
        &vrt,
        format!(
            "<VRTDataset rasterXSize=\"64\" rasterYSize=\"1\">\n  <VRTRasterBand dataType=\"Byte\" \
             band=\"1\" subClass=\"VRTRawRasterBand\">\n    <SourceFilename \
             relativeToVRT=\"0\">{}</SourceFilename>\n    <ImageOffset>0</ImageOffset>\n    \
             <PixelOffset>1</PixelOffset>\n    <LineOffset>64</LineOffset>\n  \
             </VRTRasterBand>\n</VRTDataset>\n",
            secret.display()
        ),
    )
    .unwrap();
    vrt
}

/// A remote STAC Item whose asset is a local file — a raw-band VRT over a secret, or another
/// tenant's published scene — is refused before anything is read: a remote document never
/// names a local file.
#[test]
fn a_remote_stac_item_cannot_name_a_local_file() {
    let tmp = tempdir();
    let secret = tmp.path().join("credentials");
    std::fs::write(
        &secret,
        b"AWS_SECRET_ACCESS_KEY=wJalrXUtnFEMIK7MDENGbPxRfiCYEXAMPLEKEY",
    )
    .unwrap();
    let vrt = raw_band_vrt(tmp.path(), &secret);
    let victim = tmp.path().join("tenants/victim/scenes/JOB.tif");
    std::fs::create_dir_all(victim.parent().unwrap()).unwrap();
    sample(tmp.path(), &victim, 256, 3);
    let pol = policy(tmp.path(), LOOPBACK);
    for href in [
        format!("file://{}", vrt.display()),
        format!("file://{}", victim.display()),
        format!("file://localhost{}", vrt.display()),
    ] {
        let site = Site::start(
            "127.0.0.1",
            [("/item.json".to_owned(), ok(item(&href)))].into(),
        );
        let data = tmp.path().join(format!("data-{}", site.addr.port()));
        let out = with_policy(
            &data,
            &pol,
            &[
                "plan",
                &site.url("/item.json"),
                "--assets",
                "B1",
                "--tenant",
                "evil",
            ],
        );
        assert_refused(&data, &out, "local-file-from-document", b"wJalrXUtnFEMI");
    }
    // A bare path in a remote item is a path on the item's own server, not a local file.
    let site = Site::start(
        "127.0.0.1",
        [(
            "/item.json".to_owned(),
            ok(item(&vrt.display().to_string())),
        )]
        .into(),
    );
    let out = tg(
        &tmp.path().join("data-path"),
        &[
            "--source-policy",
            pol.to_str().unwrap(),
            "plan",
            &site.url("/item.json"),
            "--assets",
            "B1",
        ],
        &[],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("error[source-missing]"), "{stderr}");
    assert!(
        site.requests()
            .iter()
            .any(|r| r.contains(&vrt.display().to_string())),
        "{:?}",
        site.requests()
    );
}

/// A remote STAC Item's hrefs to buckets and containers are read with the deployment's own
/// credentials: outside the item's origin they are refused unless the policy names them.
#[test]
fn a_remote_stac_item_cannot_name_buckets_outside_its_origin() {
    let tmp = tempdir();
    let pol = policy(tmp.path(), LOOPBACK);
    for href in [
        "s3://tenant-victim/scenes/JOB.tif",
        "gs://tenant-victim/scenes/JOB.tif",
        "az://victimacct/scenes/JOB.tif",
    ] {
        let site = Site::start(
            "127.0.0.1",
            [("/item.json".to_owned(), ok(item(href)))].into(),
        );
        let data = tmp.path().join(format!("data-{}", site.addr.port()));
        let out = with_policy(
            &data,
            &pol,
            &["plan", &site.url("/item.json"), "--assets", "B1"],
        );
        assert_refused(&data, &out, "cross-origin", b"victim-bytes");
    }
    // Named by the policy, the bucket is allowed again (and then simply read: here it does not
    // exist, which is another, honest failure).
    let allowed = policy(
        tmp.path(),
        &format!("{LOOPBACK}buckets = [\"s3://tenant-victim\"]\n"),
    );
    let site = Site::start(
        "127.0.0.1",
        [(
            "/item.json".to_owned(),
            ok(item("s3://tenant-victim/x.tif")),
        )]
        .into(),
    );
    let out = tg(
        &tmp.path().join("data-allowed"),
        &[
            "--source-policy",
            allowed.to_str().unwrap(),
            "plan",
            &site.url("/item.json"),
            "--assets",
            "B1",
        ],
        &[],
    );
    assert!(
        !String::from_utf8_lossy(&out.stderr).contains("source-forbidden"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A source on an allowed address that redirects to a loopback address the policy does not
/// allow: the redirect is judged before it is followed, and the loopback service never sees a
/// request.
#[test]
fn a_redirect_to_a_loopback_address_is_refused() {
    let tmp = tempdir();
    let inner = Site::start(
        "127.0.0.1",
        [("/latest/meta-data/".to_owned(), ok("role-credentials"))].into(),
    );
    let outer = Site::start(
        "127.0.0.2",
        [(
            "/scene.tif".to_owned(),
            redirect(&inner.url("/latest/meta-data/")),
        )]
        .into(),
    );
    // Both hosts are named, so only the address rule stands between them.
    let pol = policy(
        tmp.path(),
        "allow_addresses = [\"127.0.0.2/32\"]\nhosts = [\"127.0.0.1\", \"127.0.0.2\"]\n",
    );
    let data = tmp.path().join("data");
    let out = with_policy(&data, &pol, &["plan", &outer.url("/scene.tif")]);
    assert_refused(&data, &out, "address", b"role-credentials");
    assert_eq!(outer.requests().len(), 1, "{:?}", outer.requests());
    assert!(inner.requests().is_empty(), "{:?}", inner.requests());
}

/// A name that resolves to loopback is refused on the addresses it resolves to: the request is
/// never sent (the default policy).
#[test]
fn a_name_resolving_to_loopback_is_refused() {
    let tmp = tempdir();
    let site = Site::start("127.0.0.1", [("/scene.tif".to_owned(), ok("x"))].into());
    let data = tmp.path().join("data");
    let url = format!("http://localhost:{}/scene.tif", site.addr.port());
    let out = tg(&data, &["--json", "plan", &url], &[]);
    assert_refused(&data, &out, "address", b"never");
    assert!(site.requests().is_empty(), "{:?}", site.requests());
}

/// A STAC Item larger than the policy's document size is refused without being read whole.
#[test]
fn an_oversized_stac_item_is_refused() {
    let tmp = tempdir();
    let mut big = item("B1.tif");
    big.truncate(big.len() - 1);
    big.extend_from_slice(b", \"padding\": \"");
    big.extend(std::iter::repeat_n(b'x', 300_000));
    big.extend_from_slice(b"\"}");
    let site = Site::start("127.0.0.1", [("/item.json".to_owned(), ok(big))].into());
    let pol = policy(
        tmp.path(),
        &format!("{LOOPBACK}max_document_bytes = 65536\n"),
    );
    let data = tmp.path().join("data");
    let out = with_policy(
        &data,
        &pol,
        &["plan", &site.url("/item.json"), "--assets", "B1"],
    );
    assert_refused(&data, &out, "document-too-large", b"xxxxxxxxxxxxxxxx");
}

/// A worker judges the source again when it opens it, by its own policy: a job planned where
/// loopback was allowed is refused by workers whose policy does not allow it.
#[test]
fn a_worker_rechecks_the_source_it_opens() {
    let tmp = tempdir();
    let served = tmp.path().join("www");
    std::fs::create_dir_all(&served).unwrap();
    let src = served.join("s.tif");
    sample(tmp.path(), &src, 256, 5);
    let bytes = std::fs::read(&src).unwrap();
    let site = Site::start("127.0.0.1", [("/s.tif".to_owned(), ok(bytes))].into());
    let pol = policy(tmp.path(), LOOPBACK);
    let data = tmp.path().join("data");
    let plan = with_policy(
        &data,
        &pol,
        &["plan", &site.url("/s.tif"), "--window", "128"],
    );
    assert!(
        plan.status.success(),
        "{}",
        String::from_utf8_lossy(&plan.stderr)
    );
    let work = tg(
        &data,
        &["--json", "work", "--until-empty", "--threads", "1"],
        &[],
    );
    let doc: serde_json::Value = serde_json::from_slice(&work.stdout).unwrap();
    assert_eq!(doc["dead_lettered"], 4, "{doc}");
    let dlq = tg(&data, &["--json", "dlq", "list"], &[]);
    let dlq = String::from_utf8_lossy(&dlq.stdout);
    assert_eq!(dlq.matches("source-forbidden").count(), 4, "{dlq}");
}

// ---------------------------------------------------------------------------------------------
// Tenants' parameters.

/// Tenant roots never alias: a prefix that would enter another tenant's root — the default
/// tenant's `--prefix tiles/tenants/acme`, or another tenant's — is refused by name before
/// anything is written; acme's own job lands under acme's root.
#[test]
fn tenant_roots_never_alias() {
    let tmp = tempdir();
    let src = tmp.path().join("s.tif");
    sample(tmp.path(), &src, 256, 2);
    let data = tmp.path().join("data");
    for extra in [
        vec!["--prefix", "tiles/tenants/acme"],
        vec!["--prefix", "tiles/tenants/acme", "--tenant", "evil"],
        vec!["--prefix", "tiles/tenants", "--tenant", "acme"],
    ] {
        let mut args = vec!["--json", "plan", src.to_str().unwrap()];
        args.extend(extra.iter().copied());
        let out = tg(&data, &args, &[]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{extra:?} planned");
        assert!(
            stderr.contains("error[unsafe-key-segment]") && stderr.contains("reserved"),
            "{stderr}"
        );
    }
    let plan = tg(
        &data,
        &[
            "--json",
            "plan",
            src.to_str().unwrap(),
            "--prefix",
            "tiles",
            "--tenant",
            "acme",
        ],
        &[],
    );
    assert!(
        plan.status.success(),
        "{}",
        String::from_utf8_lossy(&plan.stderr)
    );
    let doc: serde_json::Value = serde_json::from_slice(&plan.stdout).unwrap();
    assert_eq!(doc["prefix"], "tiles/tenants/acme", "{doc}");
}

/// A presigned URL's credentials are not part of what is stored or published: the job row,
/// every message, `status`, the STAC Item and the report name the URL without them; the
/// planning process (`run`) reads with them; another process cannot, and says so by name.
#[test]
fn a_presigned_source_url_keeps_its_credentials_in_the_process() {
    let tmp = tempdir();
    let served = tmp.path().join("www");
    std::fs::create_dir_all(&served).unwrap();
    sample(tmp.path(), &served.join("s.tif"), 256, 9);
    let server = tilegate_tests::HttpServer::start(&served);
    let secret = "Zm9vYmFyc2VjcmV0c2lnbmF0dXJl";
    let url = format!(
        "{}?versionId=7&X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=AKIAEXAMPLE%2F20261204\
         &X-Amz-Signature={secret}&X-Amz-Expires=600",
        server.url("s.tif")
    );
    let data = tmp.path().join("data");
    let run = tg(&data, &["--json", "run", &url, "--window", "128"], &[]);
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let doc: serde_json::Value = serde_json::from_slice(&run.stdout).unwrap();
    assert_eq!(doc["dead_lettered"], 0, "{doc}");
    let job = doc["job_id"].as_str().unwrap().to_owned();
    let mut seen = String::from_utf8_lossy(&run.stdout).into_owned();
    let report = tmp.path().join("report.html");
    for args in [
        vec!["--json", "status", job.as_str()],
        vec!["--json", "stac", job.as_str()],
        vec!["report", job.as_str(), "-o", report.to_str().unwrap()],
    ] {
        let out = tg(&data, &args, &[]);
        seen.push_str(&String::from_utf8_lossy(&out.stdout));
        seen.push_str(&String::from_utf8_lossy(&out.stderr));
    }
    seen.push_str(&std::fs::read_to_string(&report).unwrap());
    let db = std::fs::read(data.join("tilegate.db")).unwrap();
    for (what, text) in [("outputs", seen.as_bytes()), ("the database", &db[..])] {
        for needle in [secret, "AKIAEXAMPLE", "X-Amz-Signature"] {
            let found = text.windows(needle.len()).any(|w| w == needle.as_bytes());
            assert!(!found, "`{needle}` is in {what}");
        }
    }
    let status: serde_json::Value =
        serde_json::from_slice(&tg(&data, &["--json", "status", job.as_str()], &[]).stdout)
            .unwrap();
    assert_eq!(
        status["source"],
        format!("{}?versionId=7", server.url("s.tif")),
        "{status}"
    );
    // Another process has no credentials to read it with: a named refusal per window (the
    // repair re-reads the window from its source).
    let repair = tg(
        &data,
        &["--json", "repair", job.as_str(), "--window", "0_0"],
        &[],
    );
    assert!(!repair.status.success());
    let stderr = String::from_utf8_lossy(&repair.stderr);
    assert!(
        stderr.contains("error[source-credentials-unavailable]"),
        "{stderr}"
    );
    assert!(!stderr.contains(secret), "{stderr}");
}

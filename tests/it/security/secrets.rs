//! No secret leaves the process (issue 29, item 4): a store's credentials reach no log line,
//! dead-letter reason, status, report or listing, whatever the HTTP client's errors and
//! debug logs carry. An Azure store signs an account SAS from its account key and sends it in
//! every request's URL; the client's error for a request that got no answer names that URL.

use std::path::Path;
use std::process::{Command, Output};
use std::sync::{Arc, Mutex, PoisonError};
use tilegate_core::error::chain;
use tilegate_core::queue::DEFAULT_MAX_RECEIVE_COUNT;
use tilegate_core::{Retry, StoreError};
use tilegate_tests::responder::read_request;
use tilegate_tests::{sample, tempdir, tilegate_bin};
use tokio::io::{AsyncWriteExt as _, BufReader};
use tokio::net::TcpListener;

const ACCOUNT: &str = "tgsecrets";
/// A key of this test's own (base64 of "tilegate/security_secrets: an account key never
/// printed!"): it signs the SAS the store sends.
const ACCOUNT_KEY: &str =
    "dGlsZWdhdGUvc2VjdXJpdHlfc2VjcmV0czogYW4gYWNjb3VudCBrZXkgbmV2ZXIgcHJpbnRlZCE=";

/// An Azure Blob endpoint whose writes are never answered: a PUT's connection is closed once
/// its request is read (the client's error names the URL it sent, SAS and all). The
/// container is there, and every blob read finds nothing (404 `BlobNotFound`), so workers
/// encode and try to write. Its URL and the request lines it saw.
async fn unanswered_writes() -> (String, Arc<Mutex<Vec<String>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = Arc::clone(&seen);
    tokio::spawn(async move {
        while let Ok((conn, _)) = listener.accept().await {
            let log = Arc::clone(&log);
            tokio::spawn(async move {
                let mut r = BufReader::new(conn);
                let Ok((head, _)) = read_request(&mut r).await else {
                    return;
                };
                let line = head.lines().next().unwrap_or_default().to_owned();
                log.lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .push(line.clone());
                let mut conn = r.into_inner();
                if line.contains("restype=container") && !line.contains("comp=list") {
                    // The container is there.
                    let _ = conn
                        .write_all(
                            b"HTTP/1.1 200 OK\r\netag: \"0x8DD1\"\r\n\
                              last-modified: Wed, 02 Dec 2026 10:00:00 GMT\r\n\
                              content-length: 0\r\nconnection: close\r\n\r\n",
                        )
                        .await;
                } else if !line.starts_with("PUT ") {
                    let body = if line.starts_with("HEAD ") {
                        ""
                    } else {
                        "<?xml version=\"1.0\" encoding=\"utf-8\"?><Error><Code>BlobNotFound\
                         </Code><Message>The specified blob does not exist.</Message></Error>"
                    };
                    let answer = format!(
                        "HTTP/1.1 404 The specified blob does not exist.\r\n\
                         x-ms-error-code: BlobNotFound\r\ncontent-type: application/xml\r\n\
                         content-length: {}\r\nconnection: close\r\n\r\n{body}",
                        body.len()
                    );
                    let _ = conn.write_all(answer.as_bytes()).await;
                }
                let _ = conn.shutdown().await;
            });
        }
    });
    (url, seen)
}

/// `tilegate --data DATA GLOBAL ARGS` with the Azure account's connection string, and no
/// log filter from the environment (the test's own `-vv` decides).
fn tg(data: &Path, connection_string: &str, global: &[&str], args: &[&str]) -> Output {
    Command::new(tilegate_bin())
        .arg("--data")
        .arg(data)
        .args(global)
        .args(args)
        .env("AZURE_STORAGE_CONNECTION_STRING", connection_string)
        .env_remove("TILEGATE_LOG")
        .env_remove("RUST_LOG")
        .output()
        .expect("run tilegate")
}

fn text(out: &Output) -> String {
    format!(
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// The values of query parameter `name` in `line`, as sent and percent-decoded.
fn params(line: &str, name: &str) -> Vec<String> {
    let Some((_, query)) = line.split_once('?') else {
        return vec![];
    };
    let query = query.split_whitespace().next().unwrap_or_default();
    query
        .split('&')
        .filter_map(|kv| kv.split_once('='))
        .filter(|(k, _)| *k == name)
        .flat_map(|(_, v)| {
            let decoded = v
                .replace("%2B", "+")
                .replace("%2F", "/")
                .replace("%3D", "=");
            [v.to_owned(), decoded]
        })
        .collect()
}

/// Fails if `output` (named `what`) carries a secret: one of `secrets`, or a `sig=` whose
/// value is not `REDACTED`.
fn assert_clean(what: &str, output: &str, secrets: &[String]) {
    for s in secrets {
        assert!(
            !output.contains(s.as_str()),
            "{what} carries the secret `{s}`:\n{output}"
        );
    }
    for (at, _) in output.match_indices("sig=") {
        assert!(
            output[at + 4..].starts_with("REDACTED"),
            "{what} carries a `sig=` value: {}",
            &output[at..(at + 60).min(output.len())]
        );
    }
}

/// A run whose Azure store never answers a write, through the command line at `-vv`: its SAS
/// (signed with a known key, so its `sig` is known from the requests) and the key appear in
/// no log line, no `dlq list --json`, no `status --json`, no report and no stored dead letter;
/// the reasons still say what failed, with `sig=REDACTED` where the URL was.
#[test]
fn no_secret_of_a_failing_azure_store_reaches_any_output() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let (url, seen) = rt.block_on(unanswered_writes());
    let tmp = tempdir();
    let data = tmp.path().join("data");
    let src = tmp.path().join("scene.tif");
    sample(tmp.path(), &src, 512, 29);
    let cs = format!(
        "DefaultEndpointsProtocol=http;AccountName={ACCOUNT};AccountKey={ACCOUNT_KEY};\
         BlobEndpoint={url}/{ACCOUNT}"
    );
    let objects = format!("az://{ACCOUNT}/tiles/out");
    let global = ["-vv", "--objects", objects.as_str()];

    let run = tg(
        &data,
        &cs,
        &global,
        &[
            "--json",
            "run",
            src.to_str().unwrap(),
            "--window",
            "256",
            "--no-assemble",
            "--threads",
            "2",
        ],
    );
    let dlq = tg(&data, &cs, &global, &["--json", "dlq", "list"]);
    let status = tg(&data, &cs, &global, &["--json", "status"]);
    let page = tmp.path().join("report.html");
    let report = tg(
        &data,
        &cs,
        &global,
        &["report", "--out", page.to_str().unwrap(), "--no-thumbnail"],
    );
    let rows = rt.block_on(async {
        let b = tilegate_embedded::open_data_dir(&data, DEFAULT_MAX_RECEIVE_COUNT).unwrap();
        b.queue.list_dead_letters(100).await.unwrap()
    });

    // What the store was sent: its SAS, with the signature the key made.
    let seen = seen.lock().unwrap_or_else(PoisonError::into_inner).clone();
    let puts: Vec<&String> = seen.iter().filter(|l| l.starts_with("PUT ")).collect();
    assert!(!puts.is_empty(), "no write reached the store: {seen:#?}");
    let mut secrets: Vec<String> = seen.iter().flat_map(|l| params(l, "sig")).collect();
    assert!(!secrets.is_empty(), "the requests carry no SAS: {seen:#?}");
    secrets.sort();
    secrets.dedup();
    secrets.push(ACCOUNT_KEY.to_owned());

    // The run failed as intended, and every output still says why.
    assert!(
        !rows.is_empty(),
        "nothing was dead-lettered: {}",
        text(&run)
    );
    for row in &rows {
        assert!(row.reason.starts_with("storage-"), "{}", row.reason);
    }
    assert!(
        rows.iter().any(|r| r.reason.contains("sig=REDACTED")),
        "the client's error named the URL; its SAS is redacted, the rest kept: {:#?}",
        rows.iter().map(|r| &r.reason).collect::<Vec<_>>()
    );
    let logs = String::from_utf8_lossy(&run.stderr);
    assert!(logs.contains("DEBUG"), "-vv logs tilegate's debug lines");
    assert!(
        logs.contains("dead-lettering message"),
        "the reason is logged: {logs}"
    );
    // The Azure client's own debug lines (its transport's "sending request '…'", its reqwest
    // client's "performing request …") stay off: -vv is tilegate's crates only.
    for third_party in ["sending request '", "performing request "] {
        assert!(!logs.contains(third_party), "{third_party}: {logs}");
    }
    let st: serde_json::Value = serde_json::from_slice(&status.stdout)
        .unwrap_or_else(|e| panic!("status --json ({e}): {}", text(&status)));
    assert!(st["dead_letters_for_job"].as_u64() >= Some(1), "{st}");
    let dead: serde_json::Value = serde_json::from_slice(&dlq.stdout)
        .unwrap_or_else(|e| panic!("dlq list --json ({e}): {}", text(&dlq)));
    assert_eq!(dead["count"].as_u64(), Some(rows.len() as u64), "{dead}");
    assert!(report.status.success(), "report: {}", text(&report));
    let html = std::fs::read_to_string(&page).unwrap();
    assert!(
        html.contains("sig=REDACTED"),
        "the report shows the reasons"
    );

    assert_clean("the run's output and -vv logs", &text(&run), &secrets);
    assert_clean("dlq list --json", &text(&dlq), &secrets);
    assert_clean("status --json", &text(&status), &secrets);
    assert_clean("report", &format!("{html}\n{}", text(&report)), &secrets);
    for row in &rows {
        assert_clean("a stored dead letter", &row.reason, &secrets);
    }
}

/// An S3 presigned URL in an error (the HTTP client names the URL of a request it could not
/// send) is rendered by `chain` without its signature, credential or session token; the
/// rest of the URL, and every error of the chain, is kept.
#[test]
fn an_s3_presigned_url_in_an_error_chain_is_redacted() {
    let signature = "5d672d79c15b13162d9279b0855cfba6789a8edb4c82c400e06b5924a6f2b5d7";
    let credential = "AKIAIOSFODNN7EXAMPLE%2F20261202%2Fus-east-1%2Fs3%2Faws4_request";
    let token = "FwoGZXIvYXdzEBYaDkTilegateSessionToken";
    let url = format!(
        "https://tiles.s3.us-east-1.amazonaws.com/t/a.tif?X-Amz-Algorithm=AWS4-HMAC-SHA256\
         &X-Amz-Credential={credential}&X-Amz-Date=20261202T000000Z&X-Amz-Expires=900\
         &X-Amz-Security-Token={token}&X-Amz-SignedHeaders=host&X-Amz-Signature={signature}"
    );
    let err = StoreError::backend(
        "get",
        "t/a.tif",
        Retry::Retryable,
        std::io::Error::other(format!("error sending request for url ({url})")),
    );
    let why = chain(&err);
    for secret in [signature, "AKIAIOSFODNN7EXAMPLE", token] {
        assert!(!why.contains(secret), "{why}");
    }
    assert_eq!(
        why,
        "get `t/a.tif`: error sending request for url (https://tiles.s3.us-east-1.amazonaws.com\
         /t/a.tif?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=REDACTED\
         &X-Amz-Date=20261202T000000Z&X-Amz-Expires=900&X-Amz-Security-Token=REDACTED\
         &X-Amz-SignedHeaders=host&X-Amz-Signature=REDACTED)"
    );
}

//! The Azure trust boundary, tried as an attacker would (issue 29): a source URI is input, so
//! the account it names must never steer where the deployment's credentials go; and a signed
//! read URL never outlives the 7 days every provider allows, nor does any `--expires` value
//! crash the command.
//!
//! Where requests go is watched by a recorder on 127.0.0.1 that is both the configured blob
//! endpoint and every proxy (`HTTP_PROXY`, `HTTPS_PROXY`, `ALL_PROXY`), so a request to any
//! other host reaches it too (as a `CONNECT host:443` for HTTPS), and nothing leaves the
//! machine.

use serde_json::Value;
use std::path::Path;
use std::process::{Command, Output};
use std::sync::{Arc, Mutex, PoisonError};
use tilegate_tests::object_key;
use tilegate_tests::responder::read_request;
use tilegate_tests::{sample, tempdir, tilegate_bin};
use tokio::io::{AsyncWriteExt as _, BufReader};
use tokio::net::TcpListener;

/// The account the deployment is configured for, and the secret of its SAS.
const ACCOUNT: &str = "tgacct1";
const SECRET: &str = "DEPLOYMENTSECRET";

/// One request the recorder saw: its request line, the host it was meant for (the `CONNECT`
/// target, an absolute URI's authority, or the `Host` header), and whether it carried a SAS.
#[derive(Debug, Clone)]
struct Seen {
    line: String,
    host: String,
    sas: bool,
}

/// A listener on 127.0.0.1 that records every request and refuses it (403 to a `CONNECT`, 404
/// `BlobNotFound` to anything else). Its URL and what it saw.
async fn recorder() -> (String, Arc<Mutex<Vec<Seen>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = Arc::clone(&seen);
    tokio::spawn(async move {
        loop {
            let Ok((conn, _)) = listener.accept().await else {
                return;
            };
            let log = Arc::clone(&log);
            tokio::spawn(async move {
                let mut r = BufReader::new(conn);
                let Ok((head, _)) = read_request(&mut r).await else {
                    return;
                };
                let line = head.lines().next().unwrap_or_default().to_owned();
                let mut words = line.split_whitespace();
                let (method, target) = (words.next().unwrap_or(""), words.next().unwrap_or(""));
                let header_host = head.lines().skip(1).find_map(|l| {
                    let (k, v) = l.split_once(':')?;
                    k.trim()
                        .eq_ignore_ascii_case("host")
                        .then(|| v.trim().to_owned())
                });
                let host = if method == "CONNECT" {
                    target.to_owned()
                } else if let Some(abs) = target
                    .strip_prefix("http://")
                    .or_else(|| target.strip_prefix("https://"))
                {
                    abs.split('/').next().unwrap_or_default().to_owned()
                } else {
                    header_host.unwrap_or_default()
                };
                log.lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .push(Seen {
                        sas: line.contains("sig="),
                        line: line.clone(),
                        host,
                    });
                let answer = if method == "CONNECT" {
                    "HTTP/1.1 403 Forbidden\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
                } else {
                    "HTTP/1.1 404 The specified blob does not exist.\r\n\
                     x-ms-error-code: BlobNotFound\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
                };
                let mut conn = r.into_inner();
                let _ = conn.write_all(answer.as_bytes()).await;
                let _ = conn.shutdown().await;
            });
        }
    });
    (url, seen)
}

/// Every Azure setting a developer's shell may hold, removed so that only the test's count.
const AZURE_SETTINGS: &[&str] = &[
    "AZURE_STORAGE_CONNECTION_STRING",
    "AZURE_STORAGE_ACCOUNT",
    "AZURE_STORAGE_SAS_TOKEN",
    "AZURE_STORAGE_ACCESS_KEY",
    "AZURE_STORAGE_KEY",
    "AZURE_TOKEN_CREDENTIALS",
    "AZURE_FEDERATED_TOKEN_FILE",
    "AZURE_CLIENT_ID",
    "AZURE_CLIENT_SECRET",
    "AZURE_TENANT_ID",
    "IDENTITY_ENDPOINT",
    "MSI_ENDPOINT",
    "CPL_AZURE_ENDPOINT",
    "NO_PROXY",
    "no_proxy",
];

/// `tilegate --json --data DATA plan URI` with `settings` as the Azure configuration and every
/// proxy pointed at the recorder.
fn plan(data: &Path, recorder: &str, settings: &[(&str, String)], uri: &str) -> Output {
    let mut cmd = Command::new(tilegate_bin());
    for k in AZURE_SETTINGS {
        cmd.env_remove(k);
    }
    for k in [
        "HTTP_PROXY",
        "HTTPS_PROXY",
        "ALL_PROXY",
        "http_proxy",
        "https_proxy",
        "all_proxy",
    ] {
        cmd.env(k, recorder);
    }
    // GDAL would read an Azure CLI configuration from $HOME/.azure.
    cmd.env("HOME", data);
    for (k, v) in settings {
        cmd.env(k, v);
    }
    cmd.arg("--json")
        .arg("--data")
        .arg(data)
        .args(["plan", uri])
        .output()
        .expect("run tilegate")
}

/// The `{"error": …}` document of a refused command.
fn refusal(uri: &str, out: &Output) -> (String, String) {
    assert_ne!(out.status.code(), Some(0), "{uri} was planned");
    assert_ne!(out.status.code(), Some(101), "{uri}: tilegate panicked");
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "{uri}: no JSON error ({e}): {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    });
    (
        doc["error"]["reason"]
            .as_str()
            .unwrap_or_default()
            .to_owned(),
        doc["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .to_owned(),
    )
}

/// An `az://` source whose account is not the configured one — whether by injection
/// (`evil.example#`, `acct@host`, `host:port`, `%`-escapes, another case: no account name, so
/// `malformed` when the reference is parsed) or simply another account — is refused by the rule
/// it breaks before any request: the recorder, which is the
/// configured endpoint and every proxy, sees no request at all for it, and the deployment's
/// SAS only ever goes to the configured account. With no account configured (a SAS token alone)
/// an `az://` source is refused outright: GDAL, which reads the source, would not know which
/// account to read.
#[test]
fn an_az_source_never_sends_the_deployments_credentials_to_another_account() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let (url, seen) = rt.block_on(recorder());
    let sas = format!("sv=2022-11-02&ss=b&srt=sco&sp=rl&se=2099-01-01T00%3A00%3A00Z&sig={SECRET}");
    let by_connection_string = vec![(
        "AZURE_STORAGE_CONNECTION_STRING",
        format!(
            "DefaultEndpointsProtocol=http;AccountName={ACCOUNT};SharedAccessSignature={sas};\
             BlobEndpoint={url}/{ACCOUNT}"
        ),
    )];
    let by_account_and_token = vec![
        ("AZURE_STORAGE_ACCOUNT", ACCOUNT.to_owned()),
        ("AZURE_STORAGE_SAS_TOKEN", sas.clone()),
    ];
    let token_alone = vec![("AZURE_STORAGE_SAS_TOKEN", sas.clone())];
    let attacks = [
        ("az://evil.example#/c/k", "malformed"),
        ("az://evil.example#/cont/scene.tif", "malformed"),
        (
            "az://evil.example#.blob.core.windows.net/cont/k",
            "malformed",
        ),
        ("az://tgacct1@evil.example/cont/k", "malformed"),
        ("az://evil.example:443/cont/k", "malformed"),
        ("az://evil.example?/cont/k", "malformed"),
        ("az://tgacct1.evil.example/cont/k", "malformed"),
        ("az://evil%2Eexample/cont/k", "malformed"),
        ("az://TGACCT1/cont/k", "malformed"),
        ("az://evilacct/cont/scene.tif", "other-account"),
        ("az://tgacct1/Cont/k", "malformed"),
        ("az://tgacct1/cont/", "blob-name"),
    ];
    let tmp = tempdir();
    for (config, settings) in [
        ("connection string", &by_connection_string),
        ("AZURE_STORAGE_ACCOUNT", &by_account_and_token),
    ] {
        for (uri, rule) in attacks {
            let before = seen.lock().unwrap_or_else(PoisonError::into_inner).len();
            let out = plan(tmp.path(), &url, settings, uri);
            let (reason, message) = refusal(uri, &out);
            assert!(
                reason.starts_with("source-"),
                "{config}: {uri}: not a named refusal: {reason}: {message}"
            );
            // Named as the source policy names its rules, `(rule)`, or as the store does, `[rule]`.
            assert!(
                message.contains(&format!("({rule})")) || message.contains(&format!("[{rule}]")),
                "{config}: {uri}: the refusal does not name the rule `{rule}`: {message}"
            );
            let after = seen.lock().unwrap_or_else(PoisonError::into_inner).clone();
            assert_eq!(
                after.len(),
                before,
                "{config}: {uri} was sent out: {:#?}",
                &after[before..]
            );
        }
    }
    for (uri, rule) in [
        ("az://tgacct1/cont/scene.tif", "no-configured-account"),
        ("az://evil.example#/c/k", "malformed"),
    ] {
        let out = plan(tmp.path(), &url, &token_alone, uri);
        let (_, message) = refusal(uri, &out);
        assert!(
            message.contains(&format!("({rule})")) || message.contains(&format!("[{rule}]")),
            "{uri}: {message}"
        );
    }
    assert!(
        seen.lock()
            .unwrap_or_else(PoisonError::into_inner)
            .is_empty(),
        "a refused source was sent out: {:#?}",
        seen.lock().unwrap_or_else(PoisonError::into_inner)
    );

    // The control: the configured account's own source does reach the recorder (so the
    // silence above is a refusal, not a recorder that hears nothing), with the SAS, at the
    // configured endpoint, and through GDAL's `/vsiaz/` not at all (the blob is missing).
    let uri = format!("az://{ACCOUNT}/cont/scene.tif");
    let out = plan(tmp.path(), &url, &by_connection_string, &uri);
    let (reason, message) = refusal(&uri, &out);
    assert_eq!(reason, "source-missing", "{message}");
    let all = seen.lock().unwrap_or_else(PoisonError::into_inner).clone();
    let endpoint = url.trim_start_matches("http://");
    assert!(!all.is_empty(), "the configured account was not asked");
    for s in &all {
        assert_eq!(s.host, endpoint, "{s:?}");
        assert!(
            s.sas,
            "the configured account's request carries its SAS: {s:?}"
        );
        assert!(
            s.line.contains(&format!(" /{ACCOUNT}/cont/scene.tif?"))
                || s.line
                    .contains(&format!(" {url}/{ACCOUNT}/cont/scene.tif?")),
            "{s:?}"
        );
    }
    // By AZURE_STORAGE_ACCOUNT the configured account is Azure's own endpoint for it (over
    // HTTPS, so the recorder sees the tunnel asked for and nothing of the SAS).
    seen.lock().unwrap_or_else(PoisonError::into_inner).clear();
    let out = plan(tmp.path(), &url, &by_account_and_token, &uri);
    refusal(&uri, &out);
    let all = seen.lock().unwrap_or_else(PoisonError::into_inner).clone();
    assert!(!all.is_empty(), "the configured account was not asked");
    for s in &all {
        assert_eq!(
            s.host,
            format!("{ACCOUNT}.blob.core.windows.net:443"),
            "{s:?}"
        );
    }
}

/// `tilegate url` on Azure: no URL lives longer than 7 days (S3's SigV4 and GCS's V4 cannot,
/// and Azure's is held to the same), so `--expires 8d` is refused by name even when the
/// attempt's retention would allow it; a duration too large for any clock is a named refusal,
/// never a panic; and a 1-hour URL of Azurite (plain HTTP, so signed for `https,http`) reads
/// the accepted attempt's bytes.
#[test]
fn azure_url_lifetimes_are_bounded_and_named() {
    let account = tilegate_tests::azure_emulator();
    let objects = format!(
        "az://{}/{}/out",
        account.name,
        tilegate_tests::azure_container()
    );
    let tmp = tempdir();
    let data = tmp.path();
    let src = data.join("scene.tif");
    sample(data, &src, 512, 29);
    let tg = |args: &[&str]| {
        Command::new(tilegate_bin())
            .arg("--data")
            .arg(data)
            .args(["--objects", &objects])
            .args(args)
            .output()
            .expect("run tilegate")
    };
    let json = |args: &[&str]| {
        let mut a = vec!["--json"];
        a.extend_from_slice(args);
        tilegate_tests::json_of(args, &tg(&a))
    };
    json(&["init", "--create-bucket"]);
    let run = json(&[
        "run",
        src.to_str().unwrap(),
        "--window",
        "256",
        "--no-assemble",
    ]);
    let job = run["job_id"].as_str().unwrap().to_owned();
    // Kept for 100 000 years after retirement: retention caps nothing here, so every refusal
    // below is the URL's own limit.
    let regen = json(&[
        "regenerate",
        &job,
        "--window",
        "0_0",
        "--keep-retired",
        "36500000d",
    ]);
    assert_eq!(regen["publish"]["outcome"], "published", "{regen}");

    for (expires, name) in [
        ("8d", "url-lifetime-exceeded"),
        ("36500d", "url-lifetime-exceeded"),
        ("36500000d", "url-lifetime-exceeded"),
        ("213503982334602d", "duration-out-of-range"),
        ("99999999999999999999d", "duration-out-of-range"),
        ("0s", "url-lifetime-empty"),
    ] {
        let out = tg(&[
            "--json",
            "url",
            &job,
            "--window",
            "0_0",
            "--expires",
            expires,
        ]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_ne!(
            out.status.code(),
            Some(101),
            "--expires {expires} panicked: {stderr}"
        );
        assert!(
            !out.status.success(),
            "--expires {expires} was signed: {}",
            String::from_utf8_lossy(&out.stdout)
        );
        assert!(
            stderr.contains(name),
            "--expires {expires}: the refusal does not say {name}: {stderr}"
        );
        assert!(
            !String::from_utf8_lossy(&out.stdout).contains("sig="),
            "--expires {expires}: a URL was printed"
        );
    }

    let now = tilegate_core::now_millis();
    let grant = json(&["url", &job, "--window", "0_0", "--expires", "1h"]);
    let url = grant["url"].as_str().unwrap();
    assert!(
        !url.contains("REDACTED"),
        "`tilegate url` printed its grant redacted, so it reads nothing: {url}"
    );
    assert!(
        url.contains("&spr=https,http&"),
        "Azurite is plain HTTP: {url}"
    );
    let expires_at = grant["expires_at"].as_i64().unwrap();
    assert!(
        (now + 3_600_000..now + 3_660_000).contains(&expires_at),
        "{grant}"
    );
    let (status, body) = http_get(url);
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
    let key = grant["key"].as_str().unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let want = rt.block_on(async {
        let store = tilegate_backends::open_objects(&objects).await.unwrap();
        tilegate_core::object::ObjectStoreExt::get_bytes(&*store, &object_key(key))
            .await
            .unwrap()
            .bytes
    });
    assert_eq!(body, want.to_vec(), "the URL reads the accepted attempt");
}

/// GET an `http://` URL: its status and body.
fn http_get(url: &str) -> (u16, Vec<u8>) {
    let r = tilegate_tests::http::get(url);
    (r.status, r.body)
}

//! The account SAS an Azure store signs from the account key, across its lifetime: a
//! scripted service that judges each request's `st`/`se` by an injected clock, as Azure does
//! ("Signature not valid in the specified time frame", 403 `AuthenticationFailed`), and a
//! store on the same clock moved on by days, as a long-lived `work` pod lives.

use bytes::Bytes;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tilegate_azure::{Account, Auth, AzureStore, Clock, DEV_ACCOUNT, DEV_KEY};
use tilegate_core::object::{ObjectStore, PutOptions, PutOutcome};
use tilegate_core::{Retry, time::rfc3339};
use tilegate_retry::RetryPolicy;
use tilegate_tests::object_key;
use tilegate_tests::responder::read_request;
use tokio::io::{AsyncWriteExt as _, BufReader};
use tokio::net::TcpListener;

const DAY: Duration = Duration::from_secs(86_400);

/// 2026-12-02T00:00:00Z.
fn t0() -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(1_796_169_600)
}

/// A clock the test sets.
#[derive(Clone)]
struct TestClock(Arc<Mutex<SystemTime>>);

impl TestClock {
    fn at(t: SystemTime) -> Self {
        Self(Arc::new(Mutex::new(t)))
    }
    fn now(&self) -> SystemTime {
        *self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }
    fn set(&self, t: SystemTime) {
        *self.0.lock().unwrap_or_else(PoisonError::into_inner) = t;
    }
    fn clock(&self) -> Clock {
        let c = self.clone();
        Arc::new(move || c.now())
    }
}

fn iso(t: SystemTime) -> String {
    let ms = t.duration_since(UNIX_EPOCH).unwrap().as_millis();
    rfc3339(i64::try_from(ms).unwrap())
}

/// The value of query parameter `name` in a request line, `%3A` decoded (the only escape an
/// ISO 8601 time carries in a SAS).
fn param(line: &str, name: &str) -> Option<String> {
    let query = line.split_whitespace().nth(1)?.split_once('?')?.1;
    query.split('&').find_map(|kv| {
        let (k, v) = kv.split_once('=')?;
        (k == name).then(|| v.replace("%3A", ":"))
    })
}

/// A response as the responder writes it.
fn answer(status: u16, headers: &[(&str, &str)], body: &str) -> String {
    let mut out = format!(
        "HTTP/1.1 {status} Scripted\r\ncontent-length: {}\r\nconnection: close\r\n",
        body.len()
    );
    for (k, v) in headers {
        out.push_str(&format!("{k}: {v}\r\n"));
    }
    out.push_str("\r\n");
    out.push_str(body);
    out
}

/// Azure's answer to a SAS outside its time frame: 403 `AuthenticationFailed` with the
/// `AuthenticationErrorDetail` the service writes.
fn outside_time_frame(st: &str, se: &str, now: &str) -> String {
    let body = format!(
        "<?xml version=\"1.0\" encoding=\"utf-8\"?><Error><Code>AuthenticationFailed</Code>\
         <Message>Server failed to authenticate the request. Make sure the value of \
         Authorization header is formed correctly including the signature.</Message>\
         <AuthenticationErrorDetail>Signature not valid in the specified time frame: \
         Start [{st}] - Expiry [{se}] - Current [{now}]</AuthenticationErrorDetail></Error>"
    );
    answer(
        403,
        &[
            ("x-ms-error-code", "AuthenticationFailed"),
            ("content-type", "application/xml"),
        ],
        &body,
    )
}

/// A service that, on `clock`, refuses a request whose SAS is not yet or no longer valid
/// (`st` > now or `se` <= now) and otherwise creates the blob (201). Its URL and the request
/// lines it saw.
async fn service(clock: TestClock) -> (String, Arc<Mutex<Vec<String>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = Arc::clone(&seen);
    tokio::spawn(async move {
        loop {
            let Ok((conn, _)) = listener.accept().await else {
                return;
            };
            let mut r = BufReader::new(conn);
            let Ok((head, _)) = read_request(&mut r).await else {
                continue;
            };
            let line = head.lines().next().unwrap_or_default().to_owned();
            log.lock()
                .unwrap_or_else(PoisonError::into_inner)
                .push(line.clone());
            let now = iso(clock.now());
            let (st, se) = (
                param(&line, "st").unwrap_or_default(),
                param(&line, "se").unwrap_or_default(),
            );
            // ISO 8601 UTC times of one width order as text.
            let out = if st > now || se <= now {
                outside_time_frame(&st, &se, &now)
            } else {
                answer(
                    201,
                    &[
                        ("etag", "\"0x8DD5\""),
                        ("last-modified", "Wed, 02 Dec 2026 10:00:00 GMT"),
                    ],
                    "",
                )
            };
            let mut conn = r.into_inner();
            let _ = conn.write_all(out.as_bytes()).await;
            let _ = conn.shutdown().await;
        }
    });
    (url, seen)
}

fn store(url: &str, clock: Clock) -> AzureStore {
    let account = Account {
        name: DEV_ACCOUNT.to_owned(),
        blob_endpoint: format!("{url}/{DEV_ACCOUNT}"),
        auth: Auth::Key(DEV_KEY.to_owned()),
    };
    AzureStore::connect_with_clock(&format!("az://{DEV_ACCOUNT}/tiles/p"), &account, clock)
        .unwrap()
        .with_retry_policy(RetryPolicy::immediate(3))
}

async fn create(store: &AzureStore, key: &str) -> tilegate_core::StoreResult<PutOutcome> {
    store
        .put_opts(
            &object_key(key),
            Bytes::from_static(b"abc"),
            PutOptions::create(),
        )
        .await
}

/// The fault of issue 28: a store opened on day 0 and still writing on day 8. Its first SAS
/// expired on day 7; the request of day 8 carries one signed since, and is accepted.
#[tokio::test]
async fn a_store_open_for_eight_days_writes_with_a_renewed_sas() {
    let clock = TestClock::at(t0());
    let (url, seen) = service(clock.clone()).await;
    let store = store(&url, clock.clock());
    let first = create(&store, "day0.tif").await.unwrap();
    assert!(matches!(first, PutOutcome::Written(_)), "{first:?}");

    clock.set(t0() + 8 * DAY);
    let out = create(&store, "day8.tif").await.unwrap();
    assert!(matches!(out, PutOutcome::Written(_)), "{out:?}");

    let seen = seen.lock().unwrap().clone();
    assert_eq!(
        seen.len(),
        2,
        "renewed before sending, not after a refusal: {seen:#?}"
    );
    let se = |i: usize| param(&seen[i], "se").unwrap();
    assert_eq!(se(0), iso(t0() + 7 * DAY));
    assert!(se(1) > iso(t0() + 8 * DAY), "a fresh SAS: {}", se(1));
    assert!(param(&seen[1], "sig") != param(&seen[0], "sig"));
}

/// A SAS signed while the host's clock ran ahead (its `st` is in the service's future) is
/// refused for its time frame once the clock is corrected; the refusal renews it on the
/// corrected clock and the request is sent once more, and accepted.
#[tokio::test]
async fn a_time_frame_refusal_renews_the_sas_and_sends_once_more() {
    let service_clock = TestClock::at(t0());
    let host_clock = TestClock::at(t0() + Duration::from_secs(2 * 3600));
    let (url, seen) = service(service_clock).await;
    let store = store(&url, host_clock.clock());
    host_clock.set(t0()); // NTP steps the clock back.

    let out = create(&store, "a.tif").await.unwrap();
    assert!(matches!(out, PutOutcome::Written(_)), "{out:?}");
    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 2, "{seen:#?}");
    let st = |i: usize| param(&seen[i], "st").unwrap();
    assert!(
        st(0) > iso(t0()),
        "the first SAS starts in the future: {}",
        st(0)
    );
    assert!(st(1) < iso(t0()), "the renewed one has started: {}", st(1));
}

/// A refusal that renewing cannot cure (a key Azure does not know signs a SAS it refuses
/// with a mismatched signature) stays permanent: sent once, not renewed in a loop.
#[tokio::test]
async fn a_signature_mismatch_is_permanent_after_one_request() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let count = Arc::new(Mutex::new(0usize));
    let n = Arc::clone(&count);
    tokio::spawn(async move {
        while let Ok((conn, _)) = listener.accept().await {
            let mut r = BufReader::new(conn);
            if read_request(&mut r).await.is_err() {
                continue;
            }
            *n.lock().unwrap() += 1;
            let body = "<?xml version=\"1.0\" encoding=\"utf-8\"?><Error>\
                <Code>AuthenticationFailed</Code><Message>Server failed to authenticate the \
                request.</Message><AuthenticationErrorDetail>Signature did not match. String \
                to sign used was devstoreaccount1</AuthenticationErrorDetail></Error>";
            let out = answer(
                403,
                &[
                    ("x-ms-error-code", "AuthenticationFailed"),
                    ("content-type", "application/xml"),
                ],
                body,
            );
            let mut conn = r.into_inner();
            let _ = conn.write_all(out.as_bytes()).await;
            let _ = conn.shutdown().await;
        }
    });
    let err = create(&store(&url, tilegate_azure::system_clock()), "a.tif")
        .await
        .unwrap_err();
    assert_eq!(err.retry(), Retry::Permanent);
    let why = tilegate_core::error::chain(&err);
    assert!(why.contains("403 AuthenticationFailed"), "{why}");
    assert_eq!(*count.lock().unwrap(), 1);
}

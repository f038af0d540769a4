//! The worker's HTTP endpoint for orchestrators (`work --metrics-addr`), in the crate of the
//! job service's server (hardened apart from it still): `GET /healthz` answers 200 while the
//! worker runs and 503 once it is stopping (so a Kubernetes probe sees the shutdown),
//! `GET /metrics` the process's counters in Prometheus text format and the ledger's
//! `deletion_overdue_oldest_seconds` gauge. Deliberately tiny: one request per connection, no
//! keep-alive, nothing else served.
//!
//! It faces whatever can reach the port, so it bounds what a client can hold: the request head
//! must arrive within [`HEAD_TIMEOUT`] and the whole exchange within [`CONNECTION_DEADLINE`]
//! (a slow-loris client is dropped, never answered); at most [`MAX_CONNECTIONS`] are served at
//! once, and a connection over the cap is answered 503 and closed in the accept loop, with no
//! task spawned; accept errors (EMFILE) back off from 10 ms to 1 s instead of spinning. The
//! gauge costs a ledger read (16 DynamoDB queries, one per due shard), so it is cached for
//! [`GAUGE_TTL`] and refreshed by the first scrape that finds it stale, one refresh at a time:
//! any number of scrapes cost at most one ledger read per period. The counters come from
//! memory.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use tilegate_core::ledger::LedgerTable;
use tilegate_core::metrics::{self as m, Counters, prometheus_text};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Mutex, Semaphore, watch};
use tokio::time::{Instant, timeout};

/// Largest request head read.
const MAX_REQUEST: usize = 8 * 1024;
/// Time a client has to send its request head, from accept.
const HEAD_TIMEOUT: Duration = Duration::from_secs(5);
/// Time a connection may last in all, from accept: head, answer and write.
const CONNECTION_DEADLINE: Duration = Duration::from_secs(10);
/// Connections served at once; more are refused at once.
const MAX_CONNECTIONS: usize = 64;
/// How long one read of the ledger gauge is served before the next scrape reads again.
const GAUGE_TTL: Duration = Duration::from_secs(15);
/// Longest a gauge read may take; a slower ledger leaves the gauge out until the next period.
const GAUGE_READ_TIMEOUT: Duration = Duration::from_secs(3);
/// First and longest sleeps after a failed accept.
const BACKOFF_FIRST: Duration = Duration::from_millis(10);
const BACKOFF_MAX: Duration = Duration::from_secs(1);
/// At the longest sleep, warn once per this many failed accepts (about once a minute).
const WARN_EVERY_AT_MAX: u32 = 60;

/// What a connection over the cap is told before it is closed.
const BUSY: &[u8] = b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain\r\nContent-Length: 5\r\nRetry-After: 1\r\nConnection: close\r\n\r\nbusy\n";

/// The endpoint's own counters, served beside the worker's.
const REFUSED: &str = "http_connections_refused_total";
const TIMED_OUT: &str = "http_connections_timed_out_total";
const GAUGE_READS: &str = "ledger_gauge_reads_total";

/// Serve until the process exits.
pub async fn serve(
    listener: TcpListener,
    counters: Arc<Counters>,
    ledger: Arc<dyn LedgerTable>,
    stopping: watch::Receiver<bool>,
) {
    let state = Arc::new(State {
        counters,
        ledger,
        gauge: GaugeCache::new(GAUGE_TTL),
        refused: AtomicU64::new(0),
        timed_out: AtomicU64::new(0),
    });
    let slots = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    let mut backoff = Backoff::default();
    loop {
        let stream = match listener.accept().await {
            Ok((stream, _)) => {
                if backoff.failures > 0 {
                    tracing::info!(
                        failures = backoff.failures,
                        "metrics endpoint: accepting again"
                    );
                }
                backoff = Backoff::default();
                stream
            }
            Err(e) => {
                let (sleep, warn) = backoff.fail();
                if warn {
                    tracing::warn!(
                        error = %e,
                        failures = backoff.failures,
                        retry_in_ms = sleep.as_millis(),
                        "metrics endpoint: accept failed"
                    );
                }
                tokio::time::sleep(sleep).await;
                continue;
            }
        };
        let Ok(slot) = slots.clone().try_acquire_owned() else {
            state.refused.fetch_add(1, Ordering::Relaxed);
            refuse(stream);
            continue;
        };
        let state = state.clone();
        let stopping = *stopping.borrow();
        tokio::spawn(async move {
            let _slot = slot;
            let outcome = timeout(CONNECTION_DEADLINE, answer(stream, &state, stopping)).await;
            match outcome {
                Ok(Ok(())) => {}
                Ok(Err(e)) if e.kind() == std::io::ErrorKind::TimedOut => {
                    state.timed_out.fetch_add(1, Ordering::Relaxed);
                    tracing::debug!(error = %e, "metrics endpoint: connection dropped");
                }
                Ok(Err(e)) => tracing::debug!(error = %e, "metrics endpoint: request failed"),
                Err(_) => {
                    state.timed_out.fetch_add(1, Ordering::Relaxed);
                    tracing::debug!(
                        deadline_s = CONNECTION_DEADLINE.as_secs(),
                        "metrics endpoint: connection dropped at its deadline"
                    );
                }
            }
        });
    }
}

/// Close a connection over the cap: a 503 if the socket takes it without waiting, then close.
/// Runs in the accept loop (no task, no await).
fn refuse(stream: TcpStream) {
    if let Ok(mut s) = stream.into_std() {
        // Non-blocking: a socket just accepted has room for these few bytes; if not, the
        // client sees the close alone.
        let _ = std::io::Write::write(&mut s, BUSY);
        let _ = s.shutdown(std::net::Shutdown::Both);
    }
}

/// Everything a connection's task needs.
struct State {
    counters: Arc<Counters>,
    ledger: Arc<dyn LedgerTable>,
    gauge: GaugeCache,
    refused: AtomicU64,
    timed_out: AtomicU64,
}

impl State {
    /// The endpoint's own counters in Prometheus text.
    fn own_counters(&self) -> String {
        use std::fmt::Write as _;
        let mut out = String::new();
        for (name, help, value) in [
            (
                REFUSED,
                "Connections to this endpoint refused because it was serving its maximum.",
                self.refused.load(Ordering::Relaxed),
            ),
            (
                TIMED_OUT,
                "Connections to this endpoint dropped by the request-head timeout or the connection deadline.",
                self.timed_out.load(Ordering::Relaxed),
            ),
            (
                GAUGE_READS,
                "Ledger reads for the deletion_overdue_oldest_seconds gauge (at most one per cache period, whatever the scrape rate).",
                self.gauge.reads(),
            ),
        ] {
            let _ = write!(
                out,
                "# HELP {name} {help}\n# TYPE {name} counter\n{name} {value}\n"
            );
        }
        out
    }
}

/// Sleeps after failed accepts: 10 ms, doubling to 1 s; reset by a successful accept.
#[derive(Debug, Default)]
struct Backoff {
    failures: u32,
    sleep: Option<Duration>,
}

impl Backoff {
    /// One more failure: how long to sleep, and whether to warn about it (once per step, and
    /// once every [`WARN_EVERY_AT_MAX`] failures at the longest step).
    fn fail(&mut self) -> (Duration, bool) {
        self.failures += 1;
        let (next, new_step) = match self.sleep {
            None => (BACKOFF_FIRST, true),
            Some(s) if s < BACKOFF_MAX => ((s * 2).min(BACKOFF_MAX), true),
            Some(s) => (s, false),
        };
        self.sleep = Some(next);
        let at_max_since = self.failures.saturating_sub(steps_to_max());
        (
            next,
            new_step || (at_max_since > 0 && at_max_since.is_multiple_of(WARN_EVERY_AT_MAX)),
        )
    }
}

/// Failures until the sleep reaches [`BACKOFF_MAX`] (8: 10, 20, … 640 ms, 1 s).
fn steps_to_max() -> u32 {
    let mut s = BACKOFF_FIRST;
    let mut n = 1;
    while s < BACKOFF_MAX {
        s = (s * 2).min(BACKOFF_MAX);
        n += 1;
    }
    n
}

/// The ledger gauge's text, read at most once per `ttl` and at most one read at a time.
struct GaugeCache {
    ttl: Duration,
    /// When the last read started (`None`: never) and what it gave.
    last: Mutex<(Option<Instant>, String)>,
    reads: AtomicU64,
}

impl GaugeCache {
    fn new(ttl: Duration) -> Self {
        Self {
            ttl,
            last: Mutex::new((None, String::new())),
            reads: AtomicU64::new(0),
        }
    }

    fn reads(&self) -> u64 {
        self.reads.load(Ordering::Relaxed)
    }

    /// The cached text, or a fresh one from `read` if the last read started `ttl` ago or more.
    /// Concurrent callers wait for the one that reads. The period counts from the start of a
    /// read, and the text is cleared first, so a read that fails, times out or is cancelled
    /// (its scrape dropped) still spends its period: the ledger is never read more often.
    async fn get<F, Fut>(&self, read: F) -> String
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = String>,
    {
        let mut last = self.last.lock().await;
        if last.0.is_some_and(|at| at.elapsed() < self.ttl) {
            return last.1.clone();
        }
        *last = (Some(Instant::now()), String::new());
        self.reads.fetch_add(1, Ordering::Relaxed);
        last.1 = read().await;
        last.1.clone()
    }
}

/// The ledger's gauges, in Prometheus text; nothing if the ledger cannot be read in time (the
/// counters are still served).
async fn ledger_gauges(ledger: &dyn LedgerTable) -> String {
    let now = tilegate_core::now_millis();
    match timeout(GAUGE_READ_TIMEOUT, ledger.oldest_due(now)).await {
        Ok(Ok(oldest)) => m::gauge_text(
            m::DELETION_OVERDUE_OLDEST,
            "Age of the oldest ledger row past its deadline and not yet deleted (0: none).",
            oldest.map_or(0, |d| u64::try_from((now - d) / 1000).unwrap_or(0)),
        ),
        Ok(Err(e)) => {
            tracing::warn!(error = %tilegate_core::error::chain(&e), "metrics: ledger gauge unavailable");
            String::new()
        }
        Err(_) => {
            tracing::warn!(
                timeout_s = GAUGE_READ_TIMEOUT.as_secs(),
                "metrics: ledger gauge unavailable: the read timed out"
            );
            String::new()
        }
    }
}

/// Read the request head: up to the blank line, [`MAX_REQUEST`] bytes or the client's EOF.
async fn read_head(stream: &mut TcpStream) -> std::io::Result<Vec<u8>> {
    let mut buf = Vec::with_capacity(1024);
    let mut chunk = [0u8; 1024];
    while !buf.windows(4).any(|w| w == b"\r\n\r\n") && buf.len() < MAX_REQUEST {
        let n = stream.read(&mut chunk).await?;
        if n == 0 {
            break;
        }
        buf.extend_from_slice(&chunk[..n]);
    }
    Ok(buf)
}

async fn answer(mut stream: TcpStream, state: &State, stopping: bool) -> std::io::Result<()> {
    let buf = timeout(HEAD_TIMEOUT, read_head(&mut stream))
        .await
        .map_err(|_| {
            std::io::Error::new(std::io::ErrorKind::TimedOut, "no request head in time")
        })??;
    if buf.is_empty() {
        return Ok(()); // connected and closed without a request
    }
    let head = String::from_utf8_lossy(&buf);
    let mut parts = head.lines().next().unwrap_or_default().split(' ');
    let (method, path) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    let path = path.split('?').next().unwrap_or("");
    let (status, kind, body) = match (method, path) {
        ("GET", "/healthz") if stopping => (
            "503 Service Unavailable",
            "text/plain",
            "stopping\n".to_owned(),
        ),
        ("GET", "/healthz") => ("200 OK", "text/plain", "ok\n".to_owned()),
        ("GET", "/metrics") => {
            let gauge = state.gauge.get(|| ledger_gauges(&*state.ledger)).await;
            (
                "200 OK",
                "text/plain; version=0.0.4",
                prometheus_text(&state.counters.snapshot()) + &state.own_counters() + &gauge,
            )
        }
        ("GET", _) => (
            "404 Not Found",
            "text/plain",
            "serves /healthz and /metrics\n".to_owned(),
        ),
        _ => (
            "405 Method Not Allowed",
            "text/plain",
            "GET only\n".to_owned(),
        ),
    };
    let response = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {kind}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(response.as_bytes()).await?;
    stream.shutdown().await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_from_10_ms_to_1_s_and_warns_once_per_step() {
        let mut b = Backoff::default();
        let got: Vec<(u64, bool)> = (0..10)
            .map(|_| {
                let (d, warn) = b.fail();
                (u64::try_from(d.as_millis()).unwrap(), warn)
            })
            .collect();
        assert_eq!(
            got,
            [
                (10, true),
                (20, true),
                (40, true),
                (80, true),
                (160, true),
                (320, true),
                (640, true),
                (1000, true),
                (1000, false),
                (1000, false),
            ]
        );
        assert_eq!(steps_to_max(), 8);
        // At the longest sleep, one warning a minute.
        let warns = (0..120).filter(|_| b.fail().1).count();
        assert_eq!(warns, 2);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn concurrent_gets_share_one_read_per_period() {
        let cache = Arc::new(GaugeCache::new(Duration::from_millis(300)));
        let reads = Arc::new(AtomicU64::new(0));
        let get = |cache: Arc<GaugeCache>, reads: Arc<AtomicU64>| async move {
            cache
                .get(|| async {
                    let n = reads.fetch_add(1, Ordering::SeqCst) + 1;
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    format!("g {n}\n")
                })
                .await
        };
        let tasks: Vec<_> = (0..100)
            .map(|_| tokio::spawn(get(cache.clone(), reads.clone())))
            .collect();
        let mut all = Vec::new();
        for t in tasks {
            all.push(t.await.unwrap());
        }
        assert!(all.iter().all(|t| t == "g 1\n"), "{all:?}");
        assert_eq!((reads.load(Ordering::SeqCst), cache.reads()), (1, 1));
        tokio::time::sleep(Duration::from_millis(350)).await;
        assert_eq!(get(cache.clone(), reads.clone()).await, "g 2\n");
        assert_eq!(cache.reads(), 2);
    }

    #[tokio::test]
    async fn a_cancelled_read_still_spends_its_period() {
        let cache = GaugeCache::new(Duration::from_secs(60));
        let slow = timeout(
            Duration::from_millis(10),
            cache.get(|| async {
                tokio::time::sleep(Duration::from_secs(5)).await;
                "never\n".to_owned()
            }),
        )
        .await;
        assert!(slow.is_err());
        let again = cache.get(|| async { "read again\n".to_owned() }).await;
        assert_eq!((again.as_str(), cache.reads()), ("", 1));
    }
}

//! The worker's `/healthz` and `/metrics` endpoint (`tilegate work --metrics-addr`) as an
//! attacker or a busy Prometheus meets it: slow-loris clients are dropped by the connection
//! deadline, connections over the cap are refused at once, accept errors back off instead of
//! spinning, and concurrent scrapes share one ledger read per period.

use crate::per_backend::per_backend;
use serde_json::Value;
use std::io::{ErrorKind, Read as _, Write as _};
use std::net::{SocketAddr, TcpStream};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex, mpsc};
use std::time::{Duration, Instant};
use tilegate_tests::{Target, tempdir};

/// The endpoint's connection cap (`MAX_CONNECTIONS` in `crates/tilegate-service/src/metrics.rs`).
const CAP: usize = 64;
/// Its request-head timeout (`HEAD_TIMEOUT`): a refusal must come well before it.
const HEAD_TIMEOUT: Duration = Duration::from_secs(5);
/// How long the ledger gauge is cached (`GAUGE_TTL`).
const GAUGE_TTL: Duration = Duration::from_secs(15);
/// A bound no healthy server comes near: the whole-connection deadline is 10 s.
const GENEROUS: Duration = Duration::from_secs(30);

/// A `tilegate work --metrics-addr 127.0.0.1:0` process, its port read from its log; killed
/// when dropped.
struct Endpoint {
    child: Option<Child>,
    addr: SocketAddr,
    log: Arc<Mutex<String>>,
}

impl Endpoint {
    /// Start `cmd` (the binary with its backend flags) as a worker serving the endpoint.
    fn start(mut cmd: Command) -> Self {
        let mut child = cmd
            .args(["--json", "work", "--metrics-addr", "127.0.0.1:0"])
            .env("TILEGATE_LOG", "info")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start tilegate work");
        let stderr = child.stderr.take().expect("piped stderr");
        let log = Arc::new(Mutex::new(String::new()));
        let (tx, rx) = mpsc::channel();
        let sink = log.clone();
        std::thread::spawn(move || {
            use std::io::BufRead as _;
            for line in std::io::BufReader::new(stderr).lines() {
                let Ok(line) = line else { break };
                if line.contains("serving /healthz and /metrics")
                    && let Some(addr) = line
                        .split_whitespace()
                        .find_map(|w| w.strip_prefix("addr="))
                        .and_then(|a| a.parse::<SocketAddr>().ok())
                {
                    let _ = tx.send(addr);
                }
                let mut log = sink.lock().unwrap();
                log.push_str(&line);
                log.push('\n');
            }
        });
        let mut ep = Self {
            child: Some(child),
            addr: SocketAddr::from(([127, 0, 0, 1], 0)),
            log,
        };
        ep.addr = rx
            .recv_timeout(Duration::from_secs(60))
            .unwrap_or_else(|_| panic!("the endpoint did not start:\n{}", ep.log()));
        ep
    }

    fn pid(&self) -> i32 {
        i32::try_from(self.child.as_ref().expect("running").id()).expect("a pid fits i32")
    }

    fn log(&self) -> String {
        self.log.lock().unwrap().clone()
    }

    fn connect(&self) -> TcpStream {
        TcpStream::connect(self.addr).expect("connect to the endpoint")
    }

    /// `GET path`: (status, body), or `None` if the connection failed or was closed early.
    fn get(&self, path: &str) -> Option<(u16, String)> {
        let r = tilegate_tests::http::try_get(&self.addr.to_string(), path, GENEROUS)?;
        Some((r.status, r.text()))
    }

    /// `/metrics`, which must answer 200.
    fn scrape(&self) -> String {
        match self.get("/metrics") {
            Some((200, body)) => body,
            other => panic!("/metrics answered {other:?}\n{}", self.log()),
        }
    }

    /// SIGTERM, then the worker's `--json` report.
    fn stop(mut self) -> Value {
        let child = self.child.take().expect("running");
        // SAFETY: kill(2) on our own child's pid.
        assert_eq!(unsafe { libc::kill(child.id() as i32, libc::SIGTERM) }, 0);
        let out = child.wait_with_output().expect("wait for the worker");
        assert!(out.status.success(), "worker failed:\n{}", self.log());
        serde_json::from_slice(&out.stdout).expect("the worker's json report")
    }
}

impl Drop for Endpoint {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// One sample of a family without labels in Prometheus text.
fn sample(metrics: &str, name: &str) -> Option<u64> {
    metrics
        .lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
}

/// Read until the server closes the socket (EOF or reset) or `bound` passes: what it sent,
/// and whether it closed.
fn read_until_closed(s: &mut TcpStream, bound: Duration) -> (Vec<u8>, bool) {
    let start = Instant::now();
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    while let Some(left) = bound.checked_sub(start.elapsed()) {
        s.set_read_timeout(Some(left.max(Duration::from_millis(1))))
            .unwrap();
        match s.read(&mut buf) {
            Ok(0) => return (got, true),
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(_) => return (got, true),
        }
    }
    (got, false)
}

/// A slow-loris client that trickles a request head one byte per 500 ms, and one that connects
/// and sends nothing, are both disconnected by the server well before a generous bound (the
/// head timeout is 5 s, the connection deadline 10 s), and neither is answered; meanwhile a
/// well-behaved client is served.
#[test]
fn slow_loris_clients_are_dropped_by_the_connection_deadline() {
    let tmp = tempdir();
    let ep = Endpoint::start(Target::Embedded.command(tmp.path()));

    let trickle = {
        let mut s = ep.connect();
        std::thread::spawn(move || {
            let start = Instant::now();
            let head = b"GET /metrics HTTP/1.1\r\nX-Slow: ";
            let mut got = Vec::new();
            let mut buf = [0u8; 1024];
            s.set_read_timeout(Some(Duration::from_millis(500)))
                .unwrap();
            for i in 0.. {
                if start.elapsed() > GENEROUS {
                    return (got, None);
                }
                if s.write_all(&[head.get(i).copied().unwrap_or(b'a')])
                    .is_err()
                {
                    return (got, Some(start.elapsed())); // EPIPE or reset: the server closed
                }
                // The pause between bytes, watching for the server's close.
                match s.read(&mut buf) {
                    Ok(0) => return (got, Some(start.elapsed())),
                    Ok(n) => got.extend_from_slice(&buf[..n]),
                    Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
                    Err(_) => return (got, Some(start.elapsed())),
                }
            }
            unreachable!()
        })
    };
    let silent = {
        let mut s = ep.connect();
        std::thread::spawn(move || {
            let start = Instant::now();
            let (got, closed) = read_until_closed(&mut s, GENEROUS);
            (got, closed.then(|| start.elapsed()))
        })
    };

    // While both hold their connections, another client is served.
    std::thread::sleep(Duration::from_secs(1));
    assert_eq!(ep.get("/healthz"), Some((200, "ok\n".to_owned())));

    for (what, client) in [("trickling", trickle), ("silent", silent)] {
        let (got, closed) = client.join().unwrap();
        let after = closed
            .unwrap_or_else(|| panic!("the {what} client was still connected after {GENEROUS:?}"));
        let text = String::from_utf8_lossy(&got);
        assert!(
            !text.contains(" 200 "),
            "the {what} client's unfinished request was answered: {text}"
        );
        println!("{what} client: closed by the server after {after:.1?}");
    }
    let timed_out = sample(&ep.scrape(), "http_connections_timed_out_total");
    assert_eq!(timed_out, Some(2), "{}", ep.log());
}

/// With the cap's worth of idle connections held open, every further connection is refused at
/// once (a 503 or a close, long before the head timeout) — not queued — and counted; once the
/// idle ones go, `/healthz` answers a new client again.
#[test]
fn connections_over_the_cap_are_refused_at_once_and_health_returns_when_they_go() {
    let tmp = tempdir();
    let ep = Endpoint::start(Target::Embedded.command(tmp.path()));
    let held: Vec<TcpStream> = (0..CAP).map(|_| ep.connect()).collect();

    const OVER: u64 = 8;
    for i in 0..OVER {
        let mut s = ep.connect();
        let start = Instant::now();
        let (got, closed) = read_until_closed(&mut s, HEAD_TIMEOUT - Duration::from_secs(1));
        assert!(
            closed,
            "connection {} over the cap was held open for {:?} instead of refused",
            i + 1,
            start.elapsed()
        );
        let text = String::from_utf8_lossy(&got);
        assert!(
            text.is_empty() || text.starts_with("HTTP/1.1 503 "),
            "an over-cap connection was answered: {text}"
        );
    }
    // The held connections still have their slots (the server has not closed them).
    let mut first = &held[0];
    first
        .set_read_timeout(Some(Duration::from_millis(100)))
        .unwrap();
    let err = first
        .read(&mut [0u8; 16])
        .expect_err("a held connection was closed");
    assert!(
        matches!(err.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut),
        "{err}"
    );

    drop(held);
    let start = Instant::now();
    let health = loop {
        match ep.get("/healthz") {
            Some((200, body)) => break body,
            other if start.elapsed() > GENEROUS => {
                panic!("/healthz after the idle connections went: {other:?}")
            }
            _ => std::thread::sleep(Duration::from_millis(50)),
        }
    };
    assert_eq!(health, "ok\n");
    let refused = sample(&ep.scrape(), "http_connections_refused_total").unwrap_or(0);
    assert!(refused >= OVER, "refused {refused}\n{}", ep.log());
}

/// 100 scrapes, 50 at a time, cost one read of the ledger's due index per gauge period (the
/// counters come from memory), counted by `ledger_gauge_reads_total` in `/metrics`. On AWS the
/// worker's own request meter confirms it: DynamoDB `Query` requests charged to no job are
/// exactly the 16 due shards per counted read.
fn concurrent_scrapes_read_the_ledger_once_per_period(target: Target) {
    let tmp = tempdir();
    let ep = Endpoint::start(target.command(tmp.path()));
    let start = Instant::now();
    for _wave in 0..2 {
        std::thread::scope(|s| {
            let scrapes: Vec<_> = (0..50).map(|_| s.spawn(|| ep.scrape())).collect();
            for scrape in scrapes {
                let body = scrape.join().unwrap();
                assert!(
                    sample(&body, "deletion_overdue_oldest_seconds").is_some(),
                    "{}: no ledger gauge in\n{body}",
                    target.name()
                );
            }
        });
    }
    let metrics = ep.scrape();
    let periods = start.elapsed().as_secs() / GAUGE_TTL.as_secs() + 1;
    let reads = sample(&metrics, "ledger_gauge_reads_total").expect("the reads counter");
    println!(
        "{}: 101 scrapes in {:.1?}: {reads} ledger read(s)",
        target.name(),
        start.elapsed()
    );
    assert!(
        (1..=periods).contains(&reads),
        "{}: {reads} ledger reads in {periods} period(s)",
        target.name()
    );
    let report = ep.stop();
    if let Target::Aws(_) = target {
        let queries =
            report["unattributed_requests"]["requests_total{service=\"dynamodb\",op=\"Query\"}"]
                .as_u64()
                .unwrap_or(0);
        println!("aws: {queries} DynamoDB Query request(s) for the gauge");
        assert_eq!(queries, 16 * reads, "{report}");
    }
}

per_backend!(concurrent_scrapes_read_the_ledger_once_per_period);

/// CPU time (user + system) a process has used, from `/proc/PID/stat`.
fn cpu_time(pid: i32) -> Duration {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    // Fields after the command's closing parenthesis; utime and stime are the 14th and 15th.
    let rest = &stat[stat.rfind(')').unwrap() + 2..];
    let f: Vec<u64> = rest
        .split(' ')
        .skip(11)
        .take(2)
        .map(|x| x.parse().unwrap())
        .collect();
    // SAFETY: sysconf has no preconditions.
    let hz = u64::try_from(unsafe { libc::sysconf(libc::_SC_CLK_TCK) }).unwrap();
    Duration::from_millis((f[0] + f[1]) * 1000 / hz)
}

/// Another process's limit on open files, after setting it to `set` if given (the limit
/// before).
fn nofile(pid: i32, set: Option<libc::rlimit>) -> libc::rlimit {
    let mut old = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    let new = set.as_ref().map_or(std::ptr::null(), std::ptr::from_ref);
    // SAFETY: prlimit(2) on our own child, with valid pointers (a null new limit only reads).
    let rc = unsafe { libc::prlimit(pid, libc::RLIMIT_NOFILE, new, &raw mut old) };
    assert_eq!(rc, 0, "prlimit: {}", std::io::Error::last_os_error());
    old
}

/// When `accept` fails (EMFILE: the worker is out of file descriptors) the endpoint sleeps with
/// an exponential backoff instead of retrying in a tight loop: over 4 s of failures it uses
/// little CPU and logs a handful of warnings, and it serves again once descriptors are free.
#[test]
fn accept_errors_back_off_instead_of_spinning() {
    let tmp = tempdir();
    let ep = Endpoint::start(Target::Embedded.command(tmp.path()));
    assert_eq!(ep.get("/healthz"), Some((200, "ok\n".to_owned())));
    let pid = ep.pid();
    let open: std::collections::BTreeSet<u64> = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .collect();
    let lowest_free = (0..).find(|fd| !open.contains(fd)).unwrap();
    // Every descriptor below the limit is taken: the next accept fails with EMFILE.
    let old = nofile(pid, None);
    nofile(
        pid,
        Some(libc::rlimit {
            rlim_cur: lowest_free,
            rlim_max: old.rlim_max,
        }),
    );
    let clients: Vec<TcpStream> = (0..8).map(|_| ep.connect()).collect();
    let start = Instant::now();
    while !ep.log().contains("accept failed") {
        assert!(
            start.elapsed() < GENEROUS,
            "no accept error logged:\n{}",
            ep.log()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let cpu_before = cpu_time(pid);
    std::thread::sleep(Duration::from_secs(4));
    let cpu = cpu_time(pid) - cpu_before;
    let warnings = ep.log().matches("accept failed").count();
    println!("4 s of EMFILE: {cpu:?} of CPU, {warnings} warning(s)");
    nofile(pid, Some(old));
    drop(clients);
    assert!(
        cpu < Duration::from_secs(1),
        "the accept loop used {cpu:?} of CPU in 4 s of EMFILE:\n{}",
        ep.log()
    );
    // 10 ms doubling to 1 s is 8 steps; one warning per step.
    assert!(
        (1..=9).contains(&warnings),
        "{warnings} warnings:\n{}",
        ep.log()
    );
    let start = Instant::now();
    while ep.get("/healthz") != Some((200, "ok\n".to_owned())) {
        assert!(
            start.elapsed() < GENEROUS,
            "the endpoint did not recover:\n{}",
            ep.log()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

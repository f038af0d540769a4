//! `tilegate serve` under load on loopback: `GET /v1/jobs/{id}` from concurrent keep-alive
//! clients, and the event stream opened by concurrent clients (connect to first event), each
//! for a fixed time; requests per second and latency percentiles. The server is the real
//! binary over the embedded backend; the clients are this process's, on the same machine, so
//! they share its cores with the server (the figures say how many).

use anyhow::{Context as _, bail};
use serde::Serialize;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpStream;

pub struct Config {
    pub bin: PathBuf,
    pub work: PathBuf,
    pub clients: Vec<usize>,
    pub seconds: u64,
}

#[derive(Debug, Serialize)]
pub struct Row {
    /// `get-job`, `events` (open, first event, close) or `get-job+streams` (while 256
    /// streams are held open).
    pub what: String,
    pub clients: usize,
    pub requests: u64,
    pub errors: u64,
    pub rps: f64,
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub max_ms: f64,
}

#[derive(Debug, Serialize)]
pub struct Doc {
    pub cores: usize,
    pub seconds: u64,
    pub rows: Vec<Row>,
}

struct Server {
    child: Child,
    addr: String,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn tilegate(bin: &Path, data: &Path, args: &[&str]) -> anyhow::Result<String> {
    let out = Command::new(bin.join("tilegate"))
        .arg("--data")
        .arg(data)
        .args(args)
        .output()
        .with_context(|| format!("run {}", bin.join("tilegate").display()))?;
    if !out.status.success() {
        bail!(
            "tilegate {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(String::from_utf8(out.stdout)?)
}

/// A job of tenant `bench` (planned by the operator's CLI) and a key for that tenant.
fn setup(c: &Config) -> anyhow::Result<(PathBuf, String, String)> {
    let data = c.work.join("serve-bench");
    let _ = std::fs::remove_dir_all(&data);
    std::fs::create_dir_all(&data)?;
    let scene = data.join("scene.tif");
    tilegate(
        &c.bin,
        &data,
        &["sample-scene", scene.to_str().unwrap(), "--size", "2048"],
    )?;
    let planned: serde_json::Value = serde_json::from_str(&tilegate(
        &c.bin,
        &data,
        &[
            "--json",
            "plan",
            scene.to_str().unwrap(),
            "--tenant",
            "bench",
        ],
    )?)?;
    let job = planned["job_id"]
        .as_str()
        .or_else(|| planned["job"]["job_id"].as_str())
        .context("plan printed no job_id")?
        .to_owned();
    let key: serde_json::Value = serde_json::from_str(&tilegate(
        &c.bin,
        &data,
        &["--json", "keys", "create", "--tenant", "bench"],
    )?)?;
    let key = key["key"].as_str().context("no key")?.to_owned();
    Ok((data, job, key))
}

fn start(c: &Config, data: &Path) -> anyhow::Result<Server> {
    use std::io::BufRead as _;
    let mut child = Command::new(c.bin.join("tilegate"))
        .arg("--data")
        .arg(data)
        .args([
            "--json",
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--rate-limit",
            "0",
            "--max-stream",
            "10m",
            // The 256 streams are one tenant's.
            "--max-streams-per-tenant",
            "1000",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()?;
    let stdout = child.stdout.take().context("stdout")?;
    let mut text = String::new();
    for line in std::io::BufReader::new(stdout).lines() {
        text.push_str(&line?);
        if let Ok(v) = serde_json::from_str::<serde_json::Value>(&text) {
            let addr = v["listen"].as_str().context("no listen")?.to_owned();
            return Ok(Server { child, addr });
        }
    }
    bail!("serve printed no address")
}

/// One keep-alive connection's request; the response read to its `content-length`.
async fn get(s: &mut TcpStream, req: &[u8], buf: &mut Vec<u8>) -> anyhow::Result<u16> {
    s.write_all(req).await?;
    buf.clear();
    let mut chunk = [0u8; 8192];
    loop {
        let n = s.read(&mut chunk).await?;
        if n == 0 {
            bail!("connection closed");
        }
        buf.extend_from_slice(&chunk[..n]);
        if let Some(split) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = std::str::from_utf8(&buf[..split])?.to_ascii_lowercase();
            let status: u16 = head
                .split(' ')
                .nth(1)
                .and_then(|s| s.parse().ok())
                .context("status")?;
            let length: usize = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .and_then(|v| v.trim().parse().ok())
                .context("content-length")?;
            if buf.len() >= split + 4 + length {
                return Ok(status);
            }
        }
    }
}

/// Open the stream, read to its first event, close.
async fn first_event(addr: &str, req: &[u8]) -> anyhow::Result<()> {
    let mut s = TcpStream::connect(addr).await?;
    s.write_all(req).await?;
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        let n = s.read(&mut chunk).await?;
        if n == 0 {
            bail!("stream ended before an event");
        }
        buf.extend_from_slice(&chunk[..n]);
        if buf.starts_with(b"HTTP/1.1 200") && buf.windows(6).any(|w| w == b"data: ") {
            return Ok(());
        }
        if buf.len() > 12 && !buf.starts_with(b"HTTP/1.1 200") {
            bail!("{}", String::from_utf8_lossy(&buf[..12]));
        }
    }
}

fn request(addr: &str, path: &str, key: &str, close: bool) -> Vec<u8> {
    format!(
        "GET {path} HTTP/1.1\r\nhost: {addr}\r\nauthorization: Bearer {key}\r\n{}\r\n",
        if close { "connection: close\r\n" } else { "" }
    )
    .into_bytes()
}

fn row(what: &str, clients: usize, seconds: f64, mut lat: Vec<Duration>, errors: u64) -> Row {
    lat.sort();
    let q = |p: f64| {
        lat.get(((lat.len() as f64 * p).ceil() as usize).saturating_sub(1))
            .map_or(0.0, |d| d.as_secs_f64() * 1e3)
    };
    Row {
        what: what.to_owned(),
        clients,
        requests: lat.len() as u64,
        errors,
        rps: lat.len() as f64 / seconds,
        p50_ms: q(0.50),
        p99_ms: q(0.99),
        max_ms: q(1.0),
    }
}

/// `clients` tasks asking `path` until `seconds` pass: keep-alive `GET`s, or (`stream`)
/// each a new connection read to its first event; every success's latency, and the failures.
async fn load(
    addr: &str,
    path: &str,
    key: &str,
    clients: usize,
    seconds: u64,
    stream: bool,
) -> (Vec<Duration>, u64) {
    let until = Instant::now() + Duration::from_secs(seconds);
    let req = request(addr, path, key, stream);
    let tasks: Vec<_> = (0..clients)
        .map(|_| {
            let (addr, req) = (addr.to_owned(), req.clone());
            tokio::spawn(async move {
                let (mut lat, mut errors, mut buf) = (Vec::new(), 0u64, Vec::new());
                let mut conn = None;
                while Instant::now() < until {
                    let t = Instant::now();
                    let ok = if stream {
                        first_event(&addr, &req).await.is_ok()
                    } else {
                        if conn.is_none() {
                            conn = TcpStream::connect(&addr).await.ok();
                        }
                        match conn.as_mut() {
                            Some(s) => matches!(get(s, &req, &mut buf).await, Ok(200)),
                            None => false,
                        }
                    };
                    if ok {
                        lat.push(t.elapsed());
                    } else {
                        errors += 1;
                        conn = None;
                    }
                }
                (lat, errors)
            })
        })
        .collect();
    let (mut lat, mut errors) = (Vec::new(), 0);
    for t in tasks {
        let (l, e) = t.await.expect("a client task");
        lat.extend(l);
        errors += e;
    }
    (lat, errors)
}

pub fn run(c: &Config) -> anyhow::Result<Doc> {
    let (data, job, key) = setup(c)?;
    let server = start(c, &data)?;
    let addr = server.addr.clone();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let job_path = format!("/v1/jobs/{job}");
    let events_path = format!("/v1/jobs/{job}/events");
    let mut rows = Vec::new();
    rt.block_on(async {
        // Warm up: the first requests open the tables.
        let _ = load(&addr, &job_path, &key, 4, 1, false).await;
        for (what, path, stream) in [
            ("get-job", &job_path, false),
            ("events", &events_path, true),
        ] {
            for &n in &c.clients {
                let (lat, err) = load(&addr, path, &key, n, c.seconds, stream).await;
                rows.push(row(what, n, c.seconds as f64, lat, err));
            }
        }
        // Streams held open while `get-job` is asked.
        let held: Vec<_> = (0..256)
            .map(|_| {
                let (a, req) = (addr.clone(), request(&addr, &events_path, &key, true));
                tokio::spawn(async move {
                    if let Ok(mut s) = TcpStream::connect(&a).await {
                        let _ = s.write_all(&req).await;
                        let mut b = [0u8; 4096];
                        while matches!(s.read(&mut b).await, Ok(n) if n > 0) {}
                    }
                })
            })
            .collect();
        tokio::time::sleep(Duration::from_secs(2)).await;
        let n = *c.clients.last().unwrap_or(&16);
        let (lat, err) = load(&addr, &job_path, &key, n, c.seconds, false).await;
        rows.push(row("get-job+streams", n, c.seconds as f64, lat, err));
        held.iter().for_each(tokio::task::JoinHandle::abort);
    });
    drop(server);
    Ok(Doc {
        cores: std::thread::available_parallelism().map_or(1, |n| n.get()),
        seconds: c.seconds,
        rows,
    })
}

pub fn table(d: &Doc) -> String {
    let mut s = format!(
        "`tilegate serve` on loopback, {} cores shared by server and clients, {} s per row\n\n\
         | what | clients | requests | errors | req/s | p50 ms | p99 ms | max ms |\n\
         |---|---|---|---|---|---|---|---|\n",
        d.cores, d.seconds
    );
    for r in &d.rows {
        s.push_str(&format!(
            "| {} | {} | {} | {} | {:.0} | {:.2} | {:.2} | {:.2} |\n",
            r.what, r.clients, r.requests, r.errors, r.rps, r.p50_ms, r.p99_ms, r.max_ms
        ));
    }
    s
}

//! HTTP in the tests: the one client every test talks HTTP/1.1 with ([`request`], [`get`],
//! [`try_get`] — one connection per request, the whole response read), sources served from
//! 127.0.0.1, and the source policy that lets `tilegate` read them.

use serde_json::Value;
use std::io::{Read as _, Write as _};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

/// For a test whose sources are served from 127.0.0.1 (which the default source policy refuses:
/// loopback is no place a shared service's sources may reach): write a policy that allows the
/// loopback range beside the defaults, and hand it to every `tilegate` this test process starts
/// (`TILEGATE_SOURCE_POLICY`). nextest runs each test in a process of its own, so the variable
/// is this test's alone. Returns the policy file.
pub fn allow_loopback_sources(dir: &Path) -> PathBuf {
    let path = dir.join("source-policy.toml");
    std::fs::write(
        &path,
        "# The test's HTTP server is on 127.0.0.1.\nallow_addresses = [\"127.0.0.0/8\", \"::1\"]\n",
    )
    .unwrap();
    // SAFETY: set before this test starts any thread that reads the environment.
    unsafe { std::env::set_var("TILEGATE_SOURCE_POLICY", &path) };
    path
}

/// A local HTTP server with ranges and ETags over `root` (tests/fixtures/http_range_server.py).
pub struct HttpServer {
    child: std::process::Child,
    pub port: u16,
}

impl HttpServer {
    /// Serve `root` on 127.0.0.1; the test's `tilegate` processes are allowed to read from
    /// loopback ([`allow_loopback_sources`]).
    pub fn start(root: &Path) -> Self {
        allow_loopback_sources(root.parent().unwrap_or(root));
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/http_range_server.py");
        let mut child = Command::new("python3")
            .arg(script)
            .arg(root)
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("start the HTTP server");
        let mut line = String::new();
        std::io::BufRead::read_line(
            &mut std::io::BufReader::new(child.stdout.as_mut().unwrap()),
            &mut line,
        )
        .unwrap();
        let port = line.trim().parse().expect("the server prints its port");
        Self { child, port }
    }

    pub fn url(&self, name: &str) -> String {
        format!("http://127.0.0.1:{}/{name}", self.port)
    }
}

impl Drop for HttpServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// An HTTP response.
#[derive(Debug, Clone)]
pub struct Reply {
    pub status: u16,
    /// Header names lower-case.
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Reply {
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or_else(|e| {
            panic!(
                "{} is not JSON ({e}): {}",
                self.status,
                String::from_utf8_lossy(&self.body)
            )
        })
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}

/// One request to `addr` (`host:port`) on its own connection; the whole response read (an event
/// stream: until the server ends it). Panics if the server cannot be reached.
pub fn request(
    addr: &str,
    method: &str,
    path: &str,
    headers: &[(String, String)],
    body: Option<String>,
) -> Reply {
    try_request(addr, method, path, headers, body, Duration::from_secs(120))
        .unwrap_or_else(|e| panic!("{method} http://{addr}{path}: {e}"))
}

/// `GET` of an `http://host:port/path?query` URL (an emulator's, a presigned one).
pub fn get(url: &str) -> Reply {
    let rest = url.strip_prefix("http://").expect("an http:// URL");
    let (addr, path) = rest.split_at(rest.find('/').expect("a path"));
    request(addr, "GET", path, &[], None)
}

/// `GET path` of a server that may not be up yet or may close early (a worker's endpoint):
/// `None` if the connection failed or the answer did not arrive within `timeout`.
pub fn try_get(addr: &str, path: &str, timeout: Duration) -> Option<Reply> {
    try_request(addr, "GET", path, &[], None, timeout).ok()
}

/// [`request`] that returns what went wrong on the connection instead of panicking.
pub fn try_request(
    addr: &str,
    method: &str,
    path: &str,
    headers: &[(String, String)],
    body: Option<String>,
    timeout: Duration,
) -> std::io::Result<Reply> {
    let mut s = TcpStream::connect(addr)?;
    s.set_read_timeout(Some(timeout))?;
    let mut req = format!("{method} {path} HTTP/1.1\r\nhost: {addr}\r\nconnection: close\r\n");
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    let body = body.unwrap_or_default();
    if !body.is_empty() || method == "POST" {
        req.push_str(&format!(
            "content-type: application/json\r\ncontent-length: {}\r\n",
            body.len()
        ));
    }
    req.push_str("\r\n");
    req.push_str(&body);
    s.write_all(req.as_bytes())?;
    let raw = read_response(&mut s)?;
    parse(&raw).ok_or_else(|| {
        std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("not an HTTP response: {:?}", String::from_utf8_lossy(&raw)),
        )
    })
}

/// Read one response: to its `content-length`, its last chunk, or the connection's end
/// (a peer may keep the connection open whatever `connection: close` asked).
fn read_response(s: &mut TcpStream) -> std::io::Result<Vec<u8>> {
    let mut raw = Vec::new();
    let mut buf = [0u8; 16 * 1024];
    loop {
        if let Some(split) = raw.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&raw[..split]).to_ascii_lowercase();
            let body = &raw[split + 4..];
            let length = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .and_then(|v| v.trim().parse::<usize>().ok());
            if length.is_some_and(|n| body.len() >= n)
                || (head.contains("transfer-encoding: chunked") && body.ends_with(b"0\r\n\r\n"))
            {
                return Ok(raw);
            }
        }
        match s.read(&mut buf)? {
            0 => return Ok(raw),
            n => raw.extend_from_slice(&buf[..n]),
        }
    }
}

fn parse(raw: &[u8]) -> Option<Reply> {
    let split = raw.windows(4).position(|w| w == b"\r\n\r\n")?;
    let head = String::from_utf8_lossy(&raw[..split]).into_owned();
    let mut lines = head.split("\r\n");
    let status: u16 = lines.next()?.split(' ').nth(1)?.parse().ok()?;
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    let mut body = raw[split + 4..].to_vec();
    if headers
        .iter()
        .any(|(k, v)| k == "transfer-encoding" && v.contains("chunked"))
    {
        body = dechunk(&body);
    }
    Some(Reply {
        status,
        headers,
        body,
    })
}

fn dechunk(mut b: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    while let Some(eol) = b.windows(2).position(|w| w == b"\r\n") {
        let n = usize::from_str_radix(String::from_utf8_lossy(&b[..eol]).trim(), 16).unwrap_or(0);
        if n == 0 {
            break;
        }
        let start = eol + 2;
        let end = (start + n).min(b.len());
        out.extend_from_slice(&b[start..end]);
        b = &b[(end + 2).min(b.len())..];
    }
    out
}

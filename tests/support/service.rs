//! The job service under test: a `tilegate serve` process on 127.0.0.1, plain HTTP/1.1 to it
//! (one connection per request), and an OIDC issuer of the test's own (an ES256 key made here,
//! its JWKS written to a file, tokens signed with it).

use serde_json::{Value, json};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// A `tilegate serve` process, killed when dropped; its stderr (logs, audit lines) in a file.
pub struct Server {
    child: Child,
    /// `127.0.0.1:PORT`.
    pub addr: String,
    /// What it printed once it listened (`--json`).
    pub listening: Value,
    pub log: PathBuf,
}

impl Server {
    /// Start `cmd` (a `tilegate … serve` command line without `--listen`), wait until it
    /// prints where it listens.
    pub fn start(mut cmd: Command, serve_args: &[&str], log: PathBuf) -> Self {
        cmd.args(["--json", "serve", "--listen", "127.0.0.1:0"])
            .args(serve_args)
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&log).expect("create the server log"));
        let mut child = cmd.spawn().expect("start tilegate serve");
        // The first JSON value on stdout (pretty-printed, so read up to its closing brace).
        let first = serde_json::Deserializer::from_reader(child.stdout.take().expect("stdout"))
            .into_iter::<Value>()
            .next();
        let v = match first {
            Some(Ok(v)) => v,
            other => {
                let _ = child.kill();
                panic!(
                    "serve printed no JSON ({other:?})\n{}",
                    std::fs::read_to_string(&log).unwrap_or_default()
                )
            }
        };
        Self {
            child,
            addr: v["listen"].as_str().expect("listen").to_owned(),
            listening: v,
            log,
        }
    }

    /// The server's log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    pub fn call(
        &self,
        method: &str,
        path: &str,
        auth: Option<&str>,
        body: Option<&Value>,
    ) -> Reply {
        let mut headers = Vec::new();
        if let Some(a) = auth {
            headers.push(("authorization".to_owned(), format!("Bearer {a}")));
        }
        request(
            &self.addr,
            method,
            path,
            &headers,
            body.map(|b| b.to_string()),
        )
    }
}

impl Drop for Server {
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

/// One request on its own connection; the whole response read (an event stream: until the
/// server ends it).
pub fn request(
    addr: &str,
    method: &str,
    path: &str,
    headers: &[(String, String)],
    body: Option<String>,
) -> Reply {
    let mut s = TcpStream::connect(addr).expect("connect to the service");
    s.set_read_timeout(Some(Duration::from_secs(120))).unwrap();
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
    s.write_all(req.as_bytes()).unwrap();
    parse(&read_response(&mut s))
}

/// Read one response: to its `content-length`, its last chunk, or the connection's end
/// (a peer may keep the connection open whatever `connection: close` asked).
fn read_response(s: &mut TcpStream) -> Vec<u8> {
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
                return raw;
            }
        }
        match s.read(&mut buf).unwrap() {
            0 => return raw,
            n => raw.extend_from_slice(&buf[..n]),
        }
    }
}

fn parse(raw: &[u8]) -> Reply {
    let split = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("a response head");
    let head = String::from_utf8_lossy(&raw[..split]).into_owned();
    let mut lines = head.split("\r\n");
    let status: u16 = lines
        .next()
        .and_then(|l| l.split(' ').nth(1))
        .and_then(|s| s.parse().ok())
        .expect("a status line");
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
    Reply {
        status,
        headers,
        body,
    }
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

/// An OIDC issuer of the test's own: one ES256 key, named `kid`.
pub struct Issuer {
    pub kid: String,
    pkcs8: Vec<u8>,
    public: Vec<u8>,
}

fn b64url(b: &[u8]) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(b)
}

impl Issuer {
    pub fn new(kid: &str) -> Self {
        use aws_lc_rs::signature::{ECDSA_P256_SHA256_FIXED_SIGNING, EcdsaKeyPair, KeyPair as _};
        let rng = aws_lc_rs::rand::SystemRandom::new();
        let pkcs8 = EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, &rng)
            .expect("an EC key");
        let pair = EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, pkcs8.as_ref())
            .expect("the key parses");
        Self {
            kid: kid.to_owned(),
            pkcs8: pkcs8.as_ref().to_vec(),
            public: pair.public_key().as_ref().to_vec(),
        }
    }

    /// The public key as a JWK.
    pub fn jwk(&self) -> Value {
        // An uncompressed P-256 point: 0x04, X (32 bytes), Y (32 bytes).
        json!({
            "kty": "EC", "crv": "P-256", "use": "sig", "alg": "ES256", "kid": self.kid,
            "x": b64url(&self.public[1..33]), "y": b64url(&self.public[33..65]),
        })
    }

    /// Write a JWKS of these issuers' keys to `path`.
    pub fn write_jwks(path: &Path, issuers: &[&Issuer]) {
        let keys: Vec<Value> = issuers.iter().map(|i| i.jwk()).collect();
        std::fs::write(path, json!({ "keys": keys }).to_string()).unwrap();
    }

    /// A token of `claims`, signed with this key.
    pub fn token(&self, claims: &Value) -> String {
        let mut h = jsonwebtoken::Header::new(jsonwebtoken::Algorithm::ES256);
        h.kid = Some(self.kid.clone());
        jsonwebtoken::encode(
            &h,
            claims,
            &jsonwebtoken::EncodingKey::from_ec_der(&self.pkcs8),
        )
        .expect("sign a token")
    }
}

/// Seconds since the epoch.
pub fn epoch_s() -> i64 {
    tilegate_core::now_millis() / 1000
}

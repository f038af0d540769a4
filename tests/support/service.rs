//! The job service under test: a `tilegate serve` process on 127.0.0.1, called through the
//! tests' one HTTP client ([`request`]), and an OIDC issuer of the test's own (an ES256 key made here,
//! its JWKS written to a file, tokens signed with it).

pub use crate::support::http::{Reply, request};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

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

/// `tilegate ARGS…` (the README's `serve --demo`) started in `dir` on any free port, read up
/// to the page's link it prints (`open http://…/#key=…`); killed when dropped. What it prints
/// after the link is read and dropped: a closed stdout would end it at its next line.
pub struct Demo {
    child: Child,
    /// `http://127.0.0.1:PORT`.
    pub base: String,
    /// `127.0.0.1:PORT`.
    pub addr: String,
    /// The demo tenant's API key.
    pub key: String,
    /// Everything it printed up to the link.
    pub printed: String,
}

impl Demo {
    pub fn start(dir: &Path, args: &[&str], log: &Path) -> Self {
        use std::io::BufRead as _;
        let mut child = Command::new(crate::tilegate_bin())
            .args(args)
            .current_dir(dir)
            .env("TILEGATE_LISTEN", "127.0.0.1:0")
            .env_remove("TILEGATE_DATA")
            .env_remove("TILEGATE_SOURCE_POLICY")
            .env_remove("TILEGATE_CONFIG")
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(log).expect("create the server log"))
            .spawn()
            .expect("start tilegate serve --demo");
        let mut lines = std::io::BufReader::new(child.stdout.take().expect("stdout")).lines();
        let mut printed = String::new();
        let mut link = None;
        for line in lines.by_ref().map_while(Result::ok) {
            printed.push_str(&line);
            printed.push('\n');
            if let Some(l) = line.strip_prefix("open ") {
                link = Some(l.trim().to_owned());
                break;
            }
        }
        std::thread::spawn(move || lines.for_each(drop));
        let Some(link) = link else {
            let _ = child.kill();
            panic!(
                "serve --demo printed no link:\n{printed}\n{}",
                std::fs::read_to_string(log).unwrap_or_default()
            );
        };
        let base = link.split("/#").next().unwrap_or_default().to_owned();
        Self {
            child,
            addr: base.trim_start_matches("http://").to_owned(),
            key: link.split("#key=").nth(1).unwrap_or_default().to_owned(),
            base,
            printed,
        }
    }
}

impl Drop for Demo {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

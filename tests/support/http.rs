//! Sources served over HTTP from 127.0.0.1, and the source policy that lets `tilegate` read them.

use std::path::{Path, PathBuf};
use std::process::Command;

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

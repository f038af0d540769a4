//! Headless Chromium for the report tests: render a page, screenshot it, and read the DOM back.

use crate::support::http::request;
use crate::tempdir;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Headless Chromium (Debian's `chromium`, installed by `.ci/setup`), started as the report
/// tests need it: no sandbox (root), no GPU, no background networking (the machine is offline),
/// a fresh profile per call. `None` (with a printed reason) where it is not installed outside
/// CI; in CI a missing browser fails the test.
pub fn chromium(test: &str) -> Option<PathBuf> {
    let bin = PathBuf::from("/usr/bin/chromium");
    if bin.exists() {
        return Some(bin);
    }
    assert!(
        std::env::var_os("CI").is_none(),
        "{test}: no /usr/bin/chromium in CI: .ci/setup installs it"
    );
    println!("SKIPPED {test}: no /usr/bin/chromium (apt-get install chromium)");
    None
}

/// Load `page` in headless Chromium; return the DOM it built (`--dump-dom`), and save a
/// screenshot of `width`×`height` CSS pixels to `screenshot`.
pub fn render_in_chromium(
    bin: &Path,
    page: &Path,
    screenshot: &Path,
    (width, height): (u32, u32),
) -> String {
    let url = format!("file://{}", page.display());
    let run = |extra: &[String]| {
        let profile = tempdir();
        let out = Command::new(bin)
            .args([
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-quic",
                "--no-first-run",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--hide-scrollbars",
            ])
            .arg(format!("--user-data-dir={}", profile.path().display()))
            .args(extra)
            .arg(&url)
            .output()
            .expect("run chromium");
        assert!(
            out.status.success(),
            "chromium failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        out
    };
    run(&[
        format!("--window-size={width},{height}"),
        format!("--screenshot={}", screenshot.display()),
    ]);
    assert!(
        screenshot.exists(),
        "chromium wrote no screenshot at {}",
        screenshot.display()
    );
    String::from_utf8(run(&["--dump-dom".to_owned()]).stdout).expect("the DOM is UTF-8")
}

/// The elements of `dom` whose start tag begins `<{tag}` and holds `needle`, each as its
/// attribute map (a small reader for the DOM Chromium serialises: double-quoted attributes).
pub fn elements(dom: &str, tag: &str, needle: &str) -> Vec<BTreeMap<String, String>> {
    let open = format!("<{tag} ");
    let mut out = Vec::new();
    let mut rest = dom;
    while let Some(i) = rest.find(&open) {
        let after = &rest[i + open.len()..];
        let end = after.find('>').unwrap_or(after.len());
        let attrs = &after[..end];
        rest = &after[end..];
        if !attrs.contains(needle) {
            continue;
        }
        let mut map = BTreeMap::new();
        let mut a = attrs;
        while let Some(eq) = a.find("=\"") {
            let name = a[..eq].trim().rsplit(' ').next().unwrap_or("").to_owned();
            let v = &a[eq + 2..];
            let close = v.find('"').unwrap_or(v.len());
            map.insert(name, v[..close].to_owned());
            a = &v[(close + 1).min(v.len())..];
        }
        out.push(map);
    }
    out
}

/// A WebDriver session on Chromium (Debian's chromedriver), headless.
pub struct Browser {
    driver: std::process::Child,
    addr: String,
    session: String,
    _profile: tempfile::TempDir,
}

impl Browser {
    pub fn start() -> Option<Self> {
        let bin = Path::new("/usr/bin/chromedriver");
        if !bin.exists() {
            assert!(
                std::env::var_os("CI").is_none(),
                "no chromedriver in CI: .ci/setup installs it"
            );
            println!("SKIPPED: no /usr/bin/chromedriver (apt-get install chromium-driver)");
            return None;
        }
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let driver = Command::new(bin)
            .arg(format!("--port={port}"))
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("start chromedriver");
        let addr = format!("127.0.0.1:{port}");
        let profile = tempdir();
        let caps = json!({"capabilities": {"alwaysMatch": {
            "browserName": "chrome",
            "goog:chromeOptions": {"binary": "/usr/bin/chromium", "args": [
                "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                "--disable-background-networking", "--disable-component-update", "--disable-sync",
                "--disable-dev-shm-usage",
                format!("--user-data-dir={}", profile.path().display())]}}}});
        let mut session = None;
        for _ in 0..100 {
            if std::net::TcpStream::connect(&addr).is_ok() {
                let r = request(&addr, "POST", "/session", &[], Some(caps.to_string()));
                assert_eq!(r.status, 200, "{}", r.text());
                session = Some(r.json()["value"]["sessionId"].as_str().unwrap().to_owned());
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
        Some(Self {
            driver,
            addr,
            session: session.expect("chromedriver answers"),
            _profile: profile,
        })
    }

    pub fn post(&self, what: &str, body: Value) -> Value {
        let r = request(
            &self.addr,
            "POST",
            &format!("/session/{}/{what}", self.session),
            &[],
            Some(body.to_string()),
        );
        assert_eq!(r.status, 200, "{what}: {}", r.text());
        r.json()["value"].clone()
    }

    pub fn script(&self, js: &str) -> Value {
        self.post("execute/sync", json!({"script": js, "args": []}))
    }

    /// Run `js` as an asynchronous script: it ends by calling `done(value)` (the last
    /// argument WebDriver passes), which is returned.
    pub fn script_async(&self, js: &str) -> Value {
        let js = format!("const done = arguments[arguments.length - 1];\n{js}");
        self.post("execute/async", json!({"script": js, "args": []}))
    }

    /// Wait up to `secs` for `js` to return something other than null or false.
    pub fn wait_for(&self, secs: u64, js: &str) -> Value {
        let until = std::time::Instant::now() + std::time::Duration::from_secs(secs);
        loop {
            let v = self.script(js);
            if !v.is_null() && v != json!(false) {
                return v;
            }
            assert!(
                std::time::Instant::now() < until,
                "timed out waiting for {js}"
            );
            std::thread::sleep(std::time::Duration::from_millis(200));
        }
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = request(
            &self.addr,
            "DELETE",
            &format!("/session/{}", self.session),
            &[],
            None,
        );
        let _ = self.driver.kill();
        let _ = self.driver.wait();
    }
}

//! Headless Chromium for the report tests: render a page, screenshot it, and read the DOM back.

use crate::tempdir;
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

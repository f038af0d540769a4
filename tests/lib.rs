//! Shared helpers for the integration tests: temporary data directories, the `tilegate`
//! binary, and GDAL's COG validator.

pub mod lossy;
pub mod responder;

use serde_json::Value;
use std::collections::BTreeMap;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The `tilegate` binary built beside the test binary (`cargo build -p tilegate-cli` first;
/// the README's test command does).
pub fn tilegate_bin() -> PathBuf {
    let exe = std::env::current_exe().expect("current exe");
    let dir = exe
        .parent()
        .and_then(Path::parent)
        .expect("test binary lives in target/<profile>/deps");
    let bin = dir.join("tilegate");
    assert!(
        bin.exists(),
        "{} is missing: run `cargo build -p tilegate-cli` before the tests",
        bin.display()
    );
    bin
}

/// The cross-process child helper of this package. Cargo builds a package's binaries before
/// its integration tests and puts them beside the test binary's `deps/` directory
/// (`CARGO_BIN_EXE_*` is set only when compiling integration tests, not this library).
pub fn child_bin() -> PathBuf {
    let exe = std::env::current_exe().expect("current exe");
    let dir = exe
        .parent()
        .and_then(Path::parent)
        .expect("test binary lives in target/<profile>/deps");
    let bin = dir.join("tilegate-test-child");
    assert!(
        bin.exists(),
        "{} is missing: build the tests package (`cargo build -p tilegate-tests --bins`)",
        bin.display()
    );
    bin
}

/// Run GDAL's COG validator (`validate_cloud_optimized_geotiff` from python3-gdal) with the
/// full check. Returns its output on failure. The validator must be installed: a missing
/// validator is a failure, not a skip.
pub fn validate_cog(path: &Path) -> Result<(), String> {
    let out = Command::new("/usr/bin/python3")
        .args([
            "-m",
            "osgeo_utils.samples.validate_cloud_optimized_geotiff",
            "--full-check=yes",
        ])
        .arg(path)
        .output()
        .map_err(|e| format!("run the COG validator (/usr/bin/python3 with python3-gdal): {e}"))?;
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    if out.status.success() && text.contains("is a valid cloud optimized GeoTIFF") {
        Ok(())
    } else {
        Err(format!("{}: {}", path.display(), text.trim()))
    }
}

/// A fresh temporary directory that lives as long as the returned guard.
pub fn tempdir() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("tilegate-test-")
        .tempdir()
        .expect("create a temporary directory")
}

/// Validate many files with one Python process (GDAL's `validate()` with the full check).
/// Returns every failing file with its errors.
pub fn validate_cogs(paths: &[PathBuf]) -> Result<(), String> {
    const SCRIPT: &str = r#"
import sys
from osgeo import gdal
from osgeo_utils.samples.validate_cloud_optimized_geotiff import validate
gdal.UseExceptions()
bad = 0
for path in sys.stdin.read().split("\n"):
    if not path:
        continue
    try:
        warnings, errors, _ = validate(path, full_check=True)
    except Exception as e:
        warnings, errors = [], [str(e)]
    if errors:
        bad += 1
        print(path + ": " + "; ".join(errors))
print("validated", bad)
"#;
    use std::io::Write;
    let mut child = Command::new("/usr/bin/python3")
        .args(["-c", SCRIPT])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .map_err(|e| format!("run the COG validator (/usr/bin/python3 with python3-gdal): {e}"))?;
    let list: String = paths.iter().map(|p| format!("{}\n", p.display())).collect();
    child
        .stdin
        .take()
        .expect("piped stdin")
        .write_all(list.as_bytes())
        .map_err(|e| e.to_string())?;
    let out = child.wait_with_output().map_err(|e| e.to_string())?;
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    if out.status.success() && text.trim_end().ends_with("validated 0") {
        Ok(())
    } else {
        Err(format!("{}{}", text, String::from_utf8_lossy(&out.stderr)))
    }
}

/// Run `tilegate --data DATA ARGS...` and return its output (whatever the exit status).
pub fn tg(data: &Path, args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(tilegate_bin());
    cmd.arg("--data").arg(data).args(args);
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().expect("run tilegate")
}

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

/// Run with `--json`, require success, parse stdout.
pub fn tg_json(data: &Path, args: &[&str]) -> Value {
    let mut a = vec!["--json"];
    a.extend_from_slice(args);
    json_of(args, &tg(data, &a, &[]))
}

/// The JSON document a successful `tilegate --json ARGS` printed; panics with its stderr if it
/// failed.
pub fn json_of(args: &[&str], out: &Output) -> Value {
    assert!(
        out.status.success(),
        "tilegate {args:?} failed: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "tilegate {args:?} printed no JSON ({e}): {}",
            String::from_utf8_lossy(&out.stdout)
        )
    })
}

/// Every tile file under `dir`: path → (mtime ns, inode, content hash).
pub fn snapshot(dir: &Path) -> BTreeMap<PathBuf, (i64, u64, String)> {
    let mut out = BTreeMap::new();
    let Ok(rd) = std::fs::read_dir(dir) else {
        return out;
    };
    for e in rd {
        let p = e.unwrap().path();
        if p.extension().is_some_and(|x| x == "tif") {
            let m = std::fs::metadata(&p).unwrap();
            let hash = blake3_hex(&std::fs::read(&p).unwrap());
            out.insert(
                p,
                (m.mtime() * 1_000_000_000 + m.mtime_nsec(), m.ino(), hash),
            );
        }
    }
    out
}

pub fn blake3_hex(bytes: &[u8]) -> String {
    blake3::hash(bytes).to_hex().to_string()
}

pub fn tiles_dir(data: &Path, job: &str) -> PathBuf {
    data.join("objects")
        .join(tilegate_core::Prefix::DEFAULT)
        .join("tiles")
        .join(job)
}

pub fn sample(data: &Path, path: &Path, size: u32, seed: u64) {
    let out = tg(
        data,
        &[
            "sample-scene",
            path.to_str().unwrap(),
            "--size",
            &size.to_string(),
            "--seed",
            &seed.to_string(),
        ],
        &[],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Run one `work --until-empty` process that handles one message at a time (visibility 1 s),
/// with `extra` flags and `env`.
pub fn work_one_at_a_time(data: &Path, extra: &[&str], env: &[(&str, &str)]) -> Output {
    let mut args = ONE_AT_A_TIME.to_vec();
    args.extend_from_slice(extra);
    tg(data, &args, env)
}

/// The arguments of a `work --until-empty` process that handles one message at a time
/// (visibility 1 s).
pub const ONE_AT_A_TIME: [&str; 8] = [
    "work",
    "--until-empty",
    "--threads",
    "1",
    "--concurrency",
    "1",
    "--visibility",
    "1",
];

/// `tilegate sample-scene PATH --size SIZE` with `extra` options (bands, nodata, …).
pub fn sample_with(data: &Path, path: &Path, size: u32, extra: &[&str]) {
    let size = size.to_string();
    let mut args = vec!["sample-scene", path.to_str().unwrap(), "--size", &size];
    args.extend_from_slice(extra);
    let out = tg(data, &args, &[]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// [`work_one_at_a_time`] with the fault hook armed at `point` after `skip` passes; it is
/// expected to die there.
pub fn work_until_fault(data: &Path, point: &str, skip: u32) -> Output {
    let skip = skip.to_string();
    work_one_at_a_time(
        data,
        &[],
        &[("TILEGATE_FAULT", point), ("TILEGATE_FAULT_SKIP", &skip)],
    )
}

/// The scene's full-resolution pixels, geotransform, CRS and nodata equal the source's, it is a
/// valid COG, and GDAL reports `LAYOUT=COG`.
pub fn assert_scene_matches_source(scene: &Path, source: &Path) {
    use gdal::Metadata as _;
    validate_cog(scene).unwrap();
    let got = tilegate_cog::read_raster(scene.to_str().unwrap(), None, None).unwrap();
    let want = tilegate_cog::read_raster(source.to_str().unwrap(), None, None).unwrap();
    assert_eq!(
        (got.width, got.height, got.bands),
        (want.width, want.height, want.bands)
    );
    assert_eq!(got.dtype, want.dtype);
    assert_eq!(got.geotransform, want.geotransform);
    assert_eq!(got.crs_wkt, want.crs_wkt);
    assert_eq!(got.nodata, want.nodata);
    assert!(
        got.bytes == want.bytes,
        "scene pixels differ from the source"
    );
    let ds = gdal::Dataset::open(scene).unwrap();
    assert_eq!(
        ds.metadata_item("LAYOUT", "IMAGE_STRUCTURE").as_deref(),
        Some("COG"),
        "GDAL does not report LAYOUT=COG"
    );
}

/// S3, DynamoDB and SQS names unique to one test, on the emulator the README's test command
/// starts (S3 and DynamoDB single-threaded for atomic preconditions, SQS threaded).
#[derive(Debug, Clone)]
pub struct Aws {
    pub objects: String,
    pub tables: String,
    pub queue: String,
}

impl Aws {
    /// Names for `test`, or `None` (with a printed reason) without an emulator outside CI. In
    /// CI a missing emulator fails the test instead.
    pub fn for_test(test: &str) -> Option<Self> {
        use std::sync::atomic::{AtomicU64, Ordering};
        if std::env::var_os("TILEGATE_AWS_EMULATOR").is_none() {
            assert!(
                std::env::var_os("CI").is_none(),
                "{test}: no AWS emulator in CI: run through .ci/test, which starts it"
            );
            println!(
                "SKIPPED {test}: no AWS emulator (run eval \"$(bash .ci/aws-emulator start)\")"
            );
            return None;
        }
        static N: AtomicU64 = AtomicU64::new(0);
        let id = format!(
            "tg{}-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::SeqCst),
            tilegate_core::now_millis() % 100_000
        );
        Some(Self {
            objects: format!("s3://{id}/out"),
            tables: format!("dynamodb://{id}"),
            queue: format!("sqs://{id}"),
        })
    }

    /// The backend flags of every command.
    pub fn args<'a>(&'a self, data: &'a Path) -> Vec<&'a str> {
        vec![
            "--data",
            data.to_str().unwrap(),
            "--objects",
            &self.objects,
            "--tables",
            &self.tables,
            "--queue",
            &self.queue,
        ]
    }

    pub fn run(&self, data: &Path, args: &[&str], env: &[(&str, &str)]) -> Output {
        let mut cmd = Command::new(tilegate_bin());
        cmd.args(self.args(data)).args(args);
        for (k, v) in env {
            cmd.env(k, v);
        }
        cmd.output().expect("run tilegate")
    }

    pub fn json(&self, data: &Path, args: &[&str]) -> Value {
        let mut a = vec!["--json"];
        a.extend_from_slice(args);
        let out = self.run(data, &a, &[]);
        assert!(
            out.status.success(),
            "tilegate {args:?} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).expect("json output")
    }

    /// Every tile object: key → (ETag, LastModified).
    pub fn tiles(
        &self,
        job: &str,
    ) -> BTreeMap<String, (tilegate_core::ETag, std::time::SystemTime)> {
        use tilegate_core::object::ObjectStore;
        let rt = tokio::runtime::Runtime::new().unwrap();
        let store = rt
            .block_on(tilegate_aws::S3Store::connect(&self.objects))
            .unwrap();
        let list = rt
            .block_on(store.list(&format!("tilegate/tiles/{job}/")))
            .unwrap();
        list.into_iter()
            .map(|m| (m.key, (m.e_tag, m.last_modified)))
            .collect()
    }
}

/// Where a pipeline test runs the `tilegate` binary: the embedded backend of a data
/// directory, or AWS on the emulator.
#[derive(Debug, Clone)]
pub enum Target {
    Embedded,
    Aws(Aws),
    /// Objects at a cloud store's URL (`gs://…`, `az://…`), tables and queue embedded in the
    /// data directory.
    Objects(String),
}

impl Target {
    /// The embedded backend, and AWS (bucket, tables and queues created) when the emulator is
    /// there; in CI it must be.
    pub fn embedded_and_aws(test: &str) -> Vec<Self> {
        let mut t = vec![Self::Embedded];
        if let Some(aws) = Aws::for_test(test) {
            aws.json(tempdir().path(), &["init", "--create-bucket"]);
            t.push(Self::Aws(aws));
        }
        t
    }

    pub fn name(&self) -> &'static str {
        match self {
            Self::Embedded => "embedded",
            Self::Aws(_) => "aws",
            Self::Objects(url) if url.starts_with("gs://") => "gcs",
            Self::Objects(url) if url.starts_with("az://") => "azure",
            Self::Objects(_) => "objects",
        }
    }

    /// `tilegate` with the data directory and backend flags set.
    pub fn command(&self, data: &Path) -> Command {
        let mut cmd = Command::new(tilegate_bin());
        match self {
            Self::Embedded => {
                cmd.arg("--data").arg(data);
            }
            Self::Aws(aws) => {
                cmd.args(aws.args(data));
            }
            Self::Objects(url) => {
                cmd.arg("--data").arg(data).args(["--objects", url]);
            }
        }
        cmd
    }

    /// Run with `--json`, require success, parse stdout.
    pub fn json(&self, data: &Path, args: &[&str]) -> Value {
        let out = self
            .command(data)
            .arg("--json")
            .args(args)
            .output()
            .expect("run tilegate");
        json_of(args, &out)
    }

    /// The same stores the binary works on, opened in the test process.
    pub async fn backends(&self, data: &Path) -> tilegate_core::Backends {
        match self {
            Self::Embedded => tilegate_embedded::open_data_dir(data, 3).expect("open data dir"),
            Self::Aws(aws) => {
                tilegate_aws::AwsBackends::connect(&aws.objects, &aws.tables, &aws.queue, 3)
                    .await
                    .expect("connect to the emulator")
            }
            Self::Objects(url) => tilegate_backends::open(&tilegate_backends::Urls {
                data: data.to_path_buf(),
                objects: Some(url.clone()),
                tables: None,
                queue: None,
            })
            .await
            .expect("open the stores"),
        }
    }
}

/// Every object file under `root` (the embedded store's directory, its internal `.tilegate`
/// state excluded): path → (mtime ns, inode, content hash).
pub fn snapshot_tree(root: &Path) -> BTreeMap<PathBuf, (i64, u64, String)> {
    let mut out = BTreeMap::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let Ok(rd) = std::fs::read_dir(&dir) else {
            continue;
        };
        for e in rd {
            let p = e.unwrap().path();
            let m = std::fs::symlink_metadata(&p).unwrap();
            if m.is_dir() {
                if p.file_name().is_some_and(|n| n != ".tilegate") {
                    stack.push(p);
                }
            } else {
                let hash = blake3_hex(&std::fs::read(&p).unwrap());
                out.insert(
                    p,
                    (m.mtime() * 1_000_000_000 + m.mtime_nsec(), m.ino(), hash),
                );
            }
        }
    }
    out
}

/// A self-checking payload for crash tests: a header naming the key, the version, the body's
/// length and its hash, then ~2 MiB of body, so that any prefix of it is detectably partial.
pub fn crash_payload(key: &str, version: u64) -> Vec<u8> {
    let mut body = Vec::with_capacity(2 << 20);
    let mut x = blake3::Hasher::new();
    x.update(key.as_bytes());
    x.update(&version.to_le_bytes());
    x.finalize_xof().fill({
        body.resize((2 << 20) + (version as usize % 4096), 0);
        &mut body
    });
    let header = format!(
        "tilegate-crash-test {key} {version} {} {}\n",
        body.len(),
        blake3_hex(&body)
    );
    let mut out = header.into_bytes();
    out.extend_from_slice(&body);
    out
}

/// Check a [`crash_payload`]: its key and version if whole, else what is wrong.
pub fn check_crash_payload(bytes: &[u8]) -> Result<(String, u64), String> {
    let nl = bytes
        .iter()
        .position(|&b| b == b'\n')
        .ok_or_else(|| format!("no header in {} bytes", bytes.len()))?;
    let header = std::str::from_utf8(&bytes[..nl]).map_err(|e| e.to_string())?;
    let f: Vec<&str> = header.split(' ').collect();
    let [tag, key, version, len, hash] = f[..] else {
        return Err(format!("bad header {header:?}"));
    };
    let body = &bytes[nl + 1..];
    if tag != "tilegate-crash-test" || len.parse::<usize>() != Ok(body.len()) {
        return Err(format!("{header:?}: body is {} bytes", body.len()));
    }
    if blake3_hex(body) != hash {
        return Err(format!("{header:?}: body hash differs"));
    }
    Ok((key.to_owned(), version.parse().map_err(|_| "bad version")?))
}

/// What a [`ScriptedStore`] does to the calls it passes on to the real store beneath it: the
/// faults and lost answers the tests inject.
pub trait StoreScript: Send + Sync + std::fmt::Debug {
    /// Before a write — `put`, `create multipart`, `upload part`, `delete` — reaches the store: an
    /// error answers the call instead.
    fn before_write(&self, _operation: &'static str, _key: &str) -> tilegate_core::StoreResult<()> {
        Ok(())
    }
    /// What a put that reached the store answers (the store's own answer by default).
    fn answer_put(
        &self,
        _mode: &tilegate_core::object::PutMode,
        answer: tilegate_core::object::PutOutcome,
    ) -> tilegate_core::object::PutOutcome {
        answer
    }
}

/// A real object store under a [`StoreScript`].
#[derive(Debug)]
pub struct ScriptedStore<S> {
    pub inner: std::sync::Arc<dyn tilegate_core::object::ObjectStore>,
    pub script: S,
}

mod scripted {
    use super::{ScriptedStore, StoreScript};
    use bytes::Bytes;
    use std::time::SystemTime;
    use tilegate_core::StoreResult;
    use tilegate_core::object::{
        DeleteOptions, DeleteOutcome, GetOptions, GetOutcome, MultipartUpload, ObjectMeta,
        ObjectStore, PartId, PutMode, PutOptions, PutOutcome,
    };

    #[async_trait::async_trait]
    impl<S: StoreScript> ObjectStore for ScriptedStore<S> {
        fn name(&self) -> &'static str {
            "scripted"
        }
        async fn head(&self, key: &str) -> StoreResult<Option<ObjectMeta>> {
            self.inner.head(key).await
        }
        async fn get_opts(&self, key: &str, opts: GetOptions) -> StoreResult<GetOutcome> {
            self.inner.get_opts(key, opts).await
        }
        async fn put_opts(
            &self,
            key: &str,
            bytes: Bytes,
            opts: PutOptions,
        ) -> StoreResult<PutOutcome> {
            self.script.before_write("put", key)?;
            let mode = opts.mode.clone();
            let answer = self.inner.put_opts(key, bytes, opts).await?;
            Ok(self.script.answer_put(&mode, answer))
        }
        async fn delete_opts(&self, key: &str, opts: DeleteOptions) -> StoreResult<DeleteOutcome> {
            self.script.before_write("delete", key)?;
            self.inner.delete_opts(key, opts).await
        }
        async fn list(&self, prefix: &str) -> StoreResult<Vec<ObjectMeta>> {
            self.inner.list(prefix).await
        }
        async fn create_multipart(&self, key: &str, opts: &PutOptions) -> StoreResult<String> {
            self.script.before_write("create multipart", key)?;
            self.inner.create_multipart(key, opts).await
        }
        async fn upload_part(
            &self,
            key: &str,
            id: &str,
            n: u32,
            bytes: Bytes,
        ) -> StoreResult<PartId> {
            self.script.before_write("upload part", key)?;
            self.inner.upload_part(key, id, n, bytes).await
        }
        async fn complete_multipart(
            &self,
            key: &str,
            id: &str,
            parts: &[PartId],
            mode: &PutMode,
        ) -> StoreResult<PutOutcome> {
            self.inner.complete_multipart(key, id, parts, mode).await
        }
        async fn abort_multipart(&self, key: &str, id: &str) -> StoreResult<()> {
            self.inner.abort_multipart(key, id).await
        }
        async fn list_multipart(
            &self,
            prefix: &str,
            older_than: Option<SystemTime>,
        ) -> StoreResult<Vec<MultipartUpload>> {
            self.inner.list_multipart(prefix, older_than).await
        }
    }
}

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

/// Where tests leave files a person may want to look at (screenshots):
/// `target/test-artifacts/`.
pub fn artifacts_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("current exe");
    let dir = exe
        .ancestors()
        .nth(3)
        .expect("test binary lives in target/<profile>/deps")
        .join("test-artifacts");
    std::fs::create_dir_all(&dir).expect("create target/test-artifacts");
    dir
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

/// Validate a STAC document with `stac-validator` offline (`.ci/stac-validate`, the official
/// schemas from `tests/fixtures/stac-schemas/`). Returns its output on failure.
pub fn validate_stac(path: &Path) -> Result<(), String> {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../.ci/stac-validate");
    let out = Command::new("bash")
        .arg(script)
        .arg(path)
        .output()
        .map_err(|e| format!("run .ci/stac-validate: {e}"))?;
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    if out.status.success() && text.contains("\"valid_stac\": true") {
        Ok(())
    } else {
        Err(format!("{}: {}", path.display(), text.trim()))
    }
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

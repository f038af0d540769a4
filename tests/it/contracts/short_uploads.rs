//! Uploads that a store completes short: what was published must be what was sent, or nothing.
//!
//! GCS may persist fewer bytes of a resumable chunk than it was sent (its `308` names what it
//! kept); before the fix the GCS store dropped the rest and finalised a shorter, shifted object
//! as `Written`, and the assembler recorded it — a create-if-absent scene, so permanent. Here a
//! stateful fake of GCS's resumable sessions keeps fewer bytes than it is sent, and the object it
//! assembles must equal the bytes meant; a fake that finalises a short object must be refused by
//! the store's own size check (the object deleted by its generation). Then, on every backend, a
//! store wrapper that loses the tail of each part shows the assembler refusing to record a scene
//! whose size differs from what it laid out: the object is withdrawn, the claim not marked done,
//! and the next assembly publishes the right scene.

use bytes::Bytes;
use std::collections::{BTreeMap, VecDeque};
use std::path::Path;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, SystemTime};
use tilegate_core::metrics::Counters;
use tilegate_core::object::{
    CompletionMismatch, DeleteOptions, DeleteOutcome, Differs, GetOptions, GetOutcome,
    MultipartUpload, ObjectMeta, ObjectStore, ObjectStoreExt as _, PartId, PutMode, PutOptions,
    PutOutcome,
};
use tilegate_core::{Backends, JobId, ObjectKey, Recipe, StoreResult};
use tilegate_gcs::GcsStore;
use tilegate_retry::RetryPolicy;
use tilegate_tests::object_key;
use tilegate_tests::responder::read_request;
use tokio::io::{AsyncWriteExt as _, BufReader};
use tokio::net::TcpListener;

// ---------------------------------------------------------------------------------------------
// A fake of GCS's resumable sessions that keeps fewer bytes than it is sent.

const KIB: usize = 1024;
const CHUNK: usize = 256 * KIB;

/// What the fake does with one request to the session.
#[derive(Debug, Clone, Copy)]
enum Keep {
    /// Persist everything (and finalise when the request completes the object).
    All,
    /// Persist the request's bytes only until the session holds this many, and answer `308`
    /// with the `Range` of everything persisted.
    UpTo(usize),
    /// Persist nothing and answer `308` without a `Range` header.
    Nothing,
}

#[derive(Default)]
struct FakeState {
    /// name → (generation, bytes).
    objects: BTreeMap<String, (i64, Vec<u8>)>,
    generation: i64,
    /// The session's object name and the bytes it has persisted.
    session: Option<(String, Vec<u8>)>,
    /// How to answer each request to the session, in order; `All` once it runs out.
    script: VecDeque<Keep>,
    /// Report a finalised object this many bytes shorter than it assembled (a lying server).
    understate: u64,
    /// Every request: its line and its Content-Range.
    seen: Vec<(String, Option<String>)>,
}

#[derive(Clone)]
struct Fake(Arc<Mutex<FakeState>>);

impl Fake {
    fn state(&self) -> std::sync::MutexGuard<'_, FakeState> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The bytes of object `name`, if it is there.
    fn object(&self, name: &str) -> Option<Vec<u8>> {
        self.state().objects.get(name).map(|(_, b)| b.clone())
    }

    /// The Content-Range of every request sent to the session.
    fn session_ranges(&self) -> Vec<String> {
        self.state()
            .seen
            .iter()
            .filter(|(line, _)| line.starts_with("PUT ") && line.contains("upload_id=s1"))
            .filter_map(|(_, r)| r.clone())
            .collect()
    }

    fn seen_lines(&self) -> Vec<String> {
        self.state().seen.iter().map(|(l, _)| l.clone()).collect()
    }
}

fn object_json(name: &str, generation: i64, size: u64) -> String {
    format!(
        r#"{{"kind":"storage#object","selfLink":"http://x/o","mediaLink":"http://x/m","id":"bkt/{name}/{generation}","name":"{name}","bucket":"bkt","generation":"{generation}","metageneration":"1","size":"{size}","etag":"CAE=","timeCreated":"2026-12-02T00:00:00Z","updated":"2026-12-02T00:00:00Z","metadata":{{}}}}"#
    )
}

fn not_found() -> (u16, Vec<(String, String)>, String) {
    (
        404,
        vec![],
        r#"{"error":{"code":404,"message":"No such object","errors":[{"domain":"global","reason":"notFound","message":"No such object"}]}}"#.to_owned(),
    )
}

fn header(head: &str, name: &str) -> Option<String> {
    head.lines().skip(1).find_map(|l| {
        let (k, v) = l.split_once(':')?;
        k.trim()
            .eq_ignore_ascii_case(name)
            .then(|| v.trim().to_owned())
    })
}

/// The object name in a JSON API path `/storage/v1/b/bkt/o/<name>[?…]`.
fn path_name(line: &str) -> String {
    let path = line.split(' ').nth(1).unwrap_or_default();
    let name = path
        .split_once("/o/")
        .map_or("", |(_, n)| n)
        .split('?')
        .next()
        .unwrap_or_default();
    name.replace("%2F", "/").replace("%2f", "/")
}

/// The `"name"` of the object resource in an upload's body.
fn body_name(body: &[u8]) -> String {
    let text = String::from_utf8_lossy(body);
    let at = text.find("\"name\":\"").map(|i| i + 8).unwrap_or(0);
    text[at..].split('"').next().unwrap_or_default().to_owned()
}

/// The value of query parameter `name` in a request line.
fn query(line: &str, name: &str) -> Option<String> {
    let path = line.split(' ').nth(1)?;
    let (_, q) = path.split_once('?')?;
    q.split('&').find_map(|kv| {
        let (k, v) = kv.split_once('=')?;
        (k == name).then(|| v.to_owned())
    })
}

impl FakeState {
    fn answer(
        &mut self,
        base: &str,
        head: &str,
        body: &[u8],
    ) -> (u16, Vec<(String, String)>, String) {
        let line = head.lines().next().unwrap_or_default().to_owned();
        let range = header(head, "content-range");
        self.seen.push((line.clone(), range.clone()));
        if line.starts_with("POST /upload/storage/v1/b/bkt/o?")
            && line.contains("uploadType=resumable")
        {
            self.session = Some((body_name(body), Vec::new()));
            let location =
                format!("{base}/upload/storage/v1/b/bkt/o?uploadType=resumable&upload_id=s1");
            return (200, vec![("location".to_owned(), location)], String::new());
        }
        if line.starts_with("POST /upload/storage/v1/b/bkt/o?") {
            // A single-request (multipart/related) upload: the session's record.
            let name = body_name(body);
            self.generation += 1;
            let json = object_json(&name, self.generation, 0);
            self.objects.insert(name, (self.generation, Vec::new()));
            return (200, vec![], json);
        }
        if line.starts_with("PUT ") && line.contains("upload_id=s1") {
            return self.session_chunk(range.as_deref().unwrap_or_default(), body);
        }
        if line.starts_with("GET /storage/v1/b/bkt/o/") {
            let name = path_name(&line);
            return match self.objects.get(&name) {
                Some((g, b)) => (200, vec![], object_json(&name, *g, b.len() as u64)),
                None => not_found(),
            };
        }
        if line.starts_with("DELETE /storage/v1/b/bkt/o/") {
            let name = path_name(&line);
            let wanted = query(&line, "ifGenerationMatch").map(|g| g.parse::<i64>().unwrap());
            return match self.objects.get(&name) {
                None => not_found(),
                Some((g, _)) if wanted.is_some_and(|w| w != *g) => (
                    412,
                    vec![],
                    r#"{"error":{"code":412,"message":"conditionNotMet","errors":[{"domain":"global","reason":"conditionNotMet","message":"conditionNotMet"}]}}"#.to_owned(),
                ),
                Some(_) => {
                    self.objects.remove(&name);
                    (204, vec![], String::new())
                }
            };
        }
        (
            400,
            vec![],
            format!("{{\"error\":{{\"code\":400,\"message\":\"unscripted {line}\"}}}}"),
        )
    }

    /// A request to the session, `Content-Range: bytes a-b/(total|*)` or `bytes */total`.
    fn session_chunk(&mut self, range: &str, body: &[u8]) -> (u16, Vec<(String, String)>, String) {
        let spec = range.strip_prefix("bytes ").unwrap_or_default();
        let (span, total) = spec.split_once('/').unwrap_or_default();
        let total: Option<usize> = total.parse().ok();
        let first: usize = match span.split_once('-') {
            Some((a, _)) => a.parse().unwrap(),
            None => self.session.as_ref().map_or(0, |(_, b)| b.len()),
        };
        let keep = self.script.pop_front().unwrap_or(Keep::All);
        let (name, persisted) = self.session.as_mut().expect("a session");
        // As GCS: a request may start at or before the persisted offset (the bytes already
        // persisted are ignored), never after it.
        if first > persisted.len() {
            return (
                400,
                vec![],
                format!(
                    "{{\"error\":{{\"code\":400,\"message\":\"gap: {first} after {} persisted\"}}}}",
                    persisted.len()
                ),
            );
        }
        let fresh = &body[(persisted.len() - first).min(body.len())..];
        let take = match keep {
            Keep::All => fresh.len(),
            Keep::UpTo(n) => n.saturating_sub(persisted.len()).min(fresh.len()),
            Keep::Nothing => 0,
        };
        persisted.extend_from_slice(&fresh[..take]);
        let complete = matches!(keep, Keep::All) && total == Some(persisted.len());
        if !complete {
            let headers = if persisted.is_empty() || matches!(keep, Keep::Nothing) {
                vec![]
            } else {
                vec![(
                    "range".to_owned(),
                    format!("bytes=0-{}", persisted.len() - 1),
                )]
            };
            return (308, headers, String::new());
        }
        let (name, bytes) = (name.clone(), std::mem::take(persisted));
        self.session = None;
        self.generation += 1;
        let reported = bytes.len() as u64 - self.understate;
        let json = object_json(&name, self.generation, reported);
        self.objects.insert(name, (self.generation, bytes));
        (200, vec![], json)
    }
}

/// Start the fake; its URL and state.
async fn fake(script: Vec<Keep>, understate: u64) -> (String, Fake) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let fake = Fake(Arc::new(Mutex::new(FakeState {
        script: script.into(),
        understate,
        ..FakeState::default()
    })));
    let (state, base) = (fake.clone(), url.clone());
    tokio::spawn(async move {
        loop {
            let Ok((conn, _)) = listener.accept().await else {
                return;
            };
            let (state, base) = (state.clone(), base.clone());
            tokio::spawn(async move {
                let mut r = BufReader::new(conn);
                let Ok((head, body)) = read_request(&mut r).await else {
                    return;
                };
                let (status, headers, body) = state.state().answer(&base, &head, &body);
                let mut out = format!(
                    "HTTP/1.1 {status} Fake\r\ncontent-length: {}\r\nconnection: close\r\ncontent-type: application/json\r\n",
                    body.len()
                );
                for (k, v) in headers {
                    out.push_str(&format!("{k}: {v}\r\n"));
                }
                out.push_str("\r\n");
                out.push_str(&body);
                let mut conn = r.into_inner();
                let _ = conn.write_all(out.as_bytes()).await;
                let _ = conn.shutdown().await;
            });
        }
    });
    (url, fake)
}

async fn gcs(url: &str) -> GcsStore {
    GcsStore::connect_to("gs://bkt/p", url, true)
        .await
        .unwrap()
        .with_retry_policy(RetryPolicy::immediate(2))
}

/// Deterministic bytes no shift leaves equal.
fn payload(len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u32).wrapping_mul(2_654_435_761).to_be_bytes()[0] ^ (i / 251) as u8)
        .collect()
}

/// Upload `parts` of `payload` (split at `cuts`) as one multipart Create on `store`.
async fn upload(
    store: &GcsStore,
    key: &str,
    bytes: &[u8],
    cuts: &[usize],
) -> StoreResult<PutOutcome> {
    let id = store
        .create_multipart(&object_key(key), &PutOptions::create())
        .await?;
    let mut parts = Vec::new();
    let mut at = 0;
    for (i, &end) in cuts.iter().chain([&bytes.len()]).enumerate() {
        let part = Bytes::copy_from_slice(&bytes[at..end]);
        parts.push(
            store
                .upload_part(&object_key(key), &id, i as u32 + 1, part)
                .await?,
        );
        at = end;
    }
    store
        .complete_multipart(&object_key(key), &id, &parts, &PutMode::Create)
        .await
}

/// The fault: a middle chunk of 512 KiB is answered `308 Range: bytes=0-262143`. Before the fix
/// the unpersisted 256 KiB were dropped, the last chunk went at offset 256 KiB and the session
/// finalised an object 256 KiB short (and shifted) as `Written`. Now the store resends from
/// the persisted offset and the object is exactly the bytes meant.
#[tokio::test]
async fn a_short_308_on_a_middle_chunk_is_resent_from_the_persisted_offset() {
    let (url, fake) = fake(vec![Keep::UpTo(CHUNK)], 0).await;
    let s = gcs(&url).await;
    let meant = payload(600 * KIB + 100);
    let out = upload(&s, "scenes/s.tif", &meant, &[600 * KIB])
        .await
        .unwrap();
    let PutOutcome::Written(meta) = out else {
        panic!("{out:?}");
    };
    let got = fake.object("p/scenes/s.tif").expect("the object is there");
    assert_eq!(got.len(), meant.len(), "{:?}", fake.session_ranges());
    assert!(got == meant, "the object is the bytes meant");
    assert_eq!(meta.size, meant.len() as u64);
    assert_eq!(
        fake.session_ranges(),
        vec![
            "bytes 0-524287/*".to_owned(),
            // Resent from last_byte + 1: the 256 KiB GCS did not keep.
            "bytes 262144-524287/*".to_owned(),
            format!("bytes 524288-{}/{}", meant.len() - 1, meant.len()),
        ]
    );
}

/// A `308` with no `Range` header means nothing was persisted: the chunk goes again from 0
/// (before the fix it was a permanent error), and a short `308` on the last request sends the
/// rest again with the total.
#[tokio::test]
async fn a_308_without_range_and_a_short_last_request_are_resent() {
    let (url, fake) = fake(vec![Keep::Nothing, Keep::All, Keep::UpTo(CHUNK + 1000)], 0).await;
    let s = gcs(&url).await;
    let meant = payload(CHUNK + 3000);
    let out = upload(&s, "scenes/t.tif", &meant, &[CHUNK]).await.unwrap();
    assert!(matches!(out, PutOutcome::Written(_)), "{out:?}");
    let got = fake.object("p/scenes/t.tif").expect("the object is there");
    assert!(
        got == meant,
        "{} bytes, {:?}",
        got.len(),
        fake.session_ranges()
    );
    let total = meant.len();
    assert_eq!(
        fake.session_ranges(),
        vec![
            "bytes 0-262143/*".to_owned(),
            "bytes 0-262143/*".to_owned(),
            format!("bytes 262144-{}/{total}", total - 1),
            format!("bytes {}-{}/{total}", CHUNK + 1000, total - 1),
        ]
    );
}

/// A session that finalises an object shorter than its parts (a server that lost bytes it had
/// acknowledged) is not `Written`: the store answers `CompletionMismatch` and deletes that
/// generation, so the create-if-absent key is free for the retry. Before the fix it was
/// `Written`.
#[tokio::test]
async fn a_finalised_object_shorter_than_its_parts_is_refused_and_deleted() {
    let (url, fake) = fake(vec![], 100).await;
    let s = gcs(&url).await;
    let meant = payload(CHUNK + 500);
    let err = upload(&s, "scenes/u.tif", &meant, &[CHUNK])
        .await
        .unwrap_err();
    let m = CompletionMismatch::of(&err).unwrap_or_else(|| panic!("{err:?}"));
    assert_eq!(
        m.differs,
        Differs::Size {
            meant: meant.len() as u64,
            found: meant.len() as u64 - 100,
        }
    );
    assert!(m.withdrawn);
    assert!(!err.is_retryable(), "the upload is spent: {err}");
    assert!(
        fake.object("p/scenes/u.tif").is_none(),
        "the object was deleted"
    );
    let delete = fake
        .seen_lines()
        .into_iter()
        .find(|l| l.starts_with("DELETE /storage/v1/b/bkt/o/p%2Fscenes%2Fu.tif"))
        .expect("a delete of the object");
    assert!(delete.contains("ifGenerationMatch="), "{delete}");
}

// ---------------------------------------------------------------------------------------------
// A store that loses the tail of every part, under the assembler, on every backend.

/// Bytes each part loses on its way to the store beneath.
const LOST: usize = 1000;

/// A real store whose parts arrive without their last [`LOST`] bytes — as a provider that kept
/// fewer bytes than it acknowledged — and which otherwise passes everything on. The store beneath
/// completes consistently with what it got, so only the caller can tell.
#[derive(Debug)]
struct LosesPartTails(Arc<dyn ObjectStore>);

#[async_trait::async_trait]
impl ObjectStore for LosesPartTails {
    fn name(&self) -> &'static str {
        "loses-part-tails"
    }
    async fn head(&self, key: &ObjectKey) -> StoreResult<Option<ObjectMeta>> {
        self.0.head(key).await
    }
    async fn get_opts(&self, key: &ObjectKey, opts: GetOptions) -> StoreResult<GetOutcome> {
        self.0.get_opts(key, opts).await
    }
    async fn put_opts(
        &self,
        key: &ObjectKey,
        bytes: Bytes,
        opts: PutOptions,
    ) -> StoreResult<PutOutcome> {
        self.0.put_opts(key, bytes, opts).await
    }
    async fn delete_opts(
        &self,
        key: &ObjectKey,
        opts: DeleteOptions,
    ) -> StoreResult<DeleteOutcome> {
        self.0.delete_opts(key, opts).await
    }
    async fn list(&self, prefix: &str) -> StoreResult<Vec<ObjectMeta>> {
        self.0.list(prefix).await
    }
    async fn create_multipart(&self, key: &ObjectKey, opts: &PutOptions) -> StoreResult<String> {
        self.0.create_multipart(key, opts).await
    }
    async fn upload_part(
        &self,
        key: &ObjectKey,
        id: &str,
        n: u32,
        bytes: Bytes,
    ) -> StoreResult<PartId> {
        let kept = bytes.slice(..bytes.len().saturating_sub(LOST));
        self.0.upload_part(key, id, n, kept).await
    }
    async fn complete_multipart(
        &self,
        key: &ObjectKey,
        id: &str,
        parts: &[PartId],
        mode: &PutMode,
    ) -> StoreResult<PutOutcome> {
        self.0.complete_multipart(key, id, parts, mode).await
    }
    async fn abort_multipart(&self, key: &ObjectKey, id: &str) -> StoreResult<()> {
        self.0.abort_multipart(key, id).await
    }
    async fn list_multipart(
        &self,
        prefix: &str,
        older_than: Option<SystemTime>,
    ) -> StoreResult<Vec<MultipartUpload>> {
        self.0.list_multipart(prefix, older_than).await
    }
}

/// Tables and queue in memory, objects on the store under test; the 512² scene's four tiles
/// made by a worker; the job ID.
async fn tiles_on(objects: Arc<dyn ObjectStore>, dir: &Path) -> (Backends, JobId) {
    let mem = tilegate_memory::MemoryBackend::system();
    let b = Backends {
        objects,
        ..mem.backends(mem.queue(&tilegate_tests::unique("q"), 5))
    };
    let src = dir.join("scene.tif");
    tilegate_cog::sample_scene(&src, &tilegate_cog::SampleOptions::new(512, 512)).unwrap();
    let opts = tilegate_planner::PlanOptions {
        recipe: Recipe {
            window: 256,
            ..Recipe::copy_all()
        },
        ..Default::default()
    };
    let plan = tilegate_planner::plan(&b, src.to_str().unwrap(), &opts)
        .await
        .unwrap();
    let job = plan.job.job_id;
    let cfg = tilegate_worker::WorkerConfig {
        concurrency: 2,
        threads: 1,
        wait: Duration::from_millis(100),
        stop: tilegate_worker::StopWhen::JobComplete(job.clone()),
        ..tilegate_worker::WorkerConfig::default()
    };
    let (_tx, rx) = tokio::sync::watch::channel(false);
    tilegate_worker::Worker::new(b.clone(), cfg, Arc::new(Counters::new()))
        .run(rx)
        .await
        .unwrap();
    assert_eq!(b.manifest.count_entries(&job).await.unwrap(), 4);
    (b, job)
}

/// The assembler, uploading through [`LosesPartTails`], finds the published scene shorter than
/// it laid out: it answers the named, retryable `published-scene-mismatch` — whether its own
/// check or the store's caught it — and leaves no scene at the key, no scene on the job row, no
/// STAC Item and no claim marked done. The next assembly, through the store itself, publishes
/// the scene it lays out. Before the fix the short scene was `Written` and recorded.
async fn refuses_a_short_scene(objects: Arc<dyn ObjectStore>, dir: &Path) {
    let (b, job) = tiles_on(objects.clone(), dir).await;
    let lossy = Backends {
        objects: Arc::new(LosesPartTails(objects.clone())),
        ..b.clone()
    };
    let mut opts = tilegate_assembler::AssembleOptions::new(tilegate_claim::unique_owner("t"));
    opts.multipart_threshold = 1;
    let err = tilegate_assembler::assemble(&lossy, &job, &opts, &Counters::new())
        .await
        .expect_err("a short scene is not published");
    assert_eq!(err.reason_code(), "published-scene-mismatch", "{err:?}");
    assert!(err.is_retryable(), "{err:?}");
    let row = b.jobs.get_job(&job).await.unwrap().unwrap().row;
    let scene = row.prefix.scene_key(&job);
    assert!(
        row.scene_output.is_none(),
        "recorded: {:?}",
        row.scene_output
    );
    assert!(
        objects.head(&scene).await.unwrap().is_none(),
        "the short scene was withdrawn"
    );
    assert!(
        objects
            .head(&tilegate_stac::item_key(&scene).unwrap())
            .await
            .unwrap()
            .is_none(),
        "no STAC Item"
    );

    // The claim was released, not marked done: the next assembly publishes the scene.
    let mut opts = tilegate_assembler::AssembleOptions::new(tilegate_claim::unique_owner("t"));
    opts.multipart_threshold = 1;
    let report = tilegate_assembler::assemble(&b, &job, &opts, &Counters::new())
        .await
        .unwrap();
    assert_eq!(report.outcome, tilegate_assembler::AssembleOutcome::Written);
    let published = objects.get_bytes(&scene).await.unwrap();
    assert_eq!(Some(published.meta.size), report.scene_size);
    let row = b.jobs.get_job(&job).await.unwrap().unwrap().row;
    assert_eq!(row.scene_output.map(|o| o.size), report.scene_size);
    assert!(report.multipart);
    assert_eq!(report.multipart_bytes_uploaded, published.meta.size);
}

async fn memory(_: &Path) -> Arc<dyn ObjectStore> {
    Arc::new(tilegate_memory::MemoryBackend::system().objects)
}

async fn local(dir: &Path) -> Arc<dyn ObjectStore> {
    Arc::new(tilegate_embedded::LocalObjectStore::open(dir.join("objects")).unwrap())
}

/// The S3 store on the emulator, in a fresh bucket (without the emulator: a failure in CI, a
/// printed skip elsewhere).
async fn s3(_: &Path) -> Arc<dyn ObjectStore> {
    use tilegate_aws::{S3Location, S3Store, config};
    if std::env::var_os("TILEGATE_AWS_EMULATOR").is_none() {
        tilegate_tests::no_emulator("aws", "eval \"$(bash .ci/aws-emulator start)\"");
    }
    let sdk = config::load_sdk_config().await;
    let store = S3Store::new(
        config::s3_client(&sdk),
        S3Location {
            bucket: tilegate_tests::unique("tg"),
            prefix: "short".to_owned(),
        },
    );
    let region = sdk.region().map(|r| r.as_ref().to_owned());
    store.ensure_bucket(region.as_deref()).await.unwrap();
    Arc::new(store)
}

async fn gcs_emulated(_: &Path) -> Arc<dyn ObjectStore> {
    let endpoint = tilegate_tests::gcs_emulator();
    let url = format!("gs://{}/short", tilegate_tests::unique("tg"));
    let store = GcsStore::connect_to(&url, &endpoint, true).await.unwrap();
    store.ensure_bucket().await.unwrap();
    Arc::new(store)
}

async fn azure_emulated(_: &Path) -> Arc<dyn ObjectStore> {
    let account = tilegate_tests::azure_emulator();
    let url = format!(
        "az://{}/{}/short",
        account.name,
        tilegate_tests::azure_container()
    );
    let store = tilegate_azure::AzureStore::connect_with(&url, &account).unwrap();
    store.ensure_container().await.unwrap();
    Arc::new(store)
}

/// One test per backend, each with its own store and directory.
macro_rules! on_every_backend {
    ($($name:ident => $store:path;)*) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn $name() {
                let tmp = tilegate_tests::tempdir();
                refuses_a_short_scene($store(tmp.path()).await, tmp.path()).await;
            }
        )*
    };
}

on_every_backend! {
    a_short_scene_is_refused_on_memory => memory;
    a_short_scene_is_refused_on_local => local;
    a_short_scene_is_refused_on_s3 => s3;
    a_short_scene_is_refused_on_gcs => gcs_emulated;
    a_short_scene_is_refused_on_azure => azure_emulated;
}

//! The backend conformance suite: the same test functions run against every backend.
//!
//! Each test is a generic `async fn(&dyn Harness)` in [`objects`], [`tables`] or [`queue`]. A
//! backend joins the suite by implementing [`Harness`] (how to open each store, what it can
//! do) and adding one line, `conformance_suite!(crate::conformance::<module>::harness);`, in
//! its own module here — see [`embedded`]. Tests use unique key prefixes, job IDs and queue
//! names, so they run in parallel against one shared server too.
//!
//! Where backends legitimately differ (cross-process helpers, key validation, LastModified
//! resolution, part sizes, exclusive receives) a [`Capabilities`] flag says so, and a test that
//! cannot run prints why instead of passing silently.

mod aws;
mod embedded;
mod objects;
mod queue;
mod tables;

use async_trait::async_trait;
use std::ffi::OsString;
use std::io::{BufRead as _, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use tilegate_core::object::ObjectStore;
use tilegate_core::queue::WorkQueue;
use tilegate_core::table::{ClaimTable, CounterTable, JobTable, ManifestTable};

/// What a backend can do, where backends may differ.
#[derive(Debug, Clone, Copy)]
pub struct Capabilities {
    /// The child helper (`tilegate-test-child`) can open the same stores from other
    /// processes; see [`Harness::child_urls`].
    pub cross_process: bool,
    /// Keys failing `tilegate_core::keys::validate_key` are refused with `InvalidKey`.
    pub refuses_invalid_keys: bool,
    /// A first key segment the backend keeps for itself and refuses (`.tilegate` locally).
    pub reserved_segment: Option<&'static str>,
    /// LastModified resolution (S3 keeps whole seconds): a test that needs a rewrite's
    /// LastModified to differ waits this long first.
    pub last_modified_resolution: Duration,
    /// The smallest allowed non-final multipart part (S3: 5 MiB).
    pub min_part_size: usize,
    /// Two receivers never get the same message within one visibility window (SQS standard
    /// queues promise only at-least-once, so an SQS harness sets this false).
    pub exclusive_receive: bool,
}

/// How the child helper opens a harness's stores: URLs it understands (`file://<dir>`,
/// `sqlite://<file>`).
#[derive(Debug, Clone)]
pub struct ChildUrls {
    pub objects: String,
    pub tables: String,
}

/// One backend under test.
#[async_trait]
pub trait Harness: Send + Sync {
    fn caps(&self) -> Capabilities;
    fn objects(&self) -> Arc<dyn ObjectStore>;
    fn jobs(&self) -> Arc<dyn JobTable>;
    fn manifest(&self) -> Arc<dyn ManifestTable>;
    fn claims(&self) -> Arc<dyn ClaimTable>;
    fn counters(&self) -> Arc<dyn CounterTable>;
    /// A fresh queue (the name is unique per test) with its dead-letter queue.
    async fn queue(&self, name: &str, max_receive_count: u32) -> Arc<dyn WorkQueue>;
    /// For cross-process tests; `None` if the child helper cannot open these stores.
    fn child_urls(&self) -> Option<ChildUrls>;
}

/// Instantiate every conformance test for one backend. `$harness` is the path (from the crate
/// root) of an `async fn() -> Arc<dyn Harness>`; each test gets its own harness.
macro_rules! conformance_suite {
    ($harness:path) => {
        conformance_suite!(@group $harness, objects, [
            create_twice_keeps_first,
            update_with_current_etag_writes,
            update_with_stale_etag_is_superseded,
            overwrite_replaces,
            metadata_round_trips,
            head_and_get_of_absent,
            get_ranges,
            get_if_match,
            get_if_none_match,
            conditional_delete,
            list_under_prefix,
            multipart_create_twice,
            multipart_update_honours_etag,
            multipart_abort,
            multipart_parts_out_of_order_and_replaced,
            multipart_in_order_parts,
            list_multipart_older_than,
            invalid_keys_refused,
            race_create_same_key,
            race_cas_counter,
            race_create_cross_process,
            race_cas_counter_cross_process,
        ]);
        conformance_suite!(@group $harness, tables, [
            job_create_twice,
            job_update_versions,
            job_list_newest_first,
            job_cas_race,
            manifest_put_count_list,
            manifest_update_versions,
            manifest_concurrent_puts,
            claim_lifecycle,
            claim_release,
            claim_concurrent_acquire,
            counters_concurrent_add,
            claim_race_cross_process,
        ]);
        conformance_suite!(@group $harness, queue, [
            send_receive_ack,
            visibility_expiry_redelivers,
            max_receives_dead_letters,
            dead_letter_with_reason_and_redrive,
            change_visibility_zero_releases,
            long_poll_returns_on_send,
            concurrent_receivers_exclusive,
            concurrent_acks_delete_every_message,
            receivers_exclusive_cross_process,
            oversized_message_refused,
        ]);
    };
    (@group $harness:path, $group:ident, [$($name:ident),* $(,)?]) => {
        mod $group {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
                async fn $name() {
                    let harness = $harness().await;
                    crate::conformance::$group::$name(&*harness).await;
                }
            )*
        }
    };
}
use conformance_suite;

/// A name no other test (in this or another process) uses: for key prefixes, queue names,
/// job sources and claim resources.
pub fn unique(tag: &str) -> String {
    static N: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
        .as_nanos();
    format!(
        "{tag}-{}-{nanos}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

/// Say why a test did not run (nextest shows it with `--no-capture` or on failure; the test
/// still passes, because the backend documents the capability it lacks).
pub fn skip(test: &str, why: &str) {
    eprintln!("SKIPPED conformance::{test}: {why}");
}

/// Run `tilegate-test-child` once per argument list, all released at the same instant: each
/// child opens its stores, prints `ready`, and waits for `barrier` to exist; once every child
/// is ready the barrier is created. Returns the lines each child printed after `ready`, in
/// order (the last one is its outcome).
pub async fn run_children(arg_lists: Vec<Vec<OsString>>, barrier: &Path) -> Vec<Vec<String>> {
    let barrier = barrier.to_path_buf();
    tokio::task::spawn_blocking(move || {
        let mut children = Vec::new();
        for args in &arg_lists {
            let mut child = Command::new(tilegate_tests::child_bin())
                .args(args)
                .arg(&barrier)
                .stdout(Stdio::piped())
                .stderr(Stdio::inherit())
                .spawn()
                .expect("spawn tilegate-test-child");
            let mut out = BufReader::new(child.stdout.take().expect("piped stdout"));
            let mut line = String::new();
            out.read_line(&mut line).expect("read child's ready line");
            assert_eq!(line.trim(), "ready", "child {args:?} did not get ready");
            children.push((child, out, args.clone()));
        }
        std::fs::write(&barrier, b"go").expect("create the start barrier");
        let mut outcomes = Vec::new();
        for (mut child, mut out, args) in children {
            let mut rest = String::new();
            std::io::Read::read_to_string(&mut out, &mut rest).expect("read child's outcome");
            let status = child.wait().expect("wait for child");
            assert!(
                status.success(),
                "child {args:?} failed: {status}; said {rest:?}"
            );
            outcomes.push(rest.lines().map(|l| l.trim().to_owned()).collect());
        }
        outcomes
    })
    .await
    .expect("child runner")
}

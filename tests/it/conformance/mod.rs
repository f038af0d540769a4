//! The backend conformance suite: the same test functions run against every backend.
//!
//! Each test is a generic `async fn` in [`objects`] (over an [`ObjectHarness`]), [`tables`] or
//! [`queue`] (over a [`Harness`]). A backend joins the suite by implementing the harness of the
//! contracts it implements and adding one line in its own module here:
//! `conformance_suite!(crate::conformance::<module>::harness);` for a whole backend (see
//! [`embedded`] and [`memory`]), `conformance_suite!(objects: crate::conformance::<module>::harness);` for an
//! object store alone (see [`gcs`]). Tests use unique key prefixes, job IDs and queue
//! names, so they run in parallel against one shared server too.
//!
//! Where backends legitimately differ (cross-process helpers, key validation, LastModified
//! resolution, part sizes, exclusive receives) a [`Capabilities`] flag says so, and a test that
//! cannot run prints why instead of passing silently.

mod aws;
mod azure;
mod embedded;
mod gcs;
mod ledger;
mod ledger_protocol;
mod memory;
mod objects;
mod queue;
mod tables;

pub use azure::{container as azure_container, emulator as azure_emulator};
pub use gcs::emulator as gcs_emulator;

use async_trait::async_trait;
use std::ffi::OsString;
use std::io::{BufRead as _, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use tilegate_core::ledger::LedgerTable;
use tilegate_core::object::ObjectStore;
use tilegate_core::queue::WorkQueue;
use tilegate_core::table::{ClaimTable, CounterTable, JobTable, ManifestTable};

/// What a backend can do, where backends may differ.
#[derive(Debug, Clone, Copy)]
pub struct Capabilities {
    /// The child helper (`tilegate-test-child`) can open the same stores from other
    /// processes; see [`Harness::child_urls`].
    pub cross_process: bool,
    /// LastModified resolution (S3 keeps whole seconds): a test that needs a rewrite's
    /// LastModified to differ waits this long first.
    pub last_modified_resolution: Duration,
    /// The smallest allowed non-final multipart part (S3: 5 MiB).
    pub min_part_size: usize,
    /// Two receivers never get the same message within one visibility window (SQS standard
    /// queues promise only at-least-once, so an SQS harness sets this false).
    pub exclusive_receive: bool,
    /// Parts may be uploaded in any order and replaced under their number (S3, local); a GCS
    /// resumable session takes them in order, once each.
    pub parts_in_any_order: bool,
    /// Whether the server under test evaluates the mode's precondition when a multipart
    /// upload completes. `Some(why)`: it does not (an emulator's gap), and `why` names the
    /// scripted-responder test that covers the request instead.
    pub completion_unenforced: Option<&'static str>,
}

/// Report a skip because the server under test does not enforce what the test proves.
pub fn unenforced(test: &str, why: Option<&'static str>) -> bool {
    match why {
        Some(why) => {
            skip(test, why);
            true
        }
        None => false,
    }
}

/// How the child helper opens a harness's stores: URLs it understands (`file://<dir>`,
/// `sqlite://<file>`).
#[derive(Debug, Clone)]
pub struct ChildUrls {
    pub objects: String,
    pub tables: String,
}

/// An object store under test.
#[async_trait]
pub trait ObjectHarness: Send + Sync {
    fn caps(&self) -> Capabilities;
    fn objects(&self) -> Arc<dyn ObjectStore>;
    /// For cross-process tests; `None` if the child helper cannot open these stores.
    fn child_urls(&self) -> Option<ChildUrls>;
    /// The HTTP server the store talks to, for tests that put a proxy in between; `Err`
    /// says why there is none.
    fn upstream(&self) -> Result<String, &'static str> {
        Err("the store does not talk HTTP")
    }
    /// The same store (same bucket and prefix) reached through `endpoint` instead.
    async fn objects_via(&self, endpoint: &str) -> Arc<dyn ObjectStore> {
        unreachable!("objects_via({endpoint}) without an upstream")
    }
}

/// A whole backend under test: its object store, tables and queue.
#[async_trait]
pub trait Harness: ObjectHarness {
    fn jobs(&self) -> Arc<dyn JobTable>;
    fn manifest(&self) -> Arc<dyn ManifestTable>;
    fn claims(&self) -> Arc<dyn ClaimTable>;
    fn counters(&self) -> Arc<dyn CounterTable>;
    fn ledger(&self) -> Arc<dyn LedgerTable>;
    /// A fresh queue (the name is unique per test) with its dead-letter queue.
    async fn queue(&self, name: &str, max_receive_count: u32) -> Arc<dyn WorkQueue>;
}

/// Instantiate every conformance test for one backend. `$harness` is the path (from the crate
/// root) of an `async fn() -> Arc<dyn Harness>`; each test gets its own harness.
macro_rules! conformance_suite {
    (objects: $harness:path) => {
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
            race_cas_counter_cross_process, lost_answer_is_told_apart,
        ]);
    };
    ($harness:path) => {
        conformance_suite!(objects: $harness);
        conformance_suite!(@group $harness, tables, [
            job_create_twice,
            job_update_versions,
            job_list_newest_first,
            job_list_of_a_tenant,
            job_list_of_open_jobs,
            job_cas_race,
            manifest_put_count_list,
            manifest_update_versions,
            manifest_sharded,
            manifest_concurrent_puts,
            claim_lifecycle,
            claim_release,
            claim_concurrent_acquire,
            counters_concurrent_add,
            claim_race_cross_process,
        ]);
        conformance_suite!(@group $harness, ledger, [
            ledger_create_get_update,
            ledger_publish_moves_pointer_and_retires,
            ledger_concurrent_accepts_one_wins,
            ledger_publishable_states,
            ledger_due_index_pages,
            ledger_mark_withdraws_an_expired_preview,
            ledger_an_order_never_moves_the_pointer_back,
        ]);
        conformance_suite!(@group $harness, ledger_protocol, [
            a_returning_order_does_not_republish_an_older_attempt,
            an_order_older_than_the_upload_grace_is_not_collected,
            a_late_record_leaves_a_held_object,
            a_late_record_sweeps_its_own_object_through_the_claim,
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

/// What to do when an emulator is not configured: fail in CI, skip elsewhere. `conformance_suite!`
/// runs the test body right after the harness is built, so a harness can only decline by
/// ending the test: under nextest each test is its own process and exit status 0 is a pass;
/// under a runner that shares one process between tests, ending it would end the others too,
/// so it fails instead of silently passing them.
pub fn no_emulator(backend: &str, how: &str) -> ! {
    assert!(
        std::env::var_os("CI").is_none(),
        "the {backend} conformance suite must run in CI, but its emulator is not configured \
         (run {how}; .ci/test does this)"
    );
    eprintln!("SKIPPED conformance::{backend} (no emulator: run {how})");
    if std::env::var("NEXTEST_EXECUTION_MODE").as_deref() == Ok("process-per-test") {
        std::process::exit(0);
    }
    panic!(
        "SKIPPED conformance::{backend} (run {how}); run the suite with cargo nextest to skip cleanly"
    );
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

//! The backend conformance suite: the contract tests every backend of tilegate's store traits
//! must pass, run by each backend from its own `tests/`.
//!
//! Each test is a generic `async fn` in [`objects`] (over an [`ObjectHarness`]), [`tables`],
//! [`ledger`], [`ledger_protocol`] or [`queue`] (over a [`Harness`]). A backend joins the suite by
//! implementing the harness of the contracts it implements and invoking [`conformance_suite!`]
//! once in a test target of its own (`tests/conformance.rs`): `conformance_suite!(harness);`
//! for a whole backend, `conformance_suite!(objects: harness);` for an object store alone.
//! Tests use unique key prefixes, job IDs and queue names, so they run in parallel against one
//! shared server too.
//!
//! Where backends legitimately differ (cross-process helpers, key validation, LastModified
//! resolution, part sizes, exclusive receives) a [`Capabilities`] flag says so, and a test that
//! cannot run prints why instead of passing silently. A backend reached through an emulator
//! declines with [`no_emulator`] when it is not configured: loudly in CI, with a message
//! elsewhere.

pub mod child;
pub mod ledger;
pub mod ledger_protocol;
pub mod lossy;
pub mod objects;
pub mod queue;
pub mod tables;

pub use child::ChildUrls;

use async_trait::async_trait;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use tilegate_core::ObjectKey;
use tilegate_core::ledger::LedgerTable;
use tilegate_core::object::ObjectStore;
use tilegate_core::queue::WorkQueue;
use tilegate_core::table::{ClaimTable, CounterTable, JobTable, ManifestTable};

/// What a backend can do, where backends may differ.
#[derive(Debug, Clone, Copy)]
pub struct Capabilities {
    /// Other processes can open the same stores (the suite's `child:` opener); see
    /// [`ObjectHarness::child_urls`].
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

/// An object store under test.
#[async_trait]
pub trait ObjectHarness: Send + Sync {
    fn caps(&self) -> Capabilities;
    fn objects(&self) -> Arc<dyn ObjectStore>;
    /// For cross-process tests: what a child process opens the same stores from; `None` if
    /// none can.
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

/// Instantiate every conformance test for one backend, as `#[test]`s in the module that invokes
/// it (one Rust module per group: `objects`, `tables`, `ledger`, `ledger_protocol`, `queue`).
///
/// - `conformance_suite!(harness);` — a whole backend: `harness` is the path of an
///   `async fn() -> Arc<dyn Harness>`; each test gets its own harness.
/// - `conformance_suite!(objects: harness);` — an object store alone: `harness` is an
///   `async fn() -> Arc<dyn ObjectHarness>`.
/// - `conformance_suite!(harness, child: reopen);` — a whole backend whose stores other
///   processes can open: `reopen` is an `async fn(&ChildUrls) -> Arc<dyn Harness>` that opens,
///   in a child process, the stores [`ObjectHarness::child_urls`] named. The macro adds the test
///   `conformance_child`, which does nothing unless the suite started it as a child.
///
/// The tests run on their own multi-threaded Tokio runtime: the crate that invokes the macro
/// needs only this crate.
#[macro_export]
macro_rules! conformance_suite {
    (objects: $harness:path) => {
        $crate::conformance_suite!(@entry None);
        async fn __conformance_harness() -> ::std::sync::Arc<dyn $crate::ObjectHarness> {
            $harness().await
        }
        $crate::conformance_suite!(@objects);
    };
    ($harness:path, child: $reopen:path) => {
        $crate::conformance_suite!(@entry Some("conformance_child"));
        #[test]
        fn conformance_child() {
            $crate::child::serve_if_asked(|urls| {
                ::std::boxed::Box::pin(async move { $reopen(&urls).await })
            });
        }
        $crate::conformance_suite!(@whole $harness);
    };
    ($harness:path) => {
        $crate::conformance_suite!(@entry None);
        $crate::conformance_suite!(@whole $harness);
    };
    (@entry $child:expr) => {
        /// The test (by libtest's name) that serves as this suite's child process.
        fn __conformance_child_entry() -> ::std::option::Option<::std::string::String> {
            let child: ::std::option::Option<&str> = $child;
            child.map(|name| $crate::child::test_name(module_path!(), name))
        }
    };
    (@whole $harness:path) => {
        async fn __conformance_harness() -> ::std::sync::Arc<dyn $crate::Harness> {
            $harness().await
        }
        $crate::conformance_suite!(@objects);
        $crate::conformance_suite!(@group tables, [
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
        $crate::conformance_suite!(@group ledger, [
            ledger_create_get_update,
            ledger_publish_moves_pointer_and_retires,
            ledger_concurrent_accepts_one_wins,
            ledger_publishable_states,
            ledger_due_index_pages,
            ledger_mark_withdraws_an_expired_preview,
            ledger_an_order_never_moves_the_pointer_back,
        ]);
        $crate::conformance_suite!(@group ledger_protocol, [
            a_returning_order_does_not_republish_an_older_attempt,
            an_order_older_than_the_upload_grace_is_not_collected,
            a_late_record_leaves_a_held_object,
            a_late_record_sweeps_its_own_object_through_the_claim,
        ]);
        $crate::conformance_suite!(@group queue, [
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
    (@objects) => {
        $crate::conformance_suite!(@group objects, [
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
            lost_answer_is_told_apart,
        ]);
    };
    (@group $group:ident, [$($name:ident),* $(,)?]) => {
        mod $group {
            $(
                #[test]
                fn $name() {
                    $crate::child::set_entry(super::__conformance_child_entry());
                    $crate::block_on(async {
                        let harness = super::__conformance_harness().await;
                        $crate::$group::$name(&*harness).await;
                    });
                }
            )*
        }
    };
}

/// Run one conformance test body on a fresh multi-threaded runtime (4 workers), as the tests
/// that [`conformance_suite!`] expands to do.
pub fn block_on<F: Future<Output = ()>>(test: F) {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .enable_all()
        .build()
        .expect("build the test's runtime")
        .block_on(test);
}

/// `k` as an [`ObjectKey`]; panics on a key the stores would refuse (a test that means to
/// pass one builds it with `ObjectKey::parse`).
pub fn object_key(k: impl AsRef<str>) -> ObjectKey {
    ObjectKey::parse(k.as_ref()).expect("a valid object key")
}

/// A temporary directory (removed when dropped).
pub fn tempdir() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("tilegate-conformance-")
        .tempdir()
        .expect("create a temporary directory")
}

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

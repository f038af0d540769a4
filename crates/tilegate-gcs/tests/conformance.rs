//! The object conformance suite run against Google Cloud Storage, against fake-gcs-server
//! (`STORAGE_EMULATOR_HOST`, started by `.ci/gcs-emulator`): a fresh bucket per test.
//!
//! What the emulator (1.54) does not enforce, and where it is covered instead: the
//! precondition of a resumable session at finalisation (`multipart_create_twice`,
//! `multipart_update_honours_etag` skip with that reason; the scripted-responder
//! tests in `tests/it` check the session carries `ifGenerationMatch` and that a 412 at finalisation is
//! `AlreadyPresent`/`Superseded`), and `ifGenerationMatch` on reads and deletes (the store
//! evaluates read conditions on the generation it then reads pinned, and the scripted tests
//! check the delete's precondition and its 412).

use async_trait::async_trait;
use std::sync::Arc;
use std::time::Duration;
use tilegate_conformance::{
    Capabilities, ChildUrls, ObjectHarness, conformance_suite, no_emulator, unique,
};
use tilegate_core::object::ObjectStore;
use tilegate_gcs::GcsStore;

struct Gcs {
    objects: GcsStore,
    url: String,
}

/// The emulator's URL, or the suite declines: loudly in CI, with a message elsewhere.
fn emulator() -> String {
    match std::env::var("STORAGE_EMULATOR_HOST") {
        Ok(v) if std::env::var_os("TILEGATE_GCS_EMULATOR").is_some() => v,
        _ => no_emulator("gcs", "eval \"$(bash .ci/gcs-emulator start)\""),
    }
}

/// A fresh bucket on the emulator, objects under `conformance/`.
async fn harness() -> Arc<dyn ObjectHarness> {
    let endpoint = emulator();
    let url = format!("gs://{}/conformance", unique("tg"));
    let objects = GcsStore::connect_to(&url, &endpoint, true)
        .await
        .expect("open the gcs store");
    objects
        .ensure_bucket()
        .await
        .expect("create the test bucket on the emulator");
    Arc::new(Gcs { objects, url })
}

#[async_trait]
impl ObjectHarness for Gcs {
    fn caps(&self) -> Capabilities {
        Capabilities {
            cross_process: false,
            last_modified_resolution: Duration::ZERO,
            // A session's chunks are multiples of 256 KiB.
            min_part_size: 256 * 1024,
            exclusive_receive: false,
            parts_in_any_order: false,
            completion_unenforced: Some(
                "fake-gcs-server 1.54 ignores ifGenerationMatch at resumable finalisation; \
                 tests/it/contracts/scripted_gcs.rs covers the session's precondition and its 412",
            ),
        }
    }

    fn objects(&self) -> Arc<dyn ObjectStore> {
        Arc::new(self.objects.clone())
    }

    fn child_urls(&self) -> Option<ChildUrls> {
        None
    }

    fn upstream(&self) -> Result<String, &'static str> {
        Ok(emulator())
    }

    async fn objects_via(&self, endpoint: &str) -> Arc<dyn ObjectStore> {
        Arc::new(
            GcsStore::connect_to(&self.url, endpoint, true)
                .await
                .expect("open the gcs store through the proxy"),
        )
    }
}

conformance_suite!(objects: harness);

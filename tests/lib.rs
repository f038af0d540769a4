//! Shared helpers for the integration tests, one module per concern under `support/`, all
//! re-exported here so that tests name them `tilegate_tests::…`: the `tilegate` binary and its
//! helpers, files on disk, rasters and GDAL's COG validator, STAC validation, headless
//! Chromium, the AWS, GCS and Azure emulators, pipeline [`Target`]s, [`ScriptedStore`], and local HTTP sources.

pub mod responder;
pub mod webhook;

mod support {
    pub mod aws;
    pub mod bin;
    pub mod chromium;
    pub mod emulators;
    pub mod files;
    pub mod http;
    pub mod raster;
    pub mod scripted;
    pub mod service;
    pub mod stac;
    pub mod target;
}

pub use support::aws::Aws;
/// The AWS emulator's SNS/EventBridge wiring for announcement tests.
pub mod aws {
    pub use crate::support::aws::{
        drain, queue_with_arn, sns_clients, sns_endpoint, topic_with_queue,
    };
}
pub use support::bin::{
    ONE_AT_A_TIME, assembler_doc, child_bin, json_of, tg, tg_json, tilegate_bin,
    work_one_at_a_time, work_until_fault,
};
pub use support::chromium::{Browser, chromium, elements, render_in_chromium};
pub use support::emulators::{azure_container, azure_emulator, gcs_emulator, no_emulator, unique};
pub use support::files::{
    artifacts_dir, blake3_hex, check_crash_payload, checked, crash_payload, fixture, snapshot,
    snapshot_tree, tempdir, tiles_dir,
};
pub use support::http::{HttpServer, allow_loopback_sources};
/// The tests' one HTTP/1.1 client.
pub mod http {
    pub use crate::support::http::{Reply, get, request, try_get, try_request};
}
pub use support::raster::{
    assert_scene_matches_source, sample, sample_with, validate_cog, validate_cogs,
};
pub use support::scripted::{ScriptedStore, StoreScript};
pub use support::stac::validate_stac;
pub use tilegate_conformance::lossy;
pub mod service {
    pub use crate::support::service::{Demo, Issuer, Reply, Server, epoch_s, request};
}
pub use support::target::Target;

/// `k` as an [`tilegate_core::ObjectKey`], for tests that name their keys; panics on a key
/// the stores would refuse (a test that means to pass one builds it with `ObjectKey::parse`).
pub fn object_key(k: impl AsRef<str>) -> tilegate_core::ObjectKey {
    tilegate_core::ObjectKey::parse(k.as_ref()).expect("a valid object key")
}

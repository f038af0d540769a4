//! The requests the GCS store sends where fake-gcs-server does not enforce a precondition, and
//! its reading of GCS's documented answers, against a scripted HTTP responder: each request is
//! recorded and answered with the next scripted response.

use bytes::Bytes;
use tilegate_core::ConditionList;
use tilegate_core::ETag;
use tilegate_core::object::{
    DeleteOptions, DeleteOutcome, GetOptions, GetOutcome, ObjectStore, PutMode, PutOptions,
    PutOutcome, UpdateVersion,
};
use tilegate_gcs::GcsStore;
use tilegate_retry::RetryPolicy;
use tilegate_tests::object_key;
use tilegate_tests::responder::{Answer, responder};

fn object_json(name: &str, generation: i64) -> String {
    format!(
        r#"{{"kind":"storage#object","selfLink":"http://x/o","mediaLink":"http://x/m","id":"b/{name}/{generation}","name":"{name}","bucket":"bkt","generation":"{generation}","metageneration":"1","size":"3","etag":"CAE=","timeCreated":"2026-12-02T00:00:00Z","updated":"2026-12-02T00:00:00Z"}}"#
    )
}

fn error_json(code: u16, reason: &str) -> String {
    format!(
        r#"{{"error":{{"code":{code},"message":"{reason}","errors":[{{"domain":"global","reason":"{reason}","message":"{reason}"}}]}}}}"#
    )
}

async fn store(url: &str) -> GcsStore {
    GcsStore::connect_to("gs://bkt/p", url, true)
        .await
        .unwrap()
        .with_retry_policy(RetryPolicy::immediate(2))
}

#[tokio::test]
async fn a_create_refused_with_412_is_already_present() {
    let (url, seen) = responder(vec![Answer(
        412,
        vec![],
        error_json(412, "conditionNotMet"),
    )])
    .await;
    let s = store(&url).await;
    let out = s
        .put_opts(
            &object_key("t/a.tif"),
            Bytes::from_static(b"abc"),
            PutOptions::create(),
        )
        .await
        .unwrap();
    assert_eq!(out, PutOutcome::AlreadyPresent);
    let line = seen.line(0);
    assert!(
        line.starts_with("POST /upload/storage/v1/b/bkt/o?"),
        "{line}"
    );
    assert!(
        line.contains("uploadType=multipart"),
        "a single-request upload: {line}"
    );
    assert!(line.contains("ifGenerationMatch=0"), "{line}");
}

#[tokio::test]
async fn a_stale_update_is_superseded() {
    let (url, seen) = responder(vec![Answer(
        412,
        vec![],
        error_json(412, "conditionNotMet"),
    )])
    .await;
    let s = store(&url).await;
    let v = UpdateVersion::etag(ETag::new("\"42\""));
    let out = s
        .put_opts(
            &object_key("t/a.tif"),
            Bytes::from_static(b"abc"),
            PutOptions::update(v),
        )
        .await
        .unwrap();
    assert_eq!(out, PutOutcome::Superseded);
    assert!(seen.line(0).contains("ifGenerationMatch=42"));
}

/// fake-gcs-server deletes whatever generation is there; GCS refuses a stale one with 412.
#[tokio::test]
async fn a_conditional_delete_carries_the_generation_and_412_is_superseded() {
    let (url, seen) = responder(vec![
        Answer(200, vec![], object_json("p/t/a.tif", 42)),
        Answer(412, vec![], error_json(412, "conditionNotMet")),
    ])
    .await;
    let s = store(&url).await;
    let opts = DeleteOptions {
        if_match: Some(ETag::new("\"42\"")),
    };
    assert_eq!(
        s.delete_opts(&object_key("t/a.tif"), opts).await.unwrap(),
        DeleteOutcome::Superseded
    );
    let line = seen.line(1);
    assert!(
        line.starts_with("DELETE /storage/v1/b/bkt/o/p%2Ft%2Fa.tif"),
        "{line}"
    );
    assert!(line.contains("ifGenerationMatch=42"), "{line}");
}

/// fake-gcs-server ignores ifGenerationMatch on reads; GCS answers a stale one with 412.
#[tokio::test]
async fn a_read_if_match_is_sent_and_412_is_precondition_failed() {
    let (url, seen) = responder(vec![Answer(
        412,
        vec![],
        error_json(412, "conditionNotMet"),
    )])
    .await;
    let s = store(&url).await;
    let opts = GetOptions {
        if_match: Some(ConditionList::one(ETag::new("\"7\""))),
        ..GetOptions::default()
    };
    assert_eq!(
        s.get_opts(&object_key("t/a.tif"), opts).await.unwrap(),
        GetOutcome::PreconditionFailed
    );
    assert!(seen.line(0).contains("ifGenerationMatch=7"));
}

/// fake-gcs-server ignores the session's precondition at finalisation; GCS evaluates it there
/// (a racing upload finalised first) and answers 412: the upload is AlreadyPresent.
#[tokio::test]
async fn a_session_carries_its_precondition_and_a_412_at_finalisation_is_already_present() {
    let (url, seen) = responder(vec![
        // The session.
        Answer(
            200,
            vec![(
                "location",
                "{base}/upload/storage/v1/b/bkt/o?uploadType=resumable&upload_id=s1".to_owned(),
            )],
            String::new(),
        ),
        // Its record.
        Answer(200, vec![], object_json("p/.tilegate/uploads/x", 1)),
        // The last chunk: refused at finalisation.
        Answer(412, vec![], error_json(412, "conditionNotMet")),
        // The record is deleted.
        Answer(204, vec![], String::new()),
    ])
    .await;
    let s = store(&url).await;
    let id = s
        .create_multipart(&object_key("scenes/s.tif"), &PutOptions::create())
        .await
        .unwrap();
    let p = s
        .upload_part(
            &object_key("scenes/s.tif"),
            &id,
            1,
            Bytes::from_static(b"tail"),
        )
        .await
        .unwrap();
    let out = s
        .complete_multipart(&object_key("scenes/s.tif"), &id, &[p], &PutMode::Create)
        .await
        .unwrap();
    assert_eq!(out, PutOutcome::AlreadyPresent);
    let start = seen.line(0);
    assert!(
        start.contains("uploadType=resumable") && start.contains("ifGenerationMatch=0"),
        "{start}"
    );
    let record = seen.line(1);
    assert!(record.contains("ifGenerationMatch=0"), "{record}");
    let last = seen.all()[2].clone();
    assert!(
        last.starts_with("PUT /upload/storage/v1/b/bkt/o?uploadType=resumable&upload_id=s1"),
        "{last}"
    );
    assert!(
        last.to_ascii_lowercase()
            .contains("content-range: bytes 0-3/4"),
        "{last}"
    );
    assert!(seen.line(3).starts_with("DELETE "));
}

//! The requests the Azure store sends and its reading of Azure's documented answers that
//! Azurite does not give, against a scripted responder: a create refused with 412
//! `ConditionNotMet` (seen from Azure front ends; Azurite answers 409), the 409 it does give, a
//! stale If-Match, throttling, and a lost answer read back by its attempt token.

use bytes::Bytes;
use tilegate_azure::{Account, Auth, AzureStore, DEV_ACCOUNT, DEV_KEY};
use tilegate_core::ETag;
use tilegate_core::object::{ATTEMPT_METADATA, ObjectStore, PutOptions, PutOutcome, UpdateVersion};
use tilegate_retry::RetryPolicy;
use tilegate_tests::object_key;
use tilegate_tests::responder::{Answer, Seen, responder};

fn store(url: &str) -> AzureStore {
    let account = Account {
        name: DEV_ACCOUNT.to_owned(),
        blob_endpoint: format!("{url}/{DEV_ACCOUNT}"),
        auth: Auth::Key(DEV_KEY.to_owned()),
    };
    AzureStore::connect_with(&format!("az://{DEV_ACCOUNT}/tiles/p"), &account)
        .unwrap()
        .with_retry_policy(RetryPolicy::immediate(3))
}

/// An Azure error answer: the code in `x-ms-error-code` and in the XML body, as Azure sends it.
fn error(status: u16, code: &str) -> Answer {
    Answer(
        status,
        vec![
            ("x-ms-error-code", code.to_owned()),
            ("content-type", "application/xml".to_owned()),
        ],
        format!(
            "<?xml version=\"1.0\" encoding=\"utf-8\"?><Error><Code>{code}</Code><Message>scripted</Message></Error>"
        ),
    )
}

fn created(etag: &str) -> Answer {
    Answer(
        201,
        vec![
            ("etag", etag.to_owned()),
            ("last-modified", "Wed, 02 Dec 2026 10:00:00 GMT".to_owned()),
        ],
        String::new(),
    )
}

fn assert_put_blob(seen: &Seen, i: usize) {
    let line = seen.line(i);
    assert!(
        // The crate percent-encodes `/` in a blob name, as Azure's other SDKs do; the
        // service decodes it.
        line.starts_with(&format!("PUT /{DEV_ACCOUNT}/tiles/p%2Ft%2Fa.tif?")),
        "{line}"
    );
    assert!(line.contains("sig="), "the request carries the SAS: {line}");
    assert_eq!(
        seen.header(i, "x-ms-blob-type").as_deref(),
        Some("BlockBlob")
    );
}

#[tokio::test]
async fn a_create_refused_with_412_condition_not_met_is_already_present() {
    let (url, seen) = responder(vec![error(412, "ConditionNotMet")]).await;
    let out = store(&url)
        .put_opts(
            &object_key("t/a.tif"),
            Bytes::from_static(b"abc"),
            PutOptions::create(),
        )
        .await
        .unwrap();
    assert_eq!(out, PutOutcome::AlreadyPresent);
    assert_put_blob(&seen, 0);
    assert_eq!(seen.header(0, "if-none-match").as_deref(), Some("*"));
    assert_eq!(
        seen.all().len(),
        1,
        "a refusal on the first attempt is final"
    );
}

#[tokio::test]
async fn a_create_refused_with_409_blob_already_exists_is_already_present() {
    let (url, seen) = responder(vec![error(409, "BlobAlreadyExists")]).await;
    let out = store(&url)
        .put_opts(
            &object_key("t/a.tif"),
            Bytes::from_static(b"abc"),
            PutOptions::create(),
        )
        .await
        .unwrap();
    assert_eq!(out, PutOutcome::AlreadyPresent);
    assert_eq!(seen.header(0, "if-none-match").as_deref(), Some("*"));
}

#[tokio::test]
async fn another_409_is_an_error_not_a_refusal() {
    let (url, _) = responder(vec![error(409, "LeaseIdMissing")]).await;
    let err = store(&url)
        .put_opts(
            &object_key("t/a.tif"),
            Bytes::from_static(b"abc"),
            PutOptions::create(),
        )
        .await
        .unwrap_err();
    let why = tilegate_core::error::chain(&err);
    assert!(why.contains("409 LeaseIdMissing"), "{why}");
    assert_eq!(err.retry(), tilegate_core::Retry::Permanent);
}

#[tokio::test]
async fn a_stale_if_match_is_superseded() {
    let (url, seen) = responder(vec![error(412, "ConditionNotMet")]).await;
    let v = UpdateVersion::etag(ETag::new("\"0x8DD1\""));
    let out = store(&url)
        .put_opts(
            &object_key("t/a.tif"),
            Bytes::from_static(b"abc"),
            PutOptions::update(v),
        )
        .await
        .unwrap();
    assert_eq!(out, PutOutcome::Superseded);
    assert_put_blob(&seen, 0);
    assert_eq!(seen.header(0, "if-match").as_deref(), Some("\"0x8DD1\""));
    assert_eq!(seen.header(0, "if-none-match"), None);
}

#[tokio::test]
async fn server_busy_is_sent_again() {
    let (url, seen) = responder(vec![error(503, "ServerBusy"), created("\"0x8DD2\"")]).await;
    let out = store(&url)
        .put_opts(
            &object_key("t/a.tif"),
            Bytes::from_static(b"abc"),
            PutOptions::create(),
        )
        .await
        .unwrap();
    let PutOutcome::Written(meta) = out else {
        panic!("{out:?}")
    };
    assert_eq!(meta.e_tag.as_str(), "\"0x8DD2\"");
    assert_eq!(meta.size, 3);
    assert_eq!(seen.all().len(), 2);
}

/// A create whose first attempt got no usable answer (a 500 after the write may have landed)
/// and whose resend is refused is read back: the blob carries this write's attempt token
/// (stored as `tilegate_h_attempt`, Azure's names being identifiers), so it is `Written`.
#[tokio::test]
async fn a_refused_resend_of_a_lost_create_is_written_when_the_blob_is_its_own() {
    let head = |token: &str| {
        Answer(
            200,
            vec![
                ("etag", "\"0x8DD3\"".to_owned()),
                ("last-modified", "Wed, 02 Dec 2026 10:00:00 GMT".to_owned()),
                ("x-ms-meta-tilegate_h_attempt", token.to_owned()),
                ("x-ms-blob-type", "BlockBlob".to_owned()),
            ],
            String::new(),
        )
    };
    let mut opts = PutOptions::create();
    opts.metadata
        .insert(ATTEMPT_METADATA.to_owned(), "mine".to_owned());
    for (token, expected) in [("mine", true), ("theirs", false)] {
        let (url, seen) = responder(vec![
            error(500, "InternalError"),
            error(409, "BlobAlreadyExists"),
            head(token),
        ])
        .await;
        let out = store(&url)
            .put_opts(
                &object_key("t/a.tif"),
                Bytes::from_static(b"abc"),
                opts.clone(),
            )
            .await
            .unwrap();
        assert_eq!(
            matches!(out, PutOutcome::Written(_)),
            expected,
            "{token}: {out:?}"
        );
        assert!(seen.line(2).starts_with("HEAD "), "{}", seen.line(2));
        assert_eq!(
            seen.header(0, "x-ms-meta-tilegate_h_attempt").as_deref(),
            Some("mine")
        );
    }
}

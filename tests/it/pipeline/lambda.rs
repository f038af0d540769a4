//! The Lambda handler against the AWS emulator: one SQS batch mixing a good window, a
//! duplicate, a malformed record and a window whose write is throttled. The partial batch
//! response lists exactly the throttled record; the duplicate is success and rewrites nothing;
//! the malformed record is in the dead-letter queue with its reason and is not redelivered;
//! the counters go out as CloudWatch Embedded Metric Format lines.

use serde_json::Value;
use std::sync::Arc;
use std::time::Duration;
use tilegate_core::queue::{ReceiveOptions, Received};
use tilegate_core::{JobId, Retry, StoreError, StoreResult};
use tilegate_lambda::events::SqsEvent;
use tilegate_lambda::{Handler, HandlerConfig};
use tilegate_tests::object_key;
use tilegate_tests::{Aws, ScriptedStore, StoreScript, Target, sample, tempdir};
use tilegate_worker::WindowOutcome;

/// Writes to one key answer as S3 does when it throttles (503 SlowDown): a retryable fault.
#[derive(Debug)]
struct Throttled {
    key: String,
}

impl StoreScript for Throttled {
    fn before_write(&self, operation: &'static str, key: &str) -> StoreResult<()> {
        if key == self.key && operation != "upload part" {
            return Err(StoreError::backend(
                "put",
                key,
                Retry::Retryable,
                "SlowDown: Please reduce your request rate (simulated)",
            ));
        }
        Ok(())
    }
}

/// The SQS event fixture with one record per received message.
pub(crate) fn event(messages: &[Received]) -> SqsEvent {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/fixtures/lambda/sqs-batch.json"
    );
    let mut v: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let template = v["Records"][0].clone();
    v["Records"] = messages
        .iter()
        .map(|m| {
            let mut r = template.clone();
            r["messageId"] = m.message_id.clone().into();
            r["receiptHandle"] = m.receipt.clone().into();
            r["body"] = m.body.clone().into();
            r["attributes"]["ApproximateReceiveCount"] = m.receive_count.to_string().into();
            r
        })
        .collect();
    serde_json::from_value(v).expect("the fixture is an SQS event")
}

/// Receive everything visible, with real receipt handles.
pub(crate) async fn receive_all(b: &tilegate_core::Backends, want: usize) -> Vec<Received> {
    let mut got = Vec::new();
    for _ in 0..20 {
        let opts = ReceiveOptions {
            max: 10,
            wait: Duration::from_secs(1),
            visibility: Duration::from_secs(60),
        };
        got.extend(b.queue.receive(opts).await.unwrap());
        if got.len() >= want {
            break;
        }
    }
    got
}

fn window_of(body: &str) -> Option<String> {
    let v: Value = serde_json::from_str(body).ok()?;
    Some(format!(
        "{:04}_{:04}",
        v["window"]["row"].as_u64()?,
        v["window"]["col"].as_u64()?
    ))
}

#[test]
fn lambda_partial_batch_lists_exactly_the_throttled_record() {
    let Some(aws) = Aws::for_test("lambda_partial_batch_lists_exactly_the_throttled_record") else {
        return;
    };
    let target = Target::Aws(aws.clone());
    let tmp = tempdir();
    let data = tmp.path();
    target.json(data, &["init", "--create-bucket"]);
    let scene = data.join("scene.tif");
    sample(data, &scene, 1024, 21);
    let plan = target.json(data, &["plan", scene.to_str().unwrap()]);
    assert_eq!(plan["windows"], 4);
    let job = plan["job_id"].as_str().unwrap().to_owned();
    let job_id = JobId::parse(&job).unwrap();
    let tile = |w: &str| format!("tilegate/tiles/{job}/{w}.tif");

    let rt = tokio::runtime::Runtime::new().unwrap();
    let b = rt.block_on(target.backends(data));
    let mut planned = rt.block_on(receive_all(&b, 4));
    assert_eq!(planned.len(), 4);
    planned.sort_by_key(|m| window_of(&m.body));
    // The function's stores: the same, but writes of window 0000_0001 are throttled.
    let mut fb = b.clone();
    fb.objects = Arc::new(ScriptedStore {
        inner: b.objects.clone(),
        script: Throttled {
            key: tile("0000_0001"),
        },
    });
    let handler = Handler::new(
        fb,
        HandlerConfig {
            visibility: Duration::from_secs(60),
            function: "tilegate-test".into(),
            ..HandlerConfig::default()
        },
    );

    // A first batch writes window 0001_0000, so that its second delivery is a duplicate.
    let first = rt.block_on(handler.handle(event(&planned[2..3])));
    assert!(first.response.batch_item_failures.is_empty());
    assert_eq!(first.outcomes[0].1, WindowOutcome::Written);
    let dup_meta = rt
        .block_on(b.objects.head(&object_key(tile("0001_0000"))))
        .unwrap()
        .unwrap();

    // The mixed batch: a good window, the duplicate, a malformed record, a throttled window.
    let body = planned[2].body.clone();
    rt.block_on(b.queue.send_batch(&[body, "{not json".to_owned()]))
        .unwrap();
    let again = rt.block_on(receive_all(&b, 2));
    assert_eq!(again.len(), 2);
    let mixed = vec![
        planned[0].clone(), // 0000_0000: good
        planned[1].clone(), // 0000_0001: throttled
        again[0].clone(),
        again[1].clone(),
    ];
    let throttled_id = planned[1].message_id.clone();
    let result = rt.block_on(handler.handle(event(&mixed)));

    // What Lambda reads: exactly the throttled record.
    let response = serde_json::to_value(&result.response).unwrap();
    assert_eq!(
        response,
        serde_json::json!({"batchItemFailures": [{"itemIdentifier": throttled_id}]}),
        "{:?}",
        result.outcomes
    );
    let outcome = |id: &str| {
        result
            .outcomes
            .iter()
            .find(|(i, _)| i == id)
            .map(|(_, o)| o.clone())
            .unwrap()
    };
    assert_eq!(outcome(&planned[0].message_id), WindowOutcome::Written);
    assert!(matches!(outcome(&throttled_id), WindowOutcome::Retry(_)));
    let dup = again.iter().find(|m| m.body != "{not json").unwrap();
    let bad = again.iter().find(|m| m.body == "{not json").unwrap();
    // The duplicate is dropped before encoding: this handler (a warm function's) recorded the
    // window itself.
    assert_eq!(outcome(&dup.message_id), WindowOutcome::Skipped);
    assert!(
        matches!(outcome(&bad.message_id), WindowOutcome::DeadLettered(ref r) if r.starts_with("malformed-message"))
    );

    // Stored state: the duplicate rewrote nothing; the throttled window wrote nothing; the
    // malformed record waits in the dead-letter queue with its reason.
    let dup_after = rt
        .block_on(b.objects.head(&object_key(tile("0001_0000"))))
        .unwrap()
        .unwrap();
    assert_eq!(
        (dup_after.e_tag, dup_after.last_modified),
        (dup_meta.e_tag, dup_meta.last_modified)
    );
    assert!(
        rt.block_on(b.objects.head(&object_key(tile("0000_0001"))))
            .unwrap()
            .is_none()
    );
    assert_eq!(rt.block_on(b.manifest.count_entries(&job_id)).unwrap(), 2);
    let dead = rt.block_on(b.queue.list_dead_letters(10)).unwrap();
    assert_eq!(dead.len(), 1, "{dead:?}");
    assert!(dead[0].reason.starts_with("malformed-message"), "{dead:?}");

    // The throttled record comes back after its short backoff, not after the queue's
    // visibility timeout, and then completes.
    let back = rt.block_on(receive_all(&b, 1));
    assert_eq!(back.len(), 1, "only the throttled record is redelivered");
    assert_eq!(back[0].message_id, throttled_id);
    assert_eq!(back[0].receive_count, 2);
    let healthy = Handler::new(b.clone(), HandlerConfig::default());
    let last = rt.block_on(healthy.handle(event(&back)));
    assert!(last.response.batch_item_failures.is_empty());
    assert_eq!(last.outcomes[0].1, WindowOutcome::Written);
    assert_eq!(rt.block_on(b.manifest.count_entries(&job_id)).unwrap(), 3);

    // The mixed batch's metrics: one EMF document for every counter, one per dead-letter reason.
    let docs: Vec<Value> = result
        .metrics
        .iter()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(docs.len(), 2, "{docs:?}");
    assert_eq!(
        docs[0]["_aws"]["CloudWatchMetrics"][0]["Namespace"],
        "tilegate"
    );
    assert_eq!(docs[0]["function"], "tilegate-test");
    assert_eq!(docs[0]["tiles_written_total"], 1);
    // The duplicate was dropped before encoding (this handler had recorded its window), so
    // the store was never asked to refuse a copy.
    assert_eq!(docs[0]["conditional_write_precondition_failed_total"], 0);
    assert_eq!(docs[0]["duplicate_encodes_skipped_total"], 1);
    assert_eq!(docs[0]["dead_lettered_total"], 1);
    assert_eq!(docs[1]["reason"], "malformed-message");
    assert_eq!(docs[1]["dead_lettered_total"], 1);
}

/// The function with assembly on completion (`TILEGATE_ASSEMBLE=1`): SQS batches of a job's
/// windows, one of them delivered twice, and the job's scene is published by the invocation
/// that records the last window — nobody runs `assemble`. A size limit below the job's tiles
/// leaves it `not_assembled` for `tilegate assemble --all`.
#[test]
fn lambda_assembles_the_job_whose_last_window_it_records() {
    let Some(aws) = Aws::for_test("lambda_assembles_the_job_whose_last_window_it_records") else {
        return;
    };
    let target = Target::Aws(aws.clone());
    let tmp = tempdir();
    let data = tmp.path();
    target.json(data, &["init", "--create-bucket"]);
    let rt = tokio::runtime::Runtime::new().unwrap();
    let b = rt.block_on(target.backends(data));
    let handler = |max: u64| {
        let opts = tilegate_assembler::AssembleOptions::new("lambda-test".into());
        Handler::new(
            b.clone(),
            HandlerConfig {
                visibility: Duration::from_secs(60),
                on_complete: Some(Arc::new(
                    tilegate_pipeline::complete::AssembleOnComplete::new(b.clone(), opts)
                        .at_most(max),
                )),
                ..HandlerConfig::default()
            },
        )
    };
    for (seed, max) in [(31, u64::MAX), (32, 1)] {
        let scene = data.join(format!("scene-{seed}.tif"));
        sample(data, &scene, 1024, seed);
        let plan = target.json(data, &["plan", scene.to_str().unwrap()]);
        let job = plan["job_id"].as_str().unwrap().to_owned();
        let mut planned = rt.block_on(receive_all(&b, 4));
        assert_eq!(planned.len(), 4);
        planned.sort_by_key(|m| window_of(&m.body));
        let h = handler(max);
        // Two batches; the second repeats the first batch's last record.
        let first = rt.block_on(h.handle(event(&planned[..2])));
        assert!(first.response.batch_item_failures.is_empty());
        let mut second = planned[2..].to_vec();
        second.push(planned[1].clone());
        let result = rt.block_on(h.handle(event(&second)));
        assert!(
            result.response.batch_item_failures.is_empty(),
            "{:?}",
            result.outcomes
        );
        let st = target.json(data, &["status", &job]);
        if max == u64::MAX {
            assert_eq!(st["lifecycle"], "published", "{st}");
            assert_eq!(st["counters"]["claims_won_total"], 1, "{st}");
        } else {
            assert_eq!(st["lifecycle"], "not_assembled", "{st}");
            let all = target.json(data, &["assemble", "--all"]);
            assert_eq!(all["jobs"][0]["outcome"], "written", "{all}");
            let st = target.json(data, &["status", &job]);
            assert_eq!(st["lifecycle"], "published", "{st}");
        }
    }
}

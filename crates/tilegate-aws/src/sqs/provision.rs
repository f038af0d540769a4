//! Queue administration: creating the queue and its dead-letter queue with the
//! `RedrivePolicy` ([`SqsQueue::ensure`]), and opening them by name (URL look-ups and the
//! policy's `maxReceiveCount`).

use super::{Ledger, SERVICE, SqsQueue, check_queue_name, dead_letter_queue_name};
use crate::config::{load_sdk_config, sqs_client};
use crate::error::{Answer, AwsError, own_error};
use crate::retry::{RetryPolicy, Sdk};
use crate::url::parse_sqs;
use aws_sdk_sqs::types::QueueAttributeName;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use tilegate_core::queue::DEFAULT_MAX_RECEIVE_COUNT;
use tilegate_core::{Retry, StoreError, StoreResult};
use tracing::{info, warn};

impl SqsQueue {
    /// Open `name` and its dead-letter queue (created by [`SqsQueue::ensure`] or
    /// `AwsBackends::init`). `max_receive_count` is what the caller expects; the queue's own
    /// `RedrivePolicy` is what SQS enforces, so that is the value reported (with a warning if
    /// they differ).
    pub async fn open(
        client: aws_sdk_sqs::Client,
        name: &str,
        max_receive_count: u32,
    ) -> StoreResult<Self> {
        check_queue_name("open queue", name)?;
        let retry = RetryPolicy::default();
        let url = queue_url(&client, &retry, name).await?;
        let dlq_url = queue_url(&client, &retry, &dead_letter_queue_name(name)).await?;
        let attrs =
            queue_attributes(&client, &retry, &url, &[QueueAttributeName::RedrivePolicy]).await?;
        let provider_max = attrs
            .get(&QueueAttributeName::RedrivePolicy)
            .and_then(|p| serde_json::from_str::<serde_json::Value>(p).ok())
            .and_then(|v| match &v["maxReceiveCount"] {
                serde_json::Value::Number(n) => n.as_u64(),
                serde_json::Value::String(s) => s.parse().ok(),
                _ => None,
            })
            .and_then(|n| u32::try_from(n).ok())
            .ok_or_else(|| {
                not_set_up(
                    name,
                    "it has no RedrivePolicy with a maxReceiveCount; run `tilegate init` to \
                     attach the dead-letter queue",
                )
            })?;
        if provider_max != max_receive_count {
            warn!(
                queue = name,
                expected = max_receive_count,
                configured = provider_max,
                "the queue's RedrivePolicy differs from the requested maxReceiveCount; SQS enforces the queue's"
            );
        }
        Ok(Self {
            client,
            name: name.to_owned(),
            url,
            dlq_url,
            max_receive_count: provider_max,
            ledger: Arc::new(Mutex::new(Ledger::default())),
            retry,
        })
    }

    /// Open `sqs://queue-name` with the standard AWS configuration.
    pub async fn connect(url: &str, max_receive_count: u32) -> StoreResult<Self> {
        let name = parse_sqs(url)?;
        let sdk = load_sdk_config().await;
        Self::open(sqs_client(&sdk), &name, max_receive_count).await
    }

    /// Create the dead-letter queue and the queue with its `RedrivePolicy` where missing, and
    /// set the policy on an existing queue. Returns whether this call created the main queue;
    /// a queue that exists already is success.
    pub async fn ensure(
        client: &aws_sdk_sqs::Client,
        name: &str,
        max_receive_count: u32,
    ) -> StoreResult<bool> {
        check_queue_name("create queue", name)?;
        let retry = RetryPolicy::default();
        let max = if max_receive_count == 0 {
            DEFAULT_MAX_RECEIVE_COUNT
        } else {
            max_receive_count
        };
        let dlq_name = dead_letter_queue_name(name);
        // Dead letters keep their original enqueue time, so the DLQ keeps them as long as SQS
        // allows (14 days).
        let dlq_url = create_queue(
            client,
            &retry,
            &dlq_name,
            &[(
                QueueAttributeName::MessageRetentionPeriod,
                "1209600".to_owned(),
            )],
        )
        .await?;
        let dlq_arn = queue_attributes(client, &retry, &dlq_url, &[QueueAttributeName::QueueArn])
            .await?
            .remove(&QueueAttributeName::QueueArn)
            .ok_or_else(|| StoreError::Corrupt {
                what: "queue attributes",
                key: dlq_name.clone(),
                detail: "GetQueueAttributes returned no QueueArn".to_owned(),
            })?;
        let policy = serde_json::json!({
            "deadLetterTargetArn": dlq_arn,
            "maxReceiveCount": max.to_string(),
        })
        .to_string();
        let created = match try_queue_url(client, &retry, name).await? {
            Some(url) => {
                // Exists: make sure the redrive policy is the requested one (idempotent).
                Sdk::new(&retry, SERVICE)
                    .send("set queue attributes", name, || {
                        client
                            .set_queue_attributes()
                            .queue_url(&url)
                            .attributes(QueueAttributeName::RedrivePolicy, &policy)
                            .send()
                    })
                    .await?;
                false
            }
            None => {
                create_queue(
                    client,
                    &retry,
                    name,
                    &[(QueueAttributeName::RedrivePolicy, policy)],
                )
                .await?;
                true
            }
        };
        info!(queue = name, dead_letter_queue = %dlq_name, max_receive_count = max, outcome = if created { "created" } else { "already-present" }, "ensure queue");
        Ok(created)
    }
}

async fn try_queue_url(
    client: &aws_sdk_sqs::Client,
    retry: &RetryPolicy,
    name: &str,
) -> StoreResult<Option<String>> {
    let r = Sdk::new(retry, SERVICE)
        .send_raw("get queue url", name, || {
            client.get_queue_url().queue_name(name).send()
        })
        .await;
    match r {
        Ok(out) => Ok(out.queue_url().map(str::to_owned)),
        Err(f) if f.answer == Answer::MissingResource => Ok(None),
        Err(f) => Err(f.into_store("get queue url", name)),
    }
}

async fn queue_url(
    client: &aws_sdk_sqs::Client,
    retry: &RetryPolicy,
    name: &str,
) -> StoreResult<String> {
    try_queue_url(client, retry, name)
        .await?
        .ok_or_else(|| not_set_up(name, "it does not exist; run `tilegate init`"))
}

/// Opening queue `name` failed because the deployment did not set it up: `reason` says how.
fn not_set_up(name: &str, reason: &str) -> StoreError {
    own_error(
        "open queue",
        name,
        Retry::Permanent,
        AwsError::Misconfigured {
            what: format!("queue `{name}`"),
            reason: reason.to_owned(),
        },
    )
}

async fn create_queue(
    client: &aws_sdk_sqs::Client,
    retry: &RetryPolicy,
    name: &str,
    attributes: &[(QueueAttributeName, String)],
) -> StoreResult<String> {
    let out = Sdk::new(retry, SERVICE)
        .send("create queue", name, || {
            let mut req = client.create_queue().queue_name(name);
            for (k, v) in attributes {
                req = req.attributes(k.clone(), v);
            }
            req.send()
        })
        .await?;
    out.queue_url()
        .map(str::to_owned)
        .ok_or_else(|| StoreError::Corrupt {
            what: "queue",
            key: name.to_owned(),
            detail: "CreateQueue returned no QueueUrl".to_owned(),
        })
}

pub(super) async fn queue_attributes(
    client: &aws_sdk_sqs::Client,
    retry: &RetryPolicy,
    url: &str,
    names: &[QueueAttributeName],
) -> StoreResult<HashMap<QueueAttributeName, String>> {
    Sdk::new(retry, SERVICE)
        .send("get queue attributes", url, || {
            client
                .get_queue_attributes()
                .queue_url(url)
                .set_attribute_names(Some(names.to_vec()))
                .send()
        })
        .await
        .map(|out| out.attributes.unwrap_or_default())
}

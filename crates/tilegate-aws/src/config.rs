//! SDK configuration and clients: the standard AWS configuration chain (region, credentials,
//! profile, `AWS_ENDPOINT_URL` and `AWS_ENDPOINT_URL_<SERVICE>`), with the SDK's own retries
//! switched off because [`crate::retry`] is the one retry policy, and every request counted
//! for its job ([`crate::meter`]).

use crate::meter::RequestMeter;
use aws_config::BehaviorVersion;
use aws_config::SdkConfig;
use aws_config::retry::RetryConfig;

/// Load the standard configuration. Region, credentials and endpoints come from the
/// environment and profile as for every AWS SDK; tests reach a local emulator through
/// `AWS_ENDPOINT_URL` (S3, DynamoDB) and `AWS_ENDPOINT_URL_SQS`.
///
/// Every request has a connect timeout and a read timeout: an answer that never comes (a
/// connection the far end dropped without closing it) fails as a network fault, which the
/// retry policy repeats, instead of holding a window, an arrival or an assembly for ever. The
/// read timeout is above SQS's longest poll (20 s).
pub async fn load_sdk_config() -> SdkConfig {
    aws_config::defaults(BehaviorVersion::latest())
        .retry_config(RetryConfig::disabled())
        .timeout_config(
            aws_config::timeout::TimeoutConfig::builder()
                .connect_timeout(std::time::Duration::from_secs(10))
                .read_timeout(READ_TIMEOUT)
                .build(),
        )
        .load()
        .await
}

/// How long a request waits for its answer to start (and between its reads).
pub const READ_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(60);

/// True if an S3 endpoint other than AWS's own is configured (an emulator or an
/// S3-compatible store), which wants path-style addressing.
fn custom_s3_endpoint(sdk: &SdkConfig) -> bool {
    sdk.endpoint_url().is_some()
        || std::env::var_os("AWS_ENDPOINT_URL_S3").is_some_and(|v| !v.is_empty())
}

/// An S3 client; path-style (`http://host/bucket/key`) when a custom endpoint is configured,
/// because emulators do not serve virtual-hosted bucket names.
pub fn s3_client(sdk: &SdkConfig) -> aws_sdk_s3::Client {
    let mut b = aws_sdk_s3::config::Builder::from(sdk).interceptor(RequestMeter::new("s3"));
    if custom_s3_endpoint(sdk) {
        b = b.force_path_style(true);
    }
    aws_sdk_s3::Client::from_conf(b.build())
}

/// A DynamoDB client.
pub fn dynamodb_client(sdk: &SdkConfig) -> aws_sdk_dynamodb::Client {
    aws_sdk_dynamodb::Client::from_conf(
        aws_sdk_dynamodb::config::Builder::from(sdk)
            .interceptor(RequestMeter::new("dynamodb"))
            .build(),
    )
}

/// An SQS client.
pub fn sqs_client(sdk: &SdkConfig) -> aws_sdk_sqs::Client {
    aws_sdk_sqs::Client::from_conf(
        aws_sdk_sqs::config::Builder::from(sdk)
            .interceptor(RequestMeter::new("sqs"))
            .build(),
    )
}

/// An SNS client (announcements).
pub fn sns_client(sdk: &SdkConfig) -> aws_sdk_sns::Client {
    aws_sdk_sns::Client::from_conf(
        aws_sdk_sns::config::Builder::from(sdk)
            .interceptor(RequestMeter::new("sns"))
            .build(),
    )
}

/// An EventBridge client (announcements).
pub fn eventbridge_client(sdk: &SdkConfig) -> aws_sdk_eventbridge::Client {
    aws_sdk_eventbridge::Client::from_conf(
        aws_sdk_eventbridge::config::Builder::from(sdk)
            .interceptor(RequestMeter::new("eventbridge"))
            .build(),
    )
}

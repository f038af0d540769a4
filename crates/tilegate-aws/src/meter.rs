//! Every request the AWS clients put on the wire, counted for the job that sent it
//! (`tilegate_retry::meter`): an SDK interceptor sees each transmission, so the counts are
//! the requests S3, DynamoDB and SQS saw — repeats by the retry loop and read-backs included.

use aws_sdk_s3::config::interceptors::{
    BeforeDeserializationInterceptorContextRef, BeforeTransmitInterceptorContextRef,
};
use aws_sdk_s3::config::{ConfigBag, Intercept, RuntimeComponents};
use aws_smithy_runtime_api::box_error::BoxError;
use aws_smithy_runtime_api::client::orchestrator::Metadata;
use tilegate_retry::meter;

/// Counts each request of one service (`s3`, `dynamodb`, `sqs`) by operation name.
#[derive(Debug, Clone, Copy)]
pub struct RequestMeter {
    service: &'static str,
}

impl RequestMeter {
    pub fn new(service: &'static str) -> Self {
        Self { service }
    }
}

impl Intercept for RequestMeter {
    fn name(&self) -> &'static str {
        "tilegate-request-meter"
    }

    fn read_before_transmit(
        &self,
        context: &BeforeTransmitInterceptorContextRef<'_>,
        _: &RuntimeComponents,
        cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        let op = cfg.load::<Metadata>().map_or("unknown", Metadata::name);
        let sent = context.request().body().content_length().unwrap_or(0);
        meter::record(self.service, op, sent);
        Ok(())
    }

    fn read_before_deserialization(
        &self,
        context: &BeforeDeserializationInterceptorContextRef<'_>,
        _: &RuntimeComponents,
        cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        // A HEAD's Content-Length is the object's size, not bytes that crossed the wire.
        if cfg
            .load::<Metadata>()
            .is_some_and(|m| m.name().starts_with("Head"))
        {
            return Ok(());
        }
        let received = context
            .response()
            .headers()
            .get("content-length")
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0);
        meter::received(self.service, received);
        Ok(())
    }
}

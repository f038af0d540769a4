//! Backend URLs: `s3://bucket[/prefix]`, `dynamodb://table-prefix`, `sqs://queue-name`.
//! Every name is validated against the provider's naming rules here, so a bad URL is a clear,
//! permanent error at startup rather than an odd answer from the service later.

use crate::error::AwsError;
use tilegate_core::{Retry, StoreError, StoreResult, keys};

/// Where an [`crate::S3Store`] keeps its objects.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct S3Location {
    pub bucket: String,
    /// Validated key segments joined by `/`, without leading or trailing `/`; empty for the
    /// bucket's root. Keys are stored as `{prefix}/{key}`.
    pub prefix: String,
}

fn invalid(url: &str, reason: impl Into<String>) -> StoreError {
    StoreError::backend(
        "parse backend url",
        url,
        Retry::Permanent,
        AwsError::InvalidUrl {
            url: url.chars().take(200).collect(),
            reason: reason.into(),
        },
    )
}

fn strip_scheme<'a>(url: &'a str, scheme: &str) -> StoreResult<&'a str> {
    url.strip_prefix(scheme)
        .and_then(|r| r.strip_prefix("://"))
        .ok_or_else(|| invalid(url, format!("expected `{scheme}://...`")))
}

/// Parse `s3://bucket` or `s3://bucket/prefix/segments`. Bucket names follow S3's rules for
/// new buckets (3–63 characters of `a-z`, `0-9`, `.`, `-`, starting and ending with a letter
/// or digit); prefix segments are validated like every key segment.
pub fn parse_s3(url: &str) -> StoreResult<S3Location> {
    let rest = strip_scheme(url, "s3")?;
    let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
    let ok_chars = bucket
        .bytes()
        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'.' || b == b'-');
    let ok_ends = bucket
        .bytes()
        .next()
        .zip(bucket.bytes().last())
        .is_some_and(|(a, z)| a.is_ascii_alphanumeric() && z.is_ascii_alphanumeric());
    if !(3..=63).contains(&bucket.len()) || !ok_chars || !ok_ends || bucket.contains("..") {
        return Err(invalid(
            url,
            "a bucket name is 3-63 characters of a-z, 0-9, `.` and `-`, starting and ending \
             with a letter or digit",
        ));
    }
    let prefix = prefix.trim_matches('/');
    if !prefix.is_empty() {
        keys::validate_key(prefix).map_err(|e| invalid(url, e.to_string()))?;
    }
    Ok(S3Location {
        bucket: bucket.to_owned(),
        prefix: prefix.to_owned(),
    })
}

/// The longest table suffix tilegate appends (`-counters`).
const LONGEST_TABLE_SUFFIX: usize = "-counters".len();

/// Parse `dynamodb://table-prefix`: DynamoDB table names are 3–255 characters of
/// `A-Z a-z 0-9 _ - .`, and the prefix must leave room for tilegate's suffixes.
pub fn parse_dynamodb(url: &str) -> StoreResult<String> {
    let prefix = strip_scheme(url, "dynamodb")?.trim_end_matches('/');
    let ok = !prefix.is_empty()
        && prefix.len() + LONGEST_TABLE_SUFFIX <= 255
        && prefix
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'));
    if !ok {
        return Err(invalid(
            url,
            "a table prefix is 1-246 characters of A-Z, a-z, 0-9, `_`, `-` and `.`",
        ));
    }
    Ok(prefix.to_owned())
}

/// The longest queue name whose dead-letter queue (`{name}-dlq`) still fits SQS's 80
/// characters.
pub const MAX_QUEUE_NAME: usize = 80 - "-dlq".len();

/// Parse `sqs://queue-name`: SQS standard-queue names are 1–80 characters of `A-Z a-z 0-9 _ -`,
/// and the dead-letter queue's name adds `-dlq`.
pub fn parse_sqs(url: &str) -> StoreResult<String> {
    let name = strip_scheme(url, "sqs")?.trim_end_matches('/');
    validate_queue_name(name).map_err(|reason| invalid(url, reason))?;
    Ok(name.to_owned())
}

/// Check a queue name against SQS's rules (leaving room for `-dlq`).
pub fn validate_queue_name(name: &str) -> Result<(), String> {
    let ok = !name.is_empty()
        && name.len() <= MAX_QUEUE_NAME
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-'));
    if ok {
        Ok(())
    } else {
        Err(format!(
            "a queue name is 1-{MAX_QUEUE_NAME} characters of A-Z, a-z, 0-9, `_` and `-`"
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_s3_urls() {
        assert_eq!(
            parse_s3("s3://my-bucket").unwrap(),
            S3Location {
                bucket: "my-bucket".into(),
                prefix: String::new()
            }
        );
        assert_eq!(
            parse_s3("s3://b.example/out/run-1/").unwrap(),
            S3Location {
                bucket: "b.example".into(),
                prefix: "out/run-1".into()
            }
        );
        for bad in [
            "s3://ab",
            "s3://Upper",
            "s3://-dash",
            "s3://a..b",
            "file:///x",
            "s3://bucket/../x",
            "s3://bucket/a b",
            "s3:/bucket",
        ] {
            let e = parse_s3(bad).unwrap_err();
            assert!(!e.is_retryable(), "{bad}");
        }
    }

    #[test]
    fn parses_table_and_queue_urls() {
        assert_eq!(parse_dynamodb("dynamodb://tg-prod").unwrap(), "tg-prod");
        assert!(parse_dynamodb("dynamodb://").is_err());
        assert!(parse_dynamodb("dynamodb://a/b").is_err());
        assert!(parse_dynamodb(&format!("dynamodb://{}", "x".repeat(250))).is_err());
        assert_eq!(parse_sqs("sqs://work_1-a").unwrap(), "work_1-a");
        assert!(parse_sqs("sqs://a.fifo").is_err());
        assert!(parse_sqs(&format!("sqs://{}", "q".repeat(77))).is_err());
        assert!(parse_sqs(&format!("sqs://{}", "q".repeat(76))).is_ok());
    }
}

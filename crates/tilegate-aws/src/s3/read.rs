//! Reads on S3: one GET carrying the conditions S3 can evaluate itself, or a HEAD that decides
//! and a GET pinned to the ETag it saw; ranges served, cut or refused (416) as the contract says.

use super::{S3Store, SERVICE, metadata_of, size_of, to_system_time};
use crate::error::{Answer, AwsError, Failure, FailureOf as _, own_error};
use crate::retry::{self, Idempotency};
use bytes::Bytes;
use std::ops::Range;
use tilegate_core::ObjectKey;
use tilegate_core::object::{
    GetOptions, GetOutcome, GetResult, ObjectMeta, ObjectStore, RangeError,
};
use tilegate_core::{ETag, Retry, StoreError, StoreResult};
use tilegate_retry::{IfMatch, IfNoneMatch};

/// How often a multi-step conditional read re-reads an object that keeps changing.
const STABLE_READ_ATTEMPTS: u32 = 5;

/// Parse `Content-Range: bytes START-END/TOTAL` into (START..END+1, TOTAL).
fn parse_content_range(v: &str) -> Option<(Range<u64>, u64)> {
    let rest = v.trim().strip_prefix("bytes ")?;
    let (span, total) = rest.split_once('/')?;
    let (a, b) = span.split_once('-')?;
    let (a, b): (u64, u64) = (a.trim().parse().ok()?, b.trim().parse().ok()?);
    Some((a..b.checked_add(1)?, total.trim().parse().ok()?))
}

impl S3Store {
    /// A conditional, optionally ranged read: one GET where S3 can evaluate the conditions
    /// itself, else a HEAD that decides and a GET pinned to the ETag it saw.
    pub(super) async fn read(&self, key: &ObjectKey, opts: GetOptions) -> StoreResult<GetOutcome> {
        RangeError::check(opts.range.as_ref()).map_err(|e| e.into_store(key))?;
        let im = opts.if_match.as_ref().map(IfMatch::of);
        let inm = opts.if_none_match.as_ref().map(IfNoneMatch::of);
        // One request where S3 can evaluate the conditions itself: at most one tag each, and
        // not both (RFC 9110 orders If-Match first; S3 documents no order for the pair).
        match (&im, &inm) {
            (None | Some(IfMatch::Any), None) => {
                return self.get_once(key, opts.range, None, None).await;
            }
            (Some(IfMatch::One(t)), None) => {
                return self.get_once(key, opts.range, Some(t), None).await;
            }
            (None | Some(IfMatch::Any), Some(one @ IfNoneMatch::One(_))) => {
                return self.get_once(key, opts.range, None, Some(one)).await;
            }
            _ => {}
        }
        // Otherwise evaluate the conditions against a HEAD (a refusal is then true of the
        // version that HEAD saw), and read exactly that version with `If-Match: <its ETag>`.
        for _ in 0..STABLE_READ_ATTEMPTS {
            let Some(cur) = self.head(key).await? else {
                return Err(StoreError::NotFound {
                    what: "object",
                    key: key.to_string(),
                });
            };
            if let Some(refused) =
                tilegate_retry::read_refusal(im.as_ref(), inm.as_ref(), &cur.e_tag)
            {
                return Ok(refused);
            }
            match self
                .get_once(key, opts.range.clone(), Some(&cur.e_tag), None)
                .await?
            {
                // Replaced between the HEAD and the GET: look again.
                GetOutcome::PreconditionFailed => continue,
                other => return Ok(other),
            }
        }
        Err(own_error(
            "get",
            key,
            Retry::Retryable,
            AwsError::Unstable {
                attempts: STABLE_READ_ATTEMPTS,
            },
        ))
    }

    /// One GET with at most one If-Match and one If-None-Match tag, which S3 evaluates.
    async fn get_once(
        &self,
        key: &ObjectKey,
        range: Option<Range<u64>>,
        if_match: Option<&ETag>,
        if_none_match: Option<&IfNoneMatch>,
    ) -> StoreResult<GetOutcome> {
        let full = self.full(key);
        let inm_header = match if_none_match {
            Some(IfNoneMatch::One(t)) => Some(t.clone()),
            _ => None,
        };
        let r = retry::run(&self.retry, Idempotency::Idempotent, "get", &full, |_| {
            let mut req = self.client.get_object().bucket(&self.bucket).key(&full);
            if let Some(r) = &range {
                req = req.range(format!("bytes={}-{}", r.start, r.end - 1));
            }
            if let Some(t) = if_match {
                req = req.if_match(t.as_str());
            }
            if let Some(t) = &inm_header {
                req = req.if_none_match(t.as_str());
            }
            async move {
                let out = req
                    .send()
                    .await
                    .map_err(|e| Failure::from_sdk(SERVICE, e))?;
                let total_and_range = out.content_range().and_then(parse_content_range);
                let meta = ObjectMeta {
                    key: String::new(),
                    size: size_of(out.content_length()),
                    e_tag: ETag::new(out.e_tag().unwrap_or_default()),
                    last_modified: to_system_time(out.last_modified()),
                    version: out.version_id().map(str::to_owned),
                    metadata: metadata_of(out.metadata()),
                };
                // Reading the body is part of the attempt: a connection lost mid-body is
                // re-asked (pinned to the same ETag by the caller when that matters).
                let bytes = out.body.collect().await.map_err(|e| {
                    Failure::own(
                        Answer::Transient,
                        AwsError::Transport {
                            service: SERVICE,
                            detail: format!("read the object body: {e}"),
                        },
                    )
                })?;
                Ok((meta, total_and_range, bytes.into_bytes()))
            }
        })
        .await;
        let (mut meta, total_and_range, mut bytes) = match r {
            Ok(v) => v,
            Err(f) => {
                return match f.answer {
                    Answer::NotModified => Ok(GetOutcome::NotModified),
                    Answer::PreconditionFailed => Ok(GetOutcome::PreconditionFailed),
                    Answer::InvalidRange => self.unsatisfiable(key, range).await,
                    _ => Err(f.into_store("get", key)),
                };
            }
        };
        meta.key = key.to_string();
        let served = match (total_and_range, &range) {
            (Some((served, total)), _) => {
                meta.size = total;
                served
            }
            // A range asked for but the whole object served: cut it here.
            (None, Some(r)) => {
                let size = bytes.len() as u64;
                meta.size = size;
                let start = r.start.min(size);
                let end = r.end.min(size);
                bytes = bytes.slice(
                    usize::try_from(start).unwrap_or(usize::MAX)
                        ..usize::try_from(end).unwrap_or(usize::MAX),
                );
                start..end
            }
            (None, None) => 0..bytes.len() as u64,
        };
        if let Some(inm) = if_none_match
            && inm.matches(&meta.e_tag)
        {
            return Ok(GetOutcome::NotModified);
        }
        Ok(GetOutcome::Found(GetResult {
            meta,
            range: served,
            bytes,
        }))
    }

    /// A 416: served as an empty read for an empty object (as the local store does), else a
    /// permanent error naming the size.
    async fn unsatisfiable(
        &self,
        key: &ObjectKey,
        range: Option<Range<u64>>,
    ) -> StoreResult<GetOutcome> {
        let r = range.unwrap_or(0..0);
        match self.head(key).await? {
            None => Err(StoreError::NotFound {
                what: "object",
                key: key.to_string(),
            }),
            Some(meta) if meta.size == 0 => Ok(GetOutcome::Found(GetResult {
                meta,
                range: 0..0,
                bytes: Bytes::new(),
            })),
            Some(meta) => Err(RangeError::NotSatisfiable {
                start: r.start,
                end: r.end,
                size: meta.size,
            }
            .into_store(key)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_content_range() {
        assert_eq!(parse_content_range("bytes 2-4/10"), Some((2..5, 10)));
        assert_eq!(parse_content_range("bytes 7-9/10"), Some((7..10, 10)));
        assert_eq!(parse_content_range("bytes */10"), None);
    }
}

//! The conditional write every cloud store sends the same way: the request repeated until the
//! provider's answer proves something, the refusal named by the write's mode, and the lost
//! answer told apart from a collision by the write's attempt token.
//!
//! A Create whose first attempt landed but whose answer was lost (a timeout, a reset
//! connection) is refused when it is sent again: the object in place is its own. Each
//! conditional write therefore carries an attempt token in the object's user metadata
//! ([`ATTEMPT_METADATA`]); a refusal that followed a possibly-applied attempt is settled by
//! reading the object back: its own token → `Written`, another's → the refusal stands.

use crate::{Answer, Attempted, Idempotency, RetryPolicy, run};
use std::collections::BTreeMap;
use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use tilegate_core::StoreResult;
use tilegate_core::etag::ETag;
use tilegate_core::object::{
    ATTEMPT_METADATA, CompletionMismatch, Differs, GetOutcome, ObjectMeta, ObjectStore, PartId,
    PutMode, PutOptions, PutOutcome, verify_completed,
};
use tilegate_core::{ConditionList, ObjectKey};
use tracing::{debug, info, warn};

/// What a conditional write came to, before the object's metadata is read back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision<T> {
    /// The storage engine applied the write; the provider's answer.
    Applied(T),
    /// A Create found an object in place. `resent`: an earlier attempt of this very write
    /// failed without an answer, so the object may be its own (see [`own_write`]).
    AlreadyPresent { resent: bool },
    /// An Update found another version (or none); `resent` as above.
    Superseded { resent: bool },
}

impl<T> Decision<T> {
    /// Whether this is a refusal that may have been caused by this write's own lost answer.
    pub fn maybe_own(&self) -> bool {
        matches!(
            self,
            Self::AlreadyPresent { resent: true } | Self::Superseded { resent: true }
        )
    }
}

/// Send one conditional write until the provider's answer proves something, and name it:
/// [`Answer::PreconditionFailed`] on Create → `AlreadyPresent`; on Update (or
/// [`Answer::NoSuchKey`] there: the version is gone) → `Superseded`; repeatable answers are
/// sent again as [`run`] decides; anything else → the last failure, for the caller to turn
/// into a classified error. Each backend classifies its own provider's codes into an
/// [`Answer`] first (Azure's 409 `BlobAlreadyExists` on a create is `PreconditionFailed`).
pub async fn conditional_write<T, E, F, Fut>(
    policy: &RetryPolicy,
    idempotency: Idempotency,
    mode: &PutMode,
    key: &str,
    mut send: F,
) -> Result<Decision<T>, E>
where
    E: Attempted,
    F: FnMut(u32) -> Fut,
    Fut: Future<Output = Result<T, E>>,
{
    // Whether an attempt so far ended without an answer (it may have landed), and that flag
    // as it stood when the latest attempt was sent.
    let lost = AtomicBool::new(false);
    let lost_before_last = AtomicBool::new(false);
    let r = run(policy, idempotency, "conditional write", key, |n| {
        lost_before_last.store(lost.load(Ordering::Relaxed), Ordering::Relaxed);
        let attempt = send(n);
        let lost = &lost;
        async move {
            let r = attempt.await;
            if let Err(f) = &r
                && f.answer() == Answer::Transient
            {
                lost.store(true, Ordering::Relaxed);
            }
            r
        }
    })
    .await;
    let resent = lost_before_last.load(Ordering::Relaxed);
    match r {
        Ok(v) => Ok(Decision::Applied(v)),
        Err(f) => match (mode, f.answer()) {
            (PutMode::Create, Answer::PreconditionFailed) => {
                Ok(Decision::AlreadyPresent { resent })
            }
            (PutMode::Update(_), Answer::PreconditionFailed | Answer::NoSuchKey) => {
                Ok(Decision::Superseded { resent })
            }
            _ => Err(f),
        },
    }
}

/// The metadata a conditional write sends, and its attempt token: the caller's own token
/// where it set one (a repair keeps its token across its own retries), else a fresh one.
pub fn stamp(opts: &PutOptions) -> (BTreeMap<String, String>, String) {
    let mut metadata = opts.metadata.clone();
    let token = metadata
        .entry(ATTEMPT_METADATA.to_owned())
        .or_insert_with(|| uuid::Uuid::new_v4().simple().to_string())
        .clone();
    (metadata, token)
}

/// The metadata a write in `opts.mode` sends, and its attempt token: the caller's own
/// metadata for an Overwrite (never refused, so it needs no token), else stamped by [`stamp`].
pub fn mode_metadata(opts: &PutOptions) -> (BTreeMap<String, String>, String) {
    let (stamped, token) = stamp(opts);
    match opts.mode {
        PutMode::Overwrite => (opts.metadata.clone(), token),
        PutMode::Create | PutMode::Update(_) => (stamped, token),
    }
}

/// [`verify_completed`] for the completion of multipart upload `upload_id` on `store` (named
/// `store_name` in logs): an object that is not what its parts make is withdrawn and answered
/// as an error, with a warning.
pub async fn verify_completion<S: ObjectStore + ?Sized>(
    store_name: &'static str,
    store: &S,
    (key, upload_id): (&ObjectKey, &str),
    parts: &[PartId],
    outcome: PutOutcome,
    also: impl FnOnce(&ObjectMeta) -> Result<(), Differs>,
) -> StoreResult<PutOutcome> {
    let checked = verify_completed(store, key, parts, outcome, also).await;
    if let Err(e) = &checked
        && let Some(m) = CompletionMismatch::of(e)
    {
        warn!(store = store_name, key = key.as_str(), upload_id, differs = %m.differs, withdrawn = m.withdrawn,
            "completed upload is not what its parts make; answered as an error, not written");
    }
    checked
}

/// The object read back after a refusal, if it is the write made with attempt token `token`.
pub fn own_write(current: Option<ObjectMeta>, token: &str) -> Option<ObjectMeta> {
    current.filter(|m| m.metadata.get(ATTEMPT_METADATA).map(String::as_str) == Some(token))
}

/// Settle a conditional write's decision into the contract's outcome, the same way on every
/// cloud store: a refusal that may have followed this write's own lost answer is read back
/// (`read_back`, a HEAD of the key) and is `Written` if the object in place carries `token`;
/// otherwise `Applied` becomes `Written` (its metadata by `applied`) and a refusal stands.
/// Every log line names `store`, the key and the outcome.
pub async fn settle<T, R>(
    store: &'static str,
    key: &str,
    operation: &'static str,
    decision: Decision<T>,
    token: &str,
    read_back: R,
    applied: impl AsyncFnOnce(T) -> StoreResult<ObjectMeta>,
) -> StoreResult<PutOutcome>
where
    R: Future<Output = StoreResult<Option<ObjectMeta>>>,
{
    if decision.maybe_own()
        && let Some(meta) = own_write(read_back.await?, token)
    {
        info!(
            store,
            key,
            outcome = "written",
            "{operation} refused on a resend, but the object in place is this write's own (its first answer was lost)"
        );
        return Ok(PutOutcome::Written(meta));
    }
    Ok(match decision {
        Decision::Applied(v) => {
            let meta = applied(v).await?;
            debug!(
                store,
                key,
                outcome = "written",
                size = meta.size,
                "{operation}"
            );
            PutOutcome::Written(meta)
        }
        Decision::AlreadyPresent { .. } => {
            info!(
                store,
                key,
                outcome = "already-present",
                "{operation} refused: an object is in place"
            );
            PutOutcome::AlreadyPresent
        }
        Decision::Superseded { .. } => {
            info!(
                store,
                key,
                outcome = "superseded",
                "{operation} refused: the version changed"
            );
            PutOutcome::Superseded
        }
    })
}

/// What a read's conditions say of the version `current`, evaluated by the store itself (a
/// list of tags the provider cannot take in one request, or a version read by a HEAD):
/// `Some(PreconditionFailed)` when `If-Match` fails, `Some(NotModified)` when `If-None-Match`
/// matches, `None` when the version may be read.
pub fn read_refusal(
    if_match: Option<&IfMatch>,
    if_none_match: Option<&IfNoneMatch>,
    current: &ETag,
) -> Option<GetOutcome> {
    if if_match.is_some_and(|c| !c.matches(current)) {
        return Some(GetOutcome::PreconditionFailed);
    }
    if if_none_match.is_some_and(|c| c.matches(current)) {
        return Some(GetOutcome::NotModified);
    }
    None
}

/// An `If-Match` list as a store that compares one tag per request can evaluate it: `*`, one
/// strong tag (sent as the precondition), several (resolved against a read of the current
/// version), or only weak tags (the strong comparison never matches).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IfMatch {
    Any,
    One(ETag),
    Many(Vec<ETag>),
    Never,
}

impl IfMatch {
    pub fn of(c: &ConditionList) -> Self {
        match c {
            ConditionList::Any => Self::Any,
            ConditionList::Tags(tags) => {
                let mut strong: Vec<ETag> = tags
                    .iter()
                    .filter(|t| !t.as_str().starts_with("W/"))
                    .cloned()
                    .collect();
                strong.dedup();
                match strong.len() {
                    0 => Self::Never,
                    1 => Self::One(strong.remove(0)),
                    _ => Self::Many(strong),
                }
            }
        }
    }

    pub fn matches(&self, current: &ETag) -> bool {
        match self {
            Self::Any => true,
            Self::One(t) => t.strong_eq(current),
            Self::Many(ts) => ts.iter().any(|t| t.strong_eq(current)),
            Self::Never => false,
        }
    }
}

/// An `If-None-Match` list. The weak comparison ignores `W/`, and the stores' tags are strong,
/// so each tag is kept in its strong form.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IfNoneMatch {
    Any,
    One(ETag),
    Many(Vec<ETag>),
}

impl IfNoneMatch {
    pub fn of(c: &ConditionList) -> Self {
        match c {
            ConditionList::Any => Self::Any,
            ConditionList::Tags(tags) => {
                let mut strong: Vec<ETag> = tags
                    .iter()
                    .map(|t| ETag::new(t.as_str().strip_prefix("W/").unwrap_or(t.as_str())))
                    .collect();
                strong.dedup();
                if strong.len() == 1 {
                    Self::One(strong.remove(0))
                } else {
                    Self::Many(strong)
                }
            }
        }
    }

    pub fn matches(&self, current: &ETag) -> bool {
        match self {
            Self::Any => true,
            Self::One(t) => t.weak_eq(current),
            Self::Many(ts) => ts.iter().any(|t| t.weak_eq(current)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;
    use tilegate_core::object::UpdateVersion;

    #[derive(Debug)]
    struct Failure(Answer);

    impl Attempted for Failure {
        fn answer(&self) -> Answer {
            self.0
        }
        fn retry_after(&self) -> Option<Duration> {
            None
        }
    }

    /// Drive `conditional_write` with scripted answers; `None` is a success.
    async fn scripted(
        mode: PutMode,
        idempotency: Idempotency,
        script: &[Option<Answer>],
    ) -> (Result<Decision<&'static str>, Failure>, u32) {
        let mut attempts = 0;
        let r = conditional_write(&RetryPolicy::immediate(5), idempotency, &mode, "k", |n| {
            attempts += 1;
            let answer = script[usize::try_from(n - 1).unwrap()];
            async move {
                match answer {
                    None => Ok("applied"),
                    Some(a) => Err(Failure(a)),
                }
            }
        })
        .await;
        (r, attempts)
    }

    const CONFLICT: Option<Answer> = Some(Answer::ConditionalConflict);
    const REFUSED: Option<Answer> = Some(Answer::PreconditionFailed);
    const LOST: Option<Answer> = Some(Answer::Transient);

    fn update() -> PutMode {
        PutMode::Update(UpdateVersion::etag(ETag::new("\"a\"")))
    }

    /// A 409 ConditionalRequestConflict is not proof of existence: the same conditional
    /// request is sent again, and only the final refusal makes it AlreadyPresent.
    #[tokio::test]
    async fn a_conflict_is_repeated_and_only_a_refusal_is_already_present() {
        let (r, n) = scripted(
            PutMode::Create,
            Idempotency::Idempotent,
            &[CONFLICT, CONFLICT, REFUSED],
        )
        .await;
        assert_eq!(r.unwrap(), Decision::AlreadyPresent { resent: false });
        assert_eq!(n, 3);
        let (r, n) = scripted(PutMode::Create, Idempotency::Idempotent, &[CONFLICT, None]).await;
        assert_eq!((r.unwrap(), n), (Decision::Applied("applied"), 2));
        let (r, n) = scripted(PutMode::Create, Idempotency::Idempotent, &[CONFLICT; 5]).await;
        assert_eq!(n, 5, "bounded");
        assert_eq!(r.unwrap_err().0, Answer::ConditionalConflict);
    }

    #[tokio::test]
    async fn an_update_refused_or_gone_is_superseded() {
        let (r, n) = scripted(update(), Idempotency::Idempotent, &[CONFLICT, REFUSED]).await;
        assert_eq!((r.unwrap(), n), (Decision::Superseded { resent: false }, 2));
        let (r, _) = scripted(
            update(),
            Idempotency::Idempotent,
            &[Some(Answer::NoSuchKey)],
        )
        .await;
        assert_eq!(r.unwrap(), Decision::Superseded { resent: false });
    }

    /// A refusal after an attempt that ended without an answer may be the write's own: it is
    /// marked for the read-back; one after a throttle or conflict (nothing applied) is not.
    #[tokio::test]
    async fn a_refusal_after_a_lost_answer_is_marked_for_the_read_back() {
        let (r, _) = scripted(PutMode::Create, Idempotency::Idempotent, &[LOST, REFUSED]).await;
        let d = r.unwrap();
        assert_eq!(d, Decision::AlreadyPresent { resent: true });
        assert!(d.maybe_own());
        let (r, _) = scripted(
            update(),
            Idempotency::Idempotent,
            &[LOST, Some(Answer::Throttled), REFUSED],
        )
        .await;
        assert_eq!(r.unwrap(), Decision::Superseded { resent: true });
        let (r, _) = scripted(
            PutMode::Create,
            Idempotency::Idempotent,
            &[Some(Answer::Throttled), CONFLICT, REFUSED],
        )
        .await;
        assert!(!r.unwrap().maybe_own());
    }

    /// On a multipart completion a 409 means "re-initiate the upload": a retryable error for
    /// the claim gate, not a repeat of the same completion.
    #[tokio::test]
    async fn a_completion_conflict_goes_back_to_the_caller() {
        let (r, n) = scripted(
            PutMode::Create,
            Idempotency::CompleteUpload,
            &[CONFLICT, None],
        )
        .await;
        assert_eq!(n, 1);
        assert_eq!(r.unwrap_err().0, Answer::ConditionalConflict);
        let (r, _) = scripted(
            PutMode::Create,
            Idempotency::CompleteUpload,
            &[Some(Answer::Throttled), REFUSED],
        )
        .await;
        assert_eq!(r.unwrap(), Decision::AlreadyPresent { resent: false });
    }

    #[tokio::test]
    async fn permanent_answers_end_at_once() {
        let (r, n) = scripted(
            PutMode::Create,
            Idempotency::Idempotent,
            &[Some(Answer::Permanent)],
        )
        .await;
        assert_eq!(n, 1);
        assert_eq!(r.unwrap_err().0, Answer::Permanent);
    }

    #[test]
    fn the_stamp_keeps_a_callers_token() {
        let (m, t) = stamp(&PutOptions::create());
        assert_eq!(m[ATTEMPT_METADATA], t);
        assert_eq!(t.len(), 32);
        let mut opts = PutOptions::create();
        opts.metadata.insert(ATTEMPT_METADATA.into(), "mine".into());
        opts.metadata.insert("x".into(), "y".into());
        let (m, t) = stamp(&opts);
        assert_eq!((t.as_str(), m.len()), ("mine", 2));
    }

    #[test]
    fn an_overwrite_sends_the_callers_metadata() {
        let mut opts = PutOptions::create();
        opts.metadata.insert("x".into(), "y".into());
        let (m, t) = mode_metadata(&opts);
        assert_eq!((m[ATTEMPT_METADATA].as_str(), m.len()), (t.as_str(), 2));
        opts.mode = PutMode::Overwrite;
        let (m, t) = mode_metadata(&opts);
        assert_eq!((m.len(), t.len()), (1, 32));
    }

    #[test]
    fn only_the_own_token_is_an_own_write() {
        let meta = |token: &str| ObjectMeta {
            key: "k".into(),
            size: 1,
            e_tag: ETag::new("\"e\""),
            last_modified: std::time::UNIX_EPOCH,
            version: None,
            metadata: [(ATTEMPT_METADATA.to_owned(), token.to_owned())].into(),
        };
        assert!(own_write(Some(meta("a")), "a").is_some());
        assert!(own_write(Some(meta("b")), "a").is_none());
        assert!(own_write(None, "a").is_none());
    }

    #[test]
    fn condition_lists_as_one_tag_per_request() {
        let a = ETag::new("\"a\"");
        let list = ConditionList::parse(r#"W/"a", "b""#).unwrap();
        assert_eq!(IfMatch::of(&list), IfMatch::One(ETag::new("\"b\"")));
        let weak = ConditionList::parse(r#"W/"a""#).unwrap();
        assert_eq!(IfMatch::of(&weak), IfMatch::Never);
        assert_eq!(IfNoneMatch::of(&weak), IfNoneMatch::One(a.clone()));
        assert!(IfNoneMatch::of(&list).matches(&a));
    }
}

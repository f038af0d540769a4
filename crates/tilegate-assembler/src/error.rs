//! Why assembly was refused or failed, with a reason code for scripts and whether a retry
//! may succeed.

use tilegate_core::Reason;
use tilegate_core::object::CompletionMismatch;
use tilegate_core::{ETag, JobId, StoreError, Window};

/// Why assembly was refused or failed.
#[derive(Debug, thiserror::Error)]
pub enum AssembleError {
    #[error("assemble job {0}: no such job")]
    UnknownJob(JobId),
    #[error("assemble job {job}: {have} of {want} windows are in the manifest; missing {}", shown(.missing))]
    Incomplete {
        job: JobId,
        have: u64,
        want: u64,
        missing: Vec<Window>,
    },
    #[error(
        "assemble job {job}: tile `{key}` of window {window} is {found} bytes, its manifest row says {recorded}"
    )]
    SizeMismatch {
        job: JobId,
        window: Window,
        key: String,
        recorded: u64,
        found: u64,
    },
    #[error(
        "assemble job {job}: tile `{key}` of window {window} has ETag {found}, its manifest row says {recorded}"
    )]
    ETagMismatch {
        job: JobId,
        window: Window,
        key: String,
        recorded: ETag,
        found: ETag,
    },
    #[error("assemble job {job}: build the scene COG")]
    Build {
        job: JobId,
        #[source]
        source: tilegate_cogwrite::AssembleError,
    },
    /// The object published at the scene key is not the scene laid out (the store kept other
    /// bytes than it was sent, or its own completion check refused them). Nothing was
    /// recorded and the claim was released; the object was deleted by its ETag unless
    /// `mismatch.withdrawn` says otherwise. Retryable when it was: assembling again publishes
    /// the scene afresh.
    #[error("assemble job {job}: publish the scene `{key}` as the {laid_out} bytes laid out")]
    PublishedMismatch {
        job: JobId,
        key: String,
        laid_out: u64,
        #[source]
        mismatch: CompletionMismatch,
    },
    /// Stopped before publishing (the caller's stop signal): the claim was released and any
    /// upload aborted; nothing was published.
    #[error("assemble job {job}: stopped before the scene was published; the claim was released")]
    Interrupted { job: JobId },
    /// A pyramid's tiles or archive could not be made from what its windows stored.
    #[error("assemble job {job}: build the pyramid: {what}")]
    Pyramid { job: JobId, what: String },
    #[error("assemble: storage")]
    Store(#[from] StoreError),
}

fn shown(missing: &[Window]) -> String {
    let mut s: Vec<String> = missing.iter().take(20).map(Window::to_string).collect();
    if missing.len() > 20 {
        s.push(format!("… ({} in all)", missing.len()));
    }
    s.join(" ")
}

impl AssembleError {
    /// A short name of the failure, for scripts.
    pub fn reason_code(&self) -> Reason {
        match self {
            Self::UnknownJob(_) => Reason::UnknownJob,
            Self::Incomplete { .. } => Reason::Incomplete,
            Self::SizeMismatch { .. } => Reason::ManifestSizeMismatch,
            Self::ETagMismatch { .. } => Reason::ManifestEtagMismatch,
            Self::Build { source, .. } => source.reason_code(),
            Self::PublishedMismatch { .. } => Reason::PublishedSceneMismatch,
            Self::Interrupted { .. } => Reason::Interrupted,
            Self::Pyramid { .. } => Reason::TileCorrupt,
            Self::Store(e) => Reason::storage(e.is_retryable()),
        }
    }

    /// Whether assembling again may succeed: a storage fault classified so, or a wrong scene
    /// that was withdrawn from its key.
    pub fn is_retryable(&self) -> bool {
        match self {
            Self::Store(e) => e.is_retryable(),
            Self::PublishedMismatch { mismatch, .. } => mismatch.withdrawn,
            Self::Interrupted { .. } => true,
            Self::UnknownJob(_)
            | Self::Incomplete { .. }
            | Self::SizeMismatch { .. }
            | Self::ETagMismatch { .. }
            | Self::Pyramid { .. }
            | Self::Build { .. } => false,
        }
    }
}

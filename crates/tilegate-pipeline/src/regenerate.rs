//! A scene regenerated as an attempt: the ledger's row first, then the assembler builds the scene
//! from the accepted tiles to the attempt's own key, then the worker's regeneration finishes it
//! (records and, if asked, publishes it) — two stages one after the other.

use bytes::Bytes;
use tilegate_core::Reason;
use tilegate_core::ledger::{AttemptOrder, AttemptState, Subject};
use tilegate_core::table::JobRecord;
use tilegate_core::{Backends, UnixMillis};
use tilegate_ledger::{LedgerError, attempt};
use tilegate_worker::regenerate::{RegenerateError, Regenerated, Request, finish};

/// Why a scene could not be regenerated.
#[derive(Debug, thiserror::Error)]
pub enum SceneError {
    #[error(transparent)]
    Regenerate(#[from] RegenerateError),
    #[error(transparent)]
    Assemble(#[from] tilegate_assembler::AssembleError),
    #[error(
        "regenerate the scene: its assembly ended `{0}` (another assembler holds the attempt, or \
         the lease lapsed); run the same attempt again with --attempt"
    )]
    NotBuilt(&'static str),
}

impl From<LedgerError> for SceneError {
    fn from(e: LedgerError) -> Self {
        Self::Regenerate(e.into())
    }
}

impl SceneError {
    /// A stable kebab-case name (the same names as dead-letter reasons).
    pub fn reason_code(&self) -> Reason {
        match self {
            Self::Regenerate(e) => e.reason_code(),
            Self::Assemble(e) => e.reason_code(),
            Self::NotBuilt(_) => Reason::SceneNotBuilt,
        }
    }
}

/// Assemble the job's scene again as a new attempt (`id`: continue that one): the row first,
/// then the scene built from the accepted tiles (through the window pointers) to the attempt's
/// key through the claim gate, recorded on the row and — if `accept` — published by moving the
/// scene's pointer. The deterministic scene and the job row are not touched.
pub async fn scene(
    b: &Backends,
    job: &JobRecord,
    req: Request,
    mut opts: tilegate_assembler::AssembleOptions,
    counters: &tilegate_core::metrics::Counters,
    now: impl Fn() -> UnixMillis,
) -> Result<Regenerated, SceneError> {
    let id = req.id.unwrap_or_else(attempt::new_id);
    let mut row = attempt::begin(
        b,
        job,
        Subject::Scene,
        id.clone(),
        req.retention,
        req.accept,
        now(),
    )
    .await?;
    if row.row.state == AttemptState::Uploading {
        opts.attempt = Some(tilegate_assembler::SceneAttempt {
            key: row.row.key.clone(),
            token: id.to_string(),
        });
        let report = tilegate_assembler::assemble(b, &job.job_id, &opts, counters).await?;
        let (Some(e_tag), Some(size)) = (report.scene_etag.clone(), report.scene_size) else {
            return Err(SceneError::NotBuilt(report.outcome.as_str()));
        };
        row = attempt::record(b, row, size, e_tag, now()).await?;
    }
    let order = AttemptOrder {
        id,
        accept: req.accept,
    };
    Ok(finish(b, row, &order, Bytes::new(), now()).await?)
}

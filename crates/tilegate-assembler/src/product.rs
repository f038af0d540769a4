//! A product tile's pointer moved onto its job's published COG (see
//! [`tilegate_core::product::TilePointer`]): once per input set, with a conditional write, only
//! forward. Done before the job row records the scene, so that a recorded product tile has
//! always had its pointer considered — an assembler that dies in between leaves a job the next
//! trigger (or the reconciler) assembles again, which moves it then.

use crate::AssembleError;
use bytes::Bytes;
use tilegate_core::object::{ObjectStoreExt as _, PutOutcome, UpdateVersion};
use tilegate_core::product::TilePointer;
use tilegate_core::recipe::Operation;
use tilegate_core::table::{JobRecord, OutputRef};
use tilegate_core::{Backends, StoreError};

/// What [`point`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pointed {
    /// The pointer now names this job (first, or moved from a smaller input set).
    Moved,
    /// It already names this job, or a set holding every scene of this one's.
    Kept,
}

/// Move `job`'s tile pointer onto `output`, if `job` is a product tile and its input set
/// holds every scene of the one the pointer names, and more. `None` for any other job.
pub async fn point(
    b: &Backends,
    job: &JobRecord,
    output: &OutputRef,
) -> Result<Option<Pointed>, AssembleError> {
    let Operation::Product(spec) = &job.recipe.operation else {
        return Ok(None);
    };
    let key = job.prefix.product_pointer_key(&spec.product, &spec.tile);
    let mine = TilePointer {
        job_id: job.job_id.clone(),
        key: output.key.clone(),
        e_tag: output.e_tag.clone(),
        size: output.size,
        inputs: spec.inputs.iter().map(|i| i.id.clone()).collect(),
        updated_at: tilegate_core::now_millis(),
    };
    let body = Bytes::from(serde_json::to_vec_pretty(&mine).expect("a pointer serializes"));
    for _ in 0..16 {
        // One read: its answer is both whether a pointer is there and the version judged.
        let found = match b.objects.get_bytes(&key).await {
            Ok(found) => found,
            Err(StoreError::NotFound { .. }) => {
                if let PutOutcome::Written(_) = b.objects.put_create(&key, body.clone()).await? {
                    tracing::info!(job_id = %job.job_id, tile = %spec.tile, "tile pointer set");
                    return Ok(Some(Pointed::Moved));
                }
                continue;
            }
            Err(e) => return Err(e.into()),
        };
        let current: TilePointer =
            serde_json::from_slice(&found.bytes).map_err(|e| StoreError::Corrupt {
                what: "product tile pointer",
                key: key.to_string(),
                detail: e.to_string(),
            })?;
        if current.job_id == job.job_id || !current.moves_to(&mine.inputs) {
            tracing::info!(job_id = %job.job_id, tile = %spec.tile, at = %current.job_id,
                "tile pointer kept: it names this job or a set holding this one's scenes");
            return Ok(Some(Pointed::Kept));
        }
        // The version read is the one judged, and the only one replaced.
        let version = UpdateVersion::from(&found.meta);
        if let PutOutcome::Written(_) = b.objects.put_update(&key, body.clone(), version).await? {
            tracing::info!(job_id = %job.job_id, tile = %spec.tile, from = %current.job_id,
                inputs = mine.inputs.len(), "tile pointer moved");
            return Ok(Some(Pointed::Moved));
        }
    }
    Err(StoreError::backend(
        "move a product tile's pointer",
        key.as_str(),
        tilegate_core::Retry::Retryable,
        "the pointer kept changing",
    )
    .into())
}

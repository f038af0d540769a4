//! Fetching a job's tiles for the scene: the accepted attempt or the manifest row of each
//! window, every tile checked against the size and ETag recorded for it.

use crate::AssembleError;
use futures::{StreamExt, TryStreamExt};
use tilegate_cogwrite::TileInput;
use tilegate_core::ObjectKey;
use tilegate_core::ledger::Subject;
use tilegate_core::object::ObjectStoreExt;
use tilegate_core::table::{JobRecord, OutputRef};
use tilegate_core::{Backends, ETag, Window};

/// Read every window's tile — the accepted attempt where the window's pointer names one,
/// else the tile its manifest row names — checking size and ETag against that row; the tiles
/// with their ETags, in the same order.
pub(crate) async fn fetch_tiles(
    b: &Backends,
    job: &JobRecord,
) -> Result<(Vec<TileInput>, Vec<ETag>), AssembleError> {
    let mut accepted: std::collections::HashMap<Window, OutputRef> = b
        .ledger
        .list_pointers(&job.job_id)
        .await?
        .into_iter()
        .filter_map(|p| match p.row.subject {
            Subject::Window(w) => Some((w, p.row.output)),
            Subject::Scene => None,
        })
        .collect();
    let wanted: Vec<(Window, OutputRef)> = b
        .manifest
        .list_entries(&job.job_id)
        .await?
        .into_iter()
        .map(|e| {
            let w = e.row.window;
            let out = accepted.remove(&w).unwrap_or(OutputRef {
                key: e.row.key,
                e_tag: e.row.e_tag,
                size: e.row.size,
            });
            (w, out)
        })
        .collect();
    futures::stream::iter(wanted)
        .map(|(window, want)| async move {
            let got = b.objects.get_bytes(&ObjectKey::checked(&want.key)?).await?;
            if got.meta.size != want.size {
                return Err(AssembleError::SizeMismatch {
                    job: job.job_id.clone(),
                    window,
                    key: want.key.clone(),
                    recorded: want.size,
                    found: got.meta.size,
                });
            }
            if got.meta.e_tag != want.e_tag {
                return Err(AssembleError::ETagMismatch {
                    job: job.job_id.clone(),
                    window,
                    key: want.key.clone(),
                    recorded: want.e_tag.clone(),
                    found: got.meta.e_tag,
                });
            }
            Ok((
                TileInput {
                    window,
                    bytes: got.bytes,
                },
                got.meta.e_tag,
            ))
        })
        .buffer_unordered(16)
        .try_collect::<Vec<_>>()
        .await
        .map(|v| v.into_iter().unzip())
}

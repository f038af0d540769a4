//! A pyramid window's tiles: the index its encode made (the window's output object) and the
//! images it lists, written create-if-absent before the index — a refused Create is a
//! duplicate's tile in place (a blob is shared by every tile with the same bytes).

use crate::handle::{Deltas, Failure};
use crate::pool::Shared;
use bytes::Bytes;
use futures::{StreamExt, TryStreamExt};
use tilegate_cog::PyramidTile;
use tilegate_core::Reason;
use tilegate_core::metrics as m;
use tilegate_core::object::{PutOptions, PutOutcome};
use tilegate_core::pyramid::{INDEX_VERSION, TileEntry, WindowTiles};
use tilegate_core::recipe::{Operation, PyramidSpec};
use tilegate_core::table::JobRecord;

/// A tile image waiting to be written.
pub(crate) struct Pending {
    entry: TileEntry,
    image: Bytes,
}

/// The window's index (its output object's bytes) and the images to write before it.
pub(crate) fn index(tiles: Vec<PyramidTile>) -> (Bytes, Vec<Pending>) {
    let mut entries = Vec::with_capacity(tiles.len());
    let mut pending = Vec::new();
    for t in tiles {
        let mut entry = TileEntry {
            z: t.tile.z,
            x: t.tile.x,
            y: t.tile.y,
            digest: None,
            size: 0,
        };
        if let Some(image) = t.image {
            entry.digest = Some(blake3::hash(&image).to_hex().to_string());
            entry.size = image.len() as u64;
            pending.push(Pending {
                entry: entry.clone(),
                image: Bytes::from(image),
            });
        }
        entries.push(entry);
    }
    let doc = WindowTiles {
        v: INDEX_VERSION,
        tiles: entries,
    };
    let bytes = serde_json::to_vec(&doc).expect("an index serializes");
    (Bytes::from(bytes), pending)
}

pub(crate) fn spec(job: &JobRecord) -> Option<&PyramidSpec> {
    match &job.recipe.operation {
        Operation::Pyramid(p) => Some(p),
        _ => None,
    }
}

/// Write each image as every object its layout asks for, create-if-absent, a few at a time;
/// identical blobs in one window are written once.
pub(crate) async fn write_tiles(
    shared: &Shared,
    job: &JobRecord,
    pending: Vec<Pending>,
    deltas: &mut Deltas,
) -> Result<(), Failure> {
    let Some(spec) = spec(job) else {
        return Ok(());
    };
    let mut seen = std::collections::HashSet::new();
    let mut writes = Vec::new();
    for p in pending {
        for key in p.entry.object_keys(&job.prefix, &job.job_id, spec) {
            if seen.insert(key.clone()) {
                writes.push((key, p.image.clone()));
            }
        }
    }
    let outcomes: Vec<bool> = futures::stream::iter(writes)
        .map(|(key, image)| async move {
            match shared
                .b
                .objects
                .put_opts(&key, image, PutOptions::create())
                .await?
            {
                PutOutcome::Written(_) => Ok(true),
                PutOutcome::AlreadyPresent => Ok(false),
                PutOutcome::Superseded => Err(Failure::permanent(
                    Reason::StorageRefused,
                    format!("the store answered a Create of `{key}` with Superseded"),
                )),
            }
        })
        .buffer_unordered(16)
        .try_collect()
        .await?;
    for written in outcomes {
        deltas.bump(
            shared,
            if written {
                m::PYRAMID_TILES_WRITTEN
            } else {
                m::PRECONDITION_FAILED
            },
        );
    }
    Ok(())
}

//! A pyramid window's tiles: the index its encode made (the window's output object) and the
//! images it lists, written create-if-absent before the index — a refused Create is a
//! duplicate's tile in place (a blob is shared by every tile with the same bytes).

use crate::handle::{Deltas, Failure};
use crate::pool::Shared;
use bytes::Bytes;
use tilegate_cog::PyramidTile;
use tilegate_core::metrics as m;
use tilegate_core::object::ObjectStoreExt as _;
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
        let entry = TileEntry::of(t.tile.z, t.tile.x, t.tile.y, t.image.as_deref());
        if let Some(image) = t.image {
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
    spec: &PyramidSpec,
    pending: Vec<Pending>,
    deltas: &mut Deltas,
) -> Result<(), Failure> {
    let writes = pending
        .into_iter()
        .flat_map(|p| {
            let keys = p.entry.object_keys(&job.prefix, &job.job_id, spec);
            keys.into_iter().map(move |k| (k, p.image.clone()))
        })
        .collect();
    let created = shared.b.objects.create_all(writes, 16).await?;
    deltas.add(shared, m::PYRAMID_TILES_WRITTEN, created.written);
    deltas.add(shared, m::PRECONDITION_FAILED, created.present);
    Ok(())
}

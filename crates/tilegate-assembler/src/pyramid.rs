//! A pyramid job's assembly: the zooms above its windows' top tiles, each parent made from its
//! stored children (nothing reads the source here), then one PMTiles archive of every tile.
//!
//! The windows made the base zoom and every parent whose children all lay in one window; their
//! indexes (each window's output, checked against its manifest row) list those tiles. A tile
//! of the pyramid that no index lists is made here, zoom by zoom upwards, from its children's
//! images — written create-if-absent like a window's, so a second assembler (or this one,
//! again after a crash) re-derives the same bytes and is refused.

use crate::AssembleError;
use bytes::Bytes;
use futures::{StreamExt, TryStreamExt};
use std::collections::HashMap;
use std::sync::Arc;
use tilegate_core::metrics::{self as m, Counters};
use tilegate_core::object::{ObjectStoreExt, PutOptions};
use tilegate_core::pyramid::{TileEntry, WindowTiles, valid_digest};
use tilegate_core::recipe::PyramidSpec;
use tilegate_core::table::JobRecord;
use tilegate_core::{Backends, ObjectKey};
use tilegate_pmtiles::{
    ArchiveBuilder, ArchiveOptions, ContentKey, Tile, TileData, TileMatrixSet, TileType,
    decode_png, encode_png,
};

/// Every tile of the pyramid, read from the windows' indexes and made above them.
pub(crate) struct Tiles {
    pub(crate) entries: HashMap<Tile, TileEntry>,
    /// Tiles made here: their images, so that the archive need not read them back.
    made: HashMap<String, Bytes>,
}

fn failed(job: &JobRecord, what: String) -> AssembleError {
    AssembleError::Pyramid {
        job: job.job_id.clone(),
        what,
    }
}

/// Read every window's index, then make each tile above them from its stored children.
pub(crate) async fn build_tree(
    b: &Backends,
    job: &JobRecord,
    spec: &PyramidSpec,
    counters: &Counters,
) -> Result<Tiles, AssembleError> {
    let (inputs, _) = crate::tiles::fetch_tiles(b, job).await?;
    let mut entries: HashMap<Tile, TileEntry> = HashMap::new();
    for input in inputs {
        let doc: WindowTiles = serde_json::from_slice(&input.bytes).map_err(|e| {
            failed(
                job,
                format!("window {}'s tile index is not JSON: {e}", input.window),
            )
        })?;
        for t in doc.tiles {
            if t.digest.as_deref().is_some_and(|d| !valid_digest(d)) {
                return Err(failed(
                    job,
                    format!("window {}'s index holds a bad digest", input.window),
                ));
            }
            entries.insert(Tile::new(t.z, t.x, t.y), t);
        }
    }
    let tms = TileMatrixSet::named(&spec.tms, spec.tms_document.as_deref())
        .map_err(|e| failed(job, e.to_string()))?;
    let levels = levels(&tms, spec).map_err(|e| failed(job, e))?;
    let encoding = tilegate_pmtiles::PixelEncoding::named(spec.encoding.map(|e| e.name()))
        .expect("every terrain encoding is named");
    let reduce = tilegate_pmtiles::Reduce::named(spec.overview().name())
        .expect("every overview resampling is named");
    let bands = spec.tile_bands(job.scene.bands);
    let size = spec.tile_size;
    let mut tiles = Tiles {
        entries,
        made: HashMap::new(),
    };
    // Decoded images of the zoom below, for the parents made from them.
    let mut below: HashMap<Tile, Arc<TileData>> = HashMap::new();
    for z in (spec.min_zoom..spec.max_zoom).rev() {
        let level = &levels[usize::from(z - spec.min_zoom)];
        let todo: Vec<Tile> = level
            .iter()
            .copied()
            .filter(|t| !tiles.entries.contains_key(t))
            .collect();
        let next = &levels[usize::from(z + 1 - spec.min_zoom)];
        // The children to read back: those written, not decoded already (the ones this
        // assembler made at the zoom below are).
        let wanted: Vec<(Tile, ObjectKey)> = todo
            .iter()
            .flat_map(|t| quad(*t))
            .filter(|c| next.contains(c) && !below.contains_key(c))
            .filter_map(|c| {
                let e = tiles.entries.get(&c)?;
                Some((c, e.object_key(&job.prefix, &job.job_id, spec)?))
            })
            .collect();
        let fetched: Vec<(Tile, Arc<TileData>)> = futures::stream::iter(wanted)
            .map(|(tile, key)| async move {
                let bytes = b.objects.get_bytes(&key).await?.bytes;
                let data = tokio::task::spawn_blocking(move || {
                    decode_png(&bytes, encoding, bands).map_err(|e| e.to_string())
                })
                .await
                .expect("decode task panicked")
                .map_err(|e| failed(job, format!("tile {tile} (`{key}`): {e}")))?;
                Ok::<_, AssembleError>((tile, Arc::new(data)))
            })
            .buffer_unordered(16)
            .try_collect()
            .await?;
        below.extend(fetched);
        let mut level_images: HashMap<Tile, Arc<TileData>> = HashMap::new();
        let made: Vec<(Tile, Arc<TileData>, Option<Vec<u8>>)> = {
            let jobs: Vec<_> = todo
                .iter()
                .map(|t| (*t, quad(*t).map(|c| below.get(&c).cloned())))
                .collect();
            tokio::task::spawn_blocking(move || {
                jobs.into_iter()
                    .map(|(t, kids)| {
                        let refs = [0, 1, 2, 3].map(|i| kids[i].as_deref());
                        let parent = TileData::mosaic(refs, size, bands).reduce(reduce, encoding);
                        let image = encode_png(&parent, encoding);
                        (t, Arc::new(parent), image)
                    })
                    .collect()
            })
            .await
            .expect("reduce task panicked")
        };
        let mut writes = Vec::new();
        for (t, data, image) in made {
            let entry = TileEntry::of(t.z, t.x, t.y, image.as_deref());
            if let Some(image) = image {
                let image = Bytes::from(image);
                for key in entry.object_keys(&job.prefix, &job.job_id, spec) {
                    tiles.made.insert(key.to_string(), image.clone());
                    writes.push((key, image.clone()));
                }
                level_images.insert(t, data);
            }
            tiles.entries.insert(t, entry);
        }
        // Create-if-absent: a refusal is another assembler's (or an earlier try's) image.
        let created = b.objects.create_all(writes, 16).await?;
        counters.add(m::PYRAMID_TILES_WRITTEN, created.written);
        counters.add(m::PRECONDITION_FAILED, created.present);
        // Tiles the windows made at this zoom are read back when their parents need them.
        below = level_images;
    }
    Ok(tiles)
}

/// A tile's four children, in [`TileData::mosaic`]'s order: top-left, top-right, bottom-left,
/// bottom-right.
fn quad(t: Tile) -> [Tile; 4] {
    let (z, x, y) = (t.z + 1, t.x * 2, t.y * 2);
    [(x, y), (x + 1, y), (x, y + 1), (x + 1, y + 1)].map(|(x, y)| Tile::new(z, x, y))
}

/// The tiles of each zoom, `min_zoom` first: the base range (whose columns may run past the
/// matrix's east edge, for a scene across the antimeridian) halved zoom by zoom, each tile
/// named by its column modulo its zoom's width — so that at the zooms where both sides of the
/// antimeridian meet in one tile, that tile is one parent of both.
fn levels(
    tms: &TileMatrixSet,
    spec: &PyramidSpec,
) -> Result<Vec<std::collections::BTreeSet<Tile>>, String> {
    let [min_x, min_y, max_x, max_y] = spec.base_range;
    let mut out = Vec::new();
    for z in spec.min_zoom..=spec.max_zoom {
        let shift = spec.max_zoom - z;
        let width = tms.matrix(z).map_err(|e| e.to_string())?.matrix_width;
        let mut level = std::collections::BTreeSet::new();
        for y in (min_y >> shift)..=(max_y >> shift) {
            for x in (min_x >> shift)..=(max_x >> shift) {
                level.insert(Tile::new(z, x % width, y));
            }
        }
        out.push(level);
    }
    Ok(out)
}

/// The PMTiles archive of every written tile, each distinct image once, read back from the
/// store where it was not made here and checked against its digest.
pub(crate) async fn archive(
    b: &Backends,
    job: &JobRecord,
    spec: &PyramidSpec,
    tiles: Tiles,
) -> Result<Vec<u8>, AssembleError> {
    let mut options = ArchiveOptions::new(TileType::Png);
    options.metadata = tilejson_fields(job, spec);
    let mut builder = ArchiveBuilder::new(options);
    let mut sources: HashMap<[u8; 32], ObjectKey> = HashMap::new();
    let mut written: Vec<&TileEntry> = tiles.entries.values().filter(|e| e.is_written()).collect();
    written.sort_by_key(|e| (e.z, e.y, e.x));
    for e in &written {
        let digest = e.digest.as_deref().expect("written tiles have digests");
        let mut d = [0u8; 32];
        for (i, byte) in d.iter_mut().enumerate() {
            *byte = u8::from_str_radix(&digest[2 * i..2 * i + 2], 16).expect("hex digits");
        }
        let length = u32::try_from(e.size).map_err(|_| failed(job, "a tile over 4 GiB".into()))?;
        builder
            .add(Tile::new(e.z, e.x, e.y), ContentKey { digest: d, length })
            .map_err(|err| failed(job, err.to_string()))?;
        sources.entry(d).or_insert_with(|| {
            e.object_key(&job.prefix, &job.job_id, spec)
                .expect("written")
        });
    }
    let layout = builder.finish().map_err(|e| failed(job, e.to_string()))?;
    let wanted: Vec<(usize, ObjectKey)> = layout
        .blobs
        .iter()
        .enumerate()
        .map(|(i, blob)| (i, sources[&blob.content.digest].clone()))
        .collect();
    let made = &tiles.made;
    let mut blobs: Vec<(usize, Bytes)> = futures::stream::iter(wanted)
        .map(|(i, key)| async move {
            if let Some(b) = made.get(key.as_str()) {
                return Ok::<_, AssembleError>((i, b.clone()));
            }
            Ok((i, b.objects.get_bytes(&key).await?.bytes))
        })
        .buffer_unordered(32)
        .try_collect()
        .await?;
    blobs.sort_by_key(|(i, _)| *i);
    let mut blobs = blobs.into_iter().map(|(_, b)| b);
    let mut out = Vec::with_capacity(layout.total_len() as usize);
    layout
        .write_to(&mut out, |_| {
            Ok(blobs.next().map(|b| b.to_vec()).unwrap_or_default())
        })
        .map_err(|e| failed(job, format!("a stored tile is not the one indexed: {e}")))?;
    Ok(out)
}

/// The pyramid's TileJSON 3.0 document (tile URLs relative to it: its `z/x/y` objects beside it,
/// or the archive's tiles where the layout has none), written create-if-absent: its bytes are
/// a function of the job alone.
pub(crate) async fn publish_tilejson(
    b: &Backends,
    job: &JobRecord,
    spec: &PyramidSpec,
) -> Result<(), AssembleError> {
    let bytes = tilejson_bytes(job, spec)?;
    let key = job.prefix.tilejson_key(&job.job_id);
    b.objects
        .put_opts(&key, Bytes::from(bytes), PutOptions::create())
        .await?;
    Ok(())
}

/// The TileJSON document's bytes: pretty JSON and a final newline.
pub(crate) fn tilejson_bytes(
    job: &JobRecord,
    spec: &PyramidSpec,
) -> Result<Vec<u8>, AssembleError> {
    let doc = tilejson(job, spec).map_err(|e| failed(job, e))?;
    let mut bytes = serde_json::to_vec_pretty(&doc).expect("JSON serializes");
    bytes.push(b'\n');
    Ok(bytes)
}

/// TileJSON 3.0 of a pyramid job.
pub fn tilejson(job: &JobRecord, spec: &PyramidSpec) -> Result<serde_json::Value, String> {
    let tms =
        TileMatrixSet::named(&spec.tms, spec.tms_document.as_deref()).map_err(|e| e.to_string())?;
    let [min_x, min_y, max_x, max_y] = spec.base_range;
    // Named modulo the width (a range across the antimeridian: then west > east).
    let width = tms
        .matrix(spec.max_zoom)
        .map_err(|e| e.to_string())?
        .matrix_width;
    let (min_x, max_x) = (min_x % width, max_x % width);
    let nw = tms
        .bounds(Tile::new(spec.max_zoom, min_x, min_y))
        .map_err(|e| e.to_string())?;
    let se = tms
        .bounds(Tile::new(spec.max_zoom, max_x, max_y))
        .map_err(|e| e.to_string())?;
    let bounds = [nw.min_x, se.min_y, se.max_x, nw.max_y];
    let center_lon = if bounds[0] <= bounds[2] {
        (bounds[0] + bounds[2]) / 2.0
    } else {
        // Across the antimeridian: the middle of west → 180 → east.
        let mid = (bounds[0] + bounds[2] + 360.0) / 2.0;
        if mid > 180.0 { mid - 360.0 } else { mid }
    };
    let ext = spec.tile_format.extension();
    let archive = job.prefix.pyramid_key(&job.job_id);
    let archive_file = archive.as_str().rsplit('/').next().unwrap_or_default();
    let tiles = if spec.layout.xyz() {
        format!("{{z}}/{{x}}/{{y}}.{ext}")
    } else {
        format!("pmtiles://../{archive_file}")
    };
    let mut doc = serde_json::json!({
        "tilejson": "3.0.0",
        "name": job.job_id.to_string(),
        "description": format!("{} web pyramid of {}", spec.tms,
            tilegate_core::redact::redact(&job.source.uri)),
        "tiles": [tiles],
        "scheme": "xyz",
        "minzoom": spec.min_zoom,
        "maxzoom": spec.max_zoom,
        "bounds": bounds,
        "center": [center_lon, (bounds[1] + bounds[3]) / 2.0, spec.min_zoom],
        "tileSize": spec.tile_size,
        "format": ext,
        "tilegate:pmtiles": format!("../{archive_file}"),
        "tilegate:tile_matrix_set": spec.tms,
        "tilegate:resampling": spec.resampling,
        "tilegate:overview_resampling": spec.overview().name(),
        "tilegate:base_range": spec.base_range,
    });
    if let Some(e) = spec.encoding {
        doc["encoding"] = e.name().into();
    }
    Ok(doc)
}

/// The archive's metadata: TileJSON's descriptive fields.
fn tilejson_fields(
    job: &JobRecord,
    spec: &PyramidSpec,
) -> serde_json::Map<String, serde_json::Value> {
    let mut m = serde_json::Map::new();
    m.insert("name".into(), job.job_id.to_string().into());
    m.insert(
        "description".into(),
        format!("{} of {}", spec.tms, job.source.uri).into(),
    );
    m.insert("format".into(), spec.tile_format.extension().into());
    m.insert("type".into(), "overlay".into());
    m.insert("tileMatrixSet".into(), spec.tms.clone().into());
    if let Some(e) = spec.encoding {
        m.insert("encoding".into(), e.name().into());
    }
    m
}

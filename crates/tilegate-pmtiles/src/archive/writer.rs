//! Plans a PMTiles v3 archive from tiles' addresses, lengths and digests, without their bytes.
//!
//! The archive's directories hold every tile's offset, so nothing of it can be written before
//! every tile is known. Planning therefore comes first and needs no tile bytes:
//!
//! 1. [`ArchiveBuilder::add`] takes each tile's z/x/y and [`ContentKey`] (BLAKE3 digest and
//!    length, known when the tile was stored), in any order. It keeps 16 bytes per tile and 40 per
//!    distinct content.
//! 2. [`ArchiveBuilder::finish`] sorts by tile ID, lays the distinct contents out in tile-ID order
//!    (clustered; each stored once), merges consecutive identical tiles into runs, and returns an
//!    [`ArchiveLayout`]: the archive's `prefix` (header, root directory, metadata, leaf
//!    directories — every byte before the tile data) and the [`Blob`]s, each distinct content's
//!    absolute offset in the archive, in ascending offset order with no gaps.
//! 3. The caller writes `prefix`, then each blob's bytes in order (one multipart upload: a part
//!    boundary may fall anywhere, since the offsets are final). [`ArchiveLayout::write_to`] does
//!    that into any `io::Write`, asking for one blob's bytes at a time and checking them
//!    against the plan.
//!
//! [`write_archive`] does all three in memory, for tests and small archives.

use std::collections::HashMap;
use std::collections::hash_map::Entry as MapEntry;
use std::io;

use super::directory::{self, Entry};
use super::header::{Compression, HEADER_LEN, Header, LngLatE7, ROOT_FETCH_LEN, TileType};
use super::{ArchiveError, tileid};
use crate::tms::{Bbox, Tile};

/// A tile's content as deduplication sees it: the BLAKE3 digest of its bytes and their length.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ContentKey {
    pub digest: [u8; 32],
    pub length: u32,
}

impl ContentKey {
    /// The key of some bytes. Panics past 4 GiB (no tile is that large; `add` refuses it first
    /// when given a length).
    pub fn of(bytes: &[u8]) -> ContentKey {
        ContentKey {
            digest: *blake3::hash(bytes).as_bytes(),
            length: u32::try_from(bytes.len()).expect("a tile is smaller than 4 GiB"),
        }
    }
}

/// The header fields and metadata the tiles do not determine.
#[derive(Clone, Debug)]
pub struct ArchiveOptions {
    pub tile_type: TileType,
    /// How the tile bytes are already compressed (`None` for PNG, WebP, JPEG).
    pub tile_compression: Compression,
    /// WGS84 (west, south, east, north); by default the union of the finest zoom's tiles' bounds.
    pub bounds: Option<Bbox>,
    /// (longitude, latitude, zoom); by default the middle of the bounds at the coarsest zoom.
    pub center: Option<(f64, f64, u8)>,
    /// The JSON metadata object (spec §5: `name`, `attribution`, `vector_layers`, …).
    pub metadata: serde_json::Map<String, serde_json::Value>,
}

impl ArchiveOptions {
    pub fn new(tile_type: TileType) -> ArchiveOptions {
        ArchiveOptions {
            tile_type,
            tile_compression: match tile_type {
                TileType::Mvt | TileType::Mlt => Compression::Gzip,
                TileType::Unknown => Compression::Unknown,
                _ => Compression::None,
            },
            bounds: None,
            center: None,
            metadata: serde_json::Map::new(),
        }
    }
}

/// One distinct content's place in the archive.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Blob {
    /// Absolute byte offset in the archive.
    pub offset: u64,
    pub content: ContentKey,
    /// The lowest-ID tile that carries it (any tile with this content has these bytes).
    pub first_tile: Tile,
}

/// A planned archive: every byte before the tile data, and where each content goes after it.
#[derive(Clone, Debug)]
pub struct ArchiveLayout {
    pub header: Header,
    /// Header, root directory, metadata and leaf directories: the archive's first
    /// `header.tile_data_offset` bytes.
    pub prefix: Vec<u8>,
    /// The tile data section, in order: each blob starts where the previous one ends, the first
    /// at `header.tile_data_offset`.
    pub blobs: Vec<Blob>,
}

impl ArchiveLayout {
    /// The archive's length in bytes.
    pub fn total_len(&self) -> u64 {
        self.header.tile_data_offset + self.header.tile_data_length
    }

    /// Writes the whole archive: the prefix, then each blob's bytes as `content` returns them
    /// (called once per blob, in order). Bytes whose length or digest differ from the plan's
    /// are refused (`InvalidData`, with [`ArchiveError::ContentMismatch`] inside). Returns the
    /// number of bytes written.
    pub fn write_to<W: io::Write>(
        &self,
        out: &mut W,
        mut content: impl FnMut(&Blob) -> io::Result<Vec<u8>>,
    ) -> io::Result<u64> {
        out.write_all(&self.prefix)?;
        let mut written = self.prefix.len() as u64;
        for blob in &self.blobs {
            let bytes = content(blob)?;
            if ContentKey::of_checked(&bytes) != Some(blob.content) {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    ArchiveError::ContentMismatch {
                        tile: blob.first_tile,
                    },
                ));
            }
            out.write_all(&bytes)?;
            written += bytes.len() as u64;
        }
        Ok(written)
    }
}

impl ContentKey {
    fn of_checked(bytes: &[u8]) -> Option<ContentKey> {
        u32::try_from(bytes.len())
            .ok()
            .map(|_| ContentKey::of(bytes))
    }
}

/// Collects tiles' addresses and content keys; [`finish`](Self::finish) plans the archive.
#[derive(Debug)]
pub struct ArchiveBuilder {
    options: ArchiveOptions,
    /// (tile ID, index into `contents`).
    tiles: Vec<(u64, u32)>,
    contents: Vec<ContentKey>,
    index: HashMap<ContentKey, u32>,
}

/// The root directory's budget: what is left of the first 16 KiB after the header.
const ROOT_BUDGET: usize = ROOT_FETCH_LEN - HEADER_LEN;

/// Entries per leaf directory to start from; doubled until the root fits (a leaf of 4096
/// entries is a few kilobytes compressed, one small read).
const FIRST_LEAF_SIZE: usize = 4096;

impl ArchiveBuilder {
    pub fn new(options: ArchiveOptions) -> ArchiveBuilder {
        ArchiveBuilder {
            options,
            tiles: Vec::new(),
            contents: Vec::new(),
            index: HashMap::new(),
        }
    }

    /// Adds a tile by its content key. Tiles may come in any order; a tile added twice is
    /// refused at [`finish`](Self::finish).
    pub fn add(&mut self, tile: Tile, content: ContentKey) -> Result<(), ArchiveError> {
        let id = tileid::zxy_to_tileid(tile.z, tile.x, tile.y)?;
        if content.length == 0 {
            return Err(ArchiveError::EmptyTile { tile });
        }
        let next = u32::try_from(self.contents.len()).expect("fewer than 2^32 distinct tiles");
        let index = match self.index.entry(content) {
            MapEntry::Occupied(e) => *e.get(),
            MapEntry::Vacant(e) => {
                self.contents.push(content);
                *e.insert(next)
            }
        };
        self.tiles.push((id, index));
        Ok(())
    }

    /// Adds a tile by its bytes (hashing them); returns the key to find the bytes by later.
    pub fn add_bytes(&mut self, tile: Tile, bytes: &[u8]) -> Result<ContentKey, ArchiveError> {
        if u32::try_from(bytes.len()).is_err() {
            return Err(ArchiveError::TileTooLarge {
                tile,
                length: bytes.len() as u64,
            });
        }
        let key = ContentKey::of(bytes);
        self.add(tile, key)?;
        Ok(key)
    }

    /// How many tiles were added.
    pub fn len(&self) -> usize {
        self.tiles.len()
    }

    pub fn is_empty(&self) -> bool {
        self.tiles.is_empty()
    }

    /// Plans the archive (see the module's documentation).
    pub fn finish(mut self) -> Result<ArchiveLayout, ArchiveError> {
        self.tiles.sort_unstable_by_key(|&(id, _)| id);
        if let Some(w) = self.tiles.windows(2).find(|w| w[0].0 == w[1].0) {
            let tile = tileid::tileid_to_zxy(w[0].0).expect("an ID made from a tile");
            return Err(ArchiveError::DuplicateTile { tile });
        }
        let (Some(&(first_id, _)), Some(&(last_id, _))) = (self.tiles.first(), self.tiles.last())
        else {
            return Err(ArchiveError::NoTiles);
        };

        // Contents in order of first use (clustered), runs of one content on consecutive IDs.
        let mut offsets = vec![u64::MAX; self.contents.len()];
        let mut blobs = Vec::with_capacity(self.contents.len());
        let mut data_len = 0u64;
        let mut entries: Vec<Entry> = Vec::new();
        let mut last_content = u32::MAX;
        for &(id, content) in &self.tiles {
            let key = self.contents[content as usize];
            let offset = &mut offsets[content as usize];
            if *offset == u64::MAX {
                *offset = data_len;
                blobs.push(Blob {
                    offset: data_len,
                    content: key,
                    first_tile: tileid::tileid_to_zxy(id).expect("an ID made from a tile"),
                });
                data_len += u64::from(key.length);
            }
            match entries.last_mut() {
                Some(e)
                    if content == last_content
                        && id == e.tile_id + u64::from(e.run_length)
                        && e.run_length < u32::MAX =>
                {
                    e.run_length += 1;
                }
                _ => entries.push(Entry {
                    tile_id: id,
                    offset: *offset,
                    length: key.length,
                    run_length: 1,
                }),
            }
            last_content = content;
        }

        let (root, leaves) = directories(&entries);
        let metadata =
            directory::gzip(&serde_json::to_vec(&self.options.metadata).expect("a JSON map"));

        let min_zoom = tileid::tileid_to_zxy(first_id)
            .expect("an ID made from a tile")
            .z;
        let max_zoom = tileid::tileid_to_zxy(last_id)
            .expect("an ID made from a tile")
            .z;
        let bounds = self
            .options
            .bounds
            .unwrap_or_else(|| zoom_bounds(&self.tiles, max_zoom));
        let (center_lon, center_lat, center_zoom) = self.options.center.unwrap_or((
            (bounds.min_x + bounds.max_x) / 2.0,
            (bounds.min_y + bounds.max_y) / 2.0,
            min_zoom,
        ));

        let root_offset = HEADER_LEN as u64;
        let metadata_offset = root_offset + root.len() as u64;
        let leaf_directories_offset = metadata_offset + metadata.len() as u64;
        let tile_data_offset = leaf_directories_offset + leaves.len() as u64;
        let header = Header {
            root_offset,
            root_length: root.len() as u64,
            metadata_offset,
            metadata_length: metadata.len() as u64,
            leaf_directories_offset,
            leaf_directories_length: leaves.len() as u64,
            tile_data_offset,
            tile_data_length: data_len,
            addressed_tiles: self.tiles.len() as u64,
            tile_entries: entries.len() as u64,
            tile_contents: blobs.len() as u64,
            clustered: true,
            internal_compression: Compression::Gzip,
            tile_compression: self.options.tile_compression,
            tile_type: self.options.tile_type,
            min_zoom,
            max_zoom,
            min_position: LngLatE7::from_degrees(bounds.min_x, bounds.min_y),
            max_position: LngLatE7::from_degrees(bounds.max_x, bounds.max_y),
            center_zoom,
            center_position: LngLatE7::from_degrees(center_lon, center_lat),
        };
        let mut prefix = Vec::with_capacity(tile_data_offset as usize);
        prefix.extend_from_slice(&header.to_bytes());
        prefix.extend_from_slice(&root);
        prefix.extend_from_slice(&metadata);
        prefix.extend_from_slice(&leaves);
        for blob in &mut blobs {
            blob.offset += tile_data_offset;
        }
        Ok(ArchiveLayout {
            header,
            prefix,
            blobs,
        })
    }
}

/// The compressed root directory and the leaf directories section: every entry in the root if
/// it fits the first 16 KiB, else leaves of `FIRST_LEAF_SIZE` entries (doubled until the root
/// of leaf pointers fits), one level deep.
fn directories(entries: &[Entry]) -> (Vec<u8>, Vec<u8>) {
    let root = directory::gzip(&directory::encode(entries));
    if root.len() <= ROOT_BUDGET {
        return (root, Vec::new());
    }
    let mut leaf_size = FIRST_LEAF_SIZE;
    loop {
        let mut leaves = Vec::new();
        let mut pointers = Vec::with_capacity(entries.len().div_ceil(leaf_size));
        for chunk in entries.chunks(leaf_size) {
            let leaf = directory::gzip(&directory::encode(chunk));
            pointers.push(Entry {
                tile_id: chunk[0].tile_id,
                offset: leaves.len() as u64,
                length: u32::try_from(leaf.len()).expect("a leaf is smaller than 4 GiB"),
                run_length: 0,
            });
            leaves.extend_from_slice(&leaf);
        }
        let root = directory::gzip(&directory::encode(&pointers));
        if root.len() <= ROOT_BUDGET {
            return (root, leaves);
        }
        leaf_size *= 2;
    }
}

/// The WGS84 bounds of the tiles at zoom `z` (XYZ tiles in Web Mercator, as PMTiles addresses).
fn zoom_bounds(tiles: &[(u64, u32)], z: u8) -> Bbox {
    let (mut x0, mut y0, mut x1, mut y1) = (u32::MAX, u32::MAX, 0, 0);
    for t in tiles
        .iter()
        .filter_map(|&(id, _)| tileid::tileid_to_zxy(id))
    {
        if t.z == z {
            (x0, y0, x1, y1) = (x0.min(t.x), y0.min(t.y), x1.max(t.x), y1.max(t.y));
        }
    }
    let n = f64::from(1u32 << z.min(31));
    let lon = |x: u32| f64::from(x) / n * 360.0 - 180.0;
    let lat = |y: u32| {
        (std::f64::consts::PI * (1.0 - 2.0 * f64::from(y) / n))
            .sinh()
            .atan()
            .to_degrees()
    };
    Bbox::new(lon(x0), lat(y1 + 1), lon(x1 + 1), lat(y0))
}

/// Writes a whole archive in memory from tiles and their bytes.
pub fn write_archive(
    tiles: impl IntoIterator<Item = (Tile, Vec<u8>)>,
    options: ArchiveOptions,
) -> Result<Vec<u8>, ArchiveError> {
    let mut builder = ArchiveBuilder::new(options);
    let mut bytes: HashMap<ContentKey, Vec<u8>> = HashMap::new();
    for (tile, data) in tiles {
        let key = builder.add_bytes(tile, &data)?;
        bytes.entry(key).or_insert(data);
    }
    let layout = builder.finish()?;
    let mut out = Vec::with_capacity(layout.total_len() as usize);
    layout
        .write_to(&mut out, |blob| {
            bytes
                .remove(&blob.content)
                .ok_or_else(|| io::Error::other("a planned blob has no bytes"))
        })
        .expect("writing to memory with the planned bytes");
    Ok(out)
}

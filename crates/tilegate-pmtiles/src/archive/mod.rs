//! PMTiles v3 (protomaps `spec/v3/spec.md`): Hilbert tile IDs, the header, directories, a
//! writer that plans an archive from tiles' sizes and digests alone (so their bytes can be copied
//! in later, part by part), and a reader to check what it wrote.

mod directory;
mod header;
mod reader;
mod tileid;
mod writer;

pub use directory::Entry;
pub use header::{Compression, HEADER_LEN, Header, LngLatE7, ROOT_FETCH_LEN, TileType};
pub use reader::{ArchiveReader, TileLocation, find_tile, read_header};
pub use tileid::{MAX_ZOOM, tileid_to_zxy, zxy_to_tileid};
pub use writer::{ArchiveBuilder, ArchiveLayout, ArchiveOptions, Blob, ContentKey, write_archive};

use crate::tms::Tile;

/// What the writer refuses and what the reader finds wrong.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ArchiveError {
    #[error("address tile {tile}: PMTiles tile IDs stop at zoom 31")]
    ZoomTooDeep { tile: Tile },
    #[error("address tile {tile}: x or y is outside its zoom")]
    TileOutsideZoom { tile: Tile },
    #[error("add tile {tile}: it was already added")]
    DuplicateTile { tile: Tile },
    #[error("add tile {tile}: a tile must have at least one byte")]
    EmptyTile { tile: Tile },
    #[error("add tile {tile}: {length} bytes (a directory length holds at most 2^32 - 1)")]
    TileTooLarge { tile: Tile, length: u64 },
    #[error("finish the archive: it has no tiles (a directory needs at least one entry)")]
    NoTiles,
    #[error("copy the blob of tile {tile}: its bytes are not the content the layout planned")]
    ContentMismatch { tile: Tile },
    #[error("read the archive: it does not start with the PMTiles magic number")]
    NotPmtiles,
    #[error("read the archive: version {version} (only version 3 is read)")]
    UnsupportedVersion { version: u8 },
    #[error("read the archive: internal compression {compression:?} (only gzip and none are read)")]
    UnsupportedCompression { compression: Compression },
    #[error("read the archive: {what}")]
    Corrupt { what: &'static str },
    #[error("read the archive's metadata")]
    Metadata(#[source] serde_json::Error),
}

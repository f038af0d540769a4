//! The pure parts of web pyramids: OGC tile matrix sets ([`tms`]) to address and bound tiles,
//! a pyramid's tree of tiles ([`pyramid`]: which children each parent waits for), and PMTiles
//! v3 archives ([`archive`]) planned from tiles' sizes and digests so that their bytes can be
//! copied in later. No I/O beyond `std::io::Write`, no GDAL, no runtime.

pub mod archive;
pub mod pyramid;
pub mod raster;
pub mod tms;

pub use archive::{
    ArchiveBuilder, ArchiveError, ArchiveLayout, ArchiveOptions, ArchiveReader, Blob, Compression,
    ContentKey, Header, TileType, find_tile, read_header, write_archive,
};
pub use pyramid::{Pyramid, PyramidError};
pub use raster::{ImageError, PixelEncoding, Reduce, TileData, decode_png, encode_png};
pub use tms::{Bbox, Tile, TileMatrixSet, TileRange, TmsError, ZoomStrategy};

//! The PMTiles v3 header (spec §3): 127 bytes, little-endian, at the start of the archive.

use super::ArchiveError;

/// The header's length in bytes.
pub const HEADER_LEN: usize = 127;

/// The most bytes the header and the compressed root directory may take together (spec §2, §4):
/// latency-optimised readers fetch this much first.
pub const ROOT_FETCH_LEN: usize = 16_384;

/// `Compression` (spec §3.3), for internal data and for tiles.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Compression {
    Unknown,
    None,
    Gzip,
    Brotli,
    Zstd,
}

impl Compression {
    pub fn code(self) -> u8 {
        match self {
            Compression::Unknown => 0,
            Compression::None => 1,
            Compression::Gzip => 2,
            Compression::Brotli => 3,
            Compression::Zstd => 4,
        }
    }

    pub fn from_code(code: u8) -> Option<Compression> {
        Some(match code {
            0 => Compression::Unknown,
            1 => Compression::None,
            2 => Compression::Gzip,
            3 => Compression::Brotli,
            4 => Compression::Zstd,
            _ => return None,
        })
    }
}

/// `Tile Type` (spec §3.2).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TileType {
    Unknown,
    Mvt,
    Png,
    Jpeg,
    Webp,
    Avif,
    /// MapLibre Vector Tile.
    Mlt,
}

impl TileType {
    pub fn code(self) -> u8 {
        match self {
            TileType::Unknown => 0,
            TileType::Mvt => 1,
            TileType::Png => 2,
            TileType::Jpeg => 3,
            TileType::Webp => 4,
            TileType::Avif => 5,
            TileType::Mlt => 6,
        }
    }

    pub fn from_code(code: u8) -> Option<TileType> {
        Some(match code {
            0 => TileType::Unknown,
            1 => TileType::Mvt,
            2 => TileType::Png,
            3 => TileType::Jpeg,
            4 => TileType::Webp,
            5 => TileType::Avif,
            6 => TileType::Mlt,
            _ => return None,
        })
    }
}

/// A position as the header stores it: degrees × 10^7 in a signed 32-bit integer (spec §3.4).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LngLatE7 {
    pub lon_e7: i32,
    pub lat_e7: i32,
}

impl LngLatE7 {
    /// Rounds degrees to the nearest 10^-7 (the spec multiplies and converts).
    pub fn from_degrees(lon: f64, lat: f64) -> LngLatE7 {
        let e7 = |v: f64| {
            (v * 1e7)
                .round()
                .clamp(f64::from(i32::MIN), f64::from(i32::MAX)) as i32
        };
        LngLatE7 {
            lon_e7: e7(lon),
            lat_e7: e7(lat),
        }
    }

    pub fn lon(self) -> f64 {
        f64::from(self.lon_e7) / 1e7
    }

    pub fn lat(self) -> f64 {
        f64::from(self.lat_e7) / 1e7
    }
}

/// Every header field (the magic number and version 3 are implied).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Header {
    pub root_offset: u64,
    pub root_length: u64,
    pub metadata_offset: u64,
    pub metadata_length: u64,
    pub leaf_directories_offset: u64,
    pub leaf_directories_length: u64,
    pub tile_data_offset: u64,
    pub tile_data_length: u64,
    /// Tiles before run-length encoding (0: unknown).
    pub addressed_tiles: u64,
    /// Entries with a run length > 0 (0: unknown).
    pub tile_entries: u64,
    /// Distinct blobs in the tile data section (0: unknown).
    pub tile_contents: u64,
    pub clustered: bool,
    pub internal_compression: Compression,
    pub tile_compression: Compression,
    pub tile_type: TileType,
    pub min_zoom: u8,
    pub max_zoom: u8,
    /// West, south.
    pub min_position: LngLatE7,
    /// East, north.
    pub max_position: LngLatE7,
    pub center_zoom: u8,
    pub center_position: LngLatE7,
}

const MAGIC: &[u8; 7] = b"PMTiles";

impl Header {
    pub fn to_bytes(&self) -> [u8; HEADER_LEN] {
        let mut b = Vec::with_capacity(HEADER_LEN);
        b.extend_from_slice(MAGIC);
        b.push(3);
        for v in [
            self.root_offset,
            self.root_length,
            self.metadata_offset,
            self.metadata_length,
            self.leaf_directories_offset,
            self.leaf_directories_length,
            self.tile_data_offset,
            self.tile_data_length,
            self.addressed_tiles,
            self.tile_entries,
            self.tile_contents,
        ] {
            b.extend_from_slice(&v.to_le_bytes());
        }
        b.extend_from_slice(&[
            u8::from(self.clustered),
            self.internal_compression.code(),
            self.tile_compression.code(),
            self.tile_type.code(),
            self.min_zoom,
            self.max_zoom,
        ]);
        // Each position: longitude first, then latitude (spec §3.4).
        let mut position = |p: LngLatE7| {
            b.extend_from_slice(&p.lon_e7.to_le_bytes());
            b.extend_from_slice(&p.lat_e7.to_le_bytes());
        };
        position(self.min_position);
        position(self.max_position);
        b.push(self.center_zoom);
        b.extend_from_slice(&self.center_position.lon_e7.to_le_bytes());
        b.extend_from_slice(&self.center_position.lat_e7.to_le_bytes());
        b.try_into()
            .expect("the header's fields add up to 127 bytes")
    }

    /// Reads the first 127 bytes of an archive.
    pub fn from_bytes(bytes: &[u8]) -> Result<Header, ArchiveError> {
        let b = bytes.get(..HEADER_LEN).ok_or(ArchiveError::Corrupt {
            what: "archive is shorter than its 127-byte header",
        })?;
        if &b[..7] != MAGIC {
            return Err(ArchiveError::NotPmtiles);
        }
        if b[7] != 3 {
            return Err(ArchiveError::UnsupportedVersion { version: b[7] });
        }
        let u64_at = |i: usize| u64::from_le_bytes(b[i..i + 8].try_into().expect("8 bytes"));
        let i32_at = |i: usize| i32::from_le_bytes(b[i..i + 4].try_into().expect("4 bytes"));
        let pos_at = |i: usize| LngLatE7 {
            lon_e7: i32_at(i),
            lat_e7: i32_at(i + 4),
        };
        let corrupt = |what| ArchiveError::Corrupt { what };
        Ok(Header {
            root_offset: u64_at(8),
            root_length: u64_at(16),
            metadata_offset: u64_at(24),
            metadata_length: u64_at(32),
            leaf_directories_offset: u64_at(40),
            leaf_directories_length: u64_at(48),
            tile_data_offset: u64_at(56),
            tile_data_length: u64_at(64),
            addressed_tiles: u64_at(72),
            tile_entries: u64_at(80),
            tile_contents: u64_at(88),
            clustered: b[96] == 1,
            internal_compression: Compression::from_code(b[97])
                .ok_or(corrupt("unknown internal compression"))?,
            tile_compression: Compression::from_code(b[98])
                .ok_or(corrupt("unknown tile compression"))?,
            tile_type: TileType::from_code(b[99]).ok_or(corrupt("unknown tile type"))?,
            min_zoom: b[100],
            max_zoom: b[101],
            min_position: pos_at(102),
            max_position: pos_at(110),
            center_zoom: b[118],
            center_position: pos_at(119),
        })
    }
}

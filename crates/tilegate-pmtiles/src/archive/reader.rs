//! Reads a PMTiles v3 archive held in memory: the header, the metadata, and a tile's place in
//! the data section through the root and leaf directories.

use super::directory::{self, Entry};
use super::header::{Compression, Header};
use super::{ArchiveError, tileid};

/// Where a tile's bytes are: an absolute byte range of the archive.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TileLocation {
    pub offset: u64,
    pub length: u64,
}

/// Reads the header at the start of `archive`.
pub fn read_header(archive: &[u8]) -> Result<Header, ArchiveError> {
    Header::from_bytes(archive)
}

/// Where z/x/y's bytes are in `archive`; `None` when the archive does not hold the tile.
pub fn find_tile(
    archive: &[u8],
    z: u8,
    x: u32,
    y: u32,
) -> Result<Option<TileLocation>, ArchiveError> {
    ArchiveReader::new(archive)?.find_tile(z, x, y)
}

/// How many directory levels below the root a lookup follows (the spec discourages more than one).
const MAX_LEAF_DEPTH: usize = 3;

/// An archive in memory, its header read.
#[derive(Clone, Debug)]
pub struct ArchiveReader<'a> {
    bytes: &'a [u8],
    header: Header,
}

impl<'a> ArchiveReader<'a> {
    pub fn new(bytes: &'a [u8]) -> Result<ArchiveReader<'a>, ArchiveError> {
        let header = Header::from_bytes(bytes)?;
        match header.internal_compression {
            Compression::Gzip | Compression::None => {}
            compression => return Err(ArchiveError::UnsupportedCompression { compression }),
        }
        Ok(ArchiveReader { bytes, header })
    }

    pub fn header(&self) -> &Header {
        &self.header
    }

    fn range(&self, offset: u64, length: u64) -> Result<&'a [u8], ArchiveError> {
        let end = offset.checked_add(length);
        end.filter(|&end| end <= self.bytes.len() as u64)
            .map(|end| &self.bytes[offset as usize..end as usize])
            .ok_or(ArchiveError::Corrupt {
                what: "a section or entry points past the end of the archive",
            })
    }

    fn inflate(&self, data: &[u8]) -> Result<Vec<u8>, ArchiveError> {
        match self.header.internal_compression {
            Compression::Gzip => directory::gunzip(data),
            _ => Ok(data.to_vec()),
        }
    }

    /// The JSON metadata object.
    pub fn metadata(&self) -> Result<serde_json::Value, ArchiveError> {
        let raw = self.range(self.header.metadata_offset, self.header.metadata_length)?;
        serde_json::from_slice(&self.inflate(raw)?).map_err(ArchiveError::Metadata)
    }

    fn directory(&self, offset: u64, length: u64) -> Result<Vec<Entry>, ArchiveError> {
        directory::decode(&self.inflate(self.range(offset, length)?)?)
    }

    /// The root directory's entries.
    pub fn root_directory(&self) -> Result<Vec<Entry>, ArchiveError> {
        self.directory(self.header.root_offset, self.header.root_length)
    }

    /// A leaf directory's entries, from its entry in the directory above (run length 0).
    pub fn leaf_directory(&self, entry: &Entry) -> Result<Vec<Entry>, ArchiveError> {
        let offset = self
            .header
            .leaf_directories_offset
            .checked_add(entry.offset)
            .ok_or(ArchiveError::Corrupt {
                what: "leaf directory offset overflows",
            })?;
        self.directory(offset, u64::from(entry.length))
    }

    /// Where z/x/y's bytes are; `None` when the archive does not hold the tile.
    pub fn find_tile(&self, z: u8, x: u32, y: u32) -> Result<Option<TileLocation>, ArchiveError> {
        let id = tileid::zxy_to_tileid(z, x, y)?;
        let mut entries = self.root_directory()?;
        for _ in 0..=MAX_LEAF_DEPTH {
            // The last entry starting at or before `id`.
            let i = entries.partition_point(|e| e.tile_id <= id);
            let Some(e) = i.checked_sub(1).map(|i| entries[i]) else {
                return Ok(None);
            };
            if e.run_length == 0 {
                entries = self.leaf_directory(&e)?;
                continue;
            }
            if id - e.tile_id >= u64::from(e.run_length) {
                return Ok(None);
            }
            let offset = self.header.tile_data_offset.checked_add(e.offset).ok_or(
                ArchiveError::Corrupt {
                    what: "tile offset overflows",
                },
            )?;
            return Ok(Some(TileLocation {
                offset,
                length: u64::from(e.length),
            }));
        }
        Err(ArchiveError::Corrupt {
            what: "leaf directories nest deeper than the reader follows",
        })
    }

    /// z/x/y's bytes; `None` when the archive does not hold the tile.
    pub fn tile(&self, z: u8, x: u32, y: u32) -> Result<Option<&'a [u8]>, ArchiveError> {
        match self.find_tile(z, x, y)? {
            Some(at) => self.range(at.offset, at.length).map(Some),
            None => Ok(None),
        }
    }

    /// Every tile entry (run length > 0) in tile-ID order, leaf directories flattened.
    pub fn tile_entries(&self) -> Result<Vec<Entry>, ArchiveError> {
        let mut out = Vec::new();
        self.collect(self.root_directory()?, 0, &mut out)?;
        Ok(out)
    }

    fn collect(
        &self,
        entries: Vec<Entry>,
        depth: usize,
        out: &mut Vec<Entry>,
    ) -> Result<(), ArchiveError> {
        for e in entries {
            if e.run_length > 0 {
                out.push(e);
            } else if depth >= MAX_LEAF_DEPTH {
                return Err(ArchiveError::Corrupt {
                    what: "leaf directories nest deeper than the reader follows",
                });
            } else {
                self.collect(self.leaf_directory(&e)?, depth + 1, out)?;
            }
        }
        Ok(())
    }
}

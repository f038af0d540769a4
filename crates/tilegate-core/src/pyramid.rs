//! What a pyramid window records: the tiles it made, each by its address and — when it has
//! valid pixels — the digest and size of its image. A window's output object is this index
//! (JSON); the tiles it lists were written before it, so an index in place means its tiles
//! are. The assembler reads the indexes to build the zooms above the windows and the archive.

use crate::JobId;
use crate::keys::{ObjectKey, Prefix};
use crate::recipe::{PyramidSpec, TileLayout};
use serde::{Deserialize, Serialize};

/// The index format version.
pub const INDEX_VERSION: u32 = 1;

/// One tile of a pyramid.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct TileEntry {
    pub z: u8,
    pub x: u32,
    pub y: u32,
    /// BLAKE3 of the image, 64 hex digits; absent for a tile with no valid pixel (not written).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub digest: Option<String>,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub size: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// A pyramid window's output: the tiles it made, base zoom first.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct WindowTiles {
    pub v: u32,
    pub tiles: Vec<TileEntry>,
}

impl TileEntry {
    /// The entry of tile `z/x/y` whose image is `image` (`None`: no valid pixel, not written).
    pub fn of(z: u8, x: u32, y: u32, image: Option<&[u8]>) -> TileEntry {
        TileEntry {
            z,
            x,
            y,
            digest: image.map(|i| blake3::hash(i).to_hex().to_string()),
            size: image.map_or(0, |i| i.len() as u64),
        }
    }

    /// Whether the tile was written (it has valid pixels).
    pub fn is_written(&self) -> bool {
        self.digest.is_some()
    }

    /// The object a reader fetches this tile's bytes from: its `z/x/y` object where the layout
    /// has them, else the blob its digest names. `None` for an empty tile.
    pub fn object_key(
        &self,
        prefix: &Prefix,
        job: &JobId,
        spec: &PyramidSpec,
    ) -> Option<ObjectKey> {
        let digest = self.digest.as_deref()?;
        let ext = spec.tile_format.extension();
        Some(if spec.layout.xyz() {
            prefix.xyz_key(job, self.z, self.x, self.y, ext)
        } else {
            prefix.pyramid_blob_key(job, digest, ext)
        })
    }

    /// Every object this tile is written as: its blob (an archive is built from blobs when the
    /// layout has no `z/x/y` objects) and its `z/x/y` object, as the layout asks.
    pub fn object_keys(&self, prefix: &Prefix, job: &JobId, spec: &PyramidSpec) -> Vec<ObjectKey> {
        let Some(digest) = self.digest.as_deref() else {
            return Vec::new();
        };
        let ext = spec.tile_format.extension();
        match spec.layout {
            TileLayout::Pmtiles => vec![prefix.pyramid_blob_key(job, digest, ext)],
            TileLayout::Xyz | TileLayout::Both => {
                vec![prefix.xyz_key(job, self.z, self.x, self.y, ext)]
            }
        }
    }
}

/// A digest's hex form, checked (it becomes part of a key).
pub fn valid_digest(d: &str) -> bool {
    d.len() == 64
        && d.bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

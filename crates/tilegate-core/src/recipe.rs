//! Recipes: what a worker does to a window, and how the tile is encoded.
//!
//! The recipe's fingerprint (operation, parameters, output format, [`FORMAT_VERSION`]) is part
//! of the job ID, so changing the recipe makes a new job instead of silently re-using old tiles.

use serde::{Deserialize, Serialize};
use std::fmt::Write as _;

/// tilegate's output-format version. Bump it whenever the bytes a recipe produces change.
pub const FORMAT_VERSION: u32 = 1;

/// The nodata value of the `ndvi` recipe's Float32 output.
pub const NDVI_NODATA: f64 = -9999.0;

/// The computation applied to a window.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Operation {
    /// Re-encode the window, optionally selecting bands (1-based, in output order).
    Copy {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        bands: Option<Vec<u32>>,
    },
    /// Normalised difference vegetation index `(nir - red) / (nir + red)` as Float32.
    Ndvi { red: u32, nir: u32 },
    /// Read nothing, encode nothing: each window commits a few placeholder bytes. Measures the
    /// orchestration alone (queue, source check, commit, manifest); its "tiles" are not
    /// TIFFs, so such a job cannot be assembled.
    Noop,
}

/// Tile compression.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum Compression {
    #[default]
    Deflate,
    Zstd,
    Lzw,
}

impl Compression {
    /// The GDAL creation-option value.
    pub fn gdal_name(self) -> &'static str {
        match self {
            Self::Deflate => "DEFLATE",
            Self::Zstd => "ZSTD",
            Self::Lzw => "LZW",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        match s.to_ascii_lowercase().as_str() {
            "deflate" => Some(Self::Deflate),
            "zstd" => Some(Self::Zstd),
            "lzw" => Some(Self::Lzw),
            _ => None,
        }
    }
}

/// A complete recipe: operation plus tiling and encoding.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Recipe {
    pub operation: Operation,
    #[serde(default)]
    pub compression: Compression,
    /// Window (and COG block) size in pixels.
    pub window: u32,
}

/// Why a recipe is unusable for a scene.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RecipeError {
    #[error("apply recipe: band {band} does not exist (the scene has {bands} bands)")]
    NoSuchBand { band: u32, bands: u32 },
    #[error("apply recipe: band list is empty")]
    NoBands,
}

impl Recipe {
    /// `copy` of every band, DEFLATE, 512-pixel windows.
    pub fn copy_all() -> Self {
        Self {
            operation: Operation::Copy { bands: None },
            compression: Compression::Deflate,
            window: crate::grid::DEFAULT_WINDOW_SIZE,
        }
    }

    /// The canonical fingerprint hashed into the job ID.
    pub fn fingerprint(&self) -> String {
        let mut s = format!("tilegate-format={FORMAT_VERSION};");
        match &self.operation {
            Operation::Copy { bands } => {
                s.push_str("op=copy;bands=");
                match bands {
                    None => s.push_str("all"),
                    Some(b) => {
                        let list: Vec<String> = b.iter().map(u32::to_string).collect();
                        s.push_str(&list.join(","));
                    }
                }
            }
            Operation::Ndvi { red, nir } => {
                let _ = write!(s, "op=ndvi;red={red};nir={nir}");
            }
            Operation::Noop => s.push_str("op=noop"),
        }
        let _ = write!(
            s,
            ";format=cog;compress={};window={}",
            self.compression.gdal_name(),
            self.window
        );
        s
    }

    /// The 1-based source bands this recipe reads, checked against the scene's band count.
    pub fn input_bands(&self, scene_bands: u32) -> Result<Vec<u32>, RecipeError> {
        let check = |b: u32| {
            if b == 0 || b > scene_bands {
                Err(RecipeError::NoSuchBand {
                    band: b,
                    bands: scene_bands,
                })
            } else {
                Ok(b)
            }
        };
        match &self.operation {
            Operation::Copy { bands: None } => Ok((1..=scene_bands).collect()),
            Operation::Copy { bands: Some(b) } if b.is_empty() => Err(RecipeError::NoBands),
            Operation::Copy { bands: Some(b) } => b.iter().map(|&b| check(b)).collect(),
            Operation::Ndvi { red, nir } => Ok(vec![check(*red)?, check(*nir)?]),
            Operation::Noop => Ok(Vec::new()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fingerprint_distinguishes_recipes() {
        let a = Recipe::copy_all();
        let mut b = a.clone();
        b.compression = Compression::Zstd;
        let mut c = a.clone();
        c.window = 256;
        let d = Recipe {
            operation: Operation::Ndvi { red: 3, nir: 4 },
            ..a.clone()
        };
        let fps: std::collections::BTreeSet<_> =
            [&a, &b, &c, &d].iter().map(|r| r.fingerprint()).collect();
        assert_eq!(fps.len(), 4);
        assert!(a.fingerprint().starts_with("tilegate-format=1;"));
    }

    #[test]
    fn band_checks() {
        let r = Recipe {
            operation: Operation::Ndvi { red: 3, nir: 5 },
            ..Recipe::copy_all()
        };
        assert_eq!(
            r.input_bands(4),
            Err(RecipeError::NoSuchBand { band: 5, bands: 4 })
        );
        assert_eq!(Recipe::copy_all().input_bands(3).unwrap(), vec![1, 2, 3]);
    }
}

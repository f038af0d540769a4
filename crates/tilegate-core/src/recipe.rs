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
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Operation {
    /// Re-encode the window, optionally selecting bands (1-based, in output order).
    Copy {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        bands: Option<Vec<u32>>,
    },
    /// Normalised difference vegetation index `(nir - red) / (nir + red)` as Float32.
    Ndvi { red: u32, nir: u32 },
    /// Reproject every band onto a target grid with GDAL's warper. The job's grid is the
    /// target grid; each window is warped from the source on its own.
    Warp(WarpSpec),
    /// Band math: `;`-separated expressions over `b1`, `b2`, … (see `tilegate-expr`), one
    /// output band each, of type `ot`, `nodata` wherever an input the expression reads is
    /// nodata, NaN or masked out, or the result is not finite.
    Expr {
        /// The program in its canonical text.
        expr: String,
        /// Output data type (GDAL name).
        ot: String,
        nodata: f64,
    },
    /// A recipe registered by the worker binary (see `tilegate_cog::recipes`): its name, the
    /// parameters given when planning, and the fingerprint it computed from them then.
    Custom {
        name: String,
        #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
        params: std::collections::BTreeMap<String, String>,
        fingerprint: String,
        /// The output the recipe declared for the job's source, filled in when planning.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        output: Option<OutputSpec>,
    },
    /// A web pyramid: the source warped onto a tile matrix set's base zoom, each window a block
    /// of base tiles cut into image tiles, every parent built from its stored children.
    Pyramid(PyramidSpec),
    /// One tile of a product: its input scenes warped onto the tile's grid and combined (see
    /// [`crate::product`]).
    Product(Box<crate::product::ProductSpec>),
    /// Read nothing, encode nothing: each window commits a few placeholder bytes. Measures the
    /// orchestration alone (queue, source check, commit, manifest); its "tiles" are not
    /// TIFFs, so such a job cannot be assembled.
    Noop,
}

/// What a recipe writes per window: `bands` bands of GDAL type `dtype` (integer types get the
/// values rounded half to even and clamped to the type's range), `nodata` declared on each.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct OutputSpec {
    pub bands: u32,
    pub dtype: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nodata: Option<f64>,
}

/// Where a `warp` job's output grid lies and how pixels are resampled onto it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct WarpSpec {
    /// The target CRS as given (`EPSG:3857`, a PROJ string, WKT).
    pub t_srs: String,
    /// Target resolution (x, y) in target CRS units; GDAL's suggestion when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tr: Option<[f64; 2]>,
    /// Align the grid's edges on multiples of the resolution (`gdalwarp -tap`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub tap: bool,
    /// Align the grid's edges on `origin + k × resolution` (a target grid given as origin and
    /// resolution; `tap` is the origin (0, 0)).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub origin: Option<[f64; 2]>,
    /// GDAL resampling name: near, bilinear, cubic, cubicspline, lanczos, average, mode, …
    pub resampling: String,
}

/// A web pyramid's recipe (see [`Operation::Pyramid`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct PyramidSpec {
    /// The tile matrix set's identifier: `WebMercatorQuad`, `WorldCRS84Quad`, or the `id` of
    /// `tms_document`.
    pub tms: String,
    /// An OGC TMS 2.0 JSON document, when the set is not one of the two built in.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tms_document: Option<String>,
    /// The top zoom (the fewest tiles); 255 or absent: the zoom where the scene is one tile.
    #[serde(default = "unset_zoom")]
    pub min_zoom: u8,
    /// The base zoom: the tiles warped from the source; 255 or absent: the zoom of the
    /// source's native resolution.
    #[serde(default = "unset_zoom")]
    pub max_zoom: u8,
    #[serde(default = "png")]
    pub tile_format: TileFormat,
    /// Elevation as RGB (a one-band source): what MapLibre's terrain reads.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub encoding: Option<TerrainEncoding>,
    /// GDAL resampling of the base zoom's warp (default `near`). `near` warps through the
    /// exact transformer (each tile equals `gdalwarp -et 0` of it); any other through GDAL's
    /// default approximation (`-et 0.125`, within GDAL's own tolerance of it).
    #[serde(default = "near")]
    pub resampling: String,
    /// How a parent is made from its four children's pixels; `None` until planned: `nearest`
    /// for a paletted source (its colours are categories), `average` otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub overview_resampling: Option<OverviewResampling>,
    /// Which objects the tiles are published as (default `pmtiles`).
    #[serde(default = "pmtiles_layout")]
    pub layout: TileLayout,
    /// Filled in when planning: the base zoom's tile at the job grid's top-left corner (a
    /// multiple of a window's tiles, so that every window's tiles share their ancestors up to
    /// the window's top tile) and the base zoom's tiles that meet the scene, inclusive
    /// `[min_x, min_y, max_x, max_y]`.
    #[serde(default)]
    pub base_origin: [u32; 2],
    #[serde(default)]
    pub base_range: [u32; 4],
    /// The tile edge in pixels (the set's tile width at the base zoom), filled in when planning.
    #[serde(default)]
    pub tile_size: u32,
    /// Filled in when planning: the source is one paletted band, whose tiles are its colours
    /// (RGB, transparent where the palette's alpha is 0 or the pixel is nodata).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub paletted: bool,
}

impl PyramidSpec {
    /// How parents are made (`average` where planning has not said).
    pub fn overview(&self) -> OverviewResampling {
        self.overview_resampling
            .unwrap_or(OverviewResampling::Average)
    }

    /// The values each tile pixel holds before encoding: one elevation, three colours of a
    /// palette, or the source's bands.
    pub fn tile_bands(&self, source_bands: u32) -> usize {
        if self.encoding.is_some() {
            1
        } else if self.paletted {
            3
        } else {
            source_bands as usize
        }
    }
}

fn unset_zoom() -> u8 {
    u8::MAX
}

fn png() -> TileFormat {
    TileFormat::Png
}

fn near() -> String {
    "near".to_owned()
}

fn pmtiles_layout() -> TileLayout {
    TileLayout::Pmtiles
}

/// The image format of a pyramid's tiles.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum TileFormat {
    /// PNG, 8 bits per sample, with an alpha channel where any pixel is nodata.
    Png,
}

impl TileFormat {
    pub fn extension(self) -> &'static str {
        match self {
            Self::Png => "png",
        }
    }

    pub fn media_type(self) -> &'static str {
        match self {
            Self::Png => "image/png",
        }
    }
}

/// Elevation packed into RGB: Terrarium (`(R·256 + G + B/256) − 32768`, metres) or Mapbox
/// Terrain-RGB (`−10000 + (R·65536 + G·256 + B) × 0.1`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum TerrainEncoding {
    Terrarium,
    MapboxTerrainRgb,
}

impl TerrainEncoding {
    pub fn name(self) -> &'static str {
        match self {
            Self::Terrarium => "terrarium",
            Self::MapboxTerrainRgb => "mapbox-terrain-rgb",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "terrarium" => Some(Self::Terrarium),
            "mapbox-terrain-rgb" | "terrain-rgb" | "mapbox" => Some(Self::MapboxTerrainRgb),
            _ => None,
        }
    }
}

/// How a parent tile's pixel is made from its 2×2 children's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum OverviewResampling {
    /// The mean of the valid children (GDAL's `average`); nodata where none is valid.
    Average,
    /// The top-left child (GDAL's `nearest` on an even 2× reduction).
    Nearest,
}

impl OverviewResampling {
    pub fn name(self) -> &'static str {
        match self {
            Self::Average => "average",
            Self::Nearest => "nearest",
        }
    }
}

/// Which objects a pyramid's tiles are published as.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum TileLayout {
    /// One PMTiles archive (each distinct tile stored once by its content).
    Pmtiles,
    /// A `z/x/y.EXT` object per tile.
    Xyz,
    Both,
}

impl TileLayout {
    pub fn name(self) -> &'static str {
        match self {
            Self::Pmtiles => "pmtiles",
            Self::Xyz => "xyz",
            Self::Both => "both",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "pmtiles" => Some(Self::Pmtiles),
            "xyz" => Some(Self::Xyz),
            "both" => Some(Self::Both),
            _ => None,
        }
    }

    pub fn xyz(self) -> bool {
        matches!(self, Self::Xyz | Self::Both)
    }

    pub fn pmtiles(self) -> bool {
        matches!(self, Self::Pmtiles | Self::Both)
    }
}

/// Base tiles on a pyramid window's side: a window is a block of 8 × 8 tiles, so that its
/// tiles' parents up to three zooms above are made where its pixels are.
pub const PYRAMID_WINDOW_TILES: u32 = 8;

/// The resampling methods the warper accepts (GDAL 3.6's `gdalwarp -r`).
pub const WARP_RESAMPLINGS: [&str; 14] = [
    "near",
    "bilinear",
    "cubic",
    "cubicspline",
    "lanczos",
    "average",
    "rms",
    "mode",
    "max",
    "min",
    "med",
    "q1",
    "q3",
    "sum",
];

/// Tile compression.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default, schemars::JsonSchema,
)]
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
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
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
    #[error(
        "apply recipe: band {band} does not exist (the scene has {bands} band(s), numbered from 1)"
    )]
    NoSuchBand { band: u32, bands: u32 },
    #[error("apply recipe: band list is empty")]
    NoBands,
    #[error("apply recipe: expression: {0}")]
    BadExpression(String),
    #[error("apply recipe: {0}")]
    Custom(String),
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
            Operation::Warp(w) => {
                let _ = write!(s, "op=warp;t_srs={};r={}", w.t_srs, w.resampling);
                if let Some([x, y]) = w.tr {
                    let _ = write!(s, ";tr={x},{y}");
                }
                if w.tap {
                    s.push_str(";tap");
                }
                if let Some([x, y]) = w.origin {
                    let _ = write!(s, ";origin={x},{y}");
                }
            }
            Operation::Expr { expr, ot, nodata } => {
                let _ = write!(s, "op=expr;expr={expr};ot={ot};nodata={nodata}");
            }
            Operation::Custom {
                name, fingerprint, ..
            } => {
                // The parameters are in the recipe's own fingerprint.
                let _ = write!(s, "op=custom;name={name};fingerprint={fingerprint}");
            }
            Operation::Pyramid(p) => {
                // The planned base origin and range follow from the rest and the source.
                let _ = write!(
                    s,
                    "op=pyramid;tms={};z={}..{};format={};r={};or={};layout={}",
                    p.tms,
                    p.min_zoom,
                    p.max_zoom,
                    p.tile_format.extension(),
                    p.resampling,
                    p.overview_resampling
                        .map_or("auto", OverviewResampling::name),
                    p.layout.name()
                );
                if let Some(doc) = &p.tms_document {
                    let _ = write!(s, ";tms_document={}", blake3::hash(doc.as_bytes()).to_hex());
                }
                if let Some(e) = p.encoding {
                    let _ = write!(s, ";encoding={}", e.name());
                }
            }
            Operation::Product(p) => s.push_str(&p.fingerprint()),
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

    /// What the recipe writes for a scene: band count, type and nodata (of the first band).
    pub fn output_spec(&self, scene: &crate::source::SceneMeta) -> OutputSpec {
        let same = |bands: u32| OutputSpec {
            bands,
            dtype: scene.dtype.clone(),
            nodata: scene.nodata,
        };
        match &self.operation {
            Operation::Ndvi { .. } => OutputSpec {
                bands: 1,
                dtype: "Float32".to_owned(),
                nodata: Some(NDVI_NODATA),
            },
            Operation::Copy { bands: Some(b) } => same(u32::try_from(b.len()).unwrap_or(u32::MAX)),
            // A composite's statistic is NaN where nothing was observed: said by the method,
            // since a row (JSON) cannot hold the NaN its scene was planned with.
            Operation::Product(p)
                if matches!(
                    p.method,
                    crate::product::Method::Composite { stat } if stat != crate::product::Stat::Count
                ) =>
            {
                OutputSpec {
                    bands: scene.bands,
                    dtype: scene.dtype.clone(),
                    nodata: Some(f64::NAN),
                }
            }
            // A product tile's scene is the tile's output already.
            Operation::Copy { bands: None }
            | Operation::Warp(_)
            | Operation::Product(_)
            | Operation::Noop => same(scene.bands),
            // Image tiles: 8-bit samples, nodata as transparency.
            Operation::Pyramid(p) => OutputSpec {
                bands: if p.encoding.is_some() || p.paletted {
                    3
                } else {
                    scene.bands
                },
                dtype: "Byte".to_owned(),
                nodata: None,
            },
            Operation::Expr { expr, ot, nodata } => OutputSpec {
                // The canonical text separates outputs with `;` and has no other `;`.
                bands: u32::try_from(expr.split(';').filter(|e| !e.trim().is_empty()).count())
                    .unwrap_or(u32::MAX),
                dtype: ot.clone(),
                nodata: Some(*nodata),
            },
            Operation::Custom { output, .. } => output.clone().unwrap_or_else(|| same(scene.bands)),
        }
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
            // Every band is warped; an expression's bands are checked when it is parsed (the
            // worker reads what the program names); a custom recipe reads every band.
            Operation::Warp(_)
            | Operation::Custom { .. }
            | Operation::Pyramid(_)
            | Operation::Product(_) => Ok((1..=scene_bands).collect()),
            Operation::Expr { .. } => Ok(Vec::new()),
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

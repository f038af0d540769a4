//! [`CogError`]: every failure of probing, reading, encoding and sample writing, with the
//! window's context, a retry classification and a stable kebab-case reason code.

use std::fmt;
pub use tilegate_cogwrite::GdalSaid;
use tilegate_core::Reason;
use tilegate_core::WindowRect;
use tilegate_core::recipe::RecipeError;

/// A window rectangle rendered as `x,y+WxH` in messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RectDisplay(pub WindowRect);

impl fmt::Display for RectDisplay {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let r = self.0;
        write!(f, "{},{}+{}x{}", r.x, r.y, r.width, r.height)
    }
}

/// A failure of this crate. `Display` is a lowercase fragment that reads after "failed to …";
/// the GDAL error, where there is one, is the [`std::error::Error::source`].
///
/// Classification ([`CogError::is_retryable`]): only faults that repeating may cure are
/// retryable — an open or read failure of a remote (`/vsi…`) source that is not proven
/// missing or corrupt. A missing file, a corrupt raster, a bad recipe, an unsupported type or
/// a failed encode of valid pixels are permanent.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CogError {
    /// The source does not exist.
    #[error("find source `{path}`")]
    Missing { path: String },
    /// GDAL identified the source as a format tilegate does not open from where the source
    /// lies: a VRT (which reads whatever files and URLs it names) anywhere but the operator's
    /// disk, or anything but a GeoTIFF from a remote store. See [`crate::SourceDrivers`].
    #[error(
        "open source `{path}`: GDAL identified it as `{driver}`, which is not allowed for a {origin} source"
    )]
    SourceFormatForbidden {
        path: String,
        /// GDAL's short name of the driver that recognised the source.
        driver: String,
        /// `local`, `remote` or `stacked` ([`crate::SourceDrivers::origin`]).
        origin: &'static str,
    },
    /// A VRT that reads a file's bytes as pixels (`VRTRawRasterBand`) — in the source itself
    /// or in a VRT it names — or that nests VRTs too deep to inspect: never allowed, whoever
    /// wrote the VRT.
    #[error("open source `{path}`: its VRT {feature}, which is not allowed for any source")]
    VrtForbidden {
        path: String,
        /// What the VRT does, e.g. "reads `/proc/self/environ` through a `VRTRawRasterBand`".
        feature: String,
    },
    /// The source exists but GDAL cannot open it as a raster (garbage, truncated header).
    #[error("open source `{path}` as a raster")]
    Corrupt {
        path: String,
        #[source]
        source: GdalSaid,
    },
    /// A local source opened but a window of it could not be decoded (truncated data).
    #[error("decode window {} of `{path}`", RectDisplay(*rect))]
    CorruptWindow {
        path: String,
        rect: WindowRect,
        #[source]
        source: GdalSaid,
    },
    /// A remote source failed to open for a reason not proven permanent (network, 5xx).
    #[error("open source `{path}`")]
    Open {
        path: String,
        #[source]
        source: GdalSaid,
    },
    /// A remote source failed while reading a window.
    #[error("read window {} of `{path}`", RectDisplay(*rect))]
    Read {
        path: String,
        rect: WindowRect,
        #[source]
        source: GdalSaid,
    },
    /// The window's pixels could not be encoded as a COG tile.
    #[error("encode window {} of `{path}` as a COG tile", RectDisplay(*rect))]
    Encode {
        path: String,
        rect: WindowRect,
        #[source]
        source: GdalSaid,
    },
    /// The source's pixel type is not one of the supported seven.
    #[error(
        "accept data type `{dtype}` (supported: Byte, UInt16, Int16, UInt32, Int32, Float32, Float64)"
    )]
    UnsupportedDtype { dtype: String },
    /// The source has zero width, height or bands.
    #[error("use zero-sized raster `{path}` ({width}x{height}, {bands} bands)")]
    EmptyRaster {
        path: String,
        width: u32,
        height: u32,
        bands: u32,
    },
    /// The source's georeferencing cannot be carried into a grid of tiles exactly.
    #[error("plan `{path}`: unsupported georeferencing: {reason}")]
    UnsupportedGeoreferencing { path: String, reason: String },
    /// The window does not lie inside the scene.
    #[error("read window {} outside `{path}` ({width}x{height})", RectDisplay(*rect))]
    WindowOutside {
        path: String,
        rect: WindowRect,
        width: u32,
        height: u32,
    },
    /// The window cannot be one tile block (too large, or a bad block size).
    #[error("tile window {} of `{path}`: {reason}", RectDisplay(*rect))]
    BadWindow {
        path: String,
        rect: WindowRect,
        reason: String,
    },
    /// The opened source differs from the planned [`tilegate_core::source::SceneMeta`].
    #[error("match source `{path}` to its plan: planned {planned}, found {found}")]
    SceneMismatch {
        path: String,
        planned: String,
        found: String,
    },
    /// The recipe does not fit the scene.
    #[error(transparent)]
    Recipe(#[from] RecipeError),
    /// GDAL's warper failed on a window.
    #[error("warp window {} of `{path}`", RectDisplay(*rect))]
    Warp {
        path: String,
        rect: WindowRect,
        #[source]
        source: GdalSaid,
    },
    /// A custom recipe this worker cannot run as planned (missing, or another version).
    #[error("run recipe `{name}`: {reason}")]
    RecipeMismatch { name: String, reason: String },
    /// A custom recipe returned an error for a window.
    #[error("run recipe `{name}` on window {}: {message}", RectDisplay(*rect))]
    RecipeFailed {
        name: String,
        rect: WindowRect,
        message: String,
    },
    /// A `warp` recipe's target grid cannot be made from the source.
    #[error("plan the warp of `{path}`: {reason}")]
    BadWarp { path: String, reason: String },
    /// Sample-scene options are unusable.
    #[error("generate a sample scene: {reason}")]
    BadSample { reason: String },
    /// Writing a raster file (a sample scene) failed.
    #[error("write raster `{path}`")]
    Write {
        path: String,
        #[source]
        source: GdalSaid,
    },
    /// Any other GDAL call, named by what it was doing.
    #[error("{operation}")]
    Gdal {
        operation: &'static str,
        #[source]
        source: GdalSaid,
    },
}

impl CogError {
    /// True if repeating the same request may succeed.
    pub fn is_retryable(&self) -> bool {
        matches!(self, Self::Open { .. } | Self::Read { .. })
    }

    /// A stable kebab-case name for counters, logs and dead-letter reasons.
    pub fn reason_code(&self) -> Reason {
        match self {
            Self::Missing { .. } => Reason::SourceMissing,
            Self::SourceFormatForbidden { .. } | Self::VrtForbidden { .. } => {
                Reason::SourceFormatForbidden
            }
            Self::Corrupt { .. } | Self::CorruptWindow { .. } => Reason::CorruptRaster,
            Self::Open { .. } => Reason::OpenFailed,
            Self::Read { .. } => Reason::ReadFailed,
            Self::Encode { .. } => Reason::EncodeFailed,
            Self::UnsupportedDtype { .. } => Reason::UnsupportedDtype,
            Self::EmptyRaster { .. } => Reason::ZeroSizedRaster,
            Self::UnsupportedGeoreferencing { .. } => Reason::UnsupportedGeoreferencing,
            Self::WindowOutside { .. } => Reason::WindowOutsideScene,
            Self::BadWindow { .. } => Reason::BadWindow,
            Self::SceneMismatch { .. } => Reason::SourceChanged,
            Self::Recipe(_) | Self::BadWarp { .. } => Reason::BadRecipe,
            Self::Warp { .. } => Reason::WarpFailed,
            Self::RecipeMismatch { .. } => Reason::RecipeMismatch,
            Self::RecipeFailed { .. } => Reason::RecipeFailed,
            Self::BadSample { .. } => Reason::BadSampleOptions,
            Self::Write { .. } => Reason::WriteFailed,
            Self::Gdal { .. } => Reason::GdalError,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_is_a_lowercase_fragment_without_the_source() {
        let rect = WindowRect {
            x: 512,
            y: 0,
            width: 488,
            height: 512,
        };
        let e = CogError::Read {
            path: "/vsis3/b/k.tif".into(),
            rect,
            source: GdalSaid(gdal::errors::GdalError::BadArgument("boom".into())),
        };
        assert_eq!(
            e.to_string(),
            "read window 512,0+488x512 of `/vsis3/b/k.tif`"
        );
        assert!(e.is_retryable());
        assert_eq!(e.reason_code(), "read-failed");
        let f = CogError::SourceFormatForbidden {
            path: "/vsicurl/http://h/evil.vrt".into(),
            driver: "VRT".into(),
            origin: "remote",
        };
        assert_eq!(
            f.to_string(),
            "open source `/vsicurl/http://h/evil.vrt`: GDAL identified it as `VRT`, which is not \
             allowed for a remote source"
        );
        assert!(!f.is_retryable());
        assert_eq!(f.reason_code(), "source-format-forbidden");
        let r = CogError::VrtForbidden {
            path: "/d/evil.vrt".into(),
            feature: "reads `/proc/self/environ` through a `VRTRawRasterBand`".into(),
        };
        assert_eq!(
            r.to_string(),
            "open source `/d/evil.vrt`: its VRT reads `/proc/self/environ` through a \
             `VRTRawRasterBand`, which is not allowed for any source"
        );
        assert!(!r.is_retryable());
        assert_eq!(r.reason_code(), "source-format-forbidden");
        let m = CogError::Missing { path: "x".into() };
        assert!(!m.is_retryable());
        assert_eq!(m.reason_code(), "source-missing");
    }
}

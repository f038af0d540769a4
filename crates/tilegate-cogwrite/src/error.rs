//! [`AssembleError`]: why a scene COG could not be assembled, naming the window at fault,
//! with a stable kebab-case [`reason_code`](AssembleError::reason_code).

use gdal::errors::GdalError;
use std::fmt;
use tilegate_core::Reason;
use tilegate_core::Window;

/// A GDAL failure as a person reads it: the driver's own message (`not recognized as being in
/// a supported file format`), never GDAL's framing of it (`CPL error class: '3', error
/// number: '4', error msg: …`). The error itself is kept ([`GdalSaid::error`]).
#[derive(Debug)]
pub struct GdalSaid(pub GdalError);

impl GdalSaid {
    /// GDAL's error as GDAL gave it.
    pub fn error(&self) -> &GdalError {
        &self.0
    }
}

impl From<GdalError> for GdalSaid {
    fn from(e: GdalError) -> Self {
        Self(e)
    }
}

impl fmt::Display for GdalSaid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.0 {
            GdalError::CplError { msg, .. } if !msg.trim().is_empty() => {
                write!(f, "GDAL: {}", msg.trim())
            }
            GdalError::CplError { number, .. } => {
                write!(f, "GDAL failed without a message (error number {number})")
            }
            other => write!(f, "GDAL: {other}"),
        }
    }
}

impl std::error::Error for GdalSaid {}

/// A failure to assemble. `Display` is a lowercase fragment that reads after "failed to …";
/// a GDAL error, where there is one, is the [`std::error::Error::source`].
///
/// Every variant is permanent: the same tiles give the same failure. Tiles that are valid but
/// cannot be block-copied (other block size, compression, byte order …) are not errors: they
/// take the GDAL fallback.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AssembleError {
    /// The spec contradicts itself (grid size vs scene size).
    #[error("assemble scene: {detail}")]
    BadSpec { detail: String },
    /// A tile's window lies outside the grid.
    #[error("place tile {window}: outside the {rows}×{cols} window grid")]
    OutsideGrid {
        window: Window,
        rows: u32,
        cols: u32,
    },
    /// Two tiles for one window.
    #[error("place tile {window}: more than one tile for this window")]
    DuplicateWindow { window: Window },
    /// The grid has windows without a tile; `window` is the first, `missing` the count.
    #[error("assemble scene: window {window} has no tile ({missing} windows missing)")]
    MissingWindow { window: Window, missing: u64 },
    /// A tile's bytes are not a TIFF at all.
    #[error("read tile {window}: not a TIFF file")]
    NotATiff { window: Window },
    /// A tile is a TIFF but its structure is broken (truncated, offsets beyond the end).
    #[error("read tile {window}: corrupt TIFF structure: {detail}")]
    CorruptTile { window: Window, detail: String },
    /// A tile is a valid TIFF that contradicts the scene (size, band count, data type): no
    /// assembly path can turn it into a correct scene.
    #[error("check tile {window}: {detail}")]
    TileMismatch { window: Window, detail: String },
    /// A tile's compressed block does not decode (while building overviews).
    #[error("decode tile {window}: {detail}")]
    CorruptBlock { window: Window, detail: String },
    /// An overview block could not be compressed (the codec failed: out of memory).
    #[error("encode overview block: {detail}")]
    EncodeOverview { detail: String },
    /// GDAL's COG driver wrote bytes this crate cannot read back as a TIFF.
    #[error("read back GDAL's scene COG: {detail}")]
    GdalOutput { detail: String },
    /// The GDAL fallback failed at `stage`.
    #[error("assemble scene with GDAL: {stage}")]
    Gdal {
        stage: String,
        #[source]
        source: GdalSaid,
    },
}

impl AssembleError {
    /// A stable kebab-case code for logs, metrics and dead-letter reasons.
    pub fn reason_code(&self) -> Reason {
        match self {
            Self::BadSpec { .. } => Reason::SceneSpecInvalid,
            Self::OutsideGrid { .. } => Reason::TileOutsideGrid,
            Self::DuplicateWindow { .. } => Reason::TileDuplicateWindow,
            Self::MissingWindow { .. } => Reason::TileMissingWindow,
            Self::NotATiff { .. } => Reason::TileNotATiff,
            Self::CorruptTile { .. } => Reason::TileCorrupt,
            Self::TileMismatch { .. } => Reason::TileMismatch,
            Self::CorruptBlock { .. } => Reason::TileBlockCorrupt,
            Self::EncodeOverview { .. } => Reason::OverviewEncodeFailed,
            Self::GdalOutput { .. } => Reason::GdalOutputUnreadable,
            Self::Gdal { .. } => Reason::GdalError,
        }
    }

    /// The window at fault, if one is.
    pub fn window(&self) -> Option<Window> {
        match self {
            Self::OutsideGrid { window, .. }
            | Self::DuplicateWindow { window }
            | Self::MissingWindow { window, .. }
            | Self::NotATiff { window }
            | Self::CorruptTile { window, .. }
            | Self::TileMismatch { window, .. }
            | Self::CorruptBlock { window, .. } => Some(*window),
            Self::BadSpec { .. }
            | Self::EncodeOverview { .. }
            | Self::GdalOutput { .. }
            | Self::Gdal { .. } => None,
        }
    }

    pub(crate) fn gdal(stage: impl Into<String>) -> impl FnOnce(GdalError) -> Self {
        let stage = stage.into();
        move |source| Self::Gdal {
            stage,
            source: GdalSaid(source),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_name_the_window() {
        let e = AssembleError::NotATiff {
            window: Window::new(3, 12),
        };
        assert_eq!(e.to_string(), "read tile 0003_0012: not a TIFF file");
        assert_eq!(e.reason_code(), "tile-not-a-tiff");
        assert_eq!(e.window(), Some(Window::new(3, 12)));
        let e = AssembleError::MissingWindow {
            window: Window::new(0, 1),
            missing: 2,
        };
        assert_eq!(
            e.to_string(),
            "assemble scene: window 0000_0001 has no tile (2 windows missing)"
        );
    }
}

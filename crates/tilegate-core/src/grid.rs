//! The regular window grid over a scene: windows are (row, col); the last row and column are
//! partial where the scene size is not a multiple of the window size.

use serde::{Deserialize, Serialize};
use std::fmt;

/// Default window (and COG block) size in pixels.
pub const DEFAULT_WINDOW_SIZE: u32 = 512;

/// A window's grid position.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Hash,
    PartialOrd,
    Ord,
    Serialize,
    Deserialize,
    schemars::JsonSchema,
)]
pub struct Window {
    pub row: u32,
    pub col: u32,
}

impl Window {
    pub fn new(row: u32, col: u32) -> Self {
        Self { row, col }
    }

    /// Parse the `ROW_COL` form used on the command line (`0003_0012` or `3_12`).
    pub fn parse(s: &str) -> Option<Self> {
        let (r, c) = s.split_once(['_', ','])?;
        Some(Self::new(r.trim().parse().ok()?, c.trim().parse().ok()?))
    }
}

impl fmt::Display for Window {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:04}_{:04}", self.row, self.col)
    }
}

/// A pixel rectangle in scene coordinates.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct WindowRect {
    pub x: u32,
    pub y: u32,
    pub width: u32,
    pub height: u32,
}

/// The grid of windows over a `width × height` scene.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Grid {
    pub width: u32,
    pub height: u32,
    pub window: u32,
}

/// Why a grid cannot be built.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GridError {
    #[error("build a grid over a zero-sized scene ({width}×{height})")]
    EmptyScene { width: u32, height: u32 },
    #[error("build a grid with window size {0}: must be a positive multiple of 16")]
    BadWindow(u32),
    #[error(
        "build a grid with window size {0}: at most {MAX_WINDOW} pixels (a window is one COG \
         block, read and encoded in memory at once)"
    )]
    WindowTooLarge(u32),
}

/// The largest window (and COG block) in pixels: a window is read and encoded in memory at
/// once, and 8192² samples of eight bytes are already 512 MiB per band.
pub const MAX_WINDOW: u32 = 8192;

impl Grid {
    /// A grid; the scene must be non-empty and the window a positive multiple of 16 (a TIFF
    /// tile dimension must be).
    pub fn new(width: u32, height: u32, window: u32) -> Result<Self, GridError> {
        if width == 0 || height == 0 {
            return Err(GridError::EmptyScene { width, height });
        }
        if window == 0 || !window.is_multiple_of(16) {
            return Err(GridError::BadWindow(window));
        }
        if window > MAX_WINDOW {
            return Err(GridError::WindowTooLarge(window));
        }
        Ok(Self {
            width,
            height,
            window,
        })
    }

    /// The window a `width × height` scene is tiled by when `window` is asked for: `window`,
    /// or — when it is larger than the scene — the scene's larger side rounded up to a
    /// multiple of 16, which covers it in one window just the same (a larger block would only
    /// be padding, allocated and encoded for nothing).
    pub fn fitted_window(width: u32, height: u32, window: u32) -> u32 {
        let scene = width.max(height).div_ceil(16).saturating_mul(16);
        if window.is_multiple_of(16) && scene > 0 {
            window.min(scene)
        } else {
            window
        }
    }

    pub fn rows(&self) -> u32 {
        self.height.div_ceil(self.window)
    }

    pub fn cols(&self) -> u32 {
        self.width.div_ceil(self.window)
    }

    /// Number of windows.
    pub fn len(&self) -> u64 {
        u64::from(self.rows()) * u64::from(self.cols())
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// True if the window lies inside the grid.
    pub fn contains(&self, w: Window) -> bool {
        w.row < self.rows() && w.col < self.cols()
    }

    /// The pixel rectangle of a window, or `None` outside the grid.
    pub fn rect(&self, w: Window) -> Option<WindowRect> {
        if !self.contains(w) {
            return None;
        }
        let x = w.col * self.window;
        let y = w.row * self.window;
        Some(WindowRect {
            x,
            y,
            width: self.window.min(self.width - x),
            height: self.window.min(self.height - y),
        })
    }

    /// Every window, row-major.
    pub fn windows(&self) -> impl Iterator<Item = Window> + '_ {
        let cols = self.cols();
        (0..self.rows()).flat_map(move |r| (0..cols).map(move |c| Window::new(r, c)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn ten_k_scene_has_400_windows() {
        let g = Grid::new(10240, 10240, 512).unwrap();
        assert_eq!(g.len(), 400);
        let g = Grid::new(4096, 4096, 512).unwrap();
        assert_eq!(g.len(), 64);
    }

    #[test]
    fn partial_last_row_and_col() {
        let g = Grid::new(1000, 600, 512).unwrap();
        assert_eq!((g.rows(), g.cols()), (2, 2));
        assert_eq!(
            g.rect(Window::new(1, 1)).unwrap(),
            WindowRect {
                x: 512,
                y: 512,
                width: 488,
                height: 88
            }
        );
        assert!(g.rect(Window::new(2, 0)).is_none());
    }

    #[test]
    fn rejects_empty_and_bad_window() {
        assert!(Grid::new(0, 10, 512).is_err());
        assert!(Grid::new(10, 10, 0).is_err());
        assert!(Grid::new(10, 10, 100).is_err());
    }

    #[test]
    fn window_parse() {
        assert_eq!(Window::parse("0003_0012"), Some(Window::new(3, 12)));
        assert_eq!(Window::parse("3,12"), Some(Window::new(3, 12)));
        assert_eq!(Window::parse("3"), None);
        assert_eq!(Window::parse("-1_2"), None);
    }

    proptest! {
        /// Every pixel is covered by exactly one window.
        #[test]
        fn grid_covers_every_pixel_once(w in 1u32..700, h in 1u32..700, k in 1u32..8) {
            let g = Grid::new(w, h, k * 16).unwrap();
            let mut cover = vec![0u8; (w * h) as usize];
            for win in g.windows() {
                let r = g.rect(win).unwrap();
                prop_assert!(r.width > 0 && r.height > 0);
                for y in r.y..r.y + r.height {
                    for x in r.x..r.x + r.width {
                        cover[(y * w + x) as usize] += 1;
                    }
                }
            }
            prop_assert!(cover.iter().all(|&c| c == 1));
            prop_assert_eq!(g.windows().count() as u64, g.len());
        }
    }
}

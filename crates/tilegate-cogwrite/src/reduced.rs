//! The scene's first overview level, filled in by the encoders that wrote the tiles, for the
//! assembler of the same process (`tilegate run`): those windows need not be decoded again.
//!
//! Each encoder reduces its window 2× into a [`ReducedWindow`]; only once its own
//! create-if-absent write has succeeded does the worker place it, with the ETag that write
//! returned, into [`ReducedWindows`] — straight into the level's raster, which the assembler
//! then completes and encodes. The assembler keeps only windows whose ETag is the manifest
//! row's (and the fetched object's), so every reused pixel comes from that very tile; any other
//! window — written by another process, refused as present, of another sample type — is
//! decoded from its tile as before.

use crate::Resampling;
use crate::overview::{Sample, Validity, reduce_window};
use std::any::Any;
use std::collections::{HashMap, HashSet};
use std::sync::Mutex;
use tilegate_core::{ETag, Grid, JobId, Window};

/// One window's share of the first overview level as its encoder computed it: `width/2 ×
/// height/2` pixels, pixel-interleaved, of the tile's sample type.
pub struct ReducedWindow {
    samples: Box<dyn Any + Send>,
    width: usize,
    height: usize,
    spp: usize,
    /// Copies `samples` into a level raster of the same sample type.
    place: fn(&ReducedWindow, &mut Level, usize, usize) -> bool,
}

impl std::fmt::Debug for ReducedWindow {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReducedWindow")
            .field("width", &self.width)
            .field("height", &self.height)
            .field("spp", &self.spp)
            .finish_non_exhaustive()
    }
}

impl ReducedWindow {
    /// Reduce a `width × height` window (both even) of pixel-interleaved samples.
    pub(crate) fn of<T: Sample>(
        px: &[T],
        width: usize,
        height: usize,
        spp: usize,
        validity: Validity<T>,
        resampling: Resampling,
    ) -> Self {
        let (w, h) = (width / 2, height / 2);
        let mut out = vec![T::default(); w * h * spp];
        reduce_window(
            px,
            width,
            height,
            spp,
            validity,
            resampling,
            &mut out,
            w * spp,
        );
        Self {
            samples: Box::new(out),
            width: w,
            height: h,
            spp,
            place: place::<T>,
        }
    }
}

/// The level raster: `Vec<T>` of `width × height × spp` samples, made by the first window placed.
struct Level {
    samples: Option<Box<dyn Any + Send>>,
    width: usize,
    height: usize,
    spp: usize,
}

/// Copy `r` into the level at pixel (`x`, `y`); `false` if the sample type or band count differ.
fn place<T: Sample>(r: &ReducedWindow, level: &mut Level, x: usize, y: usize) -> bool {
    let spp = r.spp;
    let Some(src) = r.samples.downcast_ref::<Vec<T>>() else {
        return false;
    };
    if level.samples.is_none() {
        level.spp = spp;
        level.samples = Some(Box::new(vec![
            T::default();
            level.width * level.height * spp
        ]));
    }
    let stride = level.width * level.spp;
    match level
        .samples
        .as_mut()
        .and_then(|s| s.downcast_mut::<Vec<T>>())
    {
        Some(dst) if level.spp == spp => {
            let row = r.width * spp;
            for (j, line) in src.chunks_exact(row).enumerate() {
                dst[(y + j) * stride + x * spp..][..row].copy_from_slice(line);
            }
            true
        }
        _ => false,
    }
}

struct Inner {
    level: Level,
    /// The windows placed, with the ETag of the object each was made from.
    placed: HashMap<Window, ETag>,
}

/// The first overview level of one even-sized job, filled window by window.
pub struct ReducedWindows {
    job: JobId,
    resampling: Resampling,
    grid: Grid,
    inner: Mutex<Inner>,
}

impl std::fmt::Debug for ReducedWindows {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReducedWindows")
            .field("job", &self.job)
            .field("resampling", &self.resampling)
            .field("grid", &self.grid)
            .field("windows", &self.len())
            .finish()
    }
}

impl ReducedWindows {
    /// The first level of `job`'s scene (of `grid`), reduced with `resampling`. `None` when the scene's
    /// first level is not made of whole windows (odd width or height) or when, at
    /// `pixel_bytes` a pixel, it would take more than `budget` bytes.
    pub fn new(
        job: JobId,
        resampling: Resampling,
        grid: Grid,
        pixel_bytes: usize,
        budget: usize,
    ) -> Option<Self> {
        let (w, h) = (grid.width as usize / 2, grid.height as usize / 2);
        let even = grid.width.is_multiple_of(2) && grid.height.is_multiple_of(2);
        (even && w * h * pixel_bytes <= budget).then(|| Self {
            job,
            resampling,
            grid,
            inner: Mutex::new(Inner {
                level: Level {
                    samples: None,
                    width: w,
                    height: h,
                    spp: 0,
                },
                placed: HashMap::new(),
            }),
        })
    }

    /// The job whose windows belong here.
    pub fn job(&self) -> &JobId {
        &self.job
    }

    /// The resampling the encoders must reduce with.
    pub fn resampling(&self) -> Resampling {
        self.resampling
    }

    /// Place `window`'s reduction, made from the pixels of the object whose ETag is `e_tag`.
    /// A reduction that does not fit (another size, sample type or band count) is dropped: the
    /// assembler then decodes that tile.
    pub fn insert(&self, window: Window, e_tag: ETag, reduced: ReducedWindow) {
        let Some(rect) = self.grid.rect(window) else {
            return;
        };
        let (x, y) = (rect.x as usize / 2, rect.y as usize / 2);
        let mut inner = self.inner.lock().expect("reduced windows lock");
        let fits = (reduced.width, reduced.height)
            == (rect.width as usize / 2, rect.height as usize / 2)
            && x + reduced.width <= inner.level.width
            && y + reduced.height <= inner.level.height;
        if fits && (reduced.place)(&reduced, &mut inner.level, x, y) {
            inner.placed.insert(window, e_tag);
        }
    }

    /// How many windows are placed.
    pub fn len(&self) -> usize {
        self.inner
            .lock()
            .expect("reduced windows lock")
            .placed
            .len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Forget every placed window not listed with the ETag it was made from.
    pub fn retain_matching<'a>(&self, objects: impl IntoIterator<Item = (Window, &'a ETag)>) {
        let objects: HashMap<Window, &ETag> = objects.into_iter().collect();
        let mut inner = self.inner.lock().expect("reduced windows lock");
        inner
            .placed
            .retain(|w, e| objects.get(w).is_some_and(|o| e.strong_eq(o)));
    }

    /// Take the level raster (`Vec<T>` of `spp` samples per pixel) and the windows placed in
    /// it, if it holds that; the other windows' pixels are the caller's to fill.
    pub(crate) fn take<T: Sample>(&self, spp: usize) -> Option<(Vec<T>, HashSet<Window>)> {
        let mut inner = self.inner.lock().expect("reduced windows lock");
        let holds = inner.level.samples.as_ref()?.is::<Vec<T>>();
        if !holds || inner.level.spp != spp {
            return None;
        }
        let samples = inner.level.samples.take()?.downcast::<Vec<T>>().ok()?;
        let placed = inner.placed.drain().map(|(w, _)| w).collect();
        Some((*samples, placed))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reduction(values: &[u16]) -> ReducedWindow {
        // A 4×2 single-band window reduces to 2×1.
        ReducedWindow::of(
            values,
            4,
            2,
            1,
            Validity { nodata: None },
            Resampling::Average,
        )
    }

    fn job() -> JobId {
        JobId::derive("u", "e", "r", "p")
    }

    fn grid() -> Grid {
        // Two windows of 4×2 side by side: an 8×2 scene, a 4×1 first level.
        Grid {
            width: 8,
            height: 2,
            window: 4,
        }
    }

    #[test]
    fn only_windows_matching_their_objects_are_kept() {
        let r = ReducedWindows::new(job(), Resampling::Average, grid(), 2, 1 << 20).unwrap();
        let (a, b) = (Window::new(0, 0), Window::new(0, 1));
        r.insert(
            a,
            ETag::new("\"x\""),
            reduction(&[1, 3, 10, 10, 1, 3, 20, 20]),
        );
        r.insert(b, ETag::new("\"y\""), reduction(&[7; 8]));
        assert_eq!(r.len(), 2);
        // b's object is now another one: its pixels must not be used.
        r.retain_matching([(a, &ETag::new("\"x\"")), (b, &ETag::new("\"z\""))]);
        // The wrong sample type or band count is refused.
        assert!(r.take::<u8>(1).is_none());
        assert!(r.take::<u16>(3).is_none());
        let (level, placed) = r.take::<u16>(1).unwrap();
        assert_eq!(level, vec![2, 15, 7, 7]);
        assert_eq!(placed, HashSet::from([a]));
        assert!(r.is_empty());
    }

    #[test]
    fn odd_scenes_and_levels_over_the_budget_collect_nothing() {
        let odd = Grid { width: 9, ..grid() };
        assert!(ReducedWindows::new(job(), Resampling::Average, odd, 2, 1 << 20).is_none());
        // The level is 4×1 UInt16: 8 bytes.
        assert!(ReducedWindows::new(job(), Resampling::Average, grid(), 2, 7).is_none());
        assert!(ReducedWindows::new(job(), Resampling::Average, grid(), 2, 8).is_some());
    }

    #[test]
    fn a_reduction_of_the_wrong_size_is_dropped() {
        let r = ReducedWindows::new(job(), Resampling::Average, grid(), 2, 1 << 20).unwrap();
        let big = ReducedWindow::of(
            &[0u16; 32],
            8,
            4,
            1,
            Validity { nodata: None },
            Resampling::Average,
        );
        r.insert(Window::new(0, 0), ETag::new("\"x\""), big);
        assert!(r.is_empty());
    }
}

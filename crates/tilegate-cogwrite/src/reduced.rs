//! Windows reduced 2× by the encoder that wrote their tiles, kept for the assembler of the same
//! process (`tilegate run`): the first overview level of those windows need not be decoded from
//! the tiles again.
//!
//! A reduction is only ever used for the exact object it was computed for: the worker files it
//! under the ETag its own create-if-absent write returned, the assembler keeps only those whose
//! ETag is the manifest row's (and the fetched object's), and it must have the sample type and
//! size the tile's layout implies. Anything else — a tile another process wrote, one over the
//! memory budget, an odd-sized scene — is decoded from the tile as before.

use crate::Resampling;
use crate::overview::{Sample, Validity, reduce_window};
use std::any::Any;
use std::collections::HashMap;
use std::sync::Mutex;
use tilegate_core::{ETag, Window};

/// One window's first overview level as its encoder computed it: `width/2 × height/2` pixels,
/// pixel-interleaved, of the tile's sample type.
pub struct ReducedWindow {
    samples: Box<dyn Any + Send>,
    bytes: usize,
}

impl std::fmt::Debug for ReducedWindow {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReducedWindow")
            .field("bytes", &self.bytes)
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
        let out_stride = width / 2 * spp;
        let mut out = vec![T::default(); out_stride * (height / 2)];
        reduce_window(
            px, width, height, spp, validity, resampling, &mut out, out_stride,
        );
        Self {
            bytes: out.len() * T::BYTES,
            samples: Box::new(out),
        }
    }
}

struct Held {
    e_tag: ETag,
    reduced: ReducedWindow,
}

/// The reductions of one process's windows, by window; bounded by a byte budget.
pub struct ReducedWindows {
    resampling: Resampling,
    budget: usize,
    inner: Mutex<(usize, HashMap<Window, Held>)>,
}

impl std::fmt::Debug for ReducedWindows {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (bytes, map) = &*self.inner.lock().expect("reduced windows lock");
        f.debug_struct("ReducedWindows")
            .field("resampling", &self.resampling)
            .field("windows", &map.len())
            .field("bytes", bytes)
            .field("budget", &self.budget)
            .finish()
    }
}

impl ReducedWindows {
    /// Reductions made with `resampling`, holding at most `budget` bytes of samples.
    pub fn new(resampling: Resampling, budget: usize) -> Self {
        Self {
            resampling,
            budget,
            inner: Mutex::new((0, HashMap::new())),
        }
    }

    /// The resampling the encoders must reduce with.
    pub fn resampling(&self) -> Resampling {
        self.resampling
    }

    /// Keep `window`'s reduction, made from the pixels of the object whose ETag is `e_tag`.
    /// Beyond the budget it is dropped (the assembler then decodes that tile).
    pub fn insert(&self, window: Window, e_tag: ETag, reduced: ReducedWindow) {
        let mut guard = self.inner.lock().expect("reduced windows lock");
        let (bytes, map) = &mut *guard;
        let replaced = map.get(&window).map_or(0, |h| h.reduced.bytes);
        let after = *bytes - replaced + reduced.bytes;
        if after > self.budget {
            return;
        }
        *bytes = after;
        map.insert(window, Held { e_tag, reduced });
    }

    /// How many windows are held.
    pub fn len(&self) -> usize {
        self.inner.lock().expect("reduced windows lock").1.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Drop every reduction whose window is not listed with the ETag it was made for.
    pub fn retain_matching<'a>(&self, objects: impl IntoIterator<Item = (Window, &'a ETag)>) {
        let objects: HashMap<Window, &ETag> = objects.into_iter().collect();
        let mut guard = self.inner.lock().expect("reduced windows lock");
        let (bytes, map) = &mut *guard;
        map.retain(|w, h| objects.get(w).is_some_and(|e| h.e_tag.strong_eq(e)));
        *bytes = map.values().map(|h| h.reduced.bytes).sum();
    }

    /// Take `window`'s reduction if it holds `len` samples of type `T`.
    pub(crate) fn take<T: Sample>(&self, window: Window, len: usize) -> Option<Vec<T>> {
        let held = {
            let mut guard = self.inner.lock().expect("reduced windows lock");
            let (bytes, map) = &mut *guard;
            let held = map.remove(&window)?;
            *bytes -= held.reduced.bytes;
            held
        };
        let samples = held.reduced.samples.downcast::<Vec<T>>().ok()?;
        (samples.len() == len).then_some(*samples)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn window_of(values: &[u16]) -> ReducedWindow {
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

    #[test]
    fn reductions_are_kept_only_for_the_object_they_were_made_from() {
        let r = ReducedWindows::new(Resampling::Average, 1 << 20);
        let (a, b) = (Window::new(0, 0), Window::new(0, 1));
        r.insert(
            a,
            ETag::new("\"x\""),
            window_of(&[1, 3, 10, 10, 1, 3, 20, 20]),
        );
        r.insert(b, ETag::new("\"y\""), window_of(&[0; 8]));
        // b's object is now another one: its reduction must go.
        r.retain_matching([(a, &ETag::new("\"x\"")), (b, &ETag::new("\"z\""))]);
        assert_eq!(r.len(), 1);
        assert_eq!(r.take::<u16>(b, 2), None);
        // The wrong sample type or size is refused too, and a take empties the slot.
        assert_eq!(r.take::<u8>(a, 2), None);
        r.insert(
            a,
            ETag::new("\"x\""),
            window_of(&[1, 3, 10, 10, 1, 3, 20, 20]),
        );
        assert_eq!(r.take::<u16>(a, 3), None);
        r.insert(
            a,
            ETag::new("\"x\""),
            window_of(&[1, 3, 10, 10, 1, 3, 20, 20]),
        );
        assert_eq!(r.take::<u16>(a, 2), Some(vec![2, 15]));
        assert!(r.is_empty());
    }

    #[test]
    fn reductions_beyond_the_budget_are_dropped() {
        // Each 2×1 UInt16 reduction is 4 bytes.
        let r = ReducedWindows::new(Resampling::Average, 8);
        for col in 0..3 {
            r.insert(Window::new(0, col), ETag::new("\"e\""), window_of(&[0; 8]));
        }
        assert_eq!(r.len(), 2);
        // Replacing a held window does not count it twice: the new reduction is kept.
        r.insert(Window::new(0, 1), ETag::new("\"f\""), window_of(&[9; 8]));
        assert_eq!(r.len(), 2);
        assert_eq!(r.take::<u16>(Window::new(0, 1), 2), Some(vec![9, 9]));
        r.insert(Window::new(0, 2), ETag::new("\"e\""), window_of(&[0; 8]));
        assert_eq!(r.len(), 2);
    }
}

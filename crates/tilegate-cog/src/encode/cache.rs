//! Each thread's open source datasets, checked against the plan once per open, and the
//! process's shared handles of strip-organised sources.

use super::EncodeRequest;
use crate::GdalSaid;
use crate::dtype::Dtype;
use crate::error::CogError;
use crate::ffi;
use crate::probe;
use crate::semantics::{self, Semantics};
use gdal::Dataset;
use std::cell::RefCell;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use tilegate_core::recipe::Operation;
use tilegate_core::source::SceneMeta;

/// How many sources each thread keeps open (least recently used is closed first): a product
/// tile's window reads every scene that touches it.
const CACHE_CAPACITY: usize = 16;

/// A small per-thread cache by key, most recently used last; when it holds [`CACHE_CAPACITY`]
/// entries, the least recently used goes first.
pub(super) struct Recent<V> {
    entries: Vec<(String, V)>,
}

impl<V> Recent<V> {
    pub(super) const fn new() -> Self {
        Self {
            entries: Vec::new(),
        }
    }

    /// The entry for `key`, made by `make` if there is none; it becomes the most recent.
    pub(super) fn get_or_try_insert<E>(
        &mut self,
        key: &str,
        make: impl FnOnce() -> Result<V, E>,
    ) -> Result<&V, E> {
        match self.entries.iter().position(|(k, _)| k == key) {
            Some(i) => {
                let hit = self.entries.remove(i);
                self.entries.push(hit);
            }
            None => {
                let v = make()?;
                if self.entries.len() >= CACHE_CAPACITY {
                    self.entries.remove(0);
                }
                self.entries.push((key.to_owned(), v));
            }
        }
        Ok(&self.entries.last().expect("just pushed").1)
    }

    fn contains(&self, key: &str) -> bool {
        self.entries.iter().any(|(k, _)| k == key)
    }

    /// Remove the entry for `key` and hand it over.
    fn take(&mut self, key: &str) -> Option<V> {
        let i = self.entries.iter().position(|(k, _)| k == key)?;
        Some(self.entries.remove(i).1)
    }

    fn retain(&mut self, mut keep: impl FnMut(&str, &V) -> bool) {
        self.entries.retain(|(k, v)| keep(k, v));
    }

    pub(super) fn clear(&mut self) {
        self.entries.clear();
    }
}

/// How many times this process has opened a source for encoding (each thread opens each
/// source once while its cache key stays the same).
pub fn source_opens() -> u64 {
    OPENS.load(Ordering::Relaxed)
}

static OPENS: AtomicU64 = AtomicU64::new(0);

/// A source opened by one thread (cached by its path), with the facts checked against the plan.
pub(super) struct CachedSource {
    cache_key: String,
    pub(super) ds: Dataset,
    pub(super) dtype: Dtype,
    pub(super) nodata: Vec<Option<f64>>,
    pub(super) semantics: Semantics,
    /// The source's blocks span the scene's width and more than one window (strips): its
    /// reads go through the process's one shared handle, so that each strip is decoded once
    /// per process rather than once per thread whose windows touch it.
    shared_reads: bool,
}

/// A handle every thread of the process reads a strip-organised source through.
type SharedSource = Arc<std::sync::Mutex<CachedSource>>;

/// The shared handles, by path, each with its cache key (kept beside the handle so that a
/// lookup never waits for a read in progress on it).
static SHARED: std::sync::LazyLock<
    std::sync::Mutex<std::collections::HashMap<String, (String, SharedSource)>>,
> = std::sync::LazyLock::new(Default::default);

/// The process's shared handle of `req`'s source, if a thread has shared one for this cache key.
fn shared_source(req: &EncodeRequest) -> Option<SharedSource> {
    let map = SHARED.lock().expect("shared sources lock");
    map.get(&req.path)
        .filter(|(key, _)| *key == req.cache_key)
        .map(|(_, s)| s.clone())
}

/// Make `opened` the process's shared handle of `req`'s source — or, if another thread shared
/// one for the same cache key first, use that one and close this.
fn share(req: &EncodeRequest, opened: CachedSource) -> SharedSource {
    let mut map = SHARED.lock().expect("shared sources lock");
    match map.get(&req.path) {
        Some((key, s)) if *key == req.cache_key => s.clone(),
        _ => {
            let s = Arc::new(std::sync::Mutex::new(opened));
            map.insert(req.path.clone(), (req.cache_key.clone(), s.clone()));
            s
        }
    }
}

thread_local! {
    /// One dataset handle per source per thread: `Dataset` is `Send` but not `Sync`, and
    /// rayon's `map_init` runs per split rather than per thread.
    static SOURCES: RefCell<Recent<CachedSource>> = const { RefCell::new(Recent::new()) };
}

pub(super) fn with_source<T>(
    req: &EncodeRequest,
    f: impl FnOnce(&CachedSource) -> Result<T, CogError>,
) -> Result<T, CogError> {
    SOURCES.with(|cell| {
        let mut cache = cell.borrow_mut();
        cache.retain(|path, s| {
            let changed = path == req.path && s.cache_key != req.cache_key;
            if changed {
                tracing::debug!(path = %req.path, cache_key = %req.cache_key, "source changed, reopening");
            }
            !changed
        });
        if !cache.contains(&req.path)
            && let Some(shared) = shared_source(req)
        {
            drop(cache);
            return f(&shared.lock().expect("shared source lock"));
        }
        let local = cache.get_or_try_insert(&req.path, || open_checked(req))?;
        if !local.shared_reads {
            return f(local);
        }
        // A strip source: the handle this thread just opened becomes the process's shared one
        // (the thread keeps none of its own), so it is opened once, not once more per thread.
        let opened = cache.take(&req.path).expect("just opened");
        drop(cache);
        let shared = share(req, opened);
        let src = shared.lock().expect("shared source lock");
        f(&src)
    })
}

pub(super) fn evict(path: &str) {
    SOURCES.with(|cell| cell.borrow_mut().retain(|p, _| p != path));
    SHARED.lock().expect("shared sources lock").remove(path);
}

fn open_checked(req: &EncodeRequest) -> Result<CachedSource, CogError> {
    let ds = ffi::open_raster(&req.path)?;
    OPENS.fetch_add(1, Ordering::Relaxed);
    // A warp job's grid is the target's: only the source's bands and type are planned.
    let warped = matches!(
        req.recipe.operation,
        Operation::Warp(_) | Operation::Pyramid(_) | Operation::Product(_)
    );
    let found = probe::scene_meta_for(&ds, &req.path, warped)?;
    let plan = &req.scene;
    let size = |m: &SceneMeta| if warped { (0, 0) } else { (m.width, m.height) };
    if (size(&found), found.bands, found.dtype.as_str())
        != (size(plan), plan.bands, plan.dtype.as_str())
    {
        let show = |m: &SceneMeta| format!("{}x{} {}-band {}", m.width, m.height, m.bands, m.dtype);
        return Err(CogError::SceneMismatch {
            path: req.path.clone(),
            planned: show(plan),
            found: show(&found),
        });
    }
    let dtype = probe::dataset_dtype(&ds)?;
    let nodata = probe::band_nodata(&ds, &req.path)?;
    let semantics = semantics::read(&ds).map_err(|source| CogError::Corrupt {
        path: req.path.clone(),
        source: GdalSaid(source),
    })?;
    let (block_w, block_h) =
        ds.rasterband(1)
            .map(|b| b.block_size())
            .map_err(|source| CogError::Corrupt {
                path: req.path.clone(),
                source: GdalSaid(source),
            })?;
    let shared_reads = block_w as u64 >= u64::from(plan.width) && plan.width > req.recipe.window;
    if !warped {
        let row_bytes = u64::from(found.width) * u64::from(found.bands) * dtype.size() as u64;
        ffi::fit_block_cache(row_bytes, req.recipe.window, block_h as u32);
    }
    tracing::debug!(path = %req.path, cache_key = %req.cache_key, shared_reads, "opened source for this thread");
    Ok(CachedSource {
        cache_key: req.cache_key.clone(),
        ds,
        dtype,
        nodata,
        semantics,
        shared_reads,
    })
}

/// Close every source the calling thread holds open, and the process's shared handles.
pub(super) fn clear() {
    SOURCES.with(|s| s.borrow_mut().clear());
    SHARED.lock().expect("shared sources lock").clear();
}

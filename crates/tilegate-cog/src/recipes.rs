//! Recipes of one's own: a per-window function from input pixels to output pixels, registered
//! by the worker binary that runs it.
//!
//! A recipe implements [`Recipe`] in the user's own crate; its binary calls [`register`] and
//! then hands over to tilegate's command line (`tilegate_cli::main`), so planning, workers,
//! commits, the manifest and assembly are tilegate's own. The recipe's [`Recipe::fingerprint`]
//! is part of the job's identity: change what the function computes, change the fingerprint
//! (a version in it), and a plan makes a new job instead of mixing old and new tiles.
//!
//! A worker runs a window of a custom job only if its binary has the recipe registered under
//! the same name and computes the same fingerprint from the job's parameters; otherwise the
//! window is dead-lettered `recipe-mismatch` (an old worker must not fill a new job).
//!
//! ```no_run
//! use std::sync::Arc;
//! use tilegate_cog::recipes::{self, InputWindow, OutputSpec, Params, Recipe, SourceSpec};
//!
//! struct Invert;
//! impl Recipe for Invert {
//!     fn name(&self) -> &'static str { "invert" }
//!     fn fingerprint(&self, _: &Params) -> Result<String, String> { Ok("invert/v1".into()) }
//!     fn output(&self, _: &Params, src: &SourceSpec) -> Result<OutputSpec, String> {
//!         Ok(OutputSpec { bands: src.bands, dtype: "Float32".into(), nodata: Some(-1.0) })
//!     }
//!     fn apply(&self, _: &Params, input: &InputWindow<'_>) -> Result<Vec<Vec<f64>>, String> {
//!         Ok(input.bands.iter().map(|b| input.window_values(b).map(|v| -v).collect()).collect())
//!     }
//! }
//! recipes::register(Arc::new(Invert));
//! ```

use std::collections::BTreeMap;
use std::sync::{Arc, LazyLock, RwLock};

/// A recipe's parameters as given when planning (`--param NAME=VALUE`).
pub type Params = BTreeMap<String, String>;

/// What a recipe is told about the source when planning.
#[derive(Debug, Clone, PartialEq)]
pub struct SourceSpec {
    pub bands: u32,
    /// GDAL type name of the source's samples.
    pub dtype: String,
    /// Per band.
    pub nodata: Vec<Option<f64>>,
}

pub use tilegate_core::recipe::OutputSpec;

/// A window's input: every source band as `f64`, over the window grown by the recipe's
/// margin on each side (clipped at the scene's edges).
#[derive(Debug)]
pub struct InputWindow<'a> {
    /// Size of the region read (window plus margin).
    pub width: usize,
    pub height: usize,
    /// Where the window starts inside the region read.
    pub window_x: usize,
    pub window_y: usize,
    /// Size of the window itself: the output is `window_width × window_height` per band.
    pub window_width: usize,
    pub window_height: usize,
    /// One slice per source band, row-major, `width × height` samples.
    pub bands: Vec<&'a [f64]>,
    /// Per band.
    pub nodata: &'a [Option<f64>],
    /// The source's per-dataset mask over the region (0 = masked out), if it has one.
    pub mask: Option<&'a [u8]>,
}

impl InputWindow<'_> {
    /// The samples of `band` (one of [`InputWindow::bands`]) inside the window, row by row.
    pub fn window_values<'b>(&'b self, band: &'b [f64]) -> impl Iterator<Item = f64> + 'b {
        (self.window_y..self.window_y + self.window_height).flat_map(move |y| {
            let row = y * self.width;
            band[row + self.window_x..row + self.window_x + self.window_width]
                .iter()
                .copied()
        })
    }

    /// Whether the sample at region position `(x, y)` of band `b` (0-based) is data: not
    /// nodata, not NaN, not masked out.
    pub fn is_valid(&self, b: usize, x: usize, y: usize) -> bool {
        let i = y * self.width + x;
        let v = self.bands[b][i];
        !v.is_nan()
            && self.nodata.get(b).copied().flatten() != Some(v)
            && self.mask.is_none_or(|m| m[i] != 0)
    }
}

/// What a recipe says about itself ([`Recipe::describe`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RecipeHelp {
    /// What it makes, in one sentence.
    pub summary: &'static str,
    /// Its parameters: `(NAME, what it means)`.
    pub params: Vec<(&'static str, &'static str)>,
}

/// A per-window computation a worker binary can run. See the module documentation.
pub trait Recipe: Send + Sync + 'static {
    /// The name given to `--recipe` (letters, digits, `-`, `_`).
    fn name(&self) -> &'static str;
    /// Validate the parameters and return the recipe's fingerprint for them: everything that
    /// determines its output, and a version to bump when the function changes.
    fn fingerprint(&self, params: &Params) -> Result<String, String>;
    /// What the recipe makes, in one sentence, and its `--param NAME=VALUE` parameters with
    /// what each means (`tilegate recipes` lists them).
    fn describe(&self) -> RecipeHelp {
        RecipeHelp::default()
    }
    /// The output's bands, type and nodata for a source.
    fn output(&self, params: &Params, source: &SourceSpec) -> Result<OutputSpec, String>;
    /// Pixels of context needed on each side of a window (a focal filter's radius).
    fn margin(&self, _params: &Params) -> u32 {
        0
    }
    /// Compute one window: [`OutputSpec::bands`] vectors of `window_width × window_height`
    /// values, row-major. An `Err` dead-letters the window with reason `recipe-failed`.
    fn apply(&self, params: &Params, input: &InputWindow<'_>) -> Result<Vec<Vec<f64>>, String>;
}

static REGISTRY: LazyLock<RwLock<BTreeMap<&'static str, Arc<dyn Recipe>>>> =
    LazyLock::new(Default::default);

/// Register a recipe under its name (replacing one of the same name). Call it before running
/// the command line.
pub fn register(recipe: Arc<dyn Recipe>) {
    REGISTRY
        .write()
        .expect("recipe registry")
        .insert(recipe.name(), recipe);
}

/// The recipe registered under `name`.
pub fn get(name: &str) -> Option<Arc<dyn Recipe>> {
    REGISTRY.read().expect("recipe registry").get(name).cloned()
}

/// The names of the registered recipes, sorted.
pub fn names() -> Vec<&'static str> {
    REGISTRY
        .read()
        .expect("recipe registry")
        .keys()
        .copied()
        .collect()
}

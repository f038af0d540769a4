//! `tilegate-median`: the `tilegate` command line with one more recipe, `median` — a focal
//! median over a square of `radius` pixels on each side (`--param radius=N`, default 1), band
//! by band, ignoring nodata and masked-out samples; a pixel whose neighbourhood has no data is
//! nodata. Of an even count of samples, the lower middle one is taken (always a sample's value).
//!
//! ```sh
//! tilegate-median run scene.tif --recipe median --param radius=2
//! ```
//!
//! Each window reads `radius` extra pixels on each side (clipped at the scene's edges), so the
//! assembled scene equals the filter applied to the whole scene at once.

use std::sync::Arc;
use tilegate_cog::recipes::{
    self, InputWindow, OutputSpec, Params, Recipe, RecipeHelp, SourceSpec,
};

struct Median;

impl Median {
    fn radius(params: &Params) -> Result<u32, String> {
        for k in params.keys() {
            if k != "radius" {
                return Err(format!("unknown parameter `{k}` (median takes `radius`)"));
            }
        }
        match params.get("radius") {
            None => Ok(1),
            Some(v) => match v.parse::<u32>() {
                Ok(r @ 1..=64) => Ok(r),
                _ => Err(format!("radius `{v}` must be a whole number from 1 to 64")),
            },
        }
    }
}

impl Recipe for Median {
    fn name(&self) -> &'static str {
        "median"
    }

    fn fingerprint(&self, params: &Params) -> Result<String, String> {
        Ok(format!("median/v1;radius={}", Self::radius(params)?))
    }

    fn describe(&self) -> RecipeHelp {
        RecipeHelp {
            summary: "a focal median, band by band, ignoring nodata and masked-out samples",
            params: vec![(
                "radius",
                "pixels on each side of the square neighbourhood, 1 to 64 (default 1)",
            )],
        }
    }

    fn output(&self, _params: &Params, source: &SourceSpec) -> Result<OutputSpec, String> {
        Ok(OutputSpec {
            bands: source.bands,
            dtype: source.dtype.clone(),
            nodata: source.nodata.first().copied().flatten(),
        })
    }

    fn margin(&self, params: &Params) -> u32 {
        Self::radius(params).unwrap_or(1)
    }

    fn apply(&self, params: &Params, input: &InputWindow<'_>) -> Result<Vec<Vec<f64>>, String> {
        let r = Self::radius(params)? as usize;
        let mut out = Vec::with_capacity(input.bands.len());
        let mut samples = Vec::with_capacity((2 * r + 1) * (2 * r + 1));
        for (b, band) in input.bands.iter().enumerate() {
            let nodata = input.nodata.get(b).copied().flatten();
            let mut values = Vec::with_capacity(input.window_width * input.window_height);
            for wy in 0..input.window_height {
                let y = input.window_y + wy;
                for wx in 0..input.window_width {
                    let x = input.window_x + wx;
                    samples.clear();
                    for ny in y.saturating_sub(r)..(y + r + 1).min(input.height) {
                        for nx in x.saturating_sub(r)..(x + r + 1).min(input.width) {
                            if input.is_valid(b, nx, ny) {
                                samples.push(band[ny * input.width + nx]);
                            }
                        }
                    }
                    values.push(if samples.is_empty() {
                        nodata.unwrap_or(0.0)
                    } else {
                        let mid = (samples.len() - 1) / 2;
                        *samples.select_nth_unstable_by(mid, f64::total_cmp).1
                    });
                }
            }
            out.push(values);
        }
        Ok(out)
    }
}

fn main() -> std::process::ExitCode {
    recipes::register(Arc::new(Median));
    tilegate_cli::main()
}

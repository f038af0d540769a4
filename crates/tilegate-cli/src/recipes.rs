//! Recipes registered by the binary (see `tilegate_cog::recipes`), as the command line sees
//! them.

use crate::args::RecipeArgs;
use crate::errors::refused;
use crate::reports::{RecipeEntry, RecipeParam};
use anyhow::Context;
use tilegate_core::Reason;
use tilegate_core::recipe::{
    Operation, OverviewResampling, PyramidSpec, TerrainEncoding, TileFormat, TileLayout,
};
use tilegate_core::{Compression, Prefix, Recipe, Tenant};

/// The operation of a registered recipe `name` with `NAME=VALUE` parameters, fingerprinted by
/// the recipe (its output is filled in when planning, from the source).
pub fn custom_operation(name: &str, params: &[String]) -> anyhow::Result<Operation> {
    let Some(recipe) = tilegate_cog::recipes::get(name) else {
        let mut known = vec!["copy", "warp", "expr", "ndvi", "noop"];
        known.extend(tilegate_cog::recipes::names());
        return Err(refused(
            Reason::BadRecipe,
            format!(
                "unknown recipe `{name}`: expected one of {}",
                known.join(", ")
            ),
        ));
    };
    let mut map = tilegate_cog::recipes::Params::new();
    for p in params {
        let Some((k, v)) = p.split_once('=') else {
            return Err(refused(
                Reason::BadRecipe,
                format!("--param `{p}` is not NAME=VALUE"),
            ));
        };
        map.insert(k.trim().to_owned(), v.trim().to_owned());
    }
    let fingerprint = recipe
        .fingerprint(&map)
        .map_err(|e| refused(Reason::BadRecipe, format!("recipe `{name}`: {e}")))?;
    Ok(Operation::Custom {
        name: name.to_owned(),
        params: map,
        fingerprint,
        output: None,
    })
}

/// Where a job's outputs go: the prefix and the tenant.
pub(crate) type Location = (Prefix, Tenant);

/// The recipe and the outputs' location that the recipe flags of `plan` and `run` name.
pub(crate) fn recipe_from(a: &RecipeArgs) -> anyhow::Result<(Recipe, Location)> {
    let operation = match (&a.pyramid, a.recipe.as_str()) {
        (Some(tms), "copy") => Operation::Pyramid(pyramid_spec(tms, a)?),
        (Some(_), other) => {
            return Err(refused(
                Reason::BadRecipe,
                format!(
                    "--pyramid makes its own tiles from the source; it takes no --recipe {other}"
                ),
            ));
        }
        (None, recipe) => plain_operation(recipe, a)?,
    };
    recipe_parts(a, operation)
}

/// The operation `--recipe NAME` names.
fn plain_operation(recipe: &str, a: &RecipeArgs) -> anyhow::Result<Operation> {
    Ok(match recipe {
        "copy" => Operation::Copy {
            bands: a.bands.clone(),
        },
        "ndvi" => Operation::Ndvi {
            red: a.red,
            nir: a.nir,
        },
        "noop" => Operation::Noop,
        "warp" => Operation::Warp(warp_spec(a)?),
        "expr" => expr_operation(a)?,
        other => custom_operation(other, &a.params)?,
    })
}

/// A `--pyramid` job's recipe from its flags; the zooms left out are filled in when planning.
fn pyramid_spec(tms: &str, a: &RecipeArgs) -> anyhow::Result<PyramidSpec> {
    let bad = |s: String| refused(Reason::BadRecipe, s);
    let (name, document) = match tms {
        "WebMercatorQuad" | "WorldCRS84Quad" => (tms.to_owned(), None),
        path if path.ends_with(".json") => {
            let doc =
                std::fs::read_to_string(path).map_err(|e| bad(format!("--pyramid {path}: {e}")))?;
            let set = tilegate_pmtiles::TileMatrixSet::from_json(&doc)
                .map_err(|e| bad(format!("--pyramid {path}: {e}")))?;
            (set.id().to_owned(), Some(doc))
        }
        other => {
            return Err(bad(format!(
                "unknown tile matrix set `{other}`: expected WebMercatorQuad, WorldCRS84Quad or \
                 a TMS 2.0 JSON document (a .json path)"
            )));
        }
    };
    let (min_zoom, max_zoom) = match &a.zoom {
        None => (u8::MAX, u8::MAX),
        Some(z) => parse_zooms(z).ok_or_else(|| {
            bad(format!(
                "--zoom `{z}` is not MIN..MAX (zooms 0–30, MIN ≤ MAX)"
            ))
        })?,
    };
    let tile_format = match a.tile_format.as_str() {
        "png" => TileFormat::Png,
        other => {
            return Err(bad(format!(
                "--tile-format `{other}`: only png is built (webp and jpeg are not yet)"
            )));
        }
    };
    let encoding = match &a.encoding {
        None => None,
        Some(e) => Some(TerrainEncoding::parse(e).ok_or_else(|| {
            bad(format!(
                "--encoding `{e}`: expected terrarium or mapbox-terrain-rgb"
            ))
        })?),
    };
    let overview_resampling = match a.overview_resampling.as_deref() {
        None => None,
        Some("average") => Some(OverviewResampling::Average),
        Some("nearest" | "near") => Some(OverviewResampling::Nearest),
        Some(other) => {
            return Err(bad(format!(
                "--overview-resampling `{other}`: expected average or nearest"
            )));
        }
    };
    let web_mercator = name == "WebMercatorQuad";
    let layout = match a.layout.as_deref() {
        None if web_mercator => TileLayout::Pmtiles,
        None => TileLayout::Xyz,
        Some(l) => TileLayout::parse(l)
            .ok_or_else(|| bad(format!("--layout `{l}`: expected pmtiles, xyz or both")))?,
    };
    if layout.pmtiles() && !web_mercator {
        return Err(bad(format!(
            "--layout {}: a PMTiles v3 archive addresses WebMercatorQuad tiles only; tiles of \
             {name} go out as --layout xyz",
            layout.name()
        )));
    }
    Ok(PyramidSpec {
        tms: name,
        tms_document: document,
        min_zoom,
        max_zoom,
        tile_format,
        encoding,
        resampling: a.warp_resampling.clone(),
        overview_resampling,
        layout,
        base_origin: [0, 0],
        base_range: [0; 4],
        tile_size: 0,
        paletted: false,
    })
}

/// `MIN..MAX`, `..MAX`, `MIN..` or `Z` (one zoom); `u8::MAX` for a bound left out.
fn parse_zooms(s: &str) -> Option<(u8, u8)> {
    let z = |t: &str| -> Option<u8> {
        if t.is_empty() {
            Some(u8::MAX)
        } else {
            t.trim().parse::<u8>().ok().filter(|z| *z <= 30)
        }
    };
    let (lo, hi) = match s.split_once("..") {
        Some((lo, hi)) => (z(lo)?, z(hi)?),
        None => {
            let one = z(s).filter(|v| *v != u8::MAX)?;
            (one, one)
        }
    };
    (lo == u8::MAX || hi == u8::MAX || lo <= hi).then_some((lo, hi))
}

/// The rest of a recipe (compression, window, prefix, tenant) around its operation.
fn recipe_parts(a: &RecipeArgs, operation: Operation) -> anyhow::Result<(Recipe, Location)> {
    let unused = |flag: &str, set: bool, recipes: &str| {
        if set {
            Err(refused(
                Reason::BadRecipe,
                format!("{flag} applies to the {recipes} recipe, not `{}`", a.recipe),
            ))
        } else {
            Ok(())
        }
    };
    let is = |op: &str| a.recipe == op;
    unused("--t-srs", a.t_srs.is_some() && !is("warp"), "`warp`")?;
    unused("--tr", a.tr.is_some() && !is("warp"), "`warp`")?;
    unused("--tap", a.tap && !is("warp"), "`warp`")?;
    unused("--expr", a.expr.is_some() && !is("expr"), "`expr`")?;
    unused(
        "--param",
        !a.params.is_empty()
            && matches!(
                a.recipe.as_str(),
                "copy" | "ndvi" | "noop" | "warp" | "expr"
            ),
        "registered",
    )?;
    let compression = Compression::parse(&a.compress).ok_or_else(|| {
        refused(
            Reason::BadRecipe,
            format!(
                "unknown compression `{}`: expected deflate, zstd or lzw",
                a.compress
            ),
        )
    })?;
    if a.window == 0 || !a.window.is_multiple_of(16) {
        return Err(refused(
            Reason::BadWindow,
            format!("window size {} is not a positive multiple of 16", a.window),
        ));
    }
    if a.window > tilegate_core::grid::MAX_WINDOW {
        return Err(refused(
            Reason::BadWindow,
            format!(
                "window size {} is larger than {} pixels, the largest window (one COG block, \
                 read and encoded in memory at once)",
                a.window,
                tilegate_core::grid::MAX_WINDOW
            ),
        ));
    }
    let prefix = Prefix::parse(a.prefix.trim_matches('/')).context("invalid --prefix")?;
    let tenant = Tenant::parse(&a.tenant).context("invalid --tenant")?;
    Ok((
        Recipe {
            operation,
            compression,
            window: a.window,
        },
        (prefix, tenant),
    ))
}

/// The `expr` recipe from the flags: the program parsed and validated now (a malformed
/// expression is refused here, never dead-lettered per window), kept in its canonical text.
fn expr_operation(a: &RecipeArgs) -> anyhow::Result<Operation> {
    let text = a.expr.as_deref().ok_or_else(|| {
        refused(
            Reason::BadRecipe,
            "`expr` needs --expr, e.g. --expr \"(b4-b3)/(b4+b3)\"",
        )
    })?;
    let program = tilegate_expr::Program::parse(text)
        .map_err(|e| refused(Reason::BadExpression, format!("--expr: {e}")))?;
    let ot = tilegate_cog::Dtype::from_name(&a.ot).ok_or_else(|| {
            refused(
                Reason::BadRecipe,
                format!("unknown --ot `{}`: expected Byte, UInt16, Int16, UInt32, Int32, Float32 or Float64", a.ot),
            )
        })?;
    // An integer type has no value to spare: its largest (Byte 255) is also an opaque alpha,
    // a saturated band, a class. Its nodata is said, never assumed.
    let nodata = match a.out_nodata {
        Some(v) => v,
        None if ot.is_float() => ot.default_nodata(),
        None => {
            return Err(refused(
                Reason::BadRecipe,
                format!(
                    "--ot {} needs --out-nodata: every {} value may be data (an opaque alpha \
                     is {}), so pass one your expressions never yield, e.g. --out-nodata 0",
                    ot.name(),
                    ot.name(),
                    ot.range().1
                ),
            ));
        }
    };
    if !ot.represents(nodata) {
        return Err(refused(
            Reason::BadRecipe,
            format!("--out-nodata {nodata} is not a {} value", ot.name()),
        ));
    }
    Ok(Operation::Expr {
        expr: program.canonical(),
        ot: ot.name().to_owned(),
        nodata,
    })
}

/// The `warp` recipe's target grid and resampling, from the flags.
fn warp_spec(a: &RecipeArgs) -> anyhow::Result<tilegate_core::recipe::WarpSpec> {
    let bad = |m: String| refused(Reason::BadRecipe, m);
    let t_srs = a.t_srs.clone().ok_or_else(|| {
        bad("`warp` needs a target CRS: --t-srs EPSG:3857 (or a PROJ string)".into())
    })?;
    let pair = |flag: &str, v: &Option<Vec<f64>>| match v.as_deref() {
        None => Ok(None),
        Some([r]) => Ok(Some([*r, *r])),
        Some([x, y]) => Ok(Some([*x, *y])),
        Some(other) => Err(bad(format!(
            "{flag} takes one or two numbers, not {}",
            other.len()
        ))),
    };
    let tr = pair("--tr", &a.tr)?;
    if let Some([x, y]) = tr
        && !(x > 0.0 && y > 0.0 && x.is_finite() && y.is_finite())
    {
        return Err(bad(format!("--tr {x},{y}: resolutions must be positive")));
    }
    let origin = match a.target_origin.as_deref() {
        None => None,
        Some([x, y]) => Some([*x, *y]),
        Some(_) => return Err(bad("--target-origin takes X,Y".into())),
    };
    let resampling = a.warp_resampling.to_ascii_lowercase();
    if !tilegate_core::recipe::WARP_RESAMPLINGS.contains(&resampling.as_str()) {
        return Err(bad(format!(
            "unknown --warp-resampling `{}`: expected one of {}",
            a.warp_resampling,
            tilegate_core::recipe::WARP_RESAMPLINGS.join(", ")
        )));
    }
    Ok(tilegate_core::recipe::WarpSpec {
        t_srs,
        tr,
        tap: a.tap,
        origin,
        resampling,
    })
}

/// The built-in recipes, then those registered by this binary.
pub fn catalogue() -> Vec<RecipeEntry> {
    let built_in = |name, summary, params: &[(&'static str, &'static str)]| RecipeEntry {
        name,
        kind: "built-in",
        summary,
        params: params
            .iter()
            .map(|&(name, meaning)| RecipeParam { name, meaning })
            .collect(),
    };
    let mut all = vec![
        built_in(
            "copy",
            "re-encode the source's pixels as COG tiles, unchanged",
            &[(
                "--bands",
                "the 1-based bands to keep, in order (default: all)",
            )],
        ),
        built_in(
            "warp",
            "reproject onto a target grid",
            &[
                ("--t-srs", "the target CRS: EPSG:3857, a PROJ string or WKT"),
                ("--tr", "the target resolution, RES or XRES,YRES"),
                (
                    "--tap",
                    "align the grid's edges on multiples of the resolution",
                ),
                (
                    "--target-origin",
                    "align the grid's edges on X + i × XRES, Y + j × YRES",
                ),
                (
                    "--warp-resampling",
                    "near (default), bilinear, cubic, average, mode, …",
                ),
            ],
        ),
        built_in(
            "expr",
            "band math: one output band per `;`-separated expression over b1, b2, …",
            &[
                ("--expr", "the expressions, e.g. `(b4-b3)/(b4+b3)`"),
                ("--ot", "the output data type (default Float32)"),
                (
                    "--out-nodata",
                    "the output's nodata value (default -9999; an unsigned type's maximum)",
                ),
            ],
        ),
        built_in(
            "ndvi",
            "(nir-red)/(nir+red) as one Float32 band",
            &[
                ("--red", "the 1-based red band"),
                ("--nir", "the 1-based near-infrared band"),
            ],
        ),
        built_in(
            "noop",
            "commit a placeholder per window without reading the source (measures orchestration \
             alone; such a job cannot be assembled)",
            &[],
        ),
    ];
    for name in tilegate_cog::recipes::names() {
        let Some(recipe) = tilegate_cog::recipes::get(name) else {
            continue;
        };
        let help = recipe.describe();
        all.push(RecipeEntry {
            name,
            kind: "registered",
            summary: help.summary,
            params: help
                .params
                .into_iter()
                .map(|(name, meaning)| RecipeParam { name, meaning })
                .collect(),
        });
    }
    all
}

#[cfg(test)]
mod catalogue_tests {
    use clap::CommandFactory as _;

    /// Every flag whose help names a built-in recipe (`` `expr`: … ``) is in that recipe's
    /// entry of `tilegate recipes`: a flag added to a recipe cannot be left out of its list.
    #[test]
    fn every_recipe_flag_is_listed() {
        #[derive(clap::Parser)]
        struct Probe {
            #[command(flatten)]
            recipe: crate::args::RecipeArgs,
        }
        let catalogue = super::catalogue();
        let mut missing = Vec::new();
        for arg in Probe::command().get_arguments() {
            let (Some(long), Some(help)) = (arg.get_long(), arg.get_help()) else {
                continue;
            };
            let help = help.to_string();
            for entry in &catalogue {
                if help.starts_with(&format!("`{}`:", entry.name))
                    && !entry.params.iter().any(|p| p.name == format!("--{long}"))
                {
                    missing.push(format!("{} --{long}", entry.name));
                }
            }
        }
        assert!(missing.is_empty(), "not in `tilegate recipes`: {missing:?}");
    }
}

//! Recipes registered by the binary (see `tilegate_cog::recipes`), as the command line sees
//! them.

use crate::args::RecipeArgs;
use crate::errors::refused;
use anyhow::Context;
use tilegate_core::recipe::Operation;
use tilegate_core::{Compression, Prefix, Recipe, Tenant};

/// The operation of a registered recipe `name` with `NAME=VALUE` parameters, fingerprinted by
/// the recipe (its output is filled in when planning, from the source).
pub fn custom_operation(name: &str, params: &[String]) -> anyhow::Result<Operation> {
    let Some(recipe) = tilegate_cog::recipes::get(name) else {
        let mut known = vec!["copy", "warp", "expr", "ndvi", "noop"];
        known.extend(tilegate_cog::recipes::names());
        return Err(refused(
            "bad-recipe",
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
                "bad-recipe",
                format!("--param `{p}` is not NAME=VALUE"),
            ));
        };
        map.insert(k.trim().to_owned(), v.trim().to_owned());
    }
    let fingerprint = recipe
        .fingerprint(&map)
        .map_err(|e| refused("bad-recipe", format!("recipe `{name}`: {e}")))?;
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
    let operation = match a.recipe.as_str() {
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
    };
    let unused = |flag: &str, set: bool, recipes: &str| {
        if set {
            Err(refused(
                "bad-recipe",
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
            "bad-recipe",
            format!(
                "unknown compression `{}`: expected deflate, zstd or lzw",
                a.compress
            ),
        )
    })?;
    if a.window == 0 || !a.window.is_multiple_of(16) {
        return Err(refused(
            "bad-window",
            format!("window size {} is not a positive multiple of 16", a.window),
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
            "bad-recipe",
            "`expr` needs --expr, e.g. --expr \"(b4-b3)/(b4+b3)\"",
        )
    })?;
    let program = tilegate_expr::Program::parse(text)
        .map_err(|e| refused("bad-expression", format!("--expr: {e}")))?;
    let ot = tilegate_cog::Dtype::from_name(&a.ot).ok_or_else(|| {
            refused(
                "bad-recipe",
                format!("unknown --ot `{}`: expected Byte, UInt16, Int16, UInt32, Int32, Float32 or Float64", a.ot),
            )
        })?;
    let nodata = a.out_nodata.unwrap_or_else(|| ot.default_nodata());
    if !ot.represents(nodata) {
        return Err(refused(
            "bad-recipe",
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
    let bad = |m: String| refused("bad-recipe", m);
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

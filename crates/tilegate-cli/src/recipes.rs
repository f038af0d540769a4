//! Recipes registered by the binary (see `tilegate_cog::recipes`), as the command line sees
//! them.

use crate::errors::refused;
use tilegate_core::recipe::Operation;

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

//! `plan --from`: the sources of a batch — one per line of a list, or one per item of a STAC
//! ItemCollection.

use crate::errors::refused;
use anyhow::Context;
use std::io::Read;
use tilegate_core::Reason;

/// The sources listed in `list` (a path, or `-` for stdin). An ItemCollection's items are
/// named `COLLECTION#ITEM_ID`, which the planner reads back out of the collection.
pub async fn sources(list: &str) -> anyhow::Result<Vec<String>> {
    let text = if list == "-" {
        let mut s = String::new();
        std::io::stdin()
            .read_to_string(&mut s)
            .context("read the source list from stdin")?;
        s
    } else {
        std::fs::read_to_string(list).with_context(|| format!("read the source list {list}"))?
    };
    if let Ok(doc) = serde_json::from_str::<serde_json::Value>(&text) {
        if doc.get("type").and_then(|t| t.as_str()) != Some("FeatureCollection") {
            return Err(refused(
                Reason::BadOption,
                format!(
                    "{list}: a JSON list of sources must be a STAC ItemCollection (type FeatureCollection)"
                ),
            ));
        }
        let canon = std::fs::canonicalize(list).with_context(|| format!("find {list}"))?;
        let features = doc["features"].as_array().cloned().unwrap_or_default();
        return features
            .iter()
            .map(|f| {
                f["id"]
                    .as_str()
                    .map(|id| format!("file://{}#{id}", canon.display()))
                    .context("an item of the collection has no `id`")
            })
            .collect();
    }
    Ok(text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(str::to_owned)
        .collect())
}

//! The sources of a batch (`plan --from`, `run --from`): one per line of a list, or one per
//! item of a STAC ItemCollection.

use std::io::Read as _;
use tilegate_core::Reason;

/// Why a batch's list of sources could not be read.
#[derive(Debug, thiserror::Error)]
pub enum BatchError {
    #[error("read the source list from stdin")]
    Stdin(#[source] std::io::Error),
    #[error("read the source list {list}")]
    Read {
        list: String,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "{list}: a JSON list of sources must be a STAC ItemCollection (type FeatureCollection)"
    )]
    NotACollection { list: String },
    #[error("find {list}")]
    Find {
        list: String,
        #[source]
        source: std::io::Error,
    },
    #[error("an item of the collection has no `id`")]
    NoId,
}

impl BatchError {
    /// A stable kebab-case name of the failure: a JSON list that is no ItemCollection is a
    /// bad `--from`; a list that cannot be read is named by nothing more precise.
    pub fn reason_code(&self) -> Reason {
        match self {
            Self::NotACollection { .. } => Reason::BadOption,
            Self::Stdin(_) | Self::Read { .. } | Self::Find { .. } | Self::NoId => {
                Reason::Unexpected
            }
        }
    }
}

/// The sources listed in `list` (a path, or `-` for stdin). An ItemCollection's items are
/// named `COLLECTION#ITEM_ID`, which the planner reads back out of the collection; a
/// directory lists its `.tif` and `.tiff` files (not its subdirectories'), sorted.
pub fn sources(list: &str) -> Result<Vec<String>, BatchError> {
    if list != "-" && std::path::Path::new(list).is_dir() {
        return rasters_in(list);
    }
    let text = if list == "-" {
        let mut s = String::new();
        std::io::stdin()
            .read_to_string(&mut s)
            .map_err(BatchError::Stdin)?;
        s
    } else {
        std::fs::read_to_string(list).map_err(|source| BatchError::Read {
            list: list.to_owned(),
            source,
        })?
    };
    if let Ok(doc) = serde_json::from_str::<serde_json::Value>(&text) {
        if doc.get("type").and_then(|t| t.as_str()) != Some("FeatureCollection") {
            return Err(BatchError::NotACollection {
                list: list.to_owned(),
            });
        }
        let canon = std::fs::canonicalize(list).map_err(|source| BatchError::Find {
            list: list.to_owned(),
            source,
        })?;
        let features = doc["features"].as_array().cloned().unwrap_or_default();
        return features
            .iter()
            .map(|f| {
                f["id"]
                    .as_str()
                    .map(|id| format!("file://{}#{id}", canon.display()))
                    .ok_or(BatchError::NoId)
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

fn rasters_in(dir: &str) -> Result<Vec<String>, BatchError> {
    let read = |source| BatchError::Read {
        list: dir.to_owned(),
        source,
    };
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(read)? {
        let path = entry.map_err(read)?.path();
        let raster = path
            .extension()
            .and_then(|e| e.to_str())
            .is_some_and(|e| e.eq_ignore_ascii_case("tif") || e.eq_ignore_ascii_case("tiff"));
        if raster && path.is_file() {
            out.push(path.display().to_string());
        }
    }
    out.sort();
    Ok(out)
}

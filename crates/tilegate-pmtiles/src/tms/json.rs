//! The OGC TMS 2.0 JSON encoding (`tileMatrixSet.json` schema) of a regular matrix set, read into
//! [`TileMatrixSet`].

use serde::Deserialize;

use super::{CornerOfOrigin, Crs, TileMatrix, TileMatrixSet, TmsError};

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Document {
    #[serde(default)]
    id: Option<String>,
    crs: CrsRef,
    #[serde(default)]
    ordered_axes: Option<Vec<String>>,
    tile_matrices: Vec<Matrix>,
}

/// `crs` is a URI string, or an object with a `uri` (or a `wkt` we cannot interpret).
#[derive(Deserialize)]
#[serde(untagged)]
enum CrsRef {
    Uri(String),
    Object {
        #[serde(default)]
        uri: Option<String>,
        #[serde(default)]
        wkt: Option<serde_json::Value>,
    },
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Matrix {
    id: String,
    scale_denominator: f64,
    cell_size: f64,
    #[serde(default)]
    corner_of_origin: Option<String>,
    point_of_origin: [f64; 2],
    tile_width: u32,
    tile_height: u32,
    matrix_width: u32,
    matrix_height: u32,
    #[serde(default)]
    variable_matrix_widths: Option<serde_json::Value>,
}

pub(super) fn parse(document: &str) -> Result<TileMatrixSet, TmsError> {
    let doc: Document = serde_json::from_str(document)?;
    let id = doc.id.unwrap_or_default();
    let invalid = |reason: String| TmsError::Invalid {
        id: id.clone(),
        reason,
    };
    let crs = match doc.crs {
        CrsRef::Uri(uri) | CrsRef::Object { uri: Some(uri), .. } => Crs::from_uri(&uri),
        CrsRef::Object { wkt: Some(wkt), .. } => Crs::Other(wkt.to_string()),
        CrsRef::Object { .. } => return Err(invalid("crs has neither a uri nor a wkt".into())),
    };
    let swap = doc
        .ordered_axes
        .as_deref()
        .and_then(<[String]>::first)
        .is_some_and(|axis| is_northing(axis));
    let mut matrices = Vec::with_capacity(doc.tile_matrices.len());
    for m in doc.tile_matrices {
        if m.variable_matrix_widths.is_some() {
            return Err(invalid(format!(
                "tile matrix {} has variable matrix widths",
                m.id
            )));
        }
        let corner_of_origin = match m.corner_of_origin.as_deref() {
            None | Some("topLeft") => CornerOfOrigin::TopLeft,
            Some("bottomLeft") => CornerOfOrigin::BottomLeft,
            Some(other) => {
                return Err(invalid(format!(
                    "tile matrix {} has cornerOfOrigin {other:?}",
                    m.id
                )));
            }
        };
        let [a, b] = m.point_of_origin;
        matrices.push(TileMatrix {
            id: m.id,
            scale_denominator: m.scale_denominator,
            cell_size: m.cell_size,
            corner_of_origin,
            point_of_origin: if swap { [b, a] } else { [a, b] },
            tile_width: m.tile_width,
            tile_height: m.tile_height,
            matrix_width: m.matrix_width,
            matrix_height: m.matrix_height,
        });
    }
    TileMatrixSet::new(id, crs, matrices)
}

/// Whether an `orderedAxes` name is a latitude or a northing (so the document lists y first).
fn is_northing(axis: &str) -> bool {
    matches!(
        axis.to_ascii_lowercase().as_str(),
        "lat" | "latitude" | "n" | "northing" | "y(n)"
    )
}

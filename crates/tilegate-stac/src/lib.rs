//! The STAC Item of a job's assembled scene: a pure function of the job row, the published
//! scene and its checksum, so that the same job always writes the same bytes (the Item is
//! published next to the scene with create-if-absent). STAC 1.0.0 with the projection
//! (v2.0.0), raster (v1.1.0) and file (v2.1.0) extensions; an optional Collection over a set
//! of jobs' Items. The URIs an Item or Collection names are redacted
//! ([`tilegate_core::redact`]): a published document carries no credential.

use serde_json::{Value, json};
use tilegate_core::table::{JobRecord, OutputRef};
use tilegate_core::time::rfc3339;

pub const STAC_VERSION: &str = "1.0.0";
pub const PROJECTION: &str = "https://stac-extensions.github.io/projection/v2.0.0/schema.json";
pub const RASTER: &str = "https://stac-extensions.github.io/raster/v1.1.0/schema.json";
pub const FILE: &str = "https://stac-extensions.github.io/file/v2.1.0/schema.json";
/// The media type of a Cloud Optimized GeoTIFF.
pub const COG_MEDIA_TYPE: &str = "image/tiff; application=geotiff; profile=cloud-optimized";

/// A BLAKE3-256 digest as a multihash (`file:checksum`): code 0x1e, length 0x20, the digest.
pub fn blake3_multihash(digest: &[u8; 32]) -> String {
    let mut s = String::with_capacity(68);
    s.push_str("1e20");
    for b in digest {
        s.push_str(&format!("{b:02x}"));
    }
    s
}

/// The STAC data type of a GDAL data type name.
pub fn stac_data_type(gdal: &str) -> &'static str {
    match gdal {
        "Byte" => "uint8",
        "Int8" => "int8",
        "UInt16" => "uint16",
        "Int16" => "int16",
        "UInt32" => "uint32",
        "Int32" => "int32",
        "UInt64" => "uint64",
        "Int64" => "int64",
        "Float32" => "float32",
        "Float64" => "float64",
        "CInt16" => "cint16",
        "CInt32" => "cint32",
        "CFloat32" => "cfloat32",
        "CFloat64" => "cfloat64",
        _ => "other",
    }
}

/// The key of a scene's Item: beside the scene, `.json` for `.tif`.
pub fn item_key(scene_key: &str) -> tilegate_core::StoreResult<tilegate_core::ObjectKey> {
    // A pyramid's output is its archive or, without one, its TileJSON: the Item sits beside
    // the archive's place either way (`{prefix}/pyramids/{job}.json`).
    let stem = (scene_key.strip_suffix(".tif"))
        .or_else(|| scene_key.strip_suffix(".pmtiles"))
        .or_else(|| scene_key.strip_suffix("/tiles.json"))
        .unwrap_or(scene_key);
    tilegate_core::ObjectKey::checked(&format!("{stem}.json"))
}

/// A JSON number for `v` (nodata may be NaN or infinite, which JSON cannot hold: STAC writes
/// those as the strings "nan", "inf", "-inf").
fn nodata_value(v: f64) -> Value {
    if v.is_nan() {
        json!("nan")
    } else if v.is_infinite() {
        json!(if v > 0.0 { "inf" } else { "-inf" })
    } else {
        json!(v)
    }
}

/// The bands of the scene a job's recipe writes: (count, GDAL type, nodata).
fn output_bands(job: &JobRecord) -> (u32, String, Option<f64>) {
    let o = job.recipe.output_spec(&job.scene);
    (o.bands, o.dtype, o.nodata)
}

/// The Item of `job`'s scene published as `scene`, whose bytes hash to `checksum` (a
/// multihash, [`blake3_multihash`]). Keys are sorted (`serde_json`'s map), so the bytes depend
/// on the inputs alone.
pub fn item(job: &JobRecord, scene: &OutputRef, checksum: &str) -> Value {
    let gt = job.scene.geotransform;
    let (w, h) = (f64::from(job.grid.width), f64::from(job.grid.height));
    let corners = [(0.0, 0.0), (w, 0.0), (0.0, h), (w, h)].map(|(px, py)| {
        (
            gt[0] + px * gt[1] + py * gt[2],
            gt[3] + px * gt[4] + py * gt[5],
        )
    });
    let min = |f: fn(&(f64, f64)) -> f64| corners.iter().map(f).fold(f64::MAX, f64::min);
    let max = |f: fn(&(f64, f64)) -> f64| corners.iter().map(f).fold(f64::MIN, f64::max);
    let proj_bbox = [min(|c| c.0), min(|c| c.1), max(|c| c.0), max(|c| c.1)];
    let placement = job.scene.placement.as_ref();
    let datetime = job
        .scene
        .datetime
        .clone()
        .unwrap_or_else(|| rfc3339(job.created_at));
    let (bands, dtype, nodata) = output_bands(job);
    let raster_bands: Vec<Value> = (0..bands)
        .map(|_| {
            let mut b = json!({ "data_type": stac_data_type(&dtype) });
            if let Some(nd) = nodata {
                b["nodata"] = nodata_value(nd);
            }
            b
        })
        .collect();
    let scene_file = scene.key.rsplit('/').next().unwrap_or(&scene.key);
    // A published Item names no credential, whatever the source URI carried.
    let source = tilegate_core::redact::redact(&job.source.uri);
    let mut properties = json!({
        "datetime": datetime,
        "created": rfc3339(job.created_at),
        "proj:code": placement.and_then(|p| p.epsg).map(|c| format!("EPSG:{c}")),
        "proj:shape": [job.grid.height, job.grid.width],
        "proj:transform": [gt[1], gt[2], gt[0], gt[4], gt[5], gt[3]],
        "proj:bbox": proj_bbox,
        "tilegate:job_id": job.job_id,
        "tilegate:source": source,
        "tilegate:source_etag": job.source.etag,
        "tilegate:recipe": job.recipe.fingerprint(),
    });
    // A CRS without an EPSG code is given whole, as PROJJSON.
    if let Some(pj) = placement
        .filter(|p| p.epsg.is_none())
        .and_then(|p| p.projjson.as_deref())
        .and_then(|pj| serde_json::from_str::<Value>(pj).ok())
    {
        properties["proj:projjson"] = pj;
    }
    let mut item = json!({
        "type": "Feature",
        "stac_version": STAC_VERSION,
        "stac_extensions": [PROJECTION, RASTER, FILE],
        "id": job.job_id,
        "geometry": Value::Null,
        "properties": properties,
        "links": [
            { "rel": "derived_from", "href": source, "title": "the source scene" },
        ],
        "assets": {
            "data": {
                "href": format!("./{scene_file}"),
                "type": COG_MEDIA_TYPE,
                "title": "scene (Cloud Optimized GeoTIFF)",
                "roles": ["data"],
                "raster:bands": raster_bands,
                "file:size": scene.size,
                "file:checksum": checksum,
            }
        },
    });
    if let tilegate_core::recipe::Operation::Product(p) = &job.recipe.operation {
        // A product tile: derived from each of its input scenes, named by its grid and tile.
        item["properties"]["tilegate:product"] = json!(p.product);
        item["properties"]["tilegate:grid"] = json!(p.grid);
        item["properties"]["tilegate:tile"] = json!(p.tile);
        let links = item["links"].as_array_mut().expect("links");
        links.clear();
        links.extend(p.inputs.iter().map(|i| {
            json!({ "rel": "derived_from", "href": tilegate_core::redact::redact(&i.source.uri),
                "title": format!("input scene {}", i.id) })
        }));
    }
    if let tilegate_core::recipe::Operation::Pyramid(p) = &job.recipe.operation {
        // A web pyramid: the archive is the data, and web maps read it (or its `z/x/y`
        // objects) by the web-map-links relations.
        let dir = job.job_id.to_string();
        let title = format!(
            "web pyramid ({}, zooms {}–{})",
            p.tms, p.min_zoom, p.max_zoom
        );
        let (key, asset) = if p.layout.pmtiles() {
            (
                "pmtiles",
                json!({ "href": format!("./{dir}.pmtiles"),
                "type": "application/vnd.pmtiles", "title": title, "roles": ["data", "tiles"] }),
            )
        } else {
            (
                "tilejson",
                json!({ "href": format!("./{dir}/tiles.json"),
                "type": "application/json", "title": title, "roles": ["tiles"] }),
            )
        };
        let mut asset = asset;
        asset["file:size"] = json!(scene.size);
        asset["file:checksum"] = json!(checksum);
        item["assets"] = json!({ key: asset });
        let links = item["links"].as_array_mut().expect("links");
        if p.layout.pmtiles() {
            links.push(
                json!({ "rel": "pmtiles", "href": format!("./{dir}.pmtiles"),
                "type": "application/vnd.pmtiles" }),
            );
        }
        if p.layout.xyz() {
            links.push(json!({ "rel": "xyz",
                "href": format!("./{dir}/{{z}}/{{x}}/{{y}}.{}", p.tile_format.extension()),
                "type": p.tile_format.media_type(), "title": p.tms }));
        }
        links.push(
            json!({ "rel": "tilejson", "href": format!("./{dir}/tiles.json"),
            "type": "application/json" }),
        );
    }
    if let Some(p) = placement {
        item["geometry"] = json!({ "type": "Polygon", "coordinates": [p.footprint] });
        item["bbox"] = json!(p.bbox);
    }
    item
}

/// The bytes an Item is stored as: pretty JSON and a final newline.
pub fn to_bytes(v: &Value) -> Vec<u8> {
    let mut b = serde_json::to_vec_pretty(v).expect("a JSON value serialises");
    b.push(b'\n');
    b
}

/// The box around west-south-east-north boxes, or none for none.
pub fn bbox_union(boxes: impl IntoIterator<Item = [f64; 4]>) -> Option<[f64; 4]> {
    boxes.into_iter().fold(None, |acc, b| {
        Some(acc.map_or(b, |a| {
            [
                a[0].min(b[0]),
                a[1].min(b[1]),
                a[2].max(b[2]),
                a[3].max(b[3]),
            ]
        }))
    })
}

/// A Collection over Items (`id`, their bboxes and datetimes), linking each by `hrefs`.
pub fn collection(id: &str, description: &str, items: &[(Value, String)]) -> Value {
    let bboxes: Vec<Value> = items
        .iter()
        .filter_map(|(i, _)| i.get("bbox").cloned())
        .collect();
    let bbox = bbox_union(bboxes.iter().filter_map(|b| {
        let v: Vec<f64> = b.as_array()?.iter().filter_map(Value::as_f64).collect();
        (v.len() == 4).then(|| [v[0], v[1], v[2], v[3]])
    }));
    let mut times: Vec<&str> = items
        .iter()
        .filter_map(|(i, _)| i["properties"]["datetime"].as_str())
        .collect();
    times.sort_unstable();
    let mut links = vec![];
    for (_, href) in items {
        let href = tilegate_core::redact::redact(href);
        links.push(json!({ "rel": "item", "href": href, "type": "application/geo+json" }));
    }
    json!({
        "type": "Collection",
        "stac_version": STAC_VERSION,
        "id": id,
        "description": description,
        "license": "various",
        "extent": {
            "spatial": { "bbox": [bbox.unwrap_or([-180.0, -90.0, 180.0, 90.0])] },
            "temporal": { "interval": [[times.first(), times.last()]] },
        },
        "links": links,
    })
}

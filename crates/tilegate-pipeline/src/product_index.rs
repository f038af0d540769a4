//! A product's indexes: what others serve a product's tiles with, rebuilt from its tiles'
//! pointers (`PREFIX/products/NAME/tiles/TILE/current.json`) alone.
//!
//! - `collection.json`: a STAC Collection linking each tile's Item (the Item its job
//!   published beside the tile's COG: `proj:*`, the grid code, its input scenes as
//!   `derived_from`), its extent the union of theirs.
//! - `mosaic.json`: a MosaicJSON 0.0.3 document (cogeo-mosaic, titiler): each Web Mercator
//!   quadkey at `quadkey_zoom` names the tile COGs whose WGS84 box it meets, as the output
//!   store names them (`s3://…`, `gs://…`, a path).
//! - `index-{ZONE}.vrt`: a GDAL VRT per CRS of the grid (a VRT has one CRS; a UTM grid's zones
//!   each have theirs), every tile of that zone placed at its offset, its nodata or its mask
//!   kept.
//!
//! The documents are rewritten whole by each run (not create-if-absent: they describe the
//! pointers as they are now). Two runs at once each write a view that was true when it listed;
//! the later writer's stands, and the next run after an assembly brings it up to date.

use bytes::Bytes;
use serde::Serialize;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::fmt::Write as _;
use tilegate_core::object::{ObjectStoreExt as _, PutOptions};
use tilegate_core::product::{GridTile, TilePointer};
use tilegate_core::table::JobRecord;
use tilegate_core::{Backends, JobId, ObjectKey, Prefix, StoreError};
use tilegate_planner::PlanError;

/// What indexing a product wrote.
#[derive(Debug, Clone, PartialEq, Serialize, schemars::JsonSchema)]
pub struct ProductIndex {
    pub product: String,
    /// Tiles with a published COG (a pointer).
    pub tiles: usize,
    /// The STAC Collection's key.
    pub collection: String,
    /// The MosaicJSON document's key.
    pub mosaicjson: String,
    pub minzoom: u8,
    pub maxzoom: u8,
    pub quadkeys: usize,
    /// One VRT per CRS of the grid.
    pub vrts: Vec<ZoneVrt>,
}

/// The VRT of one CRS's tiles.
#[derive(Debug, Clone, PartialEq, Serialize, schemars::JsonSchema)]
pub struct ZoneVrt {
    /// `32N`, `33S`, …
    pub zone: String,
    pub epsg: u32,
    pub key: String,
    pub tiles: usize,
    pub width: u64,
    pub height: u64,
}

/// Why a product could not be indexed.
#[derive(Debug, thiserror::Error)]
pub enum IndexError {
    #[error(transparent)]
    Plan(#[from] PlanError),
    #[error("index the product: storage")]
    Store(#[from] StoreError),
    #[error("tile {tile}: its pointer names job {job}, which has no row")]
    NoJob { tile: String, job: JobId },
    #[error("tile {tile}: {what}")]
    Tile { tile: String, what: String },
}

impl IndexError {
    pub fn reason_code(&self) -> tilegate_core::Reason {
        use tilegate_core::Reason;
        match self {
            Self::Plan(e) => e.reason_code(),
            Self::Store(e) => Reason::storage(e.is_retryable()),
            Self::NoJob { .. } => Reason::UnknownJob,
            Self::Tile { .. } => Reason::BadRecipe,
        }
    }
}

/// One published tile: its pointer and its job.
struct Published {
    tile: GridTile,
    pointer: TilePointer,
    job: JobRecord,
}

/// Rebuild product `name`'s Collection, MosaicJSON and VRTs under `root` from its pointers.
/// `objects_root` is where the output store's keys live as readers name them (`s3://b/`, a
/// directory with its final `/`): the MosaicJSON's URLs and the VRTs' paths start with it.
pub async fn index_product(
    b: &Backends,
    root: &Prefix,
    name: &str,
    objects_root: &str,
) -> Result<ProductIndex, IndexError> {
    // The product must exist: its definition says so (and checks the name).
    tilegate_planner::product::definition(b, root, name).await?;
    let published = published(b, root, name).await?;
    let mut items = Vec::with_capacity(published.len());
    for p in &published {
        let key = tilegate_stac::item_key(&p.pointer.key)?;
        let got = b.objects.get_bytes(&key).await?;
        let item: Value = serde_json::from_slice(&got.bytes).map_err(|e| StoreError::Corrupt {
            what: "tile STAC Item",
            key: key.to_string(),
            detail: e.to_string(),
        })?;
        items.push((item, relative_to_product(root, key.as_str())));
    }
    let collection = tilegate_stac::collection(
        name,
        &format!(
            "Product {name}: one Item per grid tile, each derived from its input scenes \
             (written by tilegate product index)"
        ),
        &items,
    );
    let collection_key = root.product_index_key(name, "collection.json");
    put(b, &collection_key, tilegate_stac::to_bytes(&collection)).await?;

    let url = |key: &str| format!("{objects_root}{key}");
    let mosaic = mosaicjson(name, &published, &url);
    let mosaic_key = root.product_index_key(name, "mosaic.json");
    put(b, &mosaic_key, tilegate_stac::to_bytes(&mosaic.doc)).await?;

    let gdal = |key: &str| {
        let full = url(key);
        tilegate_core::source::gdal_path_of(&full).unwrap_or(full)
    };
    let mut by_zone: BTreeMap<(u8, bool), Vec<&Published>> = BTreeMap::new();
    for p in &published {
        by_zone
            .entry((p.tile.zone, p.tile.north))
            .or_default()
            .push(p);
    }
    let mut vrts = Vec::with_capacity(by_zone.len());
    for ((zone, north), tiles) in by_zone {
        let code = format!("{zone}{}", if north { 'N' } else { 'S' });
        let (xml, width, height) = vrt(&tiles, &gdal)?;
        let key = root.product_index_key(name, &format!("index-{code}.vrt"));
        put(b, &key, xml.into_bytes()).await?;
        vrts.push(ZoneVrt {
            zone: code,
            epsg: tiles[0].tile.epsg(),
            key: key.to_string(),
            tiles: tiles.len(),
            width,
            height,
        });
    }
    tracing::info!(
        product = name,
        tiles = published.len(),
        vrts = vrts.len(),
        "product indexed"
    );
    Ok(ProductIndex {
        product: name.to_owned(),
        tiles: published.len(),
        collection: collection_key.to_string(),
        mosaicjson: mosaic_key.to_string(),
        minzoom: mosaic.minzoom,
        maxzoom: mosaic.maxzoom,
        quadkeys: mosaic.quadkeys,
        vrts,
    })
}

async fn put(b: &Backends, key: &ObjectKey, bytes: Vec<u8>) -> Result<(), StoreError> {
    b.objects
        .put_opts(key, Bytes::from(bytes), PutOptions::default())
        .await?;
    Ok(())
}

/// Every tile with a pointer, in tile order, with its job.
async fn published(b: &Backends, root: &Prefix, name: &str) -> Result<Vec<Published>, IndexError> {
    let listed = b.objects.list(&root.product_tiles_dir(name)).await?;
    let mut out = Vec::new();
    for meta in listed.iter().filter(|m| m.key.ends_with("/current.json")) {
        let key = ObjectKey::checked(&meta.key)?;
        let code = meta
            .key
            .trim_end_matches("/current.json")
            .rsplit('/')
            .next()
            .unwrap_or_default();
        let bad = |what: String| IndexError::Tile {
            tile: code.to_owned(),
            what,
        };
        let tile = GridTile::parse(code).map_err(|e| bad(e.to_string()))?;
        let got = b.objects.get_bytes(&key).await?;
        let pointer: TilePointer =
            serde_json::from_slice(&got.bytes).map_err(|e| StoreError::Corrupt {
                what: "product tile pointer",
                key: key.to_string(),
                detail: e.to_string(),
            })?;
        let job = job(b, &pointer.job_id)
            .await?
            .ok_or_else(|| IndexError::NoJob {
                tile: code.to_owned(),
                job: pointer.job_id.clone(),
            })?;
        // The pointer is an object anyone with the bucket could plant: it is believed only
        // where the job's own row agrees — this product's tile under this root, published
        // at the very key the pointer names.
        let ours = matches!(&job.recipe.operation,
            tilegate_core::recipe::Operation::Product(p) if p.product == name && p.tile == code);
        let published_at = job.scene_output.as_ref().map(|o| o.key.as_str());
        if !ours || job.prefix != *root || published_at != Some(pointer.key.as_str()) {
            return Err(bad(format!(
                "its pointer names job {} at `{}`, which is not that job's published tile of \
                 product {name} under {root} (published at {})",
                pointer.job_id,
                tilegate_core::redact::redact(&pointer.key),
                published_at.unwrap_or("nothing yet")
            )));
        }
        out.push(Published { tile, pointer, job });
    }
    out.sort_by_key(|p| (p.tile.zone, p.tile.north, p.tile.col, p.tile.row));
    Ok(out)
}

async fn job(b: &Backends, id: &JobId) -> Result<Option<JobRecord>, StoreError> {
    Ok(b.jobs.get_job(id).await?.map(|v| v.row))
}

/// An Item key as the Collection (`{root}/products/NAME/collection.json`) links it.
fn relative_to_product(root: &Prefix, key: &str) -> String {
    let rest = key
        .strip_prefix(&format!("{root}/"))
        .unwrap_or(key)
        .to_owned();
    format!("../../{rest}")
}

struct Mosaic {
    doc: Value,
    minzoom: u8,
    maxzoom: u8,
    quadkeys: usize,
}

/// Web Mercator's resolution at zoom 0 (metres per pixel of a 256-pixel tile at the equator).
const MERCATOR_Z0: f64 = 156_543.033_928_040_97;

/// The MosaicJSON of the published tiles.
fn mosaicjson(name: &str, tiles: &[Published], url: &dyn Fn(&str) -> String) -> Mosaic {
    let bounds = tilegate_stac::bbox_union(
        tiles
            .iter()
            .filter_map(|p| p.job.scene.placement.as_ref().map(|pl| pl.bbox)),
    )
    .unwrap_or([-180.0, -90.0, 180.0, 90.0]);
    // Zooms as a web map reads the tiles: the finest whose pixel is no larger than a tile's
    // (its ground size in Web Mercator metres at the product's middle latitude), the coarsest
    // where a whole tile fits one 256-pixel map tile.
    let lat = f64::midpoint(bounds[1], bounds[3]).clamp(-85.0, 85.0);
    let (res, side) = tiles.first().map_or((10.0, 256.0), |p| {
        (
            p.job.scene.geotransform[1].abs(),
            f64::from(p.job.grid.width.max(p.job.grid.height)),
        )
    });
    let mercator_res = res / lat.to_radians().cos();
    let maxzoom = (MERCATOR_Z0 / mercator_res).log2().ceil().clamp(0.0, 24.0) as u8;
    let levels = (side / 256.0).log2().ceil().max(0.0) as u8;
    let minzoom = maxzoom.saturating_sub(levels);
    let mut quad: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for p in tiles {
        let Some(pl) = p.job.scene.placement.as_ref() else {
            continue;
        };
        for qk in quadkeys(pl.bbox, minzoom) {
            quad.entry(qk).or_default().push(url(&p.pointer.key));
        }
    }
    let quadkeys = quad.len();
    let doc = json!({
        "mosaicjson": "0.0.3",
        "name": name,
        "description": format!("Product {name}: its tiles' COGs (tilegate product index)"),
        "version": "1.0.0",
        "minzoom": minzoom,
        "maxzoom": maxzoom,
        "quadkey_zoom": minzoom,
        "bounds": bounds,
        "center": [
            f64::midpoint(bounds[0], bounds[2]),
            f64::midpoint(bounds[1], bounds[3]),
            minzoom
        ],
        "tiles": quad,
    });
    Mosaic {
        doc,
        minzoom,
        maxzoom,
        quadkeys,
    }
}

/// The quadkeys of the Web Mercator tiles at `z` that a WGS84 box meets (a box whose west is
/// east of its east crosses the antimeridian).
fn quadkeys(bbox: [f64; 4], z: u8) -> Vec<String> {
    let n = 1u64 << z;
    let x_of =
        |lon: f64| (((lon + 180.0) / 360.0 * n as f64).floor() as i64).clamp(0, n as i64 - 1);
    let y_of = |lat: f64| {
        let phi = lat.clamp(-85.051_128_78, 85.051_128_78).to_radians();
        let y = (1.0 - (phi.tan() + 1.0 / phi.cos()).ln() / std::f64::consts::PI) / 2.0;
        ((y * n as f64).floor() as i64).clamp(0, n as i64 - 1)
    };
    let (x0, x1) = (x_of(bbox[0]), x_of(bbox[2]));
    let xs: Vec<i64> = if bbox[0] <= bbox[2] {
        (x0..=x1).collect()
    } else {
        (x0..n as i64).chain(0..=x1).collect()
    };
    let (y0, y1) = (y_of(bbox[3]), y_of(bbox[1]));
    let mut out = Vec::new();
    for x in xs {
        for y in y0..=y1 {
            out.push(quadkey(x as u64, y as u64, z));
        }
    }
    out
}

fn quadkey(x: u64, y: u64, z: u8) -> String {
    (1..=z)
        .rev()
        .map(|i| {
            let mask = 1u64 << (i - 1);
            let d = u8::from(x & mask != 0) + 2 * u8::from(y & mask != 0);
            char::from(b'0' + d)
        })
        .collect()
}

fn xml_escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// The VRT of one zone's tiles (one CRS), and its size.
fn vrt(
    tiles: &[&Published],
    gdal: &dyn Fn(&str) -> String,
) -> Result<(String, u64, u64), IndexError> {
    let first = &tiles[0].job;
    let spec = first.recipe.output_spec(&first.scene);
    let res = first.scene.geotransform[1];
    let epsg = tiles[0].tile.epsg();
    let mut west = f64::MAX;
    let mut north = f64::MIN;
    let mut east = f64::MIN;
    let mut south = f64::MAX;
    for p in tiles {
        let gt = p.job.scene.geotransform;
        let s = p.job.recipe.output_spec(&p.job.scene);
        if (s.bands, &s.dtype) != (spec.bands, &spec.dtype)
            || (gt[1] - res).abs() > 1e-9 * res.abs()
            || gt[2] != 0.0
            || gt[4] != 0.0
        {
            return Err(IndexError::Tile {
                tile: p.tile.to_string(),
                what: format!(
                    "{} bands of {} at {} m: a zone's VRT needs every tile's bands, type and \
                     north-up pixel of its first ({} of {} at {res} m)",
                    s.bands, s.dtype, gt[1], spec.bands, spec.dtype
                ),
            });
        }
        west = west.min(gt[0]);
        north = north.max(gt[3]);
        east = east.max(gt[0] + f64::from(p.job.grid.width) * gt[1]);
        south = south.min(gt[3] + f64::from(p.job.grid.height) * gt[5]);
    }
    let width = ((east - west) / res).round() as u64;
    let height = ((north - south) / res).round() as u64;
    // One nodata every tile declares: the VRT's. Otherwise (a mosaic tile whose inputs share
    // none keeps validity in its mask) the VRT's validity is a mask made of each tile's own
    // (GDAL's mask band of a tile with nodata is derived from it).
    let same = |a: Option<f64>, b: Option<f64>| match (a, b) {
        (Some(a), Some(b)) => a == b || (a.is_nan() && b.is_nan()),
        _ => false,
    };
    let nodata_of = |p: &Published| p.job.recipe.output_spec(&p.job.scene).nodata;
    let shared = spec
        .nodata
        .filter(|_| tiles.iter().all(|p| same(nodata_of(p), spec.nodata)));
    let mut x = String::new();
    let _ = writeln!(
        x,
        r#"<VRTDataset rasterXSize="{width}" rasterYSize="{height}">"#
    );
    let _ = writeln!(
        x,
        r#"  <SRS dataAxisToSRSAxisMapping="1,2">EPSG:{epsg}</SRS>"#
    );
    let _ = writeln!(
        x,
        "  <GeoTransform>{west:.17e}, {res:.17e}, 0, {north:.17e}, 0, {:.17e}</GeoTransform>",
        -res
    );
    let sources = |band: &str, with_nodata: bool| {
        let mut s = String::new();
        for p in tiles {
            let nodata = nodata_of(p).filter(|_| with_nodata);
            let gt = p.job.scene.geotransform;
            let (w, h) = (p.job.grid.width, p.job.grid.height);
            let xoff = ((gt[0] - west) / res).round() as u64;
            let yoff = ((north - gt[3]) / res).round() as u64;
            let kind = if nodata.is_some() {
                "ComplexSource"
            } else {
                "SimpleSource"
            };
            let _ = writeln!(s, "    <{kind}>");
            let _ = writeln!(
                s,
                r#"      <SourceFilename relativeToVRT="0">{}</SourceFilename>"#,
                xml_escape(&gdal(&p.pointer.key))
            );
            let _ = writeln!(s, "      <SourceBand>{band}</SourceBand>");
            let _ = writeln!(
                s,
                r#"      <SrcRect xOff="0" yOff="0" xSize="{w}" ySize="{h}"/>"#
            );
            let _ = writeln!(
                s,
                r#"      <DstRect xOff="{xoff}" yOff="{yoff}" xSize="{w}" ySize="{h}"/>"#
            );
            if let Some(v) = nodata {
                let _ = writeln!(s, "      <NODATA>{}</NODATA>", nodata_text(v));
            }
            let _ = writeln!(s, "    </{kind}>");
        }
        s
    };
    for band in 1..=spec.bands {
        let _ = writeln!(
            x,
            r#"  <VRTRasterBand dataType="{}" band="{band}">"#,
            spec.dtype
        );
        if let Some(v) = shared {
            let _ = writeln!(x, "    <NoDataValue>{}</NoDataValue>", nodata_text(v));
        }
        x.push_str(&sources(&band.to_string(), true));
        let _ = writeln!(x, "  </VRTRasterBand>");
    }
    if shared.is_none() {
        let _ = writeln!(x, "  <MaskBand>");
        let _ = writeln!(x, r#"  <VRTRasterBand dataType="Byte">"#);
        x.push_str(&sources("mask,1", false));
        let _ = writeln!(x, "  </VRTRasterBand>");
        let _ = writeln!(x, "  </MaskBand>");
    }
    x.push_str("</VRTDataset>\n");
    Ok((x, width, height))
}

fn nodata_text(v: f64) -> String {
    if v.is_nan() {
        "nan".to_owned()
    } else {
        format!("{v}")
    }
}

#[cfg(test)]
mod tests {
    use super::{quadkey, quadkeys};

    #[test]
    fn quadkeys_are_bing_s() {
        // The Bing Maps example: tile (3, 5) at zoom 3 is `213`.
        assert_eq!(quadkey(3, 5, 3), "213");
        assert_eq!(quadkey(0, 0, 1), "0");
        assert_eq!(quadkey(1, 1, 1), "3");
        // A box around (9°E, 45°N) at zoom 4: one tile, x 8, y 5.
        assert_eq!(quadkeys([8.9, 44.9, 9.1, 45.1], 4), vec![quadkey(8, 5, 4)]);
        // Across the antimeridian at zoom 1: both columns.
        assert_eq!(quadkeys([179.0, 10.0, -179.0, 11.0], 1), vec!["1", "0"]);
    }
}

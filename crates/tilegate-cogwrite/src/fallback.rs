//! The GDAL fallback: tiles in `/vsimem/`, a VRT that places each tile by its window, and
//! GDAL's COG driver (`CreateCopy`) to re-encode everything. Slower (every block is
//! recompressed) but it takes any tile GDAL can read.
//!
//! The VRT is written as XML rather than with `GDALBuildVRT`: BuildVRT positions sources by
//! their georeferencing, while tilegate knows each tile's place exactly — its window — and a
//! tile without georeferencing must not land at the origin. No `unsafe` is needed: the `gdal`
//! crate wraps every call used here.

use crate::error::AssembleError;
use crate::layout::LaidOut;
use crate::tiff;
use crate::tile::{self, COMPRESSION_DEFLATE, COMPRESSION_DEFLATE_OLD};
use crate::{AssemblyPath, Resampling, SceneCog, SceneSpec, TileInput};
use gdal::Metadata as _;
use gdal::raster::RasterCreationOptions;
use gdal::{Dataset, DriverManager};
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};

/// Removes everything under a `/vsimem/` directory when dropped, on success and on error.
struct MemDir(String);

impl Drop for MemDir {
    fn drop(&mut self) {
        if let Ok(files) = gdal::vsi::read_dir(&self.0, true) {
            for f in files {
                let _ = gdal::vsi::unlink_mem_file(std::path::Path::new(&self.0).join(f));
            }
        }
    }
}

/// A `/vsimem/` directory no other call uses: `/vsimem/` is process-global (NOTES.md).
fn unique_dir() -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    format!(
        "/vsimem/tilegate-cogwrite-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

/// GDAL COG creation-option value for a TIFF compression code (libtiff `tiff.h`).
fn compress_name(code: u16) -> &'static str {
    match code {
        1 => "NONE",
        5 => "LZW",
        7 => "JPEG",
        COMPRESSION_DEFLATE | COMPRESSION_DEFLATE_OLD => "DEFLATE",
        34887 => "LERC",
        34925 => "LZMA",
        50000 => "ZSTD",
        50001 => "WEBP",
        _ => "DEFLATE",
    }
}

fn xml_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            c => out.push(c),
        }
    }
    out
}

/// Whether `band`'s mask is one mask shared by all bands (`GMF_PER_DATASET`), not one derived
/// from nodata or an alpha band: the kind tiles carry as an internal mask and the scene
/// rebuilds from them.
pub fn has_dataset_mask(
    band: &gdal::raster::RasterBand<'_>,
) -> Result<bool, gdal::errors::GdalError> {
    let flags = band.mask_flags()?;
    Ok(flags.is_per_dataset() && !flags.is_alpha() && !flags.is_nodata())
}

/// One `SimpleSource` per tile for VRT band `source_band` (`1`, or `mask,1` for a tile's
/// dataset mask), each at its window.
fn place_sources(
    vrt: &mut String,
    spec: &SceneSpec,
    ordered: &[TileInput],
    paths: &[String],
    source_band: &str,
) {
    for (t, path) in ordered.iter().zip(paths) {
        let r = spec
            .grid
            .rect(t.window)
            .expect("ordered tiles lie in the grid");
        let _ = write!(
            vrt,
            r#"<SimpleSource><SourceFilename relativeToVRT="0">{}</SourceFilename><SourceBand>{source_band}</SourceBand><SrcRect xOff="0" yOff="0" xSize="{w}" ySize="{h}"/><DstRect xOff="{x}" yOff="{y}" xSize="{w}" ySize="{h}"/></SimpleSource>"#,
            xml_escape(path),
            w = r.width,
            h = r.height,
            x = r.x,
            y = r.y
        );
    }
}

/// Assemble through GDAL: VRT of the tiles → COG driver, with the first tile's compression and
/// predictor, BLOCKSIZE = the window, and the spec's resampling. The tiles need not be
/// block-compatible; they must cover the grid (checked by the caller or here).
pub fn assemble_with_gdal(
    spec: &SceneSpec,
    tiles: &[TileInput],
) -> Result<SceneCog, AssembleError> {
    crate::check_spec(spec)?;
    let ordered = crate::order_tiles(spec, tiles.iter())?;
    if let Some(t) = ordered
        .iter()
        .find(|t| matches!(tiff::parse(&t.bytes), Err(tiff::ParseError::NotTiff)))
    {
        return Err(AssembleError::NotATiff { window: t.window });
    }
    let grid = spec.grid;
    let dir = MemDir(unique_dir());
    let mut paths = Vec::with_capacity(ordered.len());
    for t in &ordered {
        let path = format!("{}/{}.tif", dir.0, t.window);
        gdal::vsi::create_mem_file(&path, t.bytes.to_vec()).map_err(AssembleError::gdal(
            format!("write tile {} to {path}", t.window),
        ))?;
        paths.push(path);
    }
    // The first tile's codec and predictor, if this crate can read its layout.
    let (compression, predictor) = tile::read_layout(ordered[0].window, &ordered[0].bytes)
        .map_or((COMPRESSION_DEFLATE, 1), |l| {
            (l.format.compression, l.format.predictor)
        });

    let origin = Dataset::open(&paths[0]).map_err(AssembleError::gdal(format!(
        "open tile {}",
        ordered[0].window
    )))?;
    let mut vrt = String::new();
    let _ = write!(
        vrt,
        r#"<VRTDataset rasterXSize="{}" rasterYSize="{}">"#,
        grid.width, grid.height
    );
    if !spec.scene.crs_wkt.is_empty() {
        let _ = write!(vrt, "<SRS>{}</SRS>", xml_escape(&spec.scene.crs_wkt));
    }
    let gt = spec.scene.geotransform;
    let _ = write!(
        vrt,
        "<GeoTransform>{:e},{:e},{:e},{:e},{:e},{:e}</GeoTransform>",
        gt[0], gt[1], gt[2], gt[3], gt[4], gt[5]
    );
    // Dataset metadata that describes the data (the tiles carry only that, never statistics).
    if let Some(v) = origin.metadata_item("AREA_OR_POINT", "") {
        let _ = write!(
            vrt,
            r#"<Metadata><MDI key="AREA_OR_POINT">{}</MDI></Metadata>"#,
            xml_escape(&v)
        );
    }
    // One mask for all bands (GMF_PER_DATASET), placed tile by tile like the pixels.
    let dataset_mask = origin
        .rasterband(1)
        .and_then(|b| has_dataset_mask(&b))
        .unwrap_or(false);
    if dataset_mask {
        vrt.push_str(r#"<MaskBand><VRTRasterBand dataType="Byte">"#);
        place_sources(&mut vrt, spec, &ordered, &paths, "mask,1");
        vrt.push_str("</VRTRasterBand></MaskBand>");
    }
    let mut paletted = false;
    for b in 1..=origin.raster_count() {
        let band = origin.rasterband(b).map_err(AssembleError::gdal(format!(
            "read band {b} of the origin tile"
        )))?;
        let _ = write!(
            vrt,
            r#"<VRTRasterBand dataType="{}" band="{b}">"#,
            band.band_type().name()
        );
        // The tiles' nodata, not the source's: a recipe may have changed it.
        if let Some(nd) = band.no_data_value() {
            let nd = if nd.is_nan() {
                "nan".to_owned()
            } else {
                format!("{nd:e}")
            };
            let _ = write!(vrt, "<NoDataValue>{nd}</NoDataValue>");
        }
        let _ = write!(
            vrt,
            "<ColorInterp>{}</ColorInterp>",
            xml_escape(&band.color_interpretation().name())
        );
        if let Some(o) = band.offset() {
            let _ = write!(vrt, "<Offset>{o:e}</Offset>");
        }
        if let Some(s) = band.scale() {
            let _ = write!(vrt, "<Scale>{s:e}</Scale>");
        }
        let unit = band.unit();
        if !unit.is_empty() {
            let _ = write!(vrt, "<UnitType>{}</UnitType>", xml_escape(&unit));
        }
        if let Ok(d) = band.description()
            && !d.is_empty()
        {
            let _ = write!(vrt, "<Description>{}</Description>", xml_escape(&d));
        }
        if let Some(table) = band.color_table() {
            paletted = true;
            vrt.push_str("<ColorTable>");
            for i in 0..table.entry_count() {
                if let Some(e) = table.entry_as_rgb(i) {
                    let _ = write!(
                        vrt,
                        r#"<Entry c1="{}" c2="{}" c3="{}" c4="{}"/>"#,
                        e.r, e.g, e.b, e.a
                    );
                }
            }
            vrt.push_str("</ColorTable>");
        }
        place_sources(&mut vrt, spec, &ordered, &paths, &b.to_string());
        vrt.push_str("</VRTRasterBand>");
    }
    vrt.push_str("</VRTDataset>");
    drop(origin);

    let vrt_path = format!("{}/scene.vrt", dir.0);
    gdal::vsi::create_mem_file(&vrt_path, vrt.into_bytes())
        .map_err(AssembleError::gdal("write the scene VRT"))?;
    let src = Dataset::open(&vrt_path).map_err(AssembleError::gdal("open the scene VRT"))?;
    let driver = DriverManager::get_driver_by_name("COG")
        .map_err(AssembleError::gdal("find the COG driver"))?;
    let predictor = match predictor {
        2 => "STANDARD",
        3 => "FLOATING_POINT",
        _ => "NO",
    };
    let resampling = match spec.resampling {
        // An average of palette indices is a class that does not exist.
        Resampling::Average if paletted => {
            tracing::info!("paletted scene: overviews by nearest, never average");
            "NEAREST"
        }
        Resampling::Average => "AVERAGE",
        Resampling::Nearest => "NEAREST",
    };
    let options = [
        format!("COMPRESS={}", compress_name(compression)),
        format!("PREDICTOR={predictor}"),
        format!("BLOCKSIZE={}", grid.window),
        format!("RESAMPLING={resampling}"),
        format!(
            "BIGTIFF={}",
            if spec.force_bigtiff {
                "YES"
            } else {
                "IF_NEEDED"
            }
        ),
        "NUM_THREADS=ALL_CPUS".to_owned(),
    ];
    let options = RasterCreationOptions::from_iter(options.iter().map(String::as_str));
    let out_path = format!("{}/scene.tif", dir.0);
    let out = src
        .create_copy(&driver, &out_path, &options)
        .map_err(AssembleError::gdal("write the scene COG"))?;
    drop(out);
    drop(src);
    let bytes = gdal::vsi::get_vsi_mem_file_bytes_owned(&out_path)
        .map_err(AssembleError::gdal("read back the scene COG"))?;
    let parsed = tiff::parse(&bytes).map_err(|e| AssembleError::GdalOutput {
        detail: format!("{e:?}"),
    })?;
    // Overviews are the reduced-resolution IFDs (NewSubfileType bit 0), not masks.
    let overview_levels = parsed
        .ifds
        .iter()
        .skip(1)
        .filter(|ifd| {
            ifd.get(254)
                .and_then(|x| x.uints(parsed.endian))
                .is_some_and(|v| v.first().is_some_and(|v| v & 1 == 1 && v & 4 == 0))
        })
        .count() as u32;
    Ok(SceneCog {
        file: LaidOut::whole(bytes, parsed.bigtiff),
        overview_levels,
        path: AssemblyPath::GdalFallback,
        fallback_reason: None,
        reduced_windows_reused: 0,
    })
}

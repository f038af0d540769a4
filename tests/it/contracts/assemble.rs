//! Scene assembly tests: tiles cut from GDAL-written scenes by GDAL's COG driver, assembled by
//! `tilegate-cogwrite`, then checked against the source and against `gdal_translate -of COG`
//! (GDAL's validator, LAYOUT=COG, pixels, georeferencing, overview sizes and values).

use bytes::Bytes;
use gdal::raster::{Buffer, GdalType, RasterCreationOptions};
use gdal::spatial_ref::SpatialRef;
use gdal::{Dataset, DriverManager, Metadata};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;
use tilegate_cogwrite::{
    AssemblyPath, Resampling, SceneCog, SceneSpec, TileInput, assemble, assemble_with_gdal,
};
use tilegate_core::Grid;
use tilegate_core::source::SceneMeta;

const GEOTRANSFORM: [f64; 6] = [500_000.0, 10.0, 0.0, 4_000_000.0, 0.0, -10.0];

/// Sample types used by the cases.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Dt {
    Byte,
    UInt16,
    Int16,
    Float32,
}

impl Dt {
    fn name(self) -> &'static str {
        match self {
            Self::Byte => "Byte",
            Self::UInt16 => "UInt16",
            Self::Int16 => "Int16",
            Self::Float32 => "Float32",
        }
    }
}

/// A source scene written by GDAL from deterministic pixels.
struct Scene {
    path: PathBuf,
    width: u32,
    height: u32,
    bands: u32,
    dt: Dt,
    nodata: Option<f64>,
    /// Extra VRT band elements for the tiles (metadata, offset, scale).
    band_xml: String,
}

/// Smooth terrain-like values plus a little texture, valid for every case's type.
fn pixel(dt: Dt, x: u32, y: u32, band: u32) -> f64 {
    let (xf, yf) = (f64::from(x), f64::from(y));
    let smooth =
        (xf / 37.0).sin() * 0.5 + (yf / 23.0).cos() * 0.3 + ((xf + yf) / 101.0).sin() * 0.2;
    let texture = f64::from((x * 7 + y * 13 + band * 5) % 17);
    match dt {
        Dt::Byte => ((smooth + 1.0) * 100.0 + texture + f64::from(band) * 10.0).floor(),
        Dt::UInt16 => (smooth * 2000.0 + 3000.0 + texture * 3.0).floor(),
        Dt::Int16 => (smooth * 1500.0 + texture * 3.0 - 200.0).floor(),
        Dt::Float32 => f64::from((smooth * 40.0 + texture * 0.37) as f32),
    }
}

/// Pixels that are nodata in the nodata cases: a square hole (whole overview pixels become
/// nodata) and a sprinkle (partial averages).
fn is_hole(x: u32, y: u32) -> bool {
    (100..230).contains(&x) && (60..200).contains(&y) || (x * 31 + y * 17).is_multiple_of(23)
}

fn write_scene_typed<T: GdalType + Copy>(
    path: &Path,
    width: u32,
    height: u32,
    bands: u32,
    nodata: Option<f64>,
    value: &(dyn Fn(u32, u32, u32) -> f64 + Sync),
) {
    let driver = DriverManager::get_driver_by_name("GTiff").unwrap();
    let opts = RasterCreationOptions::from_iter(["TILED=YES", "COMPRESS=NONE"]);
    let mut ds = driver
        .create_with_band_type_with_options::<T, _>(
            path,
            width as usize,
            height as usize,
            bands as usize,
            &opts,
        )
        .unwrap();
    ds.set_geo_transform(&GEOTRANSFORM).unwrap();
    ds.set_spatial_ref(&SpatialRef::from_epsg(32633).unwrap())
        .unwrap();
    // Strips of 256 rows keep memory small for the 10240² scene.
    const STRIP: u32 = 256;
    for b in 1..=bands {
        let mut band = ds.rasterband(b as usize).unwrap();
        for y0 in (0..height).step_by(STRIP as usize) {
            let rows = STRIP.min(height - y0);
            let mut data = Vec::with_capacity((width * rows) as usize);
            for y in y0..y0 + rows {
                for x in 0..width {
                    match nodata {
                        Some(nd) if is_hole(x, y) => data.push(nd),
                        _ => data.push(value(x, y, b)),
                    }
                }
            }
            let size = (width as usize, rows as usize);
            band.write((0, y0 as isize), size, &mut Buffer::new(size, data))
                .unwrap();
        }
        band.set_no_data_value(nodata).unwrap();
    }
}

fn write_scene(
    dir: &Path,
    width: u32,
    height: u32,
    bands: u32,
    dt: Dt,
    nodata: Option<f64>,
) -> Scene {
    write_scene_with(dir, width, height, bands, dt, nodata, &move |x, y, b| {
        pixel(dt, x, y, b)
    })
}

fn write_scene_with(
    dir: &Path,
    width: u32,
    height: u32,
    bands: u32,
    dt: Dt,
    nodata: Option<f64>,
    value: &(dyn Fn(u32, u32, u32) -> f64 + Sync),
) -> Scene {
    let path = dir.join("source.tif");
    match dt {
        Dt::Byte => write_scene_typed::<u8>(&path, width, height, bands, nodata, value),
        Dt::UInt16 => write_scene_typed::<u16>(&path, width, height, bands, nodata, value),
        Dt::Int16 => write_scene_typed::<i16>(&path, width, height, bands, nodata, value),
        Dt::Float32 => write_scene_typed::<f32>(&path, width, height, bands, nodata, value),
    }
    Scene {
        path,
        width,
        height,
        bands,
        dt,
        nodata,
        band_xml: String::new(),
    }
}

fn unique_vsimem(stem: &str) -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    format!(
        "/vsimem/assemble-test-{}-{stem}-{}.tif",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

fn xml_escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// Cut one window like `gdal_translate -srcwin x y w h -of <driver> -co …`: GDAL's translate
/// builds exactly such a VRT (shifted geotransform, same SRS and nodata), then CreateCopy.
fn cut_window(
    scene: &Scene,
    grid: Grid,
    window: tilegate_core::Window,
    driver: &str,
    options: &[String],
) -> Bytes {
    let src = Dataset::open(&scene.path).unwrap();
    let r = grid.rect(window).unwrap();
    let gt = GEOTRANSFORM;
    let mut vrt = format!(
        r#"<VRTDataset rasterXSize="{}" rasterYSize="{}"><SRS>{}</SRS><GeoTransform>{:e},{:e},{:e},{:e},{:e},{:e}</GeoTransform>"#,
        r.width,
        r.height,
        xml_escape(&src.projection()),
        gt[0] + f64::from(r.x) * gt[1],
        gt[1],
        gt[2],
        gt[3] + f64::from(r.y) * gt[5],
        gt[4],
        gt[5]
    );
    for b in 1..=scene.bands {
        let band = src.rasterband(b as usize).unwrap();
        vrt.push_str(&format!(
            r#"<VRTRasterBand dataType="{}" band="{b}">"#,
            scene.dt.name()
        ));
        if let Some(nd) = scene.nodata {
            vrt.push_str(&format!("<NoDataValue>{nd:e}</NoDataValue>"));
        }
        vrt.push_str(&format!(
            "<ColorInterp>{}</ColorInterp>",
            band.color_interpretation().name()
        ));
        vrt.push_str(&scene.band_xml);
        vrt.push_str(&format!(
            r#"<SimpleSource><SourceFilename relativeToVRT="0">{}</SourceFilename><SourceBand>{b}</SourceBand><SrcRect xOff="{}" yOff="{}" xSize="{w}" ySize="{h}"/><DstRect xOff="0" yOff="0" xSize="{w}" ySize="{h}"/></SimpleSource></VRTRasterBand>"#,
            xml_escape(&scene.path.display().to_string()),
            r.x,
            r.y,
            w = r.width,
            h = r.height
        ));
    }
    vrt.push_str("</VRTDataset>");
    let window_ds = Dataset::open(&vrt).unwrap();
    let out = unique_vsimem("tile");
    let opts = RasterCreationOptions::from_iter(options.iter().map(String::as_str));
    let drv = DriverManager::get_driver_by_name(driver).unwrap();
    drop(window_ds.create_copy(&drv, &out, &opts).unwrap());
    Bytes::from(gdal::vsi::get_vsi_mem_file_bytes_owned(&out).unwrap())
}

/// The tile options of tilegate's workers: `-of COG -co COMPRESS=DEFLATE -co PREDICTOR=YES
/// -co BLOCKSIZE=<window> -co OVERVIEWS=NONE`.
fn cog_options(window: u32) -> Vec<String> {
    vec![
        "COMPRESS=DEFLATE".into(),
        "PREDICTOR=YES".into(),
        format!("BLOCKSIZE={window}"),
        "OVERVIEWS=NONE".into(),
    ]
}

/// Every window's tile, cut on two threads; `options_for` picks driver and options per window.
fn make_tiles(
    scene: &Scene,
    grid: Grid,
    options_for: &(dyn Fn(tilegate_core::Window) -> (&'static str, Vec<String>) + Sync),
) -> Vec<TileInput> {
    let windows: Vec<_> = grid.windows().collect();
    let half = windows.len().div_ceil(2);
    std::thread::scope(|s| {
        let handles: Vec<_> = windows
            .chunks(half.max(1))
            .map(|chunk| {
                s.spawn(move || {
                    chunk
                        .iter()
                        .map(|&w| {
                            let (driver, opts) = options_for(w);
                            TileInput {
                                window: w,
                                bytes: cut_window(scene, grid, w, driver, &opts),
                            }
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().unwrap())
            .collect()
    })
}

fn spec_for(scene: &Scene, window: u32) -> SceneSpec {
    let src = Dataset::open(&scene.path).unwrap();
    SceneSpec::new(
        Grid::new(scene.width, scene.height, window).unwrap(),
        SceneMeta {
            width: scene.width,
            height: scene.height,
            bands: scene.bands,
            dtype: scene.dt.name().into(),
            crs_wkt: src.projection(),
            geotransform: src.geo_transform().unwrap(),
            nodata: scene.nodata,
            placement: None,
            datetime: None,
        },
    )
}

/// One band of a dataset (or of one of its overviews) as f64.
fn read_band(ds: &Dataset, band: u32, overview: Option<usize>) -> (usize, usize, Vec<f64>) {
    let b = ds.rasterband(band as usize).unwrap();
    let b = match overview {
        Some(i) => b.overview(i).unwrap(),
        None => b,
    };
    let (w, h) = b.size();
    let buf = b.read_as::<f64>((0, 0), (w, h), (w, h), None).unwrap();
    (w, h, buf.into_shape_and_vec().1)
}

fn overview_sizes_of(ds: &Dataset) -> Vec<(usize, usize)> {
    let b = ds.rasterband(1).unwrap();
    (0..b.overview_count().unwrap() as usize)
        .map(|i| b.overview(i).unwrap().size())
        .collect()
}

fn same(a: f64, b: f64) -> bool {
    a == b || (a.is_nan() && b.is_nan())
}

/// The test's own reference for one overview step, written independently of the crate from
/// the rule GDAL 3.6 follows: output pixel `i` covers source `[i·r, (i+1)·r)` with overlap
/// weights, nodata pixels excluded (a NaN that is not nodata propagates), integers rounded
/// half away from zero.
fn reference_average(
    src: &[f64],
    sw: usize,
    sh: usize,
    dw: usize,
    dh: usize,
    nodata: Option<f64>,
    dt: Dt,
) -> Vec<f64> {
    let weights = |n_src: usize, n_dst: usize, i: usize| -> Vec<(usize, f64)> {
        let r = n_src as f64 / n_dst as f64;
        let (lo, hi) = (i as f64 * r, (i + 1) as f64 * r);
        let mut v = Vec::new();
        for s in 0..n_src {
            let w = (hi.min(s as f64 + 1.0) - lo.max(s as f64)).max(0.0);
            if w > 1e-8 {
                v.push((s, w));
            }
        }
        v
    };
    let xw: Vec<_> = (0..dw).map(|i| weights(sw, dw, i)).collect();
    let yw: Vec<_> = (0..dh).map(|j| weights(sh, dh, j)).collect();
    let mut out = Vec::with_capacity(dw * dh);
    for wy in &yw {
        for wx in &xw {
            let (mut sum, mut weight) = (0.0, 0.0);
            for &(sy, ky) in wy {
                for &(sx, kx) in wx {
                    let v = src[sy * sw + sx];
                    if nodata.is_some_and(|nd| same(v, nd)) {
                        continue;
                    }
                    sum += v * ky * kx;
                    weight += ky * kx;
                }
            }
            out.push(if weight == 0.0 {
                nodata.unwrap_or(if dt == Dt::Float32 { f64::NAN } else { 0.0 })
            } else {
                let m = sum / weight;
                match dt {
                    Dt::Float32 => f64::from(m as f32),
                    _ => m.round(),
                }
            });
        }
    }
    out
}

fn write_out(dir: &Path, name: &str, cog: &SceneCog) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, cog.file.to_vec()).unwrap();
    p
}

/// `gdal_translate -of COG -co COMPRESS=DEFLATE -co BLOCKSIZE=<w> -co RESAMPLING=AVERAGE` of
/// the source: the reference for overview sizes and the first level's values.
fn gdal_reference(scene: &Scene, dir: &Path, window: u32) -> Dataset {
    let src = Dataset::open(&scene.path).unwrap();
    let out = dir.join("gdal-reference.tif");
    let opts = RasterCreationOptions::from_iter([
        "COMPRESS=DEFLATE".to_owned(),
        format!("BLOCKSIZE={window}"),
        "RESAMPLING=AVERAGE".to_owned(),
        "NUM_THREADS=ALL_CPUS".to_owned(),
    ]);
    let drv = DriverManager::get_driver_by_name("COG").unwrap();
    drop(src.create_copy(&drv, &out, &opts).unwrap());
    Dataset::open(&out).unwrap()
}

/// Everything a scene COG must satisfy against its source.
fn check_scene(scene: &Scene, dir: &Path, path: &Path, window: u32, check_overview_values: bool) {
    tilegate_tests::validate_cog(path).unwrap();
    let ds = Dataset::open(path).unwrap();
    assert_eq!(
        ds.metadata_item("LAYOUT", "IMAGE_STRUCTURE").as_deref(),
        Some("COG"),
        "gdalinfo must report LAYOUT=COG"
    );
    let src = Dataset::open(&scene.path).unwrap();
    assert_eq!(ds.raster_size(), src.raster_size());
    assert_eq!(ds.raster_count(), src.raster_count());
    assert_eq!(ds.geo_transform().unwrap(), src.geo_transform().unwrap());
    assert_eq!(ds.projection(), src.projection());
    assert!(!ds.projection().is_empty());
    for b in 1..=scene.bands {
        let band = ds.rasterband(b as usize).unwrap();
        match (band.no_data_value(), scene.nodata) {
            (Some(a), Some(b)) => assert!(same(a, b), "nodata {a} vs {b}"),
            (a, b) => assert_eq!(a, b),
        }
        assert_eq!(band.block_size(), (window as usize, window as usize));
        assert_eq!(
            band.color_interpretation(),
            src.rasterband(b as usize).unwrap().color_interpretation()
        );
        let (_, _, got) = read_band(&ds, b, None);
        let (_, _, want) = read_band(&src, b, None);
        let bad = got
            .iter()
            .zip(&want)
            .filter(|(g, w)| !same(**g, **w))
            .count();
        assert_eq!(bad, 0, "band {b}: {bad} full-resolution pixels differ");
    }
    let reference = gdal_reference(scene, dir, window);
    assert_eq!(
        overview_sizes_of(&ds),
        overview_sizes_of(&reference),
        "overview sizes must equal gdal_translate -of COG's"
    );
    if !check_overview_values {
        return;
    }
    for b in 1..=scene.bands {
        let (mut sw, mut sh, mut prev) = read_band(&src, b, None);
        for (i, (dw, dh)) in overview_sizes_of(&ds).into_iter().enumerate() {
            let want = reference_average(&prev, sw, sh, dw, dh, scene.nodata, scene.dt);
            let (_, _, got) = read_band(&ds, b, Some(i));
            let bad = got
                .iter()
                .zip(&want)
                .filter(|(g, w)| !same(**g, **w))
                .count();
            assert_eq!(
                bad, 0,
                "band {b} overview {i}: {bad} pixels differ from the reference"
            );
            if i == 0 {
                let (_, _, gdal) = read_band(&reference, b, Some(0));
                let worst = got
                    .iter()
                    .zip(&gdal)
                    .filter(|(g, r)| !same(**g, **r))
                    .map(|(g, r)| (g - r).abs())
                    .fold(0.0, f64::max);
                assert!(
                    worst <= 1.0,
                    "band {b}: first overview is {worst} from GDAL's"
                );
            }
            (sw, sh, prev) = (dw, dh, got);
        }
    }
}

/// Cut tiles with the workers' options, assemble natively, check everything.
fn native_case(width: u32, height: u32, window: u32, bands: u32, dt: Dt, nodata: Option<f64>) {
    native_case_compressed(width, height, window, bands, dt, nodata, "DEFLATE");
}

fn native_case_compressed(
    width: u32,
    height: u32,
    window: u32,
    bands: u32,
    dt: Dt,
    nodata: Option<f64>,
    compress: &str,
) {
    let dir = tilegate_tests::tempdir();
    let scene = write_scene(dir.path(), width, height, bands, dt, nodata);
    let spec = spec_for(&scene, window);
    let mut options = cog_options(window);
    options[0] = format!("COMPRESS={compress}");
    let tiles = make_tiles(&scene, spec.grid, &|_| ("COG", options.clone()));
    let cog = assemble(&spec, tiles).unwrap();
    assert_eq!(
        cog.path,
        AssemblyPath::CopiedBlocks,
        "{:?}",
        cog.fallback_reason
    );
    assert!(!cog.bigtiff());
    let expected = tilegate_cogwrite::overview_sizes(width, height, window).len() as u32;
    assert_eq!(cog.overview_levels, expected);
    let path = write_out(dir.path(), "scene.tif", &cog);
    check_scene(&scene, dir.path(), &path, window, true);
}

#[test]
fn uint16_single_band_exact_grid() {
    native_case(1024, 1024, 512, 1, Dt::UInt16, None);
}

#[test]
fn scene_not_a_multiple_of_the_window() {
    // 1300×900 on 256: partial last column (20 px) and row (132 px), and odd overview sizes
    // (325×225 → 162×112) that need GDAL's fractional weights.
    native_case(1300, 900, 256, 1, Dt::UInt16, None);
}

#[test]
fn byte_three_bands() {
    native_case(1100, 700, 256, 3, Dt::Byte, None);
}

#[test]
fn int16_with_nodata() {
    native_case(1300, 900, 256, 1, Dt::Int16, Some(-9999.0));
}

#[test]
fn float32_with_nodata_native_floating_point_predictor() {
    // PREDICTOR=YES on Float32 is predictor 3, decoded and re-applied natively.
    native_case(1000, 700, 256, 1, Dt::Float32, Some(-9999.0));
    native_case(1000, 700, 256, 1, Dt::Float32, Some(f64::NAN));
}

#[test]
fn tiles_define_bands_type_and_nodata_not_the_source() {
    // An NDVI-like job: the source (as planned) is 4-band UInt16 without nodata, the tiles are
    // 1-band Float32 with nodata -9999. The scene follows the tiles.
    let dir = tilegate_tests::tempdir();
    let scene = write_scene(dir.path(), 700, 600, 1, Dt::Float32, Some(-9999.0));
    let mut spec = spec_for(&scene, 256);
    spec.scene.bands = 4;
    spec.scene.dtype = "UInt16".into();
    spec.scene.nodata = None;
    let tiles = make_tiles(&scene, spec.grid, &|_| ("COG", cog_options(256)));
    let cog = assemble(&spec, tiles.clone()).unwrap();
    assert_eq!(cog.path, AssemblyPath::CopiedBlocks);
    let path = write_out(dir.path(), "scene.tif", &cog);
    check_scene(&scene, dir.path(), &path, 256, true);
    // The fallback agrees.
    let cog = assemble_with_gdal(&spec, &tiles).unwrap();
    let path = write_out(dir.path(), "fallback.tif", &cog);
    check_scene(&scene, dir.path(), &path, 256, false);
}

#[test]
fn band_metadata_is_kept_and_tile_statistics_dropped() {
    let dir = tilegate_tests::tempdir();
    let mut scene = write_scene(dir.path(), 700, 600, 1, Dt::UInt16, None);
    // What GDAL's COG driver writes into GDAL_METADATA: per-window statistics, band scale
    // and offset, and an ordinary band item.
    scene.band_xml = concat!(
        "<Offset>1.5</Offset><Scale>0.25</Scale>",
        r#"<Metadata><MDI key="STATISTICS_MEAN">123.4</MDI><MDI key="STATISTICS_MAXIMUM">999</MDI>"#,
        r#"<MDI key="UNITS_NOTE">decimetres</MDI></Metadata>"#
    )
    .to_owned();
    let spec = spec_for(&scene, 256);
    let tiles = make_tiles(&scene, spec.grid, &|_| ("COG", cog_options(256)));
    let tile = dir.path().join("tile.tif");
    std::fs::write(&tile, &tiles[0].bytes).unwrap();
    let t = Dataset::open(&tile).unwrap();
    let tb = t.rasterband(1).unwrap();
    assert!(
        tb.metadata_item("STATISTICS_MEAN", "").is_some(),
        "the tiles carry statistics"
    );
    let cog = assemble(&spec, tiles).unwrap();
    assert_eq!(cog.path, AssemblyPath::CopiedBlocks);
    let path = write_out(dir.path(), "scene.tif", &cog);
    tilegate_tests::validate_cog(&path).unwrap();
    let ds = Dataset::open(&path).unwrap();
    let b = ds.rasterband(1).unwrap();
    assert_eq!(b.offset(), Some(1.5));
    assert_eq!(b.scale(), Some(0.25));
    assert_eq!(
        b.metadata_item("UNITS_NOTE", "").as_deref(),
        Some("decimetres")
    );
    assert_eq!(b.metadata_item("STATISTICS_MEAN", ""), None);
    assert_eq!(b.metadata_item("STATISTICS_MAXIMUM", ""), None);
}

#[test]
fn single_window_scene_has_no_overviews() {
    native_case(300, 200, 512, 1, Dt::UInt16, None);
}

#[test]
fn lzw_and_zstd_tiles_copy_natively() {
    native_case_compressed(1300, 900, 256, 1, Dt::Int16, Some(-9999.0), "LZW");
    native_case_compressed(1000, 700, 256, 2, Dt::UInt16, None, "ZSTD");
}

#[test]
fn nearest_resampling_picks_gdals_pixels() {
    let dir = tilegate_tests::tempdir();
    let scene = write_scene(dir.path(), 1300, 901, 1, Dt::UInt16, None);
    let mut spec = spec_for(&scene, 256);
    spec.resampling = Resampling::Nearest;
    let tiles = make_tiles(&scene, spec.grid, &|_| ("COG", cog_options(256)));
    let cog = assemble(&spec, tiles).unwrap();
    assert_eq!(cog.path, AssemblyPath::CopiedBlocks);
    let path = write_out(dir.path(), "scene.tif", &cog);
    tilegate_tests::validate_cog(&path).unwrap();
    // GDAL's own nearest overviews of the source are the reference, every level exactly.
    let src = Dataset::open(&scene.path).unwrap();
    let opts = RasterCreationOptions::from_iter(["BLOCKSIZE=256", "RESAMPLING=NEAREST"]);
    let reference_path = dir.path().join("nearest.tif");
    let drv = DriverManager::get_driver_by_name("COG").unwrap();
    drop(src.create_copy(&drv, &reference_path, &opts).unwrap());
    let reference = Dataset::open(&reference_path).unwrap();
    let ds = Dataset::open(&path).unwrap();
    assert_eq!(overview_sizes_of(&ds), overview_sizes_of(&reference));
    for i in 0..overview_sizes_of(&ds).len() {
        assert_eq!(
            read_band(&ds, 1, Some(i)).2,
            read_band(&reference, 1, Some(i)).2,
            "overview {i}"
        );
    }
}

#[test]
fn forced_bigtiff_validates() {
    let dir = tilegate_tests::tempdir();
    let scene = write_scene(dir.path(), 1300, 900, 1, Dt::Int16, Some(-9999.0));
    let mut spec = spec_for(&scene, 256);
    spec.force_bigtiff = true;
    let tiles = make_tiles(&scene, spec.grid, &|_| ("COG", cog_options(256)));
    let cog = assemble(&spec, tiles).unwrap();
    assert!(cog.bigtiff());
    assert_eq!(cog.path, AssemblyPath::CopiedBlocks);
    assert_eq!(&cog.file.to_vec()[..4], b"II\x2b\x00", "BigTIFF header");
    let path = write_out(dir.path(), "scene.tif", &cog);
    check_scene(&scene, dir.path(), &path, 256, true);
}

#[test]
fn bigtiff_and_big_endian_tiles_copy_natively() {
    // Tiles as BigTIFF big-endian GTiff (no ghost area, no leaders): still one block each, so
    // they are copied; the scene keeps their byte order.
    let dir = tilegate_tests::tempdir();
    let scene = write_scene(dir.path(), 1000, 600, 2, Dt::UInt16, None);
    let spec = spec_for(&scene, 256);
    let tiles = make_tiles(&scene, spec.grid, &|_| {
        (
            "GTiff",
            [
                "TILED=YES",
                "BLOCKXSIZE=256",
                "BLOCKYSIZE=256",
                "COMPRESS=DEFLATE",
                "PREDICTOR=2",
                "BIGTIFF=YES",
                "ENDIANNESS=BIG",
                "INTERLEAVE=BAND",
            ]
            .map(String::from)
            .to_vec(),
        )
    });
    assert_eq!(&tiles[0].bytes[..4], b"MM\x00\x2b");
    let cog = assemble(&spec, tiles).unwrap();
    assert_eq!(
        cog.path,
        AssemblyPath::CopiedBlocks,
        "{:?}",
        cog.fallback_reason
    );
    assert!(
        !cog.bigtiff(),
        "the scene is classic TIFF: it is far below 4 GiB"
    );
    assert_eq!(&cog.file.to_vec()[..4], b"MM\x00\x2a");
    let path = write_out(dir.path(), "scene.tif", &cog);
    check_scene(&scene, dir.path(), &path, 256, true);
}

#[test]
fn fallback_for_other_block_sizes_and_mixed_compression() {
    let dir = tilegate_tests::tempdir();
    let scene = write_scene(dir.path(), 1200, 1100, 1, Dt::UInt16, Some(0.0));
    let spec = spec_for(&scene, 512);
    // 256-pixel blocks inside 512-pixel windows: four blocks per tile, not copyable.
    let tiles = make_tiles(&scene, spec.grid, &|_| ("COG", cog_options(256)));
    let cog = assemble(&spec, tiles).unwrap();
    assert_eq!(cog.path, AssemblyPath::GdalFallback);
    assert!(cog.fallback_reason.as_deref().unwrap().contains("blocks"));
    let path = write_out(dir.path(), "blocks.tif", &cog);
    check_scene(&scene, dir.path(), &path, 512, false);

    // Some windows ZSTD, the rest DEFLATE.
    let tiles = make_tiles(&scene, spec.grid, &|w| {
        let mut o = cog_options(512);
        if (w.row + w.col) % 2 == 1 {
            o[0] = "COMPRESS=ZSTD".into();
        }
        ("COG", o)
    });
    let cog = assemble(&spec, tiles).unwrap();
    assert_eq!(cog.path, AssemblyPath::GdalFallback);
    assert!(
        cog.fallback_reason
            .as_deref()
            .unwrap()
            .contains("compression")
    );
    let path = write_out(dir.path(), "mixed.tif", &cog);
    check_scene(&scene, dir.path(), &path, 512, false);
}

#[test]
fn not_a_tiff_tile_is_a_named_error() {
    let dir = tilegate_tests::tempdir();
    let scene = write_scene(dir.path(), 600, 600, 1, Dt::UInt16, None);
    let spec = spec_for(&scene, 512);
    let mut tiles = make_tiles(&scene, spec.grid, &|_| ("COG", cog_options(512)));
    tiles[2].bytes = Bytes::from_static(b"<html>503 Service Unavailable</html>");
    let err = assemble(&spec, tiles.clone()).unwrap_err();
    assert_eq!(err.reason_code(), "tile-not-a-tiff");
    assert_eq!(err.to_string(), "read tile 0001_0000: not a TIFF file");
    let err = assemble_with_gdal(&spec, &tiles).unwrap_err();
    assert_eq!(err.reason_code(), "tile-not-a-tiff");
}

#[test]
fn missing_truncated_and_wrong_size_tiles_are_named_errors() {
    let dir = tilegate_tests::tempdir();
    let scene = write_scene(dir.path(), 600, 600, 1, Dt::UInt16, None);
    let spec = spec_for(&scene, 512);
    let tiles = make_tiles(&scene, spec.grid, &|_| ("COG", cog_options(512)));

    let mut short = tiles.clone();
    short.remove(1);
    let err = assemble(&spec, short).unwrap_err();
    assert_eq!(err.reason_code(), "tile-missing-window");
    assert!(err.to_string().contains("0000_0001"), "{err}");

    let mut truncated = tiles.clone();
    truncated[3].bytes = truncated[3].bytes.slice(..truncated[3].bytes.len() - 100);
    let err = assemble(&spec, truncated).unwrap_err();
    assert_eq!(err.reason_code(), "tile-corrupt");
    assert!(err.to_string().starts_with("read tile 0001_0001:"), "{err}");

    let mut swapped = tiles;
    swapped.swap(0, 1);
    let (a, b) = (swapped[0].window, swapped[1].window);
    swapped[0].window = b;
    swapped[1].window = a;
    let err = assemble(&spec, swapped).unwrap_err();
    assert_eq!(err.reason_code(), "tile-mismatch");
    assert!(err.to_string().contains("0000_0000"), "{err}");
}

/// 10240×10240 UInt16, 400 tiles of 512: validates and is pixel-equal at full resolution.
#[test]
fn heavy_ten_k_scene() {
    let dir = tilegate_tests::tempdir();
    let t0 = Instant::now();
    // Separable smooth terrain (tables per column and row keep the debug build quick).
    let cols: Vec<f64> = (0..10240)
        .map(|x| (f64::from(x) / 300.0).sin() * 9000.0)
        .collect();
    let rows: Vec<f64> = (0..10240)
        .map(|y| (f64::from(y) / 170.0).cos() * 7000.0)
        .collect();
    let scene = write_scene_with(dir.path(), 10240, 10240, 1, Dt::UInt16, None, &|x, y, _| {
        (cols[x as usize] + rows[y as usize] + 20000.0).floor() + f64::from((x ^ y) % 7)
    });
    let t_src = Instant::now();
    let spec = spec_for(&scene, 512);
    let tiles = make_tiles(&scene, spec.grid, &|_| ("COG", cog_options(512)));
    assert_eq!(tiles.len(), 400);
    let t1 = Instant::now();
    let cog = assemble(&spec, tiles).unwrap();
    let t2 = Instant::now();
    eprintln!(
        "heavy_ten_k_scene: source {:.1?}, 400 tiles {:.1?}, assemble {:.1?} ({} MB, {} overview levels)",
        t_src - t0,
        t1 - t_src,
        t2 - t1,
        cog.file.len() / 1_000_000,
        cog.overview_levels
    );
    assert_eq!(cog.path, AssemblyPath::CopiedBlocks);
    assert_eq!(cog.overview_levels, 5);
    let path = write_out(dir.path(), "scene.tif", &cog);
    tilegate_tests::validate_cog(&path).unwrap();
    let ds = Dataset::open(&path).unwrap();
    assert_eq!(
        ds.metadata_item("LAYOUT", "IMAGE_STRUCTURE").as_deref(),
        Some("COG")
    );
    let read = |ds: &Dataset| {
        ds.rasterband(1)
            .unwrap()
            .read_band_as::<u16>()
            .unwrap()
            .into_shape_and_vec()
            .1
    };
    let src = Dataset::open(&scene.path).unwrap();
    assert!(
        read(&ds) == read(&src),
        "full resolution differs from the source"
    );
    assert_eq!(
        overview_sizes_of(&ds),
        [
            (5120, 5120),
            (2560, 2560),
            (1280, 1280),
            (640, 640),
            (320, 320)
        ]
    );
}

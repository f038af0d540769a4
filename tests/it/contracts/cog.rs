//! COG encoder tests: validator-clean tiles whose pixels equal the source window.

use std::path::{Path, PathBuf};
use std::time::Instant;
use tilegate_cog::{
    CogError, EncodeRequest, NDVI_NODATA, RasterData, SampleOptions, encode_window,
    encode_windows_parallel, probe, read_raster, sample_scene, shifted_geotransform, tiff_layout,
};
use tilegate_core::recipe::{Compression, Operation, Recipe};
use tilegate_core::source::SceneMeta;
use tilegate_core::{Grid, WindowRect};

fn path_str(p: &Path) -> &str {
    p.to_str().expect("utf-8 temp path")
}

/// Write a sample scene and return its path and metadata.
fn scene(dir: &Path, name: &str, opts: &SampleOptions) -> (PathBuf, SceneMeta) {
    let path = dir.join(format!("{name}.tif"));
    let meta = sample_scene(&path, opts).expect("write sample scene");
    (path, meta)
}

fn opts(w: u32, h: u32, bands: u32, dtype: &str, nodata: Option<f64>, seed: u64) -> SampleOptions {
    SampleOptions {
        width: w,
        height: h,
        bands,
        dtype: dtype.to_owned(),
        nodata,
        seed,
    }
}

fn recipe(op: Operation, compression: Compression, window: u32) -> Recipe {
    Recipe {
        operation: op,
        compression,
        window,
    }
}

fn requests(path: &Path, meta: &SceneMeta, recipe: &Recipe) -> Vec<EncodeRequest> {
    let grid = Grid::new(meta.width, meta.height, recipe.window).expect("grid");
    grid.windows()
        .map(|w| EncodeRequest {
            path: path_str(path).to_owned(),
            cache_key: "etag-1".to_owned(),
            scene: meta.clone(),
            recipe: recipe.clone(),
            rect: grid.rect(w).expect("window in grid"),
        })
        .collect()
}

/// Encode every window, write the tiles under `dir`, and return (request, tile path) pairs.
fn encode_all(dir: &Path, reqs: &[EncodeRequest]) -> Vec<(EncodeRequest, PathBuf)> {
    let tiles_dir = dir.join("tiles");
    std::fs::create_dir_all(&tiles_dir).expect("tiles dir");
    let results = encode_windows_parallel(reqs);
    reqs.iter()
        .zip(results)
        .map(|(req, res)| {
            let bytes = res.unwrap_or_else(|e| panic!("encode {:?}: {}", req.rect, chain(&e)));
            let p = tiles_dir.join(format!("{}_{}.tif", req.rect.y, req.rect.x));
            std::fs::write(&p, &bytes).expect("write tile");
            (req.clone(), p)
        })
        .collect()
}

fn chain(e: &CogError) -> String {
    tilegate_core::error::chain(e)
}

fn validate_all(tiles: &[(EncodeRequest, PathBuf)]) {
    let paths: Vec<PathBuf> = tiles.iter().map(|(_, p)| p.clone()).collect();
    tilegate_tests::validate_cogs(&paths).unwrap_or_else(|e| panic!("COG validation: {e}"));
}

/// Every tile: its pixels equal the source window's (the selected bands), geotransform is the
/// source's shifted to the window, CRS and nodata equal the source's, one `window`² block.
fn assert_copy_tiles(source: &Path, tiles: &[(EncodeRequest, PathBuf)], bands: Option<&[u32]>) {
    let src_all = read_raster(path_str(source), None, None).expect("read source");
    for (req, tile) in tiles {
        let got = read_raster(path_str(tile), None, None).expect("read tile");
        let want = read_raster(path_str(source), Some(req.rect), bands).expect("read window");
        assert_eq!((got.width, got.height), (req.rect.width, req.rect.height));
        assert_eq!(got.bands, want.bands, "band count of {}", tile.display());
        assert_eq!(got.dtype, want.dtype);
        assert!(
            got.bytes == want.bytes,
            "pixels of {} differ from the source window {:?}",
            tile.display(),
            req.rect
        );
        assert_eq!(
            got.geotransform,
            shifted_geotransform(&src_all.geotransform, req.rect)
        );
        assert_eq!(got.crs_wkt, src_all.crs_wkt);
        assert!(!got.crs_wkt.is_empty());
        assert_eq!(got.nodata.map(f64::to_bits), want.nodata.map(f64::to_bits));
        assert_single_block(tile, req.recipe.window, req.recipe.compression);
    }
}

fn assert_single_block(tile: &Path, window: u32, compression: Compression) {
    let l = tiff_layout(path_str(tile)).expect("tile layout");
    assert_eq!(
        (l.block_width, l.block_height),
        (window, window),
        "block size of {}",
        tile.display()
    );
    assert_eq!(l.blocks_present, 1, "one block in {}", tile.display());
    assert_eq!(l.overviews, 0);
    let has = |item: &str| l.image_structure.iter().any(|s| s == item);
    assert!(has("LAYOUT=COG"), "{:?}", l.image_structure);
    if l.bands > 1 {
        // All bands in one block per tile, for the assembler's byte copy.
        assert!(has("INTERLEAVE=PIXEL"), "{:?}", l.image_structure);
    }
    assert!(
        has(&format!("COMPRESSION={}", compression.gdal_name())),
        "{:?}",
        l.image_structure
    );
    assert!(
        !l.metadata.iter().any(|m| m.starts_with("STATISTICS_")),
        "statistics in {}: {:?}",
        tile.display(),
        l.metadata
    );
}

/// Both geometries (a partial last row/column, and an exact multiple) for one pixel type.
fn roundtrip_dtype(dtype: &str, bands: u32, nodata: Option<f64>) {
    let dir = tilegate_tests::tempdir();
    for (i, (w, h, window)) in [(1000, 700, 256), (1024, 1024, 512)]
        .into_iter()
        .enumerate()
    {
        let (src, meta) = scene(
            dir.path(),
            &format!("{dtype}-{i}"),
            &opts(w, h, bands, dtype, nodata, 7 + i as u64),
        );
        assert_eq!(meta.dtype, dtype);
        let r = recipe(
            Operation::Copy { bands: None },
            Compression::Deflate,
            window,
        );
        let tiles = encode_all(dir.path(), &requests(&src, &meta, &r));
        assert_eq!(tiles.len(), if window == 256 { 12 } else { 4 });
        validate_all(&tiles);
        assert_copy_tiles(&src, &tiles, None);
    }
    assert!(tilegate_cog::vsimem_leftovers().is_empty());
}

#[test]
fn byte_one_band_tiles_validate_and_roundtrip() {
    roundtrip_dtype("Byte", 1, None);
}

#[test]
fn uint16_three_bands_with_nodata_tiles_validate_and_roundtrip() {
    roundtrip_dtype("UInt16", 3, Some(0.0));
}

#[test]
fn int16_two_bands_tiles_validate_and_roundtrip() {
    roundtrip_dtype("Int16", 2, None);
}

#[test]
fn uint32_one_band_tiles_validate_and_roundtrip() {
    roundtrip_dtype("UInt32", 1, None);
}

#[test]
fn float32_four_bands_with_nodata_tiles_validate_and_roundtrip() {
    roundtrip_dtype("Float32", 4, Some(-9999.0));
}

#[test]
fn int32_and_float64_tiles_validate_and_roundtrip() {
    roundtrip_dtype("Int32", 2, Some(i32::MIN.into()));
    roundtrip_dtype("Float64", 1, Some(f64::NAN));
}

#[test]
fn single_tile_passes_the_validator_cli_and_the_source_does_not() {
    let dir = tilegate_tests::tempdir();
    let (src, meta) = scene(dir.path(), "one", &opts(2048, 1024, 1, "UInt16", None, 1));
    let req = &requests(&src, &meta, &Recipe::copy_all())[3];
    let tile = dir.path().join("tile.tif");
    std::fs::write(&tile, encode_window(req).expect("encode")).expect("write");
    tilegate_tests::validate_cog(&tile).expect("a tile is a valid COG");
    // The validator really runs: a striped (untiled) GeoTIFF fails it.
    let striped = dir.path().join("striped.tif");
    let st = std::process::Command::new("gdal_translate")
        .args(["-q", "-co", "TILED=NO"])
        .arg(&src)
        .arg(&striped)
        .status()
        .expect("run gdal_translate (gdal-bin)");
    assert!(st.success());
    let err = tilegate_tests::validate_cog(&striped).expect_err("a striped TIFF is no COG");
    assert!(err.contains("not tiled"), "{err}");
    let err = tilegate_tests::validate_cogs(&[tile.clone(), striped]).expect_err("one bad");
    assert!(err.contains("striped.tif"), "{err}");
}

#[test]
fn zstd_and_lzw_tiles_validate_and_roundtrip() {
    let dir = tilegate_tests::tempdir();
    let (src, meta) = scene(dir.path(), "s", &opts(1000, 700, 2, "UInt16", Some(0.0), 3));
    for c in [Compression::Zstd, Compression::Lzw] {
        let r = recipe(Operation::Copy { bands: None }, c, 256);
        let sub = dir.path().join(c.gdal_name());
        let tiles = encode_all(&sub, &requests(&src, &meta, &r));
        validate_all(&tiles);
        assert_copy_tiles(&src, &tiles, None);
    }
}

#[test]
fn copy_band_selection_3_1() {
    let dir = tilegate_tests::tempdir();
    let (src, meta) = scene(dir.path(), "s", &opts(1000, 700, 3, "Int16", Some(-1.0), 5));
    let r = recipe(
        Operation::Copy {
            bands: Some(vec![3, 1]),
        },
        Compression::Deflate,
        256,
    );
    let tiles = encode_all(dir.path(), &requests(&src, &meta, &r));
    validate_all(&tiles);
    assert_copy_tiles(&src, &tiles, Some(&[3, 1]));
    // Band 1 of the tile is band 3 of the source, not band 1.
    let (req, tile) = &tiles[5];
    let got = read_raster(path_str(tile), None, None).expect("read tile");
    let b1 = read_raster(path_str(&src), Some(req.rect), Some(&[1])).expect("read band 1");
    assert_ne!(got.band_bytes(0), b1.bytes.as_slice());
    assert_eq!(got.band_bytes(1), b1.bytes.as_slice());
}

fn ndvi_reference(red: &[f64], nir: &[f64], nodata: Option<f64>) -> Vec<f64> {
    red.iter()
        .zip(nir)
        .map(|(&r, &n)| {
            let nd = |v: f64| nodata.is_some_and(|d| d == v);
            if nd(r) || nd(n) || r + n == 0.0 {
                NDVI_NODATA
            } else {
                (n - r) / (n + r)
            }
        })
        .collect()
}

#[test]
fn ndvi_matches_a_reference_with_nodata() {
    let dir = tilegate_tests::tempdir();
    let o = opts(1000, 700, 4, "UInt16", Some(0.0), 11);
    let (src, meta) = scene(dir.path(), "s", &o);
    let r = recipe(
        Operation::Ndvi { red: 3, nir: 4 },
        Compression::Deflate,
        256,
    );
    let tiles = encode_all(dir.path(), &requests(&src, &meta, &r));
    validate_all(&tiles);
    let mut nodata_pixels = 0usize;
    let mut valid_pixels = 0usize;
    for (req, tile) in &tiles {
        let got = read_raster(path_str(tile), None, None).expect("read tile");
        assert_eq!((got.bands, got.dtype.as_str()), (1, "Float32"));
        assert_eq!(got.nodata, Some(NDVI_NODATA));
        assert_eq!(
            got.geotransform,
            shifted_geotransform(&meta.geotransform, req.rect)
        );
        assert_single_block(tile, 256, Compression::Deflate);
        let win = read_raster(path_str(&src), Some(req.rect), Some(&[3, 4])).expect("read");
        let want = ndvi_reference(&win.band_f64(0), &win.band_f64(1), meta.nodata);
        let got_v = got.band_f64(0);
        for (i, (&g, &w)) in got_v.iter().zip(&want).enumerate() {
            let (x, y) = (
                req.rect.x + (i as u32 % req.rect.width),
                req.rect.y + (i as u32 / req.rect.width),
            );
            if w == NDVI_NODATA {
                assert_eq!(g, NDVI_NODATA, "pixel {x},{y}");
                nodata_pixels += 1;
                assert!(o.in_nodata_region(x, y), "unexpected nodata at {x},{y}");
            } else {
                assert!(
                    (g - w).abs() <= 1e-6 * w.abs().max(1.0),
                    "pixel {x},{y}: {g} vs {w}"
                );
                assert!(!o.in_nodata_region(x, y));
                valid_pixels += 1;
            }
        }
    }
    // The nodata triangle (x + y < 175) is there, and most pixels are valid.
    assert_eq!(nodata_pixels, (1..=175).sum::<usize>());
    assert!(valid_pixels > 600_000);
}

#[test]
fn missing_source_is_source_missing() {
    let dir = tilegate_tests::tempdir();
    let missing = dir.path().join("nope.tif");
    let e = probe(path_str(&missing)).expect_err("missing file");
    assert_eq!(e.reason_code(), "source-missing", "{}", chain(&e));
    assert!(!e.is_retryable());
    let e = read_raster("/vsimem/tilegate-test/missing.tif", None, None).expect_err("missing");
    assert_eq!(e.reason_code(), "source-missing", "{}", chain(&e));
    // The encoder classifies the same way.
    let (src, meta) = scene(dir.path(), "s", &opts(256, 256, 1, "Byte", None, 1));
    let mut req = requests(
        &src,
        &meta,
        &recipe(Operation::Copy { bands: None }, Compression::Deflate, 256),
    )
    .remove(0);
    req.path = path_str(&missing).to_owned();
    let e = encode_window(&req).expect_err("missing");
    assert_eq!(e.reason_code(), "source-missing");
    assert!(e.to_string().starts_with("find source `"), "{e}");
}

#[test]
fn garbage_and_truncated_tiffs_are_corrupt_rasters() {
    let dir = tilegate_tests::tempdir();
    let garbage = dir.path().join("garbage.tif");
    std::fs::write(&garbage, b"II*\0garbage, not a tiff").expect("write");
    let e = probe(path_str(&garbage)).expect_err("garbage");
    assert_eq!(e.reason_code(), "corrupt-raster", "{}", chain(&e));
    assert!(!e.is_retryable());
    assert!(
        std::error::Error::source(&e).is_some(),
        "keeps the GDAL error"
    );

    // A real scene cut in half: open or the window reads fail, never silently.
    let (src, meta) = scene(dir.path(), "s", &opts(1024, 1024, 1, "UInt16", None, 2));
    let bytes = std::fs::read(&src).expect("read");
    let cut = dir.path().join("cut.tif");
    std::fs::write(&cut, &bytes[..bytes.len() / 2]).expect("write");
    let mut reqs = requests(&cut, &meta, &Recipe::copy_all());
    for r in &mut reqs {
        r.cache_key = "cut".into();
    }
    let errors: Vec<CogError> = encode_windows_parallel(&reqs)
        .into_iter()
        .filter_map(Result::err)
        .collect();
    assert!(!errors.is_empty(), "a truncated file encoded cleanly");
    for e in &errors {
        assert_eq!(e.reason_code(), "corrupt-raster", "{}", chain(e));
        assert!(!e.is_retryable());
    }
    assert!(tilegate_cog::vsimem_leftovers().is_empty());
}

#[test]
fn ndvi_with_band_9_is_a_bad_recipe() {
    let dir = tilegate_tests::tempdir();
    let (src, meta) = scene(dir.path(), "s", &opts(512, 512, 4, "UInt16", None, 1));
    let r = recipe(
        Operation::Ndvi { red: 3, nir: 9 },
        Compression::Deflate,
        512,
    );
    let e = encode_window(&requests(&src, &meta, &r)[0]).expect_err("band 9");
    assert_eq!(e.reason_code(), "bad-recipe");
    assert!(e.to_string().contains("band 9"), "{e}");
    assert!(!e.is_retryable());
}

#[test]
fn unsupported_dtypes_are_refused() {
    let dir = tilegate_tests::tempdir();
    let (src, _) = scene(dir.path(), "s", &opts(64, 64, 1, "Int16", None, 1));
    for ot in ["CFloat32", "Int64"] {
        let out = dir.path().join(format!("{ot}.tif"));
        let st = std::process::Command::new("gdal_translate")
            .args(["-q", "-ot", ot])
            .arg(&src)
            .arg(&out)
            .status()
            .expect("run gdal_translate (gdal-bin)");
        assert!(st.success());
        let e = probe(path_str(&out)).expect_err(ot);
        assert_eq!(e.reason_code(), "unsupported-dtype", "{}", chain(&e));
        assert!(e.to_string().contains(ot), "{e}");
    }
    let e =
        sample_scene(&dir.path().join("x.tif"), &opts(8, 8, 1, "Int8", None, 0)).expect_err("Int8");
    assert_eq!(e.reason_code(), "unsupported-dtype");
}

#[test]
fn zero_sized_raster_is_refused() {
    let dir = tilegate_tests::tempdir();
    // GDAL itself refuses to open a zero-sized raster; tilegate names that refusal.
    let vrt = dir.path().join("empty.vrt");
    std::fs::write(
        &vrt,
        r#"<VRTDataset rasterXSize="0" rasterYSize="10"><VRTRasterBand dataType="Byte" band="1"/></VRTDataset>"#,
    )
    .expect("write");
    let e = probe(path_str(&vrt)).expect_err("zero-sized");
    assert_eq!(e.reason_code(), "zero-sized-raster", "{}", chain(&e));
    assert!(!e.is_retryable());
    assert!(e.to_string().contains("0x10"), "{e}");
}

#[test]
fn window_outside_the_scene_and_changed_sources_are_named() {
    let dir = tilegate_tests::tempdir();
    let (src, meta) = scene(dir.path(), "s", &opts(300, 300, 1, "Byte", None, 1));
    let r = recipe(Operation::Copy { bands: None }, Compression::Deflate, 256);
    let mut req = requests(&src, &meta, &r).remove(0);
    req.rect = WindowRect {
        x: 256,
        y: 0,
        width: 256,
        height: 256,
    };
    let e = encode_window(&req).expect_err("outside");
    assert_eq!(e.reason_code(), "window-outside-scene");
    req.rect = WindowRect {
        x: 0,
        y: 0,
        width: 300,
        height: 256,
    };
    assert_eq!(
        encode_window(&req).expect_err("wide").reason_code(),
        "bad-window"
    );
    // The plan says 2 bands; the file has 1.
    let mut req = requests(&src, &meta, &r).remove(0);
    req.scene.bands = 2;
    req.cache_key = "other".into();
    let e = encode_window(&req).expect_err("changed");
    assert_eq!(e.reason_code(), "source-changed", "{e}");
}

#[test]
fn cached_handle_is_reused_until_the_cache_key_changes() {
    let dir = tilegate_tests::tempdir();
    let path = dir.path().join("s.tif");
    let meta = sample_scene(&path, &opts(512, 512, 1, "UInt16", None, 1)).expect("scene");
    let r = recipe(Operation::Copy { bands: None }, Compression::Deflate, 512);
    let mut req = requests(&path, &meta, &r).remove(0);
    req.cache_key = "v1".into();
    let opens = tilegate_cog::source_opens();
    let first = encode_window(&req).expect("encode v1");
    assert_eq!(encode_window(&req).expect("again"), first);
    assert_eq!(
        tilegate_cog::source_opens() - opens,
        1,
        "one open per thread"
    );
    // Replace the file (a new inode): the cached handle still reads the old content...
    sample_scene(&path, &opts(512, 512, 1, "UInt16", None, 2)).expect("rewrite");
    assert_eq!(encode_window(&req).expect("stale key"), first);
    // ...until the cache key changes.
    req.cache_key = "v2".into();
    let second = encode_window(&req).expect("encode v2");
    assert_ne!(second, first);
    assert_eq!(tilegate_cog::source_opens() - opens, 2);
    tilegate_cog::clear_thread_cache();
}

#[test]
fn one_dataset_handle_per_thread() {
    let dir = tilegate_tests::tempdir();
    let (src, meta) = scene(dir.path(), "s", &opts(2048, 2048, 1, "UInt16", None, 1));
    let r = recipe(Operation::Copy { bands: None }, Compression::Deflate, 256);
    let reqs = requests(&src, &meta, &r);
    assert_eq!(reqs.len(), 64);
    let opens = tilegate_cog::source_opens();
    for res in encode_windows_parallel(&reqs) {
        res.expect("encode");
    }
    let delta = tilegate_cog::source_opens() - opens;
    // rayon's default pool size.
    let threads = std::env::var("RAYON_NUM_THREADS")
        .ok()
        .and_then(|v| v.parse::<u64>().ok())
        .filter(|&n| n > 0)
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get() as u64));
    assert!(
        (1..=threads).contains(&delta),
        "{delta} opens for 64 windows on {threads} threads"
    );
}

#[test]
fn sample_scene_is_deterministic() {
    let dir = tilegate_tests::tempdir();
    for o in [
        opts(1500, 1100, 1, "UInt16", None, 42),
        opts(1100, 700, 4, "Float32", Some(-9999.0), 42),
    ] {
        let a = dir.path().join("a.tif");
        let b = dir.path().join("b.tif");
        let c = dir.path().join("c.tif");
        sample_scene(&a, &o).expect("a");
        sample_scene(&b, &o).expect("b");
        sample_scene(
            &c,
            &SampleOptions {
                seed: 43,
                ..o.clone()
            },
        )
        .expect("c");
        let (a, b, c) = (
            std::fs::read(a).expect("a"),
            std::fs::read(b).expect("b"),
            std::fs::read(c).expect("c"),
        );
        assert!(a == b, "same seed, different bytes ({:?})", o);
        assert!(a != c, "different seed, same bytes");
    }
}

#[test]
fn probe_reads_the_scene() {
    let dir = tilegate_tests::tempdir();
    let o = opts(1000, 700, 5, "Int16", Some(-32768.0), 9);
    let (src, meta) = scene(dir.path(), "s", &o);
    let got = probe(path_str(&src)).expect("probe");
    assert_eq!(got, meta);
    assert_eq!((got.width, got.height, got.bands), (1000, 700, 5));
    assert_eq!(got.dtype, "Int16");
    assert_eq!(got.nodata, Some(-32768.0));
    assert_eq!(got.geotransform, tilegate_cog::SAMPLE_GEOTRANSFORM);
    let l = tiff_layout(path_str(&src)).expect("layout");
    assert_eq!((l.block_width, l.block_height), (512, 512));
    assert!(l.image_structure.iter().any(|s| s == "COMPRESSION=DEFLATE"));
    // In every band the nodata triangle is there and nothing else is nodata.
    let data = read_raster(path_str(&src), None, None).expect("read");
    for band in 0..5 {
        let v = data.band_f64(band);
        for (i, &v) in v.iter().enumerate() {
            let (x, y) = (i as u32 % 1000, i as u32 / 1000);
            assert_eq!(
                v == -32768.0,
                o.in_nodata_region(x, y),
                "band {band} pixel {x},{y} = {v}"
            );
        }
        // Each band is a different transform of the terrain.
        if band > 0 {
            assert_ne!(data.band_bytes(band), data.band_bytes(0));
        }
    }
}

fn total_tile_bytes(tiles: &[(EncodeRequest, PathBuf)]) -> u64 {
    tiles
        .iter()
        .map(|(_, p)| std::fs::metadata(p).expect("stat").len())
        .sum()
}

#[test]
fn sample_4096_uint16_has_crs_and_compresses() {
    let dir = tilegate_tests::tempdir();
    let (src, meta) = scene(dir.path(), "s", &opts(4096, 4096, 1, "UInt16", None, 1));
    let got = probe(path_str(&src)).expect("probe");
    assert_eq!((got.width, got.height, got.bands), (4096, 4096, 1));
    assert_eq!(got.dtype, "UInt16");
    assert!(
        got.crs_wkt.contains("UTM zone 33N")
            && got.crs_wkt.contains(r#"AUTHORITY["EPSG","32633"]"#),
        "{}",
        got.crs_wkt
    );
    let tiles = encode_all(dir.path(), &requests(&src, &meta, &Recipe::copy_all()));
    assert_eq!(tiles.len(), 64);
    let raw = 4096u64 * 4096 * 2;
    let ratio = raw as f64 / total_tile_bytes(&tiles) as f64;
    eprintln!("4096² UInt16 DEFLATE ratio {ratio:.3}");
    assert!((1.2..3.0).contains(&ratio), "compression ratio {ratio:.3}");
    // Elevation-like: neighbouring pixels are close, the range is wide.
    let data: RasterData = read_raster(path_str(&src), None, None).expect("read");
    let v = data.band_f64(0);
    let (min, max) = v
        .iter()
        .fold((f64::MAX, f64::MIN), |(a, b), &x| (a.min(x), b.max(x)));
    assert!(max - min > 30_000.0, "range {min}..{max}");
    let mean_step = v.windows(2).map(|w| (w[1] - w[0]).abs()).sum::<f64>() / v.len() as f64;
    assert!(mean_step < 1_000.0, "mean step {mean_step}");
}

#[test]
fn heavy_ten_k_scene_400_tiles_validate() {
    let dir = tilegate_tests::tempdir();
    let t = Instant::now();
    let (src, meta) = scene(
        dir.path(),
        "ten-k",
        &opts(10240, 10240, 1, "UInt16", None, 1),
    );
    let generate = t.elapsed();
    let reqs = requests(&src, &meta, &Recipe::copy_all());
    assert_eq!(reqs.len(), 400);
    let t = Instant::now();
    let results = encode_windows_parallel(&reqs);
    let encode = t.elapsed();
    let tiles_dir = dir.path().join("tiles");
    std::fs::create_dir_all(&tiles_dir).expect("dir");
    let mut tiles = Vec::with_capacity(400);
    for (req, res) in reqs.iter().zip(results) {
        let bytes = res.unwrap_or_else(|e| panic!("encode {:?}: {}", req.rect, chain(&e)));
        let p = tiles_dir.join(format!("{}_{}.tif", req.rect.y / 512, req.rect.x / 512));
        std::fs::write(&p, bytes).expect("write");
        tiles.push((req.clone(), p));
    }
    let t = Instant::now();
    validate_all(&tiles);
    let validate = t.elapsed();
    let t = Instant::now();
    for (req, tile) in &tiles {
        let got = read_raster(path_str(tile), None, None).expect("read tile");
        let want = read_raster(path_str(&src), Some(req.rect), None).expect("read window");
        assert!(
            got.bytes == want.bytes,
            "pixels of {} differ",
            tile.display()
        );
    }
    let compare = t.elapsed();
    let bytes = total_tile_bytes(&tiles);
    eprintln!(
        "10240² UInt16: generate {:.2}s, encode 400 tiles {:.2}s ({} MB, ratio {:.3}), \
         validate {:.2}s, compare {:.2}s",
        generate.as_secs_f64(),
        encode.as_secs_f64(),
        bytes / 1_000_000,
        (10240.0 * 10240.0 * 2.0) / bytes as f64,
        validate.as_secs_f64(),
        compare.as_secs_f64()
    );
    assert!(tilegate_cog::vsimem_leftovers().is_empty());
}

#[test]
fn sample_scene_handles_odd_sizes() {
    let dir = tilegate_tests::tempdir();
    for (w, h, bands) in [
        (1, 1, 1),
        (37, 23, 5),
        (513, 1, 2),
        (1, 600, 1),
        (1025, 517, 3),
    ] {
        let o = opts(w, h, bands, "Byte", Some(255.0), 3);
        let (src, meta) = scene(dir.path(), &format!("{w}x{h}"), &o);
        assert_eq!((meta.width, meta.height, meta.bands), (w, h, bands));
        let data = read_raster(path_str(&src), None, None).expect("read");
        assert_eq!(data.bytes.len(), (w * h * bands) as usize);
        for band in 0..bands as usize {
            for (i, v) in data.band_f64(band).into_iter().enumerate() {
                let (x, y) = (i as u32 % w, i as u32 / w);
                assert_eq!(
                    v == 255.0,
                    o.in_nodata_region(x, y),
                    "{w}x{h} pixel {x},{y}"
                );
            }
        }
    }
}

#[test]
fn small_windows_are_single_block_tiles_too() {
    let dir = tilegate_tests::tempdir();
    let (src, meta) = scene(dir.path(), "s", &opts(200, 150, 2, "UInt16", Some(0.0), 4));
    let r = recipe(Operation::Copy { bands: None }, Compression::Deflate, 64);
    let tiles = encode_all(dir.path(), &requests(&src, &meta, &r));
    assert_eq!(tiles.len(), 4 * 3);
    validate_all(&tiles);
    assert_copy_tiles(&src, &tiles, None);
}

/// The native tile writer reproduces GDAL's COG driver: for DEFLATE byte for byte (the same
/// tags, layout, zero padding, predictor and libdeflate level), across types, band counts,
/// nodata, NDVI and partial windows; for LZW and ZSTD (other encoder builds) the same pixels in
/// a valid COG.
#[test]
fn native_tiles_equal_gdals() {
    let dir = tilegate_tests::tempdir();
    // name, width, height, bands, data type, nodata
    type Case<'a> = (&'a str, u32, u32, u32, &'a str, Option<f64>);
    let cases: &[Case] = &[
        ("u16", 700, 530, 1, "UInt16", None),
        ("byte3", 300, 280, 3, "Byte", None),
        ("i16nd", 520, 270, 2, "Int16", Some(-32768.0)),
        ("f32nd", 272, 300, 4, "Float32", Some(-9999.0)),
        ("u32", 260, 260, 1, "UInt32", Some(7.0)),
        ("f64", 130, 300, 1, "Float64", None),
    ];
    let mut compared = 0;
    for (name, w, h, bands, dtype, nodata) in cases {
        let (src, meta) = scene(dir.path(), name, &opts(*w, *h, *bands, dtype, *nodata, 3));
        let mut recipes = vec![recipe(
            Operation::Copy { bands: None },
            Compression::Deflate,
            256,
        )];
        if *bands >= 2 {
            recipes.push(recipe(
                Operation::Copy {
                    bands: Some(vec![*bands, 1]),
                },
                Compression::Deflate,
                128,
            ));
        }
        if *bands == 4 {
            recipes.push(recipe(
                Operation::Ndvi { red: 3, nir: 4 },
                Compression::Deflate,
                256,
            ));
        }
        for r in &recipes {
            for req in requests(&src, &meta, r) {
                let native = encode_window(&req).unwrap();
                let gdal = tilegate_cog::encode_window_with_gdal(&req).unwrap();
                assert!(
                    native == gdal,
                    "{name} {:?} window {:?}: native tile differs from GDAL's ({} vs {} bytes)",
                    r.operation,
                    req.rect,
                    native.len(),
                    gdal.len()
                );
                compared += 1;
            }
        }
    }
    assert!(compared > 30, "{compared}");
    // Other codecs: valid COGs with the source's pixels.
    let (src, meta) = scene(
        dir.path(),
        "codecs",
        &opts(600, 400, 2, "UInt16", Some(0.0), 9),
    );
    for c in [Compression::Zstd, Compression::Lzw] {
        let reqs = requests(
            &src,
            &meta,
            &recipe(Operation::Copy { bands: None }, c, 256),
        );
        let sub = dir.path().join(format!("{c:?}"));
        let tiles = encode_all(&sub, &reqs);
        validate_all(&tiles);
        assert_copy_tiles(&src, &tiles, None);
    }
}

/// Encode one window of a small scene and return GDAL's block cache limit before and after.
fn block_cache_around_an_encode() -> (u64, u64) {
    let dir = tempfile::tempdir().unwrap();
    let (path, meta) = scene(dir.path(), "s", &opts(1024, 512, 1, "UInt16", None, 3));
    let before = tilegate_cog::block_cache_limit();
    let reqs = requests(
        &path,
        &meta,
        &recipe(Operation::Copy { bands: None }, Compression::Deflate, 512),
    );
    encode_window(&reqs[0]).expect("encode");
    (before, tilegate_cog::block_cache_limit())
}

#[test]
fn gdal_block_cache_is_fitted_down_to_what_windows_share() {
    // Two rows of 512-pixel windows of a 1024-pixel UInt16 row (with a block row more) are
    // 4 MiB: the floor of 64 MiB applies, never more than GDAL's default.
    let (default, fitted) = block_cache_around_an_encode();
    assert_eq!(fitted, default.min(64 << 20), "default {default}");
}

#[test]
fn gdal_block_cache_set_by_the_user_stands() {
    // SAFETY: this test runs in its own process (nextest), before any thread reads the
    // environment.
    unsafe { std::env::set_var("GDAL_CACHEMAX", "300") };
    let (before, after) = block_cache_around_an_encode();
    assert_eq!((before, after), (300 << 20, 300 << 20));
}

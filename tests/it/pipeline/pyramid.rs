//! Web pyramids (`run --pyramid`): every tile against references computed outside tilegate,
//! and each tile written once through duplicates, a killed worker and racing assemblers.
//!
//! * `tests/fixtures/pyramid_archive.py` (the `pmtiles` reader and `morecantile`, in the venv
//!   `.ci/tiles-venv` makes) reads the archive and checks it against the `z/x/y` objects, the
//!   TileJSON's bounds against morecantile's, and writes morecantile's bounds of every base
//!   tile;
//! * `tests/fixtures/pyramid_pixels.py` (Debian's GDAL and NumPy) warps the source onto each of
//!   those bounds with `gdalwarp -et 0` and compares, and checks every tile above against the
//!   2×2 reduction of its stored children.

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;
use tilegate_tests::*;

/// The venv with `pmtiles` and `morecantile` (`bash .ci/tiles-venv` makes it).
fn tiles_python() -> PathBuf {
    if let Some(p) = std::env::var_os("TILEGATE_TILES_PYTHON") {
        return p.into();
    }
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("../.ci-cache/tiles-venv/bin/python");
    assert!(
        p.exists(),
        "no venv with pmtiles and morecantile at .ci-cache/tiles-venv (make it with `bash \
         .ci/tiles-venv`)"
    );
    p
}

fn pyramid_dir(data: &Path, job: &str) -> PathBuf {
    data.join("objects/tilegate/pyramids").join(job)
}

/// Every `z/x/y` object of a pyramid, with its bytes.
fn xyz_objects(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut out = Vec::new();
    for z in std::fs::read_dir(dir).unwrap().flatten() {
        let zn = z.file_name().to_string_lossy().into_owned();
        if !zn.chars().all(|c| c.is_ascii_digit()) {
            continue;
        }
        for x in std::fs::read_dir(z.path()).unwrap().flatten() {
            for y in std::fs::read_dir(x.path()).unwrap().flatten() {
                let name = format!(
                    "{zn}/{}/{}",
                    x.file_name().to_string_lossy(),
                    y.file_name().to_string_lossy()
                );
                out.push((name, std::fs::read(y.path()).unwrap()));
            }
        }
    }
    out.sort();
    out
}

/// Check a finished pyramid job against its references: the archive (when the layout has
/// one) and the bounds with the reference implementations, the pixels with GDAL. Returns the
/// pixel checker's tiles per zoom.
fn check_pyramid(
    data: &Path,
    job: &str,
    src: &Path,
    tms: &str,
    mode: &str,
    archive: bool,
) -> Value {
    let dir = pyramid_dir(data, job);
    let bounds = data.join(format!("bounds-{job}.json"));
    let archive_path = if archive {
        data.join(format!("objects/tilegate/pyramids/{job}.pmtiles"))
    } else {
        PathBuf::from("-")
    };
    let summary = checked(
        Command::new(tiles_python())
            .arg(fixture("pyramid_archive.py"))
            .arg(&dir)
            .arg(&archive_path)
            .arg(tms)
            .arg(&bounds),
    );
    let summary: Value = serde_json::from_str(&summary).unwrap();
    let pixels = checked(
        Command::new("/usr/bin/python3")
            .arg(fixture("pyramid_pixels.py"))
            .arg(&dir)
            .arg(src)
            .arg(&bounds)
            .arg(mode),
    );
    let pixels: Value = serde_json::from_str(&pixels).unwrap();
    assert_eq!(
        summary["per_zoom"], pixels,
        "every tile written was compared with its reference"
    );
    pixels
}

/// `plan SRC --pyramid ARGS…` must be refused as `bad-recipe`; its message.
fn refused_plan(data: &Path, src: &Path, args: &[&str]) -> String {
    let mut all = vec!["--json", "plan", src.to_str().unwrap(), "--pyramid"];
    all.extend_from_slice(args);
    let out = tg(data, &all, &[]);
    assert!(!out.status.success(), "{out:?}");
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["error"]["reason"], "bad-recipe", "{doc}");
    doc["error"]["message"].as_str().unwrap().to_owned()
}

/// A `size`² scene in UTM zone 33N (10 m) of three Byte bands with a nodata corner, as
/// `dir/NAME.tif`.
fn utm_image(dir: &Path, name: &str, size: u32) -> PathBuf {
    let src = dir.join(format!("{name}.tif"));
    sample_with(
        dir,
        &src,
        size,
        &["--bands", "3", "--dtype", "Byte", "--nodata", "0"],
    );
    src
}

fn counters(data: &Path, job: &str) -> Value {
    tg_json(data, &["status", job])["counters"].clone()
}

fn run_pyramid(data: &Path, src: &Path, extra: &[&str]) -> Value {
    let mut args = vec!["run", src.to_str().unwrap(), "--pyramid"];
    args.extend_from_slice(extra);
    let run = tg_json(data, &args);
    assert_eq!(run["lifecycle"], "published", "{run}");
    run
}

#[test]
fn a_utm_scene_becomes_tiles_equal_to_gdalwarp_and_an_archive_equal_to_them() {
    let dir = tempdir();
    let src = dir.path().join("utm.tif");
    // UTM zone 33N, 10 m, three Byte bands, a nodata corner.
    sample_with(
        dir.path(),
        &src,
        1536,
        &["--bands", "3", "--dtype", "Byte", "--nodata", "0"],
    );
    for resampling in ["near", "average"] {
        let data = dir.path().join(format!("data-{resampling}"));
        let run = run_pyramid(
            &data,
            &src,
            &[
                "WebMercatorQuad",
                "--layout",
                "both",
                "--warp-resampling",
                resampling,
            ],
        );
        let job = run["job_id"].as_str().unwrap();
        let per_zoom = check_pyramid(&data, job, &src, "WebMercatorQuad", "image", true);
        // The default zooms: the native resolution's zoom (10 m at 45°N is 14.1 m of Web
        // Mercator: zoom 13's 19.1 m is nearer in ratio than zoom 14's 9.6 m, GDAL's rule)
        // down to one tile.
        let zooms: Vec<u8> = per_zoom
            .as_object()
            .unwrap()
            .keys()
            .map(|z| z.parse().unwrap())
            .collect();
        assert_eq!(zooms.iter().max(), Some(&13), "{per_zoom}");
        assert_eq!(per_zoom[zooms.iter().min().unwrap().to_string()], 1);
        // Each tile image written once: as many Creates that wrote as objects, none refused.
        let c = counters(&data, job);
        let objects = xyz_objects(&pyramid_dir(&data, job)).len() as u64;
        assert_eq!(c["pyramid_tiles_written_total"], objects, "{c}");
        assert_eq!(c["conditional_write_precondition_failed_total"], 0, "{c}");
        // The job's STAC Item names the archive and the z/x/y template.
        let item: Value = serde_json::from_slice(
            &std::fs::read(data.join(format!("objects/tilegate/pyramids/{job}.json"))).unwrap(),
        )
        .unwrap();
        assert_eq!(item["assets"]["pmtiles"]["type"], "application/vnd.pmtiles");
        let rels: Vec<&str> = item["links"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|l| l["rel"].as_str())
            .collect();
        assert!(
            rels.contains(&"xyz") && rels.contains(&"pmtiles"),
            "{rels:?}"
        );
        // Run again: nothing is written twice.
        let again = tg_json(
            &data,
            &[
                "run",
                src.to_str().unwrap(),
                "--pyramid",
                "WebMercatorQuad",
                "--layout",
                "both",
                "--warp-resampling",
                resampling,
            ],
        );
        assert_eq!(again["job_id"], job);
        assert_eq!(counters(&data, job)["pyramid_tiles_written_total"], objects);
    }
}

#[test]
fn a_dem_with_nodata_becomes_terrain_tiles_that_decode_to_its_elevation() {
    let dir = tempdir();
    let src = dir.path().join("dem.tif");
    sample_with(
        dir.path(),
        &src,
        1024,
        &["--dtype", "Float32", "--nodata", "-9999"],
    );
    for encoding in ["terrarium", "mapbox-terrain-rgb"] {
        let data = dir.path().join(format!("data-{encoding}"));
        let run = run_pyramid(
            &data,
            &src,
            &[
                "WebMercatorQuad",
                "--layout",
                "both",
                "--encoding",
                encoding,
            ],
        );
        let job = run["job_id"].as_str().unwrap();
        // Within the encoding's precision of gdalwarp's elevation; no tile where the DEM is
        // nodata (a window's area outside the source used to come out as valid zeros).
        check_pyramid(&data, job, &src, "WebMercatorQuad", encoding, true);
    }
    // A one-band DEM is not an 8-bit image: without --encoding it is refused when planning.
    let message = refused_plan(&dir.path().join("refused"), &src, &["WebMercatorQuad"]);
    assert!(message.contains("--encoding"), "{message}");
}

#[test]
fn a_worldcrs84quad_pyramid_goes_out_as_z_x_y_objects_and_its_tilejson() {
    let dir = tempdir();
    let src = utm_image(dir.path(), "utm", 1024);
    let data = dir.path().join("data");
    // PMTiles v3 addresses Web Mercator tiles alone: asked for, it is refused.
    let message = refused_plan(&data, &src, &["WorldCRS84Quad", "--layout", "pmtiles"]);
    assert!(message.contains("WebMercatorQuad tiles only"), "{message}");
    // A base zoom far finer than the source's is refused (at most 8× upsampled).
    let message = refused_plan(&data, &src, &["WorldCRS84Quad", "--zoom", "5..20"]);
    assert!(message.contains("native zoom"), "{message}");
    let run = run_pyramid(&data, &src, &["WorldCRS84Quad", "--zoom", "9..14"]);
    let job = run["job_id"].as_str().unwrap();
    let per_zoom = check_pyramid(&data, job, &src, "WorldCRS84Quad", "image", false);
    assert_eq!(per_zoom.as_object().unwrap().len(), 6, "{per_zoom}");
    let tilejson: Value =
        serde_json::from_slice(&std::fs::read(pyramid_dir(&data, job).join("tiles.json")).unwrap())
            .unwrap();
    assert_eq!(tilejson["tilejson"], "3.0.0");
    assert_eq!(tilejson["tiles"][0], "{z}/{x}/{y}.png");
    assert_eq!(
        (tilejson["minzoom"].as_u64(), tilejson["maxzoom"].as_u64()),
        (Some(9), Some(14))
    );
}

#[test]
fn duplicates_a_killed_worker_and_racing_assemblers_write_each_tile_once() {
    let dir = tempdir();
    let src = utm_image(dir.path(), "utm", 2048);
    let data = dir.path().join("data");
    let plan = tg_json(
        &data,
        &[
            "plan",
            src.to_str().unwrap(),
            "--pyramid",
            "WebMercatorQuad",
            "--layout",
            "both",
        ],
    );
    let job = plan["job_id"].as_str().unwrap().to_owned();
    let windows = plan["windows"].as_u64().unwrap();
    assert!(windows >= 4, "{plan}");
    // A worker killed after its first window's tile images are written (so it flushed no
    // count), before its index (the window's output), its manifest row and the
    // acknowledgement.
    let killed = work_until_fault(&data, "after-images", 0);
    assert!(!killed.status.success(), "the worker was killed");
    let left_by_killed = snapshot_tree(&pyramid_dir(&data, &job));
    assert!(!left_by_killed.is_empty());
    // Every window again beside the redelivery: duplicates.
    tg_json(
        &data,
        &[
            "plan",
            src.to_str().unwrap(),
            "--pyramid",
            "WebMercatorQuad",
            "--layout",
            "both",
            "--all-windows",
        ],
    );
    let work = tg_json(&data, &["work", "--until-empty", "--visibility", "2"]);
    assert_eq!(work["dead_lettered"], 0, "{work}");
    // Three assemblers at once: one builds the zooms above the windows and the archive.
    let racers: Vec<_> = (0..3)
        .map(|_| {
            Command::new(tilegate_bin())
                .arg("--data")
                .arg(&data)
                .args(["--json", "assemble", &job])
                .spawn()
                .unwrap()
        })
        .collect();
    for r in racers {
        r.wait_with_output().unwrap();
    }
    let asm = tg_json(&data, &["assemble", &job]);
    assert_eq!(asm["outcome"], "already_done", "{asm}");
    check_pyramid(&data, &job, &src, "WebMercatorQuad", "image", true);
    // No image was written twice: what the killed worker left is untouched (same inode, same
    // modification time), and the Creates that wrote, with what it left, are every object.
    let after = snapshot_tree(&pyramid_dir(&data, &job));
    for (path, stamp) in &left_by_killed {
        assert_eq!(
            after.get(path),
            Some(stamp),
            "{} was rewritten",
            path.display()
        );
    }
    let c = counters(&data, &job);
    let objects = xyz_objects(&pyramid_dir(&data, &job)).len() as u64;
    let written = c["pyramid_tiles_written_total"].as_u64().unwrap();
    assert_eq!(written + left_by_killed.len() as u64, objects, "{c}");
    // Its window, encoded again, met the images it had written: refused as present.
    let refused = c["conditional_write_precondition_failed_total"]
        .as_u64()
        .unwrap();
    assert!(refused > 0, "{c}");
    assert_eq!(c["claims_won_total"], 1, "{c}");
}

/// Load a pyramid job's map page (`GET /v1/jobs/{id}/map`) in `browser`: its origin first,
/// then the page, fetched with the bearer the way the service's own page opens it.
fn open_map(browser: &Browser, server: &service::Server, key: &str, job: &str) {
    browser.post(
        "url",
        serde_json::json!({"url": format!("http://{}/healthz", server.addr)}),
    );
    let loaded = browser.script_async(&format!(
        "fetch('/v1/jobs/{job}/map?resampling=nearest', {{headers: {{Authorization: \
         'Bearer {key}'}}}}).then(r => r.text()).then(h => {{ document.open(); \
         document.write(h); document.close(); done(true); }}, e => done(String(e)));"
    ));
    assert_eq!(loaded, serde_json::json!(true));
    let state = browser.wait_for(
        60,
        "const b = document.body; return b && (b.dataset.error || (b.dataset.loaded === 'true' \
         && 'loaded'));",
    );
    assert_eq!(state, "loaded", "the map page drew its first view");
}

/// The map's pixels of the 256 × 256 block whose top-left corner is the centre of a
/// 768 × 512 canvas, after showing tile `z/x/y` there at its own size (MapLibre's zoom
/// `z - 1`: its world is 512 pixels at zoom 0), as RGBA rows.
fn drawn_tile(browser: &Browser, z: u8, x: u32, y: u32) -> Vec<u8> {
    let n = f64::from(1u32 << z);
    let lon = f64::from(x) / n * 360.0 - 180.0;
    let lat = (std::f64::consts::PI * (1.0 - 2.0 * f64::from(y) / n))
        .sinh()
        .atan()
        .to_degrees();
    let got = browser.script_async(&format!(
        "const m = window.tilegate.map; const el = document.getElementById('map'); \
         Object.assign(el.style, {{position: 'fixed', inset: 'auto', left: '0', top: '0', \
         width: '768px', height: '512px'}}); m.resize(); \
         m.jumpTo({{center: [{lon}, {lat}], zoom: {z} - 1}}); \
         m.once('idle', () => {{ const c = m.getCanvas(); \
           const cv = document.createElement('canvas'); cv.width = c.width; \
           cv.height = c.height; const g = cv.getContext('2d'); g.drawImage(c, 0, 0); \
           const d = g.getImageData(c.width / 2, c.height / 2, 256, 256).data; \
           let s = ''; for (let i = 0; i < d.length; i++) s += String.fromCharCode(d[i]); \
           done([c.width, c.height, btoa(s)]); }}); m.triggerRepaint();"
    ));
    assert_eq!((got[0].as_u64(), got[1].as_u64()), (Some(768), Some(512)));
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD
        .decode(got[2].as_str().unwrap())
        .unwrap()
}

#[test]
fn the_map_page_draws_the_tiles_pixel_for_pixel_and_the_pmtiles_reader_reads_them() {
    let Some(browser) = Browser::start() else {
        return;
    };
    let dir = tempdir();
    let src = utm_image(dir.path(), "utm", 2048);
    let data = dir.path().join("data");
    let run = run_pyramid(&data, &src, &["WebMercatorQuad", "--layout", "both"]);
    let job = run["job_id"].as_str().unwrap().to_owned();
    let key = tg_json(
        &data,
        &[
            "keys",
            "create",
            "--tenant",
            "ops",
            "--operator",
            "--label",
            "map",
        ],
    )["key"]
        .as_str()
        .unwrap()
        .to_owned();
    let mut cmd = Command::new(tilegate_bin());
    cmd.arg("--data").arg(&data);
    let server = service::Server::start(cmd, &[], dir.path().join("serve.log"));
    open_map(&browser, &server, &key, &job);
    let tiles = xyz_objects(&pyramid_dir(&data, &job));
    // Three zooms — the base and the two above it — and at each the tile with the most to
    // show (the largest image), drawn and compared where it is opaque.
    let zooms: std::collections::BTreeSet<u8> = tiles
        .iter()
        .map(|(name, _)| name.split('/').next().unwrap().parse().unwrap())
        .collect();
    let zooms: Vec<u8> = zooms.into_iter().collect();
    let base = *zooms.last().unwrap();
    for z in [base - 2, base - 1, base] {
        let (name, png) = tiles
            .iter()
            .filter(|(n, _)| n.starts_with(&format!("{z}/")))
            .max_by_key(|(_, b)| b.len())
            .unwrap();
        let parts: Vec<u32> = name
            .trim_end_matches(".png")
            .split('/')
            .map(|p| p.parse().unwrap())
            .collect();
        let want =
            tilegate_pmtiles::decode_png(png, tilegate_pmtiles::PixelEncoding::Image8, 3).unwrap();
        let got = drawn_tile(&browser, z, parts[1], parts[2]);
        let mut compared = 0;
        for i in 0..256 * 256 {
            if !want.valid[i] {
                continue;
            }
            compared += 1;
            for b in 0..3 {
                assert_eq!(
                    f32::from(got[i * 4 + b]),
                    want.values[i * 3 + b],
                    "{name}: pixel {i} band {b} drawn differently"
                );
            }
            assert_eq!(got[i * 4 + 3], 255, "{name}: pixel {i} is opaque");
        }
        assert!(compared > 1000, "{name}: {compared} opaque pixels compared");
    }
    // The PMTiles reader in the page: every tile the archive holds is the z/x/y object's
    // bytes (SHA-256 in the browser), and an address outside the data has none.
    let addresses: Vec<String> = tiles
        .iter()
        .map(|(n, _)| n.trim_end_matches(".png").to_owned())
        .collect();
    let digests = browser.script_async(&format!(
        "const a = window.tilegate.archive; const out = {{}}; \
         const hex = b => Array.from(new Uint8Array(b)).map(x => x.toString(16).padStart(2, \
         '0')).join(''); \
         (async () => {{ for (const t of {addrs}) {{ const [z, x, y] = t.split('/').map(Number); \
           const r = await a.getZxy(z, x, y); \
           out[t] = r ? hex(await crypto.subtle.digest('SHA-256', r.data)) : null; }} \
           const none = await a.getZxy({z}, 0, 0); out.outside = none ? 'bytes' : null; \
           return out; }})().then(done, e => done(String(e)));",
        addrs = serde_json::to_string(&addresses).unwrap(),
        z = zooms.last().unwrap(),
    ));
    for (name, bytes) in &tiles {
        let addr = name.trim_end_matches(".png");
        let want: String = aws_lc_rs::digest::digest(&aws_lc_rs::digest::SHA256, bytes)
            .as_ref()
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        assert_eq!(digests[addr], want, "{addr}: {digests}");
    }
    assert_eq!(digests["outside"], Value::Null);
    // The report's map: the tiles of the finest zoom with at most 16, each the z/x/y object.
    let report = dir.path().join("report.html");
    let out = tg(
        &data,
        &["report", &job, "-o", report.to_str().unwrap()],
        &[],
    );
    assert!(out.status.success(), "{out:?}");
    let html = std::fs::read_to_string(&report).unwrap();
    assert!(html.contains("<div id=\"map\""), "the report has a map");
    let mut shown = 0;
    for part in html.split("data-tile=\"").skip(1) {
        let addr = &part[..part.find('"').unwrap()];
        let b64 = part.split("base64,").nth(1).unwrap();
        let b64 = &b64[..b64.find('"').unwrap()];
        use base64::Engine as _;
        let png = base64::engine::general_purpose::STANDARD
            .decode(b64)
            .unwrap();
        let want = tiles
            .iter()
            .find(|(n, _)| n == &format!("{addr}.png"))
            .unwrap_or_else(|| panic!("{addr} is a tile of the pyramid"));
        assert_eq!(png, want.1, "{addr}");
        shown += 1;
    }
    assert!(
        (2..=16).contains(&shown),
        "{shown} tiles on the report's map"
    );
}

/// `/usr/bin/python3` (Debian's GDAL) running `script` with `args`.
fn gdal_python(script: &str, args: &[&str]) {
    checked(
        Command::new("/usr/bin/python3")
            .arg("-c")
            .arg(script)
            .args(args),
    );
}

#[test]
fn scenes_across_the_antimeridian_near_the_pole_and_paletted_equal_their_references() {
    let dir = tempdir();
    let image = utm_image(dir.path(), "image", 1024);
    // The same pixels placed elsewhere: in UTM zone 60N across 180° (9°N), and in geographic
    // coordinates from 80°N to 88°N, past Web Mercator's 85.05°.
    let antimeridian = dir.path().join("antimeridian.tif");
    let polar = dir.path().join("polar.tif");
    let place = "import sys\nfrom osgeo import gdal\ngdal.UseExceptions()\n\
        gdal.Translate(sys.argv[2], sys.argv[1], outputSRS=sys.argv[3], \
        outputBounds=[float(v) for v in sys.argv[4].split(',')])";
    gdal_python(
        place,
        &[
            image.to_str().unwrap(),
            antimeridian.to_str().unwrap(),
            "EPSG:32660",
            "820000,1010240,830240,1000000",
        ],
    );
    gdal_python(
        place,
        &[
            image.to_str().unwrap(),
            polar.to_str().unwrap(),
            "EPSG:4326",
            "10,88,30,80",
        ],
    );
    // One band of classes with a palette (index 0 transparent).
    let paletted = dir.path().join("paletted.tif");
    gdal_python(
        "import sys\nfrom osgeo import gdal\ngdal.UseExceptions()\n\
         src = gdal.Open(sys.argv[1])\na = src.GetRasterBand(1).ReadAsArray() // 32\n\
         d = gdal.GetDriverByName('GTiff').Create(sys.argv[2], src.RasterXSize, \
         src.RasterYSize, 1, gdal.GDT_Byte, ['TILED=YES'])\n\
         d.SetGeoTransform(src.GetGeoTransform()); d.SetProjection(src.GetProjection())\n\
         b = d.GetRasterBand(1); b.WriteArray(a)\nct = gdal.ColorTable()\n\
         cols = [(0,0,0,0),(230,25,75,255),(60,180,75,255),(255,225,25,255),(0,130,200,255),\
         (245,130,48,255),(145,30,180,255),(70,240,240,255)]\n\
         [ct.SetColorEntry(i, c) for i, c in enumerate(cols)]\n\
         b.SetRasterColorTable(ct); b.SetRasterColorInterpretation(gdal.GCI_PaletteIndex)\n\
         d = None",
        &[image.to_str().unwrap(), paletted.to_str().unwrap()],
    );
    // Each also averaged (the base warped by the worker's own average kernel, not GDAL's).
    for (name, src, zoom, resampling) in [
        ("antimeridian", &antimeridian, None, "near"),
        ("antimeridian", &antimeridian, None, "average"),
        ("polar", &polar, Some("2..7"), "near"),
        ("polar", &polar, Some("2..7"), "average"),
        ("paletted", &paletted, None, "near"),
    ] {
        let data = dir.path().join(format!("data-{name}-{resampling}"));
        let mut extra = vec![
            "WebMercatorQuad",
            "--layout",
            "both",
            "--warp-resampling",
            resampling,
        ];
        if let Some(z) = zoom {
            extra.extend(["--zoom", z]);
        }
        let run = run_pyramid(&data, src, &extra);
        let job = run["job_id"].as_str().unwrap();
        let per_zoom = check_pyramid(&data, job, src, "WebMercatorQuad", "image", true);
        let tilejson: Value = serde_json::from_slice(
            &std::fs::read(pyramid_dir(&data, job).join("tiles.json")).unwrap(),
        )
        .unwrap();
        let bounds: Vec<f64> = serde_json::from_value(tilejson["bounds"].clone()).unwrap();
        match name {
            // Tiles on both sides of 180°, and its bounds from west of it to east of it.
            "antimeridian" => {
                assert!(bounds[0] > 179.0 && bounds[2] < -179.0, "{bounds:?}");
                let base = per_zoom
                    .as_object()
                    .unwrap()
                    .keys()
                    .max_by_key(|z| z.parse::<u8>().unwrap());
                let base: u8 = base.unwrap().parse().unwrap();
                let xs: Vec<u32> = xyz_objects(&pyramid_dir(&data, job))
                    .iter()
                    .filter(|(n, _)| n.starts_with(&format!("{base}/")))
                    .map(|(n, _)| n.split('/').nth(1).unwrap().parse().unwrap())
                    .collect();
                let width = 1u32 << base;
                assert!(xs.contains(&0) && xs.contains(&(width - 1)), "{xs:?}");
            }
            // Clipped at the map's edge: the top row, north of which nothing is.
            "polar" => assert!((bounds[3] - 85.0511).abs() < 1e-3, "{bounds:?}"),
            // Its classes' colours, parents by nearest (the default for a palette).
            _ => assert_eq!(tilejson["tilegate:overview_resampling"], "nearest"),
        }
    }
}

// Every fault at once on a pyramid job, judged from the stores' own record of writes: on the
// AWS emulator the bucket is versioned (every write that landed is a version); on the
// embedded store every object's inode and modification time are kept from the moment the
// faults end to the end (a rewrite would change them).
crate::per_backend::per_backend!(a_pyramid_under_kills_duplicates_and_racing_assemblers: [embedded, aws]);

fn a_pyramid_under_kills_duplicates_and_racing_assemblers(target: Target) {
    use crate::faults::chaos::{Rng, seed};
    let seed = seed();
    println!("seed {seed} (TILEGATE_CHAOS_SEED={seed} replays its choices)");
    let mut rng = Rng(seed);
    let dir = tempdir();
    let src = utm_image(dir.path(), "utm", 1536);
    let data = dir.path().join("data");
    std::fs::create_dir_all(&data).unwrap();
    if let Target::Aws(aws) = &target {
        let rt = tokio::runtime::Runtime::new().unwrap();
        rt.block_on(crate::faults::chaos::enable_versioning(aws));
    }
    // Zoom 15 (4.8 m of Web Mercator, the scene's 10 m upsampled): about nine windows, enough
    // for a worker to die at each point.
    let plan_args = [
        "plan",
        src.to_str().unwrap(),
        "--pyramid",
        "WebMercatorQuad",
        "--layout",
        "both",
        "--zoom",
        "11..15",
    ];
    let plan = target.json(&data, &plan_args);
    let job = plan["job_id"].as_str().unwrap().to_owned();
    assert!(plan["windows"].as_u64().unwrap() >= 6, "{plan}");
    // A worker killed at each point, in an order and after a number of passes the seed picks;
    // a fault cuts only a message's first delivery short.
    let mut points = vec![
        "before-encode",
        "after-images",
        "after-commit",
        "after-manifest",
        "before-ack",
    ];
    let mut killed = 0;
    while !points.is_empty() {
        let point = points.remove(rng.below(points.len() as u64) as usize);
        let skip = rng.below(2).to_string();
        let out = target
            .command(&data)
            .args(ONE_AT_A_TIME)
            .env("TILEGATE_FAULT", point)
            .env("TILEGATE_FAULT_SKIP", &skip)
            .env("TILEGATE_FAULT_MAX_ATTEMPT", "1")
            .output()
            .unwrap();
        killed += u32::from(!out.status.success());
    }
    assert_eq!(killed, 5, "a worker was killed at each point");
    // Every window again, and two pools at once: duplicates in flight.
    let mut again = plan_args.to_vec();
    again.push("--all-windows");
    target.json(&data, &again);
    let pools: Vec<_> = (0..2)
        .map(|_| {
            target
                .command(&data)
                .args(["--json", "work", "--until-empty", "--visibility", "2"])
                .spawn()
                .unwrap()
        })
        .collect();
    for p in pools {
        assert!(p.wait_with_output().unwrap().status.success());
    }
    // An assembler killed holding the claim, then three racing for it once its lease lapses.
    let out = target
        .command(&data)
        .args(["assemble", &job, "--lease-ttl-ms", "2000"])
        .env("TILEGATE_FAULT", "after-claim")
        .output()
        .unwrap();
    assert!(!out.status.success(), "the first assembler was killed");
    std::thread::sleep(std::time::Duration::from_millis(2500));
    let racers: Vec<_> = (0..3)
        .map(|_| {
            target
                .command(&data)
                .args(["--json", "assemble", &job, "--lease-ttl-ms", "2000"])
                .spawn()
                .unwrap()
        })
        .collect();
    for r in racers {
        r.wait_with_output().unwrap();
    }
    let asm = target.json(&data, &["assemble", &job]);
    assert_eq!(asm["outcome"], "already_done", "{asm}");
    // The pyramid as the stores hold it, checked against its references.
    let local = stored_pyramid(&target, &data, dir.path(), &job);
    check_pyramid(&local, &job, &src, "WebMercatorQuad", "image", true);
    let objects = xyz_objects(&pyramid_dir(&local, &job)).len();
    // Written once: one version per key on S3.
    if let Target::Aws(aws) = &target {
        let rt = tokio::runtime::Runtime::new().unwrap();
        let log = rt.block_on(crate::faults::chaos::versions(
            aws,
            &[format!("tilegate/pyramids/{job}")],
        ));
        let twice: Vec<_> = log.iter().filter(|(_, v)| v.len() != 1).collect();
        assert!(twice.is_empty(), "written more than once: {twice:?}");
        assert!(
            log.len() > objects,
            "every tile, the archive and its TileJSON: {log:?}"
        );
    }
    let status = target.json(&data, &["status", &job]);
    let c = &status["counters"];
    assert_eq!(status["dead_letters_for_job"], 0, "{status}");
    let written = c["pyramid_tiles_written_total"].as_u64().unwrap();
    assert!(written <= objects as u64, "{c} {objects}");
    println!(
        "seed {seed}: {objects} tiles, {killed} workers killed, {written} Creates counted, {} \
         refused",
        c["conditional_write_precondition_failed_total"]
    );
}

/// The job's pyramid as its store holds it: the data directory itself on the embedded store,
/// elsewhere a copy of its objects under `dir/mirror`.
fn stored_pyramid(target: &Target, data: &Path, dir: &Path, job: &str) -> PathBuf {
    if let Target::Embedded = target {
        return data.to_path_buf();
    }
    let mirror = dir.join("mirror");
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        use tilegate_core::object::ObjectStoreExt as _;
        let b = target.backends(data).await;
        let prefix = format!("tilegate/pyramids/{job}");
        for meta in b.objects.list(&prefix).await.unwrap() {
            let got = b.objects.get_bytes(&object_key(&meta.key)).await.unwrap();
            let path = mirror.join("objects").join(&meta.key);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, &got.bytes).unwrap();
        }
    });
    mirror
}

/// The Lambda function with assembly on completion (`TILEGATE_ASSEMBLE=1`) on a pyramid job,
/// against the AWS emulator: two SQS batches of its windows, one window delivered twice. The
/// invocation that records the last window builds the zooms above and publishes the archive
/// — nobody runs `assemble`; every tile equals its reference and every key has one version.
#[test]
fn the_lambda_function_builds_and_publishes_a_pyramid() {
    use super::lambda::{event, receive_all};
    let Some(aws) = Aws::for_test("the_lambda_function_builds_and_publishes_a_pyramid") else {
        return;
    };
    let target = Target::Aws(aws.clone());
    let dir = tempdir();
    let src = utm_image(dir.path(), "utm", 1024);
    let data = dir.path().join("data");
    std::fs::create_dir_all(&data).unwrap();
    target.json(&data, &["init", "--create-bucket"]);
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(crate::faults::chaos::enable_versioning(&aws));
    let b = rt.block_on(target.backends(&data));
    let plan = target.json(
        &data,
        &[
            "plan",
            src.to_str().unwrap(),
            "--pyramid",
            "WebMercatorQuad",
            "--layout",
            "both",
            "--zoom",
            "11..15",
        ],
    );
    let job = plan["job_id"].as_str().unwrap().to_owned();
    let windows = plan["windows"].as_u64().unwrap() as usize;
    assert!((2..=18).contains(&windows), "{plan}");
    let planned = rt.block_on(receive_all(&b, windows));
    assert_eq!(planned.len(), windows);
    let opts = tilegate_assembler::AssembleOptions::new("lambda-test".into());
    let handler = tilegate_lambda::Handler::new(
        b.clone(),
        tilegate_lambda::HandlerConfig {
            visibility: std::time::Duration::from_secs(60),
            on_complete: Some(std::sync::Arc::new(
                tilegate_pipeline::complete::AssembleOnComplete::new(b.clone(), opts),
            )),
            ..tilegate_lambda::HandlerConfig::default()
        },
    );
    let half = windows / 2;
    let first = rt.block_on(handler.handle(event(&planned[..half])));
    assert!(
        first.response.batch_item_failures.is_empty(),
        "{:?}",
        first.outcomes
    );
    let mut second = planned[half..].to_vec();
    second.push(planned[0].clone());
    let result = rt.block_on(handler.handle(event(&second)));
    assert!(
        result.response.batch_item_failures.is_empty(),
        "{:?}",
        result.outcomes
    );
    let status = target.json(&data, &["status", &job]);
    assert_eq!(status["lifecycle"], "published", "{status}");
    assert_eq!(status["counters"]["claims_won_total"], 1, "{status}");
    let local = stored_pyramid(&target, &data, dir.path(), &job);
    check_pyramid(&local, &job, &src, "WebMercatorQuad", "image", true);
    let log = rt.block_on(crate::faults::chaos::versions(
        &aws,
        &[format!("tilegate/pyramids/{job}")],
    ));
    let twice: Vec<_> = log.iter().filter(|(_, v)| v.len() != 1).collect();
    assert!(twice.is_empty(), "written more than once: {twice:?}");
    let tiles = xyz_objects(&pyramid_dir(&local, &job)).len();
    assert!(
        tiles > windows && log.len() > tiles,
        "{tiles} tiles, {log:?}"
    );
}

#[test]
fn the_service_plans_a_pyramid_job_and_serves_its_map() {
    let dir = tempdir();
    // `serve --demo`: a tenant key, a sample elevation scene the tenant may read, and a worker
    // pool with the assembler in the process.
    let demo = service::Demo::start(
        dir.path(),
        &["serve", "--demo"],
        &dir.path().join("serve.log"),
    );
    let (base, addr, key) = (&demo.base, &demo.addr, &demo.key);
    let auth = [("authorization".to_owned(), format!("Bearer {key}"))];
    // A pyramid recipe as JSON: the zooms left out are planned from the source.
    let body = serde_json::json!({
        "source": format!("{base}/demo/scene.tif"),
        "recipe": {"operation": {"op": "pyramid", "tms": "WebMercatorQuad",
                                 "encoding": "terrarium"}, "window": 2048},
    });
    let r = http::request(addr, "POST", "/v1/jobs", &auth, Some(body.to_string()));
    assert!(r.status == 200 || r.status == 201, "{}", r.text());
    let job = r.json()["job"]["job_id"].as_str().unwrap().to_owned();
    let until = std::time::Instant::now() + std::time::Duration::from_secs(120);
    loop {
        let st = http::request(addr, "GET", &format!("/v1/jobs/{job}"), &auth, None);
        if st.json()["lifecycle"]["state"] == "published" || st.json()["lifecycle"] == "published" {
            break;
        }
        assert!(std::time::Instant::now() < until, "{}", st.text());
        std::thread::sleep(std::time::Duration::from_millis(300));
    }
    let map = http::request(addr, "GET", &format!("/v1/jobs/{job}/map"), &auth, None);
    assert_eq!(map.status, 200, "{}", map.text());
    let page = map.text();
    assert!(page.contains("/v1/assets/maplibre-gl.mjs") && page.contains("hillshade"));
    // The archive through the page's own signed link, and the scripts, without a credential.
    let archive = page.split("\"archive\":\"").nth(1).unwrap();
    let archive = &archive[..archive.find('"').unwrap()];
    let path = archive.trim_start_matches(base.as_str());
    let got = http::request(addr, "GET", path, &[], None);
    assert_eq!(got.status, 200);
    assert_eq!(&got.body[..7], b"PMTiles");
    let script = http::request(addr, "GET", "/v1/assets/pmtiles.js", &[], None);
    assert_eq!(script.status, 200);
    assert_eq!(
        http::request(addr, "GET", "/v1/assets/..%2Fpackage.json", &[], None).status,
        404
    );
    // Without the credential the page is refused.
    let anonymous = http::request(addr, "GET", &format!("/v1/jobs/{job}/map"), &[], None);
    assert_eq!(anonymous.status, 401);
}

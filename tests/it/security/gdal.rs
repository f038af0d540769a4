//! GDAL opened narrowly, tried as an attacker would: a VRT whose raw band reads a local secret
//! or an internal URL — named on the command line, fetched over HTTP, or stacked as a STAC
//! asset. Each attack is refused by name (`source-format-forbidden`), no byte of what the VRT
//! points at reaches any output, and the internal URL is never requested. A GeoTIFF over
//! `/vsicurl/` still opens and reads, alone and stacked.

use std::collections::HashMap;
use std::io::{BufRead as _, BufReader, Write as _};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use tilegate_cog::{
    CogError, EncodeRequest, SampleOptions, encode_window, probe, read_raster, sample_scene,
    stack_vrt,
};
use tilegate_core::WindowRect;
use tilegate_core::recipe::{Compression, Operation, Recipe};
use tilegate_core::source::SceneMeta;
use tilegate_tests::{tempdir, tg};

/// 64 bytes a worker must never publish: one 8×8 Byte band's worth.
fn secret() -> Vec<u8> {
    let mut s = b"AWS_SECRET_ACCESS_KEY=".to_vec();
    while s.len() < 64 {
        s.extend_from_slice(b"tilegate-secret/");
    }
    s.truncate(64);
    s
}

/// What the internal service answers: 64 bytes as well.
fn internal_answer() -> Vec<u8> {
    let mut s = b"{\"Token\":\"".to_vec();
    while s.len() < 64 {
        s.extend_from_slice(b"internal-creds-");
    }
    s.truncate(64);
    s
}

/// An 8×8 Byte VRT, georeferenced (so it plans), whose bands are raw reads of `files`.
fn raw_band_vrt(files: &[&str]) -> String {
    let mut xml = String::from(
        "<VRTDataset rasterXSize=\"8\" rasterYSize=\"8\">\n  <SRS>EPSG:32633</SRS>\n  \
         <GeoTransform>500000, 10, 0, 5000000, 0, -10</GeoTransform>\n",
    );
    for (i, f) in files.iter().enumerate() {
        xml.push_str(&format!(
            "  <VRTRasterBand dataType=\"Byte\" band=\"{}\" subClass=\"VRTRawRasterBand\">\n    \
             <SourceFilename relativeToVRT=\"0\">{f}</SourceFilename>\n    \
             <ImageOffset>0</ImageOffset>\n    <PixelOffset>1</PixelOffset>\n    \
             <LineOffset>8</LineOffset>\n  </VRTRasterBand>\n",
            i + 1
        ));
    }
    xml.push_str("</VRTDataset>\n");
    xml
}

/// An 8×8 Byte VRT whose one band is band 1 of `inner` (a plain, innocent-looking source).
fn simple_source_vrt(inner: &str) -> String {
    format!(
        "<VRTDataset rasterXSize=\"8\" rasterYSize=\"8\">\n  <SRS>EPSG:32633</SRS>\n  \
         <GeoTransform>500000, 10, 0, 5000000, 0, -10</GeoTransform>\n  \
         <VRTRasterBand dataType=\"Byte\" band=\"1\">\n    <SimpleSource>\n      \
         <SourceFilename relativeToVRT=\"0\">{inner}</SourceFilename>\n      \
         <SourceBand>1</SourceBand>\n    </SimpleSource>\n  </VRTRasterBand>\n</VRTDataset>\n"
    )
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

/// The attack must have been refused as `source-format-forbidden`, naming `driver`, in a
/// message without GDAL's own error text; if it was not, say whether the secrets leaked.
fn assert_forbidden<T>(
    what: &str,
    r: Result<T, CogError>,
    driver: &str,
    leak: impl Fn(&T) -> bool,
) {
    match r {
        Ok(v) => panic!(
            "{what}: opened and read, not refused (the forbidden bytes {} in the output)",
            if leak(&v) { "ARE" } else { "are not" }
        ),
        Err(e) => {
            let msg = e.to_string();
            assert_eq!(
                e.reason_code(),
                "source-format-forbidden",
                "{what}: refused for another reason: {msg} ({:?})",
                std::error::Error::source(&e).map(ToString::to_string)
            );
            assert!(!e.is_retryable(), "{what}: a refusal is permanent");
            assert!(msg.contains(driver), "{what}: `{msg}` must name {driver}");
            assert!(
                !msg.contains("CPL") && !msg.contains("ERROR"),
                "{what}: `{msg}` must not carry GDAL's error text"
            );
        }
    }
}

fn leaks(data: &tilegate_cog::RasterData, secrets: &[Vec<u8>]) -> bool {
    secrets.iter().any(|s| contains(&data.bytes, s))
}

/// What a worker would encode for the whole 8×8 scene of `path`.
fn request(path: &str) -> EncodeRequest {
    EncodeRequest {
        path: path.to_owned(),
        cache_key: format!("attack-{path}"),
        scene: SceneMeta {
            width: 8,
            height: 8,
            bands: 1,
            dtype: "Byte".to_owned(),
            crs_wkt: String::new(),
            geotransform: [500_000.0, 10.0, 0.0, 5_000_000.0, 0.0, -10.0],
            nodata: None,
            placement: None,
            datetime: None,
        },
        recipe: Recipe {
            operation: Operation::Copy {
                bands: Some(vec![1]),
            },
            compression: Compression::Deflate,
            window: 16,
        },
        rect: WindowRect {
            x: 0,
            y: 0,
            width: 8,
            height: 8,
        },
    }
}

/// Whether an encoded tile's pixels carry any of `secrets`.
fn tile_leaks(dir: &Path, tile: &[u8], secrets: &[Vec<u8>]) -> bool {
    let p = dir.join("leaked-tile.tif");
    std::fs::write(&p, tile).unwrap();
    read_raster(p.to_str().unwrap(), None, None).is_ok_and(|d| leaks(&d, secrets))
}

/// Every file under `dir`, recursively.
fn files_under(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return out;
    };
    for e in entries.flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(files_under(&p));
        } else {
            out.push(p);
        }
    }
    out
}

/// `tilegate run SOURCE` must be refused as `source-format-forbidden`, and nothing under the
/// data directory may hold the secret, raw or as decoded pixels.
fn assert_cli_refuses(source: &str, data: &Path, secrets: &[Vec<u8>]) {
    let out = tg(data, &["run", source, "--window", "16"], &[]);
    let err = String::from_utf8_lossy(&out.stderr);
    for f in files_under(data) {
        let bytes = std::fs::read(&f).unwrap_or_default();
        assert!(
            !secrets.iter().any(|s| contains(&bytes, s)),
            "{} holds the secret",
            f.display()
        );
        if f.extension().is_some_and(|e| e == "tif")
            && let Ok(d) = read_raster(f.to_str().unwrap(), None, None)
        {
            assert!(
                !leaks(&d, secrets),
                "{}'s pixels are the secret",
                f.display()
            );
        }
    }
    assert!(
        !out.status.success() && err.contains("error[source-format-forbidden]"),
        "`tilegate run {source}` must be refused as source-format-forbidden: {err}"
    );
}

/// A tiny HTTP/1.1 file server on 127.0.0.1: HEAD and GET with single byte ranges, keep-alive,
/// 404 for anything else; it records every request line it is sent.
struct RangeServer {
    port: u16,
    files: Arc<Mutex<HashMap<String, Vec<u8>>>>,
    seen: Arc<Mutex<Vec<String>>>,
    stop: Arc<AtomicBool>,
}

impl RangeServer {
    fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let files: Arc<Mutex<HashMap<String, Vec<u8>>>> = Arc::default();
        let seen: Arc<Mutex<Vec<String>>> = Arc::default();
        let stop = Arc::new(AtomicBool::new(false));
        let (f, s, st) = (files.clone(), seen.clone(), stop.clone());
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                if st.load(Ordering::SeqCst) {
                    break;
                }
                let Ok(conn) = conn else { continue };
                let (f, s) = (f.clone(), s.clone());
                std::thread::spawn(move || serve(conn, &f, &s));
            }
        });
        Self {
            port,
            files,
            seen,
            stop,
        }
    }

    fn put(&self, name: &str, bytes: Vec<u8>) {
        self.files
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(format!("/{name}"), bytes);
    }

    fn url(&self, name: &str) -> String {
        format!("http://127.0.0.1:{}/{name}", self.port)
    }

    /// How many requests named `/name`.
    fn requests_for(&self, name: &str) -> usize {
        let target = format!(" /{name}");
        self.seen
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .filter(|l| l.contains(&target))
            .count()
    }
}

impl Drop for RangeServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        // Wake the accept loop so that it sees the flag.
        let _ = TcpStream::connect(("127.0.0.1", self.port));
    }
}

fn serve(conn: TcpStream, files: &Mutex<HashMap<String, Vec<u8>>>, seen: &Mutex<Vec<String>>) {
    let Ok(write_half) = conn.try_clone() else {
        return;
    };
    let mut w = write_half;
    let mut r = BufReader::new(conn);
    loop {
        let mut line = String::new();
        if r.read_line(&mut line).unwrap_or(0) == 0 {
            return;
        }
        let mut range = None;
        loop {
            let mut h = String::new();
            if r.read_line(&mut h).unwrap_or(0) == 0 {
                return;
            }
            if h == "\r\n" || h == "\n" {
                break;
            }
            if let Some((k, v)) = h.split_once(':')
                && k.trim().eq_ignore_ascii_case("range")
            {
                range = v.trim().strip_prefix("bytes=").map(str::to_owned);
            }
        }
        seen.lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(line.trim_end().to_owned());
        let mut parts = line.split_whitespace();
        let method = parts.next().unwrap_or_default().to_owned();
        let path = parts.next().unwrap_or_default();
        let path = path.split('?').next().unwrap_or(path).to_owned();
        let body = files
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&path)
            .cloned();
        let (status, headers, payload) = match body {
            None => ("404 Not Found", String::new(), Vec::new()),
            Some(data) => match range.as_deref().and_then(|r| r.split_once('-')) {
                Some((a, b)) => {
                    let len = data.len();
                    let start: usize = a.parse().unwrap_or(0);
                    let end = b
                        .parse()
                        .unwrap_or(len.saturating_sub(1))
                        .min(len.saturating_sub(1));
                    if start >= len {
                        (
                            "416 Range Not Satisfiable",
                            format!("Content-Range: bytes */{len}\r\n"),
                            Vec::new(),
                        )
                    } else {
                        (
                            "206 Partial Content",
                            format!("Content-Range: bytes {start}-{end}/{len}\r\n"),
                            data[start..=end].to_vec(),
                        )
                    }
                }
                None => ("200 OK", String::new(), data),
            },
        };
        let head = format!(
            "HTTP/1.1 {status}\r\nContent-Length: {}\r\nAccept-Ranges: bytes\r\n{headers}\r\n",
            payload.len()
        );
        let sent = w.write_all(head.as_bytes()).and_then(|()| {
            if method == "HEAD" {
                Ok(())
            } else {
                w.write_all(&payload)
            }
        });
        if sent.is_err() {
            let _ = w.shutdown(Shutdown::Both);
            return;
        }
    }
}

/// `tilegate run evil.vrt`, the VRT on the operator's disk: its raw band would read a local
/// secret (the worker's environment, in the report) byte for byte into the tile.
#[test]
fn a_local_vrt_with_a_raw_band_on_a_secret_is_refused_and_nothing_leaks() {
    let tmp = tempdir();
    let dir = tmp.path();
    let secret_path = dir.join("environ");
    std::fs::write(&secret_path, secret()).unwrap();
    let vrt = dir.join("evil.vrt");
    std::fs::write(&vrt, raw_band_vrt(&[secret_path.to_str().unwrap()])).unwrap();
    let vrt = vrt.to_str().unwrap();
    let secrets = [secret()];

    assert_forbidden(
        "read_raster",
        read_raster(vrt, None, None),
        "VRTRawRasterBand",
        |d| leaks(d, &secrets),
    );
    assert_forbidden(
        "encode_window",
        encode_window(&request(vrt)),
        "VRTRawRasterBand",
        |t| tile_leaks(dir, t, &secrets),
    );
    assert_forbidden("probe", probe(vrt), "VRTRawRasterBand", |_| false);
    assert_cli_refuses(vrt, &dir.join("data"), &secrets);
}

/// The raw band one VRT further down: a local VRT whose simple source is a local VRT with the
/// raw band.
#[test]
fn a_local_vrt_nesting_a_raw_band_vrt_is_refused() {
    let tmp = tempdir();
    let dir = tmp.path();
    let secret_path = dir.join("environ");
    std::fs::write(&secret_path, secret()).unwrap();
    let inner = dir.join("inner.vrt");
    std::fs::write(&inner, raw_band_vrt(&[secret_path.to_str().unwrap()])).unwrap();
    let outer = dir.join("outer.vrt");
    std::fs::write(&outer, simple_source_vrt(inner.to_str().unwrap())).unwrap();
    let outer = outer.to_str().unwrap();
    let secrets = [secret()];

    assert_forbidden(
        "read_raster",
        read_raster(outer, None, None),
        "VRTRawRasterBand",
        |d| leaks(d, &secrets),
    );
    assert_forbidden(
        "encode_window",
        encode_window(&request(outer)),
        "VRTRawRasterBand",
        |t| tile_leaks(dir, t, &secrets),
    );
    assert_forbidden("probe", probe(outer), "VRTRawRasterBand", |_| false);
}

/// `tilegate plan http://HOST/evil.vrt`: the same raw band on a local secret, and one on an
/// internal URL (`/vsicurl/http://127.0.0.1:PORT/creds.json`). A remote source is never a VRT:
/// refused before GDAL reads either reference, so the internal service is never asked.
#[test]
fn a_remote_vrt_is_refused_and_its_references_are_never_read() {
    let tmp = tempdir();
    let dir = tmp.path();
    let secret_path = dir.join("environ");
    std::fs::write(&secret_path, secret()).unwrap();
    let server = RangeServer::start();
    server.put("creds.json", internal_answer());
    let creds = format!("/vsicurl/{}", server.url("creds.json"));
    server.put(
        "evil.vrt",
        raw_band_vrt(&[secret_path.to_str().unwrap(), &creds]).into_bytes(),
    );
    let path = format!("/vsicurl/{}", server.url("evil.vrt"));
    let secrets = [secret(), internal_answer()];

    assert_forbidden("read_raster", read_raster(&path, None, None), "VRT", |d| {
        leaks(d, &secrets)
    });
    assert_forbidden(
        "encode_window",
        encode_window(&request(&path)),
        "VRT",
        |t| tile_leaks(dir, t, &secrets),
    );
    assert_forbidden("probe", probe(&path), "VRT", |_| false);
    assert!(
        server.requests_for("evil.vrt") > 0,
        "the VRT itself was fetched"
    );
    assert_eq!(
        server.requests_for("creds.json"),
        0,
        "the internal URL must never be requested"
    );
}

/// A remote STAC item's asset that is that VRT: stacking it (what the planner and every worker
/// do) refuses it the same way.
#[test]
fn a_remote_vrt_stacked_as_an_item_asset_is_refused() {
    let tmp = tempdir();
    let dir = tmp.path();
    let secret_path = dir.join("environ");
    std::fs::write(&secret_path, secret()).unwrap();
    let server = RangeServer::start();
    server.put("creds.json", internal_answer());
    let creds = format!("/vsicurl/{}", server.url("creds.json"));
    server.put(
        "B04.vrt",
        raw_band_vrt(&[secret_path.to_str().unwrap(), &creds]).into_bytes(),
    );
    let asset = format!("/vsicurl/{}", server.url("B04.vrt"));
    let secrets = [secret(), internal_answer()];
    let stacked = stack_vrt(
        &format!("evil-item-{}", server.port),
        std::slice::from_ref(&asset),
        &["B04".to_owned()],
        true,
    );
    match stacked {
        Ok(stack) => assert_forbidden(
            "read the stacked item",
            read_raster(&stack, None, None),
            "VRT",
            |d| leaks(d, &secrets),
        ),
        Err(e) => assert_forbidden::<()>("stack the item", Err(e), "VRT", |()| false),
    }
    assert_eq!(
        server.requests_for("creds.json"),
        0,
        "the internal URL must never be requested"
    );
}

/// No regression: a GeoTIFF over `/vsicurl/` probes, reads and encodes as it does from disk,
/// and stacks as an item's asset.
#[test]
fn a_remote_geotiff_still_opens_reads_and_stacks() {
    let tmp = tempdir();
    let dir = tmp.path();
    let local = dir.join("scene.tif");
    let opts = SampleOptions {
        width: 96,
        height: 80,
        bands: 2,
        dtype: "UInt16".to_owned(),
        nodata: Some(0.0),
        seed: 29,
    };
    let meta = sample_scene(&local, &opts).unwrap();
    let local = local.to_str().unwrap();
    let server = RangeServer::start();
    server.put("scene.tif", std::fs::read(local).unwrap());
    let remote = format!("/vsicurl/{}", server.url("scene.tif"));

    let probed = probe(&remote).unwrap();
    assert_eq!(
        (probed.width, probed.height, probed.bands, &probed.dtype),
        (meta.width, meta.height, meta.bands, &meta.dtype)
    );
    assert_eq!(probed.geotransform, meta.geotransform);
    let want = read_raster(local, None, None).unwrap();
    let got = read_raster(&remote, None, None).unwrap();
    assert_eq!(got, want, "the remote read is the local read");

    let req = |path: &str| EncodeRequest {
        path: path.to_owned(),
        cache_key: format!("regression-{path}"),
        scene: meta.clone(),
        recipe: Recipe {
            operation: Operation::Copy { bands: None },
            compression: Compression::Deflate,
            window: 64,
        },
        rect: WindowRect {
            x: 64,
            y: 0,
            width: 32,
            height: 64,
        },
    };
    let tile_of = |path: &str, name: &str| {
        let t = encode_window(&req(path)).unwrap();
        let p = dir.join(name);
        std::fs::write(&p, t).unwrap();
        read_raster(p.to_str().unwrap(), None, None).unwrap().bytes
    };
    assert_eq!(
        tile_of(&remote, "remote-tile.tif"),
        tile_of(local, "local-tile.tif"),
        "a tile from the remote source has the local source's pixels"
    );

    let stack = stack_vrt(
        &format!("remote-item-{}", server.port),
        std::slice::from_ref(&remote),
        &["B1".to_owned()],
        true,
    )
    .unwrap();
    let stacked = read_raster(&stack, None, None).unwrap();
    assert_eq!(stacked.bands, 1);
    assert_eq!(
        stacked.bytes,
        want.band_bytes(0),
        "the stack's band is band 1"
    );
}

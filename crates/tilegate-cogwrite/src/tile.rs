//! What a tile is made of (structural tags, blocks, georeferencing) and the checks that decide
//! whether its blocks can be copied into the scene, must go to the GDAL fallback, or are wrong.

use crate::error::AssembleError;
use crate::tiff::{self, ASCII, Endian, Entry, Ifd, ParseError};
use tilegate_core::{Window, WindowRect};

// Baseline and extension tags (TIFF 6.0 §8, appendix A), GeoTIFF 1.0 and GDAL's private tags.
pub(crate) const NEW_SUBFILE_TYPE: u16 = 254;
pub(crate) const IMAGE_WIDTH: u16 = 256;
pub(crate) const IMAGE_LENGTH: u16 = 257;
pub(crate) const BITS_PER_SAMPLE: u16 = 258;
pub(crate) const COMPRESSION: u16 = 259;
pub(crate) const PHOTOMETRIC: u16 = 262;
pub(crate) const SAMPLES_PER_PIXEL: u16 = 277;
pub(crate) const PLANAR_CONFIGURATION: u16 = 284;
pub(crate) const PREDICTOR: u16 = 317;
pub(crate) const STRIP_OFFSETS: u16 = 273;
pub(crate) const ROWS_PER_STRIP: u16 = 278;
pub(crate) const STRIP_BYTE_COUNTS: u16 = 279;
pub(crate) const TILE_WIDTH: u16 = 322;
pub(crate) const TILE_LENGTH: u16 = 323;
pub(crate) const TILE_OFFSETS: u16 = 324;
pub(crate) const TILE_BYTE_COUNTS: u16 = 325;
pub(crate) const EXTRA_SAMPLES: u16 = 338;
pub(crate) const SAMPLE_FORMAT: u16 = 339;
pub(crate) const MODEL_PIXEL_SCALE: u16 = 33550;
pub(crate) const MODEL_TIEPOINT: u16 = 33922;
pub(crate) const MODEL_TRANSFORMATION: u16 = 34264;
pub(crate) const GEO_KEY_DIRECTORY: u16 = 34735;
pub(crate) const GEO_DOUBLE_PARAMS: u16 = 34736;
pub(crate) const GEO_ASCII_PARAMS: u16 = 34737;
pub(crate) const GDAL_METADATA: u16 = 42112;
pub(crate) const GDAL_NODATA: u16 = 42113;

/// Descriptive and georeferencing tags copied from the origin tile (window 0,0) into the
/// scene's main IFD. Window (0,0) starts at the scene's origin, so its tie point and pixel
/// scale (or its model transformation) are the scene's. GDAL_METADATA is filtered first.
const MAIN_IFD_COPIED: &[u16] = &[
    269,   // DocumentName
    270,   // ImageDescription
    271,   // Make
    272,   // Model
    282,   // XResolution
    283,   // YResolution
    285,   // PageName
    296,   // ResolutionUnit
    305,   // Software
    306,   // DateTime
    315,   // Artist
    316,   // HostComputer
    33432, // Copyright
    MODEL_PIXEL_SCALE,
    MODEL_TIEPOINT,
    MODEL_TRANSFORMATION,
    GEO_KEY_DIRECTORY,
    GEO_DOUBLE_PARAMS,
    GEO_ASCII_PARAMS,
];

/// TIFF compression codes (TIFF 6.0 §3, the TIFF registry, libtiff's `tiff.h`).
pub(crate) const COMPRESSION_NONE: u16 = 1;
pub(crate) const COMPRESSION_LZW: u16 = 5;
pub(crate) const COMPRESSION_DEFLATE: u16 = 8;
pub(crate) const COMPRESSION_ZSTD: u16 = 50000;
/// The obsolete code for the same zlib stream; libtiff reads both.
pub(crate) const COMPRESSION_DEFLATE_OLD: u16 = 32946;

/// The fields every tile must share with the origin tile for its blocks to be copied into one
/// IFD: TIFF has one value of each per IFD (NOTES: "predictor is per IFD"; "deflate samples
/// wider than 8 bits are in the file's byte order").
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Format {
    pub endian: Endian,
    /// False for a stripped file (then `tile_width` × `tile_height` is the strip).
    pub tiled: bool,
    pub tile_width: u32,
    pub tile_height: u32,
    pub samples: u16,
    pub bits: Vec<u16>,
    pub sample_format: Vec<u16>,
    pub planar: u16,
    pub compression: u16,
    pub predictor: u16,
    pub photometric: Option<u16>,
    pub extra_samples: Vec<u16>,
}

impl Format {
    /// The name of the first field that differs, for the fallback reason.
    fn first_difference(&self, other: &Self) -> Option<&'static str> {
        [
            (self.endian != other.endian, "byte order"),
            (self.tiled != other.tiled, "tiling"),
            (
                (self.tile_width, self.tile_height) != (other.tile_width, other.tile_height),
                "block size",
            ),
            (self.samples != other.samples, "samples per pixel"),
            (self.bits != other.bits, "bits per sample"),
            (self.sample_format != other.sample_format, "sample format"),
            (self.planar != other.planar, "planar configuration"),
            (self.compression != other.compression, "compression"),
            (self.predictor != other.predictor, "predictor"),
            (self.photometric != other.photometric, "photometric"),
            (self.extra_samples != other.extra_samples, "extra samples"),
        ]
        .into_iter()
        .find_map(|(differs, name)| differs.then_some(name))
    }

    /// Bytes per sample (uniform bit depth is checked when the tile is read).
    pub(crate) fn sample_bytes(&self) -> usize {
        usize::from(self.bits[0] / 8)
    }

    /// Block planes: one per band for PlanarConfiguration=2, else one.
    pub(crate) fn planes(&self) -> u32 {
        if self.planar == 2 {
            u32::from(self.samples)
        } else {
            1
        }
    }

    /// Samples per pixel inside one block.
    pub(crate) fn block_samples(&self) -> usize {
        if self.planar == 2 {
            1
        } else {
            usize::from(self.samples)
        }
    }

    /// GDAL's data type name (the SceneMeta `dtype`), if GDAL has one for these samples.
    pub(crate) fn gdal_dtype(&self) -> Option<&'static str> {
        let bits = *self.bits.first()?;
        if self.bits.iter().any(|&b| b != bits) {
            return None;
        }
        let fmt = *self.sample_format.first()?;
        if self.sample_format.iter().any(|&f| f != fmt) {
            return None;
        }
        // SampleFormat (TIFF 6.0 §19): 1 unsigned, 2 signed, 3 IEEE float, 4 undefined (read
        // as unsigned), 5 complex int, 6 complex float.
        Some(match (fmt, bits) {
            (1 | 4, 8) => "Byte",
            (2, 8) => "Int8",
            (1 | 4, 16) => "UInt16",
            (2, 16) => "Int16",
            (1 | 4, 32) => "UInt32",
            (2, 32) => "Int32",
            (1 | 4, 64) => "UInt64",
            (2, 64) => "Int64",
            (3, 32) => "Float32",
            (3, 64) => "Float64",
            (5, 32) => "CInt16",
            (5, 64) => "CInt32",
            (6, 64) => "CFloat32",
            (6, 128) => "CFloat64",
            _ => return None,
        })
    }
}

/// One tile, read: its format, blocks and the tags the scene needs from it.
#[derive(Debug, Clone)]
pub(crate) struct TileLayout {
    pub window: Window,
    pub width: u32,
    pub height: u32,
    pub format: Format,
    /// (offset, byte count) per block of the first IFD, in TIFF order.
    pub blocks: Vec<(u64, u64)>,
    /// A second IFD holds a transparency mask (NewSubfileType bit 2, TIFF 6.0 §8).
    pub has_mask: bool,
    pub nodata: Option<String>,
    pub ifd: Ifd,
}

impl TileLayout {
    pub(crate) fn nodata_value(&self) -> Option<f64> {
        self.nodata.as_deref().and_then(|s| s.trim().parse().ok())
    }
}

fn corrupt(window: Window, detail: impl Into<String>) -> AssembleError {
    AssembleError::CorruptTile {
        window,
        detail: detail.into(),
    }
}

fn uint(ifd: &Ifd, e: Endian, tag: u16, default: Option<u64>) -> Result<Option<u64>, String> {
    match ifd.get(tag) {
        None => Ok(default),
        Some(entry) => match entry.uints(e).as_deref() {
            Some([v, ..]) => Ok(Some(*v)),
            _ => Err(format!("tag {tag} has no integer value")),
        },
    }
}

fn uint_list(ifd: &Ifd, e: Endian, tag: u16) -> Result<Option<Vec<u64>>, String> {
    ifd.get(tag)
        .map(|entry| {
            entry
                .uints(e)
                .ok_or_else(|| format!("tag {tag} has no integer values"))
        })
        .transpose()
}

fn short(v: u64, tag: u16) -> Result<u16, String> {
    u16::try_from(v).map_err(|_| format!("tag {tag} value {v} is out of range"))
}

fn dim(v: u64, tag: u16) -> Result<u32, String> {
    u32::try_from(v)
        .ok()
        .filter(|&v| v > 0)
        .ok_or_else(|| format!("tag {tag} value {v} is not a valid size"))
}

/// Read a tile's first IFD and block table.
pub(crate) fn read_layout(window: Window, bytes: &[u8]) -> Result<TileLayout, AssembleError> {
    let t = tiff::parse(bytes).map_err(|e| match e {
        ParseError::NotTiff => AssembleError::NotATiff { window },
        ParseError::Corrupt(m) => corrupt(window, m),
    })?;
    read_ifd(window, &t, bytes.len() as u64).map_err(|m| corrupt(window, m))
}

fn read_ifd(window: Window, t: &tiff::Tiff, file_len: u64) -> Result<TileLayout, String> {
    let e = t.endian;
    let ifd = &t.ifds[0];
    let width = dim(
        uint(ifd, e, IMAGE_WIDTH, None)?.ok_or("no ImageWidth")?,
        IMAGE_WIDTH,
    )?;
    let height = dim(
        uint(ifd, e, IMAGE_LENGTH, None)?.ok_or("no ImageLength")?,
        IMAGE_LENGTH,
    )?;
    let samples = short(
        uint(ifd, e, SAMPLES_PER_PIXEL, Some(1))?.unwrap_or(1),
        SAMPLES_PER_PIXEL,
    )?;
    if samples == 0 {
        return Err("SamplesPerPixel is 0".into());
    }
    // BitsPerSample and SampleFormat have one value per sample; a single value is applied to
    // every sample, as libtiff does.
    let per_sample = |tag: u16, default: u16| -> Result<Vec<u16>, String> {
        let v = match uint_list(ifd, e, tag)? {
            None => vec![default; usize::from(samples)],
            Some(v) if v.len() == 1 => vec![short(v[0], tag)?; usize::from(samples)],
            Some(v) if v.len() == usize::from(samples) => v
                .into_iter()
                .map(|x| short(x, tag))
                .collect::<Result<_, _>>()?,
            Some(v) => {
                return Err(format!(
                    "tag {tag} has {} values for {samples} samples",
                    v.len()
                ));
            }
        };
        Ok(v)
    };
    let bits = per_sample(BITS_PER_SAMPLE, 1)?;
    let sample_format = per_sample(SAMPLE_FORMAT, 1)?;
    let planar = short(
        uint(ifd, e, PLANAR_CONFIGURATION, Some(1))?.unwrap_or(1),
        PLANAR_CONFIGURATION,
    )?;
    let compression = short(
        uint(ifd, e, COMPRESSION, Some(1))?.unwrap_or(1),
        COMPRESSION,
    )?;
    let predictor = short(uint(ifd, e, PREDICTOR, Some(1))?.unwrap_or(1), PREDICTOR)?;
    let photometric = uint(ifd, e, PHOTOMETRIC, None)?
        .map(|v| short(v, PHOTOMETRIC))
        .transpose()?;
    let extra_samples = uint_list(ifd, e, EXTRA_SAMPLES)?
        .unwrap_or_default()
        .into_iter()
        .map(|v| short(v, EXTRA_SAMPLES))
        .collect::<Result<_, _>>()?;

    let tiled = ifd.get(TILE_WIDTH).is_some();
    let (tile_width, tile_height, offsets, counts) = if tiled {
        let tw = dim(uint(ifd, e, TILE_WIDTH, None)?.unwrap_or(0), TILE_WIDTH)?;
        let th = dim(
            uint(ifd, e, TILE_LENGTH, None)?.ok_or("TileWidth without TileLength")?,
            TILE_LENGTH,
        )?;
        let offsets = uint_list(ifd, e, TILE_OFFSETS)?.ok_or("tiled without TileOffsets")?;
        let counts = uint_list(ifd, e, TILE_BYTE_COUNTS)?.ok_or("tiled without TileByteCounts")?;
        (tw, th, offsets, counts)
    } else {
        // Strips (TIFF 6.0 §3): readable, but not blocks of the scene's grid.
        let rows = uint(ifd, e, ROWS_PER_STRIP, Some(u64::from(height)))?
            .unwrap_or(u64::from(height))
            .min(u64::from(height));
        let offsets = uint_list(ifd, e, STRIP_OFFSETS)?.ok_or("neither tiles nor strips")?;
        let counts =
            uint_list(ifd, e, STRIP_BYTE_COUNTS)?.ok_or("StripOffsets without StripByteCounts")?;
        (width, dim(rows, ROWS_PER_STRIP)?, offsets, counts)
    };
    let format = Format {
        endian: e,
        tiled,
        tile_width,
        tile_height,
        samples,
        bits,
        sample_format,
        planar,
        compression,
        predictor,
        photometric,
        extra_samples,
    };
    let expected = u64::from(width.div_ceil(tile_width))
        * u64::from(height.div_ceil(tile_height))
        * u64::from(format.planes());
    if offsets.len() as u64 != expected || counts.len() as u64 != expected {
        return Err(format!(
            "{} block offsets and {} byte counts for {expected} blocks",
            offsets.len(),
            counts.len()
        ));
    }
    let mut blocks = Vec::with_capacity(offsets.len());
    for (i, (&off, &len)) in offsets.iter().zip(&counts).enumerate() {
        // Offset 0 with count 0 is a sparse (never written) block, which GDAL reads as nodata.
        let sparse = off == 0 && len == 0;
        if !sparse && off.checked_add(len).is_none_or(|end| end > file_len) {
            return Err(format!(
                "block {i} ({len} bytes at offset {off}) lies beyond the end of the file ({file_len} bytes)"
            ));
        }
        blocks.push((off, len));
    }
    let has_mask = t.ifds[1..].iter().any(|ifd| {
        uint(ifd, e, NEW_SUBFILE_TYPE, Some(0))
            .ok()
            .flatten()
            .is_some_and(|v| v & 4 != 0)
    });
    let nodata = ifd.get(GDAL_NODATA).and_then(Entry::ascii);
    Ok(TileLayout {
        window,
        width,
        height,
        format,
        blocks,
        has_mask,
        nodata,
        ifd: ifd.clone(),
    })
}

/// The check that makes a tile wrong for the scene whatever the assembly path: its size must
/// be its window's (partial in the last row and column).
pub(crate) fn check_against_window(t: &TileLayout, rect: WindowRect) -> Result<(), AssembleError> {
    if (t.width, t.height) != (rect.width, rect.height) {
        return Err(AssembleError::TileMismatch {
            window: t.window,
            detail: format!(
                "tile is {}×{} pixels, its window is {}×{}",
                t.width, t.height, rect.width, rect.height
            ),
        });
    }
    Ok(())
}

/// What must agree between tiles of one scene: band count, data type, nodata and
/// georeferencing. A difference means the tile is from another scene or recipe, which no
/// path can repair. (The tiles, not the source's `SceneMeta`, define bands, type and nodata:
/// a recipe may select bands or compute NDVI.)
pub(crate) fn check_against_origin(
    t: &TileLayout,
    origin: &TileLayout,
) -> Result<(), AssembleError> {
    let mismatch = |detail: String| AssembleError::TileMismatch {
        window: t.window,
        detail,
    };
    let (f, o) = (&t.format, &origin.format);
    if f.samples != o.samples {
        return Err(mismatch(format!(
            "tile has {} bands, window {} has {}",
            f.samples, origin.window, o.samples
        )));
    }
    match (f.gdal_dtype(), o.gdal_dtype()) {
        (Some(a), Some(b)) if a == b => {}
        (None, _) => {
            return Err(mismatch(format!(
                "tile samples ({:?} bits, formats {:?}) have no GDAL data type",
                f.bits, f.sample_format
            )));
        }
        (a, b) => {
            return Err(mismatch(format!(
                "tile samples are {}, window {}'s are {}",
                a.unwrap_or("?"),
                origin.window,
                b.unwrap_or("?")
            )));
        }
    }
    if t.nodata != origin.nodata {
        return Err(mismatch(format!(
            "nodata {:?} differs from window {}'s {:?}",
            t.nodata, origin.window, origin.nodata
        )));
    }
    for (tag, name) in [
        (GEO_KEY_DIRECTORY, "GeoKeyDirectory"),
        (GEO_ASCII_PARAMS, "GeoAsciiParams"),
        (GEO_DOUBLE_PARAMS, "GeoDoubleParams"),
        (MODEL_PIXEL_SCALE, "ModelPixelScale"),
    ] {
        if t.ifd.get(tag) != origin.ifd.get(tag) {
            return Err(mismatch(format!(
                "{name} differs from window {}'s",
                origin.window
            )));
        }
    }
    Ok(())
}

/// Why a tile's blocks cannot be copied into a scene on a `window`-pixel block grid, if so.
pub(crate) fn copy_obstacle(t: &TileLayout, origin: &Format, window: u32) -> Option<String> {
    let f = &t.format;
    if !f.tiled {
        return Some(format!("tile {} is stripped, not tiled", t.window));
    }
    if (f.tile_width, f.tile_height) != (window, window) {
        return Some(format!(
            "tile {} has {}×{} blocks, the scene's grid is {window}×{window}",
            t.window, f.tile_width, f.tile_height
        ));
    }
    if let Some(field) = f.first_difference(origin) {
        return Some(format!(
            "tile {} differs from the origin tile in {field}",
            t.window
        ));
    }
    if t.has_mask {
        return Some(format!("tile {} has an internal mask", t.window));
    }
    None
}

/// Why this crate cannot build the overviews itself for tiles of this format, if so.
pub(crate) fn overview_obstacle(f: &Format) -> Option<String> {
    let Some(dtype) = f.gdal_dtype() else {
        return Some("no native overviews for samples without a GDAL data type".into());
    };
    let float = dtype.starts_with("Float");
    if !matches!(
        dtype,
        "Byte" | "Int8" | "UInt16" | "Int16" | "UInt32" | "Int32" | "Float32" | "Float64"
    ) {
        return Some(format!("no native overviews for {dtype} samples"));
    }
    if !matches!(
        f.compression,
        COMPRESSION_NONE
            | COMPRESSION_LZW
            | COMPRESSION_DEFLATE
            | COMPRESSION_DEFLATE_OLD
            | COMPRESSION_ZSTD
    ) {
        return Some(format!(
            "no native codec for TIFF compression {}",
            f.compression
        ));
    }
    match f.predictor {
        1 | 2 => {}
        3 if float => {}
        p => return Some(format!("no native predictor {p} for {dtype} samples")),
    }
    // Palette indices cannot be averaged; YCbCr goes with JPEG (TIFF 6.0 §21).
    if matches!(f.photometric, Some(3 | 6)) {
        return Some(format!(
            "no native overviews for photometric interpretation {:?}",
            f.photometric
        ));
    }
    // GDAL treats an alpha band as a mask for the other bands when it builds overviews.
    if f.extra_samples.iter().any(|&s| s == 1 || s == 2) {
        return Some("no native overviews for tiles with an alpha band".into());
    }
    None
}

/// The scene main IFD's descriptive and georeferencing entries, from the origin tile.
pub(crate) fn main_ifd_copied(origin: &TileLayout) -> Vec<Entry> {
    let mut out: Vec<Entry> = MAIN_IFD_COPIED
        .iter()
        .filter_map(|&tag| origin.ifd.get(tag).cloned())
        .collect();
    if let Some(md) = origin.ifd.get(GDAL_METADATA).and_then(Entry::ascii)
        && let Some(kept) = filter_gdal_metadata(&md)
    {
        out.push(ascii_entry(GDAL_METADATA, &kept));
    }
    out
}

/// An ASCII entry with its terminating NUL (TIFF 6.0 §2).
pub(crate) fn ascii_entry(tag: u16, s: &str) -> Entry {
    let mut data = s.as_bytes().to_vec();
    data.push(0);
    Entry {
        tag,
        typ: ASCII,
        count: data.len() as u64,
        data,
    }
}

/// GDAL_METADATA without the per-tile statistics (`STATISTICS_*` items describe one window,
/// not the scene); `None` if nothing is left.
pub(crate) fn filter_gdal_metadata(xml: &str) -> Option<String> {
    let mut out = String::with_capacity(xml.len());
    let mut rest = xml;
    let mut kept = 0usize;
    while let Some(start) = rest.find("<Item") {
        let Some(len) = rest[start..].find("</Item>").map(|i| i + "</Item>".len()) else {
            break;
        };
        let item = &rest[start..start + len];
        let before = &rest[..start];
        let name = item
            .split_once("name=\"")
            .and_then(|(_, r)| r.split_once('"'))
            .map_or("", |(n, _)| n);
        if name.starts_with("STATISTICS_") {
            // Drop the item and the indentation before it.
            out.push_str(before.trim_end_matches([' ', '\t']));
        } else {
            out.push_str(before);
            out.push_str(item);
            kept += 1;
        }
        rest = &rest[start + len..];
    }
    out.push_str(rest);
    // Collapse the blank lines left behind.
    let text: Vec<&str> = out.lines().filter(|l| !l.trim().is_empty()).collect();
    (kept > 0).then(|| text.join("\n") + "\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statistics_are_dropped_from_gdal_metadata() {
        let xml = "<GDALMetadata>\n  <Item name=\"STATISTICS_MAXIMUM\" sample=\"0\">9</Item>\n  <Item name=\"OFFSET\" sample=\"0\" role=\"offset\">1.5</Item>\n  <Item name=\"STATISTICS_MEAN\" sample=\"0\">3</Item>\n</GDALMetadata>\n";
        assert_eq!(
            filter_gdal_metadata(xml).unwrap(),
            "<GDALMetadata>\n  <Item name=\"OFFSET\" sample=\"0\" role=\"offset\">1.5</Item>\n</GDALMetadata>\n"
        );
        let only_stats = "<GDALMetadata>\n  <Item name=\"STATISTICS_MEAN\" sample=\"0\">3</Item>\n</GDALMetadata>\n";
        assert_eq!(filter_gdal_metadata(only_stats), None);
    }

    #[test]
    fn dtype_names() {
        let mut f = Format {
            endian: Endian::Little,
            tiled: true,
            tile_width: 512,
            tile_height: 512,
            samples: 1,
            bits: vec![16],
            sample_format: vec![2],
            planar: 1,
            compression: 8,
            predictor: 2,
            photometric: Some(1),
            extra_samples: vec![],
        };
        assert_eq!(f.gdal_dtype(), Some("Int16"));
        assert_eq!(overview_obstacle(&f), None);
        f.predictor = 3;
        assert!(overview_obstacle(&f).is_some());
        f.bits = vec![32];
        f.sample_format = vec![3];
        assert_eq!(f.gdal_dtype(), Some("Float32"));
        assert_eq!(overview_obstacle(&f), None);
        f.compression = 34887; // LERC
        assert!(overview_obstacle(&f).unwrap().contains("34887"));
    }
}

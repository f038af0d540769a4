//! Which GDAL drivers may open a source, decided from its GDAL path alone ([`SourceDrivers`]).
//!
//! GDAL tries every driver it has by default, and some formats are references rather than
//! pixels: a VRT reads whatever files and URLs it names (a `VRTRawRasterBand` reads any file's
//! bytes as pixels), `MEM:::` reads process memory, WMS and WMTS fetch URLs. So every open of a
//! source passes `GDALOpenEx` an allow-list:
//!
//! * a **remote** source — anything GDAL reaches through a virtual file system (`/vsicurl/`,
//!   `/vsis3/`, `/vsigs/`, `/vsiaz/`, an archive, `/vsimem/`) or names by a connection string
//!   (`DRIVER:…`, `scheme://…`, inline XML) — is only ever a GeoTIFF. COGs are GeoTIFFs: GDAL's
//!   `COG` driver only writes, and `GTiff` reads them (JPEG/YCbCr, LZW, DEFLATE, strips,
//!   BigTIFF, palettes included);
//! * a **local** file — a plain path: the operator named it, and a remote document never
//!   reaches one (the source policy refuses that when planning) — may also be a VRT, whose raw
//!   bands are refused all the same (`rawband`);
//! * tilegate's own **stacked** item (`stack`) is a VRT built in memory from its assets, each
//!   opened under its own rule; it is never opened by name.

use crate::stack::STACK_DIR;

/// What kind of source a GDAL path names, and so which GDAL drivers may open it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum SourceDrivers {
    /// A plain path on the operator's disk: GeoTIFF, or a VRT without raw bands.
    Local,
    /// Anything else GDAL would open — a virtual file system path or a connection string:
    /// GeoTIFF only.
    Remote,
    /// tilegate's own in-memory stack of a STAC item's assets.
    Stack,
}

impl SourceDrivers {
    /// Decide from the GDAL path alone. Anything that is not plainly a local file path (or
    /// tilegate's own stack) is treated as remote, the narrowest rule.
    pub fn for_path(path: &str) -> Self {
        if path
            .strip_prefix(STACK_DIR)
            .is_some_and(|rest| rest.starts_with('/'))
        {
            Self::Stack
        } else if is_plain_local(path) {
            Self::Local
        } else {
            Self::Remote
        }
    }

    /// GDAL's short names of the drivers allowed to open such a source.
    pub fn drivers(self) -> &'static [&'static str] {
        match self {
            Self::Local => &["GTiff", "VRT"],
            Self::Remote => &["GTiff"],
            Self::Stack => &["VRT"],
        }
    }

    /// True if the driver GDAL calls `driver` may open such a source.
    pub fn allows(self, driver: &str) -> bool {
        self.drivers()
            .iter()
            .any(|d| d.eq_ignore_ascii_case(driver))
    }

    /// The kind of source, as messages name it: `local`, `remote`, `stacked`.
    pub fn origin(self) -> &'static str {
        match self {
            Self::Local => "local",
            Self::Remote => "remote",
            Self::Stack => "stacked",
        }
    }
}

/// A path GDAL resolves on the local file system, with no virtual file system (`/vsi…`, any
/// case), URL scheme, inline XML or `DRIVER:` connection-string prefix.
fn is_plain_local(path: &str) -> bool {
    let vsi = path
        .get(..4)
        .is_some_and(|p| p.eq_ignore_ascii_case("/vsi"));
    let first = path.split('/').next().unwrap_or_default();
    !path.is_empty()
        && !vsi
        && !path.contains("://")
        && !path.trim_start().starts_with('<')
        && !first.contains(':')
}

#[cfg(test)]
mod tests {
    use super::SourceDrivers::{self, Local, Remote, Stack};

    #[test]
    fn the_drivers_are_decided_from_the_path() {
        let table: &[(&str, SourceDrivers)] = &[
            // The operator's files.
            ("/data/scene.tif", Local),
            ("/data/mosaic.vrt", Local),
            ("relative/scene.tif", Local),
            ("scene.tif", Local),
            ("/data/odd:name.tif", Local),
            // Remote stores, whatever the extension.
            ("/vsicurl/https://example.com/evil.vrt", Remote),
            ("/vsicurl/http://127.0.0.1:8080/scene.tif", Remote),
            ("/vsicurl_streaming/https://h/x.tif", Remote),
            ("/vsis3/bucket/key.tif", Remote),
            ("/vsigs/bucket/key.tif", Remote),
            ("/vsiaz/container/key.tif", Remote),
            ("/vsiadls/fs/key.tif", Remote),
            ("/VSICURL/http://h/x.vrt", Remote),
            // Chained and in-memory file systems are not the operator's disk either.
            ("/vsizip//vsicurl/https://h/a.zip/b.vrt", Remote),
            ("/vsimem/somewhere/x.vrt", Remote),
            ("/vsistdin/", Remote),
            // Connection strings and URLs GDAL drivers would interpret.
            ("vrt:///data/scene.tif?bands=1", Remote),
            ("https://example.com/x.tif", Remote),
            ("MEM:::DATAPOINTER=0x1000,PIXELS=8,LINES=8", Remote),
            ("GTIFF_DIR:1:/data/scene.tif", Remote),
            ("<VRTDataset rasterXSize=\"1\" rasterYSize=\"1\"/>", Remote),
            ("", Remote),
            // tilegate's own stacks, and only those.
            ("/vsimem/tilegate-stac/abc.vrt", Stack),
            ("/vsimem/tilegate-stac/net-abc.vrt", Stack),
            ("/vsimem/tilegate-stacked/abc.vrt", Remote),
        ];
        for (path, want) in table {
            assert_eq!(SourceDrivers::for_path(path), *want, "{path}");
        }
    }

    #[test]
    fn a_remote_source_is_a_geotiff_and_never_a_vrt() {
        assert!(Remote.allows("GTiff"));
        for driver in ["VRT", "MEM", "WMS", "WMTS", "PNG", "HTTP", "netCDF"] {
            assert!(!Remote.allows(driver), "{driver}");
        }
        assert!(Local.allows("GTiff") && Local.allows("vrt"));
        assert!(!Local.allows("MEM") && !Local.allows("WMS"));
        assert_eq!(Stack.drivers(), ["VRT"]);
        assert_eq!(
            [Local.origin(), Remote.origin(), Stack.origin()],
            ["local", "remote", "stacked"]
        );
    }
}

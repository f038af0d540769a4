//! What the planner learned about a source, pinned for every window read.

use crate::error::StoreResult;
use crate::etag::ETag;
use crate::reference::Reference;
use async_trait::async_trait;
use serde::{Deserialize, Serialize};

/// A source as planned: canonical URI, its ETag (a content hash for local files, the
/// provider's ETag for objects) and size, plus a cheap fingerprint for local files.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct SourceInfo {
    /// Canonical URI: `file:///absolute/path`, `s3://bucket/key` or `gs://bucket/key`.
    pub uri: String,
    pub etag: ETag,
    pub size: u64,
    /// For local files: the stat fingerprint seen when the ETag was computed. A worker
    /// compares it per window and rehashes only when it differs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stat: Option<LocalStat>,
    /// For a STAC Item: the chosen assets, in band order, each pinned on its own. The item's
    /// ETag is then a hash of theirs, so every asset is part of the job's identity.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub assets: Vec<Asset>,
    /// The URI was given with credentials in it (a presigned or SAS URL). They are not part of
    /// `uri` — not stored, sent in a message or published — and live only in the memory of the
    /// process that planned the job ([`split_credentials`]).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub signed: bool,
}

/// A URL without the query parameters that carry credentials, and whether it had any: what
/// tilegate stores, sends and publishes of a presigned or SAS URL. The URL's other parameters
/// keep their order and spelling.
pub fn split_credentials(uri: &str) -> (String, bool) {
    let (base, fragment) = match uri.split_once('#') {
        Some((b, f)) => (b, Some(f)),
        None => (uri, None),
    };
    let Some((path, query)) = base.split_once('?') else {
        return (uri.to_owned(), false);
    };
    let mut kept = Vec::new();
    let mut stripped = false;
    for pair in query.split('&') {
        let name = pair.split('=').next().unwrap_or("");
        if crate::redact::is_credential_parameter(name) {
            stripped = true;
        } else if !pair.is_empty() {
            kept.push(pair);
        }
    }
    if !stripped {
        return (uri.to_owned(), false);
    }
    let mut out = path.to_owned();
    if !kept.is_empty() {
        out.push('?');
        out.push_str(&kept.join("&"));
    }
    if let Some(f) = fragment {
        out.push('#');
        out.push_str(f);
    }
    (out, true)
}

/// One asset of a STAC Item source: its key in the item and the pinned file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Asset {
    pub key: String,
    pub source: SourceInfo,
}

/// The stat fields that change whenever a local file's content may have changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, schemars::JsonSchema)]
pub struct LocalStat {
    pub size: u64,
    pub mtime_ns: i64,
    pub inode: u64,
    pub dev: u64,
}

/// The raster facts the planner read from the source with GDAL.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct SceneMeta {
    pub width: u32,
    pub height: u32,
    pub bands: u32,
    /// GDAL data type name (`Byte`, `UInt16`, ...).
    pub dtype: String,
    /// The CRS as WKT; empty if the source has none.
    pub crs_wkt: String,
    pub geotransform: [f64; 6],
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nodata: Option<f64>,
    /// Where the scene lies on the Earth (for catalogues), when it has a CRS.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub placement: Option<Placement>,
    /// The source's own timestamp (`TIFFTAG_DATETIME`) as RFC 3339 UTC, if it has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub datetime: Option<String>,
}

/// A scene's place on the Earth, computed once when planning so that everything built from
/// the job row (a STAC Item) is a pure function of it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Placement {
    /// The CRS's EPSG code, where it has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub epsg: Option<u32>,
    /// The scene's outline in WGS84 longitude/latitude: its edges, densified, as a closed
    /// ring (first point repeated last).
    pub footprint: Vec<[f64; 2]>,
    /// West, south, east, north of the footprint.
    pub bbox: [f64; 4],
    /// The CRS as PROJJSON, for a CRS without an EPSG code (catalogues name it so).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub projjson: Option<String>,
}

impl SourceInfo {
    /// The local path of a `file://` source.
    pub fn local_path(&self) -> Option<&str> {
        self.uri.strip_prefix("file://")
    }
}

/// Sources that live in an object store (`s3://bucket/key`): how to pin them and where GDAL
/// reads them. Separate from the output [`crate::object::ObjectStore`] because a source may sit
/// in any bucket, under any key (source keys are not tilegate's to validate).
#[async_trait]
pub trait SourceObjects: Send + Sync + std::fmt::Debug {
    /// The URI schemes served (`["s3"]`).
    fn schemes(&self) -> &'static [&'static str];
    /// HEAD the source: its ETag and size, or `None` if it does not exist.
    async fn head_source(&self, uri: &str) -> StoreResult<Option<(ETag, u64)>>;
}

/// The GDAL path of a source URI: `file:///p` → `/p`, `https://h/p` → `/vsicurl/https://h/p`,
/// `s3://b/k` → `/vsis3/b/k`, `gs://b/k` → `/vsigs/b/k`, `az://account/c/k` → `/vsiaz/c/k`
/// (GDAL takes the account from its configuration, `AZURE_STORAGE_CONNECTION_STRING` or
/// `AZURE_STORAGE_ACCOUNT`). Always of the URI's canonical form ([`Reference`]); `None` for a
/// URI that is not one (it is refused, not repaired).
pub fn gdal_path_of(uri: &str) -> Option<String> {
    Reference::parse(uri).ok()?.gdal_path()
}

#[cfg(test)]
mod tests {
    use super::gdal_path_of;

    #[test]
    fn credentials_are_split_off_a_url() {
        use super::split_credentials;
        assert_eq!(
            split_credentials(
                "https://b.s3.amazonaws.com/k.tif?versionId=3&X-Amz-Algorithm=AWS4-HMAC-SHA256\
                 &X-Amz-Credential=AKIA%2F&X-Amz-Signature=abc&X-Amz-Expires=60"
            ),
            (
                "https://b.s3.amazonaws.com/k.tif?versionId=3".to_owned(),
                true
            )
        );
        assert_eq!(
            split_credentials(
                "https://a.blob.core.windows.net/c/k.tif?sv=2022-11-02&ss=b&srt=o&sp=r\
                 &se=2026-12-31&spr=https&sig=SECRET%3D"
            ),
            ("https://a.blob.core.windows.net/c/k.tif".to_owned(), true)
        );
        assert_eq!(
            split_credentials("https://h/x.tif?a=1#frag"),
            ("https://h/x.tif?a=1#frag".to_owned(), false)
        );
        assert_eq!(
            split_credentials("https://h/x.tif?token=t&b=2#f"),
            ("https://h/x.tif?b=2#f".to_owned(), true)
        );
    }

    /// What is split off a URL and what is hidden in a log line are one list: every
    /// credential parameter split off is one `redact` hides, and the other way round.
    #[test]
    fn split_and_redact_know_the_same_names() {
        use super::split_credentials;
        use crate::redact::{REDACTED, redact};
        for name in [
            "password",
            "secret",
            "client_secret",
            "credential",
            "api-key",
            "x-api-key",
            "api_key",
            "apikey",
            "token",
            "access_token",
            "refresh_token",
            "id_token",
            "key",
            "pwd",
            "passwd",
            "code",
            "sig",
            "Signature",
            "AWSAccessKeyId",
            "GoogleAccessId",
            "X-Amz-Signature",
            "X-Amz-Credential",
            "X-Amz-Security-Token",
            "X-Goog-Signature",
            "X-Goog-Credential",
        ] {
            let url = format!("https://h/x.tif?a=1&{name}=s3cr3tvalue");
            assert_eq!(
                split_credentials(&url),
                ("https://h/x.tif?a=1".to_owned(), true),
                "{name}"
            );
            assert_eq!(
                redact(&url),
                format!("https://h/x.tif?a=1&{name}={REDACTED}"),
                "{name}"
            );
        }
        // Parts of a signed URL that are no secret: split off with it, left readable in logs.
        for name in ["X-Amz-Algorithm", "X-Amz-Date", "Expires", "se", "sp"] {
            let url = format!("https://h/x.tif?a=1&{name}=v");
            assert_eq!(split_credentials(&url).0, "https://h/x.tif?a=1", "{name}");
            assert_eq!(redact(&url), url, "{name}");
        }
        // Not a credential: kept by both.
        for name in ["skip", "versionId", "format"] {
            let url = format!("https://h/x.tif?{name}=1");
            assert_eq!(split_credentials(&url), (url.clone(), false), "{name}");
            assert_eq!(redact(&url), url, "{name}");
        }
    }

    #[test]
    fn gdal_reads_each_scheme_through_its_vsi_path() {
        let got = |u| gdal_path_of(u).unwrap();
        assert_eq!(got("file:///data/a.tif"), "/data/a.tif");
        assert_eq!(got("s3://b/k/a.tif"), "/vsis3/b/k/a.tif");
        assert_eq!(got("gs://b/k/a.tif"), "/vsigs/b/k/a.tif");
        assert_eq!(got("az://acct/c/k/a.tif"), "/vsiaz/c/k/a.tif");
        assert_eq!(gdal_path_of("az://acct"), None);
        assert_eq!(got("http://x/a.tif"), "/vsicurl/http://x/a.tif");
        assert_eq!(gdal_path_of("ftp://x/a.tif"), None);
    }
}

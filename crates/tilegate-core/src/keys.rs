//! Object keys: pure functions of job ID and window, built only from validated segments.
//!
//! Every segment that comes from outside (prefix, tenant, names) is checked against
//! `[A-Za-z0-9._-]`, must not be `.` or `..`, and is at most [`MAX_SEGMENT_LEN`] bytes. An unsafe
//! segment is a clear error, never escaped into something else.

use crate::grid::Window;
use crate::id::JobId;
use serde::{Deserialize, Serialize};
use std::fmt;

/// Longest accepted key segment, in bytes.
pub const MAX_SEGMENT_LEN: usize = 128;
/// Most segments in a prefix.
pub const MAX_PREFIX_SEGMENTS: usize = 16;
/// Longest key any store accepts (S3's, GCS's and Azure's limit), in bytes.
pub const MAX_KEY_LEN: usize = 1024;
/// Bytes a prefix leaves to what tilegate appends to it: the longest key derived from a
/// prefix is an attempt key, `{prefix}/attempts/{32-hex job}/{row}_{col}/attempt-{32 hex}.tif`
/// with 10-digit row and column (107 bytes); 128 leaves room for it.
pub const KEY_SUFFIX_RESERVE: usize = 128;
/// Longest accepted prefix, in bytes, so that every key derived from it fits [`MAX_KEY_LEN`].
pub const MAX_PREFIX_LEN: usize = MAX_KEY_LEN - KEY_SUFFIX_RESERVE;

/// The segment under which tenants' roots live (`{prefix}/tenants/{tenant}`); reserved.
pub const TENANTS_SEGMENT: &str = "tenants";

/// Why a key segment was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("accept key segment `{shown}`: {reason}")]
pub struct KeyError {
    /// The segment, truncated and with control characters escaped, for display only.
    pub shown: String,
    pub reason: &'static str,
}

fn shown(s: &str) -> String {
    s.chars().take(40).flat_map(char::escape_debug).collect()
}

/// Validate one key segment.
pub fn validate_segment(s: &str) -> Result<&str, KeyError> {
    let fail = |reason| {
        Err(KeyError {
            shown: shown(s),
            reason,
        })
    };
    if s.is_empty() {
        return fail("empty segment");
    }
    if s.len() > MAX_SEGMENT_LEN {
        return fail("longer than 128 bytes");
    }
    if s == "." || s == ".." {
        return fail("`.` and `..` are not allowed");
    }
    if !s
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
    {
        return fail("only A-Z, a-z, 0-9, `.`, `_` and `-` are allowed");
    }
    Ok(s)
}

/// Validate a `/`-separated key (every segment validated).
pub fn validate_key(key: &str) -> Result<&str, KeyError> {
    if key.len() > MAX_KEY_LEN {
        return Err(KeyError {
            shown: shown(key),
            reason: "key longer than 1024 bytes",
        });
    }
    for seg in key.split('/') {
        validate_segment(seg)?;
    }
    Ok(key)
}

/// An output prefix: one or more validated segments joined by `/`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(try_from = "String", into = "String")]
pub struct Prefix(String);

impl Prefix {
    /// The default output prefix.
    pub const DEFAULT: &'static str = "tilegate";

    /// Parse a canonical prefix: segments joined by single `/`, none leading or trailing. A
    /// leading `/` (an absolute path), a trailing one or `//` is refused, not normalised:
    /// stored prefixes are written by tilegate in canonical form, so anything else was made
    /// elsewhere. (The command line trims a user's `--prefix tiles/` before parsing.)
    pub fn parse(s: &str) -> Result<Self, KeyError> {
        let trimmed = s;
        if trimmed.len() > MAX_PREFIX_LEN {
            // Each segment may be valid and the whole still leave no room for the keys built
            // on it: refuse here, when planning, not per window at work time.
            return Err(KeyError {
                shown: shown(s),
                reason: "longer than 896 bytes (keys built on it would pass the stores' 1024-byte limit)",
            });
        }
        let segs: Vec<&str> = trimmed.split('/').collect();
        if segs.len() > MAX_PREFIX_SEGMENTS {
            return Err(KeyError {
                shown: shown(s),
                reason: "more than 16 segments",
            });
        }
        for seg in &segs {
            validate_segment(seg)?;
        }
        if segs[0] == STORE_RESERVED {
            return Err(KeyError {
                shown: shown(s),
                reason: "the first segment `.tilegate` is kept by the stores for their own state",
            });
        }
        Ok(Self(trimmed.to_owned()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// `{prefix}/tiles/{job_id}/{row:04}_{col:04}.tif`
    pub fn tile_key(&self, job: &JobId, w: Window) -> ObjectKey {
        ObjectKey::built(format!("{}/tiles/{job}/{w}.tif", self.0))
    }

    /// `{prefix}/tiles/{job_id}/` — for reports only; never listed to count tiles.
    pub fn tiles_dir(&self, job: &JobId) -> String {
        format!("{}/tiles/{job}/", self.0)
    }

    /// `{prefix}/scenes/{job_id}.tif`
    pub fn scene_key(&self, job: &JobId) -> ObjectKey {
        ObjectKey::built(format!("{}/scenes/{job}.tif", self.0))
    }

    /// `{prefix}/pyramids/{job_id}.pmtiles`: a pyramid job's archive (its "scene").
    pub fn pyramid_key(&self, job: &JobId) -> ObjectKey {
        ObjectKey::built(format!("{}/pyramids/{job}.pmtiles", self.0))
    }

    /// `{prefix}/pyramids/{job_id}/` — a pyramid's tiles, its TileJSON and its `z/x/y` layout.
    pub fn pyramid_dir(&self, job: &JobId) -> String {
        format!("{}/pyramids/{job}/", self.0)
    }

    /// `{prefix}/pyramids/{job_id}/blobs/{digest}.{ext}`: one distinct tile's bytes, shared by
    /// every address whose tile has these bytes (`digest`: 64 hex digits of BLAKE3).
    pub fn pyramid_blob_key(&self, job: &JobId, digest: &str, ext: &str) -> ObjectKey {
        debug_assert!(digest.len() == 64 && digest.bytes().all(|b| b.is_ascii_hexdigit()));
        debug_assert!(ext.bytes().all(|b| b.is_ascii_alphanumeric()));
        ObjectKey::built(format!("{}/pyramids/{job}/blobs/{digest}.{ext}", self.0))
    }

    /// `{prefix}/pyramids/{job_id}/{z}/{x}/{y}.{ext}`: the `z/x/y` layout's object of a tile.
    pub fn xyz_key(&self, job: &JobId, z: u8, x: u32, y: u32, ext: &str) -> ObjectKey {
        debug_assert!(ext.bytes().all(|b| b.is_ascii_alphanumeric()));
        ObjectKey::built(format!("{}/pyramids/{job}/{z}/{x}/{y}.{ext}", self.0))
    }

    /// `{prefix}/pyramids/{job_id}/tiles.json`: a pyramid's TileJSON 3.0 document.
    pub fn tilejson_key(&self, job: &JobId) -> ObjectKey {
        ObjectKey::built(format!("{}/pyramids/{job}/tiles.json", self.0))
    }

    /// `{prefix}/products/{name}/product.json`: a product's definition (grid, method,
    /// resampling), written once.
    pub fn product_key(&self, product: &str) -> ObjectKey {
        debug_assert!(crate::product::check_name(product).is_ok());
        ObjectKey::built(format!("{}/products/{product}/product.json", self.0))
    }

    /// `{prefix}/products/{name}/tiles/`: every tile of a product (its scenes and pointer).
    pub fn product_tiles_dir(&self, product: &str) -> String {
        format!("{}/products/{product}/tiles/", self.0)
    }

    /// `{prefix}/products/{name}/{file}`: one of a product's index documents
    /// (`collection.json`, `mosaic.json`, `index-{zone}.vrt`), rewritten by each index run.
    pub fn product_index_key(&self, product: &str, file: &str) -> ObjectKey {
        debug_assert!(crate::product::check_name(product).is_ok());
        debug_assert!(
            file.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
                && !file.starts_with('.')
        );
        ObjectKey::built(format!("{}/products/{product}/{file}", self.0))
    }

    /// `{prefix}/products/{name}/tiles/{tile}/scenes/` — the input scenes of a product tile,
    /// one object each: listed to plan the tile (its cost follows the tile's inputs).
    pub fn product_scenes_dir(&self, product: &str, tile: &str) -> String {
        format!("{}/products/{product}/tiles/{tile}/scenes/", self.0)
    }

    /// `{prefix}/products/{name}/tiles/{tile}/scenes/{scene_id}.json`: one input of a tile,
    /// written create-if-absent (a scene delivered again writes nothing).
    pub fn product_scene_key(&self, product: &str, tile: &str, scene: &str) -> ObjectKey {
        debug_assert!(crate::product::check_name(product).is_ok());
        debug_assert!(crate::product::GridTile::parse(tile).is_ok());
        debug_assert!(scene.bytes().all(|b| b.is_ascii_hexdigit()));
        ObjectKey::built(format!(
            "{}{scene}.json",
            self.product_scenes_dir(product, tile)
        ))
    }

    /// `{prefix}/products/{name}/tiles/{tile}/current.json`: the tile's pointer — the job
    /// whose COG is the tile now, moved only to a larger input set.
    pub fn product_pointer_key(&self, product: &str, tile: &str) -> ObjectKey {
        debug_assert!(crate::product::check_name(product).is_ok());
        debug_assert!(crate::product::GridTile::parse(tile).is_ok());
        ObjectKey::built(format!(
            "{}/products/{product}/tiles/{tile}/current.json",
            self.0
        ))
    }

    /// `{prefix}/attempts/{job_id}/` — every attempt key of a job is under it.
    pub fn attempts_dir(&self, job: &JobId) -> String {
        format!("{}/attempts/{job}/", self.0)
    }

    /// `{prefix}/attempts/{job_id}/{subject}/attempt-{id}.tif`: a regenerated output's
    /// immutable key, never a shared name (subject is a window `RRRR_CCCC` or `scene`).
    pub fn attempt_key(
        &self,
        job: &JobId,
        subject: &crate::ledger::Subject,
        attempt: &crate::ledger::AttemptId,
    ) -> ObjectKey {
        ObjectKey::built(format!(
            "{}/attempts/{job}/{subject}/attempt-{attempt}.tif",
            self.0,
            attempt = attempt.as_str()
        ))
    }
}

impl Default for Prefix {
    fn default() -> Self {
        Self(Self::DEFAULT.to_owned())
    }
}

impl TryFrom<String> for Prefix {
    type Error = KeyError;
    fn try_from(s: String) -> Result<Self, KeyError> {
        Self::parse(&s)
    }
}

impl From<Prefix> for String {
    fn from(p: Prefix) -> String {
        p.0
    }
}

impl fmt::Display for Prefix {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Who a job belongs to: one validated key segment. Two tenants planning the same source get
/// two jobs (the tenant is part of the job ID) whose outputs live apart: the default tenant's
/// under the prefix itself, every other tenant's under `{prefix}/tenants/{tenant}`.
#[derive(
    Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(try_from = "String", into = "String")]
pub struct Tenant(String);

impl Tenant {
    /// The tenant of single-user use.
    pub const DEFAULT: &'static str = "default";

    /// A tenant name: one key segment (`[A-Za-z0-9._-]`, at most 128 bytes, not `.`/`..`).
    /// Anything else — `%`, spaces, unicode — is refused here, never escaped.
    pub fn parse(s: &str) -> Result<Self, KeyError> {
        validate_segment(s).map(|s| Self(s.to_owned()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    pub fn is_default(&self) -> bool {
        self.0 == Self::DEFAULT
    }

    /// Where this tenant's outputs go under `prefix`: the prefix itself for the default
    /// tenant, `{prefix}/tenants/{tenant}` otherwise. The segment `tenants` is reserved for
    /// those roots: a prefix that contains it is refused, so that no prefix — the default
    /// tenant's `tiles/tenants/acme`, or another tenant's `tiles/tenants/acme` — can enter
    /// another tenant's root.
    pub fn root(&self, prefix: &Prefix) -> Result<Prefix, KeyError> {
        if prefix.as_str().split('/').any(|seg| seg == TENANTS_SEGMENT) {
            return Err(KeyError {
                shown: shown(prefix.as_str()),
                reason: "the segment `tenants` is reserved for tenants' roots: a prefix may not \
                         contain it (use --tenant)",
            });
        }
        if self.is_default() {
            Ok(prefix.clone())
        } else {
            Prefix::parse(&format!("{prefix}/{TENANTS_SEGMENT}/{}", self.0))
        }
    }
}

impl Default for Tenant {
    fn default() -> Self {
        Self(Self::DEFAULT.to_owned())
    }
}

impl TryFrom<String> for Tenant {
    type Error = KeyError;
    fn try_from(s: String) -> Result<Self, KeyError> {
        Self::parse(&s)
    }
}

impl From<Tenant> for String {
    fn from(t: Tenant) -> String {
        t.0
    }
}

impl fmt::Display for Tenant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// The first key segment every store keeps for its own state (the embedded store's internal
/// directory, the upload records of the stores that cannot list their uploads): no
/// [`ObjectKey`] starts with it.
pub const STORE_RESERVED: &str = ".tilegate";

/// An object key every store accepts: `/`-separated segments that each pass
/// [`validate_segment`], at most [`MAX_KEY_LEN`] bytes, and a first segment other than
/// [`STORE_RESERVED`]. Checked once, where it is made — the key builders of [`Prefix`], or
/// [`ObjectKey::parse`] for a key read from anywhere else — so that a store never sees an
/// unchecked key: [`crate::ObjectStore`] takes nothing else.
#[derive(
    Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(try_from = "String", into = "String")]
pub struct ObjectKey(String);

impl ObjectKey {
    /// Check `key`.
    pub fn parse(key: &str) -> Result<Self, KeyError> {
        validate_key(key)?;
        if key.split('/').next() == Some(STORE_RESERVED) {
            return Err(KeyError {
                shown: shown(key),
                reason: "the first segment `.tilegate` is kept by the stores for their own state",
            });
        }
        Ok(Self(key.to_owned()))
    }

    /// [`ObjectKey::parse`] as a store refuses a key: [`crate::StoreError::InvalidKey`], with
    /// the key shown escaped and cut to 200 characters. For keys read from rows, records and
    /// listings, which are checked again here rather than trusted.
    pub fn checked(key: &str) -> crate::StoreResult<Self> {
        Self::parse(key).map_err(|e| crate::StoreError::InvalidKey {
            key: shown_key(key),
            reason: format!("segment `{}`: {}", e.shown, e.reason),
        })
    }

    /// A key built by this module from checked parts.
    fn built(key: String) -> Self {
        debug_assert!(Self::parse(&key).is_ok(), "built an invalid key: {key}");
        Self(key)
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    pub fn into_string(self) -> String {
        self.0
    }
}

impl std::ops::Deref for ObjectKey {
    type Target = str;
    fn deref(&self) -> &str {
        &self.0
    }
}

impl AsRef<str> for ObjectKey {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

impl std::borrow::Borrow<str> for ObjectKey {
    fn borrow(&self) -> &str {
        &self.0
    }
}

impl PartialEq<str> for ObjectKey {
    fn eq(&self, other: &str) -> bool {
        self.0 == other
    }
}

impl PartialEq<&str> for ObjectKey {
    fn eq(&self, other: &&str) -> bool {
        self.0 == *other
    }
}

impl PartialEq<String> for ObjectKey {
    fn eq(&self, other: &String) -> bool {
        &self.0 == other
    }
}

impl PartialEq<ObjectKey> for String {
    fn eq(&self, other: &ObjectKey) -> bool {
        *self == other.0
    }
}

impl PartialEq<ObjectKey> for &str {
    fn eq(&self, other: &ObjectKey) -> bool {
        *self == other.0
    }
}

impl TryFrom<String> for ObjectKey {
    type Error = KeyError;
    fn try_from(s: String) -> Result<Self, KeyError> {
        Self::parse(&s)
    }
}

impl std::str::FromStr for ObjectKey {
    type Err = KeyError;
    fn from_str(s: &str) -> Result<Self, KeyError> {
        Self::parse(s)
    }
}

impl From<ObjectKey> for String {
    fn from(k: ObjectKey) -> String {
        k.0
    }
}

impl From<&ObjectKey> for String {
    fn from(k: &ObjectKey) -> String {
        k.0.clone()
    }
}

impl fmt::Display for ObjectKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A list prefix as a store accepts it: valid segments, the last one possibly partial.
pub fn check_list_prefix(prefix: &str) -> crate::StoreResult<()> {
    let (dir, rest) = prefix.rsplit_once('/').unwrap_or(("", prefix));
    let bad_rest = !rest
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
    if (!dir.is_empty() && validate_key(dir).is_err()) || bad_rest {
        return Err(crate::StoreError::InvalidKey {
            key: shown_key(prefix),
            reason: "a list prefix is a key prefix: segments of A-Z, a-z, 0-9, `.`, `_`, `-`"
                .to_owned(),
        });
    }
    Ok(())
}

fn shown_key(key: &str) -> String {
    key.chars().take(200).flat_map(char::escape_debug).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn object_keys_are_checked_once_where_they_are_made() {
        let k = ObjectKey::parse("tiles/a/0001_0002.tif").unwrap();
        assert_eq!(k.as_str(), "tiles/a/0001_0002.tif");
        // Serialized as the plain string; read back only if it is still a valid key.
        let json = serde_json::to_string(&k).unwrap();
        assert_eq!(json, "\"tiles/a/0001_0002.tif\"");
        assert_eq!(serde_json::from_str::<ObjectKey>(&json).unwrap(), k);
        assert!(serde_json::from_str::<ObjectKey>("\"a/../b\"").is_err());
        for bad in [
            "",
            "a//b",
            "/a",
            "a/",
            "a/../b",
            ".tilegate/uploads/x",
            ".tilegate",
        ] {
            assert!(ObjectKey::parse(bad).is_err(), "{bad:?} accepted");
            let e = ObjectKey::checked(bad).unwrap_err();
            assert!(matches!(e, crate::StoreError::InvalidKey { .. }), "{e:?}");
        }
        // Only the first segment is the stores' own.
        assert!(ObjectKey::parse("a/.tilegate/x").is_ok());
        assert!(ObjectKey::parse(&format!("{}a", "a/".repeat(600))).is_err());
        // A prefix cannot name it either, so every key built on a prefix is valid.
        assert!(Prefix::parse(".tilegate").is_err());
        assert!(Prefix::parse(".tilegate/x").is_err());
        assert!(Prefix::parse("x/.tilegate").is_ok());
    }

    #[test]
    fn tenant_roots_never_alias() {
        let p = |s| Prefix::parse(s).unwrap();
        let acme = Tenant::parse("acme").unwrap();
        assert_eq!(
            acme.root(&p("tiles")).unwrap().as_str(),
            "tiles/tenants/acme"
        );
        // The default tenant, or another tenant, naming a prefix inside acme's root.
        for prefix in [
            "tiles/tenants/acme",
            "tiles/tenants",
            "tenants",
            "x/tenants/acme/y",
        ] {
            for t in [
                Tenant::default(),
                Tenant::parse("evil").unwrap(),
                acme.clone(),
            ] {
                let e = t.root(&p(prefix)).unwrap_err();
                assert!(e.reason.contains("reserved"), "{prefix}: {e}");
            }
        }
        // A segment that only contains the word is fine.
        assert!(Tenant::default().root(&p("my-tenants")).is_ok());
    }

    #[test]
    fn tile_key_shape() {
        let p = Prefix::parse("out/a-b").unwrap();
        let j = JobId::derive("u", "e", "r", "p");
        assert_eq!(
            p.tile_key(&j, Window::new(3, 12)),
            format!("out/a-b/tiles/{j}/0003_0012.tif")
        );
        assert_eq!(p.scene_key(&j), format!("out/a-b/scenes/{j}.tif"));
    }

    #[test]
    fn refuses_unsafe_segments() {
        let long = "a".repeat(1024);
        for bad in [
            "..",
            ".",
            "",
            "a/../b",
            "a b",
            "é",
            "a\0b",
            "a\\b",
            long.as_str(),
        ] {
            assert!(Prefix::parse(bad).is_err(), "{bad:?} accepted");
        }
        assert!(validate_segment("a/b").is_err());
        assert!(Prefix::parse("ok.name_1-2").is_ok());
    }

    #[test]
    fn refuses_a_prefix_whose_keys_would_be_too_long() {
        // Eight valid 128-byte segments: each passes, the whole leaves no room for keys.
        let long = vec!["a".repeat(128); 8].join("/");
        let err = Prefix::parse(&long).unwrap_err();
        assert!(err.reason.contains("1024-byte"), "{err}");
        // The longest accepted prefix still gives keys within the limit, for any window.
        let longest = format!("{}/{}", "b".repeat(128), vec!["c".repeat(127); 6].join("/"));
        assert_eq!(longest.len(), MAX_PREFIX_LEN);
        let p = Prefix::parse(&longest).unwrap();
        let j = JobId::derive("u", "e", "r", "p");
        let w = Window::new(u32::MAX, u32::MAX);
        assert!(validate_key(&p.tile_key(&j, w)).is_ok());
        let attempt = crate::ledger::AttemptId::parse(&"f".repeat(32)).unwrap();
        let subject = crate::ledger::Subject::Window(w);
        assert!(validate_key(&p.attempt_key(&j, &subject, &attempt)).is_ok());
    }

    #[test]
    fn tenants_live_apart() {
        let p = Prefix::parse("out").unwrap();
        assert_eq!(Tenant::default().root(&p).unwrap(), p);
        let acme = Tenant::parse("acme").unwrap();
        assert_eq!(acme.root(&p).unwrap().as_str(), "out/tenants/acme");
        for bad in ["a b", "50%", "é", "..", "", "a/b"] {
            assert!(Tenant::parse(bad).is_err(), "{bad:?} accepted");
        }
    }

    proptest! {
        #[test]
        fn validation_never_panics_and_accepts_only_safe(s in "\\PC{0,200}") {
            if let Ok(k) = validate_key(&s) {
                prop_assert!(k.split('/').all(|seg| !seg.is_empty() && seg != ".." && seg != "."));
                prop_assert!(k.bytes().all(|b| b.is_ascii_alphanumeric() || b"._-/".contains(&b)));
            }
        }

        #[test]
        fn keys_are_pure(r in 0u32..10000, c in 0u32..10000) {
            let p = Prefix::default();
            let j = JobId::derive("s", "e", "f", "p");
            prop_assert_eq!(p.tile_key(&j, Window::new(r, c)), p.tile_key(&j, Window::new(r, c)));
            prop_assert!(validate_key(&p.tile_key(&j, Window::new(r, c))).is_ok());
        }
    }
}

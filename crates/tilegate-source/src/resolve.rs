//! Resolving a user's path or URI to a pinned [`SourceInfo`], and the cheap check a worker
//! makes per window that the source is still the one planned — both through the source policy.
//!
//! For a local file the ETag is a content hash (BLAKE3), computed once when planning. A
//! worker compares size, mtime and inode per window and rehashes only when they differ.

use crate::policy::{Forbidden, Origin, SourcePolicy};
use std::collections::HashMap;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, LazyLock, Mutex};
use tilegate_core::Reason;
use tilegate_core::reference::Reference;
use tilegate_core::source::LocalStat;
use tilegate_core::{Backends, ETag, SourceInfo};

/// Why a source cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    #[error("open source `{path}`: no such file")]
    Missing { path: String },
    #[error("read source `{path}`")]
    Io {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("read source `{uri}`: the `{scheme}` scheme is not supported by this build")]
    UnsupportedScheme { uri: String, scheme: String },
    #[error("read source `{uri}`")]
    Store {
        uri: String,
        #[source]
        source: tilegate_core::StoreError,
    },
    #[error("read source `{uri}`: {message}")]
    Http {
        uri: String,
        message: String,
        retryable: bool,
    },
    #[error("read STAC item `{uri}`: {reason}")]
    BadItem { uri: String, reason: String },
    #[error(
        "read source `{uri}`: it was planned from a URL with credentials (a presigned or SAS \
         URL), which are kept only by the process that planned it; run the job with `tilegate \
         run`, or give the workers their own access (an `s3://`, `gs://` or `az://` source)"
    )]
    CredentialsUnavailable { uri: String },
    #[error("read source `{uri}`")]
    Forbidden {
        uri: String,
        #[source]
        reason: Forbidden,
    },
    #[error(
        "verify source `{uri}`: content changed after planning (planned {planned}, found {found})"
    )]
    Changed {
        uri: String,
        planned: ETag,
        found: ETag,
    },
}

impl SourceError {
    /// The policy's refusal of `uri`.
    pub fn forbidden(uri: &str, reason: Forbidden) -> Self {
        Self::Forbidden {
            uri: uri.to_owned(),
            reason,
        }
    }

    /// The named reason used for dead letters.
    pub fn reason_code(&self) -> Reason {
        match self {
            Self::Missing { .. } => Reason::SourceMissing,
            Self::Io { .. } => Reason::SourceUnreadable,
            Self::UnsupportedScheme { .. } => Reason::UnsupportedSource,
            Self::Changed { .. } => Reason::SourceChanged,
            Self::Store { .. } | Self::Http { .. } => Reason::SourceUnreadable,
            Self::BadItem { .. } => Reason::BadStacItem,
            Self::Forbidden { .. } => Reason::SourceForbidden,
            Self::CredentialsUnavailable { .. } => Reason::SourceCredentialsUnavailable,
        }
    }

    /// Only an I/O hiccup may go away by itself.
    pub fn is_retryable(&self) -> bool {
        match self {
            Self::Io { source, .. } => source.kind() != std::io::ErrorKind::PermissionDenied,
            Self::Store { source, .. } => source.is_retryable(),
            Self::Http { retryable, .. } => *retryable,
            _ => false,
        }
    }
}

/// A resolved source: what to pin and where GDAL opens it.
#[derive(Debug, Clone)]
pub struct ResolvedSource {
    pub info: SourceInfo,
    pub gdal_path: String,
}

/// Resolve a path or `file://` URI: canonical URI, content-hash ETag, size and stat.
pub fn resolve_source(input: &str) -> Result<ResolvedSource, SourceError> {
    let path = if let Some(p) = input.strip_prefix("file://") {
        PathBuf::from(p)
    } else if let Some((scheme, _)) = input.split_once("://") {
        return Err(SourceError::UnsupportedScheme {
            uri: input.to_owned(),
            scheme: scheme.to_owned(),
        });
    } else {
        PathBuf::from(input)
    };
    let canon = std::fs::canonicalize(&path).map_err(|e| io_error(&path, e))?;
    let stat = local_stat(&canon)?;
    let etag = hash_file(&canon)?;
    let gdal_path = canon.to_string_lossy().into_owned();
    Ok(ResolvedSource {
        info: SourceInfo {
            uri: format!("file://{gdal_path}"),
            etag,
            size: stat.size,
            stat: Some(stat),
            assets: Vec::new(),
            signed: false,
        },
        gdal_path,
    })
}

/// Where GDAL opens a planned source (`/vsis3/…` for S3, `/vsicurl/…` for HTTP(S), a VRT in
/// memory stacking the assets of a STAC Item).
pub fn gdal_path(info: &SourceInfo) -> Result<String, SourceError> {
    if !info.assets.is_empty() {
        return crate::stac::stack_path(info);
    }
    let uri = signed_url(info)?;
    Reference::parse(&uri)
        .map_err(|r| SourceError::forbidden(&info.uri, r))?
        .gdal_path()
        .ok_or_else(|| unsupported(&info.uri))
}

/// The presigned or SAS URLs this process planned, by the URI stored without their credentials.
static SIGNED: LazyLock<Mutex<HashMap<String, String>>> = LazyLock::new(Default::default);

/// The URL to read `info` from: its URI, or for a source planned from a URL with credentials
/// the whole URL — known only to the process that planned it.
fn signed_url(info: &SourceInfo) -> Result<String, SourceError> {
    if !info.signed {
        return Ok(info.uri.clone());
    }
    SIGNED
        .lock()
        .expect("signed URLs")
        .get(&info.uri)
        .cloned()
        .ok_or_else(|| SourceError::CredentialsUnavailable {
            uri: info.uri.clone(),
        })
}

fn unsupported(uri: &str) -> SourceError {
    SourceError::UnsupportedScheme {
        uri: uri.to_owned(),
        scheme: uri.split("://").next().unwrap_or("").to_owned(),
    }
}

/// Resolve a path, `file://`, HTTP(S) or object-store URI (`s3://bucket/key`, through
/// `Backends::sources`) to a pinned source, after the policy judged it as a reference from
/// `origin`. The reference is parsed once ([`Reference`]); what is pinned, stored and read is
/// its canonical form, never `input` as typed.
pub async fn resolve(
    b: &Backends,
    policy: &Arc<SourcePolicy>,
    input: &str,
    origin: Origin<'_>,
) -> Result<ResolvedSource, SourceError> {
    let reference = policy
        .admit(input, origin)
        .map_err(|r| SourceError::forbidden(&shown(input), r))?;
    let canonical = reference.canonical();
    match &reference {
        Reference::Http(_) => {
            let (etag, size) = crate::http::head(policy, &canonical, origin).await?;
            // A presigned or SAS URL: its credentials stay in this process; what is stored,
            // sent and published is the URL without them.
            let (uri, signed) = tilegate_core::source::split_credentials(&canonical);
            if signed {
                SIGNED
                    .lock()
                    .expect("signed URLs")
                    .insert(uri.clone(), canonical.clone());
            }
            let mut pinned = pinned_remote(&uri, etag, size)?;
            pinned.info.signed = signed;
            pinned.gdal_path = gdal_path(&pinned.info)?;
            Ok(pinned)
        }
        Reference::Local(_) => tokio::task::spawn_blocking(move || resolve_source(&canonical))
            .await
            .expect("source hashing panicked"),
        Reference::Object { store, .. } => {
            let sources = b
                .sources
                .as_ref()
                .filter(|s| s.schemes().contains(&store.scheme()))
                .ok_or_else(|| unsupported(&canonical))?;
            let (etag, size) = sources
                .head_source(&canonical)
                .await
                .map_err(|source| store_error(&canonical, source))?
                .ok_or_else(|| SourceError::Missing {
                    path: canonical.clone(),
                })?;
            pinned_remote(&canonical, etag, size)
        }
        Reference::Message(_) => Err(unsupported(&canonical)),
    }
}

/// How a reference is named in an error: without credentials in its query.
pub(crate) fn shown(uri: &str) -> String {
    tilegate_core::source::split_credentials(uri).0
}

/// A store's error reading a source: a refusal by the source's own rules (an Azure account
/// other than the configured one, say) is `source-forbidden` like the policy's own.
fn store_error(uri: &str, source: tilegate_core::StoreError) -> SourceError {
    let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(&source);
    while let Some(c) = cause {
        if let Some(f) = c.downcast_ref::<Forbidden>() {
            return SourceError::forbidden(uri, f.clone());
        }
        cause = c.source();
    }
    SourceError::Store {
        uri: uri.to_owned(),
        source,
    }
}

/// A remote source (HTTP or object store) pinned at `etag`.
fn pinned_remote(input: &str, etag: ETag, size: u64) -> Result<ResolvedSource, SourceError> {
    Ok(ResolvedSource {
        gdal_path: tilegate_core::source::gdal_path_of(input).ok_or_else(|| unsupported(input))?,
        info: SourceInfo {
            uri: input.to_owned(),
            etag,
            size,
            stat: None,
            assets: Vec::new(),
            signed: false,
        },
    })
}

/// `Ok` if `found` is the planned pin, else `source-changed`.
fn still_planned(info: &SourceInfo, found: ETag) -> Result<(), SourceError> {
    if found == info.etag {
        Ok(())
    } else {
        Err(SourceError::Changed {
            uri: info.uri.clone(),
            planned: info.etag.clone(),
            found,
        })
    }
}

/// Judge a planned source before it is opened (GDAL reads it next): its URI by the policy as
/// the operator's, a STAC Item's assets as references the item made, and every HTTP(S) host
/// name on the addresses it resolves to now. Sends nothing to the source.
pub async fn admit(policy: &SourcePolicy, info: &SourceInfo) -> Result<(), SourceError> {
    admit_from(policy, info, Origin::Operator).await
}

async fn admit_from(
    policy: &SourcePolicy,
    info: &SourceInfo,
    origin: Origin<'_>,
) -> Result<(), SourceError> {
    let forbidden = |r| SourceError::forbidden(&info.uri, r);
    if !info.assets.is_empty() {
        let doc = info.uri.split('#').next().unwrap_or(&info.uri);
        for asset in &info.assets {
            Box::pin(admit_from(policy, &asset.source, Origin::Document(doc))).await?;
        }
        return Ok(());
    }
    policy.check(&info.uri, origin).map_err(forbidden)?;
    signed_url(info)?;
    if crate::http::is_http(&info.uri)
        && let Some(host) = reqwest::Url::parse(&info.uri)
            .ok()
            .and_then(|u| u.host_str().map(str::to_owned))
        && host.parse::<std::net::IpAddr>().is_err()
    {
        let ips: Vec<std::net::IpAddr> = tokio::net::lookup_host((host.as_str(), 0))
            .await
            .map_err(|e| SourceError::Http {
                uri: info.uri.clone(),
                message: format!("resolve `{host}`: {e}"),
                retryable: true,
            })?
            .map(|a| a.ip())
            .collect();
        policy.check_addresses(&ips).map_err(forbidden)?;
    }
    Ok(())
}

/// Check that a planned source still has its planned content — for a local file the stat
/// fingerprint (rehashing only if it changed, see [`SourceGuard`]), for an object a HEAD — and
/// that the policy still allows reading it: the source as the operator's (the job row's), a
/// STAC Item's assets as references its document made.
pub async fn verify(
    b: &Backends,
    policy: &Arc<SourcePolicy>,
    guard: &SourceGuard,
    info: &SourceInfo,
) -> Result<(), SourceError> {
    verify_from(b, policy, guard, info, Origin::Operator).await
}

async fn verify_from(
    b: &Backends,
    policy: &Arc<SourcePolicy>,
    guard: &SourceGuard,
    info: &SourceInfo,
    origin: Origin<'_>,
) -> Result<(), SourceError> {
    if !info.assets.is_empty() {
        let doc = info.uri.split('#').next().unwrap_or(&info.uri);
        for asset in &info.assets {
            Box::pin(verify_from(
                b,
                policy,
                guard,
                &asset.source,
                Origin::Document(doc),
            ))
            .await?;
        }
        return Ok(());
    }
    if crate::http::is_http(&info.uri) {
        let (found, _) = crate::http::head(policy, &signed_url(info)?, origin).await?;
        return still_planned(info, found);
    }
    policy
        .check(&info.uri, origin)
        .map_err(|r| SourceError::forbidden(&info.uri, r))?;
    if info.local_path().is_some() {
        return guard.verify(info);
    }
    let scheme = info.uri.split("://").next().unwrap_or("");
    let sources = b
        .sources
        .as_ref()
        .filter(|s| s.schemes().contains(&scheme))
        .ok_or_else(|| unsupported(&info.uri))?;
    match sources.head_source(&info.uri).await {
        Ok(Some((found, _))) => still_planned(info, found),
        Ok(None) => Err(SourceError::Missing {
            path: info.uri.clone(),
        }),
        Err(source) => Err(store_error(&info.uri, source)),
    }
}

fn io_error(path: &Path, e: std::io::Error) -> SourceError {
    let path = path.display().to_string();
    if e.kind() == std::io::ErrorKind::NotFound {
        SourceError::Missing { path }
    } else {
        SourceError::Io { path, source: e }
    }
}

/// The stat fingerprint of a local file.
pub fn local_stat(path: &Path) -> Result<LocalStat, SourceError> {
    let m = std::fs::metadata(path).map_err(|e| io_error(path, e))?;
    if !m.is_file() {
        return Err(SourceError::Io {
            path: path.display().to_string(),
            source: std::io::Error::other("not a regular file"),
        });
    }
    Ok(LocalStat {
        size: m.len(),
        mtime_ns: m.mtime() * 1_000_000_000 + m.mtime_nsec(),
        inode: m.ino(),
        dev: m.dev(),
    })
}

/// The content-hash ETag of a local file: quoted, first 128 bits of BLAKE3, hex.
pub fn hash_file(path: &Path) -> Result<ETag, SourceError> {
    let mut h = blake3::Hasher::new();
    h.update_mmap_rayon(path).map_err(|e| io_error(path, e))?;
    Ok(ETag::new(format!("\"{}\"", &h.finalize().to_hex()[..32])))
}

/// A worker's per-process memory of local sources it has verified, so that a source is
/// rehashed only when its stat fingerprint changes.
#[derive(Debug, Default)]
pub struct SourceGuard {
    seen: Mutex<HashMap<PathBuf, (LocalStat, ETag)>>,
}

impl SourceGuard {
    pub fn new() -> Self {
        Self::default()
    }

    /// Check that the source still has its planned content. Cheap when nothing changed: one
    /// `stat`.
    pub fn verify(&self, info: &SourceInfo) -> Result<(), SourceError> {
        let path = PathBuf::from(gdal_path(info)?);
        let now = local_stat(&path)?;
        if info.stat == Some(now) {
            return Ok(());
        }
        let known = self
            .seen
            .lock()
            .expect("source guard lock")
            .get(&path)
            .filter(|(stat, _)| *stat == now)
            .map(|(_, etag)| etag.clone());
        let found = match known {
            Some(etag) => etag,
            None => {
                tracing::info!(source = %info.uri, "source stat changed since planning; rehashing");
                let etag = hash_file(&path)?;
                // Only remember the hash if the file did not change while it was hashed.
                if local_stat(&path)? == now {
                    self.seen
                        .lock()
                        .expect("source guard lock")
                        .insert(path, (now, etag.clone()));
                }
                etag
            }
        };
        still_planned(info, found)
    }
}

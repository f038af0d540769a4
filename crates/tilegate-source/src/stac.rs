//! A STAC Item as the source: its chosen assets become the job's bands, in the order given.
//!
//! Each asset is pinned on its own (a content hash, an ETag or a HEAD, by its scheme) and the
//! item's pin is a hash of the assets' keys, URIs and pins, so every asset is part of the job's
//! identity and a change to any of them is `source-changed` for the windows that follow.
//! GDAL reads the assets through a VRT that stacks their first bands (`gdalbuildvrt -separate
//! -resolution highest`): assets of different resolutions are read onto the finest one's grid,
//! nearest neighbour. For another grid, plan the item with the `warp` recipe.
//!
//! An item is a document, and its hrefs are references it makes: each is judged by the source
//! policy as coming from the item (it stays within the item's origin unless the policy allows
//! more, and a remote item never names a local file) before anything is read from it; a remote
//! item is read only up to the policy's document size.

use crate::policy::{Forbidden, Origin, SourcePolicy};
use crate::resolve::{ResolvedSource, SourceError, resolve};
use std::collections::HashMap;
use std::sync::{Arc, LazyLock, Mutex};
use tilegate_core::source::Asset;
use tilegate_core::{Backends, ETag, SourceInfo};

/// True if `input` names a STAC Item (a `.json` path or URL).
pub fn is_item(input: &str) -> bool {
    let path = input.split(['?', '#']).next().unwrap_or(input);
    path.ends_with(".json") || path.ends_with(".geojson")
}

fn bad(uri: &str, reason: impl Into<String>) -> SourceError {
    SourceError::BadItem {
        uri: uri.to_owned(),
        reason: reason.into(),
    }
}

/// Pin the item at `input` (a path, `file://` or `http(s)://` URI, named from `origin`) with
/// the assets `keys`.
pub async fn resolve_item(
    b: &Backends,
    policy: &Arc<SourcePolicy>,
    input: &str,
    keys: &[String],
    origin: Origin<'_>,
) -> Result<ResolvedSource, SourceError> {
    // `COLLECTION#ID`: the item of that ID inside an ItemCollection.
    let (input, item_id) = match input.rsplit_once('#') {
        Some((doc, id)) if !id.contains('/') => (doc, Some(id)),
        _ => (input, None),
    };
    let (uri, text) = if crate::http::is_http(input) {
        // Read with the URL as given (a presigned one keeps its credentials for this one
        // GET); the item's identity, and the base of its relative hrefs, is the canonical URL
        // without them: what goes into the job row, its ID, every message and announcement.
        let url = policy
            .admit(input, origin)
            .map_err(|r| SourceError::forbidden(&crate::resolve::shown(input), r))?
            .canonical();
        let text = crate::http::get(policy, &url, origin).await?;
        (tilegate_core::source::split_credentials(&url).0, text)
    } else {
        policy
            .check(input, origin)
            .map_err(|r| SourceError::forbidden(input, r))?;
        let path = input.strip_prefix("file://").unwrap_or(input);
        let canon = std::fs::canonicalize(path).map_err(|e| SourceError::Io {
            path: path.to_owned(),
            source: e,
        })?;
        let size = std::fs::metadata(&canon).map_or(0, |m| m.len());
        if size > policy.max_document_bytes {
            return Err(SourceError::forbidden(
                input,
                crate::policy::too_large(policy.max_document_bytes),
            ));
        }
        let text = std::fs::read(&canon).map_err(|e| SourceError::Io {
            path: path.to_owned(),
            source: e,
        })?;
        (format!("file://{}", canon.display()), text)
    };
    let item: serde_json::Value =
        serde_json::from_slice(&text).map_err(|e| bad(&uri, format!("not JSON: {e}")))?;
    resolve_document(b, policy, uri, item, item_id, keys).await
}

/// Pin a STAC Item that arrived in a queue message (see `tilegate_core::arrival`) with the
/// assets `keys`. Its identity is `message://COLLECTION/ID`, a document never read: its hrefs
/// must be absolute, and reach only the hosts and buckets the policy lists (a message has no
/// origin to stay within; see [`SourcePolicy::check`]).
pub async fn resolve_message_item(
    b: &Backends,
    policy: &Arc<SourcePolicy>,
    item: serde_json::Value,
    keys: &[String],
) -> Result<ResolvedSource, SourceError> {
    let label = |v: Option<&serde_json::Value>| {
        let s: String = v
            .and_then(|v| v.as_str())
            .unwrap_or("-")
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || "._-".contains(c) {
                    c
                } else {
                    '_'
                }
            })
            .take(200)
            .collect();
        if s.is_empty() { "-".to_owned() } else { s }
    };
    let uri = format!(
        "message://{}/{}",
        label(item.get("collection")),
        label(item.get("id"))
    );
    resolve_document(b, policy, uri, item, None, keys).await
}

/// Pin the item `item` read from `uri` (the member `item_id` of a collection, if given).
async fn resolve_document(
    b: &Backends,
    policy: &Arc<SourcePolicy>,
    uri: String,
    mut item: serde_json::Value,
    item_id: Option<&str>,
    keys: &[String],
) -> Result<ResolvedSource, SourceError> {
    if let Some(id) = item_id {
        let found = item
            .get("features")
            .and_then(|f| f.as_array())
            .and_then(|f| {
                f.iter()
                    .find(|i| i.get("id").and_then(|v| v.as_str()) == Some(id))
            })
            .cloned()
            .ok_or_else(|| bad(&uri, format!("no item `{id}` in the collection")))?;
        item = found;
    }
    // The item's identity: the collection's URI and the item's ID.
    let uri = match item_id {
        Some(id) => format!("{uri}#{id}"),
        None => uri,
    };
    // Relative hrefs resolve against the document they were read from.
    let base = uri.split('#').next().unwrap_or(&uri).to_owned();
    if item.get("type").and_then(|t| t.as_str()) != Some("Feature") {
        return Err(bad(&uri, "not a STAC Item (its `type` is not `Feature`)"));
    }
    let assets = item
        .get("assets")
        .and_then(|a| a.as_object())
        .ok_or_else(|| bad(&uri, "the item has no `assets`"))?;
    if keys.is_empty() {
        let mut names: Vec<&str> = assets.keys().map(String::as_str).collect();
        names.sort_unstable();
        return Err(bad(
            &uri,
            format!(
                "choose its bands with --assets (the item has: {})",
                names.join(", ")
            ),
        ));
    }
    let mut pinned = Vec::with_capacity(keys.len());
    for key in keys {
        let href = assets
            .get(key)
            .and_then(|a| a.get("href"))
            .and_then(|h| h.as_str())
            .ok_or_else(|| {
                let mut names: Vec<&str> = assets.keys().map(String::as_str).collect();
                names.sort_unstable();
                bad(
                    &uri,
                    format!(
                        "no asset `{key}` with an href (the item has: {})",
                        names.join(", ")
                    ),
                )
            })?;
        if base.starts_with("message://") && !href.contains("://") {
            return Err(bad(
                &uri,
                format!("asset `{key}`: a relative href in an item that arrived in a message"),
            ));
        }
        let target = join(&base, href).map_err(|r| SourceError::forbidden(&uri, r))?;
        let resolved = Box::pin(resolve(b, policy, &target, Origin::Document(&base))).await?;
        pinned.push(Asset {
            key: key.clone(),
            source: resolved.info,
        });
    }
    let info = SourceInfo {
        etag: item_pin(&pinned),
        size: pinned.iter().map(|a| a.source.size).sum(),
        uri,
        stat: None,
        assets: pinned,
        signed: false,
    };
    Ok(ResolvedSource {
        gdal_path: stack_path(&info)?,
        info,
    })
}

/// The item's pin: a hash of its assets' keys, URIs and pins, in band order.
fn item_pin(assets: &[Asset]) -> ETag {
    let mut h = blake3::Hasher::new();
    for a in assets {
        for part in [a.key.as_str(), &a.source.uri, a.source.etag.as_str()] {
            h.update(&(part.len() as u64).to_le_bytes());
            h.update(part.as_bytes());
        }
    }
    ETag::new(format!("\"stac-{}\"", &h.finalize().to_hex()[..32]))
}

/// An asset's href resolved against the item's URI: absolute URIs as they are (the policy
/// parses and judges them next), local paths against the item's directory, and relative ones
/// against an HTTP(S) item's URL as a URL parser resolves them (RFC 3986, `../` included: the
/// result is canonical and judged as any other reference). An href that parsers would read
/// differently (a backslash, whitespace, a control character) is refused.
fn join(item_uri: &str, href: &str) -> Result<String, Forbidden> {
    if href.contains('\\') || href.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(Forbidden {
            rule: "malformed",
            detail: "a backslash, whitespace or a control character in an asset's href".into(),
        });
    }
    if href.contains("://") {
        return Ok(href.to_owned());
    }
    if let Some(path) = item_uri.strip_prefix("file://") {
        if href.starts_with('/') {
            return Ok(format!("file://{href}"));
        }
        let dir = std::path::Path::new(path)
            .parent()
            .unwrap_or(std::path::Path::new("/"));
        let rel = href.trim_start_matches("./");
        return Ok(format!("file://{}", dir.join(rel).display()));
    }
    reqwest::Url::parse(item_uri)
        .and_then(|base| base.join(href))
        .map(String::from)
        .map_err(|e| Forbidden {
            rule: "malformed",
            detail: format!("the href `{href}` does not resolve against the item: {e}"),
        })
}

/// The VRTs this process made for items, by item pin.
static STACKS: LazyLock<Mutex<HashMap<String, String>>> = LazyLock::new(Default::default);

/// Where GDAL opens an item's stacked assets: an in-memory VRT made once per process per pin.
pub fn stack_path(info: &SourceInfo) -> Result<String, SourceError> {
    let mut stacks = STACKS.lock().expect("stack registry");
    if let Some(path) = stacks.get(info.etag.as_str()) {
        return Ok(path.clone());
    }
    let mut inputs = Vec::with_capacity(info.assets.len());
    for a in &info.assets {
        inputs.push(crate::resolve::gdal_path(&a.source)?);
    }
    let remote = info.assets.iter().any(|a| a.source.local_path().is_none());
    let hash = info.etag.as_str().trim_matches('"').to_owned();
    let path = tilegate_cog::stack_vrt(
        &hash,
        &inputs,
        &info
            .assets
            .iter()
            .map(|a| a.key.clone())
            .collect::<Vec<_>>(),
        remote,
    )
    .map_err(|e| bad(&info.uri, format!("stack its assets: {e:#}")))?;
    stacks.insert(info.etag.as_str().to_owned(), path.clone());
    Ok(path)
}

#[cfg(test)]
mod tests {
    use super::join;

    #[test]
    fn hrefs_resolve_against_the_item() {
        let join = |i: &str, h: &str| join(i, h).unwrap();
        assert_eq!(
            join("file:///d/i/item.json", "./B04.tif"),
            "file:///d/i/B04.tif"
        );
        assert_eq!(
            join("file:///d/i/item.json", "/x/B04.tif"),
            "file:///x/B04.tif"
        );
        assert_eq!(
            join("http://h:8/a/item.json", "B04.tif"),
            "http://h:8/a/B04.tif"
        );
        assert_eq!(
            join("http://h:8/a/item.json", "/B04.tif"),
            "http://h:8/B04.tif"
        );
        assert_eq!(join("http://h/a/item.json", "s3://b/k.tif"), "s3://b/k.tif");
        assert_eq!(
            join("http://h/a/b/item.json", "../B04.tif"),
            "http://h/a/B04.tif"
        );
        assert!(super::join("http://h/a/item.json", "..\\B04.tif").is_err());
        assert!(super::join("http://h/a/item.json", "B 04.tif").is_err());
    }
}

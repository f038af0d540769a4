//! VRTs that read raw files, refused before GDAL opens them.
//!
//! A `VRTRawRasterBand` reads any file's bytes as pixels (`/proc/self/environ`,
//! `/vsicurl/http://internal/creds`). Newer GDALs switch it off with
//! `GDAL_VRT_ENABLE_RAWRASTERBAND=NO` (tilegate sets it, see `hardening`), but GDAL 3.6 has no
//! such switch — it reads the option nowhere — and opening a VRT already opens its raw files
//! (for `/vsicurl/`, requests them). So before a VRT is opened as a source, tilegate reads its
//! XML with GDAL's own parser and refuses any raw band in it, or in any VRT it names as a
//! source (a file, `vrt://…`, or inline `<VRTDataset>` XML), to a depth of [`MAX_DEPTH`].

use gdal_sys::CPLXMLNodeType;
use std::collections::HashSet;
use std::ffi::{CStr, CString, c_char};
use std::ptr;

/// How deep VRTs may name VRTs before tilegate stops looking (and refuses).
pub(crate) const MAX_DEPTH: usize = 8;

/// The largest VRT document tilegate inspects (and so opens).
const MAX_VRT_BYTES: i64 = 64 << 20;

const GDAL_OF_RASTER: u32 = 0x02;

/// If `path` is a VRT that reads a raw file, or names one that does, what it does (a fragment
/// for "its VRT …", e.g. "reads `/x` through a `VRTRawRasterBand`"); `Ok` if it is no VRT or a
/// clean one.
pub(crate) fn check(path: &str) -> Result<(), String> {
    let mut seen = HashSet::new();
    check_source(path, 0, &mut seen)
}

fn check_source(name: &str, depth: usize, seen: &mut HashSet<String>) -> Result<(), String> {
    if depth > MAX_DEPTH {
        return Err(format!(
            "names VRTs more than {MAX_DEPTH} deep (`{name}` not inspected)"
        ));
    }
    let trimmed = name.trim_start();
    if starts_with_ci(trimmed, "<VRTDataset") {
        return check_xml(trimmed, None, depth, seen);
    }
    if starts_with_ci(name, "vrt://") {
        let inner = &name["vrt://".len()..];
        let inner = inner.split('?').next().unwrap_or(inner);
        return check_source(inner, depth + 1, seen);
    }
    if !seen.insert(name.to_owned()) || !is_vrt(name) {
        return Ok(());
    }
    let text = ingest(name)
        .ok_or_else(|| format!("names the VRT `{name}` but it could not be read to inspect it"))?;
    let dir = name.rfind('/').map(|i| &name[..i]);
    check_xml(&text, dir, depth, seen)
}

/// Check one VRT document; `dir` resolves its `relativeToVRT` sources.
fn check_xml(
    text: &str,
    dir: Option<&str>,
    depth: usize,
    seen: &mut HashSet<String>,
) -> Result<(), String> {
    // GDAL's VRT driver parses with the same parser: what it cannot parse, GDAL cannot open.
    let Some(found) = scan(text) else {
        return Ok(());
    };
    if let Some(raw) = found.raw {
        return Err(format!("reads `{raw}` through a `VRTRawRasterBand`"));
    }
    for (name, relative) in found.sources {
        let resolved = match dir {
            Some(d) if relative && !name.starts_with('/') => format!("{d}/{name}"),
            _ => name,
        };
        check_source(&resolved, depth + 1, seen)?;
    }
    Ok(())
}

/// What one VRT document references.
#[derive(Debug, Default, PartialEq)]
struct Found {
    /// The file of the first raw band.
    raw: Option<String>,
    /// Every `<SourceFilename>` and `<SourceDataset>` (warped VRTs), with `relativeToVRT`.
    sources: Vec<(String, bool)>,
}

/// Parse `text` with `CPLParseXMLString` and collect what it references; `None` if it does not
/// parse. Names compare without case, as GDAL's VRT driver compares them.
fn scan(text: &str) -> Option<Found> {
    let c_text = CString::new(text).ok()?;
    // SAFETY: a valid C string; the returned tree is ours and destroyed below.
    let root = unsafe { gdal_sys::CPLParseXMLString(c_text.as_ptr()) };
    crate::ffi::reset_error();
    if root.is_null() {
        return None;
    }
    let mut found = Found::default();
    let mut stack = vec![root.cast_const()];
    while let Some(node) = stack.pop() {
        // SAFETY: every pointer pushed is a node of the live tree (or null, skipped below);
        // the tree is not modified while it is walked.
        let n = unsafe { &*node };
        if !n.psNext.is_null() {
            stack.push(n.psNext);
        }
        if n.eType != CPLXMLNodeType::CXT_Element {
            continue;
        }
        let name = text_of(n.pszValue);
        if attribute(n, "subClass").is_some_and(|s| s.eq_ignore_ascii_case("VRTRawRasterBand")) {
            found.raw = Some(child_text(n, "SourceFilename").unwrap_or_default());
            break;
        }
        if name.eq_ignore_ascii_case("SourceFilename") || name.eq_ignore_ascii_case("SourceDataset")
        {
            let relative = attribute(n, "relativeToVRT")
                .is_some_and(|v| v.trim().parse::<i64>().is_ok_and(|v| v != 0));
            found.sources.push((element_text(n), relative));
        }
        if !n.psChild.is_null() {
            stack.push(n.psChild);
        }
    }
    // SAFETY: the tree CPLParseXMLString returned, destroyed once.
    unsafe { gdal_sys::CPLDestroyXMLNode(root) };
    Some(found)
}

fn text_of(p: *const c_char) -> String {
    if p.is_null() {
        return String::new();
    }
    // SAFETY: node values are NUL-terminated strings owned by the live tree.
    unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
}

/// The children of `n`.
fn children(n: &gdal_sys::CPLXMLNode) -> impl Iterator<Item = &gdal_sys::CPLXMLNode> {
    let mut next = n.psChild.cast_const();
    std::iter::from_fn(move || {
        // SAFETY: child and sibling pointers of a live tree node, or null.
        let c = unsafe { next.as_ref()? };
        next = c.psNext;
        Some(c)
    })
}

/// The concatenated text children of an element or attribute.
fn element_text(n: &gdal_sys::CPLXMLNode) -> String {
    children(n)
        .filter(|c| c.eType == CPLXMLNodeType::CXT_Text)
        .map(|c| text_of(c.pszValue))
        .collect()
}

fn attribute(n: &gdal_sys::CPLXMLNode, name: &str) -> Option<String> {
    children(n)
        .find(|c| {
            c.eType == CPLXMLNodeType::CXT_Attribute
                && text_of(c.pszValue).eq_ignore_ascii_case(name)
        })
        .map(element_text)
}

fn child_text(n: &gdal_sys::CPLXMLNode, name: &str) -> Option<String> {
    children(n)
        .find(|c| {
            c.eType == CPLXMLNodeType::CXT_Element && text_of(c.pszValue).eq_ignore_ascii_case(name)
        })
        .map(element_text)
}

fn starts_with_ci(s: &str, prefix: &str) -> bool {
    s.get(..prefix.len())
        .is_some_and(|p| p.eq_ignore_ascii_case(prefix))
}

/// True if GDAL's VRT driver recognises `name` (it looks at the name and the first bytes).
fn is_vrt(name: &str) -> bool {
    let Ok(c_name) = CString::new(name) else {
        return false;
    };
    let allowed = [c"VRT".as_ptr(), ptr::null()];
    // SAFETY: valid C strings and a NULL-terminated list that outlive the call; identifying
    // opens nothing with the VRT driver (it has an Identify function).
    let h = unsafe {
        gdal_sys::GDALIdentifyDriverEx(
            c_name.as_ptr(),
            GDAL_OF_RASTER,
            allowed.as_ptr(),
            ptr::null(),
        )
    };
    crate::ffi::reset_error();
    !h.is_null()
}

/// The whole of `name` (any GDAL file system) as text, up to [`MAX_VRT_BYTES`].
fn ingest(name: &str) -> Option<String> {
    let c_name = CString::new(name).ok()?;
    let mut buf: *mut u8 = ptr::null_mut();
    let mut size: u64 = 0;
    // SAFETY: a valid C string and out-pointers; on success GDAL allocates `buf` (NUL-
    // terminated, `size` bytes of content), freed below with VSIFree.
    let ok = unsafe {
        gdal_sys::VSIIngestFile(
            ptr::null_mut(),
            c_name.as_ptr(),
            &raw mut buf,
            &raw mut size,
            MAX_VRT_BYTES,
        )
    };
    crate::ffi::reset_error();
    if ok == 0 || buf.is_null() {
        return None;
    }
    let len = usize::try_from(size).ok();
    // SAFETY: GDAL allocated `size` bytes at `buf`; copied out before it is freed.
    let text = len.map(|len| {
        String::from_utf8_lossy(unsafe { std::slice::from_raw_parts(buf, len) }).into_owned()
    });
    // SAFETY: `buf` was allocated by VSIIngestFile.
    unsafe { gdal_sys::VSIFree(buf.cast()) };
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A throwaway directory under the system's temporary directory.
    struct Dir(std::path::PathBuf);

    impl Dir {
        fn new() -> Self {
            static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
            let p = std::env::temp_dir().join(format!(
                "tilegate-rawband-{}-{}",
                std::process::id(),
                N.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
            ));
            std::fs::create_dir_all(&p).unwrap();
            Self(p)
        }

        fn write(&self, name: &str, text: &str) -> String {
            let p = self.0.join(name);
            std::fs::write(&p, text).unwrap();
            p.to_string_lossy().into_owned()
        }
    }

    impl Drop for Dir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    const RAW: &str = r#"<VRTDataset rasterXSize="8" rasterYSize="8">
  <VRTRasterBand dataType="Byte" band="1" subClass="VRTRawRasterBand">
    <SourceFilename relativetoVRT="0">/proc/self/environ</SourceFilename>
  </VRTRasterBand>
</VRTDataset>"#;

    fn simple(inner: &str, relative: bool) -> String {
        format!(
            r#"<VRTDataset rasterXSize="8" rasterYSize="8">
  <VRTRasterBand dataType="Byte" band="1"><SimpleSource>
    <SourceFilename relativeToVRT="{}">{inner}</SourceFilename><SourceBand>1</SourceBand>
  </SimpleSource></VRTRasterBand>
</VRTDataset>"#,
            u8::from(relative)
        )
    }

    #[test]
    fn the_scan_finds_raw_bands_and_sources_in_any_case() {
        let f = scan(RAW).unwrap();
        assert_eq!(f.raw.as_deref(), Some("/proc/self/environ"));
        let lower = RAW
            .replace("VRTRawRasterBand", "vrtrawrasterband")
            .replace("subClass", "SUBCLASS");
        assert!(scan(&lower).unwrap().raw.is_some());
        let s = scan(&simple("a.tif", true)).unwrap();
        assert_eq!(
            s,
            Found {
                raw: None,
                sources: vec![("a.tif".into(), true)]
            }
        );
        assert_eq!(scan("<not xml"), None);
    }

    #[test]
    fn a_raw_band_is_found_at_any_depth_and_clean_vrts_pass() {
        crate::ffi::ensure_registered();
        let d = Dir::new();
        let raw = d.write("raw.vrt", RAW);
        assert!(
            check(&raw)
                .unwrap_err()
                .contains("`/proc/self/environ` through a `VRTRawRasterBand`")
        );
        // One and two VRTs further down, by absolute and by relative name.
        let mid = d.write("mid.vrt", &simple(&raw, false));
        assert!(check(&mid).is_err());
        let top = d.write("top.vrt", &simple("mid.vrt", true));
        assert!(check(&top).is_err());
        // Inline XML and vrt:// connection strings are followed too.
        let inline = simple(
            &RAW.replace('<', "&lt;")
                .replace('>', "&gt;")
                .replace('"', "&quot;"),
            false,
        );
        assert!(check(&d.write("inline.vrt", &inline)).is_err());
        assert!(
            check(&d.write("conn.vrt", &simple(&format!("vrt://{mid}?bands=1"), false))).is_err()
        );
        // A VRT of a plain raster, and something that is no VRT at all, pass.
        let tif = d.write("plain.tif", "II*\0not really");
        assert_eq!(
            check(&d.write("clean.vrt", &simple("plain.tif", true))),
            Ok(())
        );
        assert_eq!(check(&tif), Ok(()));
        assert_eq!(check("/nonexistent/x.vrt"), Ok(()));
        // A VRT naming itself ends; a chain deeper than MAX_DEPTH is refused.
        let looped = d.write("loop.vrt", &simple("loop.vrt", true));
        assert_eq!(check(&looped), Ok(()));
        let mut prev = d.write("chain-0.vrt", &simple("plain.tif", true));
        for i in 1..=MAX_DEPTH + 1 {
            prev = d.write(&format!("chain-{i}.vrt"), &simple(&prev, false));
        }
        assert!(check(&prev).unwrap_err().contains("deep"));
    }
}

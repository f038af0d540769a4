//! GDAL's process-wide hardening, set once before the first open (`ffi::ensure_registered`).
//!
//! Security options are always set, whatever the environment says, and
//! [`crate::set_config_options`] will not change them. Others are defaults that a value the
//! user set (in the environment or in-process) overrides. Per open, not here: a remote source is
//! opened with `GDAL_DISABLE_READDIR_ON_OPEN=EMPTY_DIR` for that thread only (`ffi::open_raster`)
//! — process-wide it would hide a local source's `.msk` and `.ovr` side-cars.
//!
//! Not settable in GDAL 3.6: redirects. `/vsicurl/` follows every HTTP redirect (libcurl's
//! `CURLOPT_FOLLOWLOCATION`, set unconditionally by GDAL's HTTP layer, up to 10 hops, to
//! HTTP(S) or FTP(S) — never `file://`), and no configuration option turns that off or limits
//! where a redirect may go. A source's final URL is pinned before GDAL opens it; a server that
//! redirects GDAL's own later requests elsewhere is outside what GDAL 3.6 lets tilegate stop.

/// Options set to these values always: each shuts a way for a source to reach beyond itself.
const ALWAYS: [(&str, &str); 3] = [
    // VRTRawRasterBand off (GDAL versions that read the option; 3.6 does not, so tilegate
    // refuses raw bands itself before opening a VRT: `rawband`).
    ("GDAL_VRT_ENABLE_RAWRASTERBAND", "NO"),
    // No Python pixel functions from a VRT (3.6's default already trusts no module).
    ("GDAL_VRT_ENABLE_PYTHON", "NO"),
    // A VRT source never points into process memory (`MEM:::DATAPOINTER=…`).
    ("VRT_ALLOW_MEM_DRIVER", "NO"),
];

/// Defaults a value the user set wins over: GDAL's own HTTP retries of transient failures
/// (429, 500, 502, 503, 504 and dropped connections; GDAL doubles the delay each time), so that
/// one blip on a window read of a remote source is not a failed window.
///
/// And limits on a source that answers slowly or not at all (GDAL has none by default): a
/// trickling or silent server would otherwise hold a worker's blocking thread — and in the
/// job service the thread of a request whose own timeout cannot cancel GDAL — for as long as
/// it likes. A connection within 10 s; a transfer slower than 1 KiB/s for 30 s is abandoned
/// (then retried as above); no single request lasts more than 300 s.
const DEFAULTS: [(&str, &str); 6] = [
    ("GDAL_HTTP_MAX_RETRY", "3"),
    ("GDAL_HTTP_RETRY_DELAY", "0.5"),
    ("GDAL_HTTP_CONNECTTIMEOUT", "10"),
    ("GDAL_HTTP_LOW_SPEED_LIMIT", "1024"),
    ("GDAL_HTTP_LOW_SPEED_TIME", "30"),
    ("GDAL_HTTP_TIMEOUT", "300"),
];

/// Set the options above. Called once per process, before GDAL opens anything.
pub(crate) fn harden() {
    for (key, value) in ALWAYS {
        set(key, value);
    }
    for (key, value) in DEFAULTS {
        let user = gdal::config::get_config_option(key, "").is_ok_and(|v| !v.is_empty());
        if user {
            tracing::debug!(key, "GDAL option left as the user set it");
        } else {
            set(key, value);
        }
    }
}

/// The value tilegate always gives `key`, if it is one of the security options.
pub(crate) fn locked(key: &str) -> Option<&'static str> {
    ALWAYS
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case(key))
        .map(|(_, v)| *v)
}

fn set(key: &str, value: &str) {
    // Process-wide (`CPLSetConfigOption`): ahead of the environment, behind nothing but a
    // thread-local option, which only tilegate's own code sets.
    if let Err(e) = gdal::config::set_config_option(key, value) {
        tracing::warn!(key, error = %e, "could not set a GDAL hardening option");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn security_options_are_set_and_locked() {
        crate::ffi::ensure_registered();
        for (key, value) in ALWAYS {
            assert_eq!(
                gdal::config::get_config_option(key, "").unwrap(),
                value,
                "{key}"
            );
            assert_eq!(locked(&key.to_ascii_lowercase()), Some(value));
        }
        for (key, _) in DEFAULTS {
            assert!(locked(key).is_none(), "{key} is the user's to change");
            assert!(!gdal::config::get_config_option(key, "").unwrap().is_empty());
        }
        // A caller cannot turn raw bands back on.
        crate::set_config_options([("GDAL_VRT_ENABLE_RAWRASTERBAND".into(), "YES".into())]);
        assert_eq!(
            gdal::config::get_config_option("GDAL_VRT_ENABLE_RAWRASTERBAND", "").unwrap(),
            "NO"
        );
    }
}

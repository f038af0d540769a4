//! STAC documents checked against the official schemas, offline.

use std::path::Path;
use std::process::Command;

/// Validate a STAC document with `stac-validator` offline (`.ci/stac-validate`, the official
/// schemas from `tests/fixtures/stac-schemas/`). Returns its output on failure.
pub fn validate_stac(path: &Path) -> Result<(), String> {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../.ci/stac-validate");
    let out = Command::new("bash")
        .arg(script)
        .arg(path)
        .output()
        .map_err(|e| format!("run .ci/stac-validate: {e}"))?;
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    if out.status.success() && text.contains("\"valid_stac\": true") {
        Ok(())
    } else {
        Err(format!("{}: {}", path.display(), text.trim()))
    }
}

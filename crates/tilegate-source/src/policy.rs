//! The source policy (its rules live in `tilegate_core::source_policy`, pure and fuzzed), read
//! from configuration here: a TOML file of the deployment's fields and `[tenants.NAME]` tables.

pub use tilegate_core::source_policy::*;

use std::path::Path;

/// The refusal of a document larger than `limit` bytes.
pub(crate) fn too_large(limit: u64) -> Forbidden {
    Forbidden {
        rule: "document-too-large",
        detail: format!("the document is larger than {limit} bytes"),
    }
}

/// Every tenant's policy from a TOML configuration (see the README's *Sources* for the
/// fields); each is built and checked here, so a bad file fails at start-up, never per job.
pub fn from_toml(text: &str) -> Result<Policies, PolicyError> {
    let config: PolicyConfig =
        toml::from_str(text).map_err(|e| PolicyError(format!("parse: {e}")))?;
    Policies::from_config(config)
}

/// [`from_toml`] of the file at `path`.
pub fn from_file(path: &Path) -> Result<Policies, PolicyError> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| PolicyError(format!("read {}: {e}", path.display())))?;
    from_toml(&text).map_err(|e| PolicyError(format!("{}: {}", path.display(), e.0)))
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_toml_policy_reads_its_tenants() {
        let all = super::from_toml(
            "allow_addresses = [\"127.0.0.0/8\"]\n[tenants.acme]\nschemes = [\"https\"]\n",
        )
        .unwrap();
        assert_eq!(all.of("acme").schemes, ["https"]);
        assert_eq!(all.of("other").allow_addresses.len(), 1);
        assert!(super::from_toml("max_redirects = \"many\"").is_err());
        assert!(super::from_toml("[tenants.t]\nnonsense = 1\n").is_err());
    }
}

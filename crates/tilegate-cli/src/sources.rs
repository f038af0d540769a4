//! The source policy this process applies (`--source-policy FILE` or `TILEGATE_SOURCE_POLICY`;
//! the default when neither is given), loaded once before any command runs: a file that cannot
//! be used stops the command with `bad-source-policy`, never falls back to something wider.

use crate::errors::refused;
use std::path::Path;
use std::sync::{Arc, OnceLock};
use tilegate_core::Reason;
use tilegate_source::{Policies, SourcePolicy};

static POLICIES: OnceLock<Arc<Policies>> = OnceLock::new();

/// Load the policies from `file` (or the default), once per process.
pub fn load(file: Option<&Path>) -> anyhow::Result<()> {
    // An empty TILEGATE_SOURCE_POLICY is no file.
    let file = file.filter(|p| !p.as_os_str().is_empty());
    let policies = match file {
        Some(path) => tilegate_source::policy::from_file(path)
            .map_err(|e| refused(Reason::BadSourcePolicy, e.to_string()))?,
        None => Policies::new(),
    };
    let _ = POLICIES.set(Arc::new(policies));
    Ok(())
}

/// Every tenant's policy.
pub fn all() -> Arc<Policies> {
    Arc::clone(POLICIES.get_or_init(Default::default))
}

/// The policy of `tenant`'s jobs.
pub fn of(tenant: &tilegate_core::Tenant) -> Arc<SourcePolicy> {
    all().of(tenant.as_str())
}

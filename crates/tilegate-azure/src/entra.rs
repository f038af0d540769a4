//! Entra ID tokens for an account named without a key or a SAS, from the same settings Azure's
//! SDKs read: `AZURE_TOKEN_CREDENTIALS` names the credential outright
//! (`WorkloadIdentityCredential`, `ManagedIdentityCredential`, `ClientSecretCredential`,
//! `AzureCliCredential`, `AzureDeveloperCliCredential`; `prod` or `dev` for the first of each
//! group that is configured); otherwise the first configured of workload identity
//! (`AZURE_FEDERATED_TOKEN_FILE`, as on AKS), a service principal (`AZURE_CLIENT_SECRET`,
//! `AZURE_CLIENT_ID`, `AZURE_TENANT_ID`), managed identity (`IDENTITY_ENDPOINT` or
//! `MSI_ENDPOINT`, as App Service and Functions set them), and the developer tools (`az`,
//! `azd`). On a VM, whose managed identity sets no variable, name it:
//! `AZURE_TOKEN_CREDENTIALS=ManagedIdentityCredential`.

use crate::error::AzureError;
use azure_core::credentials::{Secret, TokenCredential};
use azure_identity::{
    AzureCliCredential, AzureDeveloperCliCredential, ClientSecretCredential,
    DeveloperToolsCredential, ManagedIdentityCredential, WorkloadIdentityCredential,
};
use std::sync::Arc;

/// Which credential provides the tokens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    Workload,
    ClientSecret,
    ManagedIdentity,
    AzureCli,
    AzureDeveloperCli,
    /// `az`, then `azd`.
    DeveloperTools,
}

/// The credential the settings name (see the module's documentation).
pub fn source(get: impl Fn(&str) -> Option<String>) -> Result<Source, AzureError> {
    let has = |k: &str| get(k).is_some_and(|v| !v.trim().is_empty());
    let workload = has("AZURE_FEDERATED_TOKEN_FILE");
    let secret = has("AZURE_CLIENT_SECRET") && has("AZURE_CLIENT_ID") && has("AZURE_TENANT_ID");
    let managed = has("IDENTITY_ENDPOINT") || has("MSI_ENDPOINT");
    let prod = || {
        if workload {
            Source::Workload
        } else if secret {
            Source::ClientSecret
        } else {
            Source::ManagedIdentity
        }
    };
    let named = get("AZURE_TOKEN_CREDENTIALS")
        .map(|v| v.trim().to_ascii_lowercase())
        .filter(|v| !v.is_empty());
    match named {
        None => Ok(if workload || secret || managed {
            prod()
        } else {
            Source::DeveloperTools
        }),
        Some(v) => match v.as_str() {
            "prod" => Ok(prod()),
            "dev" => Ok(Source::DeveloperTools),
            "workloadidentitycredential" => Ok(Source::Workload),
            "clientsecretcredential" => Ok(Source::ClientSecret),
            "managedidentitycredential" => Ok(Source::ManagedIdentity),
            "azureclicredential" => Ok(Source::AzureCli),
            "azuredeveloperclicredential" => Ok(Source::AzureDeveloperCli),
            other => Err(AzureError::Config {
                detail: format!(
                    "AZURE_TOKEN_CREDENTIALS=`{other}`: expected prod, dev, \
                     WorkloadIdentityCredential, ClientSecretCredential, \
                     ManagedIdentityCredential, AzureCliCredential or AzureDeveloperCliCredential"
                ),
            }),
        },
    }
}

/// The credential for `source`, configured from the environment.
pub fn credential(source: Source) -> Result<Arc<dyn TokenCredential>, AzureError> {
    let env = |k: &str| std::env::var(k).unwrap_or_default();
    let made: azure_core::Result<Arc<dyn TokenCredential>> = match source {
        Source::Workload => WorkloadIdentityCredential::new(None).map(|c| c as _),
        Source::ClientSecret => ClientSecretCredential::new(
            &env("AZURE_TENANT_ID"),
            env("AZURE_CLIENT_ID"),
            Secret::new(env("AZURE_CLIENT_SECRET")),
            None,
        )
        .map(|c| c as _),
        Source::ManagedIdentity => ManagedIdentityCredential::new(None).map(|c| c as _),
        Source::AzureCli => AzureCliCredential::new(None).map(|c| c as _),
        Source::AzureDeveloperCli => AzureDeveloperCliCredential::new(None).map(|c| c as _),
        Source::DeveloperTools => DeveloperToolsCredential::new(None).map(|c| c as _),
    };
    made.map_err(|e| AzureError::Config {
        detail: format!("set up Entra ID credentials ({source:?}): {e}"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn pick(vars: &[(&str, &str)]) -> Result<Source, AzureError> {
        let env: HashMap<&str, &str> = vars.iter().copied().collect();
        source(|k| env.get(k).map(|v| (*v).to_owned()))
    }

    #[test]
    fn the_credential_is_chosen_as_azure_sdks_choose_it() {
        assert_eq!(pick(&[]).unwrap(), Source::DeveloperTools);
        assert_eq!(
            pick(&[("AZURE_FEDERATED_TOKEN_FILE", "/var/run/token")]).unwrap(),
            Source::Workload
        );
        let sp = [
            ("AZURE_CLIENT_SECRET", "s"),
            ("AZURE_CLIENT_ID", "c"),
            ("AZURE_TENANT_ID", "t"),
        ];
        assert_eq!(pick(&sp).unwrap(), Source::ClientSecret);
        assert_eq!(
            pick(&[("AZURE_CLIENT_SECRET", "s")]).unwrap(),
            Source::DeveloperTools,
            "an incomplete service principal is not one"
        );
        assert_eq!(
            pick(&[("IDENTITY_ENDPOINT", "http://169.254.1.1")]).unwrap(),
            Source::ManagedIdentity
        );
        assert_eq!(
            pick(&[("AZURE_TOKEN_CREDENTIALS", "ManagedIdentityCredential")]).unwrap(),
            Source::ManagedIdentity
        );
        assert_eq!(
            pick(&[("AZURE_TOKEN_CREDENTIALS", "prod")]).unwrap(),
            Source::ManagedIdentity
        );
        assert_eq!(
            pick(&[
                ("AZURE_TOKEN_CREDENTIALS", "dev"),
                ("IDENTITY_ENDPOINT", "x")
            ])
            .unwrap(),
            Source::DeveloperTools
        );
        assert!(pick(&[("AZURE_TOKEN_CREDENTIALS", "magic")]).is_err());
    }
}

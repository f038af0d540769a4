//! The container client: its URL, and how each request is authorised (a SAS in the URL, an
//! account SAS renewed per request, or Entra ID tokens) and metered.

use crate::Account;
use crate::credential::{SasCredential, SasPolicy};
use crate::error::AzureError;
use azure_core::http::policies::Policy;
use azure_core::http::{ClientOptions, RetryOptions, Url};
use azure_storage_blob::{BlobContainerClient, BlobContainerClientOptions};
use std::sync::Arc;

/// account SAS set on each request and renewed on `clock` (an account key), or Entra ID
/// tokens; the crate's own retries are off (every request is repeated by `tilegate-retry`, in
/// one place).
pub(crate) fn container_client(
    account: &Account,
    container: &str,
    clock: &crate::Clock,
) -> Result<BlobContainerClient, AzureError> {
    let mut url = Url::parse(&format!("{}/{container}", account.blob_endpoint)).map_err(|e| {
        AzureError::Config {
            detail: format!("blob endpoint `{}`: {e}", account.blob_endpoint),
        }
    })?;
    let mut per_try_policies: Vec<Arc<dyn Policy>> = Vec::new();
    let mut credential = None;
    match &account.auth {
        crate::Auth::Sas(sas) => url.set_query(Some(sas)),
        crate::Auth::Key(key) => {
            per_try_policies.push(Arc::new(SasPolicy(Arc::new(SasCredential::new(
                &account.name,
                key,
                account.sas_protocols(),
                Arc::clone(clock),
            )?))))
        }
        crate::Auth::Entra(source) => credential = Some(crate::entra::credential(*source)?),
    }
    // Counts every transmission for the job it serves (`tilegate_retry::meter`), after the
    // SAS policy, which may send a request twice.
    per_try_policies.push(Arc::new(crate::meter::RequestMeter));
    let options = BlobContainerClientOptions {
        client_options: ClientOptions {
            retry: RetryOptions::none(),
            per_try_policies,
            ..ClientOptions::default()
        },
        ..BlobContainerClientOptions::default()
    };
    BlobContainerClient::new(url, credential, Some(options)).map_err(|e| AzureError::Config {
        detail: e.to_string(),
    })
}

//! The object conformance suite run against Azure Blob, against Azurite (`AZURE_STORAGE_CONNECTION_STRING`
//! with the development account, started by `.ci/azure-emulator`): a fresh container per test.
//!
//! Azurite 3.35 evaluates every condition tilegate sends (Put Blob and Put Block List with
//! `If-None-Match: *` → 409 `BlobAlreadyExists`, stale `If-Match` → 412, GET `If-None-Match`
//! → 304, conditional delete), so nothing here is skipped for the emulator. What it does not
//! send — the 412 `ConditionNotMet` some Azure front ends answer to a refused create, 503
//! `ServerBusy` — is covered by the scripted-responder tests in `tests/it/contracts/scripted_azure.rs`.

use async_trait::async_trait;
use std::sync::Arc;
use std::time::Duration;
use tilegate_azure::{Account, AzureStore};
use tilegate_conformance::{
    Capabilities, ChildUrls, ObjectHarness, conformance_suite, no_emulator, unique,
};
use tilegate_core::object::ObjectStore;

struct Azure {
    objects: AzureStore,
    url: String,
    account: Account,
}

/// The emulator's account, or the suite declines: loudly in CI, with a message elsewhere.
fn emulator() -> Account {
    match std::env::var("AZURE_STORAGE_CONNECTION_STRING") {
        Ok(cs) if std::env::var_os("TILEGATE_AZURE_EMULATOR").is_some() => {
            Account::from_connection_string(&cs).expect("the emulator's connection string")
        }
        _ => no_emulator("azure", "eval \"$(bash .ci/azure-emulator start)\""),
    }
}

/// A container name no other test uses (3-63 characters of a-z, 0-9, `-`).
fn container() -> String {
    unique("tg").replace('_', "-").to_ascii_lowercase()
}

/// A fresh container on the emulator, objects under `conformance/`.
async fn harness() -> Arc<dyn ObjectHarness> {
    let account = emulator();
    let url = format!("az://{}/{}/conformance", account.name, container());
    let objects = AzureStore::connect_with(&url, &account).expect("open the azure store");
    objects
        .ensure_container()
        .await
        .expect("create the test container on the emulator");
    Arc::new(Azure {
        objects,
        url,
        account,
    })
}

#[async_trait]
impl ObjectHarness for Azure {
    fn caps(&self) -> Capabilities {
        Capabilities {
            cross_process: false,
            last_modified_resolution: Duration::from_secs(1),
            min_part_size: 1,
            exclusive_receive: false,
            parts_in_any_order: true,
            completion_unenforced: None,
        }
    }

    fn objects(&self) -> Arc<dyn ObjectStore> {
        Arc::new(self.objects.clone())
    }

    fn child_urls(&self) -> Option<ChildUrls> {
        None
    }

    fn upstream(&self) -> Result<String, &'static str> {
        // The account's endpoint is `http://host:port/account`.
        let e = &self.account.blob_endpoint;
        Ok(e.strip_suffix(&format!("/{}", self.account.name))
            .unwrap_or(e)
            .to_owned())
    }

    async fn objects_via(&self, endpoint: &str) -> Arc<dyn ObjectStore> {
        let account = Account {
            blob_endpoint: format!("{}/{}", endpoint.trim_end_matches('/'), self.account.name),
            ..self.account.clone()
        };
        Arc::new(
            AzureStore::connect_with(&self.url, &account)
                .expect("open the azure store through the proxy"),
        )
    }
}

conformance_suite!(objects: harness);

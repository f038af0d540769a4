//! The cloud emulators a test reaches through the environment (`.ci/*-emulator start` prints
//! the variables; `.ci/test` evaluates them): each accessor returns the emulator, or declines —
//! loudly in CI, with a printed reason elsewhere ([`no_emulator`]).

use tilegate_azure::Account;
pub use tilegate_conformance::{no_emulator, unique};

/// The GCS emulator's endpoint (`STORAGE_EMULATOR_HOST`, fake-gcs-server).
pub fn gcs_emulator() -> String {
    match std::env::var("STORAGE_EMULATOR_HOST") {
        Ok(v) if std::env::var_os("TILEGATE_GCS_EMULATOR").is_some() => v,
        _ => no_emulator("gcs", "eval \"$(bash .ci/gcs-emulator start)\""),
    }
}

/// The Azure emulator's account (`AZURE_STORAGE_CONNECTION_STRING`, Azurite).
pub fn azure_emulator() -> Account {
    match std::env::var("AZURE_STORAGE_CONNECTION_STRING") {
        Ok(cs) if std::env::var_os("TILEGATE_AZURE_EMULATOR").is_some() => {
            Account::from_connection_string(&cs).expect("the emulator's connection string")
        }
        _ => no_emulator("azure", "eval \"$(bash .ci/azure-emulator start)\""),
    }
}

/// A container name no other test uses (3-63 characters of a-z, 0-9, `-`).
pub fn azure_container() -> String {
    unique("tg").replace('_', "-").to_ascii_lowercase()
}

//! The cloud emulators a test reaches through the environment (`.ci/*-emulator start` prints
//! the variables; `.ci/test` evaluates them): each accessor returns the emulator, or declines —
//! loudly in CI, with a printed reason elsewhere ([`no_emulator`]).

use tilegate_azure::Account;
pub use tilegate_conformance::{no_emulator, unique};

/// Whether the emulator of `backend` is configured (its `marker` variable set, as
/// `.ci/<backend>-emulator start` prints it); without it, `test` says why it is skipped — and in
/// CI, where it must be, fails.
pub fn emulator_configured(backend: &str, marker: &str, test: &str) -> bool {
    if std::env::var_os(marker).is_some() {
        return true;
    }
    assert!(
        std::env::var_os("CI").is_none(),
        "{test}: no {backend} emulator in CI: run through .ci/test, which starts it"
    );
    println!(
        "SKIPPED {test}: no {backend} emulator (run eval \"$(bash .ci/{backend}-emulator start)\")"
    );
    false
}

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

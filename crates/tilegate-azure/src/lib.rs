//! The Azure Blob Storage backend of tilegate: [`AzureStore`], the `ObjectStore` contract on
//! one container and key prefix (`az://account/container[/prefix]`), over the official
//! `azure_storage_blob` crate.
//!
//! How the contract maps onto Azure Blob:
//! - Create is Put Blob with `If-None-Match: *`; Update is `If-Match: <etag>`; a conditional
//!   delete is `If-Match`. A create refused is `AlreadyPresent` whether the service answers
//!   409 `BlobAlreadyExists` (Azure's documented answer, and Azurite's) or 412
//!   `ConditionNotMet` (seen from real Azure); an update refused (412) is `Superseded`;
//! - reads send the caller's `If-Match` / `If-None-Match` and a range; a large read's
//!   partitions are pinned to the first answer's ETag by the crate;
//! - a multipart upload is a block list: each part is a Put Block whose ID names the upload
//!   and the part (one length for all), and completion is Put Block List under the mode's
//!   condition, so of two racing large uploads the second commit is refused. Azure keeps no
//!   list of uploads in progress that a cleanup could use, so each is recorded under
//!   `.tilegate/uploads/` in the store's prefix, where `list_multipart` finds it.
//!
//! Configuration as Azure's SDKs and GDAL take it: `AZURE_STORAGE_CONNECTION_STRING` with an
//! `AccountKey` (an account SAS is signed from it: the Rust crate has no shared-key
//! authorisation) or a `SharedAccessSignature`, and `BlobEndpoint` for an emulator; or
//! `AZURE_STORAGE_SAS_TOKEN` for the account named in the URL; or, with neither, Entra ID
//! tokens for `https://account.blob.core.windows.net` ([`entra`]). Azurite (the emulator the
//! tests run) is reached with its published development key, over plain HTTP.
//!
//! What Azurite 3.35 does not prove: the 412 some Azure front ends answer to a create, and a
//! service's 5xx or lost answers; the requests tilegate sends there and its classification of
//! those answers are covered by tests against a scripted responder.

mod blocks;
pub mod entra;
pub mod error;
mod meter;
mod sas;
mod sources;
mod store;

pub use error::{AzureError, Failure, classify};
pub use sources::AzureSources;
pub use store::AzureStore;

use tilegate_core::{StoreError, StoreResult, keys};

/// Azurite's development account, the same in every Azurite.
pub const DEV_ACCOUNT: &str = "devstoreaccount1";
/// Azurite's published development key.
pub const DEV_KEY: &str =
    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==";

/// `az://account/container[/prefix]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AzureLocation {
    pub account: String,
    pub container: String,
    /// `""` or `seg/seg` (no leading or trailing slash).
    pub prefix: String,
}

fn invalid_url(url: &str, reason: &str) -> StoreError {
    StoreError::backend(
        "open objects",
        url,
        tilegate_core::Retry::Permanent,
        AzureError::InvalidUrl {
            url: url.to_owned(),
            reason: reason.to_owned(),
        },
    )
}

/// Whether `name` is a storage account name (3–24 lower-case letters and digits).
fn valid_account(name: &str) -> bool {
    (3..=24).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
}

/// Whether `name` is a container name: 3–63 characters of a-z, 0-9 and `-`, starting and
/// ending with a letter or digit, no `--`.
fn valid_container(name: &str) -> bool {
    let alnum = |b: &u8| b.is_ascii_lowercase() || b.is_ascii_digit();
    (3..=63).contains(&name.len())
        && name.bytes().all(|b| alnum(&b) || b == b'-')
        && name.as_bytes().first().is_some_and(alnum)
        && name.as_bytes().last().is_some_and(alnum)
        && !name.contains("--")
}

impl AzureLocation {
    /// Parse and validate an `az://` URL.
    pub fn parse(url: &str) -> StoreResult<Self> {
        let rest = url
            .strip_prefix("az://")
            .ok_or_else(|| invalid_url(url, "expected az://account/container[/prefix]"))?;
        let mut parts = rest.trim_end_matches('/').splitn(3, '/');
        let account = parts.next().unwrap_or_default();
        let container = parts.next().unwrap_or_default();
        let prefix = parts.next().unwrap_or_default();
        if !valid_account(account) {
            return Err(invalid_url(
                url,
                "an account name is 3-24 lower-case letters and digits \
                 (expected az://account/container[/prefix])",
            ));
        }
        if !valid_container(container) {
            return Err(invalid_url(
                url,
                "a container name is 3-63 characters of a-z, 0-9 and `-`, starting and ending \
                 with a letter or digit, without `--`",
            ));
        }
        if !prefix.is_empty() {
            keys::validate_key(prefix).map_err(|e| {
                invalid_url(url, &format!("prefix segment `{}`: {}", e.shown, e.reason))
            })?;
        }
        Ok(Self {
            account: account.to_owned(),
            container: container.to_owned(),
            prefix: prefix.to_owned(),
        })
    }
}

/// How requests to an account are authorised.
#[derive(Clone, PartialEq, Eq)]
pub enum Auth {
    /// The account key (base64): an account SAS is signed from it.
    Key(String),
    /// A SAS token (the query string, without `?`).
    Sas(String),
    /// Entra ID tokens from this credential (see [`entra`]).
    Entra(entra::Source),
}

impl std::fmt::Debug for Auth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Key(_) => "Key(..)",
            Self::Sas(_) => "Sas(..)",
            Self::Entra(_) => "Entra(..)",
        })
    }
}

/// An account's blob endpoint and credentials, from the standard settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Account {
    pub name: String,
    /// `https://account.blob.core.windows.net` or a `BlobEndpoint` (no trailing slash).
    pub blob_endpoint: String,
    pub auth: Auth,
}

impl Account {
    /// The account named `name` as the environment configures it:
    /// `AZURE_STORAGE_CONNECTION_STRING`, else `AZURE_STORAGE_SAS_TOKEN`.
    pub fn from_env(name: &str) -> Result<Self, AzureError> {
        Self::from_settings(name, |k| {
            std::env::var(k).ok().filter(|v| !v.trim().is_empty())
        })
    }

    fn from_settings(name: &str, get: impl Fn(&str) -> Option<String>) -> Result<Self, AzureError> {
        if let Some(cs) = get("AZURE_STORAGE_CONNECTION_STRING") {
            let a = Self::from_connection_string(&cs)?;
            if a.name != name {
                return Err(AzureError::Config {
                    detail: format!(
                        "AZURE_STORAGE_CONNECTION_STRING is for account `{}`, the URL names `{name}`",
                        a.name
                    ),
                });
            }
            return Ok(a);
        }
        if let Some(sas) = get("AZURE_STORAGE_SAS_TOKEN") {
            return Ok(Self {
                name: name.to_owned(),
                blob_endpoint: format!("https://{name}.blob.core.windows.net"),
                auth: Auth::Sas(sas.trim_start_matches('?').to_owned()),
            });
        }
        Ok(Self {
            name: name.to_owned(),
            blob_endpoint: format!("https://{name}.blob.core.windows.net"),
            auth: Auth::Entra(entra::source(get)?),
        })
    }

    /// Parse a connection string as Azure's SDKs do: `Key=Value` pairs separated by `;`
    /// (`AccountName`, `AccountKey`, `SharedAccessSignature`, `BlobEndpoint`,
    /// `DefaultEndpointsProtocol`, `EndpointSuffix`), or `UseDevelopmentStorage=true`.
    pub fn from_connection_string(cs: &str) -> Result<Self, AzureError> {
        let mut get = std::collections::HashMap::new();
        for pair in cs.split(';').map(str::trim).filter(|p| !p.is_empty()) {
            let (k, v) = pair.split_once('=').ok_or_else(|| AzureError::Config {
                detail:
                    "AZURE_STORAGE_CONNECTION_STRING: expected Key=Value pairs separated by `;`"
                        .to_owned(),
            })?;
            get.insert(k.trim().to_ascii_lowercase(), v.trim().to_owned());
        }
        if get
            .get("usedevelopmentstorage")
            .is_some_and(|v| v.eq_ignore_ascii_case("true"))
        {
            return Ok(Self {
                name: DEV_ACCOUNT.to_owned(),
                blob_endpoint: format!("http://127.0.0.1:10000/{DEV_ACCOUNT}"),
                auth: Auth::Key(DEV_KEY.to_owned()),
            });
        }
        let missing = |what: &str| AzureError::Config {
            detail: format!("AZURE_STORAGE_CONNECTION_STRING has no {what}"),
        };
        let name = get
            .get("accountname")
            .cloned()
            .ok_or_else(|| missing("AccountName"))?;
        let auth = match (get.get("accountkey"), get.get("sharedaccesssignature")) {
            (Some(k), _) => Auth::Key(k.clone()),
            (None, Some(s)) => Auth::Sas(s.trim_start_matches('?').to_owned()),
            (None, None) => return Err(missing("AccountKey or SharedAccessSignature")),
        };
        let blob_endpoint = match get.get("blobendpoint") {
            Some(e) => e.trim_end_matches('/').to_owned(),
            None => format!(
                "{}://{name}.blob.{}",
                get.get("defaultendpointsprotocol")
                    .map_or("https", String::as_str),
                get.get("endpointsuffix")
                    .map_or("core.windows.net", String::as_str)
            ),
        };
        Ok(Self {
            name,
            blob_endpoint,
            auth,
        })
    }

    /// The SAS query string requests carry (signed now for a key; as given for a SAS; none
    /// for Entra ID tokens).
    pub(crate) fn sas(&self) -> Result<Option<String>, AzureError> {
        match &self.auth {
            Auth::Sas(s) => Ok(Some(s.clone())),
            Auth::Key(k) => {
                sas::account_sas(&self.name, k, time::OffsetDateTime::now_utc()).map(Some)
            }
            Auth::Entra(_) => Ok(None),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_az_urls() {
        let l = AzureLocation::parse("az://acct1/tiles/scenes/a").unwrap();
        assert_eq!(
            (l.account.as_str(), l.container.as_str(), l.prefix.as_str()),
            ("acct1", "tiles", "scenes/a")
        );
        assert_eq!(
            AzureLocation::parse("az://acct1/tiles/").unwrap().prefix,
            ""
        );
        for bad in [
            "gs://acct1/tiles",
            "az://acct1",
            "az://Acct1/tiles",
            "az://acct1/ti",
            "az://acct1/Tiles",
            "az://acct1/ti--les",
            "az://acct1/tiles/../x",
        ] {
            assert!(AzureLocation::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn connection_strings_are_read_as_the_sdks_read_them() {
        let a = Account::from_connection_string(
            "DefaultEndpointsProtocol=http;AccountName=devstoreaccount1;AccountKey=a2V5;\
             BlobEndpoint=http://127.0.0.1:10000/devstoreaccount1/;",
        )
        .unwrap();
        assert_eq!(a.name, "devstoreaccount1");
        assert_eq!(a.blob_endpoint, "http://127.0.0.1:10000/devstoreaccount1");
        assert_eq!(a.auth, Auth::Key("a2V5".into()));
        let a = Account::from_connection_string(
            "AccountName=prod1;SharedAccessSignature=?sv=2022-11-02&sig=x",
        )
        .unwrap();
        assert_eq!(a.blob_endpoint, "https://prod1.blob.core.windows.net");
        assert_eq!(a.auth, Auth::Sas("sv=2022-11-02&sig=x".into()));
        let dev = Account::from_connection_string("UseDevelopmentStorage=true").unwrap();
        assert_eq!(dev.name, DEV_ACCOUNT);
        assert!(Account::from_connection_string("AccountName=x").is_err());
        assert!(Account::from_connection_string("garbage").is_err());
    }

    #[test]
    fn the_connection_string_must_name_the_urls_account() {
        let cs = "AccountName=other;AccountKey=a2V5";
        let got = Account::from_settings("acct1", |k| {
            (k == "AZURE_STORAGE_CONNECTION_STRING").then(|| cs.to_owned())
        });
        assert!(matches!(got, Err(AzureError::Config { .. })), "{got:?}");
        let got = Account::from_settings("acct1", |k| {
            (k == "AZURE_STORAGE_SAS_TOKEN").then(|| "?sv=1&sig=2".to_owned())
        })
        .unwrap();
        assert_eq!(got.auth, Auth::Sas("sv=1&sig=2".into()));
        let entra = Account::from_settings("acct1", |_| None).unwrap();
        assert_eq!(entra.auth, Auth::Entra(entra::Source::DeveloperTools));
        assert_eq!(entra.blob_endpoint, "https://acct1.blob.core.windows.net");
    }
}

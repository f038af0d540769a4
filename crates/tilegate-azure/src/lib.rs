//! The Azure Blob Storage backend of tilegate: [`AzureStore`], the `ObjectStore` contract on
//! one container and key prefix (`az://account/container[/prefix]`), over the official
//! `azure_storage_blob` crate.
//!
//! How the contract maps onto Azure Blob:
//! - **Versions are ETags**, as on S3. Create is Put Blob with `If-None-Match: *`; Update is
//!   `If-Match: <etag>`; a conditional delete is one `If-Match` DELETE. A create refused is
//!   `AlreadyPresent` whether the service answers 409 `BlobAlreadyExists` (Azure's documented
//!   answer, and Azurite's) or 412 `ConditionNotMet` (seen from real Azure front ends),
//!   classified by `x-ms-error-code`; an update refused (412) is `Superseded`;
//! - reads send the caller's `If-Match` / `If-None-Match` (one tag) and a range; a list of
//!   several tags is resolved against a HEAD and the read pinned to the ETag found. A range
//!   past the end (416) is answered from a HEAD, as on the other stores, and a large read's
//!   partitions are pinned to the first answer's ETag by the crate;
//! - a multipart upload is a block list: part N is a Put Block whose ID names the upload's
//!   nonce and N (one length for every ID, as Azure requires of one blob's blocks), so parts go
//!   in any order from any handle, and completion is Put Block List under the mode's
//!   condition, so of two racing large uploads the second commit is refused. A committed list
//!   discards every other uncommitted block of the name, so a commit that finds its blocks gone
//!   (`InvalidBlockList`) is read back as the race it lost. Azure keeps no list of uploads in
//!   progress that a cleanup could use, so each is recorded at `.tilegate/uploads/<id>` under
//!   the store's prefix (its key and metadata with the attempt token), where `list_multipart`
//!   finds it; abort deletes the record, and Azure discards the orphaned blocks by itself
//!   (within a week);
//! - metadata names must be C# identifiers on Azure: `-` is stored as `_h_` (names holding
//!   `_h_` are refused), and names come back lower-cased.
//!
//! Configuration as Azure's SDKs and GDAL take it: `AZURE_STORAGE_CONNECTION_STRING` with an
//! `AccountKey` (an account SAS is signed from it, the Rust crate having no shared-key
//! authorisation, and renewed before it expires, as below) or a
//! `SharedAccessSignature`, and `BlobEndpoint` for an emulator; or `AZURE_STORAGE_ACCOUNT`
//! with `AZURE_STORAGE_SAS_TOKEN` or, without one, Entra ID tokens for
//! `https://account.blob.core.windows.net` ([`entra`]). Azurite (the emulator the tests run)
//! is reached with its published development key, over plain HTTP.
//!
//! Auth is a SAS applied per request. The account SAS an account key signs has the 2018-11-09
//! fields and is valid 7 days; `SasCredential` signs it on an injectable [`Clock`] and renews
//! it when less than a day of its validity is left, one renewal at a time (its start
//! backdated 15 minutes for skew), and `SasPolicy` sets the current SAS on every try of every
//! request, so no client keeps an old signature. A 403 `AuthenticationFailed` whose SAS is
//! outside its time frame (or that was sent with a SAS since replaced, or a HEAD's bodiless
//! 403) is renewed and sent once more — safe, since Azure authenticates before acting — and
//! anything else stays `Permanent` ([`error::renews_sas`], beside [`classify`]). A given SAS is
//! used as is and cannot be renewed. Entra ID tokens (`azure_identity`, chosen from the
//! environment as Azure's SDKs choose, including `AZURE_TOKEN_CREDENTIALS`) go over HTTPS
//! only. The crate's own retries are off.
//!
//! Credentials go only to the configured account ([`Account::configured`]): a URL is parsed
//! once, strictly, by Azure's naming rules ([`names`]), and one that names another account is
//! refused before any request ([`Rule::OtherAccount`]). An output URL (`--objects`, the
//! operator's) may name the account itself when none is configured; a source may not
//! ([`Rule::NoConfiguredAccount`]), and GDAL is pinned to the same account and endpoint
//! ([`gdal_az_config`]). A SAS is signed for HTTPS only unless the endpoint is plain HTTP (an
//! emulator), and a read URL lives at most [`MAX_URL_LIFETIME`].
//!
//! What Azurite 3.35 does not prove: it evaluates every condition tilegate sends, so no
//! conformance test skips for it; but it never answers a refused create with 412, never
//! throttles, never answers with a 5xx and never loses an answer. `tests/it/contracts/scripted_azure.rs`
//! checks the requests tilegate sends and its reading of those answers against a scripted
//! responder; the lost answer is also tested for real through the proxy of `tests/lossy.rs`.

mod blocks;
mod credential;
pub mod entra;
pub mod error;
mod meter;
pub mod names;
mod sas;
mod sources;
mod store;

pub use credential::{Clock, system_clock};
pub use error::{AzureError, Failure, MAX_URL_LIFETIME, classify};
pub use names::{BlobUri, Rule};
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

fn refused(url: &str, rule: Rule) -> StoreError {
    StoreError::backend(
        "open objects",
        names::shown(url),
        tilegate_core::Retry::Permanent,
        names::forbidden(url, rule),
    )
}

impl AzureLocation {
    /// Parse and validate an `az://` URL: Azure's account and container naming rules
    /// ([`names`]), and a prefix of valid output-key segments.
    pub fn parse(url: &str) -> StoreResult<Self> {
        let rest = url
            .strip_prefix("az://")
            .ok_or_else(|| refused(url, Rule::Shape))?;
        let (account, rest) = rest.split_once('/').unwrap_or((rest, ""));
        if !names::valid_account(account) {
            return Err(refused(url, Rule::AccountName));
        }
        let rest = rest.trim_end_matches('/');
        let (container, prefix) = rest.split_once('/').unwrap_or((rest, ""));
        if !names::valid_container(container) {
            return Err(refused(url, Rule::ContainerName));
        }
        if !prefix.is_empty() {
            keys::validate_key(prefix).map_err(|e| StoreError::InvalidKey {
                key: names::shown(url),
                reason: format!("prefix segment `{}`: {}", e.shown, e.reason),
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

/// A setting of the environment; blank counts as unset.
fn env_setting(k: &str) -> Option<String> {
    std::env::var(k).ok().filter(|v| !v.trim().is_empty())
}

impl Account {
    /// The account the environment configures, as GDAL's `/vsiaz/` finds it (GDAL's
    /// `VSIAzureBlobHandleHelper::GetConfiguration`): `AZURE_STORAGE_CONNECTION_STRING` and its
    /// `AccountName`, else `AZURE_STORAGE_ACCOUNT` (authorised by `AZURE_STORAGE_SAS_TOKEN`,
    /// else Entra ID tokens), else none. Credentials are only ever sent to this account's
    /// endpoint.
    pub fn configured() -> Result<Option<Self>, AzureError> {
        Self::configured_by(env_setting)
    }

    fn configured_by(get: impl Fn(&str) -> Option<String>) -> Result<Option<Self>, AzureError> {
        if let Some(cs) = get("AZURE_STORAGE_CONNECTION_STRING") {
            return Self::from_connection_string(&cs).map(Some);
        }
        let Some(name) = get("AZURE_STORAGE_ACCOUNT") else {
            return Ok(None);
        };
        let name = name.trim();
        if !names::valid_account(name) {
            return Err(AzureError::Config {
                detail: format!(
                    "AZURE_STORAGE_ACCOUNT `{}`: {}",
                    names::shown(name),
                    Rule::AccountName
                ),
            });
        }
        Self::at_azure(name, get).map(Some)
    }

    /// `name` at Azure's own endpoint, authorised by `AZURE_STORAGE_SAS_TOKEN` or Entra ID.
    fn at_azure(name: &str, get: impl Fn(&str) -> Option<String>) -> Result<Self, AzureError> {
        let blob_endpoint = format!("https://{name}.blob.core.windows.net");
        let auth = match get("AZURE_STORAGE_SAS_TOKEN") {
            Some(sas) => Auth::Sas(sas.trim().trim_start_matches('?').to_owned()),
            None => Auth::Entra(entra::source(get)?),
        };
        Ok(Self {
            name: name.to_owned(),
            blob_endpoint,
            auth,
        })
    }

    /// The account of the output store `url` (`az://name/…`, the operator's own setting): the
    /// configured account, which must be `name`; with none configured, `name` at Azure's
    /// endpoint, authorised by `AZURE_STORAGE_SAS_TOKEN` or Entra ID tokens.
    pub fn for_objects(url: &str, name: &str) -> Result<Self, AzureError> {
        Self::for_objects_by(url, name, env_setting)
    }

    fn for_objects_by(
        url: &str,
        name: &str,
        get: impl Fn(&str) -> Option<String>,
    ) -> Result<Self, AzureError> {
        match Self::configured_by(&get)? {
            Some(a) => a.only(url, name),
            None if names::valid_account(name) => Self::at_azure(name, get),
            None => Err(names::forbidden(url, Rule::AccountName)),
        }
    }

    /// The account of the source `uri` (input, not the operator's: a STAC Item's asset, a
    /// tenant's request), which must be the configured one; with none configured, a source is
    /// refused ([`Rule::NoConfiguredAccount`]) — GDAL, which reads it, would not know where.
    pub fn for_source(uri: &str, name: &str) -> Result<Self, AzureError> {
        Self::for_source_by(uri, name, env_setting)
    }

    fn for_source_by(
        uri: &str,
        name: &str,
        get: impl Fn(&str) -> Option<String>,
    ) -> Result<Self, AzureError> {
        match Self::configured_by(get)? {
            Some(a) => a.only(uri, name),
            None => Err(names::forbidden(uri, Rule::NoConfiguredAccount)),
        }
    }

    /// This account, if `url` names it.
    fn only(self, url: &str, name: &str) -> Result<Self, AzureError> {
        if self.name == name {
            Ok(self)
        } else {
            Err(names::forbidden(
                url,
                Rule::OtherAccount {
                    configured: self.name,
                },
            ))
        }
    }

    /// The protocols a SAS for this account is signed for (`spr`, "Create an account SAS" /
    /// "Create a service SAS": `https` or `https,http`): HTTPS only, except for a plain-HTTP
    /// endpoint — an emulator such as Azurite serves HTTP, and refuses a SAS that forbids it.
    pub fn sas_protocols(&self) -> &'static str {
        if self.blob_endpoint.starts_with("http://") {
            "https,http"
        } else {
            "https"
        }
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
        if !names::valid_account(&name) {
            return Err(AzureError::Config {
                detail: format!(
                    "AZURE_STORAGE_CONNECTION_STRING: AccountName `{}`: {}",
                    names::shown(&name),
                    Rule::AccountName
                ),
            });
        }
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
        check_endpoint(&blob_endpoint)?;
        Ok(Self {
            name,
            blob_endpoint,
            auth,
        })
    }
}

/// Refuse a blob endpoint that is not a plain `http(s)://host[:port][/path]` URL: anything
/// else (a user, a query, a fragment) would change where requests go or what they carry.
fn check_endpoint(endpoint: &str) -> Result<(), AzureError> {
    let bad = |why: &str| AzureError::Config {
        detail: format!(
            "AZURE_STORAGE_CONNECTION_STRING: blob endpoint `{}`: {why}",
            names::shown(endpoint)
        ),
    };
    let url = azure_core::http::Url::parse(endpoint).map_err(|e| bad(&e.to_string()))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(bad("expected http:// or https://"));
    }
    if url.host_str().is_none_or(str::is_empty) {
        return Err(bad("no host"));
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err(bad("a user or password in the endpoint"));
    }
    if url.query().is_some() || url.fragment().is_some() || endpoint.contains(['?', '#']) {
        return Err(bad("a query or fragment in the endpoint"));
    }
    Ok(())
}

/// GDAL configuration options that make `/vsiaz/` read exactly the account, at exactly the
/// endpoint, that [`AzureSources`] pins a source on: the configured account ([`Account::
/// configured`]) as a connection string with its `BlobEndpoint` (an account key or SAS), or
/// as `AZURE_STORAGE_ACCOUNT` with `CPL_AZURE_ENDPOINT` (Entra ID, which GDAL obtains
/// itself). Set as process-wide options (not thread-local), they hold on every thread and take
/// precedence over the environment, where `CPL_AZURE_ENDPOINT` or an Azure CLI configuration
/// could otherwise send GDAL elsewhere. Empty when no account is configured: every `az://`
/// source is then refused before GDAL sees it.
pub fn gdal_az_config() -> Vec<(String, String)> {
    match Account::configured() {
        Ok(Some(a)) => gdal_config_of(&a),
        _ => Vec::new(),
    }
}

fn gdal_config_of(a: &Account) -> Vec<(String, String)> {
    let cs = |credential: String| {
        vec![(
            "AZURE_STORAGE_CONNECTION_STRING".to_owned(),
            format!(
                "AccountName={};{credential};BlobEndpoint={}",
                a.name, a.blob_endpoint
            ),
        )]
    };
    match &a.auth {
        Auth::Key(k) => cs(format!("AccountKey={k}")),
        Auth::Sas(sas) => cs(format!("SharedAccessSignature={sas}")),
        Auth::Entra(_) => vec![
            ("AZURE_STORAGE_ACCOUNT".to_owned(), a.name.clone()),
            ("CPL_AZURE_ENDPOINT".to_owned(), a.blob_endpoint.clone()),
        ],
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
            "az://evil.example#/tiles",
            "az://acct1@evil.example/tiles",
            "az://evil.example:443/tiles",
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

    /// Settings from a table, as the environment would give them.
    fn settings(table: &[(&'static str, &'static str)]) -> impl Fn(&str) -> Option<String> {
        let table = table.to_vec();
        move |k: &str| {
            table
                .iter()
                .find(|(name, _)| *name == k)
                .map(|(_, v)| (*v).to_owned())
        }
    }

    fn rule(r: Result<Account, AzureError>) -> &'static str {
        match r {
            Err(AzureError::Forbidden { rule, .. }) => rule.name(),
            other => panic!("not refused by a rule: {other:?}"),
        }
    }

    const CS: (&str, &str) = (
        "AZURE_STORAGE_CONNECTION_STRING",
        "AccountName=acct1;AccountKey=a2V5;BlobEndpoint=http://127.0.0.1:10000/acct1",
    );
    const ACCOUNT: (&str, &str) = ("AZURE_STORAGE_ACCOUNT", "acct1");
    const TOKEN: (&str, &str) = ("AZURE_STORAGE_SAS_TOKEN", "?sv=1&sig=2");

    #[test]
    fn the_configured_account_is_found_as_gdal_finds_it() {
        let a = Account::configured_by(settings(&[CS, ("AZURE_STORAGE_ACCOUNT", "other1")]))
            .unwrap()
            .unwrap();
        assert_eq!(
            (a.name.as_str(), a.blob_endpoint.as_str()),
            ("acct1", "http://127.0.0.1:10000/acct1"),
            "the connection string first"
        );
        let a = Account::configured_by(settings(&[ACCOUNT, TOKEN]))
            .unwrap()
            .unwrap();
        assert_eq!(a.blob_endpoint, "https://acct1.blob.core.windows.net");
        assert_eq!(a.auth, Auth::Sas("sv=1&sig=2".into()));
        let a = Account::configured_by(settings(&[ACCOUNT]))
            .unwrap()
            .unwrap();
        assert_eq!(a.auth, Auth::Entra(entra::Source::DeveloperTools));
        assert_eq!(Account::configured_by(settings(&[TOKEN])).unwrap(), None);
        assert_eq!(Account::configured_by(settings(&[])).unwrap(), None);
        for bad in ["evil.example#", "Acct1", "a"] {
            let got =
                Account::configured_by(|k| (k == "AZURE_STORAGE_ACCOUNT").then(|| bad.into()));
            assert!(
                matches!(got, Err(AzureError::Config { .. })),
                "{bad}: {got:?}"
            );
        }
    }

    #[test]
    fn credentials_go_only_to_the_configured_account() {
        let url = "az://other1/tiles";
        // An output URL: the configured account, by either setting, must be the URL's.
        for configured in [&[CS][..], &[ACCOUNT, TOKEN][..], &[ACCOUNT][..]] {
            let get = settings(configured);
            assert_eq!(
                rule(Account::for_objects_by(url, "other1", &get)),
                "other-account"
            );
            assert_eq!(
                Account::for_objects_by("az://acct1/tiles", "acct1", &get)
                    .unwrap()
                    .name,
                "acct1"
            );
        }
        // With none configured, the operator's URL names the account, at Azure's endpoint.
        let a = Account::for_objects_by(url, "other1", settings(&[TOKEN])).unwrap();
        assert_eq!(a.blob_endpoint, "https://other1.blob.core.windows.net");
        assert_eq!(a.auth, Auth::Sas("sv=1&sig=2".into()));
        // A source: only the configured account, and none without one.
        assert_eq!(
            rule(Account::for_source_by(
                "az://other1/c/k",
                "other1",
                settings(&[CS])
            )),
            "other-account"
        );
        assert_eq!(
            Account::for_source_by("az://acct1/c/k", "acct1", settings(&[CS]))
                .unwrap()
                .name,
            "acct1"
        );
        for none in [&[TOKEN][..], &[][..]] {
            assert_eq!(
                rule(Account::for_source_by(
                    "az://acct1/c/k",
                    "acct1",
                    settings(none)
                )),
                "no-configured-account"
            );
        }
    }

    #[test]
    fn a_connection_string_cannot_name_an_account_or_endpoint_that_steers_requests() {
        for bad in [
            "AccountName=evil.example#;AccountKey=a2V5",
            "AccountName=Acct1;AccountKey=a2V5",
            "AccountName=acct1;AccountKey=a2V5;BlobEndpoint=ftp://h/acct1",
            "AccountName=acct1;AccountKey=a2V5;BlobEndpoint=http://user@h/acct1",
            "AccountName=acct1;AccountKey=a2V5;BlobEndpoint=http://h/acct1?x=1",
            "AccountName=acct1;AccountKey=a2V5;BlobEndpoint=http://h/acct1#",
            "AccountName=acct1;AccountKey=a2V5;EndpointSuffix=evil.example#",
            "AccountName=acct1;AccountKey=a2V5;DefaultEndpointsProtocol=file",
        ] {
            let got = Account::from_connection_string(bad);
            assert!(
                matches!(got, Err(AzureError::Config { .. })),
                "{bad}: {got:?}"
            );
        }
    }

    #[test]
    fn a_sas_allows_plain_http_only_for_a_plain_http_endpoint() {
        let mut a = Account::from_connection_string(CS.1).unwrap();
        assert_eq!(a.sas_protocols(), "https,http");
        a.blob_endpoint = "https://acct1.blob.core.windows.net".into();
        assert_eq!(a.sas_protocols(), "https");
    }

    #[test]
    fn gdal_is_pinned_to_the_account_and_endpoint_the_pin_uses() {
        let keyed = Account::from_connection_string(CS.1).unwrap();
        assert_eq!(
            gdal_config_of(&keyed),
            [(
                "AZURE_STORAGE_CONNECTION_STRING".to_owned(),
                "AccountName=acct1;AccountKey=a2V5;BlobEndpoint=http://127.0.0.1:10000/acct1"
                    .to_owned()
            )]
        );
        let sas = Account::configured_by(settings(&[ACCOUNT, TOKEN]))
            .unwrap()
            .unwrap();
        assert_eq!(
            gdal_config_of(&sas)[0].1,
            "AccountName=acct1;SharedAccessSignature=sv=1&sig=2;\
             BlobEndpoint=https://acct1.blob.core.windows.net"
        );
        // What GDAL reads back from it is this very account.
        assert_eq!(
            Account::from_connection_string(&gdal_config_of(&sas)[0].1).unwrap(),
            sas
        );
        let entra = Account::configured_by(settings(&[ACCOUNT]))
            .unwrap()
            .unwrap();
        assert_eq!(
            gdal_config_of(&entra),
            [
                ("AZURE_STORAGE_ACCOUNT".to_owned(), "acct1".to_owned()),
                (
                    "CPL_AZURE_ENDPOINT".to_owned(),
                    "https://acct1.blob.core.windows.net".to_owned()
                )
            ]
        );
    }
}

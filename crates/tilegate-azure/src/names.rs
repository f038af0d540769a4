//! Azure's naming rules and the one strict parse of an `az://` URL: an account, container or
//! blob name that breaks a rule is refused by that rule's name before any URL is built from
//! it, so nothing in a name can steer a request (and the credentials it carries) to another
//! host, container or blob.
//!
//! The rules are Azure's own ("Naming and Referencing Containers, Blobs, and Metadata";
//! "Storage account overview", account names): an account name is 3–24 lowercase letters and
//! digits; a container name 3–63 lowercase letters, digits and single hyphens, starting and
//! ending with a letter or digit; a blob name 1–1,024 characters in at most 254 path segments.
//!
//! How `az://ACCOUNT/CONTAINER/BLOB` is read: the account is everything before the first `/`
//! and the container everything up to the next — so `#`, `@`, `:`, `?`, `%`, `.` or an upper-
//! case letter there break the naming rules rather than becoming a fragment, user, port, query
//! or escape of a URL. The blob is the rest, taken literally: `#`, `?`, `%`, `@` and `:` are
//! characters of its name, percent-encoded by the client (`url`'s path-segment encoding) and by
//! GDAL (`CPLAWSURLEncode`) alike, so both read the blob the URI names. Segments a URL resolver
//! would remove or merge (empty, `.`, `..`) are refused: the client drops a `.`/`..` segment
//! and curl (GDAL) squashes them, so the pin and GDAL could read different blobs.

use crate::error::AzureError;
use std::fmt;

/// Azure's limit on a blob name, in characters.
const MAX_BLOB_CHARS: usize = 1024;
/// Azure's limit on the path segments of a blob name.
const MAX_BLOB_SEGMENTS: usize = 254;

/// The rule an `az://` URL breaks; [`Rule::name`] is stable, for scripts and tests.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Rule {
    /// Not `az://account/container[/…]`.
    Shape,
    /// The account name is not 3–24 lowercase letters and digits.
    AccountName,
    /// The container name breaks Azure's container naming rules.
    ContainerName,
    /// The blob name is empty, too long, or has control characters or segments a URL resolver
    /// would rewrite.
    BlobName,
    /// The URL names another account than the one configured: credentials go only to the
    /// configured account's endpoint.
    OtherAccount { configured: String },
    /// A source names an account, and none is configured to check it against (or for GDAL to
    /// read it with).
    NoConfiguredAccount,
}

impl Rule {
    /// The rule's stable kebab-case name.
    pub fn name(&self) -> &'static str {
        match self {
            Self::Shape => "url-shape",
            Self::AccountName => "account-name",
            Self::ContainerName => "container-name",
            Self::BlobName => "blob-name",
            Self::OtherAccount { .. } => "other-account",
            Self::NoConfiguredAccount => "no-configured-account",
        }
    }
}

impl fmt::Display for Rule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Shape => f.write_str("expected az://account/container/blob"),
            Self::AccountName => {
                f.write_str("an Azure storage account name is 3-24 lowercase letters and digits")
            }
            Self::ContainerName => f.write_str(
                "a container name is 3-63 lowercase letters, digits and single hyphens, starting \
                 and ending with a letter or digit",
            ),
            Self::BlobName => write!(
                f,
                "a blob name is 1-{MAX_BLOB_CHARS} characters in at most {MAX_BLOB_SEGMENTS} \
                 segments, without control characters or empty, `.` or `..` segments"
            ),
            Self::OtherAccount { configured } => write!(
                f,
                "credentials are sent only to the configured account `{configured}`"
            ),
            Self::NoConfiguredAccount => f.write_str(
                "no Azure account is configured to read sources from: set \
                 AZURE_STORAGE_CONNECTION_STRING or AZURE_STORAGE_ACCOUNT (GDAL reads the same)",
            ),
        }
    }
}

/// `url` as an error shows it: control characters escaped, at most 200 characters.
pub(crate) fn shown(url: &str) -> String {
    let mut out: String = url.chars().take(200).flat_map(char::escape_debug).collect();
    if url.chars().nth(200).is_some() {
        out.push('…');
    }
    out
}

/// The refusal of `url` by `rule`.
pub(crate) fn forbidden(url: &str, rule: Rule) -> AzureError {
    let policy = tilegate_core::source_policy::Forbidden {
        rule: rule.name(),
        detail: rule.to_string(),
    };
    AzureError::Forbidden {
        url: shown(url),
        rule,
        policy,
    }
}

/// Whether `name` is a storage account name: 3–24 lowercase letters and digits.
pub fn valid_account(name: &str) -> bool {
    (3..=24).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
}

/// Whether `name` is a container name: 3–63 lowercase letters, digits and `-`, starting and
/// ending with a letter or digit, no `--`.
pub fn valid_container(name: &str) -> bool {
    let alnum = |b: &u8| b.is_ascii_lowercase() || b.is_ascii_digit();
    (3..=63).contains(&name.len())
        && name.bytes().all(|b| alnum(&b) || b == b'-')
        && name.as_bytes().first().is_some_and(alnum)
        && name.as_bytes().last().is_some_and(alnum)
        && !name.contains("--")
}

/// Whether `name` is a blob name every reader resolves alike (see the module's documentation).
pub fn valid_blob(name: &str) -> bool {
    !name.is_empty()
        && name.chars().count() <= MAX_BLOB_CHARS
        && name.split('/').count() <= MAX_BLOB_SEGMENTS
        && !name.chars().any(char::is_control)
        && name
            .split('/')
            .all(|s| !s.is_empty() && s != "." && s != "..")
}

/// A source's `az://account/container/blob`, every part checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BlobUri {
    pub account: String,
    pub container: String,
    pub blob: String,
}

impl BlobUri {
    /// Parse `uri`, refusing it by the first rule it breaks: the account's, the container's,
    /// then the blob's.
    pub fn parse(uri: &str) -> Result<Self, AzureError> {
        let rest = uri
            .strip_prefix("az://")
            .ok_or_else(|| forbidden(uri, Rule::Shape))?;
        let (account, rest) = rest.split_once('/').unwrap_or((rest, ""));
        if !valid_account(account) {
            return Err(forbidden(uri, Rule::AccountName));
        }
        let (container, blob) = rest.split_once('/').unwrap_or((rest, ""));
        if !valid_container(container) {
            return Err(forbidden(uri, Rule::ContainerName));
        }
        if !valid_blob(blob) {
            return Err(forbidden(uri, Rule::BlobName));
        }
        Ok(Self {
            account: account.to_owned(),
            container: container.to_owned(),
            blob: blob.to_owned(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule_of(uri: &str) -> Option<&'static str> {
        match BlobUri::parse(uri) {
            Ok(_) => None,
            Err(AzureError::Forbidden { rule, .. }) => Some(rule.name()),
            Err(e) => panic!("{uri}: {e}"),
        }
    }

    #[test]
    fn account_names_are_azures() {
        for (name, ok) in [
            ("abc", true),
            ("tgacct1", true),
            ("devstoreaccount1", true),
            ("a".repeat(24).as_str(), true),
            ("a".repeat(25).as_str(), false),
            ("ab", false),
            ("", false),
            ("Acct1", false),
            ("acct-1", false),
            ("acct_1", false),
            ("acct.1", false),
            ("evil.example", false),
            ("evil.example#", false),
            ("acct1@evil", false),
            ("evil:443", false),
            ("evil?x", false),
            ("evil%2e", false),
            ("ac ct", false),
            ("acct\n", false),
            ("ácct", false),
            ("[::1]", false),
        ] {
            assert_eq!(valid_account(name), ok, "{name:?}");
        }
    }

    #[test]
    fn container_names_are_azures() {
        for (name, ok) in [
            ("abc", true),
            ("tiles", true),
            ("a-b-c", true),
            ("a1-2b", true),
            ("a".repeat(63).as_str(), true),
            ("a".repeat(64).as_str(), false),
            ("ab", false),
            ("-abc", false),
            ("abc-", false),
            ("a--b", false),
            ("Tiles", false),
            ("ti_les", false),
            ("ti.les", false),
            ("$root", false),
            ("tiles#", false),
        ] {
            assert_eq!(valid_container(name), ok, "{name:?}");
        }
    }

    #[test]
    fn blob_names_are_read_alike_by_every_client() {
        for (name, ok) in [
            ("k", true),
            ("scenes/a.tif", true),
            ("a?b#c%2Fd@e:f", true),
            ("名前.tif", true),
            ("a..b/c.", true),
            (&"a".repeat(1024), true),
            (&"a".repeat(1025), false),
            ("a/".repeat(254).trim_end_matches('/'), true),
            ("a/".repeat(255).trim_end_matches('/'), false),
            ("", false),
            ("/k", false),
            ("k/", false),
            ("a//b", false),
            (".", false),
            ("..", false),
            ("a/../b", false),
            ("a/./b", false),
            ("../other/k", false),
            ("a\nb", false),
            ("a\u{7f}", false),
        ] {
            assert_eq!(valid_blob(name), ok, "{name:?}");
        }
    }

    #[test]
    fn an_az_uri_is_refused_by_the_first_rule_it_breaks() {
        for (uri, rule) in [
            ("az://acct1/tiles/scenes/a.tif", None),
            ("az://acct1/tiles/a?b#c", None),
            ("s3://acct1/tiles/k", Some("url-shape")),
            ("az:/acct1/tiles/k", Some("url-shape")),
            ("az://evil.example#/c/k", Some("account-name")),
            (
                "az://evil.example#.blob.core.windows.net/c/k",
                Some("account-name"),
            ),
            ("az://acct1@evil.example/tiles/k", Some("account-name")),
            ("az://evil.example:443/tiles/k", Some("account-name")),
            ("az://evil?/tiles/k", Some("account-name")),
            ("az://evil%2Eexample/tiles/k", Some("account-name")),
            ("az://ACCT1/tiles/k", Some("account-name")),
            ("az:///tiles/k", Some("account-name")),
            ("az://acct1", Some("container-name")),
            ("az://acct1//k", Some("container-name")),
            ("az://acct1/ti#/k", Some("container-name")),
            ("az://acct1/tiles", Some("blob-name")),
            ("az://acct1/tiles/", Some("blob-name")),
            ("az://acct1/tiles/..", Some("blob-name")),
            ("az://acct1/tiles/../other/k", Some("blob-name")),
        ] {
            assert_eq!(rule_of(uri), rule, "{uri}");
        }
        let u = BlobUri::parse("az://acct1/tiles/a/b%2Fc?d").unwrap();
        assert_eq!(
            (u.account.as_str(), u.container.as_str(), u.blob.as_str()),
            ("acct1", "tiles", "a/b%2Fc?d"),
            "the blob is taken literally: no escape is decoded"
        );
    }

    #[test]
    fn a_refusal_names_its_rule_and_shows_the_url_escaped() {
        let e = BlobUri::parse("az://evil.example#\n/c/k").unwrap_err();
        let text = e.to_string();
        assert!(text.contains("[account-name]"), "{text}");
        assert!(text.contains("evil.example#\\n/c/k"), "{text}");
        assert_eq!(e.reason_code(), "source-forbidden");
        let long = format!("az://{}", "x".repeat(5000));
        assert!(BlobUri::parse(&long).unwrap_err().to_string().len() < 600);
    }
}

//! The source policy: the one place that decides what a job may read — which schemes, which
//! HTTP(S) hosts and addresses, which buckets and containers — applied when planning and again
//! whenever a worker opens a source.
//!
//! Trust follows where a reference comes from ([`Origin`]). The operator's own command line is
//! trusted to name local files. Everything derived from a document — a STAC asset's href, a
//! redirect's `Location` — stays within the document's origin unless the policy names more, and
//! never reaches a local file from a remote document. Whatever the origin, an HTTP(S) reference
//! never reaches a loopback, private, link-local or metadata address (IPv4 and IPv6, checked on
//! the literal in the URL and again on every address a name resolves to, on every redirect)
//! unless the policy lists the range.
//!
//! The default is safe for a shared service: every scheme, any public host, no private
//! addresses, documents of at most 16 MiB and 5 redirects. It is configuration ([`PolicyConfig`],
//! read from a TOML file by `tilegate-source`), with `[tenants.NAME]` tables that replace its
//! fields for one tenant's jobs. Pure logic, no I/O: `tilegate-source` applies it on the paths
//! that read, and the fuzz target drives it directly.

use crate::reference::Reference;
use serde::Deserialize;
use std::collections::BTreeMap;
use std::net::IpAddr;

mod addresses;

pub use addresses::{AddressRange, special};

/// The schemes tilegate can read a source from.
pub const SCHEMES: [&str; 6] = ["file", "http", "https", "s3", "gs", "az"];

/// What a job may read. Build it from configuration with [`Policies::from_config`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SourcePolicy {
    /// The schemes a source may have (`file`, `http`, `https`, `s3`, `gs`, `az`).
    pub schemes: Vec<String>,
    /// HTTP(S) hosts a source may name: exact names or `*.example.com`; empty: any host. A host
    /// listed here may also be reached from a document on another origin.
    pub hosts: Vec<String>,
    /// Address ranges an HTTP(S) source may reach besides public addresses (refused otherwise:
    /// loopback, private, link-local, metadata, unique-local and other special ranges).
    pub allow_addresses: Vec<AddressRange>,
    /// Buckets and containers a source may name: `s3://bucket`, `gs://bucket`,
    /// `az://account/container`; empty: any the operator names, and from a document only the
    /// document's own. One listed here may also be reached from a document elsewhere.
    pub buckets: Vec<String>,
    /// The largest document (a STAC Item or ItemCollection) read, in bytes.
    pub max_document_bytes: u64,
    /// Redirects followed when pinning an HTTP(S) source or reading a document.
    pub max_redirects: u32,
}

impl Default for SourcePolicy {
    fn default() -> Self {
        Self {
            schemes: SCHEMES.iter().map(|s| (*s).to_owned()).collect(),
            hosts: Vec::new(),
            allow_addresses: Vec::new(),
            buckets: Vec::new(),
            max_document_bytes: 16 << 20,
            max_redirects: 5,
        }
    }
}

/// Where a reference to a source comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Origin<'a> {
    /// Named on the operator's command line (or a job row the operator planned).
    Operator,
    /// Made by a document read from this URI (a STAC Item's asset, a redirect's target).
    Document(&'a str),
}

/// A reference the policy refuses, with the rule that refused it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("forbidden by the source policy ({rule}): {detail}")]
pub struct Forbidden {
    /// The rule's stable name (`scheme`, `local-file-from-document`, `host`, `address`,
    /// `cross-origin`, `bucket`, `document-too-large`, `redirects`, `malformed`, and for a
    /// document that arrived in a message `local-file-from-message`, `host-from-message`,
    /// `bucket-from-message`).
    pub rule: &'static str,
    pub detail: String,
}

fn forbid(rule: &'static str, detail: impl Into<String>) -> Forbidden {
    Forbidden {
        rule,
        detail: detail.into(),
    }
}

/// A reference taken apart as the policy judges it.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Place {
    Local,
    Http {
        scheme: String,
        host: String,
        port: Option<u16>,
    },
    /// `s3://bucket`, `gs://bucket`, `az://account/container`.
    Bucket {
        scheme: String,
        bucket: String,
    },
    /// `message://…`: a document that arrived in a queue message (a STAC Item sent to
    /// `ingest`). It has no origin of its own: its references reach only listed hosts and
    /// buckets, and it is never read itself.
    Message,
}

impl Place {
    fn of(uri: &str) -> Result<Self, Forbidden> {
        Ok(Self::from(&Reference::parse(uri)?))
    }

    fn scheme(&self) -> &str {
        match self {
            Self::Local => "file",
            Self::Message => "message",
            Self::Http { scheme, .. } | Self::Bucket { scheme, .. } => scheme,
        }
    }
}

impl From<&Reference> for Place {
    fn from(r: &Reference) -> Self {
        match r {
            Reference::Local(_) => Self::Local,
            Reference::Message(_) => Self::Message,
            Reference::Http(url) => Self::Http {
                scheme: url.scheme().to_owned(),
                host: match url.host() {
                    Some(url::Host::Domain(d)) => d.to_ascii_lowercase(),
                    Some(url::Host::Ipv4(a)) => a.to_string(),
                    Some(url::Host::Ipv6(a)) => a.to_string(),
                    None => String::new(),
                },
                port: url.port_or_known_default(),
            },
            Reference::Object { store, bucket, .. } => Self::Bucket {
                scheme: store.scheme().to_owned(),
                bucket: bucket.clone(),
            },
        }
    }
}

impl SourcePolicy {
    /// Judge a reference to a source from `origin`, before anything is read from it. HTTP(S)
    /// hosts that are names are judged again on the addresses they resolve to
    /// ([`Self::check_addresses`]) by the HTTP client that reads them.
    pub fn check(&self, uri: &str, origin: Origin<'_>) -> Result<(), Forbidden> {
        self.admit(uri, origin).map(drop)
    }

    /// [`Self::check`], returning the reference as parsed: what the caller hands on (its
    /// [`Reference::canonical`] form), never the string it was given.
    pub fn admit(&self, uri: &str, origin: Origin<'_>) -> Result<Reference, Forbidden> {
        let reference = Reference::parse(uri)?;
        self.judge(&reference, origin)?;
        Ok(reference)
    }

    /// Judge a parsed reference from `origin`.
    pub fn judge(&self, reference: &Reference, origin: Origin<'_>) -> Result<(), Forbidden> {
        let place = Place::from(reference);
        if !self.schemes.iter().any(|s| s == place.scheme()) {
            return Err(forbid(
                "scheme",
                format!("the `{}` scheme is not allowed", place.scheme()),
            ));
        }
        let from = match origin {
            Origin::Operator => None,
            Origin::Document(doc) => Some(Place::of(doc)?),
        };
        let from_message = matches!(from, Some(Place::Message));
        match &place {
            // A message's document is never read: it is the identity of what arrived.
            Place::Message => Err(forbid(
                "scheme",
                "a `message://` document is not a source to read",
            )),
            Place::Local if from_message => Err(forbid(
                "local-file-from-message",
                "a document that arrived in a message may not name a local file",
            )),
            Place::Local => match from {
                None | Some(Place::Local) => Ok(()),
                Some(_) => Err(forbid(
                    "local-file-from-document",
                    "a remote document may not name a local file",
                )),
            },
            Place::Http { host, port, .. } => {
                let listed = self.host_listed(host);
                if !self.hosts.is_empty() && !listed {
                    return Err(forbid("host", format!("`{host}` is not an allowed host")));
                }
                if let Ok(ip) = host.parse::<IpAddr>() {
                    self.check_address(ip)?;
                }
                match from {
                    Some(Place::Message) if !listed => Err(forbid(
                        "host-from-message",
                        format!(
                            "`{host}` is not an allowed host (a document that arrived in a \
                             message reaches only the policy's `hosts`)"
                        ),
                    )),
                    Some(Place::Http {
                        host: h, port: p, ..
                    }) if (h == *host && p == *port) || listed => Ok(()),
                    Some(Place::Local) | None => Ok(()),
                    Some(_) if listed => Ok(()),
                    Some(_) => Err(forbid(
                        "cross-origin",
                        format!("`{host}` is not the document's origin and not an allowed host"),
                    )),
                }
            }
            Place::Bucket { scheme, bucket } => {
                let name = format!("{scheme}://{bucket}");
                let listed = self.buckets.iter().any(|b| b.trim_end_matches('/') == name);
                if !self.buckets.is_empty() && !listed {
                    return Err(forbid(
                        "bucket",
                        format!("`{name}` is not an allowed bucket"),
                    ));
                }
                match from {
                    None => Ok(()),
                    Some(Place::Message) if !listed => Err(forbid(
                        "bucket-from-message",
                        format!(
                            "`{name}` is not an allowed bucket (a document that arrived in a \
                             message reaches only the policy's `buckets`)"
                        ),
                    )),
                    Some(Place::Bucket {
                        scheme: s,
                        bucket: b,
                    }) if s == *scheme && b == *bucket => Ok(()),
                    Some(_) if listed => Ok(()),
                    // A local document the operator named may name the operator's buckets.
                    Some(Place::Local) if self.buckets.is_empty() => Ok(()),
                    Some(_) => Err(forbid(
                        "cross-origin",
                        format!(
                            "`{name}` is not the document's own bucket and not an allowed one \
                             (it would be read with this deployment's credentials)"
                        ),
                    )),
                }
            }
        }
    }

    fn host_listed(&self, host: &str) -> bool {
        self.hosts.iter().any(|h| {
            let h = h.to_ascii_lowercase();
            match h.strip_prefix("*.") {
                Some(suffix) => host.ends_with(&format!(".{suffix}")),
                None => h == host,
            }
        })
    }

    /// Judge one address an HTTP(S) source reaches.
    pub fn check_address(&self, ip: IpAddr) -> Result<(), Forbidden> {
        if self.allow_addresses.iter().any(|r| r.contains(ip)) {
            return Ok(());
        }
        match special(ip) {
            None => Ok(()),
            Some(kind) => Err(forbid(
                "address",
                format!("{ip} is a {kind} address, which sources may not reach"),
            )),
        }
    }

    /// Judge every address a name resolved to: all must be allowed (one forbidden address
    /// among public ones refuses the name, so a resolver cannot mix them).
    pub fn check_addresses(&self, ips: &[IpAddr]) -> Result<(), Forbidden> {
        if ips.is_empty() {
            return Err(forbid("address", "the name resolves to no address"));
        }
        ips.iter().try_for_each(|ip| self.check_address(*ip))
    }

    /// The policy of one tenant's jobs: the tenant's table of the configuration if it has one.
    pub fn for_tenant(config: &PolicyConfig, tenant: &str) -> Result<Self, PolicyError> {
        let mut fields = config.base();
        if let Some(t) = config.tenants.get(tenant) {
            fields = fields.overlay(t);
        }
        fields.build()
    }
}

/// The policies of a deployment: its own, and each tenant's. Loaded once (a bad file is an
/// error at start-up, never per job), asked per job by the job's tenant.
#[derive(Debug, Default)]
pub struct Policies {
    config: PolicyConfig,
    built: std::sync::Mutex<BTreeMap<String, std::sync::Arc<SourcePolicy>>>,
}

impl Policies {
    /// The default policy for every tenant.
    pub fn new() -> Self {
        Self::default()
    }

    /// From a configuration; every tenant's policy is built (and checked) here.
    pub fn from_config(config: PolicyConfig) -> Result<Self, PolicyError> {
        let this = Self {
            config,
            built: Default::default(),
        };
        this.for_tenant("")?;
        let tenants: Vec<String> = this.config.tenants.keys().cloned().collect();
        for t in tenants {
            this.for_tenant(&t)?;
        }
        Ok(this)
    }

    /// The policy of `tenant`'s jobs.
    pub fn for_tenant(&self, tenant: &str) -> Result<std::sync::Arc<SourcePolicy>, PolicyError> {
        let mut built = self.built.lock().expect("policies");
        if let Some(p) = built.get(tenant) {
            return Ok(std::sync::Arc::clone(p));
        }
        let p = std::sync::Arc::new(SourcePolicy::for_tenant(&self.config, tenant)?);
        built.insert(tenant.to_owned(), std::sync::Arc::clone(&p));
        Ok(p)
    }

    /// The policy of `tenant`'s jobs (a tenant without a table of its own has the
    /// deployment's).
    pub fn of(&self, tenant: &str) -> std::sync::Arc<SourcePolicy> {
        self.for_tenant(tenant)
            .expect("every policy was built when the configuration was loaded")
    }
}

/// A source policy file that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("source policy: {0}")]
pub struct PolicyError(pub String);

/// The fields of a policy as configured; every one optional (absent: the default's).
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PolicyFields {
    pub schemes: Option<Vec<String>>,
    pub hosts: Option<Vec<String>>,
    pub allow_addresses: Option<Vec<String>>,
    pub buckets: Option<Vec<String>>,
    pub max_document_bytes: Option<u64>,
    pub max_redirects: Option<u32>,
}

impl PolicyFields {
    fn overlay(self, over: &Self) -> Self {
        Self {
            schemes: over.schemes.clone().or(self.schemes),
            hosts: over.hosts.clone().or(self.hosts),
            allow_addresses: over.allow_addresses.clone().or(self.allow_addresses),
            buckets: over.buckets.clone().or(self.buckets),
            max_document_bytes: over.max_document_bytes.or(self.max_document_bytes),
            max_redirects: over.max_redirects.or(self.max_redirects),
        }
    }

    fn build(self) -> Result<SourcePolicy, PolicyError> {
        let d = SourcePolicy::default();
        let schemes = self.schemes.unwrap_or(d.schemes);
        if let Some(bad) = schemes.iter().find(|s| !SCHEMES.contains(&s.as_str())) {
            return Err(PolicyError(format!(
                "`{bad}` is not a scheme sources are read from ({})",
                SCHEMES.join(", ")
            )));
        }
        let allow_addresses = self
            .allow_addresses
            .unwrap_or_default()
            .iter()
            .map(|r| AddressRange::parse(r))
            .collect::<Result<_, _>>()?;
        Ok(SourcePolicy {
            schemes,
            hosts: self.hosts.unwrap_or(d.hosts),
            allow_addresses,
            buckets: self.buckets.unwrap_or(d.buckets),
            max_document_bytes: self.max_document_bytes.unwrap_or(d.max_document_bytes),
            max_redirects: self.max_redirects.unwrap_or(d.max_redirects),
        })
    }
}

/// A policy file: the deployment's fields, and per tenant a table that replaces some of them.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PolicyConfig {
    pub schemes: Option<Vec<String>>,
    pub hosts: Option<Vec<String>>,
    pub allow_addresses: Option<Vec<String>>,
    pub buckets: Option<Vec<String>>,
    pub max_document_bytes: Option<u64>,
    pub max_redirects: Option<u32>,
    #[serde(default)]
    pub tenants: BTreeMap<String, PolicyFields>,
}

impl PolicyConfig {
    /// The deployment's own fields.
    fn base(&self) -> PolicyFields {
        PolicyFields {
            schemes: self.schemes.clone(),
            hosts: self.hosts.clone(),
            allow_addresses: self.allow_addresses.clone(),
            buckets: self.buckets.clone(),
            max_document_bytes: self.max_document_bytes,
            max_redirects: self.max_redirects,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p() -> SourcePolicy {
        SourcePolicy::default()
    }

    #[test]
    fn documents_stay_within_their_origin() {
        let pol = p();
        let item = Origin::Document("https://stac.example.com/a/item.json");
        assert!(
            pol.check("https://stac.example.com/a/B04.tif", item)
                .is_ok()
        );
        let rule = |r: Result<(), Forbidden>| r.unwrap_err().rule;
        assert_eq!(
            rule(pol.check("file:///etc/passwd", item)),
            "local-file-from-document"
        );
        assert_eq!(
            rule(pol.check("/etc/passwd", item)),
            "local-file-from-document"
        );
        assert_eq!(
            rule(pol.check("s3://tenants/victim/x.tif", item)),
            "cross-origin"
        );
        assert_eq!(rule(pol.check("gs://b/x.tif", item)), "cross-origin");
        assert_eq!(rule(pol.check("az://acct/c/x.tif", item)), "cross-origin");
        assert_eq!(
            rule(pol.check("https://other.example.com/x.tif", item)),
            "cross-origin"
        );
        assert_eq!(rule(pol.check("http://127.0.0.1:9/x", item)), "address");
        // A bucket's document may name its own bucket; a local one the operator's.
        let in_bucket = Origin::Document("s3://b/items/i.json");
        assert!(pol.check("s3://b/x.tif", in_bucket).is_ok());
        assert_eq!(rule(pol.check("s3://c/x.tif", in_bucket)), "cross-origin");
        let local = Origin::Document("file:///data/item.json");
        assert!(pol.check("file:///data/B04.tif", local).is_ok());
        assert!(pol.check("s3://b/x.tif", local).is_ok());
    }

    #[test]
    fn a_document_from_a_message_reaches_only_what_the_policy_lists() {
        let rule = |r: Result<(), Forbidden>| r.unwrap_err().rule;
        let msg = Origin::Document("message://sentinel-2-l2a/S2A_1");
        let pol = p();
        assert_eq!(
            rule(pol.check("/etc/passwd", msg)),
            "local-file-from-message"
        );
        assert_eq!(
            rule(pol.check("file:///root/.aws/credentials", msg)),
            "local-file-from-message"
        );
        assert_eq!(
            rule(pol.check("s3://deployment-secrets/x.tif", msg)),
            "bucket-from-message"
        );
        assert_eq!(
            rule(pol.check("https://data.example.com/x.tif", msg)),
            "host-from-message"
        );
        // The message's own identity is never read, whoever names it.
        assert_eq!(rule(pol.check("message://c/i", Origin::Operator)), "scheme");
        let listed = SourcePolicy {
            hosts: vec!["*.example.com".to_owned()],
            buckets: vec!["s3://scenes".to_owned()],
            ..p()
        };
        assert!(listed.check("https://data.example.com/x.tif", msg).is_ok());
        assert!(listed.check("s3://scenes/x.tif", msg).is_ok());
        assert_eq!(rule(listed.check("s3://other/x.tif", msg)), "bucket");
    }

    #[test]
    fn a_scheme_without_slashes_is_neither_a_path_nor_a_url() {
        let rule = |r: Result<(), Forbidden>| r.unwrap_err().rule;
        let pol = p();
        assert_eq!(
            rule(pol.check("s3:bucket/x.tif", Origin::Operator)),
            "malformed"
        );
        // A document named so is no local document that may name the operator's buckets.
        let doc = Origin::Document("s3:y/items/i.json");
        assert_eq!(rule(pol.check("az://acct/c/x.tif", doc)), "malformed");
        assert!(pol.check("data:2026/scene.tif", Origin::Operator).is_ok());
        // What a URL parser would read past: leading NULs, a newline inside a scheme.
        let doc = Origin::Document("\0\0s3:y/i.json");
        assert_eq!(rule(pol.check("a\naz:./x", doc)), "malformed");
        assert_eq!(
            rule(pol.check("/data/a\nb.tif", Origin::Operator)),
            "malformed"
        );
        let doc = Origin::Document("  https:/c/stac.example.com/item.json");
        assert_eq!(rule(pol.check("scene.tif", doc)), "malformed");
    }

    #[test]
    fn the_operator_names_what_the_policy_allows() {
        let pol = p();
        assert!(pol.check("/data/a.tif", Origin::Operator).is_ok());
        assert!(pol.check("s3://any/a.tif", Origin::Operator).is_ok());
        assert_eq!(
            pol.check("http://169.254.169.254/latest/meta-data/", Origin::Operator)
                .unwrap_err()
                .rule,
            "address"
        );
        assert_eq!(
            pol.check("http://[::1]:8080/a.tif", Origin::Operator)
                .unwrap_err()
                .rule,
            "address"
        );
        assert_eq!(
            pol.check("ftp://x/a.tif", Origin::Operator)
                .unwrap_err()
                .rule,
            "scheme"
        );
        assert_eq!(
            pol.check("https://u:p@h/a.tif", Origin::Operator)
                .unwrap_err()
                .rule,
            "malformed"
        );
    }

    #[test]
    fn configuration_narrows_and_widens_per_tenant() {
        let config: PolicyConfig = serde_json::from_value(serde_json::json!({
            "schemes": ["https", "s3"],
            "allow_addresses": ["127.0.0.1"],
            "tenants": {"acme": {"buckets": ["s3://acme-raw"], "hosts": ["*.acme.example"]}}
        }))
        .unwrap();
        let all = Policies::from_config(config).unwrap();
        let base = all.of("other");
        assert_eq!(
            base.check("/data/a.tif", Origin::Operator)
                .unwrap_err()
                .rule,
            "scheme"
        );
        assert!(
            base.check("https://127.0.0.1/a.tif", Origin::Operator)
                .is_ok()
        );
        let acme = all.of("acme");
        assert!(acme.check("s3://acme-raw/a.tif", Origin::Operator).is_ok());
        assert_eq!(
            acme.check("s3://victim/a.tif", Origin::Operator)
                .unwrap_err()
                .rule,
            "bucket"
        );
        assert!(
            acme.check("https://data.acme.example/a.tif", Origin::Operator)
                .is_ok()
        );
        assert_eq!(
            acme.check("https://evil.example/a.tif", Origin::Operator)
                .unwrap_err()
                .rule,
            "host"
        );
        // An allowed bucket may be reached from a document elsewhere.
        assert!(
            acme.check(
                "s3://acme-raw/B04.tif",
                Origin::Document("https://x.acme.example/item.json")
            )
            .is_ok()
        );
        let bad = |v: serde_json::Value| {
            serde_json::from_value::<PolicyConfig>(v)
                .map_err(|e| PolicyError(e.to_string()))
                .and_then(Policies::from_config)
                .is_err()
        };
        assert!(bad(serde_json::json!({"schemes": ["ftp"]})));
        assert!(bad(serde_json::json!({"unknown": 1})));
        assert!(bad(
            serde_json::json!({"tenants": {"t": {"allow_addresses": ["x/99"]}}})
        ));
    }
}

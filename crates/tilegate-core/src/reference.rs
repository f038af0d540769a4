//! A reference to a source or a document, parsed once.
//!
//! Everything that reads a source — the source policy, tilegate's own HTTP client, GDAL, the
//! stored job row, queue messages, announcements — takes a [`Reference`]'s canonical form
//! ([`Reference::canonical`]), never the string a user or a document gave. Parsers disagree on
//! strings that are not canonical: the WHATWG URL parser (the `url` crate, reqwest) ends an
//! `http(s)` authority at `\` where curl (GDAL's `/vsicurl/`) reads `host\` as a user name;
//! GDAL collapses `..` in a `/vsigs/` or `/vsiaz/` path where the policy judged the first
//! segment as the bucket. So a reference whose canonical form could mean something other than
//! its input is refused (rule `malformed`), not repaired: userinfo, backslashes, whitespace and
//! control characters, dot segments, percent-encoded separators and dots, and object keys with
//! empty segments, `?` or `#`.
//!
//! What stays as it was given: a local path (the operator's own; the policy never lets a
//! remote document name one), and a `message://` identity (never read).

use crate::source_policy::Forbidden;
use std::fmt;

/// The object stores a reference may name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Store {
    S3,
    Gs,
    Az,
}

impl Store {
    /// The URI scheme (`s3`, `gs`, `az`).
    pub fn scheme(self) -> &'static str {
        match self {
            Self::S3 => "s3",
            Self::Gs => "gs",
            Self::Az => "az",
        }
    }

    /// GDAL's virtual file system for it.
    fn vsi(self) -> &'static str {
        match self {
            Self::S3 => "/vsis3/",
            Self::Gs => "/vsigs/",
            Self::Az => "/vsiaz/",
        }
    }
}

/// A reference, taken apart once.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reference {
    /// A local file: the path as named (`file:///p` is `/p`).
    Local(String),
    /// An HTTP(S) URL as the WHATWG parser serialises it, without userinfo.
    Http(url::Url),
    /// An object: `s3://bucket/key`, `gs://bucket/key`, `az://account/container/key`
    /// (`bucket` is then `account/container`).
    Object {
        store: Store,
        bucket: String,
        key: String,
    },
    /// `message://COLLECTION/ID`: a document that arrived in a queue message; never read.
    Message(String),
}

fn malformed(detail: impl Into<String>) -> Forbidden {
    Forbidden {
        rule: "malformed",
        detail: detail.into(),
    }
}

/// The schemes a reference may have besides a bare path.
const SCHEMES: [&str; 7] = ["file", "http", "https", "s3", "gs", "az", "message"];

impl Reference {
    /// Parse `input`, refusing what another parser could read differently.
    pub fn parse(input: &str) -> Result<Self, Forbidden> {
        // A URL parser drops leading control characters and every tab and newline, so such a
        // string would not be what the policy judged.
        if input.chars().any(char::is_control) || input.trim() != input {
            return Err(malformed(
                "control characters, or spaces at either end, in a reference",
            ));
        }
        let Some((scheme, rest)) = input.split_once("://") else {
            // `s3:bucket/key` is no path: a URL parser reads it as `s3`, and so would a
            // reader of the job row. Refuse what is neither a path nor a URL.
            if let Some((scheme, _)) = input.split_once(':')
                && SCHEMES
                    .iter()
                    .any(|s| *s != "file" && s.eq_ignore_ascii_case(scheme))
            {
                return Err(malformed(format!(
                    "`{scheme}:` without `//` is neither a path nor a URL"
                )));
            }
            return Ok(Self::Local(input.to_owned()));
        };
        match scheme.to_ascii_lowercase().as_str() {
            "file" => {
                // RFC 8089: `file://localhost/p` is `file:///p`.
                let rest = match rest.get(..10) {
                    Some(host) if host.eq_ignore_ascii_case("localhost/") => &rest[9..],
                    _ => rest,
                };
                if !rest.starts_with('/') {
                    return Err(malformed(
                        "a `file://` URI names a host; write `file:///absolute/path`",
                    ));
                }
                Ok(Self::Local(rest.to_owned()))
            }
            "http" | "https" => http(input).map(Self::Http),
            "s3" => object(Store::S3, rest),
            "gs" => object(Store::Gs, rest),
            "az" => object(Store::Az, rest),
            "message" => Ok(Self::Message(input.to_owned())),
            other => Err(Forbidden {
                rule: "scheme",
                detail: format!("`{other}` is not a source scheme"),
            }),
        }
    }

    /// The one spelling every consumer gets: the URL as serialised, `scheme://bucket/key`,
    /// `file:///absolute/path` (a relative path as given).
    pub fn canonical(&self) -> String {
        self.to_string()
    }

    /// The scheme (`file` for a local path).
    pub fn scheme(&self) -> &str {
        match self {
            Self::Local(_) => "file",
            Self::Http(u) => u.scheme(),
            Self::Object { store, .. } => store.scheme(),
            Self::Message(_) => "message",
        }
    }

    /// Where GDAL reads it: the path, `/vsicurl/URL`, `/vsis3/bucket/key`, `/vsigs/…`,
    /// `/vsiaz/container/key` (GDAL takes the Azure account from its configuration). `None`
    /// for a message's identity, which is never read.
    pub fn gdal_path(&self) -> Option<String> {
        match self {
            Self::Local(p) => Some(p.clone()),
            Self::Http(u) => Some(format!("/vsicurl/{u}")),
            Self::Object { store, bucket, key } => {
                let bucket = match store {
                    Store::Az => bucket.split_once('/').map_or(bucket.as_str(), |(_, c)| c),
                    _ => bucket,
                };
                Some(format!("{}{bucket}/{key}", store.vsi()))
            }
            Self::Message(_) => None,
        }
    }

    /// The HTTP(S) URL, for a URL.
    pub fn url(&self) -> Option<&url::Url> {
        match self {
            Self::Http(u) => Some(u),
            _ => None,
        }
    }
}

impl fmt::Display for Reference {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Local(p) if p.starts_with('/') => write!(f, "file://{p}"),
            Self::Local(p) => f.write_str(p),
            Self::Http(u) => f.write_str(u.as_str()),
            Self::Object { store, bucket, key } => {
                write!(f, "{}://{bucket}/{key}", store.scheme())
            }
            Self::Message(m) => f.write_str(m),
        }
    }
}

impl std::str::FromStr for Reference {
    type Err = Forbidden;

    fn from_str(s: &str) -> Result<Self, Forbidden> {
        Self::parse(s)
    }
}

/// A path segment that some reader takes for `.` or `..`, spelled out or percent-encoded.
fn is_dot_segment(segment: &str) -> bool {
    let decoded = segment.to_ascii_lowercase().replace("%2e", ".");
    decoded == "." || decoded == ".."
}

/// Percent-encodings that some reader decodes into a separator, a dot or a NUL before it
/// splits a path.
fn encoded_separator(text: &str) -> Option<&'static str> {
    let lower = text.to_ascii_lowercase();
    ["%2f", "%5c", "%00"]
        .into_iter()
        .find(|e| lower.contains(e))
}

fn http(input: &str) -> Result<url::Url, Forbidden> {
    if input.contains('\\') {
        return Err(malformed(
            "a backslash in a URL (parsers disagree on where its host ends)",
        ));
    }
    if input.chars().any(char::is_whitespace) {
        return Err(malformed("whitespace in a URL"));
    }
    let rest = input.split_once("://").map_or("", |(_, r)| r);
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(end);
    if authority.contains('@') {
        return Err(malformed(
            "credentials in the URL's authority are not accepted",
        ));
    }
    // `http:///host/x` is `host` to a URL parser (it skips the extra slashes) and no host to
    // curl; `%68ost` is `host` to one and not the other.
    if authority.is_empty() || authority.contains('%') {
        return Err(malformed("an empty or percent-encoded host in a URL"));
    }
    let path = tail.split(['?', '#']).next().unwrap_or("");
    if path.split('/').any(is_dot_segment) {
        return Err(malformed("a `.` or `..` segment in the URL's path"));
    }
    if let Some(e) = encoded_separator(path) {
        return Err(malformed(format!(
            "a percent-encoded separator (`{e}`) in the URL's path"
        )));
    }
    let url = url::Url::parse(input).map_err(|e| malformed(format!("not a URL ({e})")))?;
    if !url.username().is_empty() || url.password().is_some() {
        return Err(malformed(
            "credentials in the URL's authority are not accepted",
        ));
    }
    if url.host().is_none() {
        return Err(malformed("the URL names no host"));
    }
    Ok(url)
}

fn object(store: Store, rest: &str) -> Result<Reference, Forbidden> {
    // A space is an ordinary character of a key (`incoming/scene 1.tif`, which every client
    // percent-encodes the same way); no other whitespace is.
    if rest.contains('\\') || rest.chars().any(|c| c.is_whitespace() && c != ' ') {
        return Err(malformed(
            "a backslash, or whitespace other than a space, in an object reference",
        ));
    }
    if rest.contains(['?', '#']) {
        return Err(malformed(
            "`?` or `#` in an object reference (GDAL reads them as a query)",
        ));
    }
    let (bucket, key) = match store {
        Store::Az => {
            let mut parts = rest.splitn(3, '/');
            let account = parts.next().unwrap_or("");
            let container = parts.next().unwrap_or("");
            if !valid_name(account, false) || !valid_name(container, false) {
                return Err(malformed(
                    "no storage account and container (`az://account/container/key`)",
                ));
            }
            (format!("{account}/{container}"), parts.next().unwrap_or(""))
        }
        _ => {
            let (bucket, key) = rest.split_once('/').unwrap_or((rest, ""));
            if !valid_name(bucket, true) {
                return Err(malformed(format!(
                    "`{bucket}` is not a bucket name (lower-case letters, digits, `.`, `-`, `_`)"
                )));
            }
            (bucket.to_owned(), key)
        }
    };
    if !key.is_empty() {
        if key.split('/').any(is_dot_segment) {
            return Err(malformed(
                "a `.` or `..` segment in an object key (GDAL would leave the bucket)",
            ));
        }
        if key.split('/').any(str::is_empty) {
            return Err(malformed("an empty segment (`//`) in an object key"));
        }
        if let Some(e) = encoded_separator(key)
            .or_else(|| key.to_ascii_lowercase().contains("%2e").then_some("%2e"))
        {
            return Err(malformed(format!(
                "a percent-encoded separator or dot (`{e}`) in an object key"
            )));
        }
    }
    Ok(Reference::Object {
        store,
        bucket,
        key: key.to_owned(),
    })
}

/// A bucket, account or container name: lower-case letters, digits, `-` (and `.`, `_` for
/// buckets), at most 222 characters.
fn valid_name(name: &str, bucket: bool) -> bool {
    !name.is_empty()
        && name.len() <= 222
        && name.chars().all(|c| {
            c.is_ascii_lowercase()
                || c.is_ascii_digit()
                || c == '-'
                || (bucket && (c == '.' || c == '_'))
        })
        && !matches!(name, "." | "..")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(s: &str) -> &'static str {
        Reference::parse(s).unwrap_err().rule
    }

    #[test]
    fn what_two_parsers_would_read_differently_is_refused() {
        for s in [
            "http://allowed.example\\@10.0.0.5:8080/x.tif",
            "http://allowed.example\\@10.0.0.5/",
            "https://u:p@h/a.tif",
            "https://h@evil/a.tif",
            "https://h/a/../b.tif",
            "https://h/a/%2e%2E/b.tif",
            "https://h/./b.tif",
            "https://h/a%2fb.tif",
            "https://h/a%5Cb.tif",
            "https://h/a b.tif",
            "https://h/a\tb.tif",
            "http:///hHa/x.tif",
            "http://%68ost/x.tif",
            " https://h/a.tif",
            "gs://tenant-a-uploads/../other-bucket/x.tif",
            "gs://b/a/%2e%2e/x.tif",
            "gs://b/a//x.tif",
            "gs://b//x.tif",
            "gs://b/a%2Fx.tif",
            "az://acct/c/../d/x.tif",
            "az://acct/../c/x.tif",
            "s3://b/k?x=1",
            "s3://b/k#f",
            "s3://b\\c/k",
            "s3://B/k",
            "s3:bucket/k",
            "file://host/etc/passwd",
        ] {
            assert_eq!(rule(s), "malformed", "{s}");
        }
        assert_eq!(rule("ftp://h/a.tif"), "scheme");
    }

    #[test]
    fn every_consumer_gets_the_canonical_form() {
        let r = Reference::parse("HTTPS://Data.Example.com:443/a/b.tif?x=1#i").unwrap();
        assert_eq!(r.canonical(), "https://data.example.com/a/b.tif?x=1#i");
        assert_eq!(
            r.gdal_path().unwrap(),
            "/vsicurl/https://data.example.com/a/b.tif?x=1#i"
        );
        assert_eq!(
            Reference::parse(&r.canonical()).unwrap(),
            r,
            "a fixed point"
        );
        let r = Reference::parse("http://0x7f.1:8/x").unwrap();
        assert_eq!(r.canonical(), "http://127.0.0.1:8/x");
        let got = |s: &str| Reference::parse(s).unwrap().gdal_path().unwrap();
        assert_eq!(got("file:///data/a.tif"), "/data/a.tif");
        assert_eq!(got("/data/a.tif"), "/data/a.tif");
        assert_eq!(got("s3://b/k/a.tif"), "/vsis3/b/k/a.tif");
        assert_eq!(got("gs://b/k/a.tif"), "/vsigs/b/k/a.tif");
        assert_eq!(got("az://acct/c/k/a.tif"), "/vsiaz/c/k/a.tif");
        assert_eq!(
            Reference::parse("az://acct/c/k/a.tif").unwrap().canonical(),
            "az://acct/c/k/a.tif"
        );
        assert_eq!(
            Reference::parse("file:///d/a.tif").unwrap().canonical(),
            "file:///d/a.tif"
        );
        // Dots inside a name are no dot segments; a relative local path is the operator's.
        assert!(Reference::parse("gs://b/x..y/a.b.tif").is_ok());
        assert_eq!(
            got("s3://b/incoming/scene 1.tif"),
            "/vsis3/b/incoming/scene 1.tif"
        );
        assert!(Reference::parse("../data/a.tif").is_ok());
        assert_eq!(
            Reference::parse("file://localhost/d/a.tif")
                .unwrap()
                .canonical(),
            "file:///d/a.tif"
        );
        assert!(
            Reference::parse("message://c/i")
                .unwrap()
                .gdal_path()
                .is_none()
        );
    }
}

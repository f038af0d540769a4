//! Secrets out of text that leaves the process: [`redact`] replaces the values of the
//! credentials a URL, an HTTP header or a connection string can carry with [`REDACTED`],
//! keeping their names, so a reader still sees what kind of thing was there.
//!
//! It is a pure function of its text (no I/O, no state), applied where text leaves the
//! process: [`crate::error::chain`] (every logged error, dead-letter reason and status line),
//! the dead-letter write path, the status model, the report, STAC Items, and every log line
//! the command line writes. An HTTP client's error names the URL it sent, and a URL signed
//! with a SAS or SigV4 carries its signature in its query.
//!
//! What goes (names case-insensitive, `=` or `:` between name and value, quotes allowed):
//! - Azure SAS: `sig`, and every SAS parameter (`sv`, `ss`, `srt`, `sp`, `st`, `se`, `spr`,
//!   …) of a query that carries a `sig`;
//! - AWS SigV4: `X-Amz-Signature`, `X-Amz-Credential`, `X-Amz-Security-Token`, and an
//!   `Authorization: AWS4-HMAC-SHA256` header's `Credential` and `Signature`;
//! - GCS V4 signed URLs: `X-Goog-Signature`, `X-Goog-Credential`;
//! - connection strings: `AccountKey`, `SharedAccessSignature`, `SharedAccessKey` (to `;`);
//! - an `Authorization` header's credentials (`Bearer …`, `Basic …`, `SharedKey …`), and a
//!   `Bearer` token anywhere once it is long enough to be one (16 characters);
//! - URL userinfo: `https://user:pass@host` becomes `https://REDACTED@host`;
//! - `password`, `secret`, `client_secret`, `access_token`, `refresh_token`, `id_token`,
//!   `api_key` anywhere; `token`, `key`, `pwd`, `code`, `AWSAccessKeyId` and `GoogleAccessId`
//!   only as query parameters (after `?` or `&`), since `key=…` is also how a log line names an
//!   object key. [`crate::source::split_credentials`] takes every one of these off a URL, and
//!   the signed URL's other parts besides ([`is_credential_parameter`]).
//!
//! Not recognised: a name or separator that is itself percent-encoded (`sig%3D…` inside
//! another URL's query value).

use std::borrow::Cow;

/// What a secret's value becomes.
pub const REDACTED: &str = "REDACTED";

/// `text` with every secret it carries replaced by [`REDACTED`] (borrowed when there was
/// none). Idempotent: redacted text is left as it is.
pub fn redact(text: &str) -> Cow<'_, str> {
    let mut out = Cow::Borrowed(text);
    for pass in [pairs, sas, userinfo] {
        if let Some(changed) = pass(&out) {
            out = Cow::Owned(changed);
        }
    }
    out
}

/// How a name's value is found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// A credential wherever it is named.
    Anywhere,
    /// A credential only as a query parameter (`?name=` or `&name=`).
    Query,
    /// A connection-string part: the value runs to `;` (a SAS in it carries `&` and `=`).
    ConnectionString,
    /// An authorization header: `scheme credentials`.
    Authorization,
    /// `Bearer token`.
    Bearer,
}

fn kind(lower: &str) -> Option<Kind> {
    Some(match lower {
        "sig"
        | "signature"
        | "credential"
        | "x-amz-signature"
        | "x-amz-credential"
        | "x-amz-security-token"
        | "x-goog-signature"
        | "x-goog-credential"
        | "access_token"
        | "refresh_token"
        | "id_token"
        | "client_secret"
        | "password"
        | "passwd"
        | "secret"
        | "api_key"
        | "apikey"
        | "api-key"
        | "x-api-key" => Kind::Anywhere,
        "token" | "key" | "pwd" | "awsaccesskeyid" | "googleaccessid" | "code" => Kind::Query,
        "accountkey" | "sharedaccesssignature" | "sharedaccesskey" => Kind::ConnectionString,
        "authorization" | "proxy-authorization" | "x-ms-copy-source-authorization" => {
            Kind::Authorization
        }
        "bearer" => Kind::Bearer,
        _ => return None,
    })
}

/// True if a URL's query parameter `name` carries a credential or belongs to one: every name
/// whose value [`redact`] hides in a query (signatures, credentials, tokens, keys, passwords,
/// secrets), and the parts of a signed URL that mean nothing without its signature (a
/// presigned URL's other `X-Amz-*`/`X-Goog-*`, the V2 `Expires`, an Azure SAS's parameters).
/// [`crate::source::split_credentials`] takes these off a URL before it is stored; built on
/// the redactor's own list, so neither knows a secret the other does not.
pub fn is_credential_parameter(name: &str) -> bool {
    let lower = name.to_ascii_lowercase();
    SAS_PARAMETERS.contains(&lower.as_str())
        || lower.starts_with("x-amz-")
        || lower.starts_with("x-goog-")
        || lower == "expires"
        || matches!(kind(&lower), Some(Kind::Anywhere | Kind::Query))
}

/// The query parameters of an Azure SAS (account, service and user delegation).
const SAS_PARAMETERS: [&str; 27] = [
    "sv", "ss", "srt", "sp", "st", "se", "sip", "spr", "sr", "si", "sig", "sdd", "ses", "skoid",
    "sktid", "skt", "ske", "sks", "skv", "saoid", "suoid", "scid", "rscc", "rscd", "rsce", "rscl",
    "rsct",
];

/// A bearer token named without an `Authorization` header is taken for one from this length.
const MIN_BEARER: usize = 16;

/// The longest name looked up (`x-ms-copy-source-authorization`), with room to spare.
const NAME_MAX: usize = 32;

/// `raw` in lower case, written into `buf`; `None` for a name longer than any looked up.
fn lowercase<'a>(raw: &[u8], buf: &'a mut [u8; NAME_MAX]) -> Option<&'a str> {
    let lower = buf.get_mut(..raw.len())?;
    lower.copy_from_slice(raw);
    lower.make_ascii_lowercase();
    std::str::from_utf8(lower).ok()
}

fn is_name(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_' || b == b'-'
}

fn is_quote(b: u8) -> bool {
    b == b'"' || b == b'\''
}

/// Bytes that end a text run in every context: whitespace, quotes and markup.
fn ends_run(b: u8) -> bool {
    b.is_ascii_whitespace() || b"\"'<>\\`|)]}".contains(&b)
}

/// Bytes that end a query or header value.
fn ends_value(b: u8) -> bool {
    ends_run(b) || b"&,;#".contains(&b)
}

/// Bytes that end a connection-string value.
fn ends_connection_value(b: u8) -> bool {
    ends_run(b) || b == b';'
}

fn is_token(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"-._~+/=%".contains(&b)
}

/// The end of the run of bytes from `from` that `ends` does not end.
fn run_end(b: &[u8], from: usize, ends: fn(u8) -> bool) -> usize {
    b[from..]
        .iter()
        .position(|&c| ends(c))
        .map_or(b.len(), |p| from + p)
}

fn skip(b: &[u8], mut i: usize, what: fn(u8) -> bool) -> usize {
    while i < b.len() && what(b[i]) {
        i += 1;
    }
    i
}

/// `b[from..to]` less the punctuation that ends it (a sentence's, not a value's: no
/// encoded secret ends in `.`, `:` or `,`), if anything is left.
fn value(b: &[u8], from: usize, to: usize) -> Option<(usize, usize)> {
    let to = from
        + b[from..to]
            .iter()
            .rposition(|c| !b".:,".contains(c))
            .map_or(0, |p| p + 1);
    (to > from).then_some((from, to))
}

/// Where the value after a name ending at `j` starts: after `=` or `:` (a quote may close the
/// name and open the value, as JSON and `Debug` write them). `true` for `=`.
fn separator(b: &[u8], j: usize) -> Option<(usize, bool)> {
    let mut k = j;
    if k < b.len() && is_quote(b[k]) {
        k += 1;
    }
    k = skip(b, k, |c| c == b' ');
    let eq = match b.get(k) {
        Some(b'=') => true,
        Some(b':') => false,
        _ => return None,
    };
    k = skip(b, k + 1, |c| c == b' ');
    if k < b.len() && is_quote(b[k]) {
        k += 1;
    }
    Some((k, eq))
}

/// The byte range of the secret after the name `b[start..j]`, if it names one.
fn secret_after(b: &[u8], start: usize, j: usize) -> Option<(usize, usize)> {
    let mut buf = [0; NAME_MAX];
    let kind = kind(lowercase(&b[start..j], &mut buf)?)?;
    if kind == Kind::Bearer {
        let k = skip(b, j, |c| c == b' ' || c == b'\t');
        let e = skip(b, k, is_token);
        return (k > j && e - k >= MIN_BEARER).then_some((k, e));
    }
    let (v, eq) = separator(b, j)?;
    match kind {
        Kind::Query => {
            let in_query = start > 0 && matches!(b[start - 1], b'?' | b'&');
            if !(eq && in_query) {
                return None;
            }
            value(b, v, run_end(b, v, ends_value))
        }
        Kind::Anywhere => value(b, v, run_end(b, v, ends_value)),
        Kind::ConnectionString => value(b, v, run_end(b, v, ends_connection_value)),
        Kind::Authorization => authorization(b, v),
        Kind::Bearer => None,
    }
}

/// The credentials of an authorization header's value starting at `v`: the token after the
/// scheme (or the one word there is). A value of `name=value` parameters (SigV4's
/// `Credential=…, SignedHeaders=…, Signature=…`) is left to the names in it.
fn authorization(b: &[u8], v: usize) -> Option<(usize, usize)> {
    let scheme_end = skip(b, v, is_name);
    let k = skip(b, scheme_end, |c| c == b' ');
    if scheme_end == v || k == scheme_end || k == b.len() || ends_value(b[k]) {
        // One word, or no scheme: all of it is the credential.
        return value(b, v, run_end(b, v, ends_value));
    }
    let e = run_end(b, k, ends_value);
    let token = &b[k..e];
    let parameters = token
        .iter()
        .enumerate()
        .any(|(i, &c)| c == b'=' && token.get(i + 1).is_some_and(|&n| n != b'='));
    if parameters {
        return None;
    }
    value(b, k, e)
}

/// Replace the byte ranges `spans` (sorted, disjoint) of `s`; `None` if nothing changes.
fn replace(s: &str, spans: &[(usize, usize)]) -> Option<String> {
    let spans: Vec<_> = spans
        .iter()
        .filter(|(f, t)| &s[*f..*t] != REDACTED)
        .collect();
    if spans.is_empty() {
        return None;
    }
    let mut out = String::with_capacity(s.len());
    let mut copied = 0;
    for (from, to) in spans {
        out.push_str(&s[copied..*from]);
        out.push_str(REDACTED);
        copied = *to;
    }
    out.push_str(&s[copied..]);
    Some(out)
}

/// Named values: `name=value`, `name: value`, `"name": "value"`, `Bearer token`.
fn pairs(s: &str) -> Option<String> {
    let b = s.as_bytes();
    let mut spans = Vec::new();
    let mut i = 0;
    while i < b.len() {
        if !is_name(b[i]) || (i > 0 && is_name(b[i - 1])) {
            i += 1;
            continue;
        }
        let j = skip(b, i, is_name);
        match secret_after(b, i, j) {
            Some((from, to)) => {
                spans.push((from, to));
                i = to;
            }
            None => i = j,
        }
    }
    replace(s, &spans)
}

/// Every SAS parameter of a query that carries a `sig`.
fn sas(s: &str) -> Option<String> {
    let b = s.as_bytes();
    let mut spans = Vec::new();
    let mut i = 0;
    while i < b.len() {
        // A connection string's `;` and a URL's `#` end a query; a SAS's `spr=https,http`
        // keeps its comma.
        let end = run_end(b, i, |c| ends_run(c) || c == b';' || c == b'#');
        let mut params = Vec::new();
        let mut from = i;
        while from <= end {
            let to = b[from..end]
                .iter()
                .position(|&c| c == b'?' || c == b'&')
                .map_or(end, |p| from + p);
            let piece = &b[from..to];
            if let Some(eq) = piece.iter().position(|&c| c == b'=')
                && eq > 0
                && piece[..eq].iter().all(|&c| is_name(c))
            {
                let mut buf = [0; NAME_MAX];
                if let Some(name) = lowercase(&piece[..eq], &mut buf)
                    && SAS_PARAMETERS.contains(&name)
                {
                    params.push((name == "sig", value(b, from + eq + 1, to)));
                }
            }
            from = to + 1;
        }
        if params.iter().any(|(sig, _)| *sig) && params.iter().any(|(sig, _)| !*sig) {
            spans.extend(params.into_iter().filter_map(|(_, span)| span));
        }
        i = end + 1;
    }
    replace(s, &spans)
}

/// `scheme://userinfo@host` becomes `scheme://REDACTED@host`.
fn userinfo(s: &str) -> Option<String> {
    let b = s.as_bytes();
    let mut spans = Vec::new();
    let mut search = 0;
    while let Some(p) = s[search..].find("://") {
        let colon = search + p;
        let start = colon + 3;
        search = start;
        let scheme = b[..colon]
            .iter()
            .rev()
            .take_while(|&&c| c.is_ascii_alphanumeric() || b"+.-".contains(&c))
            .count();
        if scheme == 0 || !b[colon - scheme].is_ascii_alphabetic() {
            continue;
        }
        let end = run_end(b, start, |c| ends_run(c) || b"/?#@".contains(&c));
        if end > start && b.get(end) == Some(&b'@') {
            spans.push((start, end));
            search = end;
        }
    }
    replace(s, &spans)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn each_kind_of_secret_is_redacted_and_its_name_kept() {
        for (text, expected) in [
            (
                "PUT http://127.0.0.1:1/acct/tiles/a?comp=block&sv=2018-11-09&ss=b&srt=sco\
                 &sp=rwdlacup&st=2026-12-02T00%3A00%3A00Z&se=2026-12-09T00%3A00%3A00Z\
                 &spr=https,http&sig=AbC%2Bd%3D failed",
                "PUT http://127.0.0.1:1/acct/tiles/a?comp=block&sv=REDACTED&ss=REDACTED\
                 &srt=REDACTED&sp=REDACTED&st=REDACTED&se=REDACTED&spr=REDACTED&sig=REDACTED \
                 failed",
            ),
            ("a sig=AbC%2B alone", "a sig=REDACTED alone"),
            (
                "s3://b/k?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=AKIA%2F20261202%2Fus-east-1\
                 &X-Amz-Security-Token=FwoG&X-Amz-Signature=0a1b&x-id=GetObject",
                "s3://b/k?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=REDACTED\
                 &X-Amz-Security-Token=REDACTED&X-Amz-Signature=REDACTED&x-id=GetObject",
            ),
            (
                "authorization: AWS4-HMAC-SHA256 Credential=AKIA/20261202/us-east-1/s3/aws4_request, \
                 SignedHeaders=host;x-amz-date, Signature=0a1b2c",
                "authorization: AWS4-HMAC-SHA256 Credential=REDACTED, \
                 SignedHeaders=host;x-amz-date, Signature=REDACTED",
            ),
            (
                "{\"x-amz-security-token\": \"FwoGZX\", \"host\": \"h\"}",
                "{\"x-amz-security-token\": \"REDACTED\", \"host\": \"h\"}",
            ),
            (
                "https://storage.googleapis.com/b/o?X-Goog-Algorithm=GOOG4-RSA-SHA256\
                 &X-Goog-Credential=sa%40p.iam&X-Goog-Signature=9f8e",
                "https://storage.googleapis.com/b/o?X-Goog-Algorithm=GOOG4-RSA-SHA256\
                 &X-Goog-Credential=REDACTED&X-Goog-Signature=REDACTED",
            ),
            (
                "DefaultEndpointsProtocol=https;AccountName=acct;AccountKey=Eby8+vd/A==;\
                 EndpointSuffix=core.windows.net",
                "DefaultEndpointsProtocol=https;AccountName=acct;AccountKey=REDACTED;\
                 EndpointSuffix=core.windows.net",
            ),
            (
                "BlobEndpoint=https://a.blob.core.windows.net;SharedAccessSignature=sv=2020-08-04&ss=b&sig=x%2B",
                "BlobEndpoint=https://a.blob.core.windows.net;SharedAccessSignature=REDACTED",
            ),
            (
                "Authorization: Bearer eyJ0eXAi.eyJhdWQi.c2ln",
                "Authorization: Bearer REDACTED",
            ),
            (
                "\"authorization\": \"Basic dXNlcjpwYXNz\"",
                "\"authorization\": \"Basic REDACTED\"",
            ),
            (
                "got bearer eyJ0eXAiOiJKV1QiLCJhbGci here",
                "got bearer REDACTED here",
            ),
            (
                "GET https://alice:s3cret@example.com/x and ftp://tok@h",
                "GET https://REDACTED@example.com/x and ftp://REDACTED@h",
            ),
            (
                "https://h/p?access_token=ya29&token=t0k&key=k3y&password=pw&secret=s&pwd=p",
                "https://h/p?access_token=REDACTED&token=REDACTED&key=REDACTED\
                 &password=REDACTED&secret=REDACTED&pwd=REDACTED",
            ),
            (
                "retry password=\"hunter2\" client_secret=abc",
                "retry password=\"REDACTED\" client_secret=REDACTED",
            ),
            ("SIG=ab&Sig=cd", "SIG=REDACTED&Sig=REDACTED"),
        ] {
            assert_eq!(redact(text), expected, "{text}");
        }
    }

    #[test]
    fn text_without_secrets_is_borrowed_unchanged() {
        for text in [
            "failed to put `tiles/a.tif`: key=tiles/p/0_1.tif token=attempt-7",
            "http://127.0.0.1:10000/devstoreaccount1/tiles/p%2Fa.tif?comp=block&blockid=YQ%3D%3D",
            "?sv=2018-11-09&se=2026-12-09&sp=r (no signature, so not a SAS)",
            "Server failed to authenticate the request. Make sure the value of Authorization \
             header is formed correctly including the signature.",
            "Signature did not match. String to sign used was devstoreaccount1",
            "user@example.com https://example.com/a@b s3://bucket/key.tif az://acct/c",
            "?monkey=banana&design=1&keys=3 the bearer of bad news",
            "sig=REDACTED Authorization: Bearer REDACTED https://REDACTED@h",
        ] {
            assert!(matches!(redact(text), Cow::Borrowed(_)), "{text}");
        }
    }

    /// A secret unlike anything else in the texts: `Xq7` and 13 to 40 characters of base64,
    /// some percent-encoded.
    fn secret() -> impl Strategy<Value = String> {
        proptest::collection::vec(
            prop_oneof![
                4 => "[A-Za-z0-9]",
                1 => Just("%2B".to_owned()),
                1 => Just("%2F".to_owned()),
                1 => Just("%3D".to_owned()),
            ],
            13..40,
        )
        .prop_map(|parts| format!("Xq7{}", parts.concat()))
    }

    const TEMPLATES: &[&str] = &[
        "http://127.0.0.1:1/acct/t/a?comp=block&sv=2018-11-09&ss=b&srt=sco&sp=rwdlacup\
         &se=2026-12-09T00%3A00%3A00Z&spr=https,http&sig={}",
        "error sending request for url (http://127.0.0.1:1/acct/t?sig={}&sv=2018-11-09)",
        "s3://b/k?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential={}&X-Amz-Signature=ab",
        "s3://b/k?X-Amz-Date=20261202T000000Z&X-Amz-Signature={}",
        "https://b.s3.amazonaws.com/k?X-Amz-Security-Token={}&X-Amz-Expires=900",
        "Authorization: AWS4-HMAC-SHA256 Credential={}/20261202/us-east-1/s3/aws4_request, \
         SignedHeaders=host, Signature=0a",
        "Authorization: AWS4-HMAC-SHA256 Credential=AKIA/1/us-east-1/s3/aws4_request, \
         SignedHeaders=host;x-amz-date, Signature={}",
        "x-amz-security-token: {}",
        "headers: {\"x-amz-security-token\": \"{}\"}",
        "https://storage.googleapis.com/b/o?X-Goog-Credential={}&X-Goog-Signature=ab",
        "https://storage.googleapis.com/b/o?X-Goog-Date=1&X-Goog-Signature={}",
        "AccountName=acct;AccountKey={};EndpointSuffix=core.windows.net",
        "BlobEndpoint=https://a.blob.core.windows.net;SharedAccessSignature=sv=2020&ss=b&sig={}",
        "Authorization: Bearer {}",
        "{\"authorization\": \"Bearer {}\"}",
        "the token was Bearer {} and it expired",
        "https://user:{}@example.com/path",
        "postgres://{}@db:5432/x",
        "https://h/p?access_token={}",
        "https://h/p?a=1&token={}",
        "https://h/p?key={}&b=2",
        "https://h/p?password={}",
        "https://h/p?secret={}#frag",
        "retry password=\"{}\"",
        "client_secret={}",
        "authorization=Basic {}",
    ];

    const CLEAN: &[&str] = &[
        "failed to put `tiles/a.tif`",
        "key=tiles/p/t/0_1.tif",
        "token=attempt-7f3a",
        "window=3_4 status=500",
        "https://acct.blob.core.windows.net/tiles/p%2Ft%2Fa.tif?comp=block&blockid=YQ%3D%3D",
        "s3://bucket/key.tif",
        "az://devstoreaccount1/tiles/out",
        "file:///tmp/x.tif",
        "http://127.0.0.1:10000/devstoreaccount1",
        "Signature did not match. String to sign used was devstoreaccount1",
        "Make sure the value of Authorization header is formed correctly including the signature.",
        "HttpResponse(403, \"AuthorizationPermissionMismatch\")",
        "?sv=2018-11-09&se=2026-12-09T00%3A00%3A00Z&sp=r",
        "the bearer of bad news.",
        "user@example.com",
        "https://example.com/a@b",
        "?monkey=banana&design=1&keyring=x",
        "signed=yes x-amz-date=20261202T000000Z X-Amz-Algorithm=AWS4-HMAC-SHA256",
        "AccountName=devstoreaccount1;BlobEndpoint=http://127.0.0.1:10000/devstoreaccount1",
        "sig=REDACTED&X-Amz-Signature=REDACTED",
        "Authorization: Bearer REDACTED",
        "https://REDACTED@example.com",
        "Ünïcödé ✓ — 0_1",
    ];

    fn clean_text() -> impl Strategy<Value = String> {
        proptest::collection::vec(
            (
                proptest::sample::select(CLEAN),
                proptest::sample::select(&[" ", "\n", ", ", ": "][..]),
            ),
            0..8,
        )
        .prop_map(|words| {
            words
                .into_iter()
                .map(|(w, sep)| format!("{w}{sep}"))
                .collect()
        })
    }

    /// `name` with each letter's case chosen by `mask`.
    fn recase(name: &str, mask: u64) -> String {
        name.chars()
            .enumerate()
            .map(|(i, c)| {
                if mask >> (i % 64) & 1 == 1 {
                    c.to_ascii_uppercase()
                } else {
                    c.to_ascii_lowercase()
                }
            })
            .collect()
    }

    proptest! {
        #[test]
        fn a_secret_never_survives(
            secret in secret(),
            template in proptest::sample::select(TEMPLATES),
            before in clean_text(),
            after in clean_text(),
        ) {
            let text = format!("{before} {} {after}", template.replace("{}", &secret));
            let out = redact(&text);
            prop_assert!(!out.contains(&secret), "{text}\n=> {out}");
            prop_assert!(out.contains(REDACTED));
            prop_assert_eq!(redact(&out), out.clone(), "idempotent");
        }

        #[test]
        fn names_are_case_insensitive(
            secret in secret(),
            name in proptest::sample::select(&[
                "sig", "X-Amz-Signature", "X-Amz-Credential", "X-Amz-Security-Token",
                "X-Goog-Signature", "X-Goog-Credential", "AccountKey", "SharedAccessSignature",
                "access_token", "password", "secret", "token", "key",
            ][..]),
            mask in any::<u64>(),
        ) {
            let text = format!("https://h/p?a=1&{}={secret}&b=2", recase(name, mask));
            let out = redact(&text);
            prop_assert!(!out.contains(&secret), "{text}\n=> {out}");
        }

        #[test]
        fn text_without_secrets_is_unchanged(text in clean_text()) {
            prop_assert_eq!(redact(&text), text.as_str());
        }
    }
}

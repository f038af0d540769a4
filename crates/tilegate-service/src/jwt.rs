//! OIDC bearer tokens: signature checked against a JWKS (a file, or a URL fetched at start and
//! again when a token names a key the set lacks, at most once a minute), then the issuer, the
//! audience and the expiry; the tenant is a configured claim, the operator role another.
//! Only asymmetric algorithms are accepted: a JWKS publishes public keys, and a token that
//! asks for HMAC or `none` is refused before any key is looked at.

use crate::keys::Role;
use jsonwebtoken::jwk::JwkSet;
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use serde_json::Value;
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};
use tilegate_core::Tenant;

/// Where the signing keys are published.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JwksSource {
    File(std::path::PathBuf),
    Url(String),
}

impl JwksSource {
    /// `https://…` or `http://…` is a URL; anything else a file.
    pub fn parse(s: &str) -> Self {
        if s.starts_with("https://") || s.starts_with("http://") {
            Self::Url(s.to_owned())
        } else {
            Self::File(s.into())
        }
    }
}

/// How tokens are checked.
#[derive(Debug, Clone)]
pub struct JwtConfig {
    pub jwks: JwksSource,
    pub issuer: String,
    pub audience: String,
    /// The claim whose value is the tenant.
    pub tenant_claim: String,
    /// The claim whose value `operator` makes the caller an operator.
    pub role_claim: String,
}

/// Why the JWKS could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum JwksError {
    #[error("read the JWKS {path}: {error}")]
    Read { path: String, error: String },
    #[error("fetch the JWKS {url}: {error}")]
    Fetch { url: String, error: String },
    #[error("parse the JWKS {from}: {error}")]
    Parse { from: String, error: String },
}

/// A verified token's caller.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenCaller {
    pub tenant: Tenant,
    pub role: Role,
    /// `sub`, for the audit log, escaped ([`printable`]).
    pub subject: String,
}

/// Checks tokens against the configured issuer's keys.
#[derive(Debug)]
pub struct JwtVerifier {
    cfg: JwtConfig,
    keys: RwLock<Arc<JwkSet>>,
    fetched: RwLock<Instant>,
    http: reqwest::Client,
}

/// The algorithms a JWKS can publish keys for.
const ASYMMETRIC: &[Algorithm] = &[
    Algorithm::RS256,
    Algorithm::RS384,
    Algorithm::RS512,
    Algorithm::PS256,
    Algorithm::PS384,
    Algorithm::PS512,
    Algorithm::ES256,
    Algorithm::ES384,
    Algorithm::EdDSA,
];

/// How often an unknown `kid` may make the verifier fetch the JWKS again.
const REFETCH_EVERY: Duration = Duration::from_secs(60);

impl JwtVerifier {
    /// Load the JWKS once; a set that cannot be loaded stops the server from starting.
    pub async fn new(cfg: JwtConfig) -> Result<Self, JwksError> {
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(10))
            .build()
            .expect("an HTTP client");
        let keys = load(&cfg.jwks, &http).await?;
        Ok(Self {
            cfg,
            keys: RwLock::new(Arc::new(keys)),
            fetched: RwLock::new(Instant::now()),
            http,
        })
    }

    fn set(&self) -> Arc<JwkSet> {
        Arc::clone(&self.keys.read().expect("not poisoned"))
    }

    /// A URL's set again, if a minute has passed since the last fetch.
    async fn refetch(&self) -> Option<Arc<JwkSet>> {
        if !matches!(self.cfg.jwks, JwksSource::Url(_)) {
            return None;
        }
        {
            let mut at = self.fetched.write().expect("not poisoned");
            if at.elapsed() < REFETCH_EVERY {
                return None;
            }
            *at = Instant::now();
        }
        match load(&self.cfg.jwks, &self.http).await {
            Ok(set) => {
                let set = Arc::new(set);
                *self.keys.write().expect("not poisoned") = Arc::clone(&set);
                Some(set)
            }
            Err(e) => {
                tracing::warn!(error = %e, "JWKS refetch failed; keeping the keys we have");
                None
            }
        }
    }

    /// The caller `token` proves, or why it proves nothing (for the log; the caller is told
    /// only that it was refused).
    pub async fn verify(&self, token: &str) -> Result<TokenCaller, String> {
        let header = jsonwebtoken::decode_header(token).map_err(|e| format!("header: {e}"))?;
        if !ASYMMETRIC.contains(&header.alg) {
            return Err(format!("algorithm {:?} is not accepted", header.alg));
        }
        let mut set = self.set();
        let find = |set: &JwkSet| match &header.kid {
            Some(kid) => set.find(kid).cloned(),
            None if set.keys.len() == 1 => set.keys.first().cloned(),
            None => None,
        };
        let jwk = match find(&set) {
            Some(k) => k,
            None => {
                set = self.refetch().await.ok_or("no key for the token's kid")?;
                find(&set).ok_or("no key for the token's kid")?
            }
        };
        let key = DecodingKey::from_jwk(&jwk).map_err(|e| format!("key: {e}"))?;
        let mut v = Validation::new(header.alg);
        v.set_issuer(&[&self.cfg.issuer]);
        v.set_audience(&[&self.cfg.audience]);
        v.set_required_spec_claims(&["exp", "iss", "aud"]);
        // `nbf` where a token has one, with the same leeway as `exp`: a token is good from
        // when its issuer says, not from when it was signed.
        v.validate_nbf = true;
        v.leeway = 30;
        let data = jsonwebtoken::decode::<Value>(token, &key, &v).map_err(|e| e.to_string())?;
        let claims = data.claims;
        let tenant = claims
            .get(&self.cfg.tenant_claim)
            .and_then(Value::as_str)
            .ok_or_else(|| format!("no `{}` claim", self.cfg.tenant_claim))?;
        let tenant = Tenant::parse(tenant).map_err(|e| format!("tenant claim: {e}"))?;
        let role = match claims.get(&self.cfg.role_claim).and_then(Value::as_str) {
            Some("operator") => Role::Operator,
            _ => Role::Tenant,
        };
        if crate::auth::reserved_tenant(&tenant, role) {
            return Err(format!(
                "the `{}` claim names the reserved tenant `default`",
                self.cfg.tenant_claim
            ));
        }
        Ok(TokenCaller {
            tenant,
            role,
            subject: printable(claims.get("sub").and_then(Value::as_str).unwrap_or("")),
        })
    }
}

/// A token's subject as a log may carry it: at most 128 characters, each one outside
/// printable ASCII (a line break, a control or bidirectional character), a backslash or a
/// quote escaped (`\n`, `\u{202e}`), so that no subject can start a line of its own or pass
/// for another field.
pub fn printable(subject: &str) -> String {
    subject
        .chars()
        .take(128)
        .flat_map(char::escape_default)
        .collect()
}

async fn load(src: &JwksSource, http: &reqwest::Client) -> Result<JwkSet, JwksError> {
    let (text, from) = match src {
        JwksSource::File(path) => (
            std::fs::read_to_string(path).map_err(|e| JwksError::Read {
                path: path.display().to_string(),
                error: e.to_string(),
            })?,
            path.display().to_string(),
        ),
        JwksSource::Url(url) => {
            let fetch = |e: reqwest::Error| JwksError::Fetch {
                url: url.clone(),
                error: e.to_string(),
            };
            let r = http
                .get(url)
                .send()
                .await
                .and_then(reqwest::Response::error_for_status)
                .map_err(fetch)?;
            (r.text().await.map_err(fetch)?, url.clone())
        }
    };
    serde_json::from_str(&text).map_err(|e| JwksError::Parse {
        from,
        error: e.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_subject_cannot_start_a_line_or_pass_for_another_field() {
        assert_eq!(printable("user-a"), "user-a");
        let forged = printable("x\n2026-01-01T00:00:00Z INFO audit: tenant=b \"\u{202e}");
        assert!(!forged.contains('\n') && forged.is_ascii(), "{forged}");
        assert!(
            forged.starts_with("x\\n") && forged.contains("\\u{202e}"),
            "{forged}"
        );
        assert_eq!(printable(&"é".repeat(200)).matches("\\u{e9}").count(), 128);
    }
}

//! What `serve` and `keys` print.

use super::Report;
use crate::output::Out;
use schemars::JsonSchema;
use serde::Serialize;
use tilegate_core::time::with_utc;
use tilegate_service::keys::{KeyInfo, NewKey, Role};

/// What `serve` prints once it listens.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct Listening {
    /// The address bound (the port chosen, for `:0`).
    pub listen: String,
    pub url: String,
    pub openapi: String,
    /// Whether OIDC tokens are accepted beside API keys.
    pub tokens: bool,
}

impl Report for Listening {
    fn text(&self, _out: &Out) -> String {
        format!(
            "tilegate serve: listening on {} (OpenAPI: {}; credentials: API keys{})",
            self.url,
            self.openapi,
            if self.tokens { " and OIDC tokens" } else { "" }
        )
    }
}

/// A key just made (`keys create`, `keys rotate`): printed once.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct KeyMade {
    #[serde(flatten)]
    pub key: NewKey,
    /// The key replaced and revoked (`keys rotate`).
    pub revoked: Option<String>,
}

impl Report for KeyMade {
    fn text(&self, _out: &Out) -> String {
        let r = &self.key.record;
        let mut s = format!(
            "{}\n\nkey {} for tenant {} ({}){}: shown once, only its hash is kept.\nUse it as `Authorization: Bearer {}`.",
            self.key.key,
            r.key_id,
            r.tenant,
            role_name(r.role),
            if r.label.is_empty() {
                String::new()
            } else {
                format!(", \"{}\"", r.label)
            },
            self.key.key,
        );
        if let Some(old) = &self.revoked {
            s.push_str(&format!("\nkey {old} is revoked."));
        }
        s
    }
}

fn role_name(r: Role) -> &'static str {
    match r {
        Role::Tenant => "tenant",
        Role::Operator => "operator",
    }
}

/// `keys list`.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct KeyList {
    pub keys: Vec<KeyInfo>,
}

impl Report for KeyList {
    fn text(&self, _out: &Out) -> String {
        if self.keys.is_empty() {
            return "no API keys (`tilegate keys create --tenant NAME` makes one)".to_owned();
        }
        let mut s = format!(
            "{:<16}  {:<20}  {:<8}  {:<24}  {:<24}  label",
            "key", "tenant", "role", "created", "revoked"
        );
        for k in &self.keys {
            let r = &k.record;
            let created = with_utc(serde_json::json!({ "t": r.created_at }));
            let revoked = k
                .revoked_at
                .map(|t| with_utc(serde_json::json!({ "t": t }))["t_utc"].clone());
            s.push_str(&format!(
                "\n{:<16}  {:<20}  {:<8}  {:<24}  {:<24}  {}",
                r.key_id,
                r.tenant,
                role_name(r.role),
                created["t_utc"].as_str().unwrap_or(""),
                revoked.as_ref().and_then(|v| v.as_str()).unwrap_or("-"),
                r.label
            ));
        }
        s
    }
}

/// `keys revoke`.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct KeyRevoked {
    pub key_id: String,
    pub tenant: String,
    pub revoked_at: i64,
}

impl Report for KeyRevoked {
    fn text(&self, _out: &Out) -> String {
        format!(
            "key {} of tenant {} is revoked: every request with it is refused from now on",
            self.key_id, self.tenant
        )
    }
}

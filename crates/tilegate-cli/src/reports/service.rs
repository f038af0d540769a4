//! What `serve` and `keys` print.

use super::Report;
use crate::output::Out;
use schemars::JsonSchema;
use serde::Serialize;
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
    /// `serve --demo`: the demo tenant's key and where to start.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub demo: Option<ServeDemo>,
}

/// What `serve --demo` made: a key for the tenant `demo`, and the sample scene it may submit.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct ServeDemo {
    pub tenant: String,
    /// The demo tenant's new API key: shown once, only its hash is kept.
    pub key: String,
    /// The page, with the key in its fragment (which no request carries).
    pub page: String,
    /// The sample scene's URL, served by this server: what the page offers to submit.
    pub source: String,
}

impl Report for Listening {
    fn text(&self, _out: &Out) -> String {
        let mut s = format!(
            "tilegate serve: listening on {} (OpenAPI: {}; credentials: API keys{})",
            self.url,
            self.openapi,
            if self.tokens { " and OIDC tokens" } else { "" }
        );
        if let Some(d) = &self.demo {
            s.push_str(&format!(
                "\ndemo: workers and the assembler run in this process; tenant `{}` may submit \
                 the sample scene {}\nkey (shown once): {}\nopen {}\n  then \"Show my jobs\", \
                 then \"Submit\" (the sample scene is filled in)",
                d.tenant, d.source, d.key, d.page
            ));
        }
        s
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
        let rows: Vec<[String; 6]> = self
            .keys
            .iter()
            .map(|k| {
                let r = &k.record;
                [
                    r.key_id.clone(),
                    r.tenant.to_string(),
                    role_name(r.role).to_owned(),
                    tilegate_core::time::rfc3339(r.created_at),
                    k.revoked_at
                        .map_or_else(|| "-".to_owned(), tilegate_core::time::rfc3339),
                    r.label.clone(),
                ]
            })
            .collect();
        let head = ["key", "tenant", "role", "created", "revoked", "label"];
        // Every column as wide as its widest cell (the label, last, is not padded).
        let width = |i: usize| {
            rows.iter()
                .map(|r| r[i].chars().count())
                .chain([head[i].len()])
                .max()
                .unwrap_or(0)
        };
        let widths: Vec<usize> = (0..5).map(width).collect();
        let line = |cells: [&str; 6]| {
            let mut l = String::new();
            for (i, c) in cells.iter().enumerate().take(5) {
                l.push_str(&format!("{c:<w$}  ", w = widths[i]));
            }
            l.push_str(cells[5]);
            l.trim_end().to_owned()
        };
        let mut s = line(head);
        for r in &rows {
            s.push('\n');
            s.push_str(&line([&r[0], &r[1], &r[2], &r[3], &r[4], &r[5]]));
        }
        let revoked = self.keys.iter().filter(|k| k.revoked_at.is_some()).count();
        s.push_str(&format!(
            "\n{} keys, {revoked} revoked (a revoked key is refused on every request)",
            self.keys.len()
        ));
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

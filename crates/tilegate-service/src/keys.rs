//! API keys: made per tenant by an operator (`tilegate keys create`), shown once, kept only as
//! a SHA-256 hash in the object store the workers already use, revocable and rotatable.
//!
//! A key is `tgk_{id}_{secret}`: the ID (16 hex digits) names its record,
//! `_service/keys/{id}/key.json`, written once (create-if-absent); the secret (256 random bits,
//! 64 hex digits) is never stored. A revocation is a second object, `_service/keys/{id}/revoked.json`,
//! also written once: a key, once revoked, stays revoked, and no write can bring it back. The
//! secret's hash is compared in constant time. A key's record never changes, so a server keeps
//! it once read; whether it is revoked is read on every request.

use aws_lc_rs::{constant_time, digest, rand};
use bytes::Bytes;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tilegate_core::StoreError::NotFound;
use tilegate_core::object::ObjectStore;
use tilegate_core::object::{GetOutcome, ObjectStoreExt as _, PutOutcome};
use tilegate_core::{ObjectKey, StoreError, Tenant, UnixMillis};

/// The first segment of the keys' objects: refused as a job prefix (see [`crate::api`]).
pub const KEYS_SEGMENT: &str = "_service";
/// What every API key starts with (a bearer token that is not this is a JWT).
pub const KEY_PREFIX: &str = "tgk_";

/// What a caller may see.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// Its own tenant's jobs.
    Tenant,
    /// Every tenant's jobs.
    Operator,
}

/// A key's stored record: never the secret.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct KeyRecord {
    pub key_id: String,
    pub tenant: Tenant,
    pub role: Role,
    /// SHA-256 of the secret, hex.
    pub secret_sha256: String,
    pub created_at: UnixMillis,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub label: String,
    /// The key this one replaced (`keys rotate`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replaces: Option<String>,
}

/// A key's revocation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct Revocation {
    revoked_at: UnixMillis,
}

/// A key as `keys list` shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub struct KeyInfo {
    #[serde(flatten)]
    pub record: KeyRecord,
    pub revoked_at: Option<UnixMillis>,
}

/// A key just made: the only time its secret is shown.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct NewKey {
    /// The bearer token: `Authorization: Bearer {key}`. Shown once; only its hash is kept.
    pub key: String,
    #[serde(flatten)]
    pub record: KeyRecord,
}

/// Why a key store call failed.
#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    #[error("no API key {0}")]
    Unknown(String),
    #[error("API key {0} is already revoked")]
    AlreadyRevoked(String),
    #[error("`{0}` is not an API key ID (16 hexadecimal digits)")]
    BadId(String),
    #[error("API key record {key} is unreadable: {error}")]
    Corrupt { key: String, error: String },
    #[error(
        "the tenant `default` is the operator's own (the jobs planned without --tenant): a tenant \
         key may not name it (make an --operator key, or name another tenant)"
    )]
    ReservedTenant,
    #[error("too many unknown API keys looked up; ask again in {retry_after_s} s")]
    Throttled { retry_after_s: u64 },
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// The keys of one deployment, in its object store.
#[derive(Debug, Clone)]
pub struct KeyStore {
    objects: Arc<dyn ObjectStore>,
    records: Arc<Mutex<HashMap<String, KeyRecord>>>,
    /// What a presented key that is not (yet) known may cost before it proves anything.
    unknown: Arc<Mutex<Unknown>>,
    /// Keys found revoked: a revocation is never undone, so it is read once.
    revoked: Arc<Mutex<HashMap<String, UnixMillis>>>,
}

/// How long a key ID found to have no record is answered from memory.
pub const UNKNOWN_FOR: Duration = Duration::from_secs(60);
/// Unknown key IDs remembered at most (the oldest are forgotten first).
pub const UNKNOWN_KEPT: usize = 4096;
/// Record reads for key IDs this server has not seen, a second (bursts of twice that): a
/// guessed `tgk_…` costs an object-store read only within this budget, shared by every
/// unauthenticated caller. Known keys' records are kept, so their callers never spend it.
pub const LOOKUPS_PER_S: f64 = 10.0;

/// The negative cache and the lookup budget.
#[derive(Debug)]
struct Unknown {
    /// Key IDs with no record, and when that was read; oldest first in `order`.
    seen: HashMap<String, Instant>,
    order: std::collections::VecDeque<String>,
    tokens: f64,
    at: Instant,
}

impl Default for Unknown {
    fn default() -> Self {
        Self {
            seen: HashMap::new(),
            order: std::collections::VecDeque::new(),
            tokens: LOOKUPS_PER_S * 2.0,
            at: Instant::now(),
        }
    }
}

impl Unknown {
    /// Whether `id` was found to have no record within [`UNKNOWN_FOR`].
    fn known_absent(&self, id: &str) -> bool {
        self.seen.get(id).is_some_and(|t| t.elapsed() < UNKNOWN_FOR)
    }

    /// Spend one lookup, or say how long until one is left.
    fn spend(&mut self) -> Result<(), u64> {
        let now = Instant::now();
        let burst = LOOKUPS_PER_S * 2.0;
        self.tokens =
            (self.tokens + now.duration_since(self.at).as_secs_f64() * LOOKUPS_PER_S).min(burst);
        self.at = now;
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            return Ok(());
        }
        Err(((1.0 - self.tokens) / LOOKUPS_PER_S).ceil().max(1.0) as u64)
    }

    fn remember(&mut self, id: &str) {
        if self.seen.insert(id.to_owned(), Instant::now()).is_none() {
            self.order.push_back(id.to_owned());
        }
        while self.order.len() > UNKNOWN_KEPT {
            if let Some(old) = self.order.pop_front() {
                self.seen.remove(&old);
            }
        }
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn random_hex(n: usize) -> String {
    let mut buf = vec![0u8; n];
    rand::fill(&mut buf).expect("the system's random source works");
    hex(&buf)
}

fn sha256_hex(secret: &str) -> String {
    hex(digest::digest(&digest::SHA256, secret.as_bytes()).as_ref())
}

fn valid_id(id: &str) -> bool {
    id.len() == 16
        && id
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// The ID and secret of a presented key, if it has a key's shape.
pub fn split(token: &str) -> Option<(&str, &str)> {
    let rest = token.strip_prefix(KEY_PREFIX)?;
    let (id, secret) = rest.split_once('_')?;
    (valid_id(id) && secret.len() == 64 && secret.bytes().all(|b| b.is_ascii_hexdigit()))
        .then_some((id, secret))
}

impl KeyStore {
    pub fn new(objects: Arc<dyn ObjectStore>) -> Self {
        Self {
            objects,
            records: Arc::default(),
            unknown: Arc::default(),
            revoked: Arc::default(),
        }
    }

    fn record_key(id: &str) -> ObjectKey {
        ObjectKey::parse(&format!("{KEYS_SEGMENT}/keys/{id}/key.json")).expect("a checked ID")
    }

    fn revoked_key(id: &str) -> ObjectKey {
        ObjectKey::parse(&format!("{KEYS_SEGMENT}/keys/{id}/revoked.json")).expect("a checked ID")
    }

    /// Make a key for `tenant`; its secret is in the returned token only.
    pub async fn create(
        &self,
        tenant: Tenant,
        role: Role,
        label: String,
        replaces: Option<String>,
        now: UnixMillis,
    ) -> Result<NewKey, KeyError> {
        if crate::auth::reserved_tenant(&tenant, role) {
            return Err(KeyError::ReservedTenant);
        }
        loop {
            let id = random_hex(8);
            let secret = random_hex(32);
            let record = KeyRecord {
                key_id: id.clone(),
                tenant: tenant.clone(),
                role,
                secret_sha256: sha256_hex(&secret),
                created_at: now,
                label: label.clone(),
                replaces: replaces.clone(),
            };
            let body = Bytes::from(serde_json::to_vec_pretty(&record).expect("serialises"));
            match self
                .objects
                .put_create(&Self::record_key(&id), body)
                .await?
            {
                PutOutcome::Written(_) => {
                    return Ok(NewKey {
                        key: format!("{KEY_PREFIX}{id}_{secret}"),
                        record,
                    });
                }
                // 64 random bits met an existing ID: draw again.
                PutOutcome::AlreadyPresent | PutOutcome::Superseded => continue,
            }
        }
    }

    async fn read_json<T: serde::de::DeserializeOwned>(
        &self,
        key: &ObjectKey,
    ) -> Result<Option<T>, KeyError> {
        match self.objects.get_opts(key, Default::default()).await {
            Ok(GetOutcome::Found(r)) => {
                serde_json::from_slice(&r.bytes)
                    .map(Some)
                    .map_err(|e| KeyError::Corrupt {
                        key: key.as_str().to_owned(),
                        error: e.to_string(),
                    })
            }
            Ok(_) | Err(NotFound { .. }) => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    /// The record of key `id` (kept once read: records never change).
    pub async fn record(&self, id: &str) -> Result<Option<KeyRecord>, KeyError> {
        if !valid_id(id) {
            return Err(KeyError::BadId(crate::error::shown(id)));
        }
        if let Some(r) = self.records.lock().expect("not poisoned").get(id) {
            return Ok(Some(r.clone()));
        }
        let r: Option<KeyRecord> = self.read_json(&Self::record_key(id)).await?;
        if let Some(r) = &r {
            self.records
                .lock()
                .expect("not poisoned")
                .insert(id.to_owned(), r.clone());
        }
        Ok(r)
    }

    /// When key `id` was revoked, if it was (kept once read: a revocation is for good).
    pub async fn revoked_at(&self, id: &str) -> Result<Option<UnixMillis>, KeyError> {
        if let Some(at) = self.revoked.lock().expect("not poisoned").get(id) {
            return Ok(Some(*at));
        }
        let at = self
            .read_json::<Revocation>(&Self::revoked_key(id))
            .await?
            .map(|r| r.revoked_at);
        if let Some(at) = at {
            self.revoked
                .lock()
                .expect("not poisoned")
                .insert(id.to_owned(), at);
        }
        Ok(at)
    }

    /// The record of a presented key `id`: from memory where it is known (or known to be
    /// absent, for [`UNKNOWN_FOR`]); otherwise read, within the budget of [`LOOKUPS_PER_S`].
    async fn presented_record(&self, id: &str) -> Result<Option<KeyRecord>, KeyError> {
        if let Some(r) = self.records.lock().expect("not poisoned").get(id) {
            return Ok(Some(r.clone()));
        }
        {
            let mut unknown = self.unknown.lock().expect("not poisoned");
            if unknown.known_absent(id) {
                return Ok(None);
            }
            unknown
                .spend()
                .map_err(|retry_after_s| KeyError::Throttled { retry_after_s })?;
        }
        let r = self.record(id).await?;
        if r.is_none() {
            self.unknown.lock().expect("not poisoned").remember(id);
        }
        Ok(r)
    }

    /// The record of the key `token` presents, if it is a live key whose secret matches.
    pub async fn verify(&self, token: &str) -> Result<Option<KeyRecord>, KeyError> {
        let Some((id, secret)) = split(token) else {
            return Ok(None);
        };
        let Some(record) = self.presented_record(id).await? else {
            return Ok(None);
        };
        let presented = sha256_hex(secret);
        if constant_time::verify_slices_are_equal(
            presented.as_bytes(),
            record.secret_sha256.as_bytes(),
        )
        .is_err()
        {
            return Ok(None);
        }
        if self.revoked_at(id).await?.is_some() {
            return Ok(None);
        }
        Ok(Some(record))
    }

    /// Revoke key `id`, for good.
    pub async fn revoke(&self, id: &str, now: UnixMillis) -> Result<KeyRecord, KeyError> {
        let record = self
            .record(id)
            .await?
            .ok_or_else(|| KeyError::Unknown(id.to_owned()))?;
        let body =
            Bytes::from(serde_json::to_vec(&Revocation { revoked_at: now }).expect("serialises"));
        match self
            .objects
            .put_create(&Self::revoked_key(id), body)
            .await?
        {
            PutOutcome::Written(_) => Ok(record),
            PutOutcome::AlreadyPresent | PutOutcome::Superseded => {
                Err(KeyError::AlreadyRevoked(id.to_owned()))
            }
        }
    }

    /// A new key for the same tenant, role and label as `id`, which is revoked once the new
    /// key is stored.
    pub async fn rotate(&self, id: &str, now: UnixMillis) -> Result<NewKey, KeyError> {
        let old = self
            .record(id)
            .await?
            .ok_or_else(|| KeyError::Unknown(id.to_owned()))?;
        if self.revoked_at(id).await?.is_some() {
            return Err(KeyError::AlreadyRevoked(id.to_owned()));
        }
        let new = self
            .create(old.tenant, old.role, old.label, Some(id.to_owned()), now)
            .await?;
        self.revoke(id, now).await?;
        Ok(new)
    }

    /// Every key, oldest first.
    pub async fn list(&self) -> Result<Vec<KeyInfo>, KeyError> {
        let mut out = Vec::new();
        for meta in self.objects.list(&format!("{KEYS_SEGMENT}/keys/")).await? {
            let Some(id) = meta
                .key
                .strip_prefix(&format!("{KEYS_SEGMENT}/keys/"))
                .and_then(|rest| rest.strip_suffix("/key.json"))
            else {
                continue;
            };
            if let Some(record) = self.record(id).await? {
                let revoked_at = self.revoked_at(id).await?;
                out.push(KeyInfo { record, revoked_at });
            }
        }
        out.sort_by(|a, b| {
            (a.record.created_at, &a.record.key_id).cmp(&(b.record.created_at, &b.record.key_id))
        });
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn store() -> (KeyStore, Arc<dyn ObjectStore>) {
        let objects: Arc<dyn ObjectStore> = Arc::new(tilegate_memory::MemoryObjectStore::new(
            Arc::new(tilegate_memory::SystemClock),
        ));
        (KeyStore::new(Arc::clone(&objects)), objects)
    }

    fn rt() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
    }

    /// A tenant key may not name the operator's tenant; an operator key may.
    #[test]
    fn the_default_tenant_is_reserved_for_the_operator() {
        let (keys, _) = store();
        let rt = rt();
        let default = Tenant::parse(Tenant::DEFAULT).unwrap();
        let e = rt
            .block_on(keys.create(default.clone(), Role::Tenant, String::new(), None, 0))
            .unwrap_err();
        assert!(matches!(e, KeyError::ReservedTenant), "{e}");
        rt.block_on(keys.create(default, Role::Operator, String::new(), None, 0))
            .unwrap();
    }

    /// A guessed key's ID is looked up once, then answered from memory; guesses of new IDs
    /// past the budget are refused without a lookup.
    #[test]
    fn unknown_keys_cost_one_lookup_each_within_a_budget() {
        let (keys, objects) = store();
        let rt = rt();
        let guess = |n: u32| format!("tgk_{n:016x}_{}", "a".repeat(64));
        assert_eq!(rt.block_on(keys.verify(&guess(1))).unwrap(), None);
        // The ID now has a record (it cannot, but if it did): the answer is the remembered one.
        let record = KeyRecord {
            key_id: format!("{:016x}", 1),
            tenant: Tenant::parse("a").unwrap(),
            role: Role::Tenant,
            secret_sha256: sha256_hex(&"a".repeat(64)),
            created_at: 0,
            label: String::new(),
            replaces: None,
        };
        rt.block_on(objects.put_create(
            &KeyStore::record_key(&record.key_id),
            Bytes::from(serde_json::to_vec(&record).unwrap()),
        ))
        .unwrap();
        for _ in 0..100 {
            assert_eq!(rt.block_on(keys.verify(&guess(1))).unwrap(), None);
        }
        // New guesses: the burst is looked up, then the rest are refused with a wait.
        let burst = (LOOKUPS_PER_S * 2.0) as u32;
        let mut throttled = 0;
        for n in 2..(2 + burst + 20) {
            match rt.block_on(keys.verify(&guess(n))) {
                Ok(None) => {}
                Err(KeyError::Throttled { retry_after_s }) => {
                    assert!(retry_after_s >= 1);
                    throttled += 1;
                }
                other => panic!("{other:?}"),
            }
        }
        assert!(throttled >= 15, "{throttled}");
    }

    #[test]
    fn a_key_has_one_shape() {
        let id = "0123456789abcdef";
        let secret = "a".repeat(64);
        assert_eq!(
            split(&format!("tgk_{id}_{secret}")),
            Some((id, secret.as_str()))
        );
        for bad in [
            format!("tgk_{id}_{}", "a".repeat(63)),
            format!("tgk_{}_{secret}", "0123456789ABCDEF"),
            format!("tgk_../x_{secret}"),
            format!("tgx_{id}_{secret}"),
            "tgk_".to_owned(),
        ] {
            assert_eq!(split(&bad), None, "{bad}");
        }
    }
}

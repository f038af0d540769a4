//! Who is asking: every `/v1` request proves a tenant with `Authorization: Bearer` and an API
//! key (`tgk_…`) or an OIDC token, then spends one of its tenant's requests. Nothing a caller
//! types names its tenant.

use crate::Service;
use crate::error::ApiError;
use crate::keys::{KEY_PREFIX, Role};
use aide::OperationInput;
use aide::generate::GenContext;
use aide::openapi::Operation;
use axum::extract::FromRequestParts;
use axum::http::header::AUTHORIZATION;
use axum::http::request::Parts;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Instant;
use tilegate_core::table::JobRecord;
use tilegate_core::{Reason, Tenant};

/// The name of the security scheme in the OpenAPI document.
pub const SCHEME: &str = "bearer";

/// An authenticated caller.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caller {
    pub tenant: Tenant,
    pub role: Role,
    /// What proved it, for the audit log: `key:{id}` or `token:{sub}` (the subject escaped to
    /// printable ASCII); never the secret.
    pub credential: String,
    /// The bearer credential itself, kept in memory only, so that an open event stream can
    /// check it again ([`still_proves`]): a revoked key or an expired token ends the stream.
    pub(crate) bearer: Bearer,
}

/// A bearer credential: never shown, in `Debug` either.
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct Bearer(String);

impl std::fmt::Debug for Bearer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Bearer(…)")
    }
}

/// The only tenant a credential may not name: the operator's own jobs (planned from the
/// command line, without `--tenant`) are the `default` tenant's, so a tenant key or token for
/// it would see them. An operator's credential sees every tenant anyway.
pub fn reserved_tenant(tenant: &Tenant, role: Role) -> bool {
    role == Role::Tenant && tenant.is_default()
}

impl Caller {
    /// Whether the caller may see `job`: its own tenant's, or any for an operator.
    pub fn sees(&self, job: &JobRecord) -> bool {
        self.role == Role::Operator || job.tenant == self.tenant
    }
}

/// What a request without a usable credential is told. Worded so that the redaction every
/// answer passes through finds no credential in it (`Authorization: Bearer …` read as one).
pub(crate) const NEEDS_BEARER: &str = "this request needs an Authorization header with the Bearer \
     scheme and an API key (`tilegate keys create`) or an OIDC token";

/// The bearer token of a request, if it has one.
fn bearer(parts: &Parts) -> Result<&str, ApiError> {
    let value = parts
        .headers
        .get(AUTHORIZATION)
        .ok_or_else(|| ApiError::unauthenticated(NEEDS_BEARER))?;
    let value = value
        .to_str()
        .map_err(|_| ApiError::unauthenticated("the Authorization header is not text"))?;
    let (scheme, token) = value
        .split_once(' ')
        .ok_or_else(|| ApiError::unauthenticated(NEEDS_BEARER))?;
    if !scheme.eq_ignore_ascii_case("bearer") || token.trim().is_empty() {
        return Err(ApiError::unauthenticated(NEEDS_BEARER));
    }
    Ok(token.trim())
}

/// Prove the caller of `parts`, then charge its tenant one request.
pub async fn authenticate(s: &Service, parts: &Parts) -> Result<Caller, ApiError> {
    let token = bearer(parts)?;
    let caller = prove(s, token).await?;
    s.rates
        .charge(caller.tenant.as_str(), s.limits.rate_per_s)?;
    Ok(caller)
}

/// Whether `caller`'s credential still proves the same caller — for an open event stream,
/// which asks again as it goes: `Ok(false)` for a key revoked or a token expired since.
/// An error is a store that did not answer (the stream asks again next time).
pub async fn still_proves(s: &Service, caller: &Caller) -> Result<bool, ApiError> {
    match prove(s, &caller.bearer.0).await {
        Ok(again) => Ok(again.tenant == caller.tenant && again.role == caller.role),
        Err(e) if e.reason == Reason::Unauthenticated => Ok(false),
        Err(e) => Err(e),
    }
}

/// The caller `token` proves (charging nothing).
async fn prove(s: &Service, token: &str) -> Result<Caller, ApiError> {
    let caller = if token.starts_with(KEY_PREFIX) {
        let record = s.keys.verify(token).await.map_err(|e| match e {
            crate::keys::KeyError::Store(e) => ApiError::from(e),
            crate::keys::KeyError::Throttled { retry_after_s } => ApiError::too_many(
                Reason::RateLimited,
                "this server is looking up as many unknown API keys as it allows; ask again",
                retry_after_s,
            ),
            e => {
                tracing::warn!(error = %e, "an API key record is unusable");
                ApiError::unauthenticated("the API key is not valid")
            }
        })?;
        let record =
            record.ok_or_else(|| ApiError::unauthenticated("the API key is unknown or revoked"))?;
        if reserved_tenant(&record.tenant, record.role) {
            tracing::warn!(key = %record.key_id, "a tenant key for the reserved tenant `default` was refused");
            return Err(ApiError::unauthenticated("the API key is not valid"));
        }
        Caller {
            tenant: record.tenant,
            role: record.role,
            credential: format!("key:{}", record.key_id),
            bearer: Bearer(token.to_owned()),
        }
    } else {
        let Some(jwt) = &s.jwt else {
            return Err(ApiError::unauthenticated(
                "this service takes API keys only (no token issuer is configured)",
            ));
        };
        let t = jwt.verify(token).await.map_err(|why| {
            tracing::info!(why, "a bearer token was refused");
            ApiError::unauthenticated("the token is not valid")
        })?;
        Caller {
            tenant: t.tenant,
            role: t.role,
            credential: format!("token:{}", t.subject),
            bearer: Bearer(token.to_owned()),
        }
    };
    Ok(caller)
}

impl FromRequestParts<Arc<Service>> for Caller {
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut Parts,
        state: &Arc<Service>,
    ) -> Result<Self, Self::Rejection> {
        authenticate(state, parts).await
    }
}

impl OperationInput for Caller {
    fn operation_input(_ctx: &mut GenContext, operation: &mut Operation) {
        operation
            .security
            .push([(SCHEME.to_owned(), Vec::new())].into_iter().collect());
    }
}

/// Event streams open per tenant (per process), each held by a [`StreamSlot`] for as long as
/// its stream lives.
#[derive(Debug, Default)]
pub struct Streams {
    open: Arc<Mutex<HashMap<String, usize>>>,
}

/// One open stream of a tenant; dropping it (the stream ended, or its client went away)
/// frees the place.
#[derive(Debug)]
pub struct StreamSlot {
    open: Arc<Mutex<HashMap<String, usize>>>,
    tenant: String,
}

impl Streams {
    /// A place for one more of `tenant`'s streams, if it has fewer than `max` open.
    pub fn open(&self, tenant: &str, max: usize) -> Result<StreamSlot, ApiError> {
        let mut open = self.open.lock().expect("not poisoned");
        let n = open.entry(tenant.to_owned()).or_insert(0);
        if *n >= max {
            return Err(ApiError::too_many(
                Reason::TooManyStreams,
                format!(
                    "tenant {tenant} has {n} event streams open, as many as this service allows"
                ),
                30,
            ));
        }
        *n += 1;
        Ok(StreamSlot {
            open: Arc::clone(&self.open),
            tenant: tenant.to_owned(),
        })
    }

    /// `tenant`'s streams open now.
    pub fn count(&self, tenant: &str) -> usize {
        self.open
            .lock()
            .expect("not poisoned")
            .get(tenant)
            .copied()
            .unwrap_or(0)
    }
}

impl Drop for StreamSlot {
    fn drop(&mut self) {
        let mut open = self.open.lock().expect("not poisoned");
        if let Some(n) = open.get_mut(&self.tenant) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                open.remove(&self.tenant);
            }
        }
    }
}

/// A token bucket per tenant: `rate` requests a second, bursts of up to two seconds' worth.
/// Per process: N servers behind a load balancer admit up to N times the rate.
#[derive(Debug, Default)]
pub struct Rates {
    buckets: Mutex<HashMap<String, (f64, Instant)>>,
}

impl Rates {
    pub fn charge(&self, tenant: &str, rate: f64) -> Result<(), ApiError> {
        if rate <= 0.0 {
            return Ok(());
        }
        let burst = (rate * 2.0).max(1.0);
        let now = Instant::now();
        let mut map = self.buckets.lock().expect("not poisoned");
        let (tokens, at) = map.entry(tenant.to_owned()).or_insert((burst, now));
        *tokens = (*tokens + now.duration_since(*at).as_secs_f64() * rate).min(burst);
        *at = now;
        if *tokens >= 1.0 {
            *tokens -= 1.0;
            return Ok(());
        }
        let wait = ((1.0 - *tokens) / rate).ceil() as u64;
        Err(ApiError::too_many(
            Reason::RateLimited,
            format!("tenant {tenant} is over its rate of {rate} requests a second"),
            wait,
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The 401's words come through the redaction every answer passes intact (they read
    /// `Bearer REDACTED` when they showed `Authorization: Bearer …`).
    #[test]
    fn the_unauthenticated_message_survives_redaction() {
        assert_eq!(tilegate_core::redact::redact(NEEDS_BEARER), NEEDS_BEARER);
    }

    #[test]
    fn a_tenant_over_its_rate_is_told_when_to_come_back() {
        let r = Rates::default();
        for _ in 0..4 {
            r.charge("a", 2.0).unwrap();
        }
        let e = r.charge("a", 2.0).unwrap_err();
        assert_eq!(e.status.as_u16(), 429);
        assert_eq!(e.retry_after_s, Some(1));
        // Another tenant's bucket is its own.
        r.charge("b", 2.0).unwrap();
    }

    #[test]
    fn a_tenants_streams_are_capped_and_a_closed_one_frees_its_place() {
        let s = Streams::default();
        let first = s.open("a", 2).unwrap();
        let _second = s.open("a", 2).unwrap();
        let e = s.open("a", 2).unwrap_err();
        assert_eq!(e.status.as_u16(), 429);
        assert_eq!(e.reason, Reason::TooManyStreams);
        assert!(e.retry_after_s.is_some());
        // Another tenant's count is its own.
        let _b = s.open("b", 2).unwrap();
        drop(first);
        assert_eq!(s.count("a"), 1);
        s.open("a", 2).unwrap();
    }
}

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
    /// What proved it, for the audit log: `key:{id}` or `token:{sub}`; never the secret.
    pub credential: String,
}

impl Caller {
    /// Whether the caller may see `job`: its own tenant's, or any for an operator.
    pub fn sees(&self, job: &JobRecord) -> bool {
        self.role == Role::Operator || job.tenant == self.tenant
    }
}

/// The bearer token of a request, if it has one.
fn bearer(parts: &Parts) -> Result<&str, ApiError> {
    let value = parts
        .headers
        .get(AUTHORIZATION)
        .ok_or_else(|| ApiError::unauthenticated("this request needs `Authorization: Bearer …`"))?;
    let value = value
        .to_str()
        .map_err(|_| ApiError::unauthenticated("the Authorization header is not text"))?;
    let (scheme, token) = value
        .split_once(' ')
        .ok_or_else(|| ApiError::unauthenticated("the Authorization header is not `Bearer …`"))?;
    if !scheme.eq_ignore_ascii_case("bearer") || token.trim().is_empty() {
        return Err(ApiError::unauthenticated(
            "the Authorization header is not `Bearer …`",
        ));
    }
    Ok(token.trim())
}

/// Prove the caller of `parts`, then charge its tenant one request.
pub async fn authenticate(s: &Service, parts: &Parts) -> Result<Caller, ApiError> {
    let token = bearer(parts)?;
    let caller = if token.starts_with(KEY_PREFIX) {
        let record = s.keys.verify(token).await.map_err(|e| match e {
            crate::keys::KeyError::Store(e) => ApiError::from(e),
            e => {
                tracing::warn!(error = %e, "an API key record is unusable");
                ApiError::unauthenticated("the API key is not valid")
            }
        })?;
        let record =
            record.ok_or_else(|| ApiError::unauthenticated("the API key is unknown or revoked"))?;
        Caller {
            tenant: record.tenant,
            role: record.role,
            credential: format!("key:{}", record.key_id),
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
        }
    };
    s.rates
        .charge(caller.tenant.as_str(), s.limits.rate_per_s)?;
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
}

//! Job IDs: the first 128 bits of BLAKE3 over a length-prefixed encoding of (canonical source
//! URI, source ETag, recipe fingerprint, output location), as lowercase hex.
//!
//! 128 bits, not 64: at a billion scenes a 64-bit ID collides with a few-percent chance, and a
//! collision silently turns a new job into "already present". The output location (the tenant
//! and the key prefix the outputs go under) is part of the identity so that a second caller
//! asking for outputs somewhere else, or for another tenant, gets a job of its own instead of
//! being told the first caller's job is already done.

use crate::keys::{Prefix, Tenant};
use crate::recipe::Recipe;
use crate::source::SourceInfo;
use serde::{Deserialize, Serialize};
use std::fmt;

/// The canonical output location of a job of `tenant` whose outputs go under `prefix`: the
/// string the job ID covers. Tagged and `\n`-separated (neither may appear in a segment), so a
/// tenant cannot alias a prefix.
pub fn output_location(prefix: &Prefix, tenant: &Tenant) -> String {
    format!("tenant={tenant}\nprefix={prefix}")
}

/// Domain separation for the job-ID hash, so no other BLAKE3 use in tilegate can collide with it.
/// v2 added the output location, v3 the tenant.
const JOB_ID_CONTEXT: &[u8] = b"tilegate job id v3";

/// Whether `s` is 128 bits as 32 lowercase hex characters (job and attempt IDs).
pub(crate) fn is_hex128(s: &str) -> bool {
    s.len() == 32
        && s.bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// A job's identity: 32 lowercase hex characters.
#[derive(
    Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(try_from = "String", into = "String")]
pub struct JobId(String);

/// A string that is not a job ID.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("parse job id `{0}`: expected 32 lowercase hex characters")]
pub struct JobIdError(pub String);

impl JobId {
    /// Derive the ID of a job from its source, recipe and output location (see
    /// [`JobId::of`] for the canonical inputs).
    pub fn derive(
        source_uri: &str,
        source_etag: &str,
        recipe_fingerprint: &str,
        output_location: &str,
    ) -> Self {
        let mut h = blake3::Hasher::new();
        for part in [
            JOB_ID_CONTEXT,
            source_uri.as_bytes(),
            source_etag.as_bytes(),
            recipe_fingerprint.as_bytes(),
            output_location.as_bytes(),
        ] {
            h.update(&(part.len() as u64).to_le_bytes());
            h.update(part);
        }
        let hex = h.finalize().to_hex();
        Self(hex[..32].to_owned())
    }

    /// The ID of the job of `tenant` that turns `source` into outputs under `prefix` with
    /// `recipe`: the one place that says which fields a job's identity covers.
    pub fn of(source: &SourceInfo, recipe: &Recipe, prefix: &Prefix, tenant: &Tenant) -> Self {
        Self::derive(
            &source.uri,
            source.etag.as_str(),
            &recipe.fingerprint(),
            &output_location(prefix, tenant),
        )
    }

    /// Parse a job ID given by a person or a message.
    pub fn parse(s: &str) -> Result<Self, JobIdError> {
        if is_hex128(s) {
            Ok(Self(s.to_owned()))
        } else {
            Err(JobIdError(s.chars().take(80).collect()))
        }
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl TryFrom<String> for JobId {
    type Error = JobIdError;
    fn try_from(s: String) -> Result<Self, Self::Error> {
        Self::parse(&s)
    }
}

impl From<JobId> for String {
    fn from(id: JobId) -> String {
        id.0
    }
}

impl fmt::Display for JobId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn is_128_bits_of_hex() {
        let id = JobId::derive("file:///a.tif", "\"e\"", "copy", "prefix=tilegate");
        assert_eq!(id.as_str().len(), 32);
        assert_eq!(JobId::parse(id.as_str()).unwrap(), id);
        assert!(JobId::parse("ABC").is_err());
        assert!(JobId::parse(&"G".repeat(32)).is_err());
    }

    #[test]
    fn length_prefix_separates_fields() {
        // Moving a byte from one field to the next must change the ID.
        assert_ne!(
            JobId::derive("ab", "c", "d", "p"),
            JobId::derive("a", "bc", "d", "p")
        );
        assert_ne!(
            JobId::derive("a", "b", "cd", "p"),
            JobId::derive("a", "b", "c", "dp")
        );
    }

    #[test]
    fn output_location_is_part_of_the_identity() {
        let source = SourceInfo {
            uri: "file:///data/scene.tif".into(),
            etag: crate::ETag::new("\"abc\""),
            size: 10,
            stat: None,
            assets: Vec::new(),
            signed: false,
        };
        let recipe = Recipe::copy_all();
        let t = Tenant::default();
        let of = |p: &str, t: &Tenant| JobId::of(&source, &recipe, &Prefix::parse(p).unwrap(), t);
        assert_ne!(
            of("out-a", &t),
            of("out-b", &t),
            "two output prefixes must be two jobs"
        );
        assert_eq!(of("out-a", &t), of("out-a", &t));
        let acme = Tenant::parse("acme").unwrap();
        assert_ne!(
            of("out-a", &t),
            of("out-a", &acme),
            "two tenants must be two jobs"
        );
    }

    proptest! {
        #[test]
        fn changes_with_any_input(u in ".{0,40}", e in ".{0,40}", r in ".{0,40}", o in ".{0,40}", x in "[a-z]{1,4}") {
            let base = JobId::derive(&u, &e, &r, &o);
            prop_assert_eq!(&base, &JobId::derive(&u, &e, &r, &o));
            prop_assert_ne!(&base, &JobId::derive(&format!("{u}{x}"), &e, &r, &o));
            prop_assert_ne!(&base, &JobId::derive(&u, &format!("{e}{x}"), &r, &o));
            prop_assert_ne!(&base, &JobId::derive(&u, &e, &format!("{r}{x}"), &o));
            prop_assert_ne!(&base, &JobId::derive(&u, &e, &r, &format!("{o}{x}")));
        }
    }
}

//! Opaque ETags and HTTP condition lists (`If-Match` / `If-None-Match`).
//!
//! ETags are compared, never reconstructed. A condition list is `*` or a comma-separated list of
//! quoted tags, optionally weak (`W/"..."`), as in RFC 9110 §13.1.

use serde::{Deserialize, Serialize};
use std::fmt;

/// An opaque entity tag, kept exactly as the backend returned it (quotes included).
#[derive(
    Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(transparent)]
pub struct ETag(String);

impl ETag {
    /// Wrap a backend's tag. A tag without quotes is quoted so that all tags compare alike.
    pub fn new(raw: impl Into<String>) -> Self {
        let raw = raw.into();
        let t = raw.trim();
        if t.starts_with('"') || t.starts_with("W/\"") {
            Self(t.to_owned())
        } else {
            Self(format!("\"{t}\""))
        }
    }

    /// The tag as sent on the wire.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The tag without a weakness prefix, for weak comparison.
    fn opaque(&self) -> &str {
        self.0.strip_prefix("W/").unwrap_or(&self.0)
    }

    fn is_weak(&self) -> bool {
        self.0.starts_with("W/")
    }

    /// Strong comparison: both tags strong and identical.
    pub fn strong_eq(&self, other: &ETag) -> bool {
        !self.is_weak() && !other.is_weak() && self.0 == other.0
    }

    /// Weak comparison: opaque parts identical, weakness ignored.
    pub fn weak_eq(&self, other: &ETag) -> bool {
        self.opaque() == other.opaque()
    }
}

impl fmt::Display for ETag {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A parsed `If-Match` or `If-None-Match` value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConditionList {
    /// `*`: any current representation.
    Any,
    /// One or more entity tags.
    Tags(Vec<ETag>),
}

/// Why a condition list could not be parsed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("parse condition list `{input}`: {reason}")]
pub struct ConditionParseError {
    pub input: String,
    pub reason: &'static str,
}

impl ConditionList {
    /// Parse `*` or `"a", W/"b", "c"`.
    pub fn parse(input: &str) -> Result<Self, ConditionParseError> {
        let err = |reason| ConditionParseError {
            input: input.chars().take(200).collect(),
            reason,
        };
        let s = input.trim();
        if s.is_empty() {
            return Err(err("empty"));
        }
        if s == "*" {
            return Ok(Self::Any);
        }
        let mut tags = Vec::new();
        let mut rest = s;
        loop {
            rest = rest.trim_start();
            let weak = rest.starts_with("W/");
            let body = if weak { &rest[2..] } else { rest };
            let Some(body) = body.strip_prefix('"') else {
                return Err(err("expected a quoted entity tag"));
            };
            let Some(end) = body.find('"') else {
                return Err(err("unterminated entity tag"));
            };
            let opaque = &body[..end];
            if opaque.bytes().any(|b| b < 0x21 || b == 0x7f) {
                return Err(err("control or space character in entity tag"));
            }
            let tag = if weak {
                format!("W/\"{opaque}\"")
            } else {
                format!("\"{opaque}\"")
            };
            tags.push(ETag(tag));
            rest = body[end + 1..].trim_start();
            if rest.is_empty() {
                break;
            }
            let Some(after) = rest.strip_prefix(',') else {
                return Err(err("expected `,` between entity tags"));
            };
            rest = after;
        }
        Ok(Self::Tags(tags))
    }

    /// A list of exactly one tag.
    pub fn one(tag: ETag) -> Self {
        Self::Tags(vec![tag])
    }

    /// `If-Match` semantics: strong comparison; `*` matches any existing object.
    pub fn matches_strong(&self, current: &ETag) -> bool {
        match self {
            Self::Any => true,
            Self::Tags(tags) => tags.iter().any(|t| t.strong_eq(current)),
        }
    }

    /// `If-None-Match` semantics: weak comparison; `*` matches any existing object.
    pub fn matches_weak(&self, current: &ETag) -> bool {
        match self {
            Self::Any => true,
            Self::Tags(tags) => tags.iter().any(|t| t.weak_eq(current)),
        }
    }

    /// Render back to a header value.
    pub fn to_header(&self) -> String {
        match self {
            Self::Any => "*".to_owned(),
            Self::Tags(tags) => tags.iter().map(ETag::as_str).collect::<Vec<_>>().join(", "),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn parses_star_and_lists() {
        assert_eq!(ConditionList::parse(" * ").unwrap(), ConditionList::Any);
        let l = ConditionList::parse(r#""a", W/"b" ,"c""#).unwrap();
        assert_eq!(
            l,
            ConditionList::Tags(vec![
                ETag::new("\"a\""),
                ETag::new("W/\"b\""),
                ETag::new("\"c\"")
            ])
        );
        assert!(l.matches_strong(&ETag::new("\"c\"")));
        assert!(!l.matches_strong(&ETag::new("\"b\"")));
        assert!(l.matches_weak(&ETag::new("\"b\"")));
    }

    #[test]
    fn rejects_garbage() {
        for bad in ["", "a", "\"a", "\"a\" \"b\"", "\"a\",", "W/a", "\"a b\""] {
            assert!(ConditionList::parse(bad).is_err(), "{bad:?} parsed");
        }
    }

    proptest! {
        #[test]
        fn parse_never_panics(s in ".{0,64}") {
            let _ = ConditionList::parse(&s);
        }

        #[test]
        fn roundtrips(tags in proptest::collection::vec(("[!#-~]{1,12}", any::<bool>()), 1..6)) {
            let list = ConditionList::Tags(tags.iter().map(|(t, weak)| {
                let t = t.replace('"', "");
                let t = if t.is_empty() { "x".to_owned() } else { t };
                if *weak { ETag::new(format!("W/\"{t}\"")) } else { ETag::new(format!("\"{t}\"")) }
            }).collect());
            prop_assert_eq!(ConditionList::parse(&list.to_header()).unwrap(), list);
        }
    }
}

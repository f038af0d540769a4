//! The window message: one self-contained, versioned JSON document per window, and its
//! validation. A message that fails here is dead-lettered at once with the named reason.

use crate::grid::{Grid, Window};
use crate::id::JobId;
use crate::keys::{KeyError, Prefix, Tenant};
use crate::ledger::AttemptOrder;
use crate::queue::MAX_MESSAGE_BYTES;
use crate::reason::Reason;
use crate::recipe::Recipe;
use crate::source::SourceInfo;
use crate::table::JobRecord;
use serde::{Deserialize, Serialize};

/// The message format version this build writes and reads.
pub const MESSAGE_VERSION: u32 = 1;

/// Everything a worker needs to produce one tile.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct WindowMessage {
    pub v: u32,
    pub job_id: JobId,
    pub source: SourceInfo,
    pub recipe: Recipe,
    pub grid: Grid,
    pub prefix: Prefix,
    pub window: Window,
    #[serde(default, skip_serializing_if = "Tenant::is_default")]
    pub tenant: Tenant,
    /// Set for a regeneration: the window goes to this attempt's immutable key, not the tile
    /// key. A redelivery carries the same attempt ID, so it continues the same attempt.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attempt: Option<AttemptOrder>,
    /// The window had no manifest row when this message was sent. On its first receive the
    /// worker then encodes without looking for the tile first (the skip-if-present HEAD) and
    /// lets the create-if-absent write decide; a redelivery, or a message sent for a recorded
    /// window, still looks first. Absent (false) in messages from older senders.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub unrecorded: bool,
}

/// Why a message was refused. [`MessageError::reason_code`] is the dead-letter reason.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MessageError {
    #[error("decode message: {0} bytes is over the {MAX_MESSAGE_BYTES}-byte limit")]
    TooLarge(usize),
    #[error("decode message: invalid json: {0}")]
    InvalidJson(String),
    #[error("decode message: unknown message version {0} (this build reads {MESSAGE_VERSION})")]
    UnknownVersion(u64),
    #[error("decode message: {0}")]
    BadField(String),
    #[error("decode message: {0}")]
    UnsafeKey(#[from] KeyError),
    #[error("decode message: window {window} is outside the {rows}×{cols} grid")]
    WindowOutsideScene {
        window: Window,
        rows: u32,
        cols: u32,
    },
    #[error(
        "decode message: job id {claimed} does not match its source, recipe and prefix ({derived})"
    )]
    JobIdMismatch { claimed: JobId, derived: JobId },
}

impl MessageError {
    /// The named reason recorded on the dead letter.
    pub fn reason_code(&self) -> Reason {
        match self {
            Self::TooLarge(_) => Reason::MessageTooLarge,
            Self::InvalidJson(_) => Reason::MalformedMessage,
            Self::UnknownVersion(_) => Reason::UnknownMessageVersion,
            Self::BadField(_) => Reason::MalformedMessage,
            Self::UnsafeKey(_) => Reason::UnsafeKeySegment,
            Self::WindowOutsideScene { .. } => Reason::WindowOutsideScene,
            Self::JobIdMismatch { .. } => Reason::JobIdMismatch,
        }
    }
}

impl WindowMessage {
    pub fn new(
        job_id: JobId,
        source: SourceInfo,
        recipe: Recipe,
        grid: Grid,
        prefix: Prefix,
        window: Window,
    ) -> Self {
        Self {
            v: MESSAGE_VERSION,
            job_id,
            source,
            recipe,
            grid,
            prefix,
            window,
            tenant: Tenant::default(),
            attempt: None,
            unrecorded: false,
        }
    }

    /// The message for `window` of a planned job.
    pub fn for_job(job: &JobRecord, window: Window) -> Self {
        Self {
            tenant: job.tenant.clone(),
            ..Self::new(
                job.job_id.clone(),
                job.source.clone(),
                job.recipe.clone(),
                job.grid,
                job.prefix.clone(),
                window,
            )
        }
    }

    pub fn encode(&self) -> String {
        serde_json::to_string(self).expect("a window message always serialises")
    }

    /// Decode and validate: size, JSON, version, fields, key segments, window inside the
    /// grid, and a job ID that matches its source, recipe and prefix.
    pub fn decode(body: &str) -> Result<Self, MessageError> {
        if body.len() > MAX_MESSAGE_BYTES {
            return Err(MessageError::TooLarge(body.len()));
        }
        let value: serde_json::Value =
            serde_json::from_str(body).map_err(|e| MessageError::InvalidJson(e.to_string()))?;
        let v = value
            .get("v")
            .ok_or_else(|| MessageError::BadField("missing field `v`".into()))?;
        let v = v
            .as_u64()
            .ok_or_else(|| MessageError::BadField("field `v` is not a version number".into()))?;
        if v != u64::from(MESSAGE_VERSION) {
            return Err(MessageError::UnknownVersion(v));
        }
        // Key segments get their own named reason, before the typed decode folds them in.
        if let Some(p) = value.get("prefix").and_then(|p| p.as_str()) {
            Prefix::parse(p)?;
        }
        if let Some(t) = value.get("tenant").and_then(|t| t.as_str()) {
            Tenant::parse(t)?;
        }
        let msg: WindowMessage =
            serde_json::from_value(value).map_err(|e| MessageError::BadField(e.to_string()))?;
        if msg.grid.width == 0 || msg.grid.height == 0 {
            return Err(MessageError::BadField("grid has a zero-sized scene".into()));
        }
        if msg.grid.window != msg.recipe.window || msg.grid.window == 0 {
            return Err(MessageError::BadField(
                "grid window size disagrees with the recipe".into(),
            ));
        }
        if !msg.grid.contains(msg.window) {
            return Err(MessageError::WindowOutsideScene {
                window: msg.window,
                rows: msg.grid.rows(),
                cols: msg.grid.cols(),
            });
        }
        let derived = JobId::of(&msg.source, &msg.recipe, &msg.prefix, &msg.tenant);
        if derived != msg.job_id {
            return Err(MessageError::JobIdMismatch {
                claimed: msg.job_id,
                derived,
            });
        }
        Ok(msg)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::etag::ETag;
    use proptest::prelude::*;

    fn sample() -> WindowMessage {
        let source = SourceInfo {
            uri: "file:///data/scene.tif".into(),
            etag: ETag::new("\"abc\""),
            size: 10,
            stat: None,
            assets: Vec::new(),
            signed: false,
        };
        let recipe = Recipe::copy_all();
        let id = JobId::of(&source, &recipe, &Prefix::default(), &Tenant::default());
        WindowMessage::new(
            id,
            source,
            recipe,
            Grid::new(1000, 1000, 512).unwrap(),
            Prefix::default(),
            Window::new(1, 1),
        )
    }

    #[test]
    fn roundtrip() {
        let m = sample();
        assert_eq!(WindowMessage::decode(&m.encode()).unwrap(), m);
    }

    #[test]
    fn named_reasons() {
        let m = sample();
        let mut v: serde_json::Value = serde_json::from_str(&m.encode()).unwrap();
        let reason = |v: &serde_json::Value| {
            WindowMessage::decode(&v.to_string())
                .unwrap_err()
                .reason_code()
        };
        assert_eq!(
            WindowMessage::decode("{nope").unwrap_err().reason_code(),
            "malformed-message"
        );
        let mut w = v.clone();
        w["v"] = 9.into();
        assert_eq!(reason(&w), "unknown-message-version");
        let mut w = v.clone();
        w["window"]["row"] = 7.into();
        assert_eq!(reason(&w), "window-outside-scene");
        let mut w = v.clone();
        w["window"]["row"] = (-1).into();
        assert_eq!(reason(&w), "malformed-message");
        let mut w = v.clone();
        w["prefix"] = "../etc".into();
        assert_eq!(reason(&w), "unsafe-key-segment");
        let mut w = v.clone();
        w["source"]["etag"] = "\"other\"".into();
        assert_eq!(reason(&w), "job-id-mismatch");
        let mut w = v.clone();
        w["tenant"] = "other".into();
        assert_eq!(
            reason(&w),
            "job-id-mismatch",
            "a tenant is part of the job's identity"
        );
        let mut w = v.clone();
        w["tenant"] = "a b".into();
        assert_eq!(reason(&w), "unsafe-key-segment");
        v.as_object_mut().unwrap().remove("recipe");
        assert_eq!(reason(&v), "malformed-message");
        let big = format!("{{\"v\":1,\"pad\":\"{}\"}}", "x".repeat(MAX_MESSAGE_BYTES));
        assert_eq!(
            WindowMessage::decode(&big).unwrap_err().reason_code(),
            "message-too-large"
        );
    }

    proptest! {
        #[test]
        fn decode_never_panics(s in "\\PC{0,300}") {
            let _ = WindowMessage::decode(&s);
        }

        #[test]
        fn decode_survives_field_mutation(field in 0usize..7, val in any::<i64>()) {
            let m = sample();
            let mut v: serde_json::Value = serde_json::from_str(&m.encode()).unwrap();
            let keys = ["v", "job_id", "source", "recipe", "grid", "prefix", "window"];
            v[keys[field]] = val.into();
            prop_assert!(WindowMessage::decode(&v.to_string()).is_err());
        }
    }
}

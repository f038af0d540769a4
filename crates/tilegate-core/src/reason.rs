//! One vocabulary of reasons: every code a failure is named by — on the command line
//! (`tilegate: error[corrupt-raster]: …`, `{"error": {"reason": …}}`), in a dead letter
//! (`source-changed: …`), in the report and in metrics (`dead_lettered_total{reason=…}`) — is a
//! [`Reason`] with one stable kebab-case string, and every exit status is an [`Exit`].
//!
//! The strings are a public contract: scripts branch on them. A new failure gets a new
//! variant; an existing string never changes meaning. The README's table of reasons lists
//! exactly [`Reason::ALL`] (a test checks it).

use serde::{Serialize, Serializer};
use std::fmt;

macro_rules! reasons {
    ($($(#[doc = $doc:literal])+ $variant:ident = $code:literal,)+) => {
        /// Why something failed, named once for every place that says it.
        #[non_exhaustive]
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum Reason {
            $($(#[doc = $doc])+ $variant,)+
        }

        impl Reason {
            /// Every reason, in the order of the README's table.
            pub const ALL: &'static [Reason] = &[$(Reason::$variant,)+];

            /// The stable kebab-case code.
            pub const fn as_str(self) -> &'static str {
                match self {
                    $(Reason::$variant => $code,)+
                }
            }

            /// What the reason means, in one sentence (the README's table says the same).
            pub fn meaning(self) -> &'static str {
                match self {
                    $(Reason::$variant => concat!($($doc),+).trim_ascii(),)+
                }
            }

            /// The reason named by `code`, if it is one.
            pub fn parse(code: &str) -> Option<Reason> {
                match code {
                    $($code => Some(Reason::$variant),)+
                    _ => None,
                }
            }
        }
    };
}

reasons! {
    // Sources: what the scene is and whether it may be read.
    /// The source is not a raster GDAL can read (a text file named `.tif`, a truncated file).
    CorruptRaster = "corrupt-raster",
    /// The source does not exist (or is not visible to these credentials).
    SourceMissing = "source-missing",
    /// The source changed after it was pinned: its content, ETag or size is not the planned one.
    SourceChanged = "source-changed",
    /// The source could not be read (an I/O or network failure that did not go away).
    SourceUnreadable = "source-unreadable",
    /// The source policy refuses this source (scheme, host, path or a file it names).
    SourceForbidden = "source-forbidden",
    /// The source's format or driver is not on the policy's allow-list.
    SourceFormatForbidden = "source-format-forbidden",
    /// The credentials the source needs are not available to the worker.
    SourceCredentialsUnavailable = "source-credentials-unavailable",
    /// The source's URI names a scheme tilegate cannot read.
    UnsupportedSource = "unsupported-source",
    /// A STAC Item given as the source is not one tilegate can plan from.
    BadStacItem = "bad-stac-item",
    /// The raster has zero width, height or bands.
    ZeroSizedRaster = "zero-sized-raster",
    /// The raster's data type is not one tilegate encodes.
    UnsupportedDtype = "unsupported-dtype",
    /// The raster's georeferencing (rotation, GCPs only) is not one tilegate tiles.
    UnsupportedGeoreferencing = "unsupported-georeferencing",
    // The request: recipes, windows, flags.
    /// The recipe, or a flag of it, is not valid for this source.
    BadRecipe = "bad-recipe",
    /// An `--expr` expression does not parse or names a band the source does not have.
    BadExpression = "bad-expression",
    /// The window size is not one the scene can be tiled by.
    BadWindow = "bad-window",
    /// A flag's value is out of its range.
    BadOption = "bad-option",
    /// The command line itself is wrong: an unknown flag, a missing argument, a value the
    /// parser refuses (exit 2; clap's message says which).
    Usage = "usage",
    /// `sample-scene`'s options do not describe a scene it can make.
    BadSampleOptions = "bad-sample-options",
    /// The source policy file does not parse.
    BadSourcePolicy = "bad-source-policy",
    /// An attempt ID is not 32 hexadecimal digits.
    BadAttemptId = "bad-attempt-id",
    /// A prefix, tenant or key segment is not `[A-Za-z0-9._-]` (or is `.`, `..`, reserved or too
    /// long).
    UnsafeKeySegment = "unsafe-key-segment",
    /// The window is outside the job's grid.
    WindowOutsideScene = "window-outside-scene",
    /// The window has no tile to repair: it was never written (`backfill` enqueues it).
    NoTile = "no-tile",
    /// No job has been planned in this data directory yet.
    NoJob = "no-job",
    /// No job has this ID, or none starts with the prefix given.
    UnknownJob = "unknown-job",
    /// More than one job starts with the prefix given: give more characters.
    AmbiguousJob = "ambiguous-job",
    /// The job has no assembled scene yet (`tilegate assemble` builds it).
    NoScene = "no-scene",
    /// The storage named by a flag is not built into this binary.
    BackendNotBuilt = "backend-not-built",
    // Messages on the queue.
    /// A queue message is not a window order tilegate can read.
    MalformedMessage = "malformed-message",
    /// An arrival message (an S3 event, an EventBridge event, an SNS envelope, a STAC Item)
    /// is not one `ingest` can read, or names what its configuration does not accept.
    BadArrival = "bad-arrival",
    /// A queue message is larger than any order tilegate writes.
    MessageTooLarge = "message-too-large",
    /// A queue message has a format version this worker does not know.
    UnknownMessageVersion = "unknown-message-version",
    /// A queue message's job ID does not match the job it names.
    JobIdMismatch = "job-id-mismatch",
    /// A queue message disagrees with its job's row.
    MessageDisagreesWithJob = "message-disagrees-with-job",
    // Encoding a window.
    /// GDAL could not open the source for this window.
    OpenFailed = "open-failed",
    /// GDAL could not read the window's pixels.
    ReadFailed = "read-failed",
    /// The recipe failed on this window's pixels.
    RecipeFailed = "recipe-failed",
    /// The recipe registered under this name is not the one the job was planned with.
    RecipeMismatch = "recipe-mismatch",
    /// The warp of this window failed.
    WarpFailed = "warp-failed",
    /// The window could not be encoded as a COG.
    EncodeFailed = "encode-failed",
    /// The encoded window could not be written out.
    WriteFailed = "write-failed",
    /// GDAL failed in a way it does not name more precisely.
    GdalError = "gdal-error",
    /// The encoder thread failed or went away.
    EncoderFailed = "encoder-failed",
    /// The encoder panicked on this window.
    EncoderPanicked = "encoder-panicked",
    /// The window's handler panicked (the message is handed back, then dead-lettered under the
    /// queue's own reason).
    HandlerPanicked = "handler-panicked",
    /// The queue dead-lettered a message received too many times without being acknowledged
    /// (a worker that died or hung each time).
    MaxReceivesExceeded = "max-receives-exceeded",
    // Storage.
    /// Storage did not answer, or answered with a fault that may pass (retried, then
    /// dead-lettered under this name if it stayed).
    StorageUnavailable = "storage-unavailable",
    /// Storage refused the request permanently (permissions, a bucket that does not exist).
    StorageRefused = "storage-refused",
    // Assembling a scene.
    /// The job's manifest does not hold every window yet; `status` names the missing ones.
    Incomplete = "incomplete",
    /// A tile's size is not the one its manifest row recorded.
    ManifestSizeMismatch = "manifest-size-mismatch",
    /// A tile's ETag is not the one its manifest row recorded.
    ManifestEtagMismatch = "manifest-etag-mismatch",
    /// The scene the store published is not the one laid out (withdrawn, not recorded).
    PublishedSceneMismatch = "published-scene-mismatch",
    /// The assembler's claim lapsed and another took it over mid-upload; the upload was aborted
    /// (assembly on completion tries again).
    LeaseLost = "lease-lost",
    /// Another assembler holds the scene's claim: its assembly is in progress elsewhere and
    /// nothing was uploaded here (it publishes; or its lease lapses and the next one does).
    ClaimHeld = "claim-held",
    /// The assembly was stopped (Ctrl-C, SIGTERM) before it published; its claim was released
    /// and any upload aborted, so the next `assemble` starts at once.
    Interrupted = "interrupted",
    /// A tile is not a TIFF.
    TileNotATiff = "tile-not-a-tiff",
    /// A tile's structure is not one the assembler can copy blocks from.
    TileCorrupt = "tile-corrupt",
    /// A tile's compressed block does not decode.
    TileBlockCorrupt = "tile-block-corrupt",
    /// A tile's bands, type or georeferencing differ from the scene's.
    TileMismatch = "tile-mismatch",
    /// A tile lies outside the scene's grid.
    TileOutsideGrid = "tile-outside-grid",
    /// Two tiles claim the same window.
    TileDuplicateWindow = "tile-duplicate-window",
    /// A window of the grid has no tile.
    TileMissingWindow = "tile-missing-window",
    /// The scene's layout is not one the assembler can write.
    SceneSpecInvalid = "scene-spec-invalid",
    /// An overview level could not be encoded.
    OverviewEncodeFailed = "overview-encode-failed",
    /// GDAL's fallback output could not be read back.
    GdalOutputUnreadable = "gdal-output-unreadable",
    /// A regeneration of the scene could not be built.
    SceneNotBuilt = "scene-not-built",
    // The ledger of regenerated outputs.
    /// No attempt has this ID.
    UnknownAttempt = "unknown-attempt",
    /// The attempt's object is being deleted.
    AttemptBeingDeleted = "attempt-being-deleted",
    /// The attempt's object has been collected.
    AttemptCollected = "attempt-collected",
    /// Another object is at the attempt's own key.
    AttemptKeyCollision = "attempt-key-collision",
    /// The attempt is no longer uploading.
    AttemptNotUploading = "attempt-not-uploading",
    /// The attempt's retention has expired.
    RetentionExpired = "retention-expired",
    /// Nothing has been accepted for this window or scene.
    NothingAccepted = "nothing-accepted",
    /// The job belongs to another tenant.
    NotYourTenant = "not-your-tenant",
    /// A signed URL was asked to live for no time at all.
    UrlLifetimeEmpty = "url-lifetime-empty",
    /// A signed URL was asked to live longer than the store allows (7 days).
    UrlLifetimeExceeded = "url-lifetime-exceeded",
    /// A link the service signed has passed its expiry: ask the service for a new one.
    LinkExpired = "link-expired",
    /// A link's signature does not match its object and expiry (altered, or signed by another data directory).
    LinkSignatureInvalid = "link-signature-invalid",
    // The job service.
    /// The request carries no credentials, or a key or token that proves nothing (unknown,
    /// revoked, expired, signed by another key, issued for another audience or issuer).
    Unauthenticated = "unauthenticated",
    /// The request is not one the operation takes (a body, parameter or header it refuses).
    BadRequest = "bad-request",
    /// The request's body or headers are larger than the service accepts.
    RequestTooLarge = "request-too-large",
    /// The tenant sent more requests than its rate allows; `Retry-After` says when to ask again.
    RateLimited = "rate-limited",
    /// The tenant has as many unfinished jobs as the service allows; a new one waits.
    TooManyJobsInFlight = "too-many-jobs-in-flight",
    /// The tenant has as many event streams open as the service allows; close one, or ask again after `Retry-After`.
    TooManyStreams = "too-many-streams",
    /// The request took longer than the service's request timeout.
    RequestTimeout = "request-timeout",
    /// A failure tilegate has no name for yet: the message says what happened.
    Unexpected = "unexpected",
}

impl Reason {
    /// The storage reason for a fault: [`Reason::StorageUnavailable`] if it may pass,
    /// [`Reason::StorageRefused`] if not.
    pub fn storage(retryable: bool) -> Reason {
        if retryable {
            Reason::StorageUnavailable
        } else {
            Reason::StorageRefused
        }
    }
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Serialize for Reason {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

/// A reason is one of its stable strings; the schema lists each with its meaning.
impl schemars::JsonSchema for Reason {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "Reason".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        let one_of: Vec<serde_json::Value> = Reason::ALL
            .iter()
            .map(|r| serde_json::json!({"const": r.as_str(), "description": r.meaning()}))
            .collect();
        schemars::json_schema!({
            "description": "A stable reason code (README, \"Reasons and exit statuses\").",
            "type": "string",
            "oneOf": one_of,
        })
    }
}

/// A reason equals its stable string (`Reason::SourceChanged == "source-changed"`).
impl PartialEq<&str> for Reason {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

impl PartialEq<str> for Reason {
    fn eq(&self, other: &str) -> bool {
        self.as_str() == other
    }
}

impl From<Reason> for &'static str {
    fn from(r: Reason) -> &'static str {
        r.as_str()
    }
}

/// A failure named by its reason, with the sentence a person reads: for a refusal made by
/// code that has no error type of its own (a flag's value, a combination of flags).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    pub reason: Reason,
    pub message: String,
}

impl Refusal {
    pub fn new(reason: Reason, message: impl Into<String>) -> Self {
        Self {
            reason,
            message: message.into(),
        }
    }
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Refusal {}

macro_rules! exits {
    ($($(#[doc = $doc:literal])+ $variant:ident = $code:literal,)+) => {
        /// How the command line ends: its exit status.
        #[non_exhaustive]
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum Exit {
            $($(#[doc = $doc])+ $variant,)+
        }

        impl Exit {
            /// Every exit status, in the order of the README's table.
            pub const ALL: &'static [Exit] = &[$(Exit::$variant,)+];

            /// The process exit status.
            pub const fn code(self) -> u8 {
                match self {
                    $(Exit::$variant => $code,)+
                }
            }

            /// What it means, in one sentence.
            pub fn meaning(self) -> &'static str {
                match self {
                    $(Exit::$variant => concat!($($doc),+).trim_ascii(),)+
                }
            }
        }
    };
}

exits! {
    /// Done.
    Done = 0,
    /// A failure, named by its reason.
    Failed = 1,
    /// The command line itself is wrong (an unknown flag, a missing argument).
    Usage = 2,
    /// The job could not complete: windows are missing or dead-lettered.
    Incomplete = 3,
    /// `assemble` refused a job whose manifest is short, naming the missing windows.
    ManifestShort = 4,
    /// `reconcile` found objects and rows that disagree.
    Disagrees = 5,
    /// The attempt was not published: the pointer moved meanwhile, or it is not current.
    NotPublished = 6,
    /// Not done here: another assembler holds the scene's claim (`claim-held`) or took it
    /// over (`lease-lost`). It publishes the scene; `tilegate status` shows when.
    Held = 7,
}

impl From<Exit> for std::process::ExitCode {
    fn from(e: Exit) -> Self {
        std::process::ExitCode::from(e.code())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_reason_is_kebab_case_unique_and_parses_back() {
        let mut seen = std::collections::BTreeSet::new();
        for r in Reason::ALL {
            let s = r.as_str();
            assert!(
                s.split('-')
                    .all(|w| !w.is_empty() && w.bytes().all(|b| b.is_ascii_lowercase())),
                "{s}"
            );
            assert!(seen.insert(s), "{s} twice");
            assert_eq!(Reason::parse(s), Some(*r));
            assert!(!r.meaning().is_empty());
            assert_eq!(serde_json::to_string(r).unwrap(), format!("\"{s}\""));
        }
        assert_eq!(Reason::parse("error"), None);
    }

    #[test]
    fn exit_statuses_are_distinct() {
        let codes: std::collections::BTreeSet<u8> = Exit::ALL.iter().map(|e| e.code()).collect();
        assert_eq!(codes.len(), Exit::ALL.len());
    }
}

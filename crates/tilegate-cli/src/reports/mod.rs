//! What each command prints: one `Serialize` type per command, from which both its `--json`
//! document and its text come, so that the two cannot disagree and the compiler checks every
//! field. The JSON Schema of each document is generated from the same types
//! (`commands::catalog::schemas`; `tilegate schema COMMAND` prints one, `docs/json/` holds
//! them all).
//!
//! Every time in a document is an integer of milliseconds since the epoch; `--json` prints a
//! readable copy beside it ([`tilegate_core::time::with_utc`]): `created_at` and
//! `created_at_utc`.

pub use crate::output::{ErrorDoc, Failed, Item, Report};

mod ledger;
mod look;
mod pipeline;
mod service;

pub use ledger::*;
pub use look::*;
pub use pipeline::*;
pub use service::*;

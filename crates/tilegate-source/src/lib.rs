//! Sources: what a job reads. Resolving a path or URI to a pinned [`SourceInfo`] when planning,
//! the cheap per-window check that it is still the source planned, HTTP(S) sources and STAC
//! Items — and the one [`SourcePolicy`] that every one of these paths goes through, for the
//! planner and the worker alike.
//!
//! Architecture invariant: nothing here reads a byte of a source or a document before the
//! policy has judged the reference to it, as the operator's or as one a document made.
//!
//! [`SourceInfo`]: tilegate_core::SourceInfo

pub mod http;
pub mod policy;
pub mod resolve;
pub mod stac;

pub use policy::{Forbidden, Origin, Policies, PolicyError, SourcePolicy};
pub use resolve::{
    ResolvedSource, SourceError, SourceGuard, admit, gdal_path, resolve, resolve_source, verify,
};

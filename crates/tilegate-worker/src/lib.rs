//! The worker: receive, validate, encode, commit once, record, acknowledge.

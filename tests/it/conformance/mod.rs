//! The backend conformance suite: the same test functions run against every backend.

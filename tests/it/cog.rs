//! COG encoder tests: validator-clean tiles whose pixels equal the source window.

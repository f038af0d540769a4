//! Unifies dependency features across the workspace; managed by cargo-hakari.

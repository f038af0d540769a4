//! The embedded backend: objects as files, tables and queue in one SQLite file.

//! The planner: source metadata and recipe in, job row and window messages out.

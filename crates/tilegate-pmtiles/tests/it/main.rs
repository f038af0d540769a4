//! tilegate-pmtiles through its public API: archives written and read back, and both halves
//! checked against the reference implementations (Python `pmtiles`, `morecantile`).

mod archive;
mod reference;

//! The `tilegate` command line.
fn main() {}

//! A child process for cross-process tests: performs one storage operation named by its
//! arguments and prints the outcome on stdout.
fn main() {}

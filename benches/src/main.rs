//! tilegate's benchmarks. The fan-out benchmark arrives with its own issue; this binary
//! already builds so CI keeps it compiling.
fn main() {
    println!("tilegate-benches: no benchmark is implemented yet (see BENCHMARKS.md)");
}

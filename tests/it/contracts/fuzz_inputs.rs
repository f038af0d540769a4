//! The fuzz targets' properties (`tilegate_core::fuzz`), run on every CI pass: over the
//! fuzzers' seed inputs in `fuzz/seeds/`, over those seeds with random bytes flipped, and over
//! arbitrary strings. `cargo fuzz run <target>` explores further (README, Development).

use proptest::prelude::*;
use std::path::PathBuf;
use tilegate_core::fuzz;

type Target = fn(&[u8]);

const TARGETS: [(&str, Target); 6] = [
    ("window_message", fuzz::window_message),
    ("key_segments", fuzz::key_segments),
    ("condition_list", fuzz::condition_list),
    ("source_policy", fuzz::source_policy),
    ("arrival", fuzz::arrival),
    ("reference_differential", fuzz::reference_differential),
];

fn seeds(target: &str) -> Vec<Vec<u8>> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../fuzz/seeds")
        .join(target);
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("read {}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    files.iter().map(|f| std::fs::read(f).unwrap()).collect()
}

#[test]
fn fuzz_inputs_seed_corpus() {
    for (name, target) in TARGETS {
        let seeds = seeds(name);
        assert!(!seeds.is_empty(), "fuzz/seeds/{name} is empty");
        for s in &seeds {
            target(s);
        }
    }
}

proptest! {
    #[test]
    fn fuzz_inputs_mutated_seeds(
        target in 0usize..TARGETS.len(),
        seed in any::<prop::sample::Index>(),
        flips in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 0..8),
    ) {
        let (name, f) = TARGETS[target];
        let seeds = seeds(name);
        let mut input = seed.get(&seeds).clone();
        for (at, byte) in flips {
            if !input.is_empty() {
                let i = at.index(input.len());
                input[i] = byte;
            }
        }
        f(&input);
    }

    #[test]
    fn fuzz_inputs_arbitrary_strings(s in "\\PC{0,300}") {
        for (_, f) in TARGETS {
            f(s.as_bytes());
        }
    }

    /// References built from the pieces parsers disagree on: scheme spellings, `\\`, `@`,
    /// `:`, brackets, dots, percent-escapes, `?` and `#`.
    #[test]
    fn fuzz_inputs_reference_like_strings(
        scheme in prop::sample::select(vec!["http", "https", "HTTP", "s3", "gs", "az", "file"]),
        authority in "[a-z0-9.@:\\\\\\[\\]%-]{0,24}",
        path in "[a-zA-Z0-9./\\\\%@?#=&-]{0,40}",
    ) {
        fuzz::reference_differential(format!("{scheme}://{authority}{path}").as_bytes());
        fuzz::source_policy(format!("\n{scheme}://{authority}{path}").as_bytes());
    }

    #[test]
    fn fuzz_inputs_key_like_strings(s in "[a-zA-Z0-9./_-]{0,60}") {
        fuzz::key_segments(s.as_bytes());
    }

    /// Prefixes of many long, individually valid segments: totals around and past the limit
    /// (eight 128-byte segments plan fine segment by segment, and make 1,090-byte keys).
    #[test]
    fn fuzz_inputs_long_prefixes(segs in prop::collection::vec("[a-z0-9._-]{100,128}", 1..16)) {
        fuzz::key_segments(segs.join("/").as_bytes());
    }

    #[test]
    fn fuzz_inputs_condition_like_strings(s in "( *(W/)?\"[!#-~]{0,6}\" *,?)*|\\*") {
        fuzz::condition_list(s.as_bytes());
    }
}

//! Finding and running the `tilegate` binary and this package's child helper: `tg`, its JSON
//! output, and `work` processes that take one message at a time.

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The `tilegate` binary built beside the test binary (`cargo build -p tilegate-cli` first;
/// the README's test command does).
pub fn tilegate_bin() -> PathBuf {
    let exe = std::env::current_exe().expect("current exe");
    let dir = exe
        .parent()
        .and_then(Path::parent)
        .expect("test binary lives in target/<profile>/deps");
    let bin = dir.join("tilegate");
    assert!(
        bin.exists(),
        "{} is missing: run `cargo build -p tilegate-cli` before the tests",
        bin.display()
    );
    bin
}

/// The cross-process child helper of this package. Cargo builds a package's binaries before
/// its integration tests and puts them beside the test binary's `deps/` directory
/// (`CARGO_BIN_EXE_*` is set only when compiling integration tests, not this library).
pub fn child_bin() -> PathBuf {
    let exe = std::env::current_exe().expect("current exe");
    let dir = exe
        .parent()
        .and_then(Path::parent)
        .expect("test binary lives in target/<profile>/deps");
    let bin = dir.join("tilegate-test-child");
    assert!(
        bin.exists(),
        "{} is missing: build the tests package (`cargo build -p tilegate-tests --bins`)",
        bin.display()
    );
    bin
}

/// Run `tilegate --data DATA ARGS...` and return its output (whatever the exit status).
pub fn tg(data: &Path, args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(tilegate_bin());
    cmd.arg("--data").arg(data).args(args);
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().expect("run tilegate")
}

/// Run with `--json`, require success, parse stdout.
pub fn tg_json(data: &Path, args: &[&str]) -> Value {
    let mut a = vec!["--json"];
    a.extend_from_slice(args);
    json_of(args, &tg(data, &a, &[]))
}

/// The JSON document a successful `tilegate --json ARGS` printed; panics with its stderr if it
/// failed.
pub fn json_of(args: &[&str], out: &Output) -> Value {
    assert!(
        out.status.success(),
        "tilegate {args:?} failed: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "tilegate {args:?} printed no JSON ({e}): {}",
            String::from_utf8_lossy(&out.stdout)
        )
    })
}

/// The document an `assemble --json` process printed, its exit status checked against its
/// outcome: 0 when the scene is published (`written`, `already_done`, `already_present`), 7
/// ("not done here") when another assembler holds the claim or took it over.
pub fn assembler_doc(out: &Output) -> Value {
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "the assembler printed no JSON ({e}, {}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        )
    });
    let want = match doc["outcome"].as_str() {
        Some("written" | "already_done" | "already_present") => 0,
        Some("held_by" | "lease_lost") => 7,
        _ => panic!("an assembler ended oddly ({}): {doc}", out.status),
    };
    assert_eq!(
        out.status.code(),
        Some(want),
        "{doc}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    doc
}

/// Run one `work --until-empty` process that handles one message at a time (visibility 1 s),
/// with `extra` flags and `env`.
pub fn work_one_at_a_time(data: &Path, extra: &[&str], env: &[(&str, &str)]) -> Output {
    let mut args = ONE_AT_A_TIME.to_vec();
    args.extend_from_slice(extra);
    tg(data, &args, env)
}

/// The arguments of a `work --until-empty` process that handles one message at a time
/// (visibility 1 s).
pub const ONE_AT_A_TIME: [&str; 8] = [
    "work",
    "--until-empty",
    "--threads",
    "1",
    "--concurrency",
    "1",
    "--visibility",
    "1",
];

/// [`work_one_at_a_time`] with the fault hook armed at `point` after `skip` passes; it is
/// expected to die there.
pub fn work_until_fault(data: &Path, point: &str, skip: u32) -> Output {
    let skip = skip.to_string();
    work_one_at_a_time(
        data,
        &[],
        &[("TILEGATE_FAULT", point), ("TILEGATE_FAULT_SKIP", &skip)],
    )
}

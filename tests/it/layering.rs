//! The house matches its map: the crates' dependencies point the way ARCHITECTURE.md says
//! (read from `cargo metadata`), and the code map names every crate and no file that is
//! missing.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

const STAGES: [&str; 3] = ["tilegate-planner", "tilegate-worker", "tilegate-assembler"];
const BACKENDS: [&str; 5] = [
    "tilegate-embedded",
    "tilegate-memory",
    "tilegate-aws",
    "tilegate-gcs",
    "tilegate-azure",
];
/// What may depend on the pipeline: the shells around it.
const ABOVE_PIPELINE: [&str; 5] = [
    "tilegate-cli",
    "tilegate-service",
    "tilegate-lambda",
    "tilegate-benches",
    "tilegate-tests",
];
/// Crates that do I/O (network, files through an engine, GDAL, SQL); core names none.
const IO_CRATES: [&str; 6] = ["tokio", "reqwest", "hyper", "gdal", "gdal-sys", "rusqlite"];
const IO_PREFIXES: [&str; 3] = ["aws-", "azure_", "gcloud-"];

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// Each workspace package and the names of its normal (non-dev, non-build) dependencies.
fn dependencies() -> BTreeMap<String, BTreeSet<String>> {
    let out = std::process::Command::new(env!("CARGO"))
        .args([
            "metadata",
            "--format-version",
            "1",
            "--no-deps",
            "--offline",
        ])
        .current_dir(root())
        .output()
        .expect("run cargo metadata");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    doc["packages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            let deps = p["dependencies"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|d| d["kind"].is_null())
                .map(|d| d["name"].as_str().unwrap().to_owned())
                .collect();
            (p["name"].as_str().unwrap().to_owned(), deps)
        })
        .collect()
}

#[test]
fn stages_never_name_stages_and_core_does_no_io() {
    let deps = dependencies();
    let mut bad = Vec::new();
    for (name, uses) in &deps {
        for dep in uses {
            let stage_on_stage = STAGES.contains(&name.as_str()) && STAGES.contains(&dep.as_str());
            let backend_on_stage = BACKENDS.contains(&name.as_str())
                && (STAGES.contains(&dep.as_str()) || dep == "tilegate-pipeline");
            let under_pipeline =
                dep == "tilegate-pipeline" && !ABOVE_PIPELINE.contains(&name.as_str());
            if stage_on_stage || backend_on_stage || under_pipeline {
                bad.push(format!("{name} depends on {dep}"));
            }
        }
    }
    let core = &deps["tilegate-core"];
    for dep in core {
        let io = IO_CRATES.contains(&dep.as_str())
            || IO_PREFIXES.iter().any(|p| dep.starts_with(p))
            || (dep.starts_with("tilegate-") && dep != "tilegate-core");
        if io {
            bad.push(format!("tilegate-core depends on {dep}"));
        }
    }
    // The layering holds for real crates, not an empty list.
    for crate_name in STAGES
        .iter()
        .chain(&BACKENDS)
        .chain(["tilegate-pipeline"].iter())
    {
        assert!(deps.contains_key(*crate_name), "no package {crate_name}");
    }
    assert!(bad.is_empty(), "{}", bad.join("\n"));
}

#[test]
fn the_code_map_names_every_crate_and_no_missing_file() {
    let root = root();
    let text = std::fs::read_to_string(root.join("ARCHITECTURE.md")).unwrap();
    let mut bad = Vec::new();
    for entry in std::fs::read_dir(root.join("crates")).unwrap() {
        let name = entry.unwrap().file_name().to_string_lossy().into_owned();
        if !text.contains(&format!("crates/{name}")) {
            bad.push(format!("the code map does not name crates/{name}"));
        }
    }
    // Every path in backticks that starts at the repository's top is there.
    for quoted in text.split('`').skip(1).step_by(2) {
        let path = quoted.trim_end_matches(['/', ',', '.', ')']);
        let top = [
            "crates/",
            "tests/",
            "benches/",
            "deploy/",
            "examples/",
            "fuzz/",
        ];
        if top.iter().any(|t| path.starts_with(t))
            && !path.contains(['*', '{', ' ', '<'])
            && !root.join(path).exists()
        {
            bad.push(format!(
                "ARCHITECTURE.md names `{path}`, which does not exist"
            ));
        }
    }
    assert!(bad.is_empty(), "{}", bad.join("\n"));
}

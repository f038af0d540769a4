//! The house matches its map: every crate has a layer and its dependencies (read from
//! `cargo metadata`) point only down, as ARCHITECTURE.md's table shows; the code map names
//! every crate and no file or document that is missing.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Every workspace crate and its layer, bottom first: a crate's dependencies point only to lower
/// layers (never up, never sideways within its own). ARCHITECTURE.md shows this table; a crate
/// the table does not list fails the test.
const LAYERS: &[(&str, &[&str])] = &[
    (
        "leaves",
        &["tilegate-expr", "tilegate-fault", "tilegate-pmtiles"],
    ),
    ("contracts", &["tilegate-core"]),
    (
        "mechanisms",
        &[
            "tilegate-retry",
            "tilegate-claim",
            "tilegate-ledger",
            "tilegate-stac",
            "tilegate-cogwrite",
        ],
    ),
    (
        "engines",
        &[
            "tilegate-cog",
            "tilegate-embedded",
            "tilegate-memory",
            "tilegate-aws",
            "tilegate-gcs",
            "tilegate-azure",
            "tilegate-webhook",
            "tilegate-report",
        ],
    ),
    ("sources", &["tilegate-source"]),
    (
        "stages",
        &["tilegate-planner", "tilegate-worker", "tilegate-assembler"],
    ),
    ("composition", &["tilegate-pipeline", "tilegate-backends"]),
    // What every backend is held to: it drives the stages' protocols over a backend.
    ("suites", &["tilegate-conformance"]),
    ("service", &["tilegate-service"]),
    ("shells", &["tilegate-cli", "tilegate-lambda"]),
    (
        "harnesses",
        &[
            "tilegate-tests",
            "tilegate-benches",
            "tilegate-example-median",
        ],
    ),
];
/// hakari's feature-unification crate: every crate may depend on it; it is no layer.
const HACK: &str = "workspace-hack";
/// The crates that talk to a store's service or a sink: a stage never names one.
const STORES: &[&str] = &[
    "tilegate-embedded",
    "tilegate-memory",
    "tilegate-aws",
    "tilegate-gcs",
    "tilegate-azure",
    "tilegate-webhook",
    "tilegate-backends",
];
/// Crates that do I/O (network, files through an engine, GDAL, SQL); core names none.
const IO_CRATES: [&str; 6] = ["tokio", "reqwest", "hyper", "gdal", "gdal-sys", "rusqlite"];
/// A cloud SDK's crates: retry (the loop every store's requests go through) links none.
const SDK_PREFIXES: [&str; 3] = ["aws-", "azure_", "gcloud-"];

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

/// The layer of `name` in [`LAYERS`], if it is listed.
fn layer_of(name: &str) -> Option<(usize, &'static str)> {
    LAYERS
        .iter()
        .enumerate()
        .find(|(_, (_, crates))| crates.contains(&name))
        .map(|(i, (layer, _))| (i, *layer))
}

/// What is wrong with the workspace `deps` (every package and its normal dependencies): a
/// crate the table does not list, a table entry that is no crate, a dependency that points up
/// or sideways, a stage that names a store, retry linking an SDK, core doing I/O.
fn violations(deps: &BTreeMap<String, BTreeSet<String>>) -> Vec<String> {
    let mut bad = Vec::new();
    for (name, uses) in deps {
        if name == HACK {
            continue;
        }
        let Some((at, layer)) = layer_of(name) else {
            bad.push(format!("{name} is in no layer: add it to LAYERS"));
            continue;
        };
        for dep in uses.iter().filter(|d| deps.contains_key(*d) && *d != HACK) {
            match layer_of(dep) {
                Some((below, _)) if below < at => {}
                Some((same, _)) if same == at => {
                    bad.push(format!(
                        "{name} depends on {dep}: sideways within `{layer}`"
                    ));
                }
                Some((_, up)) => {
                    bad.push(format!("{name} ({layer}) depends on {dep} ({up}): up"));
                }
                None => bad.push(format!("{name} depends on {dep}, which is in no layer")),
            }
        }
        if layer == "stages" {
            for dep in uses.iter().filter(|d| STORES.contains(&d.as_str())) {
                bad.push(format!("the stage {name} names the store {dep}"));
            }
        }
    }
    for dep in deps.get("tilegate-retry").into_iter().flatten() {
        if SDK_PREFIXES.iter().any(|p| dep.starts_with(p)) || dep == "reqwest" {
            bad.push(format!("tilegate-retry links {dep}"));
        }
    }
    for dep in deps.get("tilegate-core").into_iter().flatten() {
        let io = IO_CRATES.contains(&dep.as_str())
            || SDK_PREFIXES.iter().any(|p| dep.starts_with(p))
            || (dep.starts_with("tilegate-") && dep != "tilegate-core")
            // hakari's crate would bring tokio, hyper and reqwest with it.
            || dep == HACK;
        if io {
            bad.push(format!("tilegate-core depends on {dep}"));
        }
    }
    for (_, crates) in LAYERS {
        for c in *crates {
            if !deps.contains_key(*c) {
                bad.push(format!("LAYERS lists {c}, which is no workspace crate"));
            }
        }
    }
    bad
}

#[test]
fn every_crate_has_a_layer_and_depends_only_down() {
    let deps = dependencies();
    assert!(deps.contains_key("tilegate-pipeline"), "no workspace read");
    let bad = violations(&deps);
    assert!(bad.is_empty(), "{}", bad.join("\n"));
}

/// The test of the test: an edge that points up, one sideways, a stage naming a store, retry
/// linking an SDK, core doing I/O and an unlisted crate are each refused.
#[test]
fn the_layer_check_refuses_each_kind_of_wrong_edge() {
    let clean = dependencies();
    let with = |from: &str, to: &str| {
        let mut deps = clean.clone();
        deps.entry(from.to_owned())
            .or_default()
            .insert(to.to_owned());
        deps.entry(to.to_owned()).or_default();
        violations(&deps)
    };
    let cases = [
        ("tilegate-ledger", "tilegate-worker", "up"),
        ("tilegate-planner", "tilegate-worker", "sideways"),
        ("tilegate-cog", "tilegate-source", "up"),
        ("tilegate-worker", "tilegate-aws", "names the store"),
        ("tilegate-retry", "aws-sdk-s3", "links aws-sdk-s3"),
        ("tilegate-core", "tokio", "tilegate-core depends on tokio"),
        (
            "tilegate-core",
            HACK,
            "tilegate-core depends on workspace-hack",
        ),
        ("tilegate-newcomer", "tilegate-core", "in no layer"),
    ];
    for (from, to, says) in cases {
        let bad = with(from, to);
        assert!(
            bad.iter().any(|b| b.contains(says)),
            "{from} -> {to} was not refused as {says}: {bad:?}"
        );
    }
}

/// ARCHITECTURE.md's layer table is [`LAYERS`], row for row.
#[test]
fn the_architecture_shows_the_layer_table() {
    let text = std::fs::read_to_string(root().join("ARCHITECTURE.md")).unwrap();
    let mut want = String::from("| layer | crates |\n|---|---|\n");
    for (layer, crates) in LAYERS.iter().rev() {
        let names: Vec<String> = crates.iter().map(|c| format!("`{c}`")).collect();
        want.push_str(&format!("| {layer} | {} |\n", names.join(", ")));
    }
    assert!(
        text.contains(&want),
        "ARCHITECTURE.md does not show the layer table; it should read:\n{want}"
    );
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
    // Every document it names is in the repository.
    for word in text.split(|c: char| !(c.is_ascii_alphanumeric() || "._/-".contains(c))) {
        if word.ends_with(".md") && !root.join(word).exists() {
            bad.push(format!(
                "ARCHITECTURE.md names {word}, which is not in the repository"
            ));
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

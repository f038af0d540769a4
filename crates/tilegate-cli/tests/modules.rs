//! The command line's modules import each other in one direction only: read every file under
//! `src/`, collect the `crate::MODULE` paths each top-level module names, and check that the
//! graph has no circle and that `ctx`, `output` and `errors` stand (almost) alone.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Top-level module → the other top-level modules it names.
type Graph = BTreeMap<String, BTreeSet<String>>;

/// What each foundation module may name: `output` and `errors` nothing of the crate, `ctx`
/// only `output` (a context carries where results go).
const FOUNDATIONS: &[(&str, &[&str])] = &[("output", &[]), ("errors", &[]), ("ctx", &["output"])];

#[test]
fn the_modules_import_each_other_in_one_direction() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let files = rust_files(&src);
    assert!(files.len() > 10, "too few files under {}", src.display());
    let graph = graph(&files);
    if let Some(circle) = circle(&graph) {
        panic!(
            "the modules import each other in a circle: {}",
            circle.join(" → ")
        );
    }
    for m in ["commands", "ctx", "dispatch", "errors", "output", "reports"] {
        assert!(graph.contains_key(m), "no module `{m}` in {graph:?}");
    }
    for (module, allowed) in FOUNDATIONS {
        let named: Vec<&String> = graph[*module]
            .iter()
            .filter(|m| !allowed.contains(&m.as_str()))
            .collect();
        assert!(
            named.is_empty(),
            "`{module}` may name only {allowed:?} of this crate, and names {named:?}"
        );
    }
}

/// The check itself sees a circle, through `use crate::…`, a path in an expression and a
/// `use crate::{…}` group alike.
#[test]
fn a_circle_is_seen() {
    let files = vec![
        (PathBuf::from("a.rs"), "use crate::b::X;\n".to_owned()),
        (
            PathBuf::from("b/mod.rs"),
            "// crate::d in a comment is no import\nfn f() { crate::c::g() }\n".to_owned(),
        ),
        (PathBuf::from("c.rs"), "use crate::{d, a::Y};\n".to_owned()),
        (PathBuf::from("d.rs"), String::new()),
    ];
    let g = graph(&files);
    assert_eq!(g["b"], BTreeSet::from(["c".to_owned()]));
    assert_eq!(
        circle(&g),
        Some(
            vec!["a", "b", "c", "a"]
                .into_iter()
                .map(String::from)
                .collect()
        )
    );
    let files = &files[1..];
    assert_eq!(circle(&graph(files)), None);
}

/// Every `.rs` file under `dir`, with its path relative to `dir`, and its text.
fn rust_files(dir: &Path) -> Vec<(PathBuf, String)> {
    let mut out = Vec::new();
    let mut dirs = vec![dir.to_path_buf()];
    while let Some(d) = dirs.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                dirs.push(p);
            } else if p.extension().is_some_and(|x| x == "rs") {
                let text = std::fs::read_to_string(&p).unwrap();
                out.push((p.strip_prefix(dir).unwrap().to_path_buf(), text));
            }
        }
    }
    out
}

/// The top-level module of a file: `a.rs` and `a/…` are `a`; `lib.rs` and `main.rs` are the
/// crate's root, which declares the modules and is left out.
fn module_of(path: &Path) -> Option<String> {
    let first = path.components().next()?.as_os_str().to_string_lossy();
    let name = first.strip_suffix(".rs").unwrap_or(&first).to_owned();
    (name != "lib" && name != "main").then_some(name)
}

fn graph(files: &[(PathBuf, String)]) -> Graph {
    let mut g = Graph::new();
    for (path, text) in files {
        let Some(module) = module_of(path) else {
            continue;
        };
        let named = g.entry(module.clone()).or_default();
        for line in text.lines() {
            let code = line.split("//").next().unwrap_or("");
            assert!(
                !code.contains("super::super"),
                "{}: reaches past its own module with `super::super`",
                path.display()
            );
            for (i, _) in code.match_indices("crate::") {
                let rest = &code[i + "crate::".len()..];
                let names: Vec<&str> = match rest.strip_prefix('{') {
                    // `crate::{a, b::X}`: every first segment in the group.
                    Some(group) => group
                        .split('}')
                        .next()
                        .unwrap_or("")
                        .split(',')
                        .map(|s| s.trim().split("::").next().unwrap_or("").trim())
                        .collect(),
                    None => vec![ident(rest)],
                };
                named.extend(
                    names
                        .into_iter()
                        .filter(|n| !n.is_empty() && *n != module)
                        .map(str::to_owned),
                );
            }
        }
    }
    g
}

fn ident(s: &str) -> &str {
    let end = s
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .unwrap_or(s.len());
    &s[..end]
}

/// A circle in `g`, as the modules along it (the first repeated at the end), if there is one.
fn circle(g: &Graph) -> Option<Vec<String>> {
    fn visit(
        m: &str,
        g: &Graph,
        path: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(at) = path.iter().position(|p| p == m) {
            let mut c = path[at..].to_vec();
            c.push(m.to_owned());
            return Some(c);
        }
        if done.contains(m) {
            return None;
        }
        path.push(m.to_owned());
        for next in g.get(m).into_iter().flatten() {
            if let Some(c) = visit(next, g, path, done) {
                return Some(c);
            }
        }
        path.pop();
        done.insert(m.to_owned());
        None
    }
    let mut done = BTreeSet::new();
    g.keys()
        .find_map(|m| visit(m, g, &mut Vec::new(), &mut done))
}

//! `deploy/facts.json`: what the deployment files must agree on with the code — the DynamoDB
//! tables' names, keys and indexes, the dead-letter queue's name, the ingest configuration's
//! fields, the defaults the templates rely on — generated here from the code and compared with
//! the committed file, as `docs/json/` is with `tilegate schema`. `deploy/lint` reads it.
//! `TILEGATE_BLESS=1` writes it.
//!
//! The dead-letter name comes from calling the code. The rest is read from the source that
//! defines it (the tables' `specs()` in tilegate-aws, `IngestConfig`'s fields, the serve
//! command's flag defaults), because those are private or live in crates this one does not
//! depend on; each reading asserts the shape it expects, so a changed definition fails here
//! rather than yielding a wrong file.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

const DYNAMO_MOD: &str = include_str!("../../tilegate-aws/src/dynamo/mod.rs");
const DYNAMO_SCHEMA: &str = include_str!("../../tilegate-aws/src/dynamo/schema.rs");
const DYNAMO_LEDGER: &str = include_str!("../../tilegate-aws/src/dynamo/ledger.rs");
const INGEST: &str = include_str!("../../tilegate-pipeline/src/ingest.rs");
const COMPLETE: &str = include_str!("../../tilegate-pipeline/src/complete.rs");
const CLI_ARGS: &str = include_str!("../../tilegate-cli/src/args.rs");

fn facts_path() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy/facts.json")
}

/// The text between the first `start` and the first `end` after it.
fn between<'a>(text: &'a str, start: &str, end: &str) -> &'a str {
    let at = text
        .find(start)
        .unwrap_or_else(|| panic!("{start:?} not found"));
    let rest = &text[at + start.len()..];
    let stop = rest
        .find(end)
        .unwrap_or_else(|| panic!("{end:?} not found after {start:?}"));
    &rest[..stop]
}

/// Every `"..."` literal in `text`, in order.
fn string_literals(text: &str) -> Vec<String> {
    text.split('"')
        .skip(1)
        .step_by(2)
        .map(str::to_owned)
        .collect()
}

/// The value of `const NAME: &str = "...";` in `source`.
fn str_const(source: &str, name: &str) -> String {
    let decl = format!("const {name}: &str = \"");
    between(source, &decl, "\"").to_owned()
}

/// A JSON string (the values here are identifiers, suffixes and durations).
fn js(s: &str) -> String {
    assert!(
        s.chars().all(|c| c != '"' && c != '\\' && !c.is_control()),
        "{s:?}"
    );
    format!("\"{s}\"")
}

fn js_list(items: &[String]) -> String {
    let inner: Vec<String> = items.iter().map(|s| js(s)).collect();
    format!("[{}]", inner.join(", "))
}

struct Table {
    suffix: String,
    key: Vec<(String, &'static str)>,
    attributes: Vec<(String, String)>,
    indexes: Vec<(String, String, String)>,
}

/// The five tables as `DynamoTables::specs` creates them, named as `DynamoTables::new` names them.
fn tables() -> Vec<Table> {
    // field -> suffix, from `jobs: format!("{prefix}-jobs"),` in `DynamoTables::new`.
    let new = between(DYNAMO_MOD, "pub fn new(", "\n    }\n");
    let mut suffixes = BTreeMap::new();
    for line in new.lines() {
        if let Some((field, rest)) = line.trim().split_once(": format!(\"{prefix}") {
            let name = rest.trim_end_matches("\"),");
            let name = name.strip_prefix('-').expect("{prefix}-NAME");
            suffixes.insert(field.to_owned(), name.to_owned());
        }
    }
    assert_eq!(suffixes.len(), 5, "DynamoTables::new: {suffixes:?}");
    let index_name = |token: &str| -> String {
        let token = token.trim();
        if let Some(lit) = token.strip_prefix('"') {
            lit.trim_end_matches('"').to_owned()
        } else if token == "ledger::DUE_INDEX" {
            str_const(DYNAMO_LEDGER, "DUE_INDEX")
        } else {
            str_const(DYNAMO_MOD, token)
        }
    };
    let specs = between(DYNAMO_SCHEMA, "fn specs(&self)", "\n    }\n");
    let mut out = Vec::new();
    for spec in specs.split("TableSpec {").skip(1) {
        let field = between(spec, "name: self.", ".clone()");
        let suffix = suffixes
            .get(field)
            .unwrap_or_else(|| panic!("table field {field}"))
            .clone();
        let hash = between(spec, "hash: \"", "\"").to_owned();
        let range = between(spec, "range: ", ",\n");
        let mut key = vec![(hash, "HASH")];
        if range != "None" {
            key.push((between(range, "Some(\"", "\")").to_owned(), "RANGE"));
        }
        let attrs = between(spec, "attrs: &[", "],\n");
        let attributes: Vec<(String, String)> = attrs
            .split('(')
            .skip(1)
            .map(|pair| {
                let (name, kind) = pair.split_once(',').expect("(name, type)");
                let kind = kind.split(')').next().unwrap().trim().to_owned();
                assert!(kind == "S" || kind == "N", "attribute type {kind}");
                (name.trim().trim_matches('"').to_owned(), kind)
            })
            .collect();
        let gsis = between(spec, "gsis: &[", "],\n");
        let indexes = gsis
            .split('(')
            .skip(1)
            .map(|triple| {
                let triple = triple.split(')').next().unwrap();
                let parts: Vec<&str> = triple.split(',').collect();
                assert_eq!(parts.len(), 3, "(index, hash, range): {triple}");
                let lits = string_literals(triple);
                let (h, r) = (&lits[lits.len() - 2], &lits[lits.len() - 1]);
                (index_name(parts[0]), h.clone(), r.clone())
            })
            .collect();
        out.push(Table {
            suffix,
            key,
            attributes,
            indexes,
        });
    }
    assert_eq!(out.len(), 5, "DynamoTables::specs");
    out
}

/// `IngestConfig`'s fields: the JSON keys it accepts (`deny_unknown_fields`, no renames).
fn ingest_fields() -> Vec<String> {
    let body = between(INGEST, "pub struct IngestConfig {", "\n}\n");
    let attrs = between(
        INGEST,
        "#[serde(default, deny_unknown_fields)]",
        "pub struct",
    );
    assert!(
        attrs.trim().is_empty(),
        "IngestConfig's serde attributes changed"
    );
    assert!(!body.contains("rename"), "IngestConfig renames a field");
    body.lines()
        .filter_map(|l| l.trim().strip_prefix("pub "))
        .map(|l| l.split(':').next().unwrap().trim().to_owned())
        .collect()
}

/// `pub const LAMBDA_ASSEMBLE_MAX_BYTES: u64 = A << B;` (or a plain number).
fn lambda_assemble_max_bytes() -> u64 {
    let expr =
        between(COMPLETE, "pub const LAMBDA_ASSEMBLE_MAX_BYTES: u64 = ", ";").replace('_', "");
    match expr.split_once("<<") {
        Some((a, b)) => a.trim().parse::<u64>().unwrap() << b.trim().parse::<u32>().unwrap(),
        None => expr.trim().parse().unwrap(),
    }
}

/// The `default_value` of the serve flag read from `env`.
fn serve_default(env: &str) -> String {
    let serve = between(CLI_ARGS, "pub struct ServeArgs {", "\n}\n");
    let after = between(serve, &format!("env = \"{env}\""), "pub ");
    between(after, "default_value = \"", "\"").to_owned()
}

fn generate() -> String {
    let dlq = tilegate_aws::sqs::dead_letter_queue_name("NAME");
    let dlq_suffix = dlq.strip_prefix("NAME").expect("NAME-...").to_owned();
    let mut t = Vec::new();
    for table in tables() {
        let key: Vec<String> = table
            .key
            .iter()
            .map(|(a, k)| format!("[{}, {}]", js(a), js(k)))
            .collect();
        let attrs: Vec<String> = table
            .attributes
            .iter()
            .map(|(a, k)| format!("{}: {}", js(a), js(k)))
            .collect();
        let idx: Vec<String> = table
            .indexes
            .iter()
            .map(|(n, h, r)| format!("{}: [[{}, \"HASH\"], [{}, \"RANGE\"]]", js(n), js(h), js(r)))
            .collect();
        t.push(format!(
            "    {}: {{\n      \"key\": [{}],\n      \"attributes\": {{{}}},\n      \"indexes\": {{{}}}\n    }}",
            js(&table.suffix),
            key.join(", "),
            attrs.join(", "),
            idx.join(", ")
        ));
    }
    format!(
        "{{\n  \"_generated\": \"by crates/tilegate-backends/tests/deploy_facts.rs from the code; TILEGATE_BLESS=1 writes it\",\n  \
         \"tables\": {{\n{}\n  }},\n  \
         \"dead_letter_suffix\": {},\n  \
         \"ingest_fields\": {},\n  \
         \"lambda_assemble_max_bytes\": {},\n  \
         \"serve_request_timeout\": {},\n  \
         \"serve_listen\": {}\n}}\n",
        t.join(",\n"),
        js(&dlq_suffix),
        js_list(&ingest_fields()),
        lambda_assemble_max_bytes(),
        js(&serve_default("TILEGATE_REQUEST_TIMEOUT")),
        js(&serve_default("TILEGATE_LISTEN")),
    )
}

/// `deploy/facts.json` is what the code defines today.
#[test]
fn deploy_facts_are_the_generated_ones() {
    let generated = generate();
    let path = facts_path();
    if std::env::var_os("TILEGATE_BLESS").is_some() {
        std::fs::write(&path, &generated).unwrap();
    }
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        committed == generated,
        "{} is not what the code defines (TILEGATE_BLESS=1 cargo nextest run -p tilegate-backends \
         -E 'test(deploy_facts)' writes it); generated:\n{generated}",
        path.display()
    );
}

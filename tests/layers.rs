//! The layers of `src/` (docs/architecture.md): every top-level module
//! may import only modules below it, so the import graph has no circle,
//! and the core never imports the terminal UI's crates.
//!
//! Reads the source, not the compiler's view: any `crate::module` path
//! (in `use`, in code or in a doc link) is an import.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let path = entry.path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// Every top-level module of the library, with its files.
fn modules() -> BTreeMap<String, Vec<PathBuf>> {
    let mut modules = BTreeMap::new();
    for entry in std::fs::read_dir(src()).unwrap().flatten() {
        let path = entry.path();
        let name = path.file_stem().unwrap().to_string_lossy().to_string();
        if name == "lib" || name == "main" {
            continue;
        }
        let mut files = Vec::new();
        if path.is_dir() {
            rust_files(&path, &mut files);
        } else if path.extension().is_some_and(|e| e == "rs") {
            files.push(path);
        } else {
            continue;
        }
        modules.insert(name, files);
    }
    modules
}

fn ident(s: &str) -> &str {
    let end = s
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .unwrap_or(s.len());
    &s[..end]
}

/// The first path segment of each item of a `{a, b::c, d::{e}}` group.
fn group_heads(s: &str) -> Vec<String> {
    let mut heads = Vec::new();
    let mut depth = 0;
    let mut at_item = true;
    for (i, c) in s.char_indices() {
        match c {
            '{' => depth += 1,
            '}' if depth == 0 => break,
            '}' => depth -= 1,
            ',' if depth == 0 => at_item = true,
            c if at_item && (c.is_ascii_alphabetic() || c == '_') && depth == 0 => {
                heads.push(ident(&s[i..]).to_string());
                at_item = false;
            }
            _ => {}
        }
    }
    heads
}

/// The top-level modules `text` names through `crate::`.
fn imports(text: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for (i, _) in text.match_indices("crate::") {
        // `foo_crate::` or `other::crate::` are not this crate.
        let before = text[..i].chars().next_back();
        if before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':') {
            continue;
        }
        let rest = &text[i + "crate::".len()..];
        match rest.strip_prefix('{') {
            Some(group) => out.extend(group_heads(group)),
            None => {
                out.insert(ident(rest).to_string());
            }
        }
    }
    out
}

fn graph() -> BTreeMap<String, BTreeSet<String>> {
    let modules = modules();
    modules
        .iter()
        .map(|(name, files)| {
            let mut deps = BTreeSet::new();
            for f in files {
                deps.extend(imports(&std::fs::read_to_string(f).unwrap()));
            }
            deps.retain(|d| d != name && modules.contains_key(d));
            (name.clone(), deps)
        })
        .collect()
}

/// A circle through the graph, if there is one.
fn find_circle(graph: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn visit(
        node: &str,
        graph: &BTreeMap<String, BTreeSet<String>>,
        path: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(at) = path.iter().position(|n| n == node) {
            let mut circle = path[at..].to_vec();
            circle.push(node.to_string());
            return Some(circle);
        }
        if done.contains(node) {
            return None;
        }
        path.push(node.to_string());
        for next in &graph[node] {
            if let Some(c) = visit(next, graph, path, done) {
                return Some(c);
            }
        }
        path.pop();
        done.insert(node.to_string());
        None
    }
    let mut done = BTreeSet::new();
    graph
        .keys()
        .find_map(|n| visit(n, graph, &mut Vec::new(), &mut done))
}

#[test]
fn the_import_graph_of_src_has_no_circle() {
    let graph = graph();
    assert!(graph.len() > 10, "too few modules found: {graph:?}");
    if let Some(circle) = find_circle(&graph) {
        panic!(
            "src/ has an import circle: {}\n(each module may import only modules below it; see docs/architecture.md)",
            circle.join(" -> ")
        );
    }
}

#[test]
fn the_ui_and_the_command_line_sit_on_the_client_session() {
    let graph = graph();
    assert!(
        !graph["ui"].contains("cli"),
        "ui imports cli: the command line may start the UI, not the other way round"
    );
    assert!(graph["ui"].contains("client") && graph["cli"].contains("client"));
    for (name, deps) in &graph {
        if name != "cli" && name != "ui" {
            assert!(
                !deps.contains("client"),
                "{name} imports client, which sits above it"
            );
        }
    }
}

#[test]
fn the_core_never_imports_the_terminal_ui() {
    for (name, files) in modules() {
        if ["ui", "cli", "client"].contains(&name.as_str()) {
            continue;
        }
        for f in files {
            let text = std::fs::read_to_string(&f).unwrap();
            for crate_name in ["ratatui", "crossterm", "lazaret_widgets::pane"] {
                assert!(
                    !text.contains(&format!("{crate_name}::")),
                    "{} (module {name}, part of the core) uses {crate_name}",
                    f.display()
                );
            }
        }
    }
}

#[test]
fn the_checker_sees_every_form_of_import() {
    let text = "use crate::{config::Config, net, engine::{a, b}};\nlet x = crate::domain::y;\nlazaret_sidecar::crate::nope";
    let found: Vec<String> = imports(text).into_iter().collect();
    assert_eq!(found, ["config", "domain", "engine", "net"]);
    let mut g = BTreeMap::new();
    g.insert("a".to_string(), BTreeSet::from(["b".to_string()]));
    g.insert("b".to_string(), BTreeSet::from(["a".to_string()]));
    assert_eq!(find_circle(&g).unwrap(), ["a", "b", "a"]);
    g.insert("b".to_string(), BTreeSet::new());
    assert!(find_circle(&g).is_none());
}

//! Keeps the crate's layers true (docs/architecture.md): no module imports a module that
//! imports it back, and no module imports one from a layer above its own. Reads the sources
//! as text: every `crate::…` and `super::…` path outside comments and unit-test modules is an
//! import.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Layers from the top (0) down; the longest matching prefix decides a module's layer.
const LAYERS: &[(&str, usize)] = &[
    // Wiring: builds the services, knows every handler, serves the router.
    ("app", 0),
    ("server", 0),
    ("telemetry", 0),
    // A test over the handlers and what they await (`#[cfg(test)]` only).
    ("future_sizes", 0),
    // Route handlers.
    ("a2a::card", 1),
    ("a2a::card_keys", 1),
    ("a2a::rpc", 1),
    ("a2a::observe", 1),
    ("outbound::registrations", 1),
    ("outbound::delegation", 1),
    ("health", 1),
    ("http::retired", 1),
    ("preflight", 1),
    ("ops", 1),
    ("contract_check", 1),
    // Stages and domain services, and the route state they are assembled into.
    ("a2a", 2),
    ("outbound", 2),
    ("http", 2),
    ("auth", 2),
    ("dispatch", 2),
    ("reconciler", 2),
    ("access", 2),
    ("changes", 2),
    // Ports (PostgreSQL, Q, Redis, remote agents) and what everything shares.
    ("outbound::client", 3),
    ("outbound::policy", 3),
    ("outbound::credential", 3),
    ("card_signature", 3),
    ("store", 3),
    ("upstream", 3),
    ("lease", 3),
    ("redis_link", 3),
    ("shared_limits", 3),
    ("config", 3),
    ("error", 3),
    ("metrics", 3),
    ("trace_context", 3),
    ("client_address", 3),
    // Middleware plumbing the request metrics (a port's neighbour) run on.
    ("http::around", 3),
    ("tls", 3),
    ("writable", 3),
    ("json_bounds", 3),
];

fn layer(module: &str) -> usize {
    LAYERS
        .iter()
        .filter(|(prefix, _)| module == *prefix || module.starts_with(&format!("{prefix}::")))
        .max_by_key(|(prefix, _)| prefix.len())
        .map(|(_, layer)| *layer)
        .unwrap_or_else(|| panic!("module {module} has no layer in src/layering.rs"))
}

fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            if path.file_name().is_some_and(|n| n != "bin") {
                sources(&path, out);
            }
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// `src/a2a/tasks/mod.rs` → `a2a::tasks`; `src/lib.rs` and `src/main.rs` → none.
fn module_of(root: &Path, file: &Path) -> Option<String> {
    let relative = file.strip_prefix(root).unwrap().with_extension("");
    let mut parts: Vec<String> = relative
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    if parts.last().is_some_and(|p| p == "mod") {
        parts.pop();
    }
    match parts.as_slice() {
        [only] if only == "lib" || only == "main" || only == "layering" => None,
        _ => Some(parts.join("::")),
    }
}

/// The source without comments and without `#[cfg(test)]` items (from the attribute on).
fn code(text: &str) -> String {
    let text = text.split("#[cfg(test)]").next().unwrap_or_default();
    text.lines()
        .map(|line| line.split("//").next().unwrap_or_default())
        .collect::<Vec<_>>()
        .join("\n")
}

/// Every path written after `crate::` or `super::`, with `{a, b::c}` groups expanded.
fn paths(code: &str, module: &str, is_mod_file: bool) -> Vec<Vec<String>> {
    let mut found = Vec::new();
    for (anchor, base) in [
        ("crate::", Vec::new()),
        ("super::", {
            let mut parent: Vec<String> = module.split("::").map(str::to_owned).collect();
            if !is_mod_file {
                parent.pop();
            }
            // `super` of a mod.rs file is its parent's parent module.
            if is_mod_file {
                parent.pop();
            }
            parent
        }),
    ] {
        let mut rest = code;
        while let Some(at) = rest.find(anchor) {
            let preceded_by_ident = rest[..at]
                .chars()
                .last()
                .is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':');
            rest = &rest[at + anchor.len()..];
            if preceded_by_ident {
                continue;
            }
            let end = path_end(rest);
            for tail in expand(&rest[..end]) {
                let mut path = base.clone();
                path.extend(
                    tail.split("::")
                        .map(str::trim)
                        .filter(|s| !s.is_empty() && *s != "self")
                        .map(str::to_owned),
                );
                found.push(path);
            }
        }
    }
    found
}

/// Where a path (possibly with a `{…}` group) ends.
fn path_end(s: &str) -> usize {
    let mut depth = 0usize;
    for (i, c) in s.char_indices() {
        match c {
            '{' => depth += 1,
            '}' if depth == 0 => return i,
            '}' => depth -= 1,
            c if depth == 0 && !(c.is_alphanumeric() || c == '_' || c == ':') => return i,
            _ => {}
        }
    }
    s.len()
}

fn expand(path: &str) -> Vec<String> {
    let Some(open) = path.find('{') else {
        return vec![path.to_string()];
    };
    let (prefix, group) = (&path[..open], &path[open + 1..path.len() - 1]);
    let mut items = Vec::new();
    let (mut depth, mut start) = (0usize, 0usize);
    for (i, c) in group.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                items.push(&group[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    items.push(&group[start..]);
    items
        .into_iter()
        .map(str::trim)
        .filter(|item| !item.is_empty())
        .flat_map(|item| expand(&format!("{prefix}{item}")))
        .collect()
}

/// Import edges between modules, each module to the modules whose items it names.
fn graph() -> BTreeMap<String, BTreeSet<String>> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    sources(&root, &mut files);
    let modules: BTreeMap<String, PathBuf> = files
        .iter()
        .filter_map(|f| module_of(&root, f).map(|m| (m, f.clone())))
        .collect();
    let mut edges = BTreeMap::new();
    for (module, file) in &modules {
        let is_mod_file = file.file_name().is_some_and(|n| n == "mod.rs");
        let text = std::fs::read_to_string(file).unwrap();
        let mut targets = BTreeSet::new();
        for path in paths(&code(&text), module, is_mod_file) {
            // The longest prefix of the path that is a module.
            let target = (1..=path.len())
                .rev()
                .map(|n| path[..n].join("::"))
                .find(|candidate| modules.contains_key(candidate));
            if let Some(target) = target.filter(|t| t != module) {
                targets.insert(target);
            }
        }
        edges.insert(module.clone(), targets);
    }
    edges
}

#[test]
fn no_module_imports_a_module_that_imports_it_back() {
    let edges = graph();
    let reaches = |from: &str, to: &str| {
        let mut seen = BTreeSet::new();
        let mut stack = vec![from.to_string()];
        while let Some(m) = stack.pop() {
            if m == to {
                return true;
            }
            if seen.insert(m.clone()) {
                stack.extend(edges.get(&m).into_iter().flatten().cloned());
            }
        }
        false
    };
    let cycles: Vec<String> = edges
        .iter()
        .flat_map(|(from, targets)| targets.iter().map(move |to| (from, to)))
        .filter(|(from, to)| reaches(to, from))
        .map(|(from, to)| format!("{from} -> {to}"))
        .collect();
    assert!(cycles.is_empty(), "import cycles: {cycles:#?}");
}

#[test]
fn nothing_imports_upward() {
    let upward: Vec<String> = graph()
        .iter()
        .flat_map(|(from, targets)| targets.iter().map(move |to| (from, to)))
        .filter(|(from, to)| layer(to) < layer(from))
        .map(|(from, to)| {
            format!(
                "{from} (layer {}) -> {to} (layer {})",
                layer(from),
                layer(to)
            )
        })
        .collect();
    assert!(upward.is_empty(), "upward imports: {upward:#?}");
}

#[test]
fn the_reader_sees_real_edges() {
    // A parser that saw nothing would pass both checks above.
    let edges = graph();
    assert!(edges["a2a::rpc"].contains("http::body_limit"));
    assert!(edges["a2a"].contains("http::authorize"));
    assert!(edges["a2a::tasks::get"].contains("a2a::tasks"));
    assert!(edges["app"].contains("a2a::card"));
    assert!(edges["dispatch"].contains("store"));
    assert!(!edges["store"].contains("a2a"));
}

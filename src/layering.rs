//! Checks of the module layering, made by reading the crate's own source files
//! (test-only).
//!
//! Rust lets any module `use` any other, so the rooms this crate keeps apart — the
//! two halves of [`crate::pg`], the front (`config` → `cli` → `exit`) — are kept apart
//! by tests that scan the paths each room's files mention: `pg` counts doc links
//! too (a link into the other room is a dependency for a reader), the front graph
//! only code.
//!
//! Invariant: every helper reads real files under `src/` and fails when it finds
//! none, so a moved folder can never make a layering test pass vacuously.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The `.rs` files under `src/<rel>` (a file or a folder, recursively), with their
/// text, in path order. Panics when there are none.
pub(crate) fn sources(rel: &str) -> Vec<(PathBuf, String)> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src").join(rel);
    let mut files = Vec::new();
    collect(&root, &mut files);
    files.sort();
    assert!(!files.is_empty(), "no Rust file at {}", root.display());
    files
        .into_iter()
        .map(|path| {
            let text = std::fs::read_to_string(&path)
                .unwrap_or_else(|err| panic!("reading {}: {err}", path.display()));
            (path, text)
        })
        .collect()
}

fn collect(path: &Path, out: &mut Vec<PathBuf>) {
    if path.is_dir() {
        let entries = std::fs::read_dir(path)
            .unwrap_or_else(|err| panic!("listing {}: {err}", path.display()));
        for entry in entries {
            collect(&entry.expect("directory entry").path(), out);
        }
    } else if path.extension().is_some_and(|ext| ext == "rs") {
        out.push(path.to_owned());
    }
}

/// The lines of the files under `src/<rel>` that contain any of `needles`, as
/// `path:line: text`, for an assertion message.
pub(crate) fn lines_mentioning(rel: &str, needles: &[&str]) -> Vec<String> {
    let mut hits = Vec::new();
    for (path, text) in sources(rel) {
        for (n, line) in text.lines().enumerate() {
            if needles.iter().any(|needle| line.contains(needle)) {
                hits.push(format!("{}:{}: {}", path.display(), n + 1, line.trim()));
            }
        }
    }
    hits
}

/// Which of `modules` each of `modules` mentions as `crate::<other>` in the code of
/// its files (`src/<m>.rs` or `src/<m>/**`; comments and doc links are not imports).
pub(crate) fn import_graph(modules: &[&str]) -> BTreeMap<String, BTreeSet<String>> {
    let mut graph = BTreeMap::new();
    for &module in modules {
        let file = format!("{module}.rs");
        let rel = if Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("src")
            .join(&file)
            .is_file()
        {
            file
        } else {
            module.to_owned()
        };
        let mut uses = BTreeSet::new();
        for (_, text) in sources(&rel) {
            let code: String = text
                .lines()
                .filter(|line| !line.trim_start().starts_with("//"))
                .collect::<Vec<_>>()
                .join("\n");
            let text = code.as_str();
            for &other in modules {
                let path = format!("crate::{other}");
                let mentioned = text.match_indices(&path).any(|(at, _)| {
                    let next = text[at + path.len()..].chars().next();
                    !next.is_some_and(|c| c.is_alphanumeric() || c == '_')
                });
                if other != module && mentioned {
                    uses.insert(other.to_owned());
                }
            }
        }
        graph.insert(module.to_owned(), uses);
    }
    graph
}

/// A cycle in `graph`, as the modules along it, if there is one.
pub(crate) fn find_cycle(graph: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn visit(
        node: &str,
        graph: &BTreeMap<String, BTreeSet<String>>,
        path: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(start) = path.iter().position(|n| n == node) {
            let mut cycle = path[start..].to_vec();
            cycle.push(node.to_owned());
            return Some(cycle);
        }
        if done.contains(node) {
            return None;
        }
        path.push(node.to_owned());
        for next in graph.get(node).into_iter().flatten() {
            if let Some(cycle) = visit(next, graph, path, done) {
                return Some(cycle);
            }
        }
        path.pop();
        done.insert(node.to_owned());
        None
    }
    let mut done = BTreeSet::new();
    graph
        .keys()
        .find_map(|node| visit(node, graph, &mut Vec::new(), &mut done))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The front: `config` reads `cli`, `failure` reads both and the errors of every
    /// room; `cli` and `exit` are read, never reading back.
    const FRONT: &[&str] = &["cli", "config", "exit", "failure"];

    #[test]
    fn front_modules_form_no_cycle() {
        let graph = import_graph(FRONT);
        assert_eq!(find_cycle(&graph), None, "import graph: {graph:?}");
        // The direction, not only the absence of a cycle.
        assert!(graph["config"].contains("cli"), "{graph:?}");
        assert!(graph["cli"].contains("exit"), "{graph:?}");
        assert!(graph["exit"].is_empty(), "exit is a leaf: {graph:?}");
    }

    /// Every top-level module of the crate (`src/<m>.rs` or `src/<m>/`).
    fn top_level_modules() -> Vec<String> {
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
        let mut modules: Vec<String> = std::fs::read_dir(&src)
            .expect("listing src")
            .filter_map(|entry| {
                let path = entry.expect("directory entry").path();
                let name = path.file_stem()?.to_str()?.to_owned();
                let module = path.is_dir() || path.extension().is_some_and(|e| e == "rs");
                (module && !matches!(name.as_str(), "lib" | "main")).then_some(name)
            })
            .collect();
        modules.sort();
        modules.dedup();
        modules
    }

    /// Rooms depend one way: no top-level module reaches itself through others
    /// (`run` owns its supervisor for this reason).
    #[test]
    fn top_level_modules_form_no_cycle() {
        let modules = top_level_modules();
        assert!(modules.len() > 20, "modules found: {modules:?}");
        let names: Vec<&str> = modules.iter().map(String::as_str).collect();
        let graph = import_graph(&names);
        assert_eq!(find_cycle(&graph), None, "import graph: {graph:?}");
    }

    /// A file a reader can hold: none over 800 lines under `src/` or `tests/`
    /// (split by concept past that).
    #[test]
    fn no_source_file_is_over_800_lines() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"));
        let mut files = Vec::new();
        collect(&root.join("src"), &mut files);
        collect(&root.join("tests"), &mut files);
        assert!(files.len() > 100, "files found: {}", files.len());
        let long: Vec<String> = files
            .iter()
            .filter_map(|path| {
                let lines = std::fs::read_to_string(path).ok()?.lines().count();
                (lines > 800).then(|| format!("{}: {lines} lines", path.display()))
            })
            .collect();
        assert!(long.is_empty(), "split these by concept: {long:#?}");
    }

    #[test]
    fn a_cycle_is_found_and_a_chain_is_not() {
        let graph = |edges: &[(&str, &str)]| {
            let mut g: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
            for (from, to) in edges {
                g.entry((*from).into()).or_default().insert((*to).into());
                g.entry((*to).into()).or_default();
            }
            g
        };
        let chain = graph(&[("cli", "config"), ("config", "exit")]);
        assert_eq!(find_cycle(&chain), None);
        let cycle = graph(&[("cli", "config"), ("config", "exit"), ("exit", "cli")]);
        assert_eq!(
            find_cycle(&cycle).unwrap(),
            ["cli", "config", "exit", "cli"]
        );
    }
}

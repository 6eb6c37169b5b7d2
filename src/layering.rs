//! Checks of the module layering, made by reading the crate's own source files
//! (test-only).
//!
//! Rust lets any module `use` any other, so the rooms this crate keeps apart — the
//! two halves of [`crate::pg`], the front (`cli` → `config` → `exit`) — are kept apart
//! by tests that scan the `use` paths of each room's files. A module's dependencies
//! are the `crate::<module>` paths its files mention, in code or in doc links (a doc
//! link is a dependency for a reader too).
//!
//! Invariant: every helper reads real files under `src/` and fails when it finds
//! none, so a moved folder can never make a layering test pass vacuously.

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

//! `.dockerignore` patterns as Docker applies them to the build context, so the
//! Dockerfile checks can tell whether a `COPY` source is still in the context.
//!
//! Docker's rules (moby's `patternmatcher`), and how they are met here:
//! - a pattern is anchored at the context root and matches the whole path: `*.log`
//!   excludes `a.log` but not `src/a.log`. This is where `.gitignore` differs (a
//!   pattern without `/` matches at any depth), so the `ignore` crate's gitignore
//!   matcher does not fit; a `globset` glob with `literal_separator` does;
//! - `*` and `?` never cross `/`; `**` spans directories; `[…]` classes and `\`
//!   escapes as in Go's `filepath.Match`: all of these are `globset`'s too;
//! - a pattern that matches a directory excludes everything below it: the parents of
//!   the path are tried as well (hand-written below, in [`excludes`]);
//! - the pattern is cleaned first: a leading `/` or `./` and a trailing `/` do not
//!   change what it matches.
//!
//! One difference is left: `globset` reads `{a,b}` as alternatives, Docker as literal
//! braces. No pattern here uses braces; one that did would make these checks report an
//! exclusion Docker does not make (a false failure, never a missed one).

use globset::{GlobBuilder, GlobMatcher};

/// The patterns of a `.dockerignore` text that exclude (comments, blank lines and
/// `!` re-inclusions skipped: a path any pattern excludes counts as excluded).
pub(super) fn exclusions(text: &str) -> Vec<&str> {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#') && !l.starts_with('!'))
        .collect()
}

/// Whether the `.dockerignore` `pattern` matches `path` or one of its parent
/// directories (so the path is not in the build context).
pub(super) fn excludes(pattern: &str, path: &str) -> bool {
    let matcher = matcher(pattern);
    let path = path.trim_start_matches("./").trim_end_matches('/');
    let mut prefix = String::new();
    for part in path.split('/') {
        if !prefix.is_empty() {
            prefix.push('/');
        }
        prefix.push_str(part);
        if matcher.is_match(&prefix) {
            return true;
        }
    }
    false
}

fn matcher(pattern: &str) -> GlobMatcher {
    let cleaned = pattern
        .trim()
        .trim_start_matches('/')
        .trim_start_matches("./")
        .trim_end_matches('/');
    GlobBuilder::new(cleaned)
        .literal_separator(true)
        .backslash_escape(true)
        .build()
        .unwrap_or_else(|e| panic!(".dockerignore pattern {pattern:?}: {e}"))
        .compile_matcher()
}

#[test]
fn dockerignore_matching() {
    assert!(excludes("target", "target"));
    assert!(excludes("target/", "target/release/x"));
    assert!(excludes("*.log", "a.log"));
    assert!(!excludes("*.log", "src/a.log"));
    assert!(!excludes("target", "src"));
    assert!(!excludes("src/*.rs", "src"));
    assert!(excludes("src/*.rs", "src/main.rs"));
}

#[test]
fn dockerignore_matching_beyond_star_and_question_mark() {
    assert!(excludes("/target", "target/debug"));
    assert!(excludes("./fuzz/", "fuzz"));
    assert!(excludes("**/*.log", "a.log"));
    assert!(excludes("**/*.log", "src/deep/a.log"));
    assert!(excludes("src/**", "src/main.rs"));
    assert!(excludes("[ab].txt", "b.txt"));
    assert!(!excludes("[ab].txt", "c.txt"));
    assert!(excludes("?.txt", "x.txt"));
    assert!(!excludes("?.txt", "x/y.txt"));
    assert!(excludes(r"a\*b", "a*b"));
    assert!(!excludes(r"a\*b", "axb"));
}

#[test]
fn dockerignore_exclusions_skip_comments_and_reinclusions() {
    let text = "# context\ntarget\n\n  *.log  \n!keep.log\n";
    assert_eq!(exclusions(text), vec!["target", "*.log"]);
}

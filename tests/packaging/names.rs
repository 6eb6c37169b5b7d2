//! Every `PGOUTBOX_*` name in the packaging and the README is the environment twin of a
//! real flag, so no document tells a user to set a variable the relay never reads —
//! or one of the few variables of the repository's own scripts (the test broker, the
//! quickstart's broker), each checked to be read where it is said to be.

use std::collections::BTreeSet;

use regex::Regex;

use super::{cli_env_names, read};

/// `PGOUTBOX_` starting a word, then at least one upper-case letter or digit (trailing
/// `_` dropped). Placeholders such as `PGOUTBOX_<NAME>` or `PGOUTBOX_*` have nothing
/// name-like after the prefix and do not match; ASCII word boundaries, as in the
/// shell, so `XPGOUTBOX_…` and `X_PGOUTBOX_…` are not names either.
fn pgoutbox_names(text: &str) -> BTreeSet<String> {
    let name = Regex::new(r"(?-u:\b)PGOUTBOX_[A-Z0-9_]*[A-Z0-9]").expect("valid regex");
    name.find_iter(text)
        .map(|m| m.as_str().to_owned())
        .collect()
}

#[test]
fn every_pgoutbox_name_is_a_cli_env_twin() {
    let known = cli_env_names();
    // The walk must see the flags the packaging relies on, or it proves nothing.
    for name in ["PGOUTBOX_DATABASE_URL", "PGOUTBOX_BROKERS", "PGOUTBOX_SLOT"] {
        assert!(
            known.contains(name),
            "{name} not found in the CLI: {known:?}"
        );
    }
    // Variables of the repository's own scripts, not of the relay: each must be read
    // by the file named here (so a renamed one still fails).
    let scripts = [
        ("PGOUTBOX_TEST_BROKER", "tests/support/kafka/broker.rs"),
        ("PGOUTBOX_QUICKSTART_BROKER", "scripts/quickstart.sh"),
        ("PGOUTBOX_LONG", "tests/faults.rs"),
    ];
    for (name, reader) in scripts {
        assert!(
            read(reader).contains(name),
            "{reader} no longer reads {name}"
        );
    }
    let known: BTreeSet<String> = known
        .into_iter()
        .chain(scripts.iter().map(|(n, _)| n.to_string()))
        .collect();
    let mut unknown = Vec::new();
    for file in [
        "docker-compose.yml",
        "Dockerfile",
        "deploy/pgoutbox.service",
        "deploy/pgoutbox.env.example",
        "deploy/kubernetes/configmap.yaml",
        "deploy/kubernetes/statefulset.yaml",
        "README.md",
    ] {
        for name in pgoutbox_names(&read(file)) {
            if !known.contains(&name) {
                unknown.push(format!("{file}: {name}"));
            }
        }
    }
    assert!(
        unknown.is_empty(),
        "PGOUTBOX_* names the CLI does not read:\n  {}\nknown: {known:?}",
        unknown.join("\n  ")
    );
}

#[test]
fn pgoutbox_name_scanner() {
    let names = pgoutbox_names(
        "`PGOUTBOX_SLOT`, PGOUTBOX_<NAME>, PGOUTBOX_*, XPGOUTBOX_NO, PGOUTBOX_DRAIN_TIMEOUT=1s",
    );
    let expected: BTreeSet<String> = ["PGOUTBOX_SLOT", "PGOUTBOX_DRAIN_TIMEOUT"]
        .into_iter()
        .map(String::from)
        .collect();
    assert_eq!(names, expected);
}

#[test]
fn pgoutbox_name_scanner_word_boundaries() {
    let names = pgoutbox_names("X_PGOUTBOX_NO éPGOUTBOX_A (PGOUTBOX_B_) PGOUTBOX__C\nPGOUTBOX_");
    let expected: BTreeSet<String> = ["PGOUTBOX_A", "PGOUTBOX_B", "PGOUTBOX__C"]
        .into_iter()
        .map(String::from)
        .collect();
    assert_eq!(names, expected);
}

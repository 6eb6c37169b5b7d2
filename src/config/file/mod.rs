//! The TOML configuration file (`--config FILE` or `PGOUTBOX_CONFIG`).
//!
//! Owns the file layer of the precedence **flag > environment > file > default**.
//! Every top-level key is a flag's long name with `_` for `-` (Debezium aliases such
//! as `"table.field.event.key"` are accepted too); its value is exported as that
//! flag's `PGOUTBOX_*` variable *only when the variable is not already set*, before
//! the command line is parsed — so clap's own flag > env > default order does the
//! rest. `[tables."schema.name"]` sections give one outbox table its own column
//! mapping and topic template.
//!
//! Invariants: every finding names the file, line and column and the key
//! ([`check::Place`]); an unknown key is an error with the closest valid key (a typo
//! never silently falls back to a default); a value is checked by its flag's own
//! parser before anything runs, so the error points at the file, not at the
//! environment variable it is carried in; the file's values are never logged (they
//! may hold secrets).

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::{Path, PathBuf};

use crate::cli::router_keys;

pub mod check;

use check::{Flags, Place};

/// Keys allowed inside a `[tables."…"]` section.
pub const TABLE_KEYS: &[&str] = &[
    "route_by_field",
    "topic_template",
    "id_column",
    "key_column",
    "event_type_column",
    "payload_column",
    "timestamp_column",
    "aggregate_type_column",
    "trace_context",
];

/// A problem with the configuration file. Each finding in the file names its place
/// (`file:line:column`) and the key.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FileError {
    /// Unreadable file.
    #[error("cannot read config file {path}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// Not TOML.
    #[error("{at}: config file is not valid TOML: {message}")]
    Parse { at: Place, message: String },
    /// A key no flag has.
    #[error("{at}: unknown key {key:?} in the config file; {hint}")]
    UnknownKey {
        at: Place,
        key: String,
        /// "did you mean …?", or the valid keys.
        hint: String,
    },
    /// A value the key's flag would refuse, or of the wrong shape.
    #[error("{at}: key {key:?}: {reason}")]
    BadValue {
        at: Place,
        key: String,
        reason: String,
    },
}

/// Per-table overrides from `[tables."schema.name"]`.
pub type TableOverrides = BTreeMap<String, BTreeMap<String, String>>;

/// Top-level file key → environment variable, from the clap definitions.
pub fn key_to_env() -> BTreeMap<String, String> {
    let flags = Flags::from_cli();
    flags
        .keys()
        .filter_map(|k| Some((k.to_owned(), flags.get(k)?.env.clone())))
        .collect()
}

/// The config file named by `--config FILE` / `--config=FILE` in `args`, else by
/// `PGOUTBOX_CONFIG`.
pub fn find_path(args: &[OsString]) -> Option<PathBuf> {
    let mut iter = args.iter();
    while let Some(arg) = iter.next() {
        let text = arg.to_string_lossy();
        if text == "--config" {
            return iter.next().map(PathBuf::from);
        }
        if let Some(path) = text.strip_prefix("--config=") {
            return Some(PathBuf::from(path));
        }
    }
    std::env::var_os("PGOUTBOX_CONFIG").map(PathBuf::from)
}

/// A key with its place. Values are not spanned: a `Spanned<toml::Value>` holding
/// a table with a quoted key does not deserialize (toml 0.8), and the key's line is
/// the value's line anyway.
type Key = toml::Spanned<String>;
type Value = toml::Value;

/// The `[tables."…"]` sections, read in a second pass for their keys' places.
#[derive(serde::Deserialize)]
struct Sections {
    #[serde(default)]
    tables: BTreeMap<String, BTreeMap<Key, Value>>,
}

/// The file being resolved: its path and text, for places.
struct Source<'a> {
    path: &'a Path,
    text: &'a str,
}

impl Source<'_> {
    fn at(&self, offset: usize) -> Place {
        Place::new(self.path, self.text, offset)
    }

    fn parse<T: serde::de::DeserializeOwned>(&self) -> Result<T, FileError> {
        toml::from_str(self.text).map_err(|e: toml::de::Error| FileError::Parse {
            at: self.at(e.span().map_or(0, |s| s.start)),
            message: e.message().trim_end().replace('\n', "; "),
        })
    }

    fn unknown<'v>(&self, key: &Key, valid: impl IntoIterator<Item = &'v str>) -> FileError {
        let valid: Vec<&str> = valid.into_iter().collect();
        let hint = match check::suggest(key.get_ref(), valid.iter().copied()) {
            Some(close) => format!("did you mean {close:?}?"),
            None => format!("valid keys: {}", valid.join(", ")),
        };
        FileError::UnknownKey {
            at: self.at(key.span().start),
            key: key.get_ref().clone(),
            hint,
        }
    }

    fn bad(&self, key: &Key, name: &str, reason: String) -> FileError {
        FileError::BadValue {
            at: self.at(key.span().start),
            key: name.to_owned(),
            reason,
        }
    }
}

/// Parse `text` and compute the variables to export plus the table overrides.
/// `is_set(env)` tells whether a variable is already set (then it wins). Every value
/// is checked, also one a variable overrides: the file is wrong either way.
pub fn resolve(
    path: &Path,
    text: &str,
    is_set: &dyn Fn(&str) -> bool,
) -> Result<(Vec<(String, String)>, TableOverrides), FileError> {
    let source = Source { path, text };
    let top: BTreeMap<Key, Value> = source.parse()?;
    let flags = Flags::from_cli();
    let mut exports = Vec::new();
    let mut table_names: Vec<String> = Vec::new();
    for (key, value) in &top {
        if key.get_ref() == "tables" {
            continue;
        }
        let valid = flags.keys().chain(["tables"]);
        let flag = flags
            .get(key.get_ref())
            .ok_or_else(|| source.unknown(key, valid))?;
        let text = flag
            .text(value)
            .map_err(|reason| source.bad(key, key.get_ref(), reason))?;
        if key.get_ref() == "table" {
            table_names.splice(0..0, text.split(',').map(str::to_owned));
        } else if !is_set(&flag.env) {
            exports.push((flag.env.clone(), text));
        }
    }
    let overrides = table_sections(&source, &top, &mut table_names)?;
    if !table_names.is_empty() && !is_set("PGOUTBOX_TABLE") {
        table_names.dedup();
        exports.push(("PGOUTBOX_TABLE".to_owned(), table_names.join(",")));
    }
    Ok((exports, overrides))
}

/// The `[tables."schema.name"]` sections: their overrides, and their names appended
/// to `table_names`.
fn table_sections(
    source: &Source<'_>,
    top: &BTreeMap<Key, Value>,
    table_names: &mut Vec<String>,
) -> Result<TableOverrides, FileError> {
    let mut overrides = TableOverrides::new();
    if !top.keys().any(|k| k.get_ref() == "tables") {
        return Ok(overrides);
    }
    let sections: Sections = source.parse()?;
    for (name, section) in sections.tables {
        let mut o = BTreeMap::new();
        for (k, v) in &section {
            let key = keys_alias(k.get_ref());
            let full = format!("tables.{name}.{key}");
            if !TABLE_KEYS.contains(&key.as_str()) {
                return Err(source.unknown(k, TABLE_KEYS.iter().copied()));
            }
            let text = check::scalar(v).ok_or_else(|| {
                source.bad(k, &full, "must be a string, number or boolean".to_owned())
            })?;
            o.insert(key, text);
        }
        table_names.push(name.clone());
        overrides.insert(name, o);
    }
    Ok(overrides)
}

/// Debezium-style keys inside a table section map to ours
/// ([`crate::cli::router_keys`]).
fn keys_alias(key: &str) -> String {
    router_keys::key_for_debezium(key)
        .unwrap_or(key)
        .replace('-', "_")
}

/// Load the file named in `args` (if any), export its values into the process
/// environment where unset, and return the per-table overrides. Call before
/// parsing the command line and before any thread starts.
pub fn apply(args: &[OsString]) -> Result<TableOverrides, FileError> {
    let Some(path) = find_path(args) else {
        return Ok(TableOverrides::new());
    };
    let text = std::fs::read_to_string(&path).map_err(|source| FileError::Read {
        path: path.clone(),
        source,
    })?;
    let (exports, overrides) = resolve(&path, &text, &|env| std::env::var_os(env).is_some())?;
    for (env, value) in exports {
        // Single-threaded at this point (called first thing in main).
        std::env::set_var(env, value);
    }
    Ok(overrides)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(text: &str, set: &[&str]) -> Result<(Vec<(String, String)>, TableOverrides), FileError> {
        let set: Vec<String> = set.iter().map(|s| s.to_string()).collect();
        resolve(Path::new("test.toml"), text, &move |env| {
            set.iter().any(|s| s == env)
        })
    }

    #[test]
    fn keys_become_env_unless_env_is_set() {
        let (exports, _) = run(
            "brokers = \"k:9092\"\nslot = \"s1\"\nkafka_option = [\"linger.ms=10\", \"batch.size=1000\"]\nmax_in_flight = 10",
            &["PGOUTBOX_SLOT"],
        )
        .unwrap();
        assert!(exports.contains(&("PGOUTBOX_BROKERS".into(), "k:9092".into())));
        assert!(exports.contains(&(
            "PGOUTBOX_KAFKA_OPTION".into(),
            "linger.ms=10,batch.size=1000".into()
        )));
        assert!(exports.contains(&("PGOUTBOX_MAX_IN_FLIGHT".into(), "10".into())));
        assert!(
            !exports.iter().any(|(k, _)| k == "PGOUTBOX_SLOT"),
            "env wins over the file"
        );
    }

    #[test]
    fn unknown_keys_are_errors_listing_valid_ones() {
        let err = run("brokerz = \"x\"", &[]).unwrap_err().to_string();
        assert!(err.contains("unknown key \"brokerz\""), "{err}");
        assert!(err.contains("brokers"), "{err}");
        assert!(run("[tables.\"public.o\"]\nbogus = 1", &[]).is_err());
    }

    #[test]
    fn table_sections_give_tables_and_overrides() {
        let (exports, overrides) = run(
            "[tables.\"public.order_outbox\"]\ntopic_template = \"orders.${routedByValue}\"\n\"table.field.event.key\" = \"order_id\"\n[tables.\"public.payment_outbox\"]\n",
            &[],
        )
        .unwrap();
        assert!(exports.contains(&(
            "PGOUTBOX_TABLE".into(),
            "public.order_outbox,public.payment_outbox".into()
        )));
        assert_eq!(overrides["public.order_outbox"]["key_column"], "order_id");
        assert_eq!(
            overrides["public.order_outbox"]["topic_template"],
            "orders.${routedByValue}"
        );
    }

    #[test]
    fn findings_name_the_file_line_column_and_key() {
        let err = run("brokers = \"k:9092\"\nmax_in_flight = \"ten\"\n", &[])
            .unwrap_err()
            .to_string();
        assert_eq!(
            err,
            "test.toml:2:1: key \"max_in_flight\": invalid value \"ten\": invalid digit found in string"
        );
        // Checked even where the environment overrides it: the file is wrong.
        assert!(run("max_in_flight = \"ten\"", &["PGOUTBOX_MAX_IN_FLIGHT"]).is_err());
        let err = run("slot = \"s\"\nbrokers = \n", &[])
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with("test.toml:2:11: config file is not valid TOML: "),
            "{err}"
        );
        assert!(!err.contains('\n'), "one line: {err}");
        let err = run("\n\n  brokerz = \"x\"", &[]).unwrap_err().to_string();
        assert_eq!(
            err,
            "test.toml:3:3: unknown key \"brokerz\" in the config file; did you mean \"brokers\"?"
        );
        let err = run("[tables.\"public.o\"]\ntopic_templat = \"x\"", &[])
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with("test.toml:2:1: unknown key \"topic_templat\"")
                && err.ends_with("did you mean \"topic_template\"?"),
            "{err}"
        );
        let err = run("log_format = \"jsn\"", &[]).unwrap_err().to_string();
        assert!(err.ends_with("valid values: human, json"), "{err}");
    }

    #[test]
    fn debezium_aliases_are_keys() {
        let (exports, _) = run("\"route.by.field\" = \"kind\"", &[]).unwrap();
        assert_eq!(
            exports,
            vec![("PGOUTBOX_ROUTE_BY_FIELD".to_owned(), "kind".to_owned())]
        );
    }

    #[test]
    fn finds_the_path_in_args() {
        let args: Vec<OsString> = ["pgoutbox", "run", "--config", "/etc/p.toml"]
            .iter()
            .map(OsString::from)
            .collect();
        assert_eq!(find_path(&args), Some(PathBuf::from("/etc/p.toml")));
        let args: Vec<OsString> = ["pgoutbox", "--config=/x.toml"]
            .iter()
            .map(OsString::from)
            .collect();
        assert_eq!(find_path(&args), Some(PathBuf::from("/x.toml")));
    }
}

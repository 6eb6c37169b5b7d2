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
//! Invariants: an unknown key is an error naming the key and listing valid ones
//! (a typo never silently falls back to a default); the file's values are never
//! logged (they may hold secrets).

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::{Path, PathBuf};

use clap::CommandFactory;

use crate::cli::Cli;
use crate::config::router_keys;

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
];

/// A problem with the configuration file.
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
    #[error("config file {path} is not valid TOML: {message}")]
    Parse { path: PathBuf, message: String },
    /// A key no flag has.
    #[error("config file {path}: unknown key {key:?}; valid keys: {valid}")]
    UnknownKey {
        path: PathBuf,
        key: String,
        valid: String,
    },
    /// A value of the wrong shape.
    #[error("config file {path}: key {key:?} must be a string, number, boolean or array of those")]
    BadValue { path: PathBuf, key: String },
}

/// Per-table overrides from `[tables."schema.name"]`.
pub type TableOverrides = BTreeMap<String, BTreeMap<String, String>>;

/// Top-level file key → environment variable, from the clap definitions.
pub fn key_to_env() -> BTreeMap<String, String> {
    fn walk(cmd: &clap::Command, out: &mut BTreeMap<String, String>) {
        for arg in cmd.get_arguments() {
            let (Some(long), Some(env)) = (arg.get_long(), arg.get_env()) else {
                continue;
            };
            let env = env.to_string_lossy().into_owned();
            out.insert(long.replace('-', "_"), env.clone());
            for alias in arg.get_all_aliases().unwrap_or_default() {
                out.insert(alias.replace('-', "_"), env.clone());
            }
        }
        for sub in cmd.get_subcommands() {
            walk(sub, out);
        }
    }
    let mut out = BTreeMap::new();
    walk(&Cli::command(), &mut out);
    out.remove("config");
    out
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

fn scalar(value: &toml::Value) -> Option<String> {
    match value {
        toml::Value::String(s) => Some(s.clone()),
        toml::Value::Integer(i) => Some(i.to_string()),
        toml::Value::Float(f) => Some(f.to_string()),
        toml::Value::Boolean(b) => Some(b.to_string()),
        _ => None,
    }
}

/// Parse `text` and compute the variables to export plus the table overrides.
/// `is_set(env)` tells whether a variable is already set (then it wins).
pub fn resolve(
    path: &Path,
    text: &str,
    is_set: &dyn Fn(&str) -> bool,
) -> Result<(Vec<(String, String)>, TableOverrides), FileError> {
    let table: toml::Table = text
        .parse()
        .map_err(|e: toml::de::Error| FileError::Parse {
            path: path.to_owned(),
            message: e.message().to_owned(),
        })?;
    let keys = key_to_env();
    let unknown = |key: &str| FileError::UnknownKey {
        path: path.to_owned(),
        key: key.to_owned(),
        valid: keys.keys().cloned().collect::<Vec<_>>().join(", ") + ", tables",
    };
    let mut exports = Vec::new();
    let mut overrides = TableOverrides::new();
    let mut table_names: Vec<String> = Vec::new();
    for (key, value) in &table {
        if key == "tables" {
            let sections = value.as_table().ok_or_else(|| unknown(key))?;
            for (name, section) in sections {
                let section = section.as_table().ok_or_else(|| unknown(name))?;
                let mut o = BTreeMap::new();
                for (k, v) in section {
                    let k = keys_alias(k);
                    if !TABLE_KEYS.contains(&k.as_str()) {
                        return Err(unknown(&format!("tables.{name}.{k}")));
                    }
                    let v = scalar(v).ok_or_else(|| FileError::BadValue {
                        path: path.to_owned(),
                        key: format!("tables.{name}.{k}"),
                    })?;
                    o.insert(k, v);
                }
                table_names.push(name.clone());
                overrides.insert(name.clone(), o);
            }
            continue;
        }
        let env = keys.get(key.as_str()).ok_or_else(|| unknown(key))?;
        let text = match value {
            toml::Value::Array(items) => items
                .iter()
                .map(scalar)
                .collect::<Option<Vec<_>>>()
                .map(|v| v.join(",")),
            other => scalar(other),
        }
        .ok_or_else(|| FileError::BadValue {
            path: path.to_owned(),
            key: key.clone(),
        })?;
        if key == "table" {
            table_names.splice(0..0, text.split(',').map(str::to_owned));
            continue;
        }
        if !is_set(env) {
            exports.push((env.clone(), text));
        }
    }
    if !table_names.is_empty() && !is_set("PGOUTBOX_TABLE") {
        table_names.dedup();
        exports.push(("PGOUTBOX_TABLE".to_owned(), table_names.join(",")));
    }
    Ok((exports, overrides))
}

/// Debezium-style keys inside a table section map to ours
/// ([`crate::config::router_keys`]).
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

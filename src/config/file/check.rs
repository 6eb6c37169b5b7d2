//! The config file's keys and values checked against the command line's own
//! definitions, and the place in the file each finding points at.
//!
//! Owns three things: [`Place`] (`file:line:column` from a byte offset), [`Flags`]
//! (every file key → its flag, checked with the flag's own clap parser, so the file
//! accepts exactly what the flag accepts) and [`suggest`] ("did you mean"). Nothing
//! here reads files or the environment.

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};

use clap::error::{ContextKind, ContextValue};
use clap::{Arg, ArgAction, CommandFactory};

use crate::cli::Cli;

/// A position in the config file, shown as `file:line:column` (1-based), the form
/// editors and terminals jump to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Place {
    /// The file.
    pub path: PathBuf,
    /// 1-based line.
    pub line: usize,
    /// 1-based column, in characters.
    pub column: usize,
}

impl Place {
    /// The place of byte `offset` of `text`, the contents of `path`.
    pub fn new(path: &Path, text: &str, offset: usize) -> Self {
        let before = text.get(..offset.min(text.len())).unwrap_or(text);
        let line_start = before.rfind('\n').map_or(0, |i| i + 1);
        Place {
            path: path.to_owned(),
            line: before.matches('\n').count() + 1,
            column: before[line_start..].chars().count() + 1,
        }
    }
}

impl fmt::Display for Place {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}:{}", self.path.display(), self.line, self.column)
    }
}

/// One top-level file key: the flag it sets.
#[derive(Debug, Clone)]
pub struct Flag {
    /// The flag's environment twin, which the file's value is exported as.
    pub env: String,
    arg: Arg,
}

/// Every top-level file key (long flag names with `_`, and their Debezium aliases).
#[derive(Debug, Clone)]
pub struct Flags(BTreeMap<String, Flag>);

impl Flags {
    /// The keys of every flag with an environment twin, in any subcommand.
    pub fn from_cli() -> Self {
        fn walk(cmd: &clap::Command, out: &mut BTreeMap<String, Flag>) {
            for arg in cmd.get_arguments() {
                let (Some(long), Some(env)) = (arg.get_long(), arg.get_env()) else {
                    continue;
                };
                let flag = Flag {
                    env: env.to_string_lossy().into_owned(),
                    arg: arg.clone(),
                };
                for alias in arg.get_all_aliases().unwrap_or_default() {
                    out.insert(alias.replace('-', "_"), flag.clone());
                }
                out.insert(long.replace('-', "_"), flag);
            }
            for sub in cmd.get_subcommands() {
                walk(sub, out);
            }
        }
        let mut out = BTreeMap::new();
        walk(&Cli::command(), &mut out);
        out.remove("config");
        Flags(out)
    }

    /// The flag `key` sets.
    pub fn get(&self, key: &str) -> Option<&Flag> {
        self.0.get(key)
    }

    /// Every key.
    pub fn keys(&self) -> impl Iterator<Item = &str> {
        self.0.keys().map(String::as_str)
    }
}

impl Flag {
    /// Whether the flag takes several values (repeatable, or split at commas).
    fn takes_many(&self) -> bool {
        matches!(self.arg.get_action(), ArgAction::Append)
            || self.arg.get_value_delimiter().is_some()
    }

    /// The file's value as the environment variable's text (an array is joined with
    /// commas), each item checked by the flag's own parser. `Err` is the reason.
    pub fn text(&self, value: &toml::Value) -> Result<String, String> {
        let items = match value {
            toml::Value::Array(items) if self.takes_many() => items.iter().collect(),
            toml::Value::Array(_) => {
                return Err("takes one value, not an array".to_owned());
            }
            other => vec![other],
        };
        let mut texts = Vec::with_capacity(items.len());
        for item in items {
            let text = scalar(item)
                .ok_or_else(|| "must be a string, number, boolean or array of those".to_owned())?;
            match self.arg.get_value_delimiter() {
                Some(d) => text.split(d).try_for_each(|part| self.parse(part))?,
                None => self.parse(&text)?,
            }
            texts.push(text);
        }
        Ok(texts.join(","))
    }

    /// Run the flag's value parser on one value, in a command of that flag alone
    /// (the real flag's relations to other flags do not apply to one value).
    fn parse(&self, value: &str) -> Result<(), String> {
        let alone = Arg::new("value")
            .long("value")
            .value_parser(self.arg.get_value_parser().clone())
            .action(ArgAction::Set);
        clap::Command::new("pgoutbox")
            .arg(alone)
            .try_get_matches_from(["pgoutbox".to_owned(), format!("--value={value}")])
            .map(drop)
            .map_err(|err| reason(&err, value))
    }
}

/// What the flag's parser said about `value`, without clap's usage text.
fn reason(err: &clap::Error, value: &str) -> String {
    let mut text = format!("invalid value {value:?}");
    if let Some(cause) = std::error::Error::source(err) {
        text.push_str(&format!(": {cause}"));
    } else if let Some(ContextValue::Strings(valid)) = err.get(ContextKind::ValidValue) {
        text.push_str(&format!("; valid values: {}", valid.join(", ")));
    }
    text
}

/// A TOML scalar as the text a flag would be given.
pub fn scalar(value: &toml::Value) -> Option<String> {
    match value {
        toml::Value::String(s) => Some(s.clone()),
        toml::Value::Integer(i) => Some(i.to_string()),
        toml::Value::Float(f) => Some(f.to_string()),
        toml::Value::Boolean(b) => Some(b.to_string()),
        _ => None,
    }
}

/// The valid key closest to `key`, when one is close enough to be a typo.
pub fn suggest<'a>(key: &str, valid: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    let key = key.to_lowercase().replace('-', "_");
    valid
        .into_iter()
        .map(|candidate| (strsim::jaro_winkler(&key, candidate), candidate))
        .filter(|(score, _)| *score > 0.85)
        .max_by(|a, b| a.0.total_cmp(&b.0))
        .map(|(_, candidate)| candidate)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn places_are_one_based_lines_and_columns() {
        let text = "a = 1\nbé = \"x\"\n";
        let place = Place::new(Path::new("p.toml"), text, text.find('"').unwrap());
        assert_eq!(place.to_string(), "p.toml:2:6");
        assert_eq!(
            Place::new(Path::new("p.toml"), text, 0).to_string(),
            "p.toml:1:1"
        );
    }

    #[test]
    fn values_are_checked_by_the_flags_own_parser() {
        let flags = Flags::from_cli();
        let window = flags.get("max_in_flight").unwrap();
        assert_eq!(window.env, "PGOUTBOX_MAX_IN_FLIGHT");
        assert_eq!(window.text(&toml::Value::Integer(10)).unwrap(), "10");
        assert_eq!(
            window.text(&toml::Value::String("ten".into())).unwrap_err(),
            "invalid value \"ten\": invalid digit found in string"
        );
        let format = flags.get("log_format").unwrap();
        assert_eq!(
            format.text(&toml::Value::String("jsn".into())).unwrap_err(),
            "invalid value \"jsn\"; valid values: human, json"
        );
        let drain = flags.get("drain_timeout").unwrap();
        assert!(drain.text(&toml::Value::String("soon".into())).is_err());
        assert_eq!(
            flags
                .get("brokers")
                .unwrap()
                .text(&toml::Value::Array(vec![]))
                .unwrap_err(),
            "takes one value, not an array"
        );
    }

    #[test]
    fn repeatable_flags_take_arrays_and_check_every_item() {
        let flags = Flags::from_cli();
        let tables = flags.get("table").unwrap();
        let two = toml::Value::Array(vec!["a.b".into(), "c.d".into()]);
        assert_eq!(tables.text(&two).unwrap(), "a.b,c.d");
        let on_invalid = flags.get("on_invalid").unwrap();
        let items = toml::Value::Array(vec!["dlq".into(), "null-key=skip".into()]);
        assert_eq!(on_invalid.text(&items).unwrap(), "dlq,null-key=skip");
    }

    #[test]
    fn typos_get_the_closest_key_and_strangers_none() {
        let valid = ["brokers", "max_in_flight", "max_in_flight_bytes", "slot"];
        assert_eq!(suggest("brokerz", valid), Some("brokers"));
        assert_eq!(suggest("max_inflight", valid), Some("max_in_flight"));
        assert_eq!(suggest("Max-In-Flight", valid), Some("max_in_flight"));
        assert_eq!(suggest("colour", valid), None);
    }
}

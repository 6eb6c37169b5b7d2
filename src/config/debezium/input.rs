//! Reading the connector configuration: the key/value map with a record of which
//! keys were read, the notes being collected, and the value conventions of Kafka
//! Connect (comma lists, simple class names, config-provider references).
//!
//! Invariant: a note never shows the value of a key that looks secret.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Map, Value};

use super::{ImportError, Note, NoteKind, NOT_SET, PLACEHOLDER, REDACTED};
use crate::outbox::message::json_kind as json_type;

/// The connector's keys with their values as text, recording which were read.
pub(super) struct Config {
    values: BTreeMap<String, String>,
    read: BTreeSet<String>,
}

impl Config {
    pub(super) fn new(map: &Map<String, Value>) -> Self {
        let values = map
            .iter()
            .filter_map(|(key, value)| {
                let text = match value {
                    Value::Null => return None,
                    Value::String(s) => s.trim().to_owned(),
                    other => other.to_string(),
                };
                Some((key.clone(), text))
            })
            .collect();
        Self {
            values,
            read: BTreeSet::new(),
        }
    }

    /// The value of `key`, marking it read.
    pub(super) fn get(&mut self, key: &str) -> Option<String> {
        self.read.insert(key.to_owned());
        self.values.get(key).cloned()
    }

    /// The value of `key`, leaving it unread.
    pub(super) fn peek(&self, key: &str) -> Option<String> {
        self.values.get(key).cloned()
    }

    /// `key` as a Connect boolean (`true`/`false`, any case), marking it read.
    pub(super) fn get_bool(&mut self, key: &str) -> Option<bool> {
        self.get(key).map(|v| v.eq_ignore_ascii_case("true"))
    }

    /// Every key under `prefix`, marking them read.
    pub(super) fn get_prefixed(&mut self, prefix: &str) -> Vec<(String, String)> {
        let found: Vec<(String, String)> = self
            .values
            .range(prefix.to_owned()..)
            .take_while(|(k, _)| k.starts_with(prefix))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        self.read.extend(found.iter().map(|(k, _)| k.clone()));
        found
    }

    /// Keys no step has read, in key order.
    pub(super) fn unread(&self) -> Vec<(String, String)> {
        self.values
            .iter()
            .filter(|(k, _)| !self.read.contains(*k))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    }
}

/// The notes being collected.
#[derive(Default)]
pub(super) struct Notes(pub(super) Vec<Note>);

impl Notes {
    pub(super) fn push(
        &mut self,
        kind: NoteKind,
        key: &str,
        value: Option<&str>,
        message: impl Into<String>,
    ) {
        let value = match value {
            None => NOT_SET.to_owned(),
            Some(_) if is_secret(key) => REDACTED.to_owned(),
            Some(v) => v.to_owned(),
        };
        self.0.push(Note {
            key: key.to_owned(),
            value,
            kind,
            message: message.into(),
        });
    }

    pub(super) fn translated(
        &mut self,
        key: &str,
        value: Option<&str>,
        message: impl Into<String>,
    ) {
        self.push(NoteKind::Translated, key, value, message);
    }

    pub(super) fn ignored(&mut self, key: &str, value: Option<&str>, message: impl Into<String>) {
        self.push(NoteKind::Ignored, key, value, message);
    }

    pub(super) fn unsupported(
        &mut self,
        key: &str,
        value: Option<&str>,
        message: impl Into<String>,
    ) {
        self.push(NoteKind::Unsupported, key, value, message);
    }
}

/// Whether a key's value must not be shown (the relay's one rule for credentials).
pub(super) fn is_secret(key: &str) -> bool {
    crate::kafka::config::is_secret(key)
}

/// Whether a value is a Kafka Connect config-provider reference such as
/// `${file:/etc/kafka/db.properties:host}` or `${env:DB_HOST}`, which only the Connect
/// worker can resolve. (`${routedByValue}` has no colon, so it is not one.)
pub(super) fn is_provider_ref(value: &str) -> bool {
    value.match_indices("${").any(|(at, _)| {
        let inner = &value[at + 2..];
        inner
            .find('}')
            .is_some_and(|end| inner[..end].contains(':'))
    })
}

/// The value of a key pgoutbox writes to the TOML; a config-provider reference is
/// noted and replaced by [`PLACEHOLDER`].
pub(super) fn resolved(cfg: &mut Config, notes: &mut Notes, key: &str) -> Option<String> {
    let value = cfg.get(key)?;
    if is_provider_ref(&value) {
        notes.unsupported(
            key,
            Some(&value),
            format!(
                "a Kafka Connect config-provider reference, which only the Connect worker \
                    resolves; replace {PLACEHOLDER} in the TOML with the actual value"
            ),
        );
        return Some(PLACEHOLDER.to_owned());
    }
    Some(value)
}

/// Split the REST form `{"name", "config"}` from a flat config object.
pub(super) fn connector_object(
    root: &Value,
) -> Result<(Option<String>, &Map<String, Value>), ImportError> {
    let Value::Object(top) = root else {
        return Err(ImportError::NotObject {
            what: "the connector configuration",
            found: json_type(root),
        });
    };
    match top.get("config") {
        Some(Value::Object(config)) => {
            let name = top.get("name").and_then(Value::as_str).map(str::to_owned);
            Ok((name, config))
        }
        Some(other) => Err(ImportError::NotObject {
            what: "\"config\"",
            found: json_type(other),
        }),
        None => Ok((None, top)),
    }
}

/// Kafka Connect's comma-separated list: items trimmed, empty ones dropped.
pub(super) fn list(value: &str) -> Vec<String> {
    value
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
        .collect()
}

/// Whether `class` names `full`, by its full name or its simple name (Kafka Connect
/// accepts both for connectors, converters and transforms).
pub(super) fn is_class(class: &str, full: &str) -> bool {
    let simple = full.rsplit('.').next().unwrap_or(full);
    class == full || class == simple
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_provider_references_are_recognised() {
        assert!(is_provider_ref("${env:DB_HOST}"));
        assert!(is_provider_ref(
            "db-${file:/opt/kafka/db.properties:suffix}"
        ));
        assert!(!is_provider_ref("outbox.${routedByValue}"));
        assert!(!is_provider_ref("plain"));
    }

    #[test]
    fn secrets_are_recognised_by_key() {
        assert!(is_secret("database.password"));
        assert!(is_secret("producer.override.sasl.jaas.config"));
        assert!(!is_secret("database.user"));
        assert!(!is_secret("transforms.outbox.table.field.event.key"));
    }
}

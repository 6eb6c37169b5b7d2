//! `pgoutbox config import-debezium`: a Debezium PostgreSQL connector configuration
//! with the Outbox Event Router (Kafka Connect JSON) → pgoutbox TOML.
//!
//! Owns the translation and its report. Data flow:
//!
//! ```text
//! JSON ─► connector object (REST `{"name", "config"}` or the flat config)  input
//!      ─► Config (key → text, every read recorded)                           input
//!      ─► settings + Notes, one step per concern:
//!           connector class, transforms, plugin, database, slot, tables      source
//!           Outbox Event Router options                                      router
//!           converters, producer.override.*                                  converters
//!           NULL/empty key and route, timestamp, tracing.*                   edges
//!           what Debezium adds that pgoutbox does not (context headers, …)   differences
//!           every key no step read                                           leftovers
//!      ─► TOML text (header listing what behaves differently, then settings) output
//! ```
//!
//! Invariants:
//! * every key of the input is read by a step or gets a note (unknown keys are
//!   reported as unsupported, never dropped silently);
//! * the database password never reaches the TOML, a note or an error, and the value
//!   of any key that looks secret (`password`, `jaas`, `secret`, `token`,
//!   `credential`) is shown as `(redacted)`;
//! * column names Debezium leaves at their defaults (`id`, `aggregatetype`,
//!   `aggregateid`, `type`, `payload`) are written explicitly, because pgoutbox's
//!   defaults are the snake-case names of `sql/outbox.sql`: the imported file routes
//!   the existing table exactly as the connector did;
//! * a value pgoutbox cannot know (Kafka brokers, a Connect config-provider reference)
//!   is written as `CHANGE-ME`, which fails loudly instead of connecting somewhere;
//! * the output is TOML built by hand (no serializer): basic strings escaped per
//!   TOML 1.0, comments stripped of control characters; `--config` reads it as is.
//!
//! A connector without an Outbox Event Router is an error, not a guess: Debezium would
//! publish change-event envelopes to one topic per table, which pgoutbox does not do,
//! so any "translated" file would route every event somewhere else.

mod converters;
mod differences;
mod edges;
mod input;
mod leftovers;
mod output;
mod router;
mod source;

use std::fmt::{self, Write as _};

use serde_json::Value;

use self::converters::{converters, producer_overrides, Converters};
use self::differences::{debezium_only_output, logical_name};
use self::input::{connector_object, Config, Notes};
use self::leftovers::leftovers;
use self::output::render;
use self::router::{routing, Routing};
use self::source::{
    connector_class, database_url, event_router, plugin, slot_and_publication, tables,
};

/// `connector.class` of the Debezium PostgreSQL connector.
pub const POSTGRES_CONNECTOR: &str = "io.debezium.connector.postgresql.PostgresConnector";

/// `transforms.<name>.type` of the Debezium Outbox Event Router.
pub const EVENT_ROUTER: &str = "io.debezium.transforms.outbox.EventRouter";

/// Written where pgoutbox needs a value the connector configuration does not hold.
pub const PLACEHOLDER: &str = "CHANGE-ME";

/// [`Note::value`] of a key the configuration does not set.
pub const NOT_SET: &str = "(not set)";

/// [`Note::value`] of a secret.
pub const REDACTED: &str = "(redacted)";

/// Where the database password goes instead of the TOML.
const PASSWORD_HINT: &str = "database password: set PGOUTBOX_DATABASE_PASSWORD_FILE or PGPASSWORD";

/// A connector configuration that cannot be imported.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ImportError {
    /// The input does not parse as JSON.
    #[error(
        "the connector configuration is not JSON (line {line}, column {column}); fix: pass the \
            JSON of GET /connectors/<name> or of its \"config\" object"
    )]
    NotJson {
        /// 1-based line of the error.
        line: usize,
        /// 1-based column of the error.
        column: usize,
        /// The parser's error.
        #[source]
        source: serde_json::Error,
    },
    /// The input (or its `config`) is JSON but not an object.
    #[error(
        "{what} is a JSON {found}, not an object; fix: pass {{\"name\": ..., \"config\": \
            {{...}}}} (GET /connectors/<name>) or the config object itself"
    )]
    NotObject {
        /// `the connector configuration` or `"config"`.
        what: &'static str,
        /// The JSON type found.
        found: &'static str,
    },
    /// No `connector.class`.
    #[error(
        "connector.class is missing; fix: import the whole connector configuration, whose \
            connector.class is io.debezium.connector.postgresql.PostgresConnector"
    )]
    MissingClass,
    /// Another connector than Debezium's PostgreSQL one.
    #[error(
        "connector.class is {value:?}, not the Debezium PostgreSQL connector; fix: import a \
            connector whose connector.class is \
            io.debezium.connector.postgresql.PostgresConnector (pgoutbox reads PostgreSQL only)"
    )]
    WrongConnector {
        /// The class found.
        value: String,
    },
    /// A key the Debezium PostgreSQL connector requires is absent.
    #[error(
        "{key} is missing; fix: import the complete connector configuration (Debezium requires \
            {key})"
    )]
    Missing {
        /// The key.
        key: &'static str,
    },
    /// A value that is not of the expected form.
    #[error(
        "{key} is {value:?}: expected {expected}; fix: correct {key} in the connector configuration"
    )]
    InvalidValue {
        /// The key.
        key: &'static str,
        /// The value found (never a secret).
        value: String,
        /// What was expected.
        expected: &'static str,
    },
    /// No `io.debezium.transforms.outbox.EventRouter` among the transforms.
    #[error(
        "no Outbox Event Router (io.debezium.transforms.outbox.EventRouter) among the \
            connector's transforms ({found}); without it Debezium publishes change events to \
            one topic per table, which pgoutbox does not do; fix: import the connector that \
            applies the Outbox Event Router to the outbox table"
    )]
    NoEventRouter {
        /// The transforms found, `name (type)`, or `none`.
        found: String,
    },
}

/// The result of an import.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Imported {
    /// The pgoutbox configuration file (never contains the password).
    pub toml: String,
    /// What happened to each connector key, in processing order.
    pub notes: Vec<Note>,
}

/// What became of one connector key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum NoteKind {
    /// Carried over into the TOML (or to where the message says).
    Translated,
    /// Not carried over, and pgoutbox needs nothing for it.
    Ignored,
    /// Not carried over, and pgoutbox behaves differently.
    Unsupported,
}

impl fmt::Display for NoteKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Translated => "translated",
            Self::Ignored => "ignored",
            Self::Unsupported => "unsupported",
        })
    }
}

/// A remark about one connector key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Note {
    /// The connector key, e.g. `transforms.outbox.route.by.field`.
    pub key: String,
    /// Its value, [`NOT_SET`] when absent, [`REDACTED`] when secret.
    pub value: String,
    /// What became of it.
    pub kind: NoteKind,
    /// Why, and what to do.
    pub message: String,
}

impl fmt::Display for Note {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.value == NOT_SET || self.value == REDACTED {
            write!(f, "{} {}: {}", self.key, self.value, self.message)
        } else {
            write!(f, "{} = {:?}: {}", self.key, self.value, self.message)
        }
    }
}

/// The notes for stderr, grouped: unsupported first, then translated, then ignored.
pub fn render_notes(notes: &[Note]) -> String {
    let groups = [
        (
            NoteKind::Unsupported,
            "behaves differently under pgoutbox (review before switching over):",
        ),
        (NoteKind::Translated, "translated:"),
        (NoteKind::Ignored, "not needed by pgoutbox:"),
    ];
    let mut out = String::new();
    for (kind, title) in groups {
        let mut group = notes.iter().filter(|n| n.kind == kind).peekable();
        if group.peek().is_none() {
            continue;
        }
        if !out.is_empty() {
            out.push('\n');
        }
        out.push_str(title);
        out.push('\n');
        for note in group {
            let _ = writeln!(out, "  {note}");
        }
    }
    out
}

/// Translate a Debezium connector configuration (JSON) into pgoutbox TOML.
pub fn import(json: &str) -> Result<Imported, ImportError> {
    let root: Value = serde_json::from_str(json).map_err(|source| ImportError::NotJson {
        line: source.line(),
        column: source.column(),
        source,
    })?;
    let (rest_name, map) = connector_object(&root)?;
    let mut cfg = Config::new(map);
    let mut notes = Notes::default();
    // Connect repeats the name inside "config"; read it either way.
    let config_name = cfg.get("name");
    let name = rest_name
        .or(config_name)
        .or_else(|| cfg.peek("topic.prefix"))
        .or_else(|| cfg.peek("database.server.name"));

    connector_class(&mut cfg)?;
    let router = event_router(&mut cfg, &mut notes)?;
    let other_plugin = plugin(&mut cfg, &mut notes);
    let database_url = database_url(&mut cfg, &mut notes)?;
    let (slot, publication) = slot_and_publication(&mut cfg, &mut notes, other_plugin.as_deref());
    let tables = tables(&mut cfg, &mut notes);
    let routing = routing(&mut cfg, &mut notes, &router);
    let converters = converters(&mut cfg, &mut notes, routing.expand_json);
    let logical_name = logical_name(&mut cfg, &mut notes);
    debezium_only_output(&mut cfg, &mut notes);
    let edges = edges::edges(&mut cfg, &mut notes, &router, &routing);
    let kafka_options = producer_overrides(&mut cfg, &mut notes);
    leftovers(&mut cfg, &mut notes, &router);

    let settings = Settings {
        name,
        router,
        database_url,
        slot,
        publication,
        tables,
        kafka_options,
        routing,
        edges,
        converters,
        logical_name,
    };
    let toml = render(&settings, &notes.0);
    Ok(Imported {
        toml,
        notes: notes.0,
    })
}

/// Everything the TOML says.
struct Settings {
    name: Option<String>,
    router: String,
    database_url: String,
    slot: Entry,
    publication: Entry,
    tables: Entry<Vec<String>>,
    kafka_options: Vec<String>,
    routing: Routing,
    edges: edges::Edges,
    converters: Converters,
    logical_name: String,
}

/// One TOML value and the comment written after it.
struct Entry<T = String> {
    value: T,
    comment: Option<String>,
}

impl<T> Entry<T> {
    fn plain(value: T) -> Self {
        Self {
            value,
            comment: None,
        }
    }

    fn with(value: T, comment: impl Into<String>) -> Self {
        Self {
            value,
            comment: Some(comment.into()),
        }
    }
}

#[cfg(test)]
mod tests;

//! The one table of Debezium Outbox Event Router option names and the pgoutbox keys
//! they stand for.
//!
//! Three readers share it, so a name is written once: the CLI accepts each Debezium
//! name as an alias of the flag (`--table.field.event.key`), the TOML layer accepts it
//! as a key (top level and inside `[tables."…"]`), and `config import-debezium` reads
//! the connector option `transforms.<router>.<debezium>` and writes `key`.
//!
//! Invariant: `key` is a `run` flag's long name with `_` for `-`, and `default` is
//! that flag's default; the CLI takes both from here (a unit test in `cli/mod.rs`
//! walks the clap definition to prove it). A leaf of the front: `crate::config`
//! reads it, and it imports nothing of `cli`, `config` or `exit`.

use crate::outbox::routing::DEFAULT_TOPIC_TEMPLATE;

/// One router option and the pgoutbox setting it maps to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RouterKey {
    /// The pgoutbox key: a flag's long name with `_` for `-`, also the TOML key.
    pub key: &'static str,
    /// pgoutbox's default value.
    pub default: &'static str,
    /// The Outbox Event Router option, after `transforms.<router>.`.
    pub debezium: &'static str,
    /// The router's default value, when it has one.
    pub debezium_default: Option<&'static str>,
}

/// Column whose value fills `${routedByValue}`.
pub const ROUTE_BY_FIELD: RouterKey = RouterKey {
    key: "route_by_field",
    default: "aggregate_type",
    debezium: "route.by.field",
    debezium_default: Some("aggregatetype"),
};

/// The topic name template.
pub const TOPIC_TEMPLATE: RouterKey = RouterKey {
    key: "topic_template",
    default: DEFAULT_TOPIC_TEMPLATE,
    debezium: "route.topic.replacement",
    debezium_default: Some(DEFAULT_TOPIC_TEMPLATE),
};

/// Column holding the event id.
pub const ID_COLUMN: RouterKey = RouterKey {
    key: "id_column",
    default: "id",
    debezium: "table.field.event.id",
    debezium_default: Some("id"),
};

/// Column holding the record key.
pub const KEY_COLUMN: RouterKey = RouterKey {
    key: "key_column",
    default: "aggregate_id",
    debezium: "table.field.event.key",
    debezium_default: Some("aggregateid"),
};

/// Column holding the event type.
pub const EVENT_TYPE_COLUMN: RouterKey = RouterKey {
    key: "event_type_column",
    default: "event_type",
    debezium: "table.field.event.type",
    debezium_default: Some("type"),
};

/// Column holding the record value.
pub const PAYLOAD_COLUMN: RouterKey = RouterKey {
    key: "payload_column",
    default: "payload",
    debezium: "table.field.event.payload",
    debezium_default: Some("payload"),
};

/// Column holding the record timestamp (Debezium has none by default: it stamps its
/// processing time).
pub const TIMESTAMP_COLUMN: RouterKey = RouterKey {
    key: "timestamp_column",
    default: "created_at",
    debezium: "table.field.event.timestamp",
    debezium_default: None,
};

/// Where the W3C trace context is. Debezium's field holds Java properties text
/// (`traceparent=…`), one of the forms pgoutbox reads; unset (`""`), nothing is
/// propagated, while Debezium's default is the column `tracingspancontext`.
pub const TRACE_CONTEXT: RouterKey = RouterKey {
    key: "trace_context",
    default: "",
    debezium: "tracing.span.context.field",
    debezium_default: Some("tracingspancontext"),
};

/// Every router option pgoutbox translates.
pub const ROUTER_KEYS: &[RouterKey] = &[
    ROUTE_BY_FIELD,
    TOPIC_TEMPLATE,
    ID_COLUMN,
    KEY_COLUMN,
    EVENT_TYPE_COLUMN,
    PAYLOAD_COLUMN,
    TIMESTAMP_COLUMN,
    TRACE_CONTEXT,
];

/// The pgoutbox key for a Debezium option name, if it is one of the table's.
pub fn key_for_debezium(name: &str) -> Option<&'static str> {
    ROUTER_KEYS
        .iter()
        .find(|k| k.debezium == name)
        .map(|k| k.key)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_both_ways() {
        for (i, a) in ROUTER_KEYS.iter().enumerate() {
            for b in &ROUTER_KEYS[i + 1..] {
                assert_ne!(a.key, b.key);
                assert_ne!(a.debezium, b.debezium);
            }
        }
        assert_eq!(
            key_for_debezium("table.field.event.key"),
            Some("key_column")
        );
        assert_eq!(key_for_debezium("key_column"), None);
    }
}

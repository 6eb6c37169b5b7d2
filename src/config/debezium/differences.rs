//! What a Debezium connector puts on every record that pgoutbox does not write, or
//! writes otherwise — listed whatever the configuration says, so no difference a
//! consumer could see is silent (see README, "Migrating from Debezium").
//!
//! Invariant: each note names what the consumer sees under Debezium and under
//! pgoutbox; a note is `unsupported` when the bytes differ.

use super::input::{Config, Notes};

/// The context headers Debezium (3.x, `extended.headers.enabled=true`) adds.
pub(super) const CONTEXT_HEADERS: &[&str] = &[
    "__debezium.context.connectorLogicalName",
    "__debezium.context.taskId",
    "__debezium.context.connectorName",
    "__debezium.context.runId",
];

/// `logical_name` from `topic.prefix` (or the older `database.server.name`).
pub(super) fn logical_name(cfg: &mut Config, notes: &mut Notes) -> String {
    for key in ["topic.prefix", "database.server.name"] {
        if let Some(v) = cfg.get(key) {
            notes.translated(
                key,
                Some(&v),
                "logical_name (names the envelope schema under json-schemas; Debezium's own \
                    heartbeat and transaction topics are not produced)",
            );
            return v;
        }
    }
    "pgoutbox".to_owned()
}

/// Notes for what Debezium writes that pgoutbox does not.
pub(super) fn debezium_only_output(cfg: &mut Config, notes: &mut Notes) {
    let key = "extended.headers.enabled";
    let value = cfg.get(key);
    if value
        .as_deref()
        .is_some_and(|v| v.eq_ignore_ascii_case("false"))
    {
        notes.ignored(
            key,
            value.as_deref(),
            "Debezium added no context headers either",
        );
    } else {
        notes.unsupported(
            key,
            value.as_deref(),
            format!(
                "Debezium put headers {} on every record (logical name, task 0, connector \
                    type, a random id per run), before id; pgoutbox sends none of them",
                CONTEXT_HEADERS.join(", ")
            ),
        );
    }
    notes.unsupported(
        "(text payload that is not JSON)",
        None,
        "Debezium delivered a text payload column's value whatever it held; pgoutbox stops \
            on one that is not JSON by default (cause invalid-json: on_invalid dlq or skip to \
            go on). json/jsonb payload columns cannot hold one",
    );
}

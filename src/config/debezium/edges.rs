//! What the connector did with rows at the edges of the outbox contract, which no
//! connector key spells out: a NULL or empty key, a NULL or empty routing value, the
//! record timestamp, and the trace context (`transforms.<router>.tracing.*`).
//!
//! Invariant: the imported file behaves like the connector wherever that does not
//! lose events; where pgoutbox deliberately differs (an empty routing value, the
//! timestamp without a timestamp column, tracing spans) the note says so and how to
//! get Debezium's behaviour, and the TOML comment repeats it.

use super::input::{Config, Notes};
use super::output::Toml;
use super::router::Routing;
use super::Entry;
use crate::cli::router_keys::TRACE_CONTEXT;
use crate::outbox::routing::TopicTemplate;

/// The settings this step writes.
pub(super) struct Edges {
    on_invalid: Entry<Vec<String>>,
    record_timestamp: Entry,
    /// `trace_context`, or `None` with a commented-out hint.
    trace_context: Option<Entry>,
}

/// `on_invalid`, `record_timestamp` and `trace_context`, with their notes.
pub(super) fn edges(cfg: &mut Config, notes: &mut Notes, router: &str, routing: &Routing) -> Edges {
    let k = |option: &str| format!("transforms.{router}.{option}");
    let key_key = k("table.field.event.key");
    let key_set = cfg.peek(&key_key);
    notes.translated(
        &key_key,
        key_set.as_deref(),
        format!(
            "rows whose key column {:?} is NULL or empty: Debezium delivered them (null key / \
                empty key), so does on_invalid = [\"null-key=deliver\"] (pgoutbox's own default \
                stops on them)",
            routing.key.value
        ),
    );
    let template = TopicTemplate::new(&routing.topic_template.value);
    if template.uses_value() {
        let route_key = k("route.by.field");
        let route_set = cfg.peek(&route_key);
        notes.unsupported(
            &route_key,
            route_set.as_deref(),
            format!(
                "rows whose route-by column {:?} is NULL or empty: Debezium failed its task on \
                    NULL but published an empty value to topic {:?}, which no consumer reads; \
                    pgoutbox stops on both (cause null-route); set on_invalid null-route=dlq to \
                    move them to the dead-letter topic instead",
                routing.route_by.value,
                template.render("")
            ),
        );
    }
    Edges {
        on_invalid: Entry::with(
            vec!["null-key=deliver".to_owned()],
            "rows with a NULL or empty key are delivered (null / empty Kafka key), as Debezium did",
        ),
        record_timestamp: record_timestamp(notes, &k("table.field.event.timestamp"), routing),
        trace_context: tracing(cfg, notes, router),
    }
}

/// `record_timestamp`: the column when the connector named one; else the commit time.
fn record_timestamp(notes: &mut Notes, key: &str, routing: &Routing) -> Entry {
    if routing.timestamp.is_some() {
        return Entry::with("column".to_owned(), "timestamp_column, as Debezium did");
    }
    notes.unsupported(
        key,
        None,
        "Debezium stamped each record with its processing time; the import sets \
            record_timestamp = \"commit\": the commit time, which Debezium's stamp approaches \
            when it keeps up, the same when a record is resent, and independent of a created_at \
            column Debezium did not read; set \"processing\" for Debezium's exact behaviour",
    );
    Entry::with(
        "commit".to_owned(),
        "Debezium stamped its processing time; \"processing\" does the same",
    )
}

/// What Debezium did with rows without a context unless
/// `tracing.with.context.field.only=true`.
const NEW_TRACES: &str = "Debezium started a new trace for rows without a context; pgoutbox \
    sends no trace header for them";

/// `trace_context` from `tracing.span.context.field` (and the notes of the other
/// `tracing.*` options). Debezium traces only with OpenTelemetry on its class path
/// and reads its default column only when the table has it, so only a column the
/// connector names is mapped (a mapped column must exist); the default is hinted.
fn tracing(cfg: &mut Config, notes: &mut Notes, router: &str) -> Option<Entry> {
    let prefix = format!("transforms.{router}.tracing.");
    let options = cfg.get_prefixed(&prefix);
    let mut column = None;
    let mut only_set = false;
    for (key, value) in &options {
        let option = &key[prefix.len() - "tracing.".len()..];
        match option {
            o if o == TRACE_CONTEXT.debezium => {
                column = Some(value.clone());
                notes.translated(
                    key,
                    Some(value),
                    "trace_context: the column's traceparent (and tracestate) become the record \
                        headers; pgoutbox passes the application's span on, where Debezium sent \
                        the id of a span of its own",
                );
            }
            "tracing.with.context.field.only" => {
                only_set = true;
                if value.eq_ignore_ascii_case("true") {
                    notes.translated(
                        key,
                        Some(value),
                        "pgoutbox sends trace headers only for rows with a context, as this did",
                    );
                } else {
                    notes.unsupported(key, Some(value), NEW_TRACES);
                }
            }
            "tracing.operation.name" => notes.ignored(
                key,
                Some(value),
                "pgoutbox creates and exports no spans of its own",
            ),
            _ => notes.unsupported(key, Some(value), "tracing option pgoutbox does not know"),
        }
    }
    if options.is_empty() {
        return None;
    }
    if !only_set {
        notes.unsupported(
            &format!("{prefix}with.context.field.only"),
            None,
            NEW_TRACES,
        );
    }
    if column.is_none() {
        // A mapped column must exist, or every row stops the relay (missing-column):
        // only a column the connector named is mapped.
        let default = TRACE_CONTEXT.debezium_default.unwrap_or_default();
        notes.unsupported(
            &format!("transforms.{router}.{}", TRACE_CONTEXT.debezium),
            None,
            format!(
                "Debezium read the trace context from its default column {default:?} when the \
                    outbox has it; the TOML leaves trace_context commented out: uncomment it if \
                    the table has that column"
            ),
        );
    }
    column.map(Entry::plain)
}

/// The settings, after the router's.
pub(super) fn render(out: &mut Toml, e: &Edges) {
    out.blank();
    out.comment("Rows Debezium handled its own way (see the notes on stderr)");
    out.array(
        "on_invalid",
        &e.on_invalid.value,
        e.on_invalid.comment.as_deref(),
    );
    out.entry("record_timestamp", &e.record_timestamp);
    match &e.trace_context {
        Some(entry) => out.entry("trace_context", entry),
        None => {
            let default = TRACE_CONTEXT.debezium_default.unwrap_or_default();
            out.comment(&format!(
                "trace_context = \"{default}\"  # if the outbox has Debezium's tracing column: \
                    sends its W3C trace context as headers traceparent/tracestate"
            ));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::{import, NoteKind};

    fn minimal(extra: &str) -> String {
        format!(
            r#"{{"connector.class": "io.debezium.connector.postgresql.PostgresConnector",
                "database.hostname": "db", "database.user": "app", "database.dbname": "shop",
                "table.include.list": "public.outbox", "transforms": "r",
                "transforms.r.type": "io.debezium.transforms.outbox.EventRouter"{extra}}}"#
        )
    }

    fn table(json: &str) -> toml::Table {
        import(json).unwrap().toml.parse().unwrap()
    }

    #[test]
    fn an_import_delivers_keyless_rows_and_stamps_the_commit_time() {
        let t = table(&minimal(""));
        let on_invalid = t["on_invalid"].as_array().unwrap();
        assert_eq!(on_invalid, &[toml::Value::from("null-key=deliver")]);
        assert_eq!(t["record_timestamp"].as_str(), Some("commit"));
        assert!(!t.contains_key("trace_context"));
        let imported = import(&minimal("")).unwrap();
        assert!(imported
            .toml
            .contains("\n# trace_context = \"tracingspancontext\""));
        let notes = &imported.notes;
        let of = |key: &str| notes.iter().filter(|n| n.key == key).collect::<Vec<_>>();
        let ts = of("transforms.r.table.field.event.timestamp");
        assert!(ts.iter().any(|n| n.kind == NoteKind::Unsupported
            && n.message.contains("record_timestamp = \"commit\"")));
        let route = of("transforms.r.route.by.field");
        assert!(route.iter().any(|n| n.message.contains("null-route")));
        let key = of("transforms.r.table.field.event.key");
        assert!(key.iter().any(|n| n.message.contains("null-key=deliver")));
    }

    #[test]
    fn a_timestamp_column_keeps_column_mode() {
        let t = table(&minimal(
            r#", "transforms.r.table.field.event.timestamp": "ts""#,
        ));
        assert_eq!(t["record_timestamp"].as_str(), Some("column"));
        assert_eq!(t["timestamp_column"].as_str(), Some("ts"));
    }

    #[test]
    fn tracing_options_map_to_trace_context() {
        let json = minimal(
            r#", "transforms.r.tracing.span.context.field": "span_ctx",
                "transforms.r.tracing.with.context.field.only": "true",
                "transforms.r.tracing.operation.name": "outbox-read""#,
        );
        let imported = import(&json).unwrap();
        let t: toml::Table = imported.toml.parse().unwrap();
        assert_eq!(t["trace_context"].as_str(), Some("span_ctx"));
        let kind = |key: &str| imported.notes.iter().find(|n| n.key == key).unwrap().kind;
        assert_eq!(
            kind("transforms.r.tracing.span.context.field"),
            NoteKind::Translated
        );
        assert_eq!(
            kind("transforms.r.tracing.with.context.field.only"),
            NoteKind::Translated
        );
        assert_eq!(
            kind("transforms.r.tracing.operation.name"),
            NoteKind::Ignored
        );
        // Tracing in use without a field: Debezium's default column is only hinted
        // (a mapped column that does not exist would stop every row).
        let json = minimal(
            r#", "transforms.r.tracing.operation.name": "x",
                "transforms.r.tracing.with.context.field.only": "false""#,
        );
        let imported = import(&json).unwrap();
        let only = "transforms.r.tracing.with.context.field.only";
        assert_eq!(imported.notes.iter().filter(|n| n.key == only).count(), 1);
        let t: toml::Table = imported.toml.parse().unwrap();
        assert!(!t.contains_key("trace_context"));
        assert!(imported
            .toml
            .contains("\n# trace_context = \"tracingspancontext\""));
        assert_eq!(
            kind_of(&imported, "transforms.r.tracing.span.context.field"),
            NoteKind::Unsupported
        );
        assert_eq!(
            kind_of(&imported, "transforms.r.tracing.with.context.field.only"),
            NoteKind::Unsupported
        );
    }

    fn kind_of(imported: &super::super::Imported, key: &str) -> NoteKind {
        imported.notes.iter().find(|n| n.key == key).unwrap().kind
    }
}

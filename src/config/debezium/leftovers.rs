//! Every connector key no other step read: what it means for pgoutbox.
//!
//! Invariant: a key the importer does not know is reported as unsupported, never
//! dropped silently.

use super::input::{Config, Notes};
use super::NoteKind;

/// Notes for every key no step read.
pub(super) fn leftovers(cfg: &mut Config, notes: &mut Notes, router: &str) {
    let router_prefix = format!("transforms.{router}.");
    for (key, value) in cfg.unread() {
        let (kind, message) = if key.starts_with(&router_prefix) {
            (
                NoteKind::Unsupported,
                "Outbox Event Router option the importer does not know; not carried over",
            )
        } else {
            classify(&key, &value)
        };
        notes.push(kind, &key, Some(&value), message);
    }
}

/// What a connector key that needs no translation means for pgoutbox.
pub(super) fn classify(key: &str, value: &str) -> (NoteKind, &'static str) {
    use NoteKind::{Ignored, Unsupported};
    let is_true = value.eq_ignore_ascii_case("true");
    match key {
        "tasks.max" => (
            Ignored,
            "the PostgreSQL connector runs one task; pgoutbox is one process per slot (a second \
                one stands by)",
        ),
        "topic.prefix" | "database.server.name" => (
            Ignored,
            "Debezium's prefix for its own topics (heartbeats, transaction metadata); outbox \
                topics come from route.topic.replacement",
        ),
        "snapshot.mode" => match value {
            "never" | "no_data" | "schema_only" => (
                Ignored,
                "pgoutbox never snapshots either: it reads changes from the slot on",
            ),
            _ => (
                Unsupported,
                "pgoutbox never snapshots: rows already in the outbox when its slot is created \
                    are not sent",
            ),
        },
        k if k.starts_with("snapshot.") || k.starts_with("incremental.snapshot.") => {
            (Ignored, "pgoutbox never snapshots")
        }
        "heartbeat.interval.ms"
        | "heartbeat.action.query"
        | "topic.heartbeat.prefix"
        | "heartbeat.topics.prefix" => (
            Ignored,
            "pgoutbox confirms the server's WAL position itself while the outbox is idle, so the \
                slot does not pin WAL without heartbeats; its own heartbeat \
                (--heartbeat-interval, default 10s) is a logical decoding message that proves \
                the stream alive and never reaches Kafka",
        ),
        "slot.drop.on.stop" if is_true => (
            Unsupported,
            "pgoutbox never drops its slot on stop (pgoutbox tail reads through a temporary slot)",
        ),
        "slot.drop.on.stop" => (Ignored, "pgoutbox keeps its slot on stop too"),
        "slot.stream.params" => (
            Unsupported,
            "options for decoderbufs or wal2json; pgoutbox passes none to pgoutput",
        ),
        "slot.max.retries"
        | "slot.retry.delay.ms"
        | "retriable.restart.connector.wait.ms"
        | "database.tcpKeepAlive"
        | "errors.retry.timeout"
        | "errors.retry.delay.max.ms" => (
            Ignored,
            "pgoutbox retries lost connections itself and stands by while another process reads \
                the slot",
        ),
        "tombstones.on.delete" | "skipped.operations" => (
            Ignored,
            "the Outbox Event Router dropped deletes; pgoutbox publishes inserts only",
        ),
        "max.batch.size" | "max.queue.size" | "max.queue.size.in.bytes" | "poll.interval.ms" => (
            Ignored,
            "pgoutbox bounds memory with max_in_flight (records, default 10000) and \
                max_in_flight_bytes (default 64 MiB)",
        ),
        "flush.lsn.source" if !is_true => (
            Unsupported,
            "pgoutbox always confirms the slot itself, and only after Kafka acknowledged \
                everything up to it",
        ),
        "flush.lsn.source"
        | "status.update.interval.ms"
        | "xmin.fetch.interval.ms"
        | "offset.flush.interval.ms"
        | "offset.flush.timeout.ms"
        | "lsn.flush.timeout.ms" => (
            Ignored,
            "pgoutbox confirms the slot continuously, only after Kafka acknowledged everything \
                up to it",
        ),
        "provide.transaction.metadata" if is_true => (
            Unsupported,
            "pgoutbox publishes no transaction metadata topic",
        ),
        "provide.transaction.metadata" => {
            (Ignored, "pgoutbox publishes no transaction metadata either")
        }
        "table.exclude.list"
        | "table.blacklist"
        | "schema.include.list"
        | "schema.whitelist"
        | "schema.exclude.list"
        | "schema.blacklist" => (Ignored, "pgoutbox reads only the tables listed in table"),
        k if k.starts_with("column.") || k == "message.key.columns" => {
            (Ignored, "pgoutbox reads only the mapped outbox columns")
        }
        "decimal.handling.mode"
        | "time.precision.mode"
        | "binary.handling.mode"
        | "hstore.handling.mode"
        | "interval.handling.mode"
        | "include.unknown.datatypes"
        | "schema.refresh.mode"
        | "money.fraction.digits"
        | "datatype.propagate.source.type"
        | "schema.name.adjustment.mode"
        | "field.name.adjustment.mode"
        | "sanitize.field.names"
        | "unavailable.value.placeholder" => (
            Ignored,
            "shapes Debezium's change-event columns; pgoutbox passes the payload column's text \
                as it is",
        ),
        "converters" => (
            Unsupported,
            "custom Debezium column converters are not applied; pgoutbox passes the payload \
                column's text as it is",
        ),
        "event.processing.failure.handling.mode" if value == "fail" => {
            (Ignored, "pgoutbox stops on an event it cannot process too")
        }
        "event.processing.failure.handling.mode" => (
            Unsupported,
            "pgoutbox stops on an event it cannot process; it never skips one",
        ),
        "errors.tolerance" if value == "none" => (Ignored, "pgoutbox stops on a failure too"),
        "errors.tolerance" => (
            Unsupported,
            "pgoutbox stops on a permanent delivery failure; it never skips a record",
        ),
        k if k.starts_with("errors.deadletterqueue.") => (
            Unsupported,
            "pgoutbox has no dead-letter topic yet; it stops instead",
        ),
        k if k.starts_with("errors.log.") => (Ignored, "pgoutbox logs failures to stderr"),
        k if k.starts_with("topic.creation.") => (
            Unsupported,
            "pgoutbox does not create topics: create them first, or let the brokers auto-create \
                them",
        ),
        k if k.starts_with("signal.") || k == "read.only" => (
            Unsupported,
            "pgoutbox has no signal channel or ad hoc snapshots",
        ),
        k if k.starts_with("notification.") || k == "custom.metric.tags" => {
            (Ignored, "pgoutbox reports through logs and /metrics")
        }
        "database.initial.statements" => {
            (Unsupported, "pgoutbox runs no statements when it connects")
        }
        "database.sslfactory" => (
            Unsupported,
            "Java SSL socket factory; pgoutbox verifies the server with sslmode and sslrootcert",
        ),
        k if k.starts_with("consumer.override.")
            || k.starts_with("admin.override.")
            || k.starts_with("config.") =>
        {
            (
                Ignored,
                "a Kafka Connect worker setting; pgoutbox has no consumer, admin client or \
                    config reload",
            )
        }
        k if k == "predicates" || k.starts_with("predicates.") => {
            (Ignored, "predicates only select records for transforms")
        }
        k if k.starts_with("transforms.") => (
            Ignored,
            "transform not listed in transforms, so Debezium did not apply it either",
        ),
        _ => (
            Unsupported,
            "not recognised by the importer: check whether pgoutbox needs an equivalent",
        ),
    }
}

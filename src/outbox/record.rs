//! Outbox event → Kafka record.
//!
//! Owns the contract of PRODUCT.md: topic = template with the route value; key =
//! aggregate id (UTF-8 bytes as stored); value = payload text; headers `id` and
//! `event_type`; timestamp by [`RecordTimestamp`] (default: the timestamp column,
//! falling back to the commit time when the column is absent, NULL or
//! unparseable). Invariant: building a record
//! never fails and never copies a value — the bytes are slices of the WAL message;
//! the legality of the topic name is checked separately ([`routing::is_valid_topic`]).
//! The headers after `id` come from the mapping's placements
//! ([`crate::outbox::event::ResolvedMapping::headers`]; by default the event type as
//! `event_type`), and Kafka Connect converters are applied afterwards, by
//! [`crate::outbox::connect::RecordFormat`].

use std::sync::{Arc, LazyLock};

use bytes::Bytes;

use crate::outbox::event::OutboxEvent;
use crate::outbox::routing::{self, TopicTemplate};
use crate::pg::timestamp::{now_pg_micros, parse_timestamp_bytes, to_unix_micros};

/// Which time a record carries (`--record-timestamp`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RecordTimestamp {
    /// The timestamp column (`created_at`), else the commit time.
    #[default]
    Column,
    /// The transaction's commit time, whatever the columns hold.
    Commit,
    /// When the relay read the row (Debezium's behaviour without
    /// `table.field.event.timestamp`); a resent record gets a new time.
    Processing,
}

impl RecordTimestamp {
    /// The name used in `--record-timestamp`.
    pub fn name(self) -> &'static str {
        match self {
            RecordTimestamp::Column => "column",
            RecordTimestamp::Commit => "commit",
            RecordTimestamp::Processing => "processing",
        }
    }

    /// Milliseconds since the Unix epoch for a row whose timestamp column holds
    /// `column` (text, `None` for NULL or no such column), committed at
    /// `commit_time` (µs since 2000-01-01).
    pub fn millis(self, column: Option<&[u8]>, commit_time: i64) -> i64 {
        let pg_ms = |pg_micros: i64| to_unix_micros(pg_micros).div_euclid(1000);
        match self {
            RecordTimestamp::Column => column
                .and_then(parse_timestamp_bytes)
                .unwrap_or_else(|| pg_ms(commit_time)),
            RecordTimestamp::Commit => pg_ms(commit_time),
            RecordTimestamp::Processing => pg_ms(now_pg_micros()),
        }
    }
}

/// One record ready for the producer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KafkaRecord {
    /// Destination topic.
    pub topic: String,
    /// Record key (partitioning and per-key order).
    pub key: Option<Bytes>,
    /// Record value.
    pub value: Option<Bytes>,
    /// Header `id`: the event id.
    pub id: Option<Bytes>,
    /// The event type (the default placement sends it as header `event_type`).
    pub event_type: Option<Bytes>,
    /// Headers after `id`, from the placed columns: name and value (`None`: a
    /// header with a null value, as Debezium sends a NULL column).
    pub placed: Vec<(Arc<str>, Option<Bytes>)>,
    /// Record timestamp, milliseconds since the Unix epoch.
    pub timestamp_ms: i64,
    /// Further headers: a dead letter's, or the trace context (`traceparent`,
    /// `tracestate`); empty otherwise, so no allocation.
    pub headers: Vec<(&'static str, Bytes)>,
}

/// The default placement's header name, shared by every record.
pub static EVENT_TYPE_HEADER: LazyLock<Arc<str>> =
    LazyLock::new(|| Arc::from(crate::outbox::event::EVENT_TYPE_HEADER));

/// The default placed headers: `event_type` with the event type.
pub fn default_placed(event_type: Option<Bytes>) -> Vec<(Arc<str>, Option<Bytes>)> {
    vec![(EVENT_TYPE_HEADER.clone(), event_type)]
}

impl KafkaRecord {
    /// Build the record for `event`, stamped `timestamp_ms` (see [`RecordTimestamp`]).
    pub fn from_event(event: &OutboxEvent, template: &TopicTemplate, timestamp_ms: i64) -> Self {
        let route = event
            .route_value
            .as_deref()
            .map(String::from_utf8_lossy)
            .unwrap_or_default();
        Self {
            topic: template.render(&route),
            key: event.key.clone(),
            value: event.payload.clone(),
            id: event.id.clone(),
            event_type: event.event_type.clone(),
            // Filled by the mapping's placements (`ResolvedMapping::headers`).
            placed: Vec::new(),
            timestamp_ms,
            headers: Vec::new(),
        }
    }

    /// Whether the topic is a legal Kafka topic name.
    pub fn has_valid_topic(&self) -> bool {
        routing::is_valid_topic(&self.topic)
    }

    /// Bytes this record counts in flight: topic + key + value. Headers are left
    /// out so the delivery callback can compute the same figure from the message
    /// without looking headers up by name (once per record, on the hot path).
    pub fn size(&self) -> usize {
        size_of(&self.topic, self.key.as_deref(), self.value.as_deref())
    }

    /// The event id as text, for error messages.
    pub fn id_text(&self) -> String {
        id_text_of(self.id.as_deref())
    }
}

/// [`KafkaRecord::size`] of a record's parts: the one formula for what a record
/// counts in flight, wherever the parts come from (a delivery report, a record the
/// producer holds).
pub fn size_of(topic: &str, key: Option<&[u8]>, value: Option<&[u8]>) -> usize {
    key.map_or(0, <[u8]>::len) + value.map_or(0, <[u8]>::len) + topic.len()
}

/// [`KafkaRecord::id_text`] of an `id` header value.
pub fn id_text_of(id: Option<&[u8]>) -> String {
    id.map_or_else(
        || "<null id>".to_owned(),
        |b| String::from_utf8_lossy(b).into_owned(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn b(s: &'static str) -> Option<Bytes> {
        Some(Bytes::from_static(s.as_bytes()))
    }

    #[test]
    fn record_follows_the_contract() {
        let ev = OutboxEvent {
            id: b("e1"),
            aggregate_type: b("order"),
            route_value: b("order"),
            key: b("42"),
            event_type: b("Created"),
            payload: b("{\"a\": 1}"),
            timestamp: b("2026-11-29 13:28:54.980104+00"),
            trace_context: None,
            placed: Vec::new(),
        };
        let ts = RecordTimestamp::Column.millis(ev.timestamp.as_deref(), 0);
        let r = KafkaRecord::from_event(&ev, &TopicTemplate::default(), ts);
        assert_eq!(r.topic, "outbox.event.order");
        assert_eq!(r.key, b("42"));
        assert_eq!(r.value, b("{\"a\": 1}"));
        assert_eq!(r.timestamp_ms, 1_795_958_934_980);
        assert!(r.has_valid_topic());
    }

    #[test]
    fn record_timestamp_modes() {
        let column = Some(&b"2026-11-29 13:28:54.980104+00"[..]);
        // Commit time 1 s after 2000-01-01.
        let commit = 1_000_000;
        assert_eq!(
            RecordTimestamp::Column.millis(column, commit),
            1_795_958_934_980
        );
        assert_eq!(
            RecordTimestamp::Column.millis(None, commit),
            946_684_801_000
        );
        assert_eq!(
            RecordTimestamp::Commit.millis(column, commit),
            946_684_801_000
        );
        let before = to_unix_micros(now_pg_micros()) / 1000;
        let now = RecordTimestamp::Processing.millis(column, commit);
        let after = to_unix_micros(now_pg_micros()) / 1000;
        assert!(
            (before..=after).contains(&now),
            "{before} <= {now} <= {after}"
        );
    }

    #[test]
    fn missing_timestamp_falls_back_to_commit_time() {
        let ev = OutboxEvent {
            id: None,
            aggregate_type: None,
            route_value: None,
            key: None,
            event_type: None,
            payload: None,
            timestamp: b("not a time"),
            trace_context: None,
            placed: Vec::new(),
        };
        let ts = RecordTimestamp::Column.millis(ev.timestamp.as_deref(), 1_000_000);
        let r = KafkaRecord::from_event(&ev, &TopicTemplate::default(), ts);
        assert_eq!(r.timestamp_ms, 946_684_801_000);
        assert_eq!(r.topic, "outbox.event.");
        assert!(r.has_valid_topic());
        assert_eq!(r.id_text(), "<null id>");
    }
}

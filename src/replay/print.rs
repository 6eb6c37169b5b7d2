//! What a replay prints: `--dry-run`'s one JSON object per record, and the summary.
//!
//! A dry-run line is the record exactly as it would go to the producer (after the
//! checks, the poison policy and the converters):
//! `{"table", "topic", "key", "headers": {name: value…}, "timestamp", "value"}`.
//! Like `tail`'s JSON lines, a value that is JSON is embedded verbatim and anything
//! else becomes a JSON string, so every line is valid JSON; `key` is the bytes the
//! partitioner hashes (murmur2), as text; a null key or header value is `null`.

use std::collections::BTreeMap;
use std::io::Write;

use crate::outbox::record::KafkaRecord;
use crate::pipeline::shown::RecordLine;

/// Write `record` of `table` as one JSON line, headers in the order the producer
/// sends them (`id`, the placed columns, then the rest).
pub fn write_record(table: &str, record: &KafkaRecord, out: &mut dyn Write) -> std::io::Result<()> {
    serde_json::to_writer(&mut *out, &RecordLine::new(table, record))?;
    out.write_all(b"\n")
}

/// A record Kafka did not take (listed by the deliverer).
pub use crate::pipeline::deliver::Failed;

/// What a replay did.
#[derive(Debug, Clone, Default)]
pub struct Summary {
    /// Rows read from the tables.
    pub rows: u64,
    /// Records acked (with `--dry-run`: printed), dead letters included.
    pub sent: u64,
    /// Records per topic, as counted in `sent`.
    pub topics: BTreeMap<String, u64>,
    /// Poison rows dead-lettered (their letters count in `sent`).
    pub dead_lettered: u64,
    /// Poison rows skipped (`--on-invalid …=skip`).
    pub skipped: u64,
    /// Records Kafka did not take.
    pub failed: Vec<Failed>,
    /// `--id` values no selected row has.
    pub not_found: Vec<String>,
    /// `--dry-run`: nothing was sent.
    pub dry_run: bool,
    /// Stopped early by a signal.
    pub interrupted: bool,
}

impl Summary {
    /// The summary for a human, one fact per line.
    pub fn render(&self) -> String {
        let verb = if self.dry_run { "would send" } else { "sent" };
        let mut out = format!(
            "replay: {} row(s) read, {verb} {} record(s), {} failed, {} dead-lettered, {} skipped\n",
            self.rows,
            self.sent,
            self.failed.len(),
            self.dead_lettered,
            self.skipped
        );
        for (topic, n) in &self.topics {
            out.push_str(&format!("  topic {topic}: {n}\n"));
        }
        for f in &self.failed {
            out.push_str(&format!(
                "  failed: event {} to topic {}: {}\n",
                f.event_id, f.topic, f.reason
            ));
        }
        if !self.not_found.is_empty() {
            out.push_str(&format!(
                "  not found (no selected row has this --id): {}\n",
                self.not_found.join(", ")
            ));
        }
        if self.interrupted {
            out.push_str("  interrupted: rows after the last one read were not replayed\n");
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use std::sync::Arc;

    #[test]
    fn a_record_is_one_json_line_with_its_headers_and_json_value() {
        let record = KafkaRecord {
            topic: "outbox.event.order".into(),
            key: Some(Bytes::from_static(b"42")),
            value: Some(Bytes::from_static(b"{\"a\": 1}")),
            id: Some(Bytes::from_static(b"e1")),
            event_type: Some(Bytes::from_static(b"Created")),
            placed: vec![(
                Arc::from("event_type"),
                Some(Bytes::from_static(b"Created")),
            )],
            timestamp_ms: 1_795_958_934_980,
            headers: vec![(
                "pgoutbox.replay",
                Bytes::from_static(b"2026-12-01T00:00:00Z"),
            )],
        };
        let mut out = Vec::new();
        write_record("public.outbox", &record, &mut out).unwrap();
        let line = String::from_utf8(out).unwrap();
        assert_eq!(
            line,
            "{\"table\":\"public.outbox\",\"topic\":\"outbox.event.order\",\"key\":\"42\",\
             \"headers\":{\"event_type\":\"Created\",\"id\":\"e1\",\"pgoutbox.replay\":\"2026-12-01T00:00:00Z\"},\
             \"timestamp\":\"2026-11-29T13:28:54.980000Z\",\"value\":{\"a\": 1}}\n"
        );
    }

    #[test]
    fn a_value_that_is_not_json_is_a_string_and_null_stays_null() {
        let record = KafkaRecord {
            topic: "t".into(),
            key: None,
            value: Some(Bytes::from_static(b"not json")),
            id: None,
            event_type: None,
            placed: Vec::new(),
            timestamp_ms: 0,
            headers: Vec::new(),
        };
        let mut out = Vec::new();
        write_record("public.outbox", &record, &mut out).unwrap();
        let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(v["value"], "not json");
        assert!(v["key"].is_null() && v["headers"]["id"].is_null());
    }

    #[test]
    fn the_summary_names_failures_and_missing_ids() {
        let summary = Summary {
            rows: 3,
            sent: 2,
            topics: BTreeMap::from([("a".to_owned(), 2)]),
            failed: vec![Failed {
                event_id: "e3".into(),
                topic: "b".into(),
                reason: "boom".into(),
            }],
            not_found: vec!["e9".into()],
            ..Summary::default()
        };
        let text = summary.render();
        assert!(
            text.starts_with("replay: 3 row(s) read, sent 2 record(s), 1 failed"),
            "{text}"
        );
        assert!(
            text.contains("topic a: 2") && text.contains("event e3 to topic b: boom"),
            "{text}"
        );
        assert!(text.contains("e9"), "{text}");
    }
}

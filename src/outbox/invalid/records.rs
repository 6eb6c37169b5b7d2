//! The records a poison row becomes: the dead letter, the stand-in for a row that
//! could not be mapped, and what is left of a record the broker refused for its size.
//!
//! Invariants: a dead letter carries the row's bytes unchanged (except a `too-large`
//! payload, which is omitted and said so in a header) plus the cause and reason in
//! headers; building a record never fails.

use bytes::Bytes;

use super::{Cause, Invalid};
use crate::outbox::event::MissingColumn;
use crate::outbox::record::{default_placed, KafkaRecord};
use crate::pg::source::pgoutput::{ColumnValue, TupleData};

/// Header names of a dead-letter record (besides the usual `id` and `event_type`).
pub mod header {
    /// The cause's name.
    pub const CAUSE: &str = "pgoutbox.dlq.cause";
    /// The human reason.
    pub const REASON: &str = "pgoutbox.dlq.reason";
    /// The topic the record was meant for (possibly illegal).
    pub const TOPIC: &str = "pgoutbox.dlq.topic";
    /// `schema.table` of the row.
    pub const TABLE: &str = "pgoutbox.dlq.table";
    /// LSN of the row's change.
    pub const LSN: &str = "pgoutbox.dlq.lsn";
    /// Present when the payload was left out (value then empty).
    pub const PAYLOAD_OMITTED: &str = "pgoutbox.dlq.payload-omitted";
}

/// Where a row came from, for dead-letter headers (unknown for records the broker
/// refused after the fact).
#[derive(Debug, Clone, Default)]
pub struct Origin {
    /// `schema.table`.
    pub table: Option<String>,
    /// LSN text of the change.
    pub lsn: Option<String>,
}

/// The dead-letter record for `record` (the record the row would have become).
pub fn dead_letter(
    record: &KafkaRecord,
    invalid: &Invalid,
    origin: &Origin,
    dlq_topic: &str,
) -> KafkaRecord {
    let mut headers = vec![
        (
            header::CAUSE,
            Bytes::from_static(invalid.cause.name().as_bytes()),
        ),
        (header::REASON, Bytes::from(invalid.reason.clone())),
        (header::TOPIC, Bytes::from(record.topic.clone())),
    ];
    if let Some(table) = &origin.table {
        headers.push((header::TABLE, Bytes::from(table.clone())));
    }
    if let Some(lsn) = &origin.lsn {
        headers.push((header::LSN, Bytes::from(lsn.clone())));
    }
    let value = if invalid.cause == Cause::TooLarge {
        let omitted = match &record.value {
            Some(v) => format!("{} bytes", v.len()),
            None => "size unknown (refused by the broker; see the reason)".to_owned(),
        };
        headers.push((header::PAYLOAD_OMITTED, Bytes::from(omitted)));
        None
    } else {
        record.value.clone()
    };
    KafkaRecord {
        topic: dlq_topic.to_owned(),
        key: record.key.clone().filter(|k| !k.is_empty()),
        value,
        id: record.id.clone(),
        event_type: record.event_type.clone(),
        placed: record.placed.clone(),
        timestamp_ms: record.timestamp_ms,
        headers,
    }
}

/// A stand-in record for a row that could not be mapped: value = the whole row as
/// a JSON object of column → text value (or null); the `id` header from column
/// `id` when the id column still exists; no key, no topic.
pub fn unmapped_row(
    columns: &[String],
    id: Option<usize>,
    tuple: &TupleData,
    commit_ms: i64,
) -> KafkaRecord {
    let mut value = String::from("{");
    for (i, name) in columns.iter().enumerate() {
        if i > 0 {
            value.push(',');
        }
        push_json_string(&mut value, name.as_bytes());
        value.push(':');
        match tuple.0.get(i) {
            Some(ColumnValue::Text(b) | ColumnValue::Binary(b)) => push_json_string(&mut value, b),
            Some(ColumnValue::UnchangedToast) => value.push_str("\"<unchanged toast>\""),
            _ => value.push_str("null"),
        }
    }
    value.push('}');
    let id = id.and_then(|i| match tuple.0.get(i) {
        Some(ColumnValue::Text(b) | ColumnValue::Binary(b)) => Some(b.clone()),
        _ => None,
    });
    KafkaRecord {
        topic: String::new(),
        key: None,
        value: Some(Bytes::from(value)),
        id,
        event_type: None,
        placed: default_placed(None),
        timestamp_ms: commit_ms,
        headers: Vec::new(),
    }
}

/// What is left of a record the broker refused for its size, from its delivery
/// report: librdkafka hands back the key and headers, not the payload.
#[derive(Debug, Clone)]
pub struct BrokerRefusal<'a> {
    /// The topic it was meant for.
    pub topic: &'a str,
    /// Its `id` header as text.
    pub event_id: &'a str,
    /// Its key.
    pub key: Option<Bytes>,
    /// Its `event_type` header.
    pub event_type: Option<Bytes>,
    /// The broker's reason.
    pub reason: &'a str,
    /// Bytes it counted in flight.
    pub size: usize,
    /// Its transaction's commit time, ms since the Unix epoch.
    pub commit_ms: i64,
}

/// The stand-in record (payload gone) and diagnosis of a record the broker refused
/// for its size; [`dead_letter`] of it omits the payload and says so.
pub fn refused_by_broker(refusal: BrokerRefusal<'_>) -> (KafkaRecord, Invalid) {
    let record = KafkaRecord {
        topic: refusal.topic.to_owned(),
        key: refusal.key,
        value: None,
        id: Some(Bytes::from(refusal.event_id.to_owned())),
        placed: default_placed(refusal.event_type.clone()),
        event_type: refusal.event_type,
        timestamp_ms: refusal.commit_ms,
        headers: Vec::new(),
    };
    let invalid = Invalid {
        cause: Cause::TooLarge,
        reason: format!("{} (record of {} bytes)", refusal.reason, refusal.size),
    };
    (record, invalid)
}

/// The diagnosis of a row of a table that lacks the mapped column `missing`.
pub fn missing_column(missing: &MissingColumn) -> Invalid {
    Invalid {
        cause: Cause::MissingColumn,
        reason: format!(
            "the table has no column {:?} (mapped as {}); its columns are: {}",
            missing.column, missing.role, missing.available
        ),
    }
}

/// The diagnosis of a row of a table whose mapped column changed type (`change`).
pub fn type_changed(change: &crate::outbox::pinned::TypeChange) -> Invalid {
    Invalid {
        cause: Cause::TypeChanged,
        reason: change.to_string(),
    }
}

/// Append `bytes` as a JSON string (invalid UTF-8 replaced by U+FFFD).
fn push_json_string(out: &mut String, bytes: &[u8]) {
    out.push('"');
    for c in String::from_utf8_lossy(bytes).chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
}

#[cfg(test)]
mod tests {
    use super::super::check::{check, tests::record};
    use super::*;

    #[test]
    fn dead_letter_keeps_the_row_and_says_why() {
        let r = record(Some("k"), "bad topic", "{\"a\":1}");
        let invalid = check(&r, true).unwrap();
        let origin = Origin {
            table: Some("public.outbox".into()),
            lsn: Some("0/16B3748".into()),
        };
        let d = dead_letter(&r, &invalid, &origin, "dead");
        assert_eq!(d.topic, "dead");
        assert_eq!(d.value, r.value);
        assert_eq!(d.key, r.key);
        assert_eq!(d.id, r.id);
        let h = |name: &str| {
            d.headers
                .iter()
                .find(|(n, _)| *n == name)
                .map(|(_, v)| String::from_utf8_lossy(v).into_owned())
        };
        assert_eq!(h(header::CAUSE).as_deref(), Some("invalid-topic"));
        assert_eq!(h(header::TOPIC).as_deref(), Some("bad topic"));
        assert_eq!(h(header::TABLE).as_deref(), Some("public.outbox"));
        assert_eq!(h(header::LSN).as_deref(), Some("0/16B3748"));
        let big = dead_letter(
            &r,
            &Invalid {
                cause: Cause::TooLarge,
                reason: "too big".into(),
            },
            &Origin::default(),
            "dead",
        );
        assert_eq!(big.value, None);
        assert!(big
            .headers
            .iter()
            .any(|(n, _)| *n == header::PAYLOAD_OMITTED));
    }

    #[test]
    fn unmapped_row_is_a_json_object_of_the_columns() {
        let t = |s: &'static [u8]| ColumnValue::Text(Bytes::from_static(s));
        let tuple = TupleData(vec![t(b"e1"), ColumnValue::Null, t(b"a\"b\\\n\xff")]);
        let cols = ["id".to_owned(), "gone".to_owned(), "body".to_owned()];
        let r = unmapped_row(&cols, Some(0), &tuple, 0);
        assert_eq!(r.id.as_deref(), Some(&b"e1"[..]));
        let v: serde_json::Value = serde_json::from_slice(r.value.as_deref().unwrap()).unwrap();
        assert_eq!(
            v,
            serde_json::json!({"id": "e1", "gone": null, "body": "a\"b\\\n\u{fffd}"})
        );
    }

    #[test]
    fn broker_refusal_becomes_a_dead_letter_without_payload() {
        let (r, invalid) = refused_by_broker(BrokerRefusal {
            topic: "outbox.event.order",
            event_id: "e9",
            key: Some(Bytes::from_static(b"k")),
            event_type: None,
            reason: "Broker: Message size too large",
            size: 2_000_000,
            commit_ms: 5,
        });
        assert_eq!(invalid.cause, Cause::TooLarge);
        assert_eq!(
            invalid.reason,
            "Broker: Message size too large (record of 2000000 bytes)"
        );
        assert_eq!(r.id.as_deref(), Some(&b"e9"[..]));
        assert_eq!((&r.value, r.timestamp_ms), (&None, 5));
        let d = dead_letter(&r, &invalid, &Origin::default(), "dead");
        assert_eq!(
            (d.topic.as_str(), d.key.as_deref()),
            ("dead", Some(&b"k"[..]))
        );
        let omitted = d
            .headers
            .iter()
            .find(|(n, _)| *n == header::PAYLOAD_OMITTED);
        assert_eq!(
            omitted.map(|(_, v)| v.clone()),
            Some(Bytes::from_static(
                b"size unknown (refused by the broker; see the reason)"
            ))
        );
    }
}

//! The checks that find a poison row's cause on a built record. Invariant: checks
//! never panic and never allocate on a valid row.

use bytes::Bytes;

use super::{Cause, Invalid};
use crate::outbox::json;
use crate::outbox::record::KafkaRecord;

/// The first cause that makes `record` unfit, if any. `check_json`: the payload
/// column is not `json`/`jsonb`, so PostgreSQL did not check its syntax.
pub fn check(record: &KafkaRecord, check_json: bool) -> Option<Invalid> {
    if record.key.as_ref().map_or(true, Bytes::is_empty) {
        let what = if record.key.is_none() {
            "NULL"
        } else {
            "empty"
        };
        return Some(Invalid {
            cause: Cause::NullKey,
            reason: format!("the key column is {what}"),
        });
    }
    if !record.has_valid_topic() {
        return Some(Invalid {
            cause: Cause::InvalidTopic,
            reason: format!(
                "topic {:?} is not a legal Kafka topic name (1-249 of [a-zA-Z0-9._-])",
                record.topic
            ),
        });
    }
    if check_json {
        if let Some(payload) = &record.value {
            if let Err(e) = json::validate(payload) {
                return Some(Invalid {
                    cause: Cause::InvalidJson,
                    reason: format!("payload is {e}"),
                });
            }
        }
    }
    None
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;

    pub(in crate::outbox::invalid) fn record(
        key: Option<&'static str>,
        topic: &str,
        value: &'static str,
    ) -> KafkaRecord {
        KafkaRecord {
            topic: topic.into(),
            key: key.map(|k| Bytes::from_static(k.as_bytes())),
            value: Some(Bytes::from_static(value.as_bytes())),
            id: Some(Bytes::from_static(b"e1")),
            event_type: Some(Bytes::from_static(b"Created")),
            placed: crate::outbox::record::default_placed(Some(Bytes::from_static(b"Created"))),
            timestamp_ms: 7,
            headers: Vec::new(),
        }
    }

    #[test]
    fn checks_find_each_cause() {
        let cause = |r: &KafkaRecord, json: bool| check(r, json).map(|i| i.cause);
        assert_eq!(cause(&record(Some("k"), "t", "{}"), true), None);
        assert_eq!(cause(&record(None, "t", "{}"), true), Some(Cause::NullKey));
        assert_eq!(
            cause(&record(Some(""), "t", "{}"), true),
            Some(Cause::NullKey)
        );
        assert_eq!(
            cause(&record(Some("k"), "a b", "{}"), true),
            Some(Cause::InvalidTopic)
        );
        assert_eq!(
            cause(&record(Some("k"), "t", "nope"), true),
            Some(Cause::InvalidJson)
        );
        // json/jsonb columns are PostgreSQL's to check.
        assert_eq!(cause(&record(Some("k"), "t", "nope"), false), None);
    }
}

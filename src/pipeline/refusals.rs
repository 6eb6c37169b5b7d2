//! Rows the broker refused for their size where the refusal could not be answered
//! in place ([`Refusals`]).
//!
//! An at-least-once refusal is normally handled where its report arrives: the row
//! turns poison and `--on-invalid too-large=…` decides. That is too late in two
//! cases: inside a Kafka transaction (exactly-once) librdkafka makes the whole
//! transaction abortable after a permanent produce error; and an idempotent
//! producer with `enable.gapless.guarantee` (the relay's default, see
//! [`crate::kafka::config`]) is stopped by librdkafka, so no dead letter can go
//! out through it. Either way the session notes the refused row here and ends; the
//! next session resumes (after the newest committed watermark, or from the slot
//! with a new producer), and the deliverer finds the row here before it is handed
//! over: it is then poison up front, exactly as a row librdkafka refuses by
//! `message.max.bytes`, and its dead letter (if any) goes out in the redo.
//!
//! Invariants: shared by every session of one relay (a clone shares the set); a
//! row is known by its topic and event id; an entry stays for the process's life,
//! so a redo that is itself interrupted meets the row as poison again; the set
//! grows by one entry per refused row, never per record.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use crate::kafka::producer::DeliveryError;
use crate::outbox::record::KafkaRecord;

/// The refused rows of this relay, by (topic, event id).
#[derive(Debug, Clone, Default)]
pub struct Refusals {
    rows: Arc<Mutex<HashMap<(String, String), DeliveryError>>>,
}

impl Refusals {
    /// Remember that the broker refused `err`'s record for its size.
    pub fn note(&self, err: &DeliveryError) {
        let mut rows = self.rows.lock().unwrap_or_else(|e| e.into_inner());
        rows.insert((err.topic.clone(), err.event_id.clone()), err.clone());
    }

    /// The broker's refusal of `record`, if it was refused before.
    pub fn of(&self, record: &KafkaRecord) -> Option<DeliveryError> {
        let rows = self.rows.lock().unwrap_or_else(|e| e.into_inner());
        if rows.is_empty() {
            return None;
        }
        let id = String::from_utf8_lossy(record.id.as_deref()?).into_owned();
        rows.get(&(record.topic.clone(), id)).cloned()
    }
}

#[cfg(test)]
mod tests {
    use rdkafka::error::RDKafkaErrorCode;

    use super::*;

    fn record(topic: &str, id: &str) -> KafkaRecord {
        KafkaRecord {
            topic: topic.into(),
            key: None,
            value: None,
            id: Some(bytes::Bytes::copy_from_slice(id.as_bytes())),
            event_type: None,
            placed: Vec::new(),
            timestamp_ms: 0,
            headers: Vec::new(),
        }
    }

    #[test]
    fn a_noted_refusal_is_found_by_topic_and_id_in_every_clone() {
        let refusals = Refusals::default();
        assert!(refusals.of(&record("orders", "e1")).is_none());
        let err = DeliveryError {
            code: RDKafkaErrorCode::MessageSizeTooLarge,
            reason: "too large".into(),
            topic: "orders".into(),
            event_id: "e1".into(),
            permanent: true,
            refused: None,
        };
        refusals.clone().note(&err);
        let found = refusals.of(&record("orders", "e1")).expect("noted");
        assert_eq!(found.code, RDKafkaErrorCode::MessageSizeTooLarge);
        assert!(refusals.of(&record("orders", "e2")).is_none());
        assert!(refusals.of(&record("payments", "e1")).is_none());
    }
}

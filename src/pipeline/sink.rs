//! [`Sink`]: where the relay core hands records, so the core runs against the real
//! [`KafkaSink`] in a session and against a `Vec` in unit tests.
//!
//! Invariant: a sink answers every record like [`KafkaSink::send`] does — taken
//! (one delivery report with `tag` follows; for a record the sink held back for the
//! next round, that report may be librdkafka's refusal), [`SendError::QueueFull`]
//! (retry the same record later), or [`SendError::Refused`] (never taken, no report
//! follows).

use crate::kafka::producer::{KafkaSink, SendError};
use crate::outbox::record::KafkaRecord;

/// Takes records for delivery, tagged for their delivery report.
pub trait Sink {
    /// Hand one record over; see [`KafkaSink::send`].
    fn send(&mut self, record: &KafkaRecord, tag: usize) -> Result<(), SendError>;

    /// Whether the sink stopped taking records for good (librdkafka's fatal
    /// error): a refusal reported now cannot be answered with a dead letter through
    /// it, and records after the refused one were not delivered either.
    fn stopped(&self) -> bool {
        false
    }
}

impl Sink for KafkaSink {
    fn send(&mut self, record: &KafkaRecord, tag: usize) -> Result<(), SendError> {
        KafkaSink::send(self, record, tag)
    }

    fn stopped(&self) -> bool {
        self.fatal_error().is_some()
    }
}

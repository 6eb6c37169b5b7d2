//! [`Transactions`]: the transactional calls of an exactly-once producer, for a
//! thread of their own (they block: `init_transactions` for as long as the
//! coordinator finishes the previous producer's transaction, `commit_transaction`
//! for as long as every record of the transaction takes to be acked).
//!
//! Invariants: a commit serves the producer's main queue while it waits
//! (librdkafka flushes first) and holds the sink's serving lock for that time, so
//! delivery reports still reach the channel one poller at a time, in order; every
//! failure is classified once ([`TxnError`]): *fenced* (another relay took the
//! transactional id over: this one must stop), *not authorized* (an ACL is
//! missing: stop with the fix), *abortable* (the transaction is lost), or *fatal*
//! (the producer is done). There is no explicit abort: a failed
//! session ends, and the next one's `init_transactions` (a new producer, the same
//! id) aborts what was left open.

use std::sync::Arc;
use std::time::Duration;

use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::producer::Producer;

use super::context::Polled;
use crate::kafka::config::Scrubber;

/// How long one serving step of a commit's wait for acks lasts.
const FLUSH_STEP: Duration = Duration::from_millis(1);

/// Why a transactional call failed, in the terms the session acts on.
#[derive(Debug, Clone, thiserror::Error)]
pub enum TxnError {
    /// Another producer with the same transactional id started: this relay is a
    /// zombie and must stop writing.
    #[error("this relay was fenced: another producer started with transactional id {id:?} ({reason}); another relay holds the slot now, or, if none runs, the broker aborted a Kafka transaction open longer than transaction.timeout.ms (a PostgreSQL transaction too large to send within it); fix: stop the other relay, or raise --kafka-option transaction.timeout.ms (at most the brokers' transaction.max.timeout.ms, 15 minutes by default)")]
    Fenced { id: String, reason: String },
    /// The broker refused the relay's principal a right a transaction needs (on
    /// the transactional id, or a topic it adds to the transaction): retrying
    /// cannot help until an ACL is added.
    #[error("kafka refused the transactional producer {id:?}: {reason} ({code:?})")]
    NotAuthorized {
        id: String,
        code: RDKafkaErrorCode,
        reason: String,
    },
    /// The transaction cannot commit; abort it and write it again.
    #[error("the kafka transaction failed and must be aborted: {reason} ({code:?})")]
    Abortable {
        code: RDKafkaErrorCode,
        reason: String,
    },
    /// The producer cannot go on (a new one must be made), or the call timed out.
    #[error("the kafka transaction call failed: {reason} ({code:?})")]
    Failed {
        code: RDKafkaErrorCode,
        reason: String,
        /// librdkafka raised a fatal error: only a new producer can go on.
        fatal: bool,
    },
}

impl TxnError {
    fn classify(id: &str, scrubber: &Scrubber, err: &KafkaError) -> Self {
        let reason = scrubber.scrub(&err.to_string());
        let (code, fatal, abortable) = match err {
            KafkaError::Transaction(e) => (e.code(), e.is_fatal(), e.txn_requires_abort()),
            other => (
                other.rdkafka_error_code().unwrap_or(RDKafkaErrorCode::Fail),
                false,
                false,
            ),
        };
        if super::is_fence(code) || (fatal && reason.to_ascii_lowercase().contains("fenced")) {
            return TxnError::Fenced {
                id: id.to_owned(),
                reason,
            };
        }
        if crate::kafka::authz::is_authorization(code) {
            return TxnError::NotAuthorized {
                id: id.to_owned(),
                code,
                reason,
            };
        }
        if abortable {
            return TxnError::Abortable { code, reason };
        }
        TxnError::Failed {
            code,
            reason,
            fatal,
        }
    }
}

/// The transactional calls of one producer (cheap to clone; follows no renewal:
/// take a new one after [`KafkaSink::renew`](super::KafkaSink::renew)).
#[derive(Clone)]
pub struct Transactions {
    pub(super) polled: Arc<Polled>,
    pub(super) scrubber: Scrubber,
    pub(super) id: String,
}

impl Transactions {
    /// The producer's transactional id.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// `init_transactions`: fences every earlier producer of the id and finishes
    /// its open transaction (committed if it was committing, else aborted).
    /// Blocking.
    pub fn init(&self, timeout: Duration) -> Result<(), TxnError> {
        self.polled
            .producer
            .init_transactions(timeout)
            .map_err(|e| TxnError::classify(&self.id, &self.scrubber, &e))
    }

    /// `commit_transaction`: wait for every record's ack (serving delivery reports
    /// to the channel in steps of [`FLUSH_STEP`]), then commit. Blocking.
    ///
    /// rust-rdkafka's `commit_transaction` flushes first, and its flush serves the
    /// queue in polls that each last their whole 100 ms whenever a record is still
    /// in flight — always, the watermark having just been sent — so every commit
    /// took ~100 ms however small (measured: 102.5 ms for 200 records, 103 ms for
    /// 11,111; the EndTxn round trip itself 2–3 ms). Waiting out the acks here in
    /// short steps leaves that flush nothing to wait for.
    pub fn commit(&self, timeout: Duration) -> Result<(), TxnError> {
        let _serving = self
            .polled
            .serving
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let deadline = std::time::Instant::now() + timeout;
        let producer = &self.polled.producer;
        while producer.in_flight_count() > 0 && std::time::Instant::now() < deadline {
            producer.poll(FLUSH_STEP);
        }
        let remaining = deadline.saturating_duration_since(std::time::Instant::now());
        producer
            .commit_transaction(remaining)
            .map_err(|e| TxnError::classify(&self.id, &self.scrubber, &e))
    }
}

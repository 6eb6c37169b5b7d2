//! [`PipelineError`]: why a session ended, split into transient (reconnect and
//! resume from the slot) and definite (stop without confirming past the cause).

use crate::kafka::producer::DeliveryError;
use crate::outbox::invalid::PoisonRow;
use crate::pg::client::connection::PgError;
use crate::pg::lsn::Lsn;
use crate::pg::names::TableName;
use crate::pg::source::pgoutput::DecodeError;
use crate::state::StateError;

use super::tracker::UnknownTxn;

/// Why a session ended with an error.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PipelineError {
    /// The replication connection failed.
    #[error("replication stream")]
    Pg(#[from] PgError),
    /// The replication stream ended without an error.
    #[error("replication stream closed")]
    StreamClosed,
    /// A pgoutput message did not decode.
    #[error("cannot decode pgoutput message at {lsn}")]
    Decode {
        lsn: Lsn,
        #[source]
        source: DecodeError,
    },
    /// A change referenced a relation never described.
    #[error("pgoutput change at {lsn} refers to unknown relation {relid}")]
    UnknownRelation { lsn: Lsn, relid: u32 },
    /// Kafka refused or failed a record.
    #[error(transparent)]
    Delivery(#[from] DeliveryError),
    /// A poison row met `--on-invalid fail`.
    #[error(transparent)]
    Invalid(Box<PoisonRow>),
    /// `--on-update fail` met an UPDATE/DELETE.
    #[error("{op} on outbox table {table} at {lsn}, and --on-update is fail; fix: stop updating outbox rows, or use --on-update ignore")]
    UpdateOnOutbox {
        op: &'static str,
        table: TableName,
        lsn: Lsn,
    },
    /// A row of a published table that is not one of the outbox tables.
    #[error("publication {publication:?} publishes table {table}, which is not an outbox table of this relay (--table {tables}); stopped at its row at {lsn} instead of confirming it unsent; fix: relay it too (add --table {table}), or stop publishing it: rows already published stay in the slot (a later DROP does not cover them), so first pass them once with --table {table} --on-invalid missing-column=skip (each skipped row is logged and counted), then run ALTER PUBLICATION {} DROP TABLE {}; and restart without those options; see `pgoutbox check`", crate::pg::names::quote_ident(.publication), .table.quoted())]
    UnmappedTable {
        table: TableName,
        lsn: Lsn,
        /// The configured outbox tables, comma-separated.
        tables: String,
        publication: String,
    },
    /// A publication repair's message that does not decode (a bug, or a message
    /// with the repair's prefix emitted by someone else).
    #[error("publication repair message at {lsn} ({prefix}): {reason}; the relay stops before it")]
    RepairMessage {
        lsn: Lsn,
        prefix: String,
        reason: String,
    },
    /// A message that is only sent when streaming/two-phase is enabled.
    #[error("unexpected pgoutput {0} message: pgoutbox does not enable streaming or two_phase")]
    UnexpectedMessage(&'static str),
    /// Internal accounting error (a bug).
    #[error("delivery accounting")]
    Tracker(#[from] UnknownTxn),
    /// The oldest in-flight record got no ack within `--stall-timeout`.
    #[error("{0}; the producer is replaced and the session resumes from the slot (if Kafka is just slow, raise --stall-timeout)")]
    Stalled(Box<super::stall::Stall>),
    /// The confirmed LSN could not be persisted, so it is not confirmed.
    #[error(transparent)]
    State(#[from] StateError),
    /// The publication watch could not read the catalog; nothing past what it
    /// vouched for was confirmed.
    #[error(
        "the publication watch could not read the catalog ({0}); a new session reads it again"
    )]
    Watch(#[source] crate::safety::publication::WatchError),
    /// The publication stopped covering the outbox.
    #[error(transparent)]
    PublicationChanged(Box<crate::safety::publication::PublicationChanged>),
    /// Exactly-once: a Kafka transaction could not be begun, committed or set up;
    /// nothing past the last committed watermark was confirmed.
    #[error(transparent)]
    Transaction(#[from] crate::kafka::producer::TxnError),
    /// Exactly-once: the broker refused a row of the open Kafka transaction for its
    /// size; the transaction is aborted and redone from the newest committed
    /// watermark, the row then handled by `--on-invalid too-large=…`.
    #[error("{0}; the open kafka transaction is aborted and redone from the newest committed watermark, with this row handled by --on-invalid too-large")]
    RedoWithoutRow(Box<crate::kafka::producer::DeliveryError>),
    /// At-least-once: the broker refused a row for its size and librdkafka stopped
    /// the producer rather than deliver the records behind it
    /// (`enable.gapless.guarantee`): no dead letter can go out through it. The
    /// session resumes from the slot with a new producer, which meets the row as
    /// poison (`--on-invalid too-large=…`) before it is sent.
    #[error("{0}; the producer stopped rather than deliver the records behind this row, so the session resumes from the slot with a new producer, with this row handled by --on-invalid too-large")]
    RedoWithNewProducer(Box<crate::kafka::producer::DeliveryError>),
    /// Exactly-once: the watermark could not be read or written.
    #[error(transparent)]
    Watermark(#[from] crate::kafka::watermark::WatermarkError),
    /// Exactly-once: the newest watermark cannot belong to this stream.
    #[error("{0}; fix: if the watermark topic was copied from another cluster or the database was restored, give this relay a new --transactional-id (its events are then sent again from the slot's position); if a failover lost WAL the watermark had seen, the events past the new primary's WAL end are in Kafka but not in the database")]
    WatermarkMismatch(#[from] crate::kafka::watermark::Mismatch),
}

impl PipelineError {
    /// Whether reconnecting and resuming from the slot may succeed.
    pub fn is_transient(&self) -> bool {
        match self {
            PipelineError::Pg(e) => e.is_transient(),
            PipelineError::StreamClosed => true,
            PipelineError::Delivery(e) => !e.permanent,
            PipelineError::Stalled(_) => true,
            PipelineError::RedoWithoutRow(_) | PipelineError::RedoWithNewProducer(_) => true,
            PipelineError::Watch(e) => e.is_transient(),
            PipelineError::Transaction(e) => !matches!(
                e,
                crate::kafka::producer::TxnError::Fenced { .. }
                    | crate::kafka::producer::TxnError::NotAuthorized { .. }
            ),
            PipelineError::Watermark(e) => {
                matches!(e, crate::kafka::watermark::WatermarkError::Read { .. })
            }
            _ => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use rdkafka::error::RDKafkaErrorCode;

    use super::*;

    fn delivery(permanent: bool) -> PipelineError {
        PipelineError::Delivery(DeliveryError {
            code: RDKafkaErrorCode::MessageTimedOut,
            reason: "timed out".into(),
            topic: "t".into(),
            event_id: "e".into(),
            permanent,
            refused: None,
        })
    }

    #[test]
    fn only_a_closed_stream_and_retryable_deliveries_are_transient_here() {
        assert!(PipelineError::StreamClosed.is_transient());
        assert!(delivery(false).is_transient());
        assert!(!delivery(true).is_transient());
        assert!(!PipelineError::UnexpectedMessage("Stream Start").is_transient());
        assert!(!PipelineError::Tracker(UnknownTxn(1)).is_transient());
    }
}

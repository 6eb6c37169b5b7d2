//! [`PipelineError`]: why a session ended, split into transient (reconnect and
//! resume from the slot) and definite (stop without confirming past the cause).

use crate::kafka::producer::DeliveryError;
use crate::outbox::invalid::PoisonRow;
use crate::pg::catalog::TableName;
use crate::pg::connection::PgError;
use crate::pg::lsn::Lsn;
use crate::pg::pgoutput::DecodeError;
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
    /// A message that is only sent when streaming/two-phase is enabled.
    #[error("unexpected pgoutput {0} message: pgoutbox does not enable streaming or two_phase")]
    UnexpectedMessage(&'static str),
    /// Internal accounting error (a bug).
    #[error("delivery accounting")]
    Tracker(#[from] UnknownTxn),
    /// The confirmed LSN could not be persisted, so it is not confirmed.
    #[error(transparent)]
    State(#[from] StateError),
}

impl PipelineError {
    /// Whether reconnecting and resuming from the slot may succeed.
    pub fn is_transient(&self) -> bool {
        match self {
            PipelineError::Pg(e) => e.is_transient(),
            PipelineError::StreamClosed => true,
            PipelineError::Delivery(e) => !e.permanent,
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

//! [`PoisonRow`]: the error that stops the relay on a poison row whose cause is set
//! to `fail`, with the fix offered for each cause ([`fix_for`]).
//!
//! Invariant: the message names the cause, the table, the event id, the LSN and the
//! fix, and says the slot stays before the row — and how to let the relay move on.

use super::{Cause, Invalid, Origin};

/// A poison row that stopped the relay (`--on-invalid fail`).
#[derive(Debug, thiserror::Error)]
#[error("poison row ({cause}) in {table}: event {event_id} at {lsn}: {reason}; the slot stays before it. Fix: {fix}; or let the relay move on with --on-invalid {cause}=dlq (dead-letter topic) or {cause}=skip")]
pub struct PoisonRow {
    /// The cause's name.
    pub cause: &'static str,
    /// What is wrong.
    pub reason: String,
    /// The row's event id.
    pub event_id: String,
    /// `schema.table`.
    pub table: String,
    /// LSN of the change.
    pub lsn: String,
    /// How to repair it.
    pub fix: &'static str,
}

impl PoisonRow {
    /// The error for a row diagnosed `invalid`, with event id `event_id`, from
    /// `origin` (unknown parts are said so).
    pub fn new(invalid: Invalid, event_id: String, origin: Origin) -> Self {
        Self {
            cause: invalid.cause.name(),
            reason: invalid.reason,
            event_id,
            table: origin.table.unwrap_or_else(|| "an outbox table".into()),
            lsn: origin.lsn.unwrap_or_else(|| "an unknown LSN".into()),
            fix: fix_for(invalid.cause),
        }
    }
}

/// The fix offered when a poison row stops the relay.
pub fn fix_for(cause: Cause) -> &'static str {
    match cause {
        Cause::NullKey => "give the row a non-empty key column (see --key-column), or deliver such rows with a null/empty Kafka key: --on-invalid null-key=deliver",
        Cause::InvalidTopic => "correct the row's routing column or --topic-template so the topic is 1-249 of [a-zA-Z0-9._-]",
        Cause::NullRoute => "give the row a value in its route-by column (see --route-by-field), or make the column NOT NULL CHECK (<column> <> '') so the application cannot write such rows",
        Cause::TooLarge => "make the payload smaller, or raise the broker's message.max.bytes and --kafka-option message.max.bytes",
        Cause::InvalidJson => "write JSON into the payload column (or make it jsonb, which PostgreSQL checks)",
        Cause::MissingColumn => "the outbox table was altered: restore the column, or map it to the new column name (--id-column, --key-column, --payload-column, --route-by-field) and restart",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn message_names_row_cause_and_fix() {
        let invalid = Invalid {
            cause: Cause::NullKey,
            reason: "the key column is NULL".into(),
        };
        let origin = Origin {
            table: Some("public.outbox".into()),
            lsn: Some("0/16B3748".into()),
        };
        let text = PoisonRow::new(invalid, "e1".into(), origin).to_string();
        assert_eq!(
            text,
            "poison row (null-key) in public.outbox: event e1 at 0/16B3748: the key column is NULL; \
             the slot stays before it. Fix: give the row a non-empty key column (see --key-column), \
             or deliver such rows with a null/empty Kafka key: --on-invalid null-key=deliver; or let the relay move on with --on-invalid null-key=dlq (dead-letter topic) or null-key=skip"
        );
    }

    #[test]
    fn unknown_origin_is_said_so() {
        let invalid = Invalid {
            cause: Cause::TooLarge,
            reason: "too big".into(),
        };
        let row = PoisonRow::new(invalid, "e2".into(), Origin::default());
        assert_eq!(row.table, "an outbox table");
        assert_eq!(row.lsn, "an unknown LSN");
        assert_eq!(row.fix, fix_for(Cause::TooLarge));
    }
}

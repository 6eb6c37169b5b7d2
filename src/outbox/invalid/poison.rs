//! [`PoisonRow`]: the error that stops the relay on a poison row whose cause is set
//! to `fail`, with the fix offered for each cause ([`fix_for`]).
//!
//! Invariant: the message names the cause, the table, the event id, the LSN and the
//! fix, and says the slot stays before the row — and how to let the relay move on.
//! A fix never asks to edit the row: the relay decodes the row as it was inserted,
//! from the WAL (the publication publishes inserts only), so an UPDATE of it changes
//! nothing. What works is a setting the relay applies when it reads the row again
//! (`--topic-template`, a column mapping, the broker's size limit) or a policy for the
//! cause, given once to move past the row or kept.

use super::{Cause, Invalid, Origin};

/// A poison row that stopped the relay (`--on-invalid fail`).
#[derive(Debug, thiserror::Error)]
#[error("poison row ({cause}) in {table}: event {event_id} at {lsn}: {reason}; the slot stays before it. Fix: {fix}. To move past it, restart with --on-invalid {cause}=dlq (the row goes to the dead-letter topic) or {cause}=skip, once or as the standing policy for this cause")]
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
        Cause::NullKey => "the relay reads the row as it was inserted (from the WAL), so an UPDATE of its key column changes nothing: move past it with the policy below, and if the event must still go out, INSERT a copy with a non-empty key column (see --key-column) as a new row; or deliver such rows with a null/empty Kafka key: --on-invalid null-key=deliver",
        Cause::InvalidTopic => "the relay reads the row as it was inserted (from the WAL), so an UPDATE of its routing column changes nothing; if the template is at fault, change --topic-template so the topic is 1-249 of [a-zA-Z0-9._-] and restart (it applies to rows already written); if the routing value is, move past the row with the policy below, and INSERT a copy with a legal routing value as a new row if the event must still go out",
        Cause::NullRoute => "the relay reads the row as it was inserted (from the WAL), so an UPDATE of its route-by column changes nothing: move past it with the policy below, and if the event must still go out, INSERT a copy with a value in its route-by column (see --route-by-field) as a new row; make the column NOT NULL CHECK (<column> <> '') so the application cannot write such rows",
        Cause::TooLarge => "raise the broker's message.max.bytes (and --kafka-option message.max.bytes) and restart; a smaller payload only helps a new row, the relay reads this one as it was inserted (from the WAL)",
        Cause::InvalidJson => "the relay reads the row as it was inserted (from the WAL), so an UPDATE of its payload changes nothing: move past it with the policy below, and if the event must still go out, INSERT a copy with a JSON payload as a new row (a jsonb column makes PostgreSQL refuse such rows)",
        Cause::BadMessage => "the relay reads the message as it was emitted (from the WAL), so it cannot be corrected: move past it with the policy below, and if the event must still go out, emit it again as a JSON object with the mapped fields (sql/outbox_message.sql's outbox_emit_message builds one)",
        Cause::MissingColumn => "the outbox table was altered: restore the column, or map it to the new column name (--id-column, --key-column, --payload-column, --route-by-field) and restart",
        Cause::TypeChanged => "the row is in the WAL with the new type, so changing the column back (ALTER TABLE … ALTER COLUMN … TYPE …) helps only rows written after that; once consumers accept records of the new shape, start the relay once with --accept-type-change: it drops the types it kept (in the state file) and pins those of the first row it reads, so from this row on it writes the new type",
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
             the slot stays before it. Fix: the relay reads the row as it was inserted (from the WAL), \
             so an UPDATE of its key column changes nothing: move past it with the policy below, and if \
             the event must still go out, INSERT a copy with a non-empty key column (see --key-column) \
             as a new row; or deliver such rows with a null/empty Kafka key: --on-invalid null-key=deliver. \
             To move past it, restart with --on-invalid null-key=dlq (the row goes to the \
             dead-letter topic) or null-key=skip, once or as the standing policy for this cause"
        );
    }

    /// Regression (issue 13 item 20): the fix said "correct the row's routing column",
    /// yet the relay reads the INSERT from the WAL and an UPDATE changes nothing.
    #[test]
    fn no_fix_asks_to_edit_the_row() {
        for cause in Cause::ALL {
            let fix = fix_for(cause);
            assert!(!fix.contains("correct the row"), "{}: {fix}", cause.name());
            assert!(!fix.starts_with("give the row"), "{}: {fix}", cause.name());
        }
        for cause in [Cause::NullKey, Cause::InvalidTopic, Cause::InvalidJson] {
            assert!(
                fix_for(cause).contains("UPDATE"),
                "{}: says an UPDATE changes nothing",
                cause.name()
            );
        }
        assert!(fix_for(Cause::InvalidTopic).contains("change --topic-template"));
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

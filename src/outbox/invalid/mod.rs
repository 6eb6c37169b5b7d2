//! Poison rows: outbox rows that cannot become the record the contract promises,
//! and what the relay does with each (`--on-invalid`).
//!
//! Owns everything about a poison row except the relay's LSN accounting: the list
//! of causes, the per-cause policy (`fail`, `dlq`, `skip`), the checks that find a
//! cause, every record a poison row becomes (dead letter, unmapped stand-in, what is
//! left of a broker-refused record), and the error that stops the relay with the
//! fix for each cause. The pipeline applies the action (one function,
//! `pipeline::relay`) and accounts the dead letter against the row's transaction.
//!
//! Files:
//! - `mod.rs`: [`Cause`] and [`Invalid`] (one row's diagnosis);
//! - `check.rs`: [`check`], the causes found on a built record;
//! - `policy.rs`: [`Action`] and [`InvalidPolicy`] (`--on-invalid`, `--dlq-topic`);
//! - `check.rs` also holds [`diagnose`], the one verdict on a built record (the
//!   causes above in order, and `null-key=deliver`);
//! - `records.rs`: [`dead_letter`], [`unmapped_row`], [`refused_by_broker`] and the
//!   dead-letter [`header`] names;
//! - `poison.rs`: [`PoisonRow`], the error of `--on-invalid fail`, and its fix texts.
//!
//! Causes:
//! - `null-key`: the key column is NULL or empty (no partition, no per-key order);
//!   the only cause that may also be delivered as is (`null-key=deliver`: a NULL key
//!   becomes a Kafka null key, an empty one empty key bytes);
//! - `invalid-topic`: the routing value renders an illegal Kafka topic name;
//! - `null-route`: the route-by column is NULL or empty while the topic template
//!   uses it: the topic would be the template's bare prefix (`outbox.event.`),
//!   which no consumer reads — Debezium fails its task on such a row;
//! - `too-large`: the producer or the broker refuses the record's size;
//! - `invalid-json`: the payload column is not `json`/`jsonb` and its text is not
//!   one JSON value (also catches invalid UTF-8);
//! - `missing-column`: the outbox table no longer has a mapped column (renamed or
//!   dropped) — the row cannot be mapped at all;
//! - `type-changed`: a mapped column changed type since the relay first read the table, and
//!   the records would change shape ([`crate::outbox::pinned`]);
//! - `bad-message`: a logical decoding message with an outbox prefix whose content
//!   is not a UTF-8 JSON object with the mapped fields ([`crate::outbox::message`]);
//!   its dead letter carries the content as sent.
//!
//! Invariants: the default for every cause is `fail`, so nothing is dropped unless
//! the operator said so; a dead-letter record carries the row's bytes unchanged
//! (except a `too-large` payload, which is omitted and said so in a header) plus the
//! cause and reason in headers; checks never panic and never allocate on a valid row.

mod check;
mod poison;
mod policy;
mod records;

pub use check::{check, check_route, diagnose, Verdict};
pub use poison::{fix_for, PoisonRow};
pub use policy::{Action, InvalidPolicy, PolicyError, DEFAULT_DLQ_TOPIC};
pub use records::{
    dead_letter, header, missing_column, refused_by_broker, type_changed, unmapped_row,
    BrokerRefusal, Origin,
};

/// Why a row cannot be relayed as is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cause {
    /// Key column NULL or empty.
    NullKey,
    /// Routing value yields an illegal topic name.
    InvalidTopic,
    /// Routing value NULL or empty while the template uses it.
    NullRoute,
    /// Record larger than the producer or broker accepts.
    TooLarge,
    /// Text payload that is not JSON.
    InvalidJson,
    /// A mapped column is missing from the table.
    MissingColumn,
    /// A mapped column changed type beyond what its records absorb.
    TypeChanged,
    /// A logical decoding message that is not an outbox event object.
    BadMessage,
}

impl Cause {
    /// Every cause, in the order of [`Cause::index`].
    pub const ALL: [Cause; 8] = [
        Cause::NullKey,
        Cause::InvalidTopic,
        Cause::NullRoute,
        Cause::TooLarge,
        Cause::InvalidJson,
        Cause::MissingColumn,
        Cause::TypeChanged,
        Cause::BadMessage,
    ];

    /// The name used in `--on-invalid`, headers, logs and metrics.
    pub fn name(self) -> &'static str {
        match self {
            Cause::NullKey => "null-key",
            Cause::InvalidTopic => "invalid-topic",
            Cause::NullRoute => "null-route",
            Cause::TooLarge => "too-large",
            Cause::InvalidJson => "invalid-json",
            Cause::MissingColumn => "missing-column",
            Cause::TypeChanged => "type-changed",
            Cause::BadMessage => "bad-message",
        }
    }

    /// Whether `action` applies to this cause: `deliver` only to `null-key` (a
    /// record without a key is still a record; the others have no record to send).
    pub fn allows(self, action: Action) -> bool {
        action != Action::Deliver || self == Cause::NullKey
    }

    /// Position in [`Cause::ALL`].
    pub fn index(self) -> usize {
        self as usize
    }

    fn parse(name: &str) -> Option<Cause> {
        Cause::ALL.into_iter().find(|c| c.name() == name)
    }
}

/// One poison row's diagnosis.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Invalid {
    /// The cause.
    pub cause: Cause,
    /// A human explanation (goes into logs and the dead-letter header).
    pub reason: String,
}

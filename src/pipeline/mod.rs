//! The relay of one replication session: WAL in, Kafka records out, acks back into
//! the confirmed LSN.
//!
//! ```text
//!  ReplicationStream ─▶ Decoder ─▶ OutboxTables/ColumnMapping ─▶ KafkaRecord ─▶ Sink (KafkaSink)
//!        ▲                        (poison row ─▶ --on-invalid ─▶ dead letter)          │
//!        └── confirm ◀── persist ◀── AckTracker (per transaction) ◀── Delivery ────────┘
//!             (100 ms status tick, and at session end)
//! ```
//!
//! Files:
//! - `session.rs`: [`Session`], the I/O shell — one `biased` select that moves bytes
//!   between the replication stream, the producer and the core, keeps time (status
//!   tick, drain deadline) and persists before it confirms;
//! - `relay/`: [`relay::Relay`], the sans-I/O core — every decision, unit tested
//!   without a server (`relay/tests/`);
//! - `deliver.rs`: [`deliver::Deliverer`], the one delivery path — hand-over,
//!   queue-full parking, size refusals, poison policy, dead letters, ack
//!   accounting — for the relay (so poll mode) and `pgoutbox replay`;
//! - `record.rs`: [`record::build`], outbox row → record, [`record::poison`],
//!   `--on-invalid` applied, and the refusal predicate (shared with `replay` and
//!   `tail`);
//! - `sink.rs`: [`sink::Sink`], where the core hands records (the real [`KafkaSink`]
//!   or a test's `Vec`);
//! - `tracker.rs`: [`tracker::AckTracker`], the contiguous low-water mark;
//! - `window.rs`: [`window::Window`], how many records may be in flight under
//!   `--max-in-flight`: what the broker needs (partitions written to, ack rate ×
//!   round trip);
//! - `tag.rs`: [`tag::DeliveryTag`], (generation, transaction) packed into the
//!   delivery opaque;
//! - `stall.rs`: [`stall::StallWatch`], how long the oldest in-flight transaction
//!   has gone without an ack (`--stall-timeout`);
//! - `error.rs`: [`PipelineError`]; `progress.rs`: operator log lines;
//!   `latency.rs`: the commit → ack histogram.
//!
//! The session's select, with explicit priorities:
//! 1. shutdown — stop reading WAL and drain what is in flight;
//! 2. delivery reports — they free window space and move the low-water mark;
//! 3. the status timer — persist the confirmable LSN to the state file, then push it
//!    to the server; end the session when the oldest in-flight record went
//!    `--stall-timeout` without an ack; retry a record that met a full producer
//!    queue; enforce the drain deadline;
//! 4. new WAL — only while under the in-flight caps and with no record waiting.
//!
//! Invariants: records are produced in WAL order; the confirmed LSN is only ever the
//! tracker's contiguous low-water mark (or a keepalive's WAL end while nothing at
//! all is in flight) and never moves backwards; an LSN reaches the server only after
//! [`Checkpoint::persist`](crate::state::Checkpoint::persist) put it on disk, and
//! only from the status tick or the end of [`Session::run`] (acks, commits and
//! keepalives merely move the tracker), so after any crash the slot is never ahead
//! of the state file; any delivery failure ends the session without confirming past
//! the failed record, and so does a stall or a row of a published table that is not
//! an outbox table; memory is bounded by the in-flight caps, not by transaction
//! size or backlog; a drained shutdown flushes the producer before the final
//! confirmation.
//!
//! [`KafkaSink`]: crate::kafka::producer::KafkaSink

pub mod deliver;
mod error;
pub mod exactly_once;
pub mod latency;
mod progress;
pub mod record;
pub mod refusals;
pub mod relay;
mod session;
pub mod shown;
pub mod sink;
pub mod stall;
pub mod tag;
pub mod tracker;
pub mod window;

use std::time::Duration;

use crate::outbox::invalid::InvalidPolicy;
use crate::outbox::tables::TableSpec;
use crate::pg::lsn::Lsn;
use latency::LatencyHistogram;

pub use crate::outbox::invalid::PoisonRow;
pub use error::PipelineError;
pub use relay::message::{MessageConfig, NonTransactional};
pub use session::Session;

/// What to do with an UPDATE or DELETE on an outbox table (the default publication
/// is insert-only, so these only appear with a hand-made publication).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OnUpdate {
    /// Skip silently.
    #[default]
    Ignore,
    /// Skip with a warning.
    Warn,
    /// Stop the relay.
    Fail,
}

/// Settings of the relay loop.
#[derive(Debug, Clone)]
pub struct PipelineConfig {
    /// Outbox tables, each with its mapping and topic template (none in
    /// `--messages-only` mode).
    pub tables: Vec<TableSpec>,
    /// Logical decoding messages that are outbox events (`--message-prefix`).
    pub messages: MessageConfig,
    /// How key and value are serialised (converters, envelope, expansion).
    pub format: crate::outbox::connect::RecordFormat,
    /// The publication (named in the fix when it publishes another table).
    pub publication: String,
    /// UPDATE/DELETE policy.
    pub on_update: OnUpdate,
    /// Poison-row policy (`--on-invalid`, `--dlq-topic`).
    pub invalid: InvalidPolicy,
    /// Which time records carry (`--record-timestamp`).
    pub record_timestamp: crate::outbox::record::RecordTimestamp,
    /// Stop reading WAL at this many unacked records.
    pub max_in_flight_records: usize,
    /// … or at this many unacked bytes.
    pub max_in_flight_bytes: usize,
    /// How long shutdown waits for in-flight records.
    pub drain_timeout: Duration,
    /// How often the confirmed LSN is pushed to the server when it moved.
    pub status_interval: Duration,
    /// How long the oldest in-flight record may go without progress before the
    /// session ends as stalled (`--stall-timeout`; `None`: never).
    pub stall_timeout: Option<Duration>,
    /// Exactly-once: rows the broker refused for their size in an aborted Kafka
    /// transaction, poison up front when the redo meets them (shared by sessions).
    pub refusals: refusals::Refusals,
    /// The first types of the outbox tables' mapped columns, shared by every
    /// session of a relay (see [`crate::outbox::pinned`]).
    pub pinned: crate::outbox::pinned::PinnedTypes,
}

/// Counters of one session.
#[derive(Debug, Default, Clone)]
pub struct SessionStats {
    /// Commit → ack latency of acked records.
    pub latency: LatencyHistogram,
    /// Its Kafka share: hand-over to the producer → ack ([`Delivery::in_kafka`](crate::kafka::producer::Delivery::in_kafka)).
    pub in_kafka: LatencyHistogram,
    /// Records handed to the producer.
    pub produced: u64,
    /// Their bytes ([`KafkaRecord::size`](crate::outbox::record::KafkaRecord::size)).
    pub produced_bytes: u64,
    /// Records acked.
    pub acked: u64,
    /// Poison rows dead-lettered (their letters count in `produced` and `acked`).
    pub dead_lettered: u64,
    /// Poison rows skipped (`--on-invalid …=skip`).
    pub skipped: u64,
    /// The last confirmed LSN.
    pub confirmed: Lsn,
    /// Whether shutdown gave up waiting for in-flight records.
    pub drain_timed_out: bool,
}

//! [`Relay`], the sans-I/O core of a session: every decision of the relay loop,
//! driven by its inputs, answering through a [`Sink`] and a few queries. The
//! session ([`Session`](super::Session)) only moves bytes between the stream, the sink and
//! this core, and keeps time.
//!
//! ```text
//!  inputs                                                     outputs
//!  on_wal(XLogData)  ─▶ Decoder ─▶ OutboxTables ─▶ record ──▶ Sink::send(record, tag)
//!                       └─ Message ─▶ message.rs (content → virtual row) ─┘
//!  on_wal(keepalive) ─┐              poison row ─▶ poison() ─▶ (fail | skip | dead letter)
//!  on_delivery(tag)  ─┴▶ AckTracker (per transaction) ──────▶ to_report(): LSN to persist
//!  retry_pending()   ─▶ the record that met a full queue        then confirm
//!  start_drain()     ─▶ stop reading WAL                      can_read(), is_drained()
//!  sends and acks    ─▶ StallWatch ────────────────────────▶ stalled(now)
//!  on_wal(heartbeat) ─▶ heartbeat.rs: timed if ours; its LSN confirmable when idle
//! ```
//!
//! Invariants: records reach the sink in WAL order (a record that met a full queue
//! is retried before any later WAL is read, during a drain too); every record
//! handed to the sink counts against its transaction until its report — also while
//! it waits for queue space — so the confirmable LSN is the tracker's
//! contiguous low-water mark, or a keepalive's WAL end (or a heartbeat's LSN) while
//! no transaction is open and nothing is in flight; a poison row enters through one function ([`Relay`]'s
//! `poison`), and its dead letter joins the row's transaction; a report of another
//! session's generation changes nothing; a row (insert, update or delete) of a
//! published table that is not an outbox table is an error, never passed; a
//! logical decoding message with an outbox prefix takes the row's record path and
//! counts in its transaction (`message.rs`). No
//! allocation per event beyond the record itself (records go straight to the sink)
//! and what names a transaction's first record for a stall report.

use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;

use super::error::PipelineError;
use super::record::{self, Built, RowAt};
use super::sink::Sink;
use super::stall::{RecordRef, Stall, StallWatch};
use super::tag::DeliveryTag;
use super::tracker::AckTracker;
use super::{OnUpdate, PipelineConfig, SessionStats};
use crate::kafka::producer::{Delivery, DeliveryError, SendError};
use crate::metrics::Metrics;
use crate::outbox::invalid::{self, Cause, Invalid, Origin};
use crate::outbox::record::KafkaRecord;
use crate::outbox::tables::{OutboxTables, RelationRoute};
use crate::pg::lsn::Lsn;
use crate::pg::names::TableName;
use crate::pg::source::pgoutput::{Decoder, Insert, PgOutputMessage};
use crate::pg::source::protocol::ReplicationMessage;
use crate::pg::timestamp;

/// The open transaction.
struct Txn {
    no: u64,
    commit_time: i64,
}

/// A record that met a full producer queue, to be sent again before anything else.
struct Pending {
    record: KafkaRecord,
    txn: u64,
    /// Where the row came from (for a dead letter if the producer refuses its size).
    origin: Origin,
}

/// The decisions of one replication session.
pub struct Relay<'a> {
    cfg: &'a PipelineConfig,
    metrics: Arc<Metrics>,
    tags: DeliveryTag,
    decoder: Decoder,
    tables: OutboxTables,
    tracker: AckTracker,
    /// Progress of the transactions in flight (`--stall-timeout`).
    watch: StallWatch,
    /// WAL position of the message being handled.
    at: Lsn,
    txn: Option<Txn>,
    pending: Option<Pending>,
    draining: bool,
    /// The last LSN the caller persisted and confirmed.
    reported: Lsn,
    stats: SessionStats,
    /// Logical decoding messages: the mapping of the last field set, counters.
    messages: message::Messages,
}

impl<'a> Relay<'a> {
    /// The core of a session with `generation` (see [`DeliveryTag`]).
    pub fn new(cfg: &'a PipelineConfig, generation: u16, metrics: Arc<Metrics>) -> Self {
        Self {
            cfg,
            metrics,
            tags: DeliveryTag::new(generation),
            decoder: Decoder::new(),
            tables: OutboxTables::new(cfg.tables.clone()),
            tracker: AckTracker::new(),
            watch: StallWatch::default(),
            at: Lsn::INVALID,
            txn: None,
            pending: None,
            draining: false,
            reported: Lsn::INVALID,
            stats: SessionStats::default(),
            messages: message::Messages::default(),
        }
    }

    /// One message of the replication stream.
    pub fn on_wal<S: Sink>(
        &mut self,
        sink: &mut S,
        message: ReplicationMessage,
    ) -> Result<(), PipelineError> {
        match message {
            ReplicationMessage::XLogData {
                wal_start, data, ..
            } => self.on_pgoutput(sink, wal_start, data),
            ReplicationMessage::PrimaryKeepalive { wal_end, .. } => {
                // Nothing open and nothing in flight: everything up to the server's
                // WAL end holds no undelivered outbox row. Confirming it keeps an idle
                // outbox on a busy database from pinning WAL.
                if self.txn.is_none() {
                    self.tracker.confirm_idle(wal_end);
                }
                Ok(())
            }
        }
    }

    /// One delivery report. An ack moves the low-water mark; a size refusal of a
    /// row becomes a poison row; any other failure ends the session.
    pub fn on_delivery<S: Sink>(
        &mut self,
        sink: &mut S,
        delivery: Delivery,
    ) -> Result<(), PipelineError> {
        let Some(txn) = self.tags.unpack(delivery.tag, self.tracker.oldest()) else {
            return Ok(()); // a record of an earlier session: it will be resent anyway
        };
        match delivery.result {
            Ok(()) => {
                self.stats.acked += 1;
                let latency = timestamp::now_pg_micros() - self.tracker.commit_time(txn)?;
                self.stats.latency.record_micros(latency);
                self.metrics.observe_latency_micros(latency);
                if let Some(in_kafka) = delivery.in_kafka {
                    let micros = i64::try_from(in_kafka.as_micros()).unwrap_or(i64::MAX);
                    self.stats.in_kafka.record_micros(micros);
                    self.metrics.observe_kafka_latency_micros(micros);
                }
                self.metrics.acked();
            }
            // The refused record counts as done once its dead letter (if any) is in
            // flight, so the transaction cannot complete before the letter is acked.
            Err(err) => self.on_refused(sink, err, txn, delivery.size)?,
        }
        self.done(txn, delivery.size)
    }

    /// A record of `txn` is done (acked, or refused and handled as poison).
    fn done(&mut self, txn: u64, size: usize) -> Result<(), PipelineError> {
        self.tracker.acked(txn, size)?;
        self.watch.progress(txn, Instant::now());
        Ok(())
    }

    /// Send the record that met a full queue again (also while draining: it already
    /// counts in flight in its transaction, so the drain waits for it like for any
    /// record the producer holds).
    pub fn retry_pending<S: Sink>(&mut self, sink: &mut S) -> Result<(), PipelineError> {
        match self.pending.take() {
            Some(pending) => self.hand_over(sink, pending),
            None => Ok(()),
        }
    }

    /// Shutdown: read no more WAL, wait for what is in flight (a record waiting for
    /// queue space included).
    pub fn start_drain(&mut self) {
        self.draining = true;
    }

    /// Whether more WAL may be read: not draining, no record waiting for queue
    /// space, and under both in-flight caps.
    pub fn can_read(&self) -> bool {
        !self.draining
            && self.pending.is_none()
            && self.tracker.in_flight_records() < self.cfg.max_in_flight_records
            && self.tracker.in_flight_bytes() < self.cfg.max_in_flight_bytes
    }

    /// Draining and nothing is in flight any more.
    pub fn is_drained(&self) -> bool {
        self.draining && self.tracker.in_flight_records() == 0
    }

    /// The confirmable LSN when it moved past the last one [reported](Self::reported):
    /// persist it, confirm it, then report it.
    pub fn to_report(&self) -> Option<Lsn> {
        let confirmed = self.tracker.confirmed();
        (confirmed > self.reported).then_some(confirmed)
    }

    /// The caller persisted and confirmed `lsn`.
    pub fn reported(&mut self, lsn: Lsn) {
        self.reported = self.reported.max(lsn);
    }

    /// The last LSN the caller persisted and confirmed (what the server holds).
    pub fn last_reported(&self) -> Lsn {
        self.reported
    }

    /// The confirmable LSN (the tracker's low-water mark).
    pub fn confirmed(&self) -> Lsn {
        self.tracker.confirmed()
    }

    /// The delivery accounting, for gauges and progress lines.
    pub fn tracker(&self) -> &AckTracker {
        &self.tracker
    }

    /// Whether a record waits for queue space.
    pub fn waiting_for_queue(&self) -> bool {
        self.pending.is_some()
    }

    /// The oldest transaction with records in flight, when it has made no progress
    /// for `--stall-timeout` at `now` (never while draining: the drain deadline
    /// bounds that wait). Also returns the age of the oldest one, stalled or not.
    pub fn stalled(&mut self, now: Instant) -> (Option<Stall>, std::time::Duration) {
        let tracker = &self.tracker;
        let Some((record, age)) = self.watch.oldest(now, |t| tracker.outstanding(t) > 0) else {
            return (None, std::time::Duration::ZERO);
        };
        let stall = self
            .cfg
            .stall_timeout
            .filter(|timeout| age >= *timeout && !self.draining)
            .map(|timeout| Stall {
                record: record.clone(),
                age,
                timeout,
                in_flight: tracker.in_flight_records(),
            });
        (stall, age)
    }

    /// Counters so far (`confirmed` and `drain_timed_out` are the session's to set).
    pub fn stats(&self) -> &SessionStats {
        &self.stats
    }

    fn on_pgoutput<S: Sink>(
        &mut self,
        sink: &mut S,
        lsn: Lsn,
        data: Bytes,
    ) -> Result<(), PipelineError> {
        let message = self
            .decoder
            .decode(data)
            .map_err(|source| PipelineError::Decode { lsn, source })?;
        self.on_message(sink, lsn, message)
    }

    /// One decoded pgoutput message at `lsn`. The replication stream enters through
    /// [`on_wal`](Self::on_wal); poll mode ([`crate::poll`]) builds the same
    /// messages (Relation, Begin, Insert, Commit) from the rows it claims, so both
    /// modes share every decision from row to record.
    pub fn on_message<S: Sink>(
        &mut self,
        sink: &mut S,
        lsn: Lsn,
        message: PgOutputMessage,
    ) -> Result<(), PipelineError> {
        self.at = lsn;
        match message {
            PgOutputMessage::Begin(begin) => {
                let no = self.tracker.begin(begin.commit_time);
                self.txn = Some(Txn {
                    no,
                    commit_time: begin.commit_time,
                });
            }
            PgOutputMessage::Commit(commit) => {
                if let Some(txn) = self.txn.take() {
                    self.tracker.commit(txn.no, commit.end_lsn)?;
                }
            }
            PgOutputMessage::Relation(relation) => {
                if let Err(missing) = self.tables.on_relation(&relation) {
                    // Its rows are poison from now on; --on-invalid decides per row.
                    tracing::warn!(error = %missing, "outbox table no longer matches the column mapping; its rows are handled by --on-invalid missing-column");
                }
            }
            PgOutputMessage::Insert(insert) => self.on_insert(sink, lsn, &insert)?,
            PgOutputMessage::Update(update) => self.on_update("UPDATE", update.relation_id, lsn)?,
            PgOutputMessage::Delete(delete) => self.on_update("DELETE", delete.relation_id, lsn)?,
            PgOutputMessage::StreamStart(_) => {
                return Err(PipelineError::UnexpectedMessage("Stream Start"))
            }
            PgOutputMessage::BeginPrepare(_) => {
                return Err(PipelineError::UnexpectedMessage("Begin Prepare"))
            }
            PgOutputMessage::Message(m) if m.prefix == crate::heartbeat::PREFIX => {
                self.on_heartbeat(&m)
            }
            PgOutputMessage::Message(message) => self.on_logical_message(sink, &message)?,
            // Origin, Type, Truncate: nothing to relay.
            _ => {}
        }
        Ok(())
    }

    fn on_insert<S: Sink>(
        &mut self,
        sink: &mut S,
        lsn: Lsn,
        insert: &Insert,
    ) -> Result<(), PipelineError> {
        let route =
            self.tables
                .route(insert.relation_id)
                .ok_or(PipelineError::UnknownRelation {
                    lsn,
                    relid: insert.relation_id,
                })?;
        let Some(txn) = &self.txn else { return Ok(()) };
        let (no, commit_time) = (txn.no, txn.commit_time);
        let (record, invalid, table) = match route {
            RelationRoute::NotOutbox(table) => return Err(self.unmapped(table, lsn)),
            RelationRoute::Outbox(table, mapping, template) => {
                let event = mapping.event(&insert.tuple);
                let at = RowAt { table, lsn };
                let found = (&**mapping, template);
                match record::build(self.cfg, &self.metrics, found, &event, commit_time, at) {
                    Built::Poison(record, invalid) => (record, invalid, table),
                    Built::Send(record) => {
                        let at = self.at;
                        self.watch
                            .sent(no, Instant::now(), || first(&record, table, at));
                        return self.send(sink, record, no, Origin::default());
                    }
                }
            }
            RelationRoute::Unmapped(u) => {
                let record =
                    invalid::unmapped_row(&u.columns, u.id, &insert.tuple, unix_ms(commit_time));
                (record, invalid::missing_column(&u.missing), &u.table)
            }
        };
        let origin = Origin {
            table: Some(table.to_string()),
            lsn: Some(lsn.to_string()),
        };
        self.poison(sink, invalid, record, no, origin)
    }

    /// A row of a published table the relay does not map: passing it would confirm
    /// it unsent, so the session stops before its transaction can be confirmed.
    fn unmapped(&self, table: &TableName, lsn: Lsn) -> PipelineError {
        let tables: Vec<String> = self
            .cfg
            .tables
            .iter()
            .map(|t| t.table.to_string())
            .collect();
        PipelineError::UnmappedTable {
            table: table.clone(),
            lsn,
            tables: tables.join(","),
            publication: self.cfg.publication.clone(),
        }
    }

    fn on_update(&self, op: &'static str, relid: u32, lsn: Lsn) -> Result<(), PipelineError> {
        let table = match self.tables.route(relid) {
            Some(RelationRoute::Outbox(table, _, _)) => table,
            Some(RelationRoute::Unmapped(u)) => &u.table,
            Some(RelationRoute::NotOutbox(table)) => return Err(self.unmapped(table, lsn)),
            None => return Ok(()),
        };
        match self.cfg.on_update {
            OnUpdate::Ignore => Ok(()),
            OnUpdate::Warn => {
                tracing::warn!(op, table = %table, lsn = %lsn, "ignoring change to an outbox row");
                Ok(())
            }
            OnUpdate::Fail => Err(PipelineError::UpdateOnOutbox {
                op,
                table: table.clone(),
                lsn,
            }),
        }
    }

    /// Hand `record` of `txn` to the sink. It counts in flight from here on, also
    /// when the queue is full: it then waits in `pending` and keeps its transaction
    /// open until it is sent and acked.
    fn send<S: Sink>(
        &mut self,
        sink: &mut S,
        record: KafkaRecord,
        txn: u64,
        origin: Origin,
    ) -> Result<(), PipelineError> {
        self.tracker.sent(txn, record.size())?;
        let pending = Pending {
            record,
            txn,
            origin,
        };
        self.hand_over(sink, pending)
    }

    /// Offer a record that already counts in its transaction to the sink.
    fn hand_over<S: Sink>(&mut self, sink: &mut S, pending: Pending) -> Result<(), PipelineError> {
        match sink.send(&pending.record, self.tags.pack(pending.txn)) {
            Ok(()) => {
                self.stats.produced += 1;
                Ok(())
            }
            Err(SendError::QueueFull) => {
                self.pending = Some(pending);
                Ok(())
            }
            // librdkafka refused the size up front (message.max.bytes): the row is
            // poison; its dead letter (if any) counts first, then the row is done.
            Err(SendError::Refused(err)) if self.is_poison_refusal(&err, &pending.record) => {
                let Pending {
                    record,
                    txn,
                    origin,
                } = pending;
                let size = record.size();
                let invalid = Invalid {
                    cause: Cause::TooLarge,
                    reason: err.reason.clone(),
                };
                self.poison(sink, invalid, record, txn, origin)?;
                self.done(txn, size)
            }
            Err(SendError::Refused(err)) => Err(err.into()),
        }
    }

    /// librdkafka refused `record` up front for its size, and it is a row (a dead
    /// letter the producer refuses is not poison: it stops the relay).
    fn is_poison_refusal(&self, err: &DeliveryError, record: &KafkaRecord) -> bool {
        err.is_too_large() && record.topic != self.cfg.invalid.dlq_topic
    }

    /// A record of `txn` the broker did not take. A size refusal of a row (not of a
    /// dead letter) is a poison row (`--on-invalid too-large=…`; `fail` stops naming
    /// the row's table and LSN); any other refusal ends the session.
    fn on_refused<S: Sink>(
        &mut self,
        sink: &mut S,
        err: DeliveryError,
        txn: u64,
        size: usize,
    ) -> Result<(), PipelineError> {
        let commit_ms = unix_ms(self.tracker.commit_time(txn)?);
        let Some((record, mut invalid)) = record::refused_row(self.cfg, &err, size, commit_ms)
        else {
            return Err(err.into());
        };
        // The report names the record, not its change: say where its transaction
        // lies in the WAL (its first outbox change, and its commit once seen).
        let first = self.watch.first_of(txn).cloned();
        let commit = self.tracker.commit_lsn(txn)?;
        if let Some(first) = &first {
            invalid.reason += &match commit {
                Some(commit) => format!(
                    "; the row is in the transaction whose first outbox change is at {} (committed at {commit})",
                    first.lsn
                ),
                None => format!(
                    "; the row is in the transaction whose first outbox change is at {}",
                    first.lsn
                ),
            };
        }
        let origin = Origin {
            table: first.as_ref().map(|f| f.table.clone()),
            lsn: first.as_ref().map(|f| f.lsn.to_string()),
        };
        self.poison(sink, invalid, record, txn, origin)
    }

    /// The one entry of a poison row of transaction `txn`: apply `--on-invalid`. A
    /// dead letter joins the transaction like any record, so the LSN passes the row
    /// only once the dead letter is acked; a skipped row never enters the tracker.
    fn poison<S: Sink>(
        &mut self,
        sink: &mut S,
        invalid: Invalid,
        record: KafkaRecord,
        txn: u64,
        origin: Origin,
    ) -> Result<(), PipelineError> {
        let letter = record::poison(self.cfg, &self.metrics, invalid, &record, &origin)
            .map_err(PipelineError::Invalid)?;
        let Some(letter) = letter else {
            return Ok(()); // skipped: never enters the tracker
        };
        let (table, at) = (origin.table.as_deref().unwrap_or(""), self.at);
        self.watch
            .sent(txn, Instant::now(), || first(&letter, table, at));
        self.send(sink, letter, txn, origin)
    }
}

/// What names `record`, the first of its transaction, in a stall report.
fn first(record: &KafkaRecord, table: &(impl std::fmt::Display + ?Sized), lsn: Lsn) -> RecordRef {
    RecordRef {
        topic: record.topic.clone(),
        table: table.to_string(),
        lsn,
        event_id: record.id.clone(),
    }
}

/// A PostgreSQL timestamp (µs since 2000-01-01) as ms since the Unix epoch.
fn unix_ms(pg_micros: i64) -> i64 {
    timestamp::to_unix_micros(pg_micros).div_euclid(1000)
}

mod heartbeat;
pub mod message;
#[cfg(test)]
mod tests;

//! [`Relay`], the sans-I/O core of a session: every decision of the relay loop,
//! driven by its inputs, answering through a [`Sink`] and a few queries. The
//! session ([`Session`](super::Session)) only moves bytes between the stream, the sink and
//! this core, and keeps time.
//!
//! ```text
//!  inputs                                                     outputs
//!  on_wal(XLogData)  ─▶ Decoder ─▶ OutboxTables ─▶ record ─▶ Deliverer ─▶ Sink::send(record, tag)
//!                       └─ Message ─▶ message.rs (content → virtual row) ─┘
//!                                    poison row ─▶ Deliverer::poison (fail | skip | dead letter)
//!  on_wal(keepalive) ─┐
//!  on_delivery(tag)  ─┴▶ Deliverer (one unit per transaction) ─▶ to_report(): LSN to persist
//!  retry_pending()   ─▶ the record that met a full queue        then confirm
//!  start_drain()     ─▶ stop reading WAL                      can_read(), is_drained()
//!  sends and acks    ─▶ the deliverer's StallWatch ──────────▶ stalled(now)
//!  on_wal(heartbeat) ─▶ heartbeat.rs: timed if ours; its LSN confirmable when idle
//! ```
//!
//! Invariants: records reach the sink in WAL order (a record that met a full queue
//! is retried before any later WAL is read, during a drain too); every record
//! handed to the sink counts against its transaction until its report — also while
//! it waits for queue space — so the confirmable LSN is the tracker's
//! contiguous low-water mark, or a keepalive's WAL end (or a heartbeat's LSN) while
//! no transaction is open and nothing is in flight; hand-over, parking, refusals,
//! poison rows and their dead letters are the [`Deliverer`]'s (shared with poll
//! mode and `pgoutbox replay`), a transaction being its unit; a report of another
//! session's generation changes nothing; a row (insert, update or delete) of a
//! published table that is not an outbox table is an error, never passed; a
//! logical decoding message with an outbox prefix takes the row's record path and
//! counts in its transaction (`message.rs`). No
//! allocation per event beyond the record itself (records go straight to the sink)
//! and what names a transaction's first record for a stall report.

use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;

use super::deliver::{Deliverer, Unit};
use super::error::PipelineError;
use super::record::{self, Built, RowAt};
use super::sink::Sink;
use super::stall::Stall;
use super::tracker::AckTracker;
use super::{OnUpdate, PipelineConfig, SessionStats};
use crate::kafka::producer::Delivery;
use crate::metrics::Metrics;
use crate::outbox::invalid::Origin;
use crate::outbox::tables::{OutboxTables, RelationRoute};
use crate::pg::lsn::Lsn;
use crate::pg::names::TableName;
use crate::pg::source::pgoutput::{Decoder, Insert, PgOutputMessage};
use crate::pg::source::protocol::ReplicationMessage;

/// The open transaction.
struct Txn {
    no: Unit,
    commit_time: i64,
    /// Already in Kafka (exactly-once: at or below the newest committed
    /// watermark): its rows are not sent again.
    skip: bool,
}

/// The decisions of one replication session.
pub struct Relay<'a> {
    cfg: &'a PipelineConfig,
    metrics: Arc<Metrics>,
    decoder: Decoder,
    tables: OutboxTables,
    /// Hand-over, parking, refusals, poison, dead letters, ack accounting; a
    /// transaction is its unit.
    deliver: Deliverer<'a>,
    /// WAL position of the message being handled.
    at: Lsn,
    txn: Option<Txn>,
    draining: bool,
    /// The last LSN the caller persisted and confirmed.
    reported: Lsn,
    /// Logical decoding messages: the mapping of the last field set, counters.
    messages: message::Messages,
    /// Exactly-once: transactions committing at or below this LSN are in Kafka
    /// already (the newest committed watermark); `0/0` skips nothing.
    skip_through: Lsn,
    /// The commit LSN and end LSN of the last transaction whose Commit was handled.
    last_commit: (Lsn, Lsn),
    /// The table a publication repair's rows belong to (its last relation
    /// message), see [`repair`].
    repairing: Option<u32>,
}

impl<'a> Relay<'a> {
    /// The core of a session with `generation` (see [`DeliveryTag`]).
    pub fn new(cfg: &'a PipelineConfig, generation: u16, metrics: Arc<Metrics>) -> Self {
        Self {
            cfg,
            deliver: Deliverer::new(cfg, generation, metrics.clone()),
            metrics,
            decoder: Decoder::new(),
            tables: OutboxTables::new(cfg.tables.clone()).pinning(cfg.pinned.clone()),
            at: Lsn::INVALID,
            txn: None,
            draining: false,
            reported: Lsn::INVALID,
            messages: message::Messages::default(),
            skip_through: Lsn::INVALID,
            last_commit: (Lsn::INVALID, Lsn::INVALID),
            repairing: None,
        }
    }

    /// Exactly-once: send nothing of the transactions that commit at or below
    /// `lsn` (the newest committed watermark's commit LSN), nor of the
    /// non-transactional messages written there or before.
    pub fn skip_through(&mut self, lsn: Lsn) {
        self.skip_through = lsn;
    }

    /// The commit LSN and end LSN of the last transaction whose Commit was handled
    /// (`0/0` before any).
    pub fn last_commit(&self) -> (Lsn, Lsn) {
        self.last_commit
    }

    /// Whether a transaction is open (its Commit not handled yet).
    pub fn in_transaction(&self) -> bool {
        self.txn.is_some()
    }

    /// Whether the transaction being read is skipped (see [`Self::skip_through`]),
    /// or, outside one, a non-transactional message at `lsn` is.
    pub(super) fn skipped(&self, lsn: Lsn) -> bool {
        match &self.txn {
            Some(txn) => txn.skip,
            None => !self.skip_through.is_invalid() && lsn <= self.skip_through,
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
                    self.deliver.confirm_idle(wal_end);
                }
                Ok(())
            }
        }
    }

    /// One delivery report (see [`Deliverer::on_delivery`]).
    pub fn on_delivery<S: Sink>(
        &mut self,
        sink: &mut S,
        delivery: Delivery,
    ) -> Result<(), PipelineError> {
        self.deliver.on_delivery(sink, delivery)
    }

    /// Send the record that met a full queue again (also while draining: it already
    /// counts in flight in its transaction, so the drain waits for it like for any
    /// record the producer holds).
    pub fn retry_pending<S: Sink>(&mut self, sink: &mut S) -> Result<(), PipelineError> {
        self.deliver.retry_pending(sink)
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
            && self
                .deliver
                .can_take(self.cfg.max_in_flight_records, self.cfg.max_in_flight_bytes)
    }

    /// Whether the session drains (reads no more WAL).
    pub fn draining(&self) -> bool {
        self.draining
    }

    /// Draining and nothing is in flight any more.
    pub fn is_drained(&self) -> bool {
        self.draining && self.deliver.tracker().in_flight_records() == 0
    }

    /// The confirmable LSN when it moved past the last one [reported](Self::reported):
    /// persist it, confirm it, then report it.
    pub fn to_report(&self) -> Option<Lsn> {
        let confirmed = self.deliver.confirmed();
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
        self.deliver.confirmed()
    }

    /// The delivery accounting, for gauges and progress lines.
    pub fn tracker(&self) -> &AckTracker {
        self.deliver.tracker()
    }

    /// The records the window lets be in flight now (at most `--max-in-flight`).
    pub fn window(&self) -> usize {
        self.deliver.window(self.cfg.max_in_flight_records)
    }

    /// Whether a record waits for queue space.
    pub fn waiting_for_queue(&self) -> bool {
        self.deliver.waiting_for_queue()
    }

    /// The oldest transaction with records in flight, when it has made no progress
    /// for `--stall-timeout` at `now` (never while draining: the drain deadline
    /// bounds that wait). Also returns the age of the oldest one, stalled or not.
    pub fn stalled(&mut self, now: Instant) -> (Option<Stall>, std::time::Duration) {
        let timeout = self.cfg.stall_timeout.filter(|_| !self.draining);
        self.deliver.stalled(now, timeout)
    }

    /// Counters so far (`confirmed` and `drain_timed_out` are the session's to set).
    pub fn stats(&self) -> &SessionStats {
        self.deliver.stats()
    }

    /// What this session handed to the producer so far (exactly-once sizes its
    /// Kafka transactions by it).
    pub fn sent(&self) -> crate::pipeline::exactly_once::Sent {
        let stats = self.deliver.stats();
        crate::pipeline::exactly_once::Sent {
            records: stats.produced,
            bytes: stats.produced_bytes,
        }
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
                let no = self.deliver.begin(begin.commit_time);
                self.txn = Some(Txn {
                    no,
                    commit_time: begin.commit_time,
                    skip: !self.skip_through.is_invalid() && begin.final_lsn <= self.skip_through,
                });
            }
            PgOutputMessage::Commit(commit) => {
                if let Some(txn) = self.txn.take() {
                    self.deliver.commit(txn.no, commit.end_lsn)?;
                }
                self.last_commit = (commit.commit_lsn, commit.end_lsn);
            }
            PgOutputMessage::Relation(relation) => {
                if let Err(mismatch) = self.tables.on_relation(&relation) {
                    // Its rows are poison from now on; --on-invalid decides per row.
                    let cause = mismatch.cause();
                    tracing::warn!(error = %mismatch, "outbox table no longer matches the column mapping; its rows are handled by --on-invalid {cause}");
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
        if txn.skip {
            return Ok(());
        }
        let (no, commit_time) = (txn.no, txn.commit_time);
        let built = record::row(
            self.cfg,
            &self.metrics,
            route,
            &insert.tuple,
            commit_time,
            lsn,
        );
        match built {
            Err(table) => Err(self.unmapped(table, lsn)),
            Ok((table, Built::Send(record))) => {
                let at = RowAt { table, lsn };
                self.deliver.send(sink, record, no, at)
            }
            Ok((table, Built::Poison(record, invalid))) => {
                let origin = Origin {
                    table: Some(table.to_string()),
                    lsn: Some(lsn.to_string()),
                };
                self.deliver
                    .poison(sink, invalid, record, (no, lsn), origin)
            }
        }
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
}

mod heartbeat;
pub mod message;
mod repair;
#[cfg(test)]
mod tests;

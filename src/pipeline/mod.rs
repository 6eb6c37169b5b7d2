//! The relay loop of one replication session: WAL in, Kafka records out, acks back
//! into the confirmed LSN.
//!
//! ```text
//!  ReplicationStream ─▶ Decoder ─▶ OutboxTables/ColumnMapping ─▶ KafkaRecord ─▶ KafkaSink
//!        ▲                                                                        │
//!        └── confirm ◀── persist ◀── AckTracker (per transaction) ◀── Delivery ────┘
//!             (100 ms status tick, and at session end)
//! ```
//!
//! One `biased` select with explicit priorities:
//! 1. shutdown — stop reading WAL and drain what is in flight;
//! 2. delivery reports — they free window space and move the low-water mark;
//! 3. the status timer — persist the confirmable LSN to the state file, then push it
//!    to the server; retry a record that met a full producer queue; enforce the drain
//!    deadline;
//! 4. new WAL — only while under the in-flight caps and with no record waiting.
//!
//! Invariants: records are produced in WAL order; the confirmed LSN is only ever the
//! tracker's contiguous low-water mark (or a keepalive's WAL end while nothing at
//! all is in flight) and never moves backwards; an LSN reaches the server only after
//! [`Checkpoint::persist`] put it on disk, and only from `report_status` or the end
//! of `run` (acks, commits and keepalives merely move the tracker), so after any
//! crash the slot is never ahead of the state file; any delivery failure ends the
//! session without confirming past the failed record; memory is bounded by the
//! in-flight caps, not by transaction size or backlog.

pub mod latency;
pub mod tracker;

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use tokio_util::sync::CancellationToken;

use crate::kafka::producer::{Delivery, DeliveryError, KafkaSink, SendError};
use crate::metrics::Metrics;
use crate::outbox::invalid::{self, Action, Cause, Invalid, InvalidPolicy, Origin};
use crate::outbox::record::KafkaRecord;
use crate::outbox::tables::{OutboxTables, RelationRoute, TableSpec};
use crate::pg::catalog::TableName;
use crate::pg::connection::PgError;
use crate::pg::lsn::Lsn;
use crate::pg::pgoutput::{DecodeError, Decoder, PgOutputMessage};
use crate::pg::protocol::ReplicationMessage;
use crate::pg::replication::ReplicationStream;
use crate::state::{Checkpoint, StateError};
use latency::LatencyHistogram;
use tracker::{AckTracker, UnknownTxn};

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
    /// Outbox tables, each with its mapping and topic template.
    pub tables: Vec<TableSpec>,
    /// UPDATE/DELETE policy.
    pub on_update: OnUpdate,
    /// Poison-row policy (`--on-invalid`, `--dlq-topic`).
    pub invalid: InvalidPolicy,
    /// Stop reading WAL at this many unacked records.
    pub max_in_flight_records: usize,
    /// … or at this many unacked bytes.
    pub max_in_flight_bytes: usize,
    /// How long shutdown waits for in-flight records.
    pub drain_timeout: Duration,
    /// How often the confirmed LSN is pushed to the server when it moved.
    pub status_interval: Duration,
}

/// Why a session ended with an error.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PipelineError {
    /// The replication connection failed.
    #[error("replication stream: {0}")]
    Pg(#[from] PgError),
    /// The replication stream ended without an error.
    #[error("replication stream closed")]
    StreamClosed,
    /// A pgoutput message did not decode.
    #[error("cannot decode pgoutput message at {lsn}: {source}")]
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
    #[error("delivery accounting: {0}")]
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

/// Counters of one session.
#[derive(Debug, Default, Clone)]
pub struct SessionStats {
    /// Commit → ack latency of acked records.
    pub latency: LatencyHistogram,
    /// Records handed to the producer.
    pub produced: u64,
    /// Records acked.
    pub acked: u64,
    /// The last confirmed LSN.
    pub confirmed: Lsn,
    /// Whether shutdown gave up waiting for in-flight records.
    pub drain_timed_out: bool,
}

/// Bits of a delivery tag used for the transaction number; the rest carries the
/// session generation, so reports of an earlier session are recognised and ignored.
const TXN_BITS: u32 = 48;

/// What woke the loop.
enum Step {
    Shutdown,
    Delivery(Option<Delivery>),
    Tick,
    Wal(Option<Result<ReplicationMessage, PgError>>),
    Progress,
}

/// WAL messages handled per wake-up of the loop when more are already queued.
const WAL_BATCH: usize = 256;

/// How often a progress line is logged.
const PROGRESS_INTERVAL: Duration = Duration::from_secs(10);

struct Txn {
    no: u64,
    commit_time: i64,
}

struct Pending {
    record: KafkaRecord,
    txn: u64,
    /// Where the row came from (for a dead letter if the producer refuses its size).
    origin: Origin,
}

/// One replication session's loop state.
pub struct Session<'a> {
    cfg: &'a PipelineConfig,
    metrics: Arc<Metrics>,
    /// The server's WAL end as last reported (for the lag gauge).
    server_wal_end: Lsn,
    sink: &'a mut KafkaSink,
    stream: ReplicationStream,
    generation: u16,
    decoder: Decoder,
    tables: OutboxTables,
    tracker: AckTracker,
    txn: Option<Txn>,
    pending: Option<Pending>,
    stats: SessionStats,
    /// Persists an LSN before it may be confirmed.
    checkpoint: Checkpoint,
    reported: Lsn,
}

impl<'a> Session<'a> {
    /// A session over a started stream. `generation` must differ from the previous
    /// session's so stale delivery reports are told apart; `checkpoint` persists
    /// every LSN before it is confirmed.
    pub fn new(
        cfg: &'a PipelineConfig,
        sink: &'a mut KafkaSink,
        stream: ReplicationStream,
        generation: u16,
        metrics: Arc<Metrics>,
        checkpoint: Checkpoint,
    ) -> Self {
        metrics.set_replication_connected(true);
        Self {
            cfg,
            metrics,
            server_wal_end: Lsn::INVALID,
            sink,
            stream,
            generation,
            decoder: Decoder::new(),
            tables: OutboxTables::new(cfg.tables.clone()),
            tracker: AckTracker::new(),
            txn: None,
            pending: None,
            stats: SessionStats::default(),
            checkpoint,
            reported: Lsn::INVALID,
        }
    }

    /// Run until shutdown (then drain, confirm, close) or an error.
    pub async fn run(mut self, shutdown: CancellationToken) -> Result<SessionStats, PipelineError> {
        let result = self.run_loop(shutdown).await;
        self.metrics.set_replication_connected(false);
        // Whatever happened, tell the server what is safely delivered (once on disk).
        let confirmed = self.tracker.confirmed();
        match self.checkpoint.persist(confirmed).await {
            Ok(()) => {
                self.stats.confirmed = confirmed;
                self.stream.confirm(confirmed);
            }
            Err(err) => tracing::error!(error = %err, lsn = %confirmed, "not confirming"),
        }
        if let Err(err) = self.stream.close().await {
            tracing::debug!(error = %err, "closing replication stream");
        }
        result.map(|()| self.stats.clone())
    }

    async fn run_loop(&mut self, shutdown: CancellationToken) -> Result<(), PipelineError> {
        let mut status = tokio::time::interval(self.cfg.status_interval);
        status.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut drain_deadline: Option<tokio::time::Instant> = None;
        let mut progress = tokio::time::interval(PROGRESS_INTERVAL);
        progress.reset();
        loop {
            if drain_deadline.is_some() && self.tracker.in_flight_records() == 0 {
                return Ok(());
            }
            let can_read = drain_deadline.is_none() && self.can_read();
            let step = tokio::select! {
                biased;
                // PRIORITY 1: shutdown: stop reading WAL, drain in-flight records.
                _ = shutdown.cancelled(), if drain_deadline.is_none() => Step::Shutdown,
                // PRIORITY 2: delivery reports.
                delivery = self.sink.next_delivery() => Step::Delivery(delivery),
                // PRIORITY 3: status timer, queue-full retry, drain deadline.
                _ = status.tick() => Step::Tick,
                // PRIORITY 4: new WAL, only under the in-flight caps.
                message = self.stream.recv(), if can_read => Step::Wal(message),
                // PRIORITY 5: a periodic progress line for operators.
                _ = progress.tick() => Step::Progress,
            };
            match step {
                Step::Shutdown => {
                    tracing::info!(
                        in_flight = self.tracker.in_flight_records(),
                        "draining in-flight records"
                    );
                    drain_deadline = Some(tokio::time::Instant::now() + self.cfg.drain_timeout);
                    // A record still waiting for queue space was never handed over.
                    self.pending = None;
                }
                Step::Delivery(None) => return Err(PipelineError::StreamClosed),
                Step::Delivery(Some(delivery)) => {
                    // Take every report that is ready in one go.
                    self.on_delivery(delivery)?;
                    while let Some(more) = self.sink.try_next_delivery() {
                        self.on_delivery(more)?;
                    }
                    if drain_deadline.is_none() {
                        self.retry_pending()?;
                    }
                }
                Step::Tick => {
                    self.report_status().await?;
                    if drain_deadline.is_none() {
                        self.retry_pending()?;
                    }
                    if drain_deadline.is_some_and(|d| tokio::time::Instant::now() >= d) {
                        tracing::warn!(
                            in_flight = self.tracker.in_flight_records(),
                            "drain timeout: exiting with records in flight; they will be resent from the slot"
                        );
                        self.stats.drain_timed_out = true;
                        return Ok(());
                    }
                }
                Step::Progress => tracing::info!(
                    produced = self.stats.produced,
                    latency_p50 = ?self.stats.latency.quantile(0.5),
                    latency_p99 = ?self.stats.latency.quantile(0.99),
                    acked = self.stats.acked,
                    in_flight = self.tracker.in_flight_records(),
                    in_flight_bytes = self.tracker.in_flight_bytes(),
                    open_txns = self.tracker.pending_txns(),
                    waiting_for_queue = self.pending.is_some(),
                    confirmed = %self.tracker.confirmed(),
                    "progress"
                ),
                Step::Wal(None) => return Err(PipelineError::StreamClosed),
                Step::Wal(Some(Err(err))) => return Err(err.into()),
                Step::Wal(Some(Ok(message))) => {
                    self.on_wal(message)?;
                    // Take what is already queued without another round of the
                    // select (which re-polls every branch): a backlog is read in
                    // batches, and deliveries wait at most WAL_BATCH messages.
                    for _ in 0..WAL_BATCH {
                        if !self.can_read() {
                            break;
                        }
                        match self.stream.try_recv() {
                            Some(Ok(message)) => self.on_wal(message)?,
                            Some(Err(err)) => return Err(err.into()),
                            None => break,
                        }
                    }
                }
            }
        }
    }

    /// Under the in-flight caps, with no record waiting for queue space.
    fn can_read(&self) -> bool {
        self.pending.is_none()
            && self.tracker.in_flight_records() < self.cfg.max_in_flight_records
            && self.tracker.in_flight_bytes() < self.cfg.max_in_flight_bytes
    }

    /// The one place an LSN goes to the server during a session: persist it, then
    /// confirm it. At most once per tick, and only when it moved.
    async fn report_status(&mut self) -> Result<(), PipelineError> {
        let confirmed = self.tracker.confirmed();
        self.metrics.set_in_flight(
            self.tracker.in_flight_records(),
            self.tracker.in_flight_bytes(),
        );
        self.metrics
            .set_slot(confirmed.0, self.server_wal_end.bytes_since(confirmed));
        if confirmed > self.reported {
            self.checkpoint.persist(confirmed).await?;
            self.stream.confirm(confirmed);
            self.stream.send_status_now();
            self.reported = confirmed;
        }
        Ok(())
    }

    fn on_delivery(&mut self, delivery: Delivery) -> Result<(), PipelineError> {
        let generation = delivery.tag >> TXN_BITS;
        if generation != usize::from(self.generation) {
            return Ok(()); // a record of an earlier session: it will be resent anyway
        }
        let txn = (delivery.tag & ((1 << TXN_BITS) - 1)) as u64;
        if let Err(err) = delivery.result {
            // The broker refused the size: apply the policy to the row, then count
            // the refused record as done (a dead letter is in flight first, so the
            // transaction cannot complete before it is acked).
            if !err.is_too_large()
                || err.topic == self.cfg.invalid.dlq_topic
                || self.cfg.invalid.action(Cause::TooLarge) == Action::Fail
            {
                return Err(err.into());
            }
            let refused = err.refused.as_deref();
            let record = KafkaRecord {
                topic: err.topic.clone(),
                key: refused.and_then(|r| r.key.clone()),
                value: None,
                id: Some(Bytes::from(err.event_id.clone())),
                event_type: refused.and_then(|r| r.event_type.clone()),
                timestamp_ms: crate::pg::timestamp::to_unix_micros(self.tracker.commit_time(txn)?)
                    .div_euclid(1000),
                headers: Vec::new(),
            };
            let invalid = Invalid {
                cause: Cause::TooLarge,
                reason: format!("{} (record of {} bytes)", err.reason, delivery.size),
            };
            self.on_invalid(invalid, record, txn, Origin::default())?;
            self.tracker.acked(txn, delivery.size)?;
            return Ok(());
        }
        self.stats.acked += 1;
        let latency = crate::pg::timestamp::now_pg_micros() - self.tracker.commit_time(txn)?;
        self.stats.latency.record_micros(latency);
        self.metrics.observe_latency_micros(latency);
        self.tracker.acked(txn, delivery.size)?;
        Ok(())
    }

    fn tag(&self, txn: u64) -> usize {
        (usize::from(self.generation) << TXN_BITS) | (txn as usize & ((1 << TXN_BITS) - 1))
    }

    fn send(&mut self, record: KafkaRecord, txn: u64, origin: Origin) -> Result<(), PipelineError> {
        match self.sink.send(&record, self.tag(txn)) {
            Ok(()) => {
                self.tracker.sent(txn, record.size())?;
                self.stats.produced += 1;
                Ok(())
            }
            Err(SendError::QueueFull) => {
                self.pending = Some(Pending {
                    record,
                    txn,
                    origin,
                });
                Ok(())
            }
            // librdkafka refused the size up front (message.max.bytes).
            Err(SendError::Refused(err))
                if err.is_too_large() && record.topic != self.cfg.invalid.dlq_topic =>
            {
                let invalid = Invalid {
                    cause: Cause::TooLarge,
                    reason: err.reason.clone(),
                };
                self.on_invalid(invalid, record, txn, origin)
            }
            Err(SendError::Refused(err)) => Err(err.into()),
        }
    }

    fn retry_pending(&mut self) -> Result<(), PipelineError> {
        match self.pending.take() {
            Some(Pending {
                record,
                txn,
                origin,
            }) => self.send(record, txn, origin),
            None => Ok(()),
        }
    }

    /// Apply `--on-invalid` to a poison row of transaction `txn`. A dead letter
    /// joins the transaction like any record, so the LSN passes the row only once
    /// the dead letter is acked; a skipped row never enters the tracker.
    fn on_invalid(
        &mut self,
        invalid: Invalid,
        record: KafkaRecord,
        txn: u64,
        origin: Origin,
    ) -> Result<(), PipelineError> {
        let action = self.cfg.invalid.action(invalid.cause);
        self.metrics.invalid_row(invalid.cause, action);
        let event_id = record.id_text();
        match action {
            Action::Fail => Err(PipelineError::Invalid(Box::new(PoisonRow {
                cause: invalid.cause.name(),
                reason: invalid.reason,
                event_id,
                table: origin.table.unwrap_or_else(|| "an outbox table".into()),
                lsn: origin.lsn.unwrap_or_else(|| "an unknown LSN".into()),
                fix: fix_for(invalid.cause),
            }))),
            Action::Skip | Action::Dlq => {
                tracing::warn!(
                    cause = invalid.cause.name(),
                    reason = %invalid.reason,
                    event_id,
                    table = origin.table.as_deref().unwrap_or(""),
                    lsn = origin.lsn.as_deref().unwrap_or(""),
                    action = action.name(),
                    "poison row: {} (--on-invalid)",
                    if action == Action::Skip { "skipping" } else { "dead-lettering" }
                );
                if action == Action::Skip {
                    return Ok(());
                }
                let letter =
                    invalid::dead_letter(&record, &invalid, &origin, &self.cfg.invalid.dlq_topic);
                self.send(letter, txn, origin)
            }
        }
    }

    fn on_wal(&mut self, message: ReplicationMessage) -> Result<(), PipelineError> {
        match message {
            ReplicationMessage::XLogData {
                wal_start, data, ..
            } => self.on_pgoutput(wal_start, data),
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

    fn on_pgoutput(&mut self, lsn: Lsn, data: Bytes) -> Result<(), PipelineError> {
        let message = self
            .decoder
            .decode(data)
            .map_err(|source| PipelineError::Decode { lsn, source })?;
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
            PgOutputMessage::Insert(insert) => {
                let route = self.tables.route(insert.relation_id).ok_or(
                    PipelineError::UnknownRelation {
                        lsn,
                        relid: insert.relation_id,
                    },
                )?;
                let Some(txn) = &self.txn else { return Ok(()) };
                let no = txn.no;
                let (record, invalid, table) = match route {
                    RelationRoute::Ignore => return Ok(()),
                    RelationRoute::Outbox(table, mapping, template) => {
                        let event = mapping.event(&insert.tuple);
                        let record = KafkaRecord::from_event(&event, template, txn.commit_time);
                        match invalid::check(&record, mapping.payload_unchecked()) {
                            None => return self.send(record, no, Origin::default()),
                            Some(invalid) => (record, invalid, table),
                        }
                    }
                    RelationRoute::Unmapped(u) => {
                        let commit_ms =
                            crate::pg::timestamp::to_unix_micros(txn.commit_time).div_euclid(1000);
                        let record =
                            invalid::unmapped_row(&u.columns, u.id, &insert.tuple, commit_ms);
                        let invalid = Invalid {
                            cause: Cause::MissingColumn,
                            reason: format!(
                                "the table has no column {:?} (mapped as {}); its columns are: {}",
                                u.missing.column, u.missing.role, u.missing.available
                            ),
                        };
                        (record, invalid, &u.table)
                    }
                };
                let origin = Origin {
                    table: Some(table.to_string()),
                    lsn: Some(lsn.to_string()),
                };
                self.on_invalid(invalid, record, no, origin)?;
            }
            PgOutputMessage::Update(update) => self.on_update("UPDATE", update.relation_id, lsn)?,
            PgOutputMessage::Delete(delete) => self.on_update("DELETE", delete.relation_id, lsn)?,
            PgOutputMessage::StreamStart(_) => {
                return Err(PipelineError::UnexpectedMessage("Stream Start"))
            }
            PgOutputMessage::BeginPrepare(_) => {
                return Err(PipelineError::UnexpectedMessage("Begin Prepare"))
            }
            // Origin, Type, Truncate, logical decoding messages: nothing to relay.
            _ => {}
        }
        Ok(())
    }

    fn on_update(&self, op: &'static str, relid: u32, lsn: Lsn) -> Result<(), PipelineError> {
        let table = match self.tables.route(relid) {
            Some(RelationRoute::Outbox(table, _, _)) => table,
            Some(RelationRoute::Unmapped(u)) => &u.table,
            _ => return Ok(()),
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

/// The fix offered when a poison row stops the relay.
fn fix_for(cause: Cause) -> &'static str {
    match cause {
        Cause::NullKey => "give the row a non-empty key column (see --key-column)",
        Cause::InvalidTopic => "correct the row's routing column or --topic-template so the topic is 1-249 of [a-zA-Z0-9._-]",
        Cause::TooLarge => "make the payload smaller, or raise the broker's message.max.bytes and --kafka-option message.max.bytes",
        Cause::InvalidJson => "write JSON into the payload column (or make it jsonb, which PostgreSQL checks)",
        Cause::MissingColumn => "the outbox table was altered: restore the column, or map it to the new column name (--id-column, --key-column, --payload-column, --route-by-field) and restart",
    }
}

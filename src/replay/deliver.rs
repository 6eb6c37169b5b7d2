//! Where replayed records go: [`Output::DryRun`] prints them, [`Output::Kafka`]
//! hands them to the relay's own delivery path ([`Deliverer`], over the same
//! producer `run` uses) and waits for every delivery report.
//!
//! ```text
//!  row ─▶ emit / poison ─▶ Deliverer (one unit per row) ─▶ KafkaSink
//!           queue full: parked ─▶ take a report, offer it again
//!           refused for its size (a row) ─▶ --on-invalid too-large ─▶ dead letter
//!  Delivery ─▶ Deliverer::on_delivery ─▶ acked (counted per topic by the producer)
//!                                        any other failure ─▶ Summary::failed
//! ```
//!
//! Everything a record meets on its way is the deliverer's, as for `run`; this
//! file is the async shell a replay needs around it (a relay session is the other
//! one): wait for a report when the window is full or a record is parked, and
//! drain at the end. What differs from `run` is the deliverer's replay setting
//! ([`Deliverer::for_replay`]): a failed record is listed and the rest go on (the
//! operator replays again; `run` stops because its slot holds the row), and every
//! record carries the `pgoutbox.replay` header, dead letters included.
//!
//! The window: the deliverer's one rule ([`Deliverer::can_take`]) with the replay's
//! own caps from its [`PipelineConfig`] ([`MAX_IN_FLIGHT`] records, no byte cap:
//! replay has no `--max-in-flight` flags, and its rows are read `--batch-size` at a
//! time), plus at most [`MAX_IN_FLIGHT`] rows not yet complete: each row is a unit,
//! and units behind a slow one stay in the tracker until it is acked.
//!
//! Invariants: every record handed over is answered by exactly one report before
//! [`Output::finish`] returns (or is listed as failed when the drain after a
//! signal gives up); memory does not grow with the replay.

use std::io::Write;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use tokio_util::sync::CancellationToken;

use crate::kafka::producer::KafkaSink;
use crate::metrics::Metrics;
use crate::outbox::invalid::{Invalid, Origin};
use crate::outbox::record::KafkaRecord;
use crate::pg::lsn::Lsn;
use crate::pipeline::deliver::Deliverer;
use crate::pipeline::record::{self, RowAt};
use crate::pipeline::{PipelineConfig, PipelineError};

use super::print::{write_record, Failed, Summary};
use super::ReplayError;

/// The header that marks a replayed record; its value is the replay's start time.
pub const REPLAY_HEADER: &str = "pgoutbox.replay";

/// Records (and rows) awaiting a delivery report before replay reads more rows.
pub const MAX_IN_FLIGHT: usize = 10_000;

/// How long a replay interrupted by a signal waits for outstanding reports.
const DRAIN_AFTER_SIGNAL: Duration = Duration::from_secs(30);

/// The replay generation of every delivery tag (a replay has one producer).
const GENERATION: u16 = 0;

/// Add the `pgoutbox.replay` header to `record` unless it has it (a dry run's).
fn mark(record: &mut KafkaRecord, stamp: &Bytes) {
    if !record
        .headers
        .iter()
        .any(|(name, _)| *name == REPLAY_HEADER)
    {
        record.headers.push((REPLAY_HEADER, stamp.clone()));
    }
}

/// The producer side of a replay.
pub struct Kafka<'c> {
    sink: KafkaSink,
    deliver: Deliverer<'c>,
    metrics: Arc<Metrics>,
    /// The replay's start: what a row's unit counts as its commit time.
    started: i64,
    /// SIGINT/SIGTERM: stops a wait for a report while rows are read.
    shutdown: CancellationToken,
    /// Rows are still being read (a signal then ends the wait for a report).
    reading: bool,
}

impl<'c> Kafka<'c> {
    /// Replay through `sink` with the record path `cfg`; `stamp` is the
    /// `pgoutbox.replay` value, `started` the replay's start; `shutdown`
    /// interrupts it.
    pub fn new(
        sink: KafkaSink,
        cfg: &'c PipelineConfig,
        metrics: Arc<Metrics>,
        (stamp, started): (Bytes, i64),
        shutdown: CancellationToken,
    ) -> Self {
        let deliver =
            Deliverer::new(cfg, GENERATION, metrics.clone()).for_replay(REPLAY_HEADER, stamp);
        Self {
            sink,
            deliver,
            metrics,
            started,
            shutdown,
            reading: true,
        }
    }
}

/// Where records go.
pub enum Output<'o> {
    /// `--dry-run`: one JSON line per record.
    DryRun(&'o mut dyn Write),
    /// To Kafka.
    Kafka(Box<Kafka<'o>>),
}

/// What every record of a replay shares.
pub struct Ctx<'c> {
    /// The record path's settings.
    pub cfg: &'c PipelineConfig,
    /// Counters (`pgoutbox_invalid_rows_total`, …), as `run` counts them.
    pub metrics: &'c Metrics,
    /// The `pgoutbox.replay` header value.
    pub stamp: Bytes,
    /// What happened so far.
    pub summary: Summary,
}

impl Ctx<'_> {
    fn counted(&mut self, topic: &str) {
        self.summary.sent += 1;
        *self.summary.topics.entry(topic.to_owned()).or_default() += 1;
    }
}

impl Output<'_> {
    /// Send (or print) `record`, of a row of `origin.table`.
    pub async fn emit(
        &mut self,
        ctx: &mut Ctx<'_>,
        mut record: KafkaRecord,
        origin: Origin,
    ) -> Result<(), ReplayError> {
        let table = origin.table.as_deref().unwrap_or("");
        match self {
            Output::DryRun(out) => {
                mark(&mut record, &ctx.stamp);
                write_record(table, &record, &mut **out).map_err(ReplayError::Output)?;
                ctx.counted(&record.topic);
                Ok(())
            }
            Output::Kafka(kafka) => {
                let unit = kafka.deliver.begin(kafka.started);
                let at = RowAt {
                    table: &table,
                    lsn: Lsn::INVALID,
                };
                let sent = kafka.deliver.send(&mut kafka.sink, record, unit, at);
                kafka.unit_given(unit, sent).await
            }
        }
    }

    /// Apply `--on-invalid` to a poison row that would have become `record`: print
    /// or send its dead letter, skip it, or stop ([`ReplayError::Poison`]).
    pub async fn poison(
        &mut self,
        ctx: &mut Ctx<'_>,
        invalid: Invalid,
        record: KafkaRecord,
        origin: Origin,
    ) -> Result<(), ReplayError> {
        match self {
            Output::DryRun(_) => {
                let letter = record::poison(ctx.cfg, ctx.metrics, invalid, &record, &origin)
                    .map_err(ReplayError::Poison)?;
                let Some(letter) = letter else {
                    ctx.summary.skipped += 1;
                    return Ok(());
                };
                ctx.summary.dead_lettered += 1;
                self.emit(ctx, letter, origin).await
            }
            Output::Kafka(kafka) => {
                let unit = kafka.deliver.begin(kafka.started);
                let at = (unit, Lsn::INVALID);
                let sent = kafka
                    .deliver
                    .poison(&mut kafka.sink, invalid, record, at, origin);
                kafka.unit_given(unit, sent).await
            }
        }
    }

    /// Wait for every outstanding report; once `shutdown` fired (before or during
    /// the wait), at most [`DRAIN_AFTER_SIGNAL`] longer, then the records still
    /// unanswered are listed as failed. The summary gets the deliverer's counts.
    pub async fn finish(
        &mut self,
        ctx: &mut Ctx<'_>,
        shutdown: &CancellationToken,
    ) -> Result<(), ReplayError> {
        let Output::Kafka(kafka) = self else {
            return Ok(());
        };
        kafka.reading = false;
        let drained = {
            let signalled = async {
                shutdown.cancelled().await;
                tokio::time::sleep(DRAIN_AFTER_SIGNAL).await;
            };
            tokio::select! {
                result = kafka.drain() => Some(result),
                () = signalled => None,
            }
        };
        kafka.summarise(&mut ctx.summary);
        match drained {
            Some(result) => result,
            None => {
                kafka.unanswered(&mut ctx.summary);
                Ok(())
            }
        }
    }
}

impl Kafka<'_> {
    /// `unit` got its record(s) (`given`): complete it, then wait while a record
    /// is parked or the window is full.
    async fn unit_given(
        &mut self,
        unit: u64,
        given: Result<(), PipelineError>,
    ) -> Result<(), ReplayError> {
        // The unit is complete whatever happened: a poison row's `fail` stops the
        // replay, and the drain still waits for what is in flight.
        self.deliver.commit(unit, Lsn::INVALID).map_err(failure)?;
        given.map_err(failure)?;
        while !self.has_room() {
            self.one_report().await?;
        }
        Ok(())
    }

    /// The window (see the module doc).
    fn has_room(&self) -> bool {
        let cfg = self.deliver.config();
        self.deliver
            .can_take(cfg.max_in_flight_records, cfg.max_in_flight_bytes)
            && self.deliver.tracker().pending_txns() < MAX_IN_FLIGHT
    }

    /// Wait for one delivery report and account for it; then offer a parked record
    /// again. While rows are read, a signal ends the wait
    /// ([`ReplayError::Interrupted`]): with the brokers down it could last until
    /// `message.timeout.ms`.
    async fn one_report(&mut self) -> Result<(), ReplayError> {
        let delivery = tokio::select! {
            delivery = self.sink.next_delivery() => delivery,
            () = self.shutdown.cancelled(), if self.reading => {
                return Err(ReplayError::Interrupted);
            }
        };
        let delivery = delivery.ok_or(ReplayError::ProducerGone)?;
        self.deliver
            .on_delivery(&mut self.sink, delivery)
            .map_err(failure)?;
        self.deliver.retry_pending(&mut self.sink).map_err(failure)
    }

    async fn drain(&mut self) -> Result<(), ReplayError> {
        while self.deliver.waiting_for_queue() || self.deliver.tracker().in_flight_records() > 0 {
            self.one_report().await?;
        }
        Ok(())
    }

    /// What the deliverer counted, into the summary (acks per topic as the
    /// producer counted them).
    fn summarise(&mut self, summary: &mut Summary) {
        let stats = self.deliver.stats();
        summary.sent += stats.acked;
        summary.dead_lettered += stats.dead_lettered;
        summary.skipped += stats.skipped;
        for (topic, n) in self.metrics.published_by_topic() {
            *summary.topics.entry(topic).or_default() += n;
        }
        summary.failed.append(self.deliver.failed());
    }

    /// The drain after a signal gave up: each row still in flight is listed.
    fn unanswered(&self, summary: &mut Summary) {
        for first in self.deliver.outstanding() {
            summary.failed.push(Failed {
                event_id: first.event_id(),
                topic: first.topic.clone(),
                reason: format!("no delivery report within {DRAIN_AFTER_SIGNAL:?} after the replay was interrupted; it may or may not have arrived"),
            });
        }
    }
}

/// A deliverer error as the replay's: `--on-invalid fail` is the poison stop; any
/// other is an accounting failure (a failed record is listed, never returned).
fn failure(err: PipelineError) -> ReplayError {
    match err {
        PipelineError::Invalid(poison) => ReplayError::Poison(poison),
        other => ReplayError::Deliver(Box::new(other)),
    }
}

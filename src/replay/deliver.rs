//! Where replayed records go: [`Output::DryRun`] prints them, [`Output::Kafka`]
//! hands them to the same producer `run` uses ([`KafkaSink`]) and waits for every
//! delivery report.
//!
//! ```text
//!  record ─▶ emit ─▶ KafkaSink::send ──(queue full: take a report, retry)
//!                        │ refused for its size ─▶ --on-invalid too-large
//!  Delivery ◀────────────┘ acked ─▶ counted per topic
//!                          size refused by the broker ─▶ --on-invalid too-large
//!                          any other failure ─▶ Summary::failed (named, exit ≠ 0)
//! ```
//!
//! Invariants: every record handed over is answered by exactly one report before
//! [`Output::finish`] returns (or is listed as failed when the drain after a
//! signal gives up); at most [`MAX_IN_FLIGHT`] records await a report, so memory
//! does not grow with the replay; a dead letter goes through the same send path
//! (its own failures are failures, never poison again); every record carries the
//! `pgoutbox.replay` header.

use std::collections::HashMap;
use std::io::Write;
use std::time::Duration;

use bytes::Bytes;
use tokio_util::sync::CancellationToken;

use crate::kafka::producer::{Delivery, KafkaSink, SendError};
use crate::metrics::Metrics;
use crate::outbox::invalid::{Cause, Invalid, Origin};
use crate::outbox::record::KafkaRecord;
use crate::pg::timestamp::{now_pg_micros, to_unix_micros};
use crate::pipeline::record;
use crate::pipeline::PipelineConfig;

use super::print::{write_record, Failed, Summary};
use super::ReplayError;

/// The header that marks a replayed record; its value is the replay's start time.
pub const REPLAY_HEADER: &str = "pgoutbox.replay";

/// Records awaiting a delivery report before replay reads more rows.
pub const MAX_IN_FLIGHT: usize = 10_000;

/// How long a replay interrupted by a signal waits for outstanding reports.
const DRAIN_AFTER_SIGNAL: Duration = Duration::from_secs(30);

/// Add the `pgoutbox.replay` header to `record` unless it has it.
fn mark(record: &mut KafkaRecord, stamp: &Bytes) {
    if !record
        .headers
        .iter()
        .any(|(name, _)| *name == REPLAY_HEADER)
    {
        record.headers.push((REPLAY_HEADER, stamp.clone()));
    }
}

/// A record handed to the producer, until its report.
struct Flight {
    topic: String,
    event_id: String,
    origin: Origin,
}

/// The producer side of a replay.
pub struct Kafka {
    sink: KafkaSink,
    next_tag: usize,
    in_flight: HashMap<usize, Flight>,
    /// Dead letters of broker-refused records, sent before the next row.
    letters: Vec<(KafkaRecord, Origin)>,
    /// SIGINT/SIGTERM: stops a wait for queue space while rows are read.
    shutdown: CancellationToken,
    /// Rows are still being read (a signal then ends the wait for a report).
    reading: bool,
}

impl Kafka {
    /// Replay through `sink`; `shutdown` interrupts it.
    pub fn new(sink: KafkaSink, shutdown: CancellationToken) -> Self {
        Self {
            sink,
            next_tag: 0,
            in_flight: HashMap::new(),
            letters: Vec::new(),
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
    Kafka(Box<Kafka>),
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
    /// Apply `--on-invalid`; `Ok(Some(letter))` when a dead letter is to be sent.
    pub fn poison(
        &mut self,
        invalid: Invalid,
        record: &KafkaRecord,
        origin: &Origin,
    ) -> Result<Option<KafkaRecord>, ReplayError> {
        let letter = record::poison(self.cfg, self.metrics, invalid, record, origin)
            .map_err(ReplayError::Poison)?;
        match letter {
            Some(_) => self.summary.dead_lettered += 1,
            None => self.summary.skipped += 1,
        }
        Ok(letter)
    }

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
        mark(&mut record, &ctx.stamp);
        match self {
            Output::DryRun(out) => {
                let table = origin.table.as_deref().unwrap_or("");
                write_record(table, &record, &mut **out).map_err(ReplayError::Output)?;
                ctx.counted(&record.topic);
                Ok(())
            }
            Output::Kafka(kafka) => kafka.send(ctx, record, origin).await,
        }
    }

    /// Wait for every outstanding report; once `shutdown` fired (before or during
    /// the wait), at most [`DRAIN_AFTER_SIGNAL`] longer, then the records still
    /// unanswered are listed as failed.
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
                result = kafka.drain(ctx) => Some(result),
                () = signalled => None,
            }
        };
        if let Some(result) = drained {
            return result;
        }
        for flight in kafka.in_flight.drain().map(|(_, f)| f) {
            ctx.summary.failed.push(Failed {
                event_id: flight.event_id,
                topic: flight.topic,
                reason: format!("no delivery report within {DRAIN_AFTER_SIGNAL:?} after the replay was interrupted; it may or may not have arrived"),
            });
        }
        Ok(())
    }
}

impl Kafka {
    /// Hand `record` over, then any dead letter it or an earlier report caused;
    /// then wait while the in-flight cap is reached.
    async fn send(
        &mut self,
        ctx: &mut Ctx<'_>,
        record: KafkaRecord,
        origin: Origin,
    ) -> Result<(), ReplayError> {
        self.hand_over(ctx, record, origin).await?;
        while let Some((letter, origin)) = self.letters.pop() {
            self.hand_over(ctx, letter, origin).await?;
        }
        while self.in_flight.len() >= MAX_IN_FLIGHT {
            self.one_report(ctx).await?;
        }
        Ok(())
    }

    /// Offer one record until the producer takes or refuses it. A row refused for
    /// its size up front is a poison row (its dead letter is queued); a dead letter
    /// refused, or any other refusal, is a failure.
    async fn hand_over(
        &mut self,
        ctx: &mut Ctx<'_>,
        mut record: KafkaRecord,
        origin: Origin,
    ) -> Result<(), ReplayError> {
        mark(&mut record, &ctx.stamp);
        loop {
            let tag = self.next_tag;
            match self.sink.send(&record, tag) {
                Ok(()) => {
                    self.next_tag = self.next_tag.wrapping_add(1);
                    let flight = Flight {
                        event_id: record.id_text(),
                        topic: record.topic,
                        origin,
                    };
                    self.in_flight.insert(tag, flight);
                    return Ok(());
                }
                Err(SendError::QueueFull) => self.one_report(ctx).await?,
                Err(SendError::Refused(err))
                    if err.is_too_large() && record.topic != ctx.cfg.invalid.dlq_topic =>
                {
                    let invalid = Invalid {
                        cause: Cause::TooLarge,
                        reason: err.reason.clone(),
                    };
                    if let Some(letter) = ctx.poison(invalid, &record, &origin)? {
                        self.letters.push((letter, origin));
                    }
                    return Ok(());
                }
                Err(SendError::Refused(err)) => {
                    ctx.summary.failed.push(Failed {
                        event_id: err.event_id.clone(),
                        topic: err.topic.clone(),
                        reason: err.to_string(),
                    });
                    return Ok(());
                }
            }
        }
    }

    /// Wait for one delivery report and account for it.
    /// While rows are read, a signal ends the wait ([`ReplayError::Interrupted`]):
    /// with the brokers down it could last until `message.timeout.ms`.
    async fn one_report(&mut self, ctx: &mut Ctx<'_>) -> Result<(), ReplayError> {
        let delivery = tokio::select! {
            delivery = self.sink.next_delivery() => delivery,
            () = self.shutdown.cancelled(), if self.reading => {
                return Err(ReplayError::Interrupted);
            }
        };
        let delivery = delivery.ok_or(ReplayError::ProducerGone)?;
        self.on_report(ctx, delivery)
    }

    fn on_report(&mut self, ctx: &mut Ctx<'_>, delivery: Delivery) -> Result<(), ReplayError> {
        let Some(flight) = self.in_flight.remove(&delivery.tag) else {
            return Ok(());
        };
        let err = match delivery.result {
            Ok(()) => {
                ctx.counted(&flight.topic);
                return Ok(());
            }
            Err(err) => err,
        };
        let now_ms = to_unix_micros(now_pg_micros()) / 1000;
        let Some((record, invalid)) = record::refused(ctx.cfg, &err, delivery.size, now_ms) else {
            ctx.summary.failed.push(Failed {
                event_id: flight.event_id,
                topic: flight.topic,
                reason: err.to_string(),
            });
            return Ok(());
        };
        if let Some(letter) = ctx.poison(invalid, &record, &flight.origin)? {
            self.letters.push((letter, flight.origin));
        }
        Ok(())
    }

    async fn drain(&mut self, ctx: &mut Ctx<'_>) -> Result<(), ReplayError> {
        loop {
            if let Some((letter, origin)) = self.letters.pop() {
                self.hand_over(ctx, letter, origin).await?;
                continue;
            }
            if self.in_flight.is_empty() {
                return Ok(());
            }
            self.one_report(ctx).await?;
        }
    }
}

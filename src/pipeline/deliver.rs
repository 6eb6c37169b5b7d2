//! [`Deliverer`]: the one delivery path. Every record that leaves — a row of the
//! WAL (`run`), a claimed row (poll mode), a message, a replayed row, a dead letter
//! — is handed to the producer here, and every delivery report comes back here.
//!
//! ```text
//!  source (relay core, poll mode, replay)
//!    begin(commit_time) ─▶ Unit ─┐
//!    send(record, unit, at) ─────┼─▶ AckTracker.sent ─▶ Sink::send(record, tag(unit))
//!    poison(invalid, record) ────┘      │ queue full ─▶ parked; retry_pending() first
//!                  │                    │ refused for its size (a row, or a row the
//!                  │                    │ broker refused in an aborted transaction) ─▶ poison()
//!       --on-invalid: fail │ skip │ dead letter ─▶ send() in the same unit
//!    commit(unit, end_lsn)                               │
//!  on_delivery(report) ◀──────────────────────────────────┘
//!    acked ─▶ done(unit) ─▶ AckTracker: contiguous low-water mark (confirmed())
//!    refused by the broker for its size (a row) ─▶ poison() then done(unit)
//!    any other failure ─▶ stop (run, poll) │ listed in failed() (replay)
//! ```
//!
//! A *unit* is what the confirmed position moves by: a transaction for `run` and
//! poll mode, one row for `replay` (whose rows hold no LSN: its units commit at
//! `0/0` and only their accounting matters). Units are numbered by the
//! [`AckTracker`] in the order they begin; the [`DeliveryTag`] packs (generation,
//! unit) into the producer's opaque, so no map from tag to record is kept.
//!
//! Owns: hand-over to the producer (and the parked record that met a full queue),
//! the refusal predicate ([`record::is_poison_refusal`]: too large and not a dead
//! letter), `--on-invalid` applied through [`record::poison`], dead-letter chaining,
//! the in-flight/ack accounting ([`AckTracker`]) and what names a unit's first
//! record ([`StallWatch`]).
//!
//! Invariants:
//! - records reach the sink in the order they were given, per unit and across
//!   units: a parked record is offered again before anything else
//!   ([`can_take`](Deliverer::can_take) is false while one waits);
//! - every record handed over counts against its unit from the hand-over until its
//!   report — also while parked — so a unit is done only when each of its records
//!   was acked, or refused and handled as poison;
//! - a poison row's dead letter joins the row's unit before the row counts done, so
//!   the low-water mark passes the row only once its dead letter is acked; a
//!   skipped row never enters the tracker;
//! - a dead letter is never poison again: a refused dead letter stops `run` (and
//!   is listed as failed by a replay);
//! - a record whose failure stops `run` never counts done, so its unit never
//!   completes and no confirmed LSN passes it (a replay counts it done: its drain
//!   waits only for what is still in flight);
//! - a report of another generation changes nothing (its record is resent from the
//!   slot by the session that owns it);
//! - no allocation per record beyond the record itself, except what names the
//!   first record of a unit.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;

use super::error::PipelineError;
use super::record::{self, RowAt};
use super::sink::Sink;
use super::stall::{RecordRef, Stall, StallWatch};
use super::tag::DeliveryTag;
use super::tracker::AckTracker;
use super::window::Window;
use super::{PipelineConfig, SessionStats};
use crate::kafka::producer::{Delivery, DeliveryError, SendError};
use crate::metrics::Metrics;
use crate::outbox::invalid::{Cause, Invalid, Origin};
use crate::outbox::record::KafkaRecord;
use crate::pg::lsn::Lsn;
use crate::pg::timestamp;

/// What the confirmed position moves by: a transaction (`run`, poll mode) or a row
/// (`replay`), numbered by the tracker.
pub type Unit = u64;

/// A record that met a full producer queue, to be offered again before anything else.
struct Parked {
    record: KafkaRecord,
    unit: Unit,
}

/// A record Kafka did not take, when failures are listed rather than fatal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failed {
    /// Its event id.
    pub event_id: String,
    /// Its topic.
    pub topic: String,
    /// Why.
    pub reason: String,
}

/// What a failed record does: stop (the relay: its slot holds the row, so the next
/// session sends it again) or join a list and let the rest go on (a replay: the
/// operator reads the list and replays again).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum OnFailure {
    Stop,
    List,
}

/// The one delivery path (see the module doc).
pub struct Deliverer<'a> {
    cfg: &'a PipelineConfig,
    metrics: Arc<Metrics>,
    tags: DeliveryTag,
    tracker: AckTracker,
    /// How many records may be in flight under the caps ([`Window`]).
    window: Window,
    /// What names each unit's first record, and its progress (`--stall-timeout`).
    watch: StallWatch,
    parked: Option<Parked>,
    stats: SessionStats,
    /// A header every record carries (`pgoutbox.replay`).
    mark: Option<(&'static str, Bytes)>,
    on_failure: OnFailure,
    failed: Vec<Failed>,
}

impl<'a> Deliverer<'a> {
    /// The deliverer of a session with `generation` (see [`DeliveryTag`]): a failed
    /// record stops it.
    pub fn new(cfg: &'a PipelineConfig, generation: u16, metrics: Arc<Metrics>) -> Self {
        Self {
            cfg,
            metrics,
            tags: DeliveryTag::new(generation),
            tracker: AckTracker::new(),
            window: Window::new(),
            watch: StallWatch::default(),
            parked: None,
            stats: SessionStats::default(),
            mark: None,
            on_failure: OnFailure::Stop,
            failed: Vec::new(),
        }
    }

    /// A replay's deliverer: every record carries header `name` = `value`, and a
    /// record Kafka does not take is listed in [`failed`](Self::failed) while the
    /// rest go on — so is a row the broker refused for its size under
    /// `too-large=fail` (its report comes while later rows are in flight); a row
    /// the producer refuses up front under `fail` still stops, before the next.
    pub fn for_replay(mut self, name: &'static str, value: Bytes) -> Self {
        self.mark = Some((name, value));
        self.on_failure = OnFailure::List;
        self
    }

    /// A new unit whose records were committed at `commit_time` (µs since
    /// 2000-01-01; stamps a broker-refused row's dead letter and the latency).
    pub fn begin(&mut self, commit_time: i64) -> Unit {
        self.tracker.begin(commit_time)
    }

    /// `unit` has all its records: it completes at `end_lsn` once they are done.
    pub fn commit(&mut self, unit: Unit, end_lsn: Lsn) -> Result<(), PipelineError> {
        self.tracker.commit(unit, end_lsn)?;
        Ok(())
    }

    /// Nothing open and nothing in flight: `lsn` holds no undelivered record.
    pub fn confirm_idle(&mut self, lsn: Lsn) {
        self.tracker.confirm_idle(lsn);
    }

    /// Hand `record` of `unit` (a row of `at.table`, at `at.lsn`) to the sink. It
    /// counts in flight from here on, also when the queue is full: it then waits,
    /// parked, and keeps its unit open until it is sent and acked.
    pub fn send<S: Sink>(
        &mut self,
        sink: &mut S,
        mut record: KafkaRecord,
        unit: Unit,
        at: RowAt<'_>,
    ) -> Result<(), PipelineError> {
        self.mark(&mut record);
        self.watch
            .sent(unit, Instant::now(), || first(&record, at.table, at.lsn));
        self.tracker.sent(unit, record.size())?;
        self.hand_over(sink, Parked { record, unit })
    }

    /// The one entry of a poison row of `unit`: apply `--on-invalid`. Its dead
    /// letter joins the unit like any record, so the unit completes only once the
    /// dead letter is acked; a skipped row never enters the tracker; `fail` is the
    /// [`PipelineError::Invalid`] that stops. `lsn`: where the row's change is
    /// ([`Lsn::INVALID`] for a row read with SQL).
    pub fn poison<S: Sink>(
        &mut self,
        sink: &mut S,
        invalid: Invalid,
        record: KafkaRecord,
        (unit, lsn): (Unit, Lsn),
        origin: Origin,
    ) -> Result<(), PipelineError> {
        let letter = record::poison(self.cfg, &self.metrics, invalid, &record, &origin)
            .map_err(PipelineError::Invalid)?;
        let Some(letter) = letter else {
            self.stats.skipped += 1;
            return Ok(()); // skipped: never enters the tracker
        };
        self.stats.dead_lettered += 1;
        let table = origin.table.as_deref().unwrap_or("");
        self.send(sink, letter, unit, RowAt { table: &table, lsn })
    }

    /// One delivery report. An ack moves the low-water mark; a size refusal of a
    /// row becomes a poison row; any other failure stops (or is listed).
    pub fn on_delivery<S: Sink>(
        &mut self,
        sink: &mut S,
        delivery: Delivery,
    ) -> Result<(), PipelineError> {
        let Some(unit) = self.tags.unpack(delivery.tag, self.tracker.oldest()) else {
            return Ok(()); // a record of an earlier session: it will be resent anyway
        };
        let handled = match delivery.result {
            Ok(()) => self.acked(unit, &delivery),
            // The refused record counts as done once its dead letter (if any) is in
            // flight, so the unit cannot complete before the letter is acked.
            Err(err) => {
                let topic = err.topic.clone();
                let refused = self.on_refused(sink, err, unit, delivery.size);
                self.listed(refused, &topic)
            }
        };
        self.done_unless_stopped(unit, delivery.size, handled)
    }

    /// Offer the parked record again (also while draining: it already counts in
    /// flight in its unit, so a drain waits for it like for any record the producer
    /// holds).
    pub fn retry_pending<S: Sink>(&mut self, sink: &mut S) -> Result<(), PipelineError> {
        match self.parked.take() {
            Some(parked) => self.hand_over(sink, parked),
            None => Ok(()),
        }
    }

    /// Whether a record waits for queue space.
    pub fn waiting_for_queue(&self) -> bool {
        self.parked.is_some()
    }

    /// Whether a source may give more: no record parked, under the window in use
    /// ([`Window`], at most `max_records`) and under `max_bytes`.
    pub fn can_take(&self, max_records: usize, max_bytes: usize) -> bool {
        self.parked.is_none()
            && self.tracker.in_flight_records() < self.window.records(max_records)
            && self.tracker.in_flight_bytes() < max_bytes
    }

    /// The records the window lets be in flight now, under `max_records` (see
    /// [`Window`]).
    pub fn window(&self, max_records: usize) -> usize {
        self.window.records(max_records)
    }

    /// The record path's settings.
    pub fn config(&self) -> &'a PipelineConfig {
        self.cfg
    }

    /// The contiguous low-water mark (see [`AckTracker`]).
    pub fn confirmed(&self) -> Lsn {
        self.tracker.confirmed()
    }

    /// The delivery accounting, for gauges and progress lines.
    pub fn tracker(&self) -> &AckTracker {
        &self.tracker
    }

    /// Counters so far (`confirmed` and `drain_timed_out` are the session's to set).
    pub fn stats(&self) -> &SessionStats {
        &self.stats
    }

    /// The records listed as failed (a replay's; always empty for `run`).
    pub fn failed(&mut self) -> &mut Vec<Failed> {
        &mut self.failed
    }

    /// The first record of each unit that still has records in flight, oldest
    /// first (what a replay names when it stops waiting for reports).
    pub fn outstanding(&self) -> impl Iterator<Item = &RecordRef> {
        self.watch
            .entries(|unit| self.tracker.outstanding(unit) > 0)
    }

    /// The oldest unit with records in flight and how long it has made no progress
    /// at `now`, when that passed `timeout`. Also returns the age of the oldest
    /// one, stalled or not.
    pub fn stalled(
        &mut self,
        now: Instant,
        timeout: Option<Duration>,
    ) -> (Option<Stall>, Duration) {
        let tracker = &self.tracker;
        let Some((record, age)) = self.watch.oldest(now, |t| tracker.outstanding(t) > 0) else {
            return (None, Duration::ZERO);
        };
        let stall = timeout
            .filter(|timeout| age >= *timeout)
            .map(|timeout| Stall {
                record: record.clone(),
                age,
                timeout,
                in_flight: tracker.in_flight_records(),
            });
        (stall, age)
    }

    fn mark(&self, record: &mut KafkaRecord) {
        let Some((name, value)) = &self.mark else {
            return;
        };
        if !record.headers.iter().any(|(n, _)| n == name) {
            record.headers.push((name, value.clone()));
        }
    }

    fn acked(&mut self, unit: Unit, delivery: &Delivery) -> Result<(), PipelineError> {
        self.stats.acked += 1;
        let (in_kafka, now) = (delivery.in_kafka, timestamp::now_pg_micros());
        self.window.acked(delivery.placement, in_kafka, now);
        let latency = now - self.tracker.commit_time(unit)?;
        self.stats.latency.record_micros(latency);
        self.metrics.observe_latency_micros(latency);
        if let Some(in_kafka) = in_kafka {
            let micros = i64::try_from(in_kafka.as_micros()).unwrap_or(i64::MAX);
            self.stats.in_kafka.record_micros(micros);
            self.metrics.observe_kafka_latency_micros(micros);
        }
        self.metrics.acked();
        Ok(())
    }

    /// A record of `unit` is done (acked, refused and handled as poison, or listed
    /// as failed).
    fn done(&mut self, unit: Unit, size: usize) -> Result<(), PipelineError> {
        self.tracker.acked(unit, size)?;
        let now = Instant::now();
        self.watch.progress(unit, now);
        // Units done and oldest leave the watch (a replay never asks for stalls).
        let tracker = &self.tracker;
        self.watch.oldest(now, |t| tracker.outstanding(t) > 0);
        Ok(())
    }

    /// A record of `unit` was handled with `result`: done, unless that stops the
    /// relay — then its unit must never complete, so no LSN passes the record. A
    /// replay's stop still counts it done: its drain waits for what is in flight.
    fn done_unless_stopped(
        &mut self,
        unit: Unit,
        size: usize,
        result: Result<(), PipelineError>,
    ) -> Result<(), PipelineError> {
        if result.is_ok() || self.on_failure == OnFailure::List {
            self.done(unit, size)?;
        }
        result
    }

    /// `result` of a refused record: a failure that stops, or (a replay's) one
    /// listed so the rest go on. Accounting errors always stop.
    fn listed(
        &mut self,
        result: Result<(), PipelineError>,
        topic: &str,
    ) -> Result<(), PipelineError> {
        let err = match result {
            Err(err) if self.on_failure == OnFailure::List => err,
            other => return other,
        };
        let failed = match err {
            PipelineError::Delivery(e) => Failed {
                reason: e.to_string(),
                event_id: e.event_id,
                topic: e.topic,
            },
            PipelineError::Invalid(poison) => Failed {
                reason: format!(
                    "poison row ({}): {}; --on-invalid {}=fail",
                    poison.cause, poison.reason, poison.cause
                ),
                event_id: poison.event_id.clone(),
                topic: topic.to_owned(),
            },
            other => return Err(other),
        };
        self.failed.push(failed);
        Ok(())
    }

    /// Offer a record that already counts in its unit to the sink.
    fn hand_over<S: Sink>(&mut self, sink: &mut S, parked: Parked) -> Result<(), PipelineError> {
        // A row the broker refused for its size in an aborted Kafka transaction
        // (exactly-once, [`Refusals`](super::refusals::Refusals)) is refused up
        // front in the redo, like one librdkafka refuses by message.max.bytes.
        let sent = match self.cfg.refusals.of(&parked.record) {
            Some(refusal) => Err(SendError::Refused(refusal)),
            None => sink.send(&parked.record, self.tags.pack(parked.unit)),
        };
        match sent {
            Ok(()) => {
                self.stats.produced += 1;
                self.stats.produced_bytes += parked.record.size() as u64;
                Ok(())
            }
            Err(SendError::QueueFull) => {
                self.parked = Some(parked);
                Ok(())
            }
            // librdkafka refused the size up front (message.max.bytes): the row is
            // poison; its dead letter (if any) counts first, then the row is done.
            Err(SendError::Refused(err)) if record::is_poison_refusal(self.cfg, &err) => {
                let Parked { record, unit } = parked;
                let size = record.size();
                let mut invalid = Invalid {
                    cause: Cause::TooLarge,
                    reason: err.reason.clone(),
                };
                let origin = self.locate(unit, &mut invalid)?;
                // `fail` stops here, before anything later is handed over (also a
                // replay: nothing of the row went out).
                let poisoned = self.poison(sink, invalid, record, (unit, Lsn::INVALID), origin);
                self.done_unless_stopped(unit, size, poisoned)
            }
            Err(SendError::Refused(err)) => {
                let size = parked.record.size();
                let topic = err.topic.clone();
                let listed = self.listed(Err(err.into()), &topic);
                self.done_unless_stopped(parked.unit, size, listed)
            }
        }
    }

    /// A record of `unit` the broker did not take. A size refusal of a row (not of
    /// a dead letter) is a poison row (`--on-invalid too-large=…`; `fail` stops
    /// naming the row's table and LSN); any other refusal is a failure.
    fn on_refused<S: Sink>(
        &mut self,
        sink: &mut S,
        err: DeliveryError,
        unit: Unit,
        size: usize,
    ) -> Result<(), PipelineError> {
        // The broker refused a row of an idempotent producer, and librdkafka
        // stopped the producer rather than deliver the records behind it
        // (`enable.gapless.guarantee`): no dead letter can go out through it. The
        // row is noted, the session ends, and the next one, with a new producer,
        // meets the row as poison before it is sent (as exactly-once does). A
        // replay cannot redo: it lists the row as failed, like every record the
        // stopped producer does not take after it.
        if sink.stopped() && record::is_poison_refusal(self.cfg, &err) {
            if self.on_failure == OnFailure::List {
                return Err(err.into());
            }
            self.cfg.refusals.note(&err);
            return Err(PipelineError::RedoWithNewProducer(Box::new(err)));
        }
        let commit_ms = unix_ms(self.tracker.commit_time(unit)?);
        let Some((record, mut invalid)) = record::refused_row(self.cfg, &err, size, commit_ms)
        else {
            return Err(err.into());
        };
        let origin = self.locate(unit, &mut invalid)?;
        self.poison(sink, invalid, record, (unit, Lsn::INVALID), origin)
    }

    /// Where a refused record of `unit` comes from. A refusal names the record, not
    /// its change: the origin is the table and LSN of the unit's first record (no
    /// LSN for a row read with SQL), and `invalid`'s reason says so — where its
    /// transaction lies in the WAL (its first outbox change, and its commit once
    /// seen).
    fn locate(&mut self, unit: Unit, invalid: &mut Invalid) -> Result<Origin, PipelineError> {
        let first = self.watch.first_of(unit);
        let origin = Origin {
            table: first.map(|f| f.table.clone()),
            lsn: first
                .filter(|f| f.lsn != Lsn::INVALID)
                .map(|f| f.lsn.to_string()),
        };
        if let Some(lsn) = &origin.lsn {
            invalid.reason += &match self.tracker.commit_lsn(unit)? {
                Some(commit) => format!(
                    "; the row is in the transaction whose first outbox change is at {lsn} (committed at {commit})"
                ),
                None => format!("; the row is in the transaction whose first outbox change is at {lsn}"),
            };
        }
        Ok(origin)
    }
}

/// What names `record`, the first of its unit, in a stall report. The event id is
/// copied, not shared: the entry lives as long as its unit is in flight, and a
/// shared slice would keep the whole buffer the row was read into alive with it.
fn first(record: &KafkaRecord, table: &(impl std::fmt::Display + ?Sized), lsn: Lsn) -> RecordRef {
    RecordRef {
        topic: record.topic.clone(),
        table: table.to_string(),
        lsn,
        event_id: record.id.as_deref().map(Bytes::copy_from_slice),
    }
}

/// A PostgreSQL timestamp (µs since 2000-01-01) as ms since the Unix epoch.
fn unix_ms(pg_micros: i64) -> i64 {
    timestamp::to_unix_micros(pg_micros).div_euclid(1000)
}

#[cfg(test)]
mod tests {
    //! The replay setting; the relay's use is tested through `relay/tests/`.

    use rdkafka::error::RDKafkaErrorCode;

    use super::*;
    use crate::outbox::invalid::InvalidPolicy;

    #[derive(Default)]
    struct VecSink {
        sent: Vec<(KafkaRecord, usize)>,
        refuse: Option<DeliveryError>,
        stopped: bool,
    }

    impl Sink for VecSink {
        fn send(&mut self, record: &KafkaRecord, tag: usize) -> Result<(), SendError> {
            match self.refuse.take() {
                Some(err) => Err(SendError::Refused(err)),
                None => {
                    self.sent.push((record.clone(), tag));
                    Ok(())
                }
            }
        }

        fn stopped(&self) -> bool {
            self.stopped
        }
    }

    fn config(policy: &str) -> PipelineConfig {
        let invalid = InvalidPolicy::parse(&[policy.to_owned()], "dead").unwrap();
        PipelineConfig {
            tables: Vec::new(),
            messages: crate::pipeline::MessageConfig::default(),
            format: crate::outbox::connect::RecordFormat::default(),
            publication: "pgoutbox".into(),
            on_update: crate::pipeline::OnUpdate::Ignore,
            invalid,
            record_timestamp: Default::default(),
            max_in_flight_records: 100,
            max_in_flight_bytes: 1 << 20,
            drain_timeout: Duration::from_secs(1),
            status_interval: Duration::from_millis(100),
            stall_timeout: None,
            refusals: Default::default(),
            pinned: Default::default(),
        }
    }

    fn record(id: &'static str) -> KafkaRecord {
        KafkaRecord {
            topic: "t".into(),
            key: Some(Bytes::from_static(b"k")),
            value: Some(Bytes::from_static(b"{}")),
            id: Some(Bytes::from_static(id.as_bytes())),
            event_type: None,
            placed: Vec::new(),
            timestamp_ms: 0,
            headers: Vec::new(),
        }
    }

    fn refusal(code: RDKafkaErrorCode, topic: &str) -> DeliveryError {
        DeliveryError {
            code,
            reason: "no".into(),
            topic: topic.into(),
            event_id: "e1".into(),
            permanent: true,
            refused: None,
        }
    }

    fn replay(cfg: &PipelineConfig) -> Deliverer<'_> {
        let stamp = Bytes::from_static(b"2026-12-03T00:00:00Z");
        Deliverer::new(cfg, 0, Arc::new(Metrics::default())).for_replay("pgoutbox.replay", stamp)
    }

    fn at() -> RowAt<'static> {
        RowAt {
            table: &"public.outbox",
            lsn: Lsn::INVALID,
        }
    }

    fn report(tag: usize, result: Result<(), DeliveryError>) -> Delivery {
        Delivery {
            tag,
            size: 3,
            result,
            in_kafka: None,
            placement: 0,
        }
    }

    /// A replay cannot redo a broker size refusal by a producer librdkafka
    /// stopped (the gapless guarantee), nor dead-letter through it: the row is
    /// listed as failed, and nothing is noted for a redo.
    #[test]
    fn a_replay_lists_a_broker_size_refusal_of_a_stopped_producer() {
        let cfg = config("dlq");
        let (mut d, mut sink) = (replay(&cfg), VecSink::default());
        let unit = d.begin(0);
        d.send(&mut sink, record("e1"), unit, at()).unwrap();
        d.commit(unit, Lsn::INVALID).unwrap();
        sink.stopped = true;
        let tag = sink.sent[0].1;
        let refused = refusal(RDKafkaErrorCode::MessageSizeTooLarge, "t");
        d.on_delivery(&mut sink, report(tag, Err(refused))).unwrap();
        assert_eq!(
            sink.sent.len(),
            1,
            "no dead letter through a stopped producer"
        );
        assert_eq!(d.failed().len(), 1);
        assert!(cfg.refusals.of(&record("e1")).is_none());
        assert_eq!(d.tracker().in_flight_records(), 0);
    }

    #[test]
    fn a_replay_lists_a_failed_record_and_goes_on_with_its_unit_done() {
        let cfg = config("dlq");
        let (mut d, mut sink) = (replay(&cfg), VecSink::default());
        for id in ["e1", "e2"] {
            let unit = d.begin(0);
            d.send(&mut sink, record(id), unit, at()).unwrap();
            d.commit(unit, Lsn::INVALID).unwrap();
        }
        let timed_out = refusal(RDKafkaErrorCode::MessageTimedOut, "t");
        let (first, second) = (sink.sent[0].1, sink.sent[1].1);
        d.on_delivery(&mut sink, report(first, Err(timed_out)))
            .unwrap();
        d.on_delivery(&mut sink, report(second, Ok(()))).unwrap();
        assert_eq!(d.tracker().in_flight_records(), 0);
        assert_eq!(d.tracker().pending_txns(), 0);
        assert_eq!(d.failed().len(), 1);
        assert_eq!(d.failed()[0].topic, "t");
        assert_eq!(d.stats().acked, 1);
        assert!(sink
            .sent
            .iter()
            .all(|(r, _)| r.headers.iter().any(|(n, _)| *n == "pgoutbox.replay")));
    }

    #[test]
    fn a_replayed_row_refused_for_its_size_is_dead_lettered_with_the_replay_header() {
        let cfg = config("too-large=dlq");
        let (mut d, mut sink) = (replay(&cfg), VecSink::default());
        sink.refuse = Some(refusal(RDKafkaErrorCode::MessageSizeTooLarge, "t"));
        let unit = d.begin(0);
        d.send(&mut sink, record("e1"), unit, at()).unwrap();
        d.commit(unit, Lsn::INVALID).unwrap();
        let (letter, tag) = sink.sent[0].clone();
        assert_eq!(letter.topic, "dead");
        assert!(letter.headers.iter().any(|(n, _)| *n == "pgoutbox.replay"));
        assert_eq!(
            (d.stats().dead_lettered, d.tracker().in_flight_records()),
            (1, 1)
        );
        // The letter refused in turn is never poison again: listed.
        let again = refusal(RDKafkaErrorCode::MessageSizeTooLarge, "dead");
        d.on_delivery(&mut sink, report(tag, Err(again))).unwrap();
        assert_eq!(d.failed()[0].topic, "dead");
        assert_eq!(d.tracker().in_flight_records(), 0);
    }

    #[test]
    fn a_replayed_row_the_broker_refuses_for_its_size_under_fail_is_listed() {
        let cfg = config("too-large=fail");
        let (mut d, mut sink) = (replay(&cfg), VecSink::default());
        let unit = d.begin(0);
        d.send(&mut sink, record("e1"), unit, at()).unwrap();
        d.commit(unit, Lsn::INVALID).unwrap();
        let too_large = refusal(RDKafkaErrorCode::MessageSizeTooLarge, "t");
        let tag = sink.sent[0].1;
        d.on_delivery(&mut sink, report(tag, Err(too_large)))
            .unwrap();
        let failed = &d.failed()[0];
        assert_eq!(
            (failed.event_id.as_str(), failed.topic.as_str()),
            ("e1", "t")
        );
        assert!(
            failed.reason.starts_with("poison row (too-large)"),
            "{}",
            failed.reason
        );
        assert_eq!(d.tracker().in_flight_records(), 0);
    }
}

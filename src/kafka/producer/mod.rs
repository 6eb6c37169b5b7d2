//! [`KafkaSink`]: hand records to librdkafka, get delivery reports back in order of
//! completion.
//!
//! ```text
//!  pipeline ─send(record, tag)─▶ [held: round in flight] ─▶ BaseProducer ─▶ brokers
//!      ▲                             ▲ hand over when reported  │ main queue non-empty: QueueWakeup
//!      │  next_delivery: serve ──────┴──────────────────────────┘ (the caller's loop polls)
//!      └──── Delivery{tag, result} ◀── ProducerContext::delivery
//! ```
//!
//! Rounds ([`KafkaSink::hold_rounds`], on in `pgoutbox run`): while librdkafka holds
//! [`ROUND_AT`] records not yet reported, further records wait in the sink, and go
//! to librdkafka together, in order, once reports were served — what a steady
//! stream of small transactions produces during one round trip leaves as one
//! request, and librdkafka's broker thread sleeps instead of spinning (see
//! [`ROUND_AT`]). Records of [`HOLD_BELOW`] bytes or more are never held.
//!
//! Delivery reports, client errors and librdkafka's log lines all arrive on the
//! client's main queue, served by whoever asks for deliveries ([`KafkaSink::next_delivery`],
//! [`KafkaSink::try_next_delivery`]) and, between sessions, by the
//! [prober](KafkaSink::prober) every time it probes: one poller at a time (a lock
//! held while serving), so reports keep their order.
//!
//! Owns the translation from librdkafka outcomes to what the pipeline needs:
//! - `send` returning [`SendError::QueueFull`] is the backpressure point: the caller
//!   keeps the record and retries after some deliveries came back.
//! - Every failure is classified as *permanent* (the record can never be delivered
//!   as is: too large, topic invalid/unauthorized/unknown) or *transient* (timeouts,
//!   transport): the pipeline stops confirming in both cases, exits on permanent ones
//!   and reconnects on transient ones.
//!
//! - A *fatal* error of the producer itself ([`KafkaSink::fatal_error`], e.g. the
//!   idempotent producer's OUT_OF_ORDER_SEQUENCE_NUMBER) ends that producer for good:
//!   every record it holds fails and no new one is accepted. [`KafkaSink::renew`]
//!   replaces it with a fresh producer (new producer id, new sequence numbers).
//!
//! Invariants: exactly one [`Delivery`] is reported for every record `send` accepted
//! by the current producer, held ones included (reports of a replaced producer are
//! discarded, and so are the records held for it); the held records of a partition
//! reach librdkafka in the order `send` took them, and before any later record of
//! that partition (records of a partition whose first write is in flight, or of a
//! topic whose first write is, may wait while others go on, see `first_writes`); no
//! text
//! from librdkafka (log lines, client errors, delivery errors, fatal errors) is
//! logged or returned before secret configuration values are scrubbed from it;
//! librdkafka's client errors and warning log lines go through one
//! [`OutageLog`] shared by every producer of the
//! sink, so an outage is logged once and summarized, not once per retry (all of
//! them count in `pgoutbox_kafka_client_errors_total`).
//!
//! # Layout
//! - here: [`KafkaSink`] — create and renew producers, `send`, hand over, serve;
//! - `outcome`: [`Delivery`], [`DeliveryError`] and the error classification
//!   ([`is_permanent`], [`is_too_large`], [`is_fence`]);
//! - `context`: librdkafka's callbacks (delivery reports, client errors, log lines)
//!   and the one-poller-at-a-time serving of the main queue;
//! - `rounds`: which records wait for the round in flight, and for how long;
//! - `first_writes`: a producer's first write to a partition goes alone (a broker
//!   accepts any sequence from a producer id new to a partition);
//! - `partitioner`: the Java client's placement of keyed records, which also tells
//!   `first_writes` each topic's partition count;
//! - `transactions`: an exactly-once producer's blocking transactional calls
//!   ([`Transactions`]) and how their failures are classified ([`TxnError`]).
//!
//! A producer configured with a `transactional.id` is *transactional*: `send`
//! begins a Kafka transaction before the first record after a commit or abort
//! ([`KafkaSink::transaction_open`]), and the caller ends it with
//! [`Transactions::commit`] or [`Transactions::abort`] on a thread of its own,
//! then [`KafkaSink::transaction_ended`].

mod context;
mod first_writes;
mod outcome;
mod partitioner;
mod rounds;
mod transactions;

pub use outcome::{
    is_fence, is_permanent, is_too_large, placement, Delivery, DeliveryError, RefusedRecord,
};
pub use rounds::{HELD_MAX, HELD_MAX_BYTES, HOLD_BELOW, ROUND_AT};
pub use transactions::{Transactions, TxnError};

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::producer::{BaseProducer, Producer, PurgeConfig};
use rdkafka::ClientConfig;
use tokio::sync::mpsc;

use crate::kafka::config::Scrubber;
use crate::kafka::wakeup::QueueWakeup;
use crate::metrics::Metrics;
use crate::outbox::event::EVENT_TYPE_HEADER;
use crate::outbox::record::{id_text_of, KafkaRecord};

use self::context::{Context, Outage, Polled};
use self::first_writes::FirstWrites;
use self::outcome::{delivery_error, header_value};
use self::partitioner::JavaPartitioner;
use self::rounds::{base_record, headers_of, HeldRecord, Record, FLUSH_STEP};

/// Why `send` did not take a record.
#[derive(Debug, thiserror::Error)]
pub enum SendError {
    /// librdkafka's queue is full, or the record waits for a producer's first write
    /// to its partition (`first_writes`): retry after deliveries came back.
    #[error("producer queue is full")]
    QueueFull,
    /// The record was refused.
    #[error(transparent)]
    Refused(DeliveryError),
}

/// The producer could not be created (the message is librdkafka's, scrubbed of
/// secret values).
#[derive(Debug, thiserror::Error)]
#[error("cannot create the Kafka producer: {message}")]
pub struct CreateError {
    message: String,
}

/// A new producer and both ends of its delivery-report channel.
type Created = (
    Arc<Polled>,
    mpsc::UnboundedReceiver<Delivery>,
    mpsc::UnboundedSender<Delivery>,
);

/// An idempotent producer plus its delivery-report channel.
pub struct KafkaSink {
    polled: Arc<Polled>,
    deliveries: mpsc::UnboundedReceiver<Delivery>,
    /// The sending end of `deliveries`, for refusals of held records.
    reports: mpsc::UnboundedSender<Delivery>,
    /// Records taken while a round was in flight, oldest first.
    held: std::collections::VecDeque<HeldRecord>,
    /// Their bytes ([`KafkaRecord::size`]).
    held_bytes: usize,
    /// Whether records are held while a round is in flight.
    rounds: bool,
    scrubber: Scrubber,
    /// What [`KafkaSink::renew`] builds a new producer from.
    config: ClientConfig,
    metrics: Arc<Metrics>,
    /// The current producer, for [`KafkaSink::prober`] (which outlives a renewal).
    current: Arc<Mutex<Arc<Polled>>>,
    /// What is logged of broker errors, across renewals.
    outage: Arc<Outage>,
    /// A transactional producer's id and whether a transaction is open (`None`:
    /// not transactional).
    txn: Option<(String, bool)>,
}

impl KafkaSink {
    /// Create the producer (does not wait for brokers).
    pub fn new(config: &ClientConfig, metrics: Arc<Metrics>) -> Result<Self, CreateError> {
        let scrubber = Scrubber::new(config);
        let outage = Arc::new(Outage::new());
        let (polled, deliveries, reports) =
            Self::create(config, &scrubber, metrics.clone(), outage.clone())?;
        Ok(Self {
            current: Arc::new(Mutex::new(polled.clone())),
            polled,
            deliveries,
            reports,
            held: std::collections::VecDeque::new(),
            held_bytes: 0,
            rounds: false,
            scrubber,
            config: config.clone(),
            metrics,
            outage,
            txn: config
                .get("transactional.id")
                .map(|id| (id.to_owned(), false)),
        })
    }

    /// Make the producer transactional with `id` (exactly-once), on a fresh
    /// producer: `init_transactions` may be called once per producer, and each
    /// session starts with it. Records fail after `transaction.timeout.ms` (default
    /// 60 s) instead of waiting forever: the transaction could not commit anyway.
    pub fn make_transactional(&mut self, id: &str) -> Result<(), CreateError> {
        self.config.set("transactional.id", id);
        let timeout = self
            .config
            .get("transaction.timeout.ms")
            .unwrap_or("60000")
            .to_owned();
        self.config.set("message.timeout.ms", timeout);
        self.txn = Some((id.to_owned(), false));
        self.renew()
    }

    /// The transactional calls of the current producer (`None` unless it has a
    /// `transactional.id`).
    pub fn transactions(&self) -> Option<Transactions> {
        let (id, _) = self.txn.as_ref()?;
        Some(Transactions {
            polled: self.polled.clone(),
            scrubber: self.scrubber.clone(),
            id: id.clone(),
        })
    }

    /// Whether a Kafka transaction is open (a record was sent since the last commit
    /// or abort).
    pub fn transaction_open(&self) -> bool {
        self.txn.as_ref().is_some_and(|(_, open)| *open)
    }

    /// The open transaction was committed or aborted: the next `send` begins one.
    pub fn transaction_ended(&mut self) {
        if let Some((_, open)) = &mut self.txn {
            *open = false;
        }
    }

    /// Begin a transaction unless one is open (transactional producers only).
    fn begin_if_needed(&mut self, record: &KafkaRecord) -> Result<(), SendError> {
        let Some((_, open)) = &self.txn else {
            return Ok(());
        };
        if *open {
            return Ok(());
        }
        if let Err(err) = self.polled.producer.begin_transaction() {
            return Err(SendError::Refused(self.refusal(&err, record)));
        }
        if let Some((_, open)) = &mut self.txn {
            *open = true;
        }
        Ok(())
    }

    fn create(
        config: &ClientConfig,
        scrubber: &Scrubber,
        metrics: Arc<Metrics>,
        outage: Arc<Outage>,
    ) -> Result<Created, CreateError> {
        let (tx, deliveries) = mpsc::unbounded_channel();
        let unreported = Arc::new(AtomicUsize::new(0));
        let first_writes = Arc::new(FirstWrites::new(config.get("transactional.id").is_none()));
        // librdkafka's own murmur2_random places records identically; the relay's
        // also tells the first-write gate each topic's partition count.
        let partitioner = (config.get("partitioner") == Some("murmur2_random"))
            .then(|| JavaPartitioner::new(first_writes.clone()));
        let producer: BaseProducer<Context, JavaPartitioner> = config
            .create_with_context(Context {
                deliveries: tx.clone(),
                unreported: unreported.clone(),
                metrics,
                scrubber: scrubber.clone(),
                outage,
                first_writes: first_writes.clone(),
                partitioner,
            })
            .map_err(|err| CreateError {
                message: scrubber.scrub(&err.to_string()),
            })?;
        let polled = Polled {
            wakeup: QueueWakeup::new(producer.client()),
            unreported,
            first_writes,
            producer,
            serving: Mutex::new(()),
        };
        Ok((Arc::new(polled), deliveries, tx))
    }

    /// Replace the producer with a new one from the same configuration, e.g. after a
    /// [fatal error](KafkaSink::fatal_error). Records the old producer still held
    /// are abandoned without a report, and so are held ones: the caller must treat
    /// them as not delivered (the relay resends everything it has not confirmed
    /// from the slot).
    pub fn renew(&mut self) -> Result<(), CreateError> {
        let (polled, deliveries, reports) = Self::create(
            &self.config,
            &self.scrubber,
            self.metrics.clone(),
            self.outage.clone(),
        )?;
        *self.current.lock().unwrap_or_else(|e| e.into_inner()) = polled.clone();
        let old = std::mem::replace(&mut self.polled, polled);
        // Nothing the old producer holds may reach the broker once the new one
        // resends from the slot (a stalled one still retries): purge now, before
        // the caller produces anything; its reports are discarded anyway.
        old.producer
            .purge(PurgeConfig::default().queue().inflight());
        self.deliveries = deliveries;
        self.reports = reports;
        self.held.clear();
        self.held_bytes = 0;
        self.transaction_ended();
        // Dropping a producer purges it, waits up to 500 ms and joins librdkafka's
        // threads: not on the caller's (async) thread. The thread ends by itself
        // within that bound, so it is not joined.
        let dropper = std::thread::Builder::new().name("producer-drop".into());
        if let Err(err) = dropper.spawn(move || drop(old)) {
            tracing::warn!(error = %err, "cannot start a thread to drop the old producer");
        }
        Ok(())
    }

    /// Hold records back while a round is in flight (see [`ROUND_AT`]): what the
    /// relay produces meanwhile goes to librdkafka in one go when the round's acks
    /// were served. Off by default (every record is handed over at once).
    pub fn hold_rounds(&mut self, on: bool) {
        self.rounds = on;
        if !on {
            self.hand_over(true);
        }
    }

    /// Take one record. On success a [`Delivery`] with `tag` follows. While a round
    /// is in flight ([`KafkaSink::hold_rounds`]), or the producer's first write to the
    /// record's partition (`first_writes`), the record is held and handed over after it;
    /// a refusal of a held record then arrives as that delivery's error (a size
    /// refusal carries [`RefusedRecord`], as the broker's).
    pub fn send(&mut self, record: &KafkaRecord, tag: usize) -> Result<(), SendError> {
        self.begin_if_needed(record)?;
        // A producer's first write to a partition goes alone (see `first_writes`):
        // while it is in flight the partition's other records wait. A record of
        // HOLD_BELOW bytes or more waits like one a full queue sent back, not held:
        // its size refusal must still come from `send` itself.
        let large = record.size() >= HOLD_BELOW;
        let key = record.key.as_deref();
        let gated = self.polled.first_writes.gated(&record.topic, key);
        if large && gated {
            return Err(SendError::QueueFull);
        }
        let hold =
            gated || (self.rounds && !large && (!self.held.is_empty() || self.round_in_flight()));
        if !(hold && self.room()) && self.hand_over(true) {
            // Whatever was held goes first (per-key order), and librdkafka's queue
            // is full: this record waits its turn.
            return Err(SendError::QueueFull);
        }
        // The held records just handed over may have begun with this partition's first
        // write.
        if hold || self.polled.first_writes.gated(&record.topic, key) {
            if large || !self.room() {
                // Held records of partitions whose first write is in flight fill the
                // bound: this record waits for a report.
                return Err(SendError::QueueFull);
            }
            self.held.push_back(HeldRecord::new(record, tag));
            self.held_bytes += record.size();
            return Ok(());
        }
        let base = base_record(
            &record.topic,
            record.key.as_deref(),
            record.value.as_deref(),
            headers_of(record),
            record.timestamp_ms,
            tag,
        );
        match self.produce(base) {
            Ok(()) => Ok(()),
            Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), _)) => {
                Err(SendError::QueueFull)
            }
            Err((err, _)) => Err(SendError::Refused(self.refusal(&err, record))),
        }
    }

    /// Whether the held records are below their bounds ([`HELD_MAX`],
    /// [`HELD_MAX_BYTES`]).
    fn room(&self) -> bool {
        self.held.len() < HELD_MAX && self.held_bytes < HELD_MAX_BYTES
    }

    /// Whether librdkafka holds enough records that the next ones would wait
    /// behind them (and keep its broker thread polling): see [`ROUND_AT`].
    fn round_in_flight(&self) -> bool {
        self.polled.unreported.load(Ordering::Relaxed) >= ROUND_AT
    }

    /// Hand one record to librdkafka, counting it as unreported; a record it did
    /// not take comes back with the error.
    // The error is `BaseProducer::send`'s own, returned as is: boxing it would
    // allocate on every full queue, the backpressure path.
    #[allow(clippy::result_large_err)]
    fn produce<'a>(&self, base: Record<'a>) -> Result<(), (KafkaError, Record<'a>)> {
        // Counted before librdkafka has it: its report may be served (by the
        // prober, on another thread) before `send` returns.
        self.polled.unreported.fetch_add(1, Ordering::Relaxed);
        let tag = base.delivery_opaque;
        let probe = self
            .polled
            .first_writes
            .before_send(base.topic, base.key, tag);
        self.polled.producer.send(base).inspect_err(|(_, back)| {
            self.polled.unreported.fetch_sub(1, Ordering::Relaxed);
            if probe {
                self.polled.first_writes.not_sent(back.topic, tag);
            }
        })
    }

    /// The refusal of `record` by librdkafka, before it was taken.
    fn refusal(&self, err: &KafkaError, record: &KafkaRecord) -> DeliveryError {
        delivery_error(
            &self.scrubber,
            err,
            record.topic.clone(),
            record.id_text(),
            None,
        )
    }

    /// Hand the held records over, in order, when no round is in flight (`force`:
    /// whatever is in flight), except those of a partition whose first write is in
    /// flight (`first_writes`), which keep waiting in order. Stops at a full queue
    /// (`true`: the rest waits for the next call); a record librdkafka refuses is
    /// reported on the delivery channel.
    fn hand_over(&mut self, force: bool) -> bool {
        if self.held.is_empty() || (!force && self.round_in_flight()) {
            return false;
        }
        // Records left behind for their partition's first write, in order.
        let mut waiting = std::collections::VecDeque::new();
        let mut full = false;
        while let Some(held) = self.held.pop_front() {
            if (self.polled.first_writes).gated(&held.topic, held.key.as_deref()) {
                waiting.push_back(held);
                continue;
            }
            self.held_bytes -= held.size();
            let HeldRecord {
                topic,
                key,
                value,
                headers,
                timestamp_ms,
                tag,
                id,
            } = held;
            let base = base_record(
                &topic,
                key.as_deref(),
                value.as_deref(),
                headers,
                timestamp_ms,
                tag,
            );
            let Err((err, base)) = self.produce(base) else {
                continue;
            };
            let held = HeldRecord {
                headers: base.headers.unwrap_or_default(),
                topic,
                key,
                value,
                timestamp_ms,
                tag,
                id,
            };
            if let KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull) = err {
                self.held_bytes += held.size();
                waiting.push_back(held);
                full = true;
                break;
            }
            self.refuse_held(&err, &held);
        }
        if !waiting.is_empty() {
            waiting.extend(self.held.drain(..));
            self.held = waiting;
        }
        full
    }

    /// Report a held record librdkafka refused as its delivery, as a broker's
    /// refusal would be: counted as failed, a size refusal with what a dead letter
    /// needs.
    fn refuse_held(&self, err: &KafkaError, held: &HeldRecord) {
        self.metrics.failed(&held.topic);
        let error = delivery_error(
            &self.scrubber,
            err,
            held.topic.clone(),
            id_text_of(held.id.as_deref()),
            Some((
                held.key.as_deref(),
                header_value(&held.headers, EVENT_TYPE_HEADER),
            )),
        );
        // The receiver lives in `self`: the send cannot fail.
        let _ = self.reports.send(Delivery {
            tag: held.tag,
            size: held.size(),
            result: Err(error),
            in_kafka: None,
            placement: 0,
        });
    }

    /// The next delivery report: served from librdkafka's main queue when it
    /// signals, so it also runs the client's error and log callbacks. Cancel-safe.
    pub async fn next_delivery(&mut self) -> Option<Delivery> {
        loop {
            if let Some(delivery) = self.try_next_delivery() {
                return Some(delivery);
            }
            tokio::select! {
                biased;
                // Served by the prober meanwhile, or the producer is gone.
                delivery = self.deliveries.recv() => return delivery,
                () = self.polled.wakeup.notified() => {}
            }
        }
    }

    /// A delivery report, if one is ready (serving the main queue first when none
    /// is waiting on the channel).
    pub fn try_next_delivery(&mut self) -> Option<Delivery> {
        if let Ok(delivery) = self.deliveries.try_recv() {
            return Some(delivery);
        }
        self.polled.serve(false);
        // Served reports may have ended the round: the held records go now.
        self.hand_over(false);
        self.deliveries.try_recv().ok()
    }

    /// Records taken and held back for the next round (see [`ROUND_AT`]).
    pub fn held(&self) -> usize {
        self.held.len()
    }

    /// Records taken and not yet reported (held ones included).
    pub fn in_flight(&self) -> i32 {
        self.polled.producer.in_flight_count() + self.held.len() as i32
    }

    /// A blocking probe: does a broker answer the producer within `timeout`
    /// ([`crate::kafka::probe`]: brokers-only metadata)?
    /// For a thread of its own (it blocks); it follows [`KafkaSink::renew`]. A success
    /// ends a logged outage. Each probe also serves the producer's main queue, so
    /// client errors and log lines are reported between sessions too (when no
    /// session asks for deliveries).
    pub fn prober(&self) -> impl Fn(std::time::Duration) -> bool + Send + 'static {
        let current = self.current.clone();
        let outage = self.outage.clone();
        move |timeout| {
            let polled = current.lock().unwrap_or_else(|e| e.into_inner()).clone();
            let up = crate::kafka::probe::reaches_a_broker(polled.producer.client(), timeout);
            polled.serve(true);
            if up {
                outage.reachable();
            }
            up
        }
    }

    /// The fatal error librdkafka raised on the current producer, if any: the code of
    /// the underlying cause (e.g. `OutOfOrderSequenceNumber`) and its description.
    /// Such a producer accepts and delivers nothing more; see [`KafkaSink::renew`].
    pub fn fatal_error(&self) -> Option<(RDKafkaErrorCode, String)> {
        let (code, reason) = self.polled.producer.client().fatal_error()?;
        Some((code, self.scrubber.scrub(&reason)))
    }

    /// Wait (blocking) up to `timeout` for librdkafka to deliver what it holds
    /// (serving the main queue meanwhile: the reports land on the channel).
    /// Held records are handed over first, whatever is in flight.
    pub fn flush(&mut self, timeout: std::time::Duration) -> bool {
        let deadline = std::time::Instant::now() + timeout;
        loop {
            self.hand_over(true);
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            let flushed = {
                let _serving = self
                    .polled
                    .serving
                    .lock()
                    .unwrap_or_else(|e| e.into_inner());
                // A full queue, or a partition's first write in flight, left records
                // held: flush a little, then hand over more.
                let wait = if self.held.is_empty() {
                    left
                } else {
                    left.min(FLUSH_STEP)
                };
                self.polled.producer.flush(wait).is_ok()
            };
            if self.held.is_empty() {
                return flushed;
            }
            if left.is_zero() {
                return false;
            }
        }
    }
}

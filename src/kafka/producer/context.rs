//! The librdkafka side of the sink: the client context whose callbacks run while the
//! main queue is served (delivery reports, client errors, log lines), and [`Polled`],
//! one producer with the wake-up on its main queue and the lock that makes one
//! poller serve it at a time.
//!
//! Invariants: every delivery report becomes exactly one [`Delivery`] on the
//! channel, in the order librdkafka queued them (one poller at a time); no text of
//! librdkafka is logged or returned before secret values are scrubbed from it; client
//! errors and warning log lines go through the one [`OutageLog`] of the sink; a
//! report counts as an ack only with the broker's offset ([`unplaced`]).

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use rdkafka::config::RDKafkaLogLevel;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::producer::{BaseProducer, DeliveryResult, ProducerContext};
use rdkafka::{ClientContext, Message};
use tokio::sync::mpsc;

use crate::kafka::config::Scrubber;
use crate::kafka::outage::{self, OutageLog, SUMMARY_EVERY};
use crate::kafka::wakeup::QueueWakeup;
use crate::metrics::Metrics;
use crate::outbox::event::EVENT_TYPE_HEADER;
use crate::outbox::record::{id_text_of, size_of};

use super::first_writes::FirstWrites;
use super::outcome::{delivery_error, header_value, placement};
use super::partitioner::JavaPartitioner;
use super::Delivery;

pub(super) struct Context {
    pub(super) deliveries: mpsc::UnboundedSender<Delivery>,
    /// Records librdkafka took and has not reported yet (the round gate's count;
    /// librdkafka's own `outq_len` also counts queued error and log events).
    pub(super) unreported: Arc<AtomicUsize>,
    pub(super) metrics: Arc<Metrics>,
    pub(super) scrubber: Scrubber,
    pub(super) outage: Arc<Outage>,
    /// Shared with [`Polled`]: the probe's report opens the gate.
    pub(super) first_writes: Arc<FirstWrites>,
    /// Installed while `partitioner` is the relay's default (`murmur2_random`).
    pub(super) partitioner: Option<JavaPartitioner>,
}

/// The outage log shared by the producers of one sink, with a flag read lock-free
/// on every delivery.
pub(super) struct Outage {
    pub(super) log: Mutex<OutageLog>,
    pub(super) down: AtomicBool,
}

impl Outage {
    pub(super) fn new() -> Self {
        Self {
            log: Mutex::new(OutageLog::new(SUMMARY_EVERY)),
            down: AtomicBool::new(false),
        }
    }

    pub(super) fn lock(&self) -> std::sync::MutexGuard<'_, OutageLog> {
        self.log.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A broker answered: ends an outage (logged once).
    pub(super) fn reachable(&self) {
        if !self.down.load(Ordering::Relaxed) {
            return;
        }
        let report = {
            let mut log = self.lock();
            self.down.store(false, Ordering::Relaxed);
            log.on_up(std::time::Instant::now())
        };
        if let Some(report) = report {
            outage::log(report);
        }
    }
}

impl Context {
    /// Count a client error or warning and log what [`OutageLog`] says to.
    pub(super) fn report(&self, kind: &str, all_down: bool, text: String) {
        self.metrics.kafka_client_error();
        let now = std::time::Instant::now();
        let report = {
            let mut log = self.outage.lock();
            let report = log.on_error(now, kind, all_down, text);
            self.outage.down.store(log.is_down(), Ordering::Relaxed);
            report
        };
        if let Some(report) = report {
            outage::log(report);
        }
    }
}

impl ClientContext for Context {
    fn error(&self, error: KafkaError, reason: &str) {
        // Broker-level trouble (all brokers down, TLS, SASL, …): librdkafka keeps
        // retrying; records stay in flight, so the slot does not move meanwhile.
        let code = error.rdkafka_error_code();
        let all_down = code == Some(RDKafkaErrorCode::AllBrokersDown);
        if all_down {
            self.metrics.set_producer_connected(false);
        }
        let error = self.scrubber.scrub(&error.to_string());
        let reason = self.scrubber.scrub(reason);
        if code == Some(RDKafkaErrorCode::Fatal) {
            self.metrics.kafka_client_error();
            tracing::error!(error = %error, reason = %reason, "kafka client error");
            return;
        }
        let source = code.map_or_else(|| "other".to_owned(), |c| format!("{c:?}"));
        self.report(
            &outage::kind(&source, &reason),
            all_down,
            format!("{error}: {reason}"),
        );
    }

    /// librdkafka's own log lines (its `debug` setting), scrubbed, as tracing events
    /// with target `librdkafka`; warnings and errors (connection failures repeat
    /// with every reconnect) go through the outage log, per facility.
    fn log(&self, level: RDKafkaLogLevel, facility: &str, message: &str) {
        let message = self.scrubber.scrub(message);
        if is_own_setting_notice(facility, &message) {
            tracing::debug!(target: "librdkafka", facility, "{message}");
            return;
        }
        match level {
            RDKafkaLogLevel::Emerg
            | RDKafkaLogLevel::Alert
            | RDKafkaLogLevel::Critical
            | RDKafkaLogLevel::Error
            | RDKafkaLogLevel::Warning => {
                let kind = outage::kind(&format!("librdkafka {facility}"), &message);
                self.report(&kind, false, message)
            }
            RDKafkaLogLevel::Notice | RDKafkaLogLevel::Info => {
                tracing::info!(target: "librdkafka", facility, "{message}")
            }
            RDKafkaLogLevel::Debug => tracing::debug!(target: "librdkafka", facility, "{message}"),
        }
    }
}

/// librdkafka's warning that a property is experimental, for one the relay sets
/// itself on purpose (`enable.gapless.guarantee`, see [`crate::kafka::config`]):
/// not the operator's concern, and not a client error.
fn is_own_setting_notice(facility: &str, message: &str) -> bool {
    facility == "CONFWARN" && message.contains("enable.gapless.guarantee is experimental")
}

impl ProducerContext<JavaPartitioner> for Context {
    type DeliveryOpaque = usize;

    fn get_custom_partitioner(&self) -> Option<&JavaPartitioner> {
        self.partitioner.as_ref()
    }

    fn delivery(&self, result: &DeliveryResult<'_>, tag: usize) {
        self.unreported.fetch_sub(1, Ordering::Relaxed);
        let (message, outcome) = match result {
            Ok(m) if m.offset() < 0 => (m, Err(unplaced())),
            Ok(m) => (m, Ok(())),
            Err((err, m)) => (m, Err(err.clone())),
        };
        let unplaced = result.is_ok() && outcome.is_err();
        self.first_writes
            .reported(message.topic(), message.partition(), tag, outcome.is_ok());
        if unplaced {
            tracing::warn!(
                topic = %message.topic(),
                partition = message.partition(),
                id = %id_text_of(message.headers().and_then(|h| header_value(h, "id"))),
                "kafka reported a record delivered without an offset (inferred from a later batch, not confirmed by the broker); the session ends and the record is sent again"
            );
        }
        if outcome.is_ok() {
            self.outage.reachable();
        }
        let size = size_of(message.topic(), message.key(), message.payload());
        match &outcome {
            Ok(()) => {
                self.metrics.published(message.topic());
                self.metrics.set_producer_connected(true);
            }
            Err(_) => self.metrics.failed(message.topic()),
        }
        let in_kafka = in_kafka(message);
        let placement = if outcome.is_ok() {
            placement(message.topic(), message.partition())
        } else {
            0
        };
        let header = |name: &str| message.headers().and_then(|h| header_value(h, name));
        if outcome.is_ok() {
            // Where the broker put each acked record, for an audit of a run against
            // what a consumer reads back (`RUST_LOG=info,pgoutbox::acks=trace`): a
            // record acked but not read, or one offset acked for two records, is
            // the broker's fault, not the relay's. Off by default (one atomic load).
            tracing::trace!(
                target: "pgoutbox::acks",
                topic = %message.topic(),
                partition = message.partition(),
                offset = message.offset(),
                id = %id_text_of(header("id")),
                "acked"
            );
        }
        let result = outcome.map_err(|err| {
            let mut error = delivery_error(
                &self.scrubber,
                &err,
                message.topic().to_owned(),
                id_text_of(header("id")),
                Some((message.key(), header(EVENT_TYPE_HEADER))),
            );
            if unplaced {
                error.reason = UNPLACED_REASON.to_owned();
            }
            error
        });
        // The receiver is gone only when the relay is shutting down.
        let _ = self.deliveries.send(Delivery {
            tag,
            size,
            result,
            in_kafka,
            placement,
        });
    }
}

/// What an "ack" without an offset becomes: a transient failure, so the relay
/// sends the record again instead of confirming past it.
///
/// librdkafka reports a record delivered at offset -1001 when it only *infers*
/// the write: its batch failed with an uncertain or not-persisted status and a
/// later batch of the same partition succeeded ("implicitly acked by subsequent
/// batch success"), or a retry was answered DUPLICATE_SEQUENCE_NUMBER. The
/// inference holds only where the broker checks the producer's sequence, and
/// Apache Kafka accepts any sequence from a producer id it holds no state for on
/// that partition (a new producer's first batches): the refused batch is then
/// reported delivered and is not in the log (confluent-kafka-go#921; pinned by
/// `mock_kafka::a_record_acked_only_by_inference_is_not_delivered`). Only the
/// broker's offset vouches for a record.
pub(super) fn unplaced() -> KafkaError {
    KafkaError::MessageProduction(RDKafkaErrorCode::Inconsistent)
}

/// The reason [`unplaced`] records are failed with, in their [`DeliveryError`].
pub(super) const UNPLACED_REASON: &str =
    "acknowledged without an offset (librdkafka inferred the write from a later batch; \
     the broker did not confirm it): sent again";

/// librdkafka's own clock of `message`: the time since it was handed over.
pub(super) fn in_kafka(
    message: &rdkafka::message::BorrowedMessage<'_>,
) -> Option<std::time::Duration> {
    // SAFETY: `ptr` is the live message of the delivery report being served;
    // `rd_kafka_message_latency` only reads its enqueue time.
    let micros = unsafe { rdkafka::bindings::rd_kafka_message_latency(message.ptr()) };
    u64::try_from(micros)
        .ok()
        .map(std::time::Duration::from_micros)
}

/// Main-queue events served per [`Polled::serve`] at most (each may carry many
/// delivery reports), so one call never holds the caller for long.
pub(super) const SERVE_BATCH: usize = 1024;

/// One librdkafka producer with the wake-up on its main queue.
pub(super) struct Polled {
    /// Declared before `producer`: released before it (see [`QueueWakeup`]).
    pub(super) wakeup: QueueWakeup,
    /// Shared with the producer's [`Context`].
    pub(super) unreported: Arc<AtomicUsize>,
    /// Shared with the producer's [`Context`].
    pub(super) first_writes: Arc<FirstWrites>,
    pub(super) producer: BaseProducer<Context, JavaPartitioner>,
    /// Held while serving the main queue: one poller at a time, so reports reach
    /// the channel in the order librdkafka queued them.
    pub(super) serving: Mutex<()>,
}

impl Polled {
    /// Serve the main queue until it is empty (delivery reports to the channel,
    /// client errors and log lines to [`Context`]), unless another thread is at it.
    /// Without `force`, only when librdkafka signalled since the last serve.
    pub(super) fn serve(&self, force: bool) {
        let _serving = match self.serving.try_lock() {
            Ok(guard) => guard,
            Err(std::sync::TryLockError::Poisoned(guard)) => guard.into_inner(),
            Err(std::sync::TryLockError::WouldBlock) => return,
        };
        // Nothing landed on the empty queue since the last serve (which left it
        // empty): no need to take librdkafka's queue lock.
        if !self.wakeup.take() && !force {
            return;
        }
        for _ in 0..SERVE_BATCH {
            if self.wakeup.pending() == 0 {
                return;
            }
            self.producer.poll(std::time::Duration::ZERO);
        }
        // Left non-empty: librdkafka signals only an empty queue's first event.
        self.wakeup.rearm();
    }
}

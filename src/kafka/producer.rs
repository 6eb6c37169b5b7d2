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
//! discarded, and so are the records held for it); held records reach librdkafka
//! in the order `send` took them, and before any record `send` hands over at once; no text
//! from librdkafka (log lines, client errors, delivery errors, fatal errors) is
//! logged or returned before secret configuration values are scrubbed from it;
//! librdkafka's client errors and warning log lines go through one
//! [`OutageLog`] shared by every producer of the
//! sink, so an outage is logged once and summarized, not once per retry (all of
//! them count in `pgoutbox_kafka_client_errors_total`).

use rdkafka::config::RDKafkaLogLevel;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::{Header, Headers, OwnedHeaders};
use rdkafka::producer::{BaseProducer, BaseRecord, DeliveryResult, Producer, ProducerContext};
use rdkafka::{ClientConfig, ClientContext, Message};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use tokio::sync::mpsc;

use crate::kafka::config::Scrubber;
use crate::kafka::outage::{self, OutageLog, SUMMARY_EVERY};
use crate::kafka::wakeup::QueueWakeup;
use crate::metrics::Metrics;

use crate::outbox::event::EVENT_TYPE_HEADER;
use crate::outbox::record::{id_text_of, size_of, KafkaRecord};

/// The outcome of one record.
#[derive(Debug)]
pub struct Delivery {
    /// The tag given to [`KafkaSink::send`].
    pub tag: usize,
    /// Bytes the record counted in flight ([`KafkaRecord::size`]).
    pub size: usize,
    /// Acked, or why not.
    pub result: Result<(), DeliveryError>,
    /// How long librdkafka had the record: from the hand-over to this report being
    /// served (its queue, `linger.ms`, the request, the broker, the response). The
    /// Kafka share of commit → ack. `None` for a record librdkafka never took.
    pub in_kafka: Option<std::time::Duration>,
}

/// A record librdkafka could not deliver.
#[derive(Debug, Clone, thiserror::Error)]
#[error("kafka did not accept event {event_id} for topic {topic:?}: {reason} ({code:?}){}", fix_for(*code))]
pub struct DeliveryError {
    /// librdkafka's error code.
    pub code: RDKafkaErrorCode,
    /// Its description.
    pub reason: String,
    /// Destination topic.
    pub topic: String,
    /// The `id` header of the record.
    pub event_id: String,
    /// Whether retrying the same record can never succeed.
    pub permanent: bool,
    /// The refused record's key and `event_type` header, kept for a dead letter
    /// when the broker refused the record's size (`None` otherwise).
    pub refused: Option<Box<RefusedRecord>>,
}

/// What a dead letter needs of a record the broker refused.
#[derive(Debug, Clone)]
pub struct RefusedRecord {
    /// Record key.
    pub key: Option<bytes::Bytes>,
    /// Header `event_type`.
    pub event_type: Option<bytes::Bytes>,
}

impl DeliveryError {
    /// Whether the record was refused for its size (by librdkafka or the broker).
    pub fn is_too_large(&self) -> bool {
        is_too_large(self.code)
    }
}

/// Whether a Kafka error code means "this record is too large".
pub fn is_too_large(code: RDKafkaErrorCode) -> bool {
    matches!(
        code,
        RDKafkaErrorCode::MessageSizeTooLarge | RDKafkaErrorCode::InvalidMessageSize
    )
}

fn fix_for(code: RDKafkaErrorCode) -> &'static str {
    use RDKafkaErrorCode as E;
    match code {
        E::MessageSizeTooLarge | E::InvalidMessageSize => {
            "; fix: raise the broker's message.max.bytes (and --kafka-option message.max.bytes=…), or make the payload smaller"
        }
        E::TopicAuthorizationFailed => "; fix: grant the relay's principal WRITE on the topic",
        E::UnknownTopicOrPartition | E::UnknownTopic => {
            "; fix: create the topic, or enable auto.create.topics.enable on the brokers"
        }
        E::InvalidTopic => "; fix: change --topic-template so it yields a legal topic name (an UPDATE of the row changes nothing: the relay reads the row as it was inserted)",
        _ => "",
    }
}

/// Whether a Kafka error code means the record can never be delivered as is.
pub fn is_permanent(code: RDKafkaErrorCode) -> bool {
    use RDKafkaErrorCode as E;
    matches!(
        code,
        E::MessageSizeTooLarge
            | E::InvalidMessageSize
            | E::MessageBatchTooLarge
            | E::TopicAuthorizationFailed
            | E::ClusterAuthorizationFailed
            | E::UnknownTopicOrPartition
            | E::UnknownTopic
            | E::InvalidTopic
            | E::InvalidRecord
            | E::PolicyViolation
            | E::InvalidRequiredAcks
            | E::Fatal
            | E::InvalidArgument
    )
}

/// A record's key and `event_type` header value: what a dead letter of a size
/// refusal keeps.
type Refusable<'a> = (Option<&'a [u8]>, Option<&'a [u8]>);

/// The [`DeliveryError`] for `err` on a record of `topic`: the one place its code,
/// scrubbed reason and permanence are derived. `refusable` is the record's key and
/// `event_type` header, kept (copied) for a dead letter when `err` is a size
/// refusal; `None` when the caller still holds the whole record.
fn delivery_error(
    scrubber: &Scrubber,
    err: &KafkaError,
    topic: String,
    event_id: String,
    refusable: Option<Refusable<'_>>,
) -> DeliveryError {
    let code = err.rdkafka_error_code().unwrap_or(RDKafkaErrorCode::Fail);
    let copy = |b: Option<&[u8]>| b.map(bytes::Bytes::copy_from_slice);
    DeliveryError {
        code,
        reason: scrubber.scrub(&err.to_string()),
        topic,
        event_id,
        permanent: is_permanent(code),
        refused: refusable
            .filter(|_| is_too_large(code))
            .map(|(key, event_type)| {
                Box::new(RefusedRecord {
                    key: copy(key),
                    event_type: copy(event_type),
                })
            }),
    }
}

/// The value of the first header called `name` (`None` also for a null value).
fn header_value<'a, H: Headers>(headers: &'a H, name: &str) -> Option<&'a [u8]> {
    headers.iter().find(|h| h.key == name).and_then(|h| h.value)
}

/// Why `send` did not take a record.
#[derive(Debug, thiserror::Error)]
pub enum SendError {
    /// librdkafka's queue is full: retry after deliveries came back.
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

struct Context {
    deliveries: mpsc::UnboundedSender<Delivery>,
    /// Records librdkafka took and has not reported yet (the round gate's count;
    /// librdkafka's own `outq_len` also counts queued error and log events).
    unreported: Arc<AtomicUsize>,
    metrics: Arc<Metrics>,
    scrubber: Scrubber,
    outage: Arc<Outage>,
}

/// The outage log shared by the producers of one sink, with a flag read lock-free
/// on every delivery.
struct Outage {
    log: Mutex<OutageLog>,
    down: AtomicBool,
}

impl Outage {
    fn new() -> Self {
        Self {
            log: Mutex::new(OutageLog::new(SUMMARY_EVERY)),
            down: AtomicBool::new(false),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, OutageLog> {
        self.log.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A broker answered: ends an outage (logged once).
    fn reachable(&self) {
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
    fn report(&self, kind: &str, all_down: bool, text: String) {
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

impl ProducerContext for Context {
    type DeliveryOpaque = usize;

    fn delivery(&self, result: &DeliveryResult<'_>, tag: usize) {
        self.unreported.fetch_sub(1, Ordering::Relaxed);
        let (message, outcome) = match result {
            Ok(m) => (m, Ok(())),
            Err((err, m)) => (m, Err(err.clone())),
        };
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
            delivery_error(
                &self.scrubber,
                &err,
                message.topic().to_owned(),
                id_text_of(header("id")),
                Some((message.key(), header(EVENT_TYPE_HEADER))),
            )
        });
        // The receiver is gone only when the relay is shutting down.
        let _ = self.deliveries.send(Delivery {
            tag,
            size,
            result,
            in_kafka,
        });
    }
}

/// librdkafka's own clock of `message`: the time since it was handed over.
fn in_kafka(message: &rdkafka::message::BorrowedMessage<'_>) -> Option<std::time::Duration> {
    // SAFETY: `ptr` is the live message of the delivery report being served;
    // `rd_kafka_message_latency` only reads its enqueue time.
    let micros = unsafe { rdkafka::bindings::rd_kafka_message_latency(message.ptr()) };
    u64::try_from(micros)
        .ok()
        .map(std::time::Duration::from_micros)
}

/// Main-queue events served per [`Polled::serve`] at most (each may carry many
/// delivery reports), so one call never holds the caller for long.
const SERVE_BATCH: usize = 1024;

/// One librdkafka producer with the wake-up on its main queue.
struct Polled {
    /// Declared before `producer`: released before it (see [`QueueWakeup`]).
    wakeup: QueueWakeup,
    /// Shared with the producer's [`Context`].
    unreported: Arc<AtomicUsize>,
    producer: BaseProducer<Context>,
    /// Held while serving the main queue: one poller at a time, so reports reach
    /// the channel in the order librdkafka queued them.
    serving: Mutex<()>,
}

impl Polled {
    /// Serve the main queue until it is empty (delivery reports to the channel,
    /// client errors and log lines to [`Context`]), unless another thread is at it.
    /// Without `force`, only when librdkafka signalled since the last serve.
    fn serve(&self, force: bool) {
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

/// Records of its own an idempotent librdkafka producer holds in flight beyond
/// which the next record waits for a round trip: librdkafka (2.12) sends a new
/// request for a partition only while fewer than 5 of its *records* (the limit
/// meant for requests, `RD_KAFKA_IDEMP_MAX_INFLIGHT`) are in flight, and while a
/// record waits behind them its broker thread polls with a zero timeout until the
/// ack: a busy loop (measured with 5,000 one-row transactions/s: its broker thread
/// cost 45–64 µs of CPU per event, and 97 % of its `poll` calls had a zero
/// timeout). Records the relay produces
/// meanwhile are held by [`KafkaSink`] instead, and go together once the round is
/// acked: the same wait, without the spin, and one request instead of several.
/// Counting every partition's records together makes this stricter than
/// librdkafka's per-partition limit: with several partitions a record may wait one
/// round trip that librdkafka would have sent at once.
pub const ROUND_AT: usize = 5;

/// Records of at least this size (topic + key + value) are never held: the held
/// ones go first, then this one at once, so a size refusal comes back from
/// [`KafkaSink::send`] itself, with everything the relay knows of the row (a
/// held record's refusal arrives as its delivery, as a broker's would). Holding
/// saves little for such records anyway: they nearly fill a request of their own.
pub const HOLD_BELOW: usize = 64 * 1024;

/// Held records beyond which they are handed over even while a round is in
/// flight: a backlog fills rounds faster than they are acked, and without a bound
/// the sink would hold up to the relay's whole in-flight cap (50,000 records), each
/// keeping alive the replication stream's read buffer its key and value point
/// into. Live rounds stay far below it (tens to hundreds of records).
pub const HELD_MAX: usize = 1000;

/// The same bound in bytes ([`KafkaRecord::size`]): librdkafka's default
/// `batch.size`, one request's worth.
pub const HELD_MAX_BYTES: usize = 1_000_000;

/// While a full queue keeps records held, [`KafkaSink::flush`] flushes this long
/// before handing more over.
const FLUSH_STEP: std::time::Duration = std::time::Duration::from_millis(10);

/// A record taken while a round was in flight: what [`BaseRecord`] borrows, owned
/// (the payload buffers are shared, not copied).
struct HeldRecord {
    topic: String,
    key: Option<bytes::Bytes>,
    value: Option<bytes::Bytes>,
    headers: OwnedHeaders,
    timestamp_ms: i64,
    tag: usize,
    /// Header `id`, for a refusal's message.
    id: Option<bytes::Bytes>,
}

impl HeldRecord {
    fn new(record: &KafkaRecord, tag: usize) -> Self {
        Self {
            topic: record.topic.clone(),
            key: record.key.clone(),
            value: record.value.clone(),
            headers: headers_of(record),
            timestamp_ms: record.timestamp_ms,
            tag,
            id: record.id.clone(),
        }
    }

    /// Bytes it counts in flight ([`KafkaRecord::size`]).
    fn size(&self) -> usize {
        size_of(&self.topic, self.key.as_deref(), self.value.as_deref())
    }
}

/// The headers of `record`: `id`, the placed columns, then the further headers.
fn headers_of(record: &KafkaRecord) -> OwnedHeaders {
    let count = 1 + record.placed.len() + record.headers.len();
    let mut headers = OwnedHeaders::new_with_capacity(count);
    headers = headers.insert(Header {
        key: "id",
        value: record.id.as_deref(),
    });
    for (key, value) in &record.placed {
        headers = headers.insert(Header {
            key,
            value: value.as_deref(),
        });
    }
    for (key, value) in &record.headers {
        headers = headers.insert(Header {
            key,
            value: Some(&value[..]),
        });
    }
    headers
}

/// A record as librdkafka takes it, tagged for its report.
type Record<'a> = BaseRecord<'a, [u8], [u8], usize>;

fn base_record<'a>(
    topic: &'a str,
    key: Option<&'a [u8]>,
    value: Option<&'a [u8]>,
    headers: OwnedHeaders,
    timestamp_ms: i64,
    tag: usize,
) -> Record<'a> {
    let mut base = BaseRecord::with_opaque_to(topic, tag)
        .headers(headers)
        .timestamp(timestamp_ms);
    if let Some(key) = key {
        base = base.key(key);
    }
    if let Some(value) = value {
        base = base.payload(value);
    }
    base
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
        })
    }

    fn create(
        config: &ClientConfig,
        scrubber: &Scrubber,
        metrics: Arc<Metrics>,
        outage: Arc<Outage>,
    ) -> Result<Created, CreateError> {
        let (tx, deliveries) = mpsc::unbounded_channel();
        let unreported = Arc::new(AtomicUsize::new(0));
        let producer: BaseProducer<Context> = config
            .create_with_context(Context {
                deliveries: tx.clone(),
                unreported: unreported.clone(),
                metrics,
                scrubber: scrubber.clone(),
                outage,
            })
            .map_err(|err| CreateError {
                message: scrubber.scrub(&err.to_string()),
            })?;
        let polled = Polled {
            wakeup: QueueWakeup::new(producer.client()),
            unreported,
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
        self.deliveries = deliveries;
        self.reports = reports;
        self.held.clear();
        self.held_bytes = 0;
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
    /// is in flight ([`KafkaSink::hold_rounds`]) the record is held and handed over
    /// with the next round; a refusal of a held record then arrives as that
    /// delivery's error (a size refusal carries [`RefusedRecord`], as the broker's).
    pub fn send(&mut self, record: &KafkaRecord, tag: usize) -> Result<(), SendError> {
        let hold = self.rounds
            && record.size() < HOLD_BELOW
            && (!self.held.is_empty() || self.round_in_flight());
        let room = self.held.len() < HELD_MAX && self.held_bytes < HELD_MAX_BYTES;
        if !(hold && room) {
            // Whatever was held goes before this record (per-key order).
            self.hand_over(true);
            if !self.held.is_empty() {
                // librdkafka's queue is full: this record waits its turn.
                return Err(SendError::QueueFull);
            }
        }
        if hold {
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
        self.polled.producer.send(base).inspect_err(|_| {
            self.polled.unreported.fetch_sub(1, Ordering::Relaxed);
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
    /// whatever is in flight). Stops at a full queue (the rest waits for the next
    /// call); a record librdkafka refuses is reported on the delivery channel.
    fn hand_over(&mut self, force: bool) {
        if self.held.is_empty() || (!force && self.round_in_flight()) {
            return;
        }
        while let Some(held) = self.held.pop_front() {
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
                self.held.push_front(held);
                return;
            }
            self.refuse_held(&err, &held);
        }
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
                // A full queue left records held: flush a little, then hand over more.
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

//! Delivery rounds: while librdkafka holds [`ROUND_AT`] records not yet reported,
//! the sink holds further records ([`HeldRecord`]) and hands them over together once
//! reports were served, bounded by [`HELD_MAX`] records and [`HELD_MAX_BYTES`]
//! bytes; records of [`HOLD_BELOW`] bytes or more are never held. Also how a
//! [`KafkaRecord`] becomes the [`BaseRecord`] librdkafka borrows.
//!
//! Invariant: a held record owns what `BaseRecord` borrows (the payload buffers are
//! shared, not copied), and the held records of a partition reach librdkafka in
//! the order `send` took them.

use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::BaseRecord;

use crate::outbox::record::{size_of, KafkaRecord};

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
/// the sink would hold up to the relay's whole in-flight cap (10,000 records by
/// default). Live rounds stay far below it (tens to hundreds of records).
pub const HELD_MAX: usize = 1000;

/// The same bound in bytes ([`KafkaRecord::size`]): librdkafka's default
/// `batch.size`, one request's worth.
pub const HELD_MAX_BYTES: usize = 1_000_000;

/// While a full queue keeps records held, [`KafkaSink::flush`] flushes this long
/// before handing more over.
pub(super) const FLUSH_STEP: std::time::Duration = std::time::Duration::from_millis(10);

/// A record taken while a round was in flight: what [`BaseRecord`] borrows, owned
/// (the payload buffers are shared, not copied).
pub(super) struct HeldRecord {
    pub(super) topic: String,
    pub(super) key: Option<bytes::Bytes>,
    pub(super) value: Option<bytes::Bytes>,
    pub(super) headers: OwnedHeaders,
    pub(super) timestamp_ms: i64,
    pub(super) tag: usize,
    /// Header `id`, for a refusal's message.
    pub(super) id: Option<bytes::Bytes>,
}

impl HeldRecord {
    pub(super) fn new(record: &KafkaRecord, tag: usize) -> Self {
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
    pub(super) fn size(&self) -> usize {
        size_of(&self.topic, self.key.as_deref(), self.value.as_deref())
    }
}

/// The headers of `record`: `id`, the placed columns, then the further headers.
pub(super) fn headers_of(record: &KafkaRecord) -> OwnedHeaders {
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
pub(super) type Record<'a> = BaseRecord<'a, [u8], [u8], usize>;

pub(super) fn base_record<'a>(
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

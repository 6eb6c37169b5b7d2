//! Topic handles: hand records to librdkafka by topic handle, not by name.
//!
//! librdkafka's `rd_kafka_producev` with a topic *name* (what rdkafka's
//! `BaseProducer::send` passes) looks the topic up on every record: a write lock on
//! the client and a linear scan of every topic it knows (`rd_kafka_topic_find`,
//! one string comparison per topic). With outbox routing by `aggregate_type` over
//! 1,000 topics that scan was most of the growth of the relay's own thread from 1 to
//! 1,000 topics (`bench/run.sh topics`: 2.3 → 12.8 µs/event on tansu). [`Topics`]
//! keeps one `rd_kafka_topic_t` per topic name and [`Topics::send`] passes it
//! (`RD_KAFKA_VTYPE_RKT`): a hash lookup instead.
//!
//! Invariants: the same call as `BaseProducer::send` otherwise (partition unassigned,
//! payload and key copied, the opaque, the timestamp, the headers owned by
//! librdkafka once it took the record), so placement, ordering and delivery reports
//! are unchanged; at most [`CACHED_MAX`] handles are kept (past that, records go by
//! name as before); every handle is released before the producer: [`Topics`] is
//! declared before the producer in [`super::context::Polled`].

use std::collections::HashMap;
use std::ffi::CString;
use std::ptr;
use std::sync::Mutex;

use rdkafka::bindings as rdsys;
use rdkafka::bindings::rd_kafka_vtype_t::*;
use rdkafka::error::KafkaError;
use rdkafka::message::BorrowedHeaders;
use rdkafka::producer::{BaseProducer, Producer};
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::util::IntoOpaque;

use super::context::Context;
use super::rounds::Record;

/// Topic handles kept at most; an outbox routed over more topics sends the rest by
/// name (librdkafka keeps every topic it met anyway; this bounds only the map).
pub(super) const CACHED_MAX: usize = 10_000;

/// One topic handle of the producer (a reference librdkafka counts).
struct Handle(*mut rdsys::rd_kafka_topic_t);

// SAFETY: librdkafka's topic handles may be used and released from any thread.
unsafe impl Send for Handle {}

impl Drop for Handle {
    fn drop(&mut self) {
        // SAFETY: a handle from `rd_kafka_topic_new`, released once.
        unsafe { rdsys::rd_kafka_topic_destroy(self.0) }
    }
}

/// The producer's topic handles by name.
#[derive(Default)]
pub(super) struct Topics {
    handles: Mutex<HashMap<Box<str>, Handle>>,
}

impl Topics {
    /// Hand `record` to `producer` as `BaseProducer::send` does, by topic handle.
    #[allow(clippy::result_large_err)] // `BaseProducer::send`'s own error, as is
    pub(super) fn send<'a>(
        &self,
        producer: &BaseProducer<Context>,
        mut record: Record<'a>,
    ) -> Result<(), (KafkaError, Record<'a>)> {
        let mut handles = self.handles.lock().unwrap_or_else(|e| e.into_inner());
        let rkt = match handles.get(record.topic) {
            Some(handle) => handle.0,
            None => {
                let Some(handle) = new_handle(producer, record.topic) else {
                    // Not a name librdkafka takes, or too many topics: by name,
                    // with librdkafka's own error.
                    drop(handles);
                    return producer.send(record);
                };
                if handles.len() >= CACHED_MAX {
                    drop(handles);
                    drop(handle);
                    return producer.send(record);
                }
                let rkt = handle.0;
                handles.insert(record.topic.into(), handle);
                rkt
            }
        };
        let (payload_ptr, payload_len) = bytes(record.payload);
        let (key_ptr, key_len) = bytes(record.key);
        let headers = record.headers.as_ref().map_or(ptr::null_mut(), |h| {
            // `BorrowedHeaders` is rdkafka's view of the native headers: its address
            // is theirs (as rdkafka's own `as_native_ptr`).
            h.as_borrowed() as *const BorrowedHeaders as *mut rdsys::rd_kafka_headers_t
        });
        let opaque = record.delivery_opaque.into_ptr();
        // SAFETY: `rkt` is a live handle of this producer (held in the map, whose
        // lock is held); payload and key are copied (MSG_F_COPY) before the call
        // returns; the headers become librdkafka's only when it took the record.
        let err = unsafe {
            rdsys::rd_kafka_producev(
                producer.client().native_ptr(),
                RD_KAFKA_VTYPE_RKT,
                rkt,
                RD_KAFKA_VTYPE_PARTITION,
                record.partition.unwrap_or(-1),
                RD_KAFKA_VTYPE_MSGFLAGS,
                rdsys::RD_KAFKA_MSG_F_COPY,
                RD_KAFKA_VTYPE_VALUE,
                payload_ptr,
                payload_len,
                RD_KAFKA_VTYPE_KEY,
                key_ptr,
                key_len,
                RD_KAFKA_VTYPE_OPAQUE,
                opaque,
                RD_KAFKA_VTYPE_TIMESTAMP,
                record.timestamp.unwrap_or(0),
                RD_KAFKA_VTYPE_HEADERS,
                headers,
                RD_KAFKA_VTYPE_END,
            )
        };
        if err == rdsys::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR {
            // librdkafka owns the headers now.
            std::mem::forget(record.headers.take());
            return Ok(());
        }
        // SAFETY: the opaque librdkafka did not take, from `into_ptr` above.
        record.delivery_opaque = unsafe { usize::from_ptr(opaque) };
        Err((
            KafkaError::MessageProduction(RDKafkaErrorCode::from(err)),
            record,
        ))
    }

    /// Handles kept.
    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.handles.lock().unwrap_or_else(|e| e.into_inner()).len()
    }
}

fn new_handle(producer: &BaseProducer<Context>, topic: &str) -> Option<Handle> {
    let name = CString::new(topic).ok()?;
    // SAFETY: a live client; a null configuration means the client's defaults (the
    // same as a record sent by name gets).
    let rkt = unsafe {
        rdsys::rd_kafka_topic_new(
            producer.client().native_ptr(),
            name.as_ptr(),
            ptr::null_mut(),
        )
    };
    (!rkt.is_null()).then_some(Handle(rkt))
}

fn bytes(data: Option<&[u8]>) -> (*mut std::ffi::c_void, usize) {
    data.map_or((ptr::null_mut(), 0), |d| {
        (d.as_ptr() as *mut std::ffi::c_void, d.len())
    })
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use bytes::Bytes;

    use crate::kafka::config::{producer_config, KafkaOptions};
    use crate::kafka::producer::KafkaSink;
    use crate::metrics::Metrics;
    use crate::outbox::record::KafkaRecord;

    fn record(topic: &str) -> KafkaRecord {
        KafkaRecord {
            topic: topic.to_owned(),
            key: Some(Bytes::from_static(b"k")),
            value: Some(Bytes::from_static(b"{}")),
            id: Some(Bytes::from_static(b"00000000-0000-4000-8000-000000000001")),
            event_type: Some(Bytes::from_static(b"Happened")),
            placed: Vec::new(),
            timestamp_ms: 1,
            headers: vec![("h", Bytes::from_static(b"v"))],
        }
    }

    #[test]
    fn one_handle_per_topic() {
        // No broker listens there: records stay queued until the sink is dropped.
        let config = producer_config("127.0.0.1:1", &KafkaOptions::default()).unwrap();
        let mut sink = KafkaSink::new(&config, Arc::new(Metrics::default())).unwrap();
        for (tag, topic) in ["a", "b", "a", "a", "b"].into_iter().enumerate() {
            sink.send(&record(topic), tag).unwrap();
        }
        assert_eq!(sink.polled.topics.len(), 2);
        let unreported = sink
            .polled
            .unreported
            .load(std::sync::atomic::Ordering::Relaxed);
        assert_eq!(unreported, 5);
        // Not a name librdkafka takes (a NUL): refused up front, by name, as before.
        assert!(sink.send(&record("a\0b"), 9).is_err());
        assert_eq!(sink.polled.topics.len(), 2);
    }
}

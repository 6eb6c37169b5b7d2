//! The verifier's own reader ([`Reader`]): it must read everything the broker
//! holds, also when the broker is slow to answer a new consumer; every "lost 0"
//! verdict of the suite rests on it.

use crate::support;

use std::time::Duration;

use rdkafka::config::ClientConfig;
use rdkafka::consumer::Consumer;
use rdkafka::message::{Header, Message, OwnedHeaders};
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use rdkafka::{Offset, TopicPartitionList};
use support::kafka::{Broker, Reader};
use support::WAIT;

/// With every chunk between clients and the broker delayed, a new consumer needs
/// several seconds before its first fetch: a reader that rebuilt its consumer
/// after every second without a record never read anything (the stall behind a
/// "lost" verdict seen in CI); it now waits longer after each empty rebuild.
#[test]
fn a_slow_broker_does_not_keep_the_reader_from_reading() {
    let broker = Broker::start();
    let topic = format!("reader-slow-{}", std::process::id());
    let producer: BaseProducer = ClientConfig::new()
        .set("bootstrap.servers", broker.addr())
        .set("enable.idempotence", "true")
        .create()
        .expect("producer");
    for i in 0..100 {
        let id = i.to_string();
        let headers = OwnedHeaders::new().insert(Header {
            key: "id",
            value: Some(&id),
        });
        producer
            .send(
                BaseRecord::to(&topic)
                    .key("k")
                    .payload("x")
                    .headers(headers),
            )
            .expect("queued");
    }
    producer.flush(Duration::from_secs(60)).expect("flushed");
    broker.proxy().latency(Duration::from_millis(400));
    let mut reader = Reader::new(&broker.addr(), std::slice::from_ref(&topic));
    reader.read_until(
        "the 100 records through a slow link",
        Duration::from_secs(120),
        |r| r.len() == 100,
    );
    let ids: std::collections::HashSet<String> = reader.records.iter().map(|r| r.id()).collect();
    assert_eq!(ids.len(), 100);
    assert_eq!(
        reader.stalls, 0,
        "read only by the last chance of a stalled wait"
    );
}

/// A consumer that starts inside a record batch (its position is an offset in the
/// middle of a batch, as after the reader's rebuild at its own positions) reads the
/// rest of that batch: Apache Kafka returns the whole batch and the client skips
/// the records before its position. Checked on tansu too, whose Fetch keeps only
/// the batches whose base offset is at or past the requested one (dynostore's
/// `fetch`, `offsets.split_off(&offset)`): measured, it still returns the rest
/// here, so this is not how tansu loses acked records (see `support::verify`,
/// [`assert_acked_or_read`](crate::support::verify::assert_acked_or_read)).
#[test]
fn a_consumer_starting_inside_a_batch_reads_the_rest_of_it() {
    let broker = Broker::shared();
    let topic = format!("reader-mid-batch-{}", std::process::id());
    let producer: BaseProducer = ClientConfig::new()
        .set("bootstrap.servers", broker.addr())
        .set("enable.idempotence", "true")
        // One request, one batch: all five records wait for each other.
        .set("linger.ms", "500")
        .create()
        .expect("producer");
    // The topic and the producer id first (a batch of its own, offset 0) ...
    let send = |i: i32| {
        let payload = i.to_string();
        producer
            .send(
                BaseRecord::to(&topic)
                    .partition(0)
                    .key("k")
                    .payload(&payload),
            )
            .expect("queued");
    };
    send(0);
    producer.flush(Duration::from_secs(60)).expect("flushed");
    // ... then offsets 1-5 in one batch (one request: they wait for each other).
    (1..=5).for_each(send);
    producer.flush(Duration::from_secs(60)).expect("flushed");
    let mut all = Reader::new(&broker.addr(), std::slice::from_ref(&topic));
    all.read_until("the six records", WAIT, |r| r.len() == 6);
    // From offset 3, inside the second batch.
    let consumer: rdkafka::consumer::BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", broker.addr())
        .set("group.id", format!("mid-batch-{}", std::process::id()))
        .set("enable.auto.commit", "false")
        .create()
        .expect("consumer");
    let mut assignment = TopicPartitionList::new();
    assignment
        .add_partition_offset(&topic, 0, Offset::Offset(3))
        .unwrap();
    consumer.assign(&assignment).unwrap();
    let mut offsets = Vec::new();
    support::poll_for(WAIT, Duration::ZERO, || {
        if let Some(Ok(m)) = consumer.poll(Duration::from_millis(200)) {
            offsets.push(m.offset());
        }
        (offsets.len() >= 3).then_some(())
    });
    assert_eq!(offsets, [3, 4, 5], "{:?} broker", broker.kind);
}

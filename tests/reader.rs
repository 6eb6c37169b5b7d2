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
use support::kafka::broker::Kind;
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
/// middle of a batch, as after a rebuild or a restart at a committed offset) reads
/// the rest of that batch. Apache Kafka returns the whole batch and the client
/// skips the records before its position.
///
/// tansu 0.6.0 does not: its Fetch keeps only batches whose *base* offset is at or
/// past the requested offset (`tansu-storage/src/dynostore.rs`, `fetch`:
/// `offsets.split_off(&offset)`), so the rest of the batch is never returned — a
/// record the producer got an ack for, that a consumer never reads. The test
/// asserts each broker's behaviour, so a tansu release that fixes it fails here
/// (and tansu's exclusion from the loss assertions, `support::verify`, can go).
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
    for i in 0..5 {
        producer
            .send(
                BaseRecord::to(&topic)
                    .partition(0)
                    .key("k")
                    .payload(&i.to_string()),
            )
            .expect("queued");
    }
    producer.flush(Duration::from_secs(60)).expect("flushed");
    // From the start: the five records (one batch).
    let mut all = Reader::new(&broker.addr(), std::slice::from_ref(&topic));
    all.read_until("the five records", WAIT, |r| r.len() == 5);
    // From offset 2, inside that batch.
    let consumer: rdkafka::consumer::BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", broker.addr())
        .set("group.id", format!("mid-batch-{}", std::process::id()))
        .set("enable.auto.commit", "false")
        .create()
        .expect("consumer");
    let mut assignment = TopicPartitionList::new();
    assignment
        .add_partition_offset(&topic, 0, Offset::Offset(2))
        .unwrap();
    consumer.assign(&assignment).unwrap();
    let mut offsets = Vec::new();
    let until = std::time::Instant::now() + Duration::from_secs(10);
    while std::time::Instant::now() < until && offsets.len() < 3 {
        if let Some(Ok(m)) = consumer.poll(Duration::from_millis(200)) {
            offsets.push(m.offset());
        }
    }
    match broker.kind {
        Kind::Kafka => assert_eq!(offsets, [2, 3, 4]),
        Kind::Tansu => assert_eq!(
            offsets,
            Vec::<i64>::new(),
            "tansu now returns the rest of a batch: its mid-batch fetch bug is fixed"
        ),
    }
}

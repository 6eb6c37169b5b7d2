//! A producer's first writes to a topic, against librdkafka's mock cluster.
//!
//! A broker keeps no sequence state for a producer id that has not written to a
//! partition yet, so it accepts any sequence there (Apache Kafka does so on purpose:
//! the state may have been lost to retention). If the first request is refused as
//! retriable (the leader not ready yet, as on a just-created topic or a broker just
//! restarted) while a second one is in flight, the second is written first;
//! librdkafka then infers the first was written too and reports it "delivered
//! without an offset", and the relay's resend puts it after the later records of its
//! key. The mock keeps no sequence state for an idempotent producer at all, so every
//! request of it stands for such a first one: a refused first request is the case
//! the sink must make safe.

use crate::debezium::fixtures::java_partition;
use crate::mock_kafka::{mock, next, record, send_records, sink, BROKERS};

use std::time::Duration;

use pgoutbox::outbox::record::KafkaRecord;
use rdkafka::types::{RDKafkaApiKey, RDKafkaRespErr};

use crate::support::kafka::Reader;

/// Producers (each on a topic of its own) whose first request is refused.
const PRODUCERS: usize = 8;
/// Records each of them sends at once, one per request (`batch.num.messages=1`).
const PER_PRODUCER: usize = 40;

/// A key the Java partitioner puts on `partition` of `partitions`.
fn key_on(partition: u32, partitions: u32) -> String {
    (0..)
        .map(|k| format!("key-{k}"))
        .find(|k| java_partition(k.as_bytes(), partitions) == partition)
        .expect("a key for every partition")
}

fn record_to(topic: &str, n: usize) -> KafkaRecord {
    KafkaRecord {
        topic: topic.to_owned(),
        ..record(n)
    }
}

/// Each new producer's first request is refused with NOT_LEADER_FOR_PARTITION
/// while its later requests are in flight. Every record must be acked with the
/// broker's offset, and a consumer must read the records in the order they were
/// sent: none overtaken by the ones behind it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_producers_first_request_refused_as_retriable_is_not_overtaken() {
    let mock = mock();
    let mut unplaced = Vec::new();
    let mut out_of_order = Vec::new();
    for p in 0..PRODUCERS {
        let topic = format!("first.writes.{p}");
        // One partition: the topic's offsets are the order to check.
        mock.create_topic(&topic, 1, BROKERS).expect("create topic");
        let mut sink = sink(&mock, &[("batch.num.messages", "1")]);
        mock.request_errors(
            RDKafkaApiKey::Produce,
            &[RDKafkaRespErr::RD_KAFKA_RESP_ERR_NOT_LEADER_FOR_PARTITION],
        );
        let records = (0..PER_PRODUCER).map(|n| (n, record_to(&topic, n)));
        let results = send_records(&mut sink, records).await.results;
        for (n, result) in &results {
            if let Err(err) = result {
                unplaced.push(format!("{topic} record {n}: {err}"));
            }
        }
        let mut reader = Reader::new(&mock.bootstrap_servers(), std::slice::from_ref(&topic));
        reader.read_until(
            &format!("the acked records of {topic}"),
            Duration::from_secs(60),
            |r| r.len() >= results.values().filter(|r| r.is_ok()).count(),
        );
        let read: Vec<String> = reader.records.iter().map(|c| c.id()).collect();
        let sent: Vec<String> = (0..PER_PRODUCER)
            .filter(|n| results[n].is_ok())
            .map(|n| format!("event-{n}"))
            .collect();
        if read != sent {
            out_of_order.push(format!("{topic}: read {read:?}"));
        }
    }
    assert!(
        unplaced.is_empty() && out_of_order.is_empty(),
        "records not acked with an offset: {unplaced:?}\nread out of send order: {out_of_order:?}"
    );
}

/// The broker keeps a producer's sequence per partition, and a broker makes itself
/// leader of a new topic's partitions one after another (Apache Kafka's
/// `applyLocalLeadersDelta`): a topic's first ack vouches for its own partition
/// only. After it, the first request to another partition is refused as retriable
/// while that partition's later requests are in flight. Every record must be acked
/// with the broker's offset and read back in the order sent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_partitions_first_request_refused_as_retriable_is_not_overtaken() {
    const PARTITIONS: u32 = 2;
    let mock = mock();
    let topic = "first.writes.partitions";
    mock.create_topic(topic, PARTITIONS as i32, BROKERS)
        .expect("create topic");
    let mut sink = sink(&mock, &[("batch.num.messages", "1")]);
    let keyed = |n: usize, partition: u32| KafkaRecord {
        key: Some(key_on(partition, PARTITIONS).into()),
        ..record_to(topic, n)
    };
    // The topic's first write, to partition 0, acked with an offset.
    sink.send(&keyed(0, 0), 0).expect("first record taken");
    let first = next(&mut sink).await;
    assert!(first.result.is_ok(), "first record: {:?}", first.result);
    // Then partition 1's first request is refused, its next ones in flight.
    mock.request_errors(
        RDKafkaApiKey::Produce,
        &[RDKafkaRespErr::RD_KAFKA_RESP_ERR_NOT_LEADER_FOR_PARTITION],
    );
    let records = (1..=PER_PRODUCER).map(|n| (n, keyed(n, 1)));
    let results = send_records(&mut sink, records).await.results;
    let unplaced: Vec<String> = results
        .iter()
        .filter_map(|(n, r)| r.as_ref().err().map(|e| format!("record {n}: {e}")))
        .collect();
    let acked = results.values().filter(|r| r.is_ok()).count();
    let mut reader = Reader::new(&mock.bootstrap_servers(), &[topic.to_owned()]);
    reader.read_until("the acked records", Duration::from_secs(60), |r| {
        r.len() > acked
    });
    let read: Vec<String> = (reader.records.iter())
        .filter(|c| c.partition == 1)
        .map(|c| c.id())
        .collect();
    let sent: Vec<String> = (1..=PER_PRODUCER)
        .filter(|n| results[n].is_ok())
        .map(|n| format!("event-{n}"))
        .collect();
    assert!(
        unplaced.is_empty() && read == sent,
        "records not acked with an offset: {unplaced:?}\npartition 1 read {read:?}"
    );
}

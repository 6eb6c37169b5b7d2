//! The verifier's own reader ([`Reader`]): it must read everything the broker
//! holds, also when the broker is slow to answer a new consumer; every "lost 0"
//! verdict of the suite rests on it.

use crate::support;

use std::time::Duration;

use rdkafka::config::ClientConfig;
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use support::kafka::{Broker, Reader};

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

//! A second opinion on what a topic holds: Apache Kafka's own Java consumer
//! (`scripts/start-kafka.sh consume`, kafka-console-consumer's class), independent
//! of librdkafka, the client every other reader here uses.
//!
//! Used where librdkafka's `read_committed` consumer was seen to crawl (long
//! exactly-once runs: hundreds of aborted Kafka transactions in a partition), so
//! a slow client is told apart from records the broker does not hold. Records come
//! back as [`Consumed`] with topic, partition, offset, key and headers (no value;
//! Kafka 4.1's formatter prints no topic, so one topic is read at a time).

use std::collections::HashMap;
use std::process::Command;

use super::Consumed;

/// Every record of `topic`, from the beginning, read with `isolation`
/// (`read_committed` or `read_uncommitted`); ends after `idle_secs` without a
/// record.
pub fn read(brokers: &str, topic: &str, isolation: &str, idle_secs: u32) -> Vec<Consumed> {
    let script = format!("{}/scripts/start-kafka.sh", env!("CARGO_MANIFEST_DIR"));
    let out = Command::new(script)
        .args(["consume", brokers, topic, isolation, &idle_secs.to_string()])
        .output()
        .expect("start-kafka.sh consume");
    let text = String::from_utf8_lossy(&out.stdout);
    let records: Vec<Consumed> = text.lines().filter_map(|l| parse(topic, l)).collect();
    if records.is_empty() {
        eprintln!(
            "java reader: no record of {topic}; stderr:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    records
}

/// One line of kafka-console-consumer's default formatter with partition,
/// offset, headers and key printed: `Partition:0\tOffset:5\tid:x,type:y\tkey`.
fn parse(topic: &str, line: &str) -> Option<Consumed> {
    let mut fields = line.split('\t');
    let partition = fields.next()?.strip_prefix("Partition:")?.parse().ok()?;
    let offset = fields.next()?.strip_prefix("Offset:")?.parse().ok()?;
    let headers_text = fields.next()?;
    let key = fields
        .next()
        .filter(|k| *k != "null")
        .map(|k| k.as_bytes().to_vec());
    let mut headers = HashMap::new();
    let mut header_list = Vec::new();
    if headers_text != "NO_HEADERS" {
        for pair in headers_text.split(',') {
            let (name, value) = pair.split_once(':')?;
            let value = (value != "NULL").then(|| value.as_bytes().to_vec());
            headers.insert(name.to_owned(), value.clone().unwrap_or_default());
            header_list.push((name.to_owned(), value));
        }
    }
    Some(Consumed {
        topic: topic.to_owned(),
        partition,
        offset,
        key,
        value: None,
        headers,
        header_list,
        timestamp: None,
    })
}

#[test]
fn a_formatter_line_parses() {
    let line = "Partition:2\tOffset:17\tid:abc,event_type:Happened\tkey-3";
    let c = parse("t1.order", line).unwrap();
    assert_eq!(
        (c.topic.as_str(), c.partition, c.offset),
        ("t1.order", 2, 17)
    );
    assert_eq!(c.id(), "abc");
    assert_eq!(c.key.as_deref(), Some(&b"key-3"[..]));
    assert!(parse("t1.order", "Processed a total of 3 messages").is_none());
}

//! A `read_committed` reader for `bench/run.sh eos`: when each record became visible.
//!
//! `cargo run --release --example visible_latency -- BROKERS TOPIC`
//!
//! Assigns every partition of `TOPIC` from the beginning with
//! isolation.level=read_committed (librdkafka's default, set explicitly: records of
//! an open Kafka transaction are not returned until it commits, so "received here"
//! is "visible to a consumer" in both delivery modes) and no consumer group offsets.
//! Once every partition reported its end (enable.partition.eof), it prints `ready`
//! on stderr: records produced after that are received as they become visible, not
//! by a catching-up fetch. Then one line per record on stdout:
//!
//! ```text
//! RECEIVED_UNIX_US TIMESTAMP_MS ID
//! ```
//!
//! RECEIVED_UNIX_US: the wall clock (µs since the epoch) when poll returned it;
//! TIMESTAMP_MS: the record's timestamp (ms); ID: its `id` header (the outbox row's
//! id), which the bench joins with the row's commit time. Runs until killed; a
//! consumer error other than a partition's end goes to stderr and is not fatal.

use std::io::Write as _;
use std::process::ExitCode;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::message::{Headers, Message};
use rdkafka::{ClientConfig, Offset, TopicPartitionList};

const USAGE: &str = "usage: visible_latency <brokers> <topic>";

fn now_us() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as i64)
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (Some(brokers), Some(topic)) = (args.first(), args.get(1)) else {
        eprintln!("{USAGE}");
        return ExitCode::from(2);
    };
    let consumer: BaseConsumer = match ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .set("group.id", "pgoutbox-bench-visible")
        .set("enable.auto.commit", "false")
        .set("isolation.level", "read_committed")
        .set("enable.partition.eof", "true")
        .create()
    {
        Ok(c) => c,
        Err(e) => {
            eprintln!("error: cannot create consumer: {e}");
            return ExitCode::FAILURE;
        }
    };
    let start = Instant::now();
    let partitions = loop {
        let found = consumer
            .fetch_metadata(Some(topic), Duration::from_secs(5))
            .ok()
            .and_then(|md| {
                md.topics()
                    .iter()
                    .find(|t| t.name() == topic && t.error().is_none())
                    .map(|t| t.partitions().iter().map(|p| p.id()).collect::<Vec<_>>())
            })
            .filter(|p| !p.is_empty());
        match found {
            Some(p) => break p,
            None if start.elapsed() > Duration::from_secs(60) => {
                eprintln!("error: topic {topic:?} not found on {brokers} within 60 s");
                return ExitCode::FAILURE;
            }
            None => std::thread::sleep(Duration::from_millis(200)),
        }
    };
    let mut tpl = TopicPartitionList::new();
    for &p in &partitions {
        let _ = tpl.add_partition_offset(topic, p, Offset::Beginning);
    }
    if let Err(e) = consumer.assign(&tpl) {
        eprintln!("error: cannot assign partitions: {e}");
        return ExitCode::FAILURE;
    }
    let mut at_end = std::collections::HashSet::new();
    let mut ready = false;
    let stdout = std::io::stdout();
    loop {
        let polled = consumer.poll(Duration::from_millis(100));
        let received = now_us();
        match polled {
            None => {}
            Some(Err(KafkaError::PartitionEOF(p))) => {
                at_end.insert(p);
                if !ready && at_end.len() == partitions.len() {
                    ready = true;
                    eprintln!(
                        "ready: {} partitions of {topic} at their end",
                        partitions.len()
                    );
                }
            }
            Some(Err(e)) => eprintln!("consumer error: {e}"),
            Some(Ok(m)) => {
                let id = m
                    .headers()
                    .and_then(|h| h.iter().find(|x| x.key == "id").and_then(|x| x.value))
                    .map_or_else(
                        || "-".to_owned(),
                        |v| String::from_utf8_lossy(v).into_owned(),
                    );
                let ts = m.timestamp().to_millis().unwrap_or(-1);
                let mut out = stdout.lock();
                if writeln!(out, "{received} {ts} {id}").is_err() {
                    return ExitCode::SUCCESS; // the bench stopped reading
                }
            }
        }
    }
}

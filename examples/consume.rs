//! Read records back from Kafka, for the quickstart and for debugging:
//! `cargo run --example consume -- [--id EVENT_ID] <brokers> <topic> [count] [timeout-seconds]`.
//!
//! Prints one JSON object per record (topic, partition, offset, timestamp, key,
//! headers, value) and exits after `count` records (default 1) or the timeout
//! (default 30 s, exit code 1). Reads every partition from the beginning; with
//! `--id`, prints only records whose `id` header is that event id (the quickstart
//! reads back the event it just inserted, not the topic's oldest one).

use std::process::ExitCode;
use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::{Headers, Message};
use rdkafka::{ClientConfig, Offset, TopicPartitionList};

const USAGE: &str = "usage: consume [--id EVENT_ID] <brokers> <topic> [count] [timeout-seconds]";

fn main() -> ExitCode {
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    if args.iter().any(|a| a == "-h" || a == "--help") {
        println!("{USAGE}");
        return ExitCode::SUCCESS;
    }
    let wanted_id = match args.iter().position(|a| a == "--id") {
        Some(i) if i + 1 < args.len() => {
            let id = args.remove(i + 1);
            args.remove(i);
            Some(id)
        }
        Some(_) => {
            eprintln!("--id needs a value\n{USAGE}");
            return ExitCode::from(2);
        }
        None => None,
    };
    let (Some(brokers), Some(topic)) = (args.first(), args.get(1)) else {
        eprintln!("{USAGE}");
        return ExitCode::from(2);
    };
    let count: usize = args.get(2).and_then(|v| v.parse().ok()).unwrap_or(1);
    let timeout = Duration::from_secs(args.get(3).and_then(|v| v.parse().ok()).unwrap_or(30));
    let consumer: BaseConsumer = match ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .set("group.id", "pgoutbox-example-consume")
        .set("enable.auto.commit", "false")
        .set("auto.offset.reset", "earliest")
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
            None if start.elapsed() > timeout => {
                eprintln!("error: topic {topic:?} not found on {brokers} within {timeout:?}");
                return ExitCode::FAILURE;
            }
            None => std::thread::sleep(Duration::from_millis(200)),
        }
    };
    let mut tpl = TopicPartitionList::new();
    for p in partitions {
        let _ = tpl.add_partition_offset(topic, p, Offset::Beginning);
    }
    if let Err(e) = consumer.assign(&tpl) {
        eprintln!("error: cannot assign partitions: {e}");
        return ExitCode::FAILURE;
    }
    let mut seen = 0;
    while seen < count {
        if start.elapsed() > timeout {
            let which = wanted_id
                .as_ref()
                .map_or(String::new(), |id| format!(" with id {id}"));
            eprintln!("error: got {seen} of {count} records{which} within {timeout:?}");
            return ExitCode::FAILURE;
        }
        let Some(Ok(m)) = consumer.poll(Duration::from_millis(200)) else {
            continue;
        };
        let text = |b: Option<&[u8]>| b.map(|v| String::from_utf8_lossy(v).into_owned());
        let headers: serde_json::Map<String, serde_json::Value> = m
            .headers()
            .map(|h| {
                h.iter()
                    .map(|x| (x.key.to_owned(), text(x.value).into()))
                    .collect()
            })
            .unwrap_or_default();
        if let Some(id) = &wanted_id {
            if headers.get("id").and_then(|v| v.as_str()) != Some(id.as_str()) {
                continue;
            }
        }
        let line = serde_json::json!({
            "topic": m.topic(),
            "partition": m.partition(),
            "offset": m.offset(),
            "timestamp_ms": m.timestamp().to_millis(),
            "key": text(m.key()),
            "headers": headers,
            "value": text(m.payload()),
        });
        println!("{line}");
        seen += 1;
    }
    ExitCode::SUCCESS
}

//! Producer-only baseline for `bench/run.sh`: the Kafka-side limit of the relay.
//!
//! `cargo run --release --example produce_only -- BROKERS TOPIC EVENTS [KEYS] [PAD] [TOPICS]`
//!
//! Builds `EVENTS` records in memory with the shape the bench's outbox rows take in
//! the relay (key = one of `KEYS` aggregate ids, value = the payload JSON with `PAD`
//! bytes of padding, headers `id` (a UUID) and `event_type`), then hands them to the
//! relay's own producer — [`producer_config`] with no overrides and [`KafkaSink`] —
//! with the same backpressure rule (queue full → wait for a delivery) and waits for
//! every ack. Invariant: the timed part is first send → last ack; building records
//! and creating the producer are outside it. With `TOPICS` (≥ 1), record `i` goes to
//! `TOPIC.t{i % TOPICS}` with key `(i / TOPICS) % KEYS`, as the bench's fan-out
//! backlog routes its rows (`bench/run.sh topics`); without, every record goes to
//! `TOPIC` with key `i % KEYS`. A failed delivery ends the run with
//! exit code 1: a baseline that lost records would be meaningless.
//!
//! Prints one JSON object: events, seconds, events_per_second, cpu_us_per_event
//! (user+sys of this process over the timed part), startup_seconds.

use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use pgoutbox::kafka::config::{producer_config, KafkaOptions};
use pgoutbox::kafka::producer::{KafkaSink, SendError};
use pgoutbox::metrics::Metrics;
use pgoutbox::outbox::record::KafkaRecord;

/// User + system CPU time of this process.
fn cpu_time() -> Duration {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // Fields after the parenthesised command name; utime and stime are fields 14/15.
    // utime and stime are fields 14 and 15 (1-based), i.e. 11 and 12 after the
    // parenthesised command name; Linux reports them in 100 Hz clock ticks.
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0)
    };
    Duration::from_millis((ticks(11) + ticks(12)) * 10)
}

/// Where record `i` goes: (topic, key).
fn route(topic: &str, i: u64, keys: u64, topics: u64) -> (String, u64) {
    if topics > 0 {
        (format!("{topic}.t{}", i % topics), (i / topics) % keys)
    } else {
        (topic.to_owned(), i % keys)
    }
}

fn record(
    topic: &str,
    i: u64,
    keys: u64,
    topics: u64,
    pad: &str,
    timestamp_ms: i64,
) -> KafkaRecord {
    let (topic, key) = route(topic, i, keys, topics);
    let id = format!(
        "{:08x}-{:04x}-4{:03x}-8{:03x}-{:012x}",
        i as u32,
        (i >> 32) as u16,
        i & 0xfff,
        (i >> 12) & 0xfff,
        i
    );
    KafkaRecord {
        topic,
        key: Some(Bytes::from(key.to_string())),
        value: Some(Bytes::from(format!(
            r#"{{"g": {}, "i": {i}, "pad": "{pad}"}}"#,
            i % 100
        ))),
        id: Some(Bytes::from(id)),
        event_type: Some(Bytes::from_static(b"Happened")),
        placed: pgoutbox::outbox::record::default_placed(Some(Bytes::from_static(b"Happened"))),
        timestamp_ms,
        headers: Vec::new(),
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    let started = Instant::now();
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (Some(brokers), Some(topic), Some(events)) = (
        args.first(),
        args.get(1),
        args.get(2).and_then(|v| v.parse::<u64>().ok()),
    ) else {
        eprintln!("usage: produce_only BROKERS TOPIC EVENTS [KEYS] [PAD] [TOPICS]");
        return ExitCode::from(2);
    };
    let keys = args
        .get(3)
        .and_then(|v| v.parse().ok())
        .unwrap_or(1000u64)
        .max(1);
    let pad = "x".repeat(args.get(4).and_then(|v| v.parse().ok()).unwrap_or(100));
    let topics = args.get(5).and_then(|v| v.parse().ok()).unwrap_or(0u64);
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64);
    let records: Vec<KafkaRecord> = (0..events)
        .map(|i| record(topic, i, keys, topics, &pad, now_ms))
        .collect();
    let config = match producer_config(brokers, &KafkaOptions::default()) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::FAILURE;
        }
    };
    let mut sink = match KafkaSink::new(&config, Arc::new(Metrics::default())) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::FAILURE;
        }
    };
    // Like the relay's startup probe: the broker connection exists before timing.
    let probe = sink.prober();
    if !tokio::task::spawn_blocking(move || probe(Duration::from_secs(30)))
        .await
        .unwrap_or(false)
    {
        eprintln!("error: no metadata from {brokers} within 30 s; fix: start the broker or correct BROKERS");
        return ExitCode::FAILURE;
    }
    let startup = started.elapsed();
    let (t0, cpu0) = (Instant::now(), cpu_time());
    let mut acked = 0u64;
    let mut next = 0usize;
    while acked < events {
        while next < records.len() {
            match sink.send(&records[next], next) {
                Ok(()) => next += 1,
                Err(SendError::QueueFull) => break,
                Err(SendError::Refused(e)) => {
                    eprintln!("error: {e}");
                    return ExitCode::FAILURE;
                }
            }
        }
        let Some(delivery) = sink.next_delivery().await else {
            eprintln!("error: the producer stopped reporting deliveries");
            return ExitCode::FAILURE;
        };
        if let Err(e) = delivery.result {
            eprintln!("error: {e}");
            return ExitCode::FAILURE;
        }
        acked += 1;
        while let Some(d) = sink.try_next_delivery() {
            if let Err(e) = d.result {
                eprintln!("error: {e}");
                return ExitCode::FAILURE;
            }
            acked += 1;
        }
    }
    let (secs, cpu) = (t0.elapsed().as_secs_f64(), cpu_time() - cpu0);
    println!(
        "{}",
        serde_json::json!({
            "events": events,
            "seconds": secs,
            "events_per_second": events as f64 / secs,
            "cpu_us_per_event": cpu.as_secs_f64() * 1e6 / events as f64,
            "startup_seconds": startup.as_secs_f64(),
        })
    );
    ExitCode::SUCCESS
}

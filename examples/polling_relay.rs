//! Reference polling outbox relay — the alternative users pick — for `bench/run.sh`.
//!
//! `cargo run --release --example polling_relay -- DATABASE_URL BROKERS [TOPIC_PREFIX]`
//!
//! The common `FOR UPDATE SKIP LOCKED` design, on the table `poll.outbox` (created by
//! the bench: `seq bigserial`, the outbox columns, `published_at timestamptz`):
//!
//! ```text
//!  every 100 ms: BEGIN
//!    SELECT … WHERE published_at IS NULL ORDER BY seq LIMIT 1000 FOR UPDATE SKIP LOCKED
//!    produce every row, wait for every ack
//!    UPDATE … SET published_at = now() WHERE seq = ANY(…)
//!  COMMIT; a full batch polls again at once
//! ```
//!
//! The producer is pgoutbox's own ([`producer_config`] with no overrides, [`KafkaSink`]),
//! so the comparison with the relay is about the design, not the Kafka settings.
//! Records follow the outbox contract (topic = prefix + aggregate_type, key =
//! aggregate_id, value = payload, headers `id` and `event_type`).
//!
//! Latency of a record = its delivery report − `created_at` (the insert's transaction
//! start, i.e. its commit for a single-statement transaction). On SIGTERM it finishes
//! the batch in hand and prints one JSON line: events, polls, latency_p50_us,
//! latency_p99_us. At startup it prints `{"backend_pid": N}` so the bench can read the
//! PostgreSQL backend's CPU time. Invariant: rows are marked published only after
//! every record of the batch was acked; a failed delivery exits with code 1 and the
//! transaction rolls back.

use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use pgoutbox::kafka::config::{producer_config, KafkaOptions};
use pgoutbox::kafka::producer::{KafkaSink, SendError};
use pgoutbox::metrics::Metrics;
use pgoutbox::outbox::record::KafkaRecord;
use tokio::signal::unix::{signal, SignalKind};
use tokio_postgres::{Client, NoTls};

const BATCH: i64 = 1000;
const INTERVAL: Duration = Duration::from_millis(100);

const SELECT: &str =
    "SELECT seq, id::text, aggregate_type, aggregate_id, event_type, payload::text, \
     (extract(epoch FROM created_at) * 1000000)::int8 \
     FROM poll.outbox WHERE published_at IS NULL ORDER BY seq LIMIT $1 FOR UPDATE SKIP LOCKED";
const MARK: &str = "UPDATE poll.outbox SET published_at = now() WHERE seq = ANY($1)";

fn now_us() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as i64)
}

/// One poll: select, produce, wait for acks, mark, commit. Returns the batch size.
async fn poll_once(
    client: &mut Client,
    sink: &mut KafkaSink,
    prefix: &str,
    latencies: &mut Vec<i64>,
) -> Result<usize, String> {
    let txn = client.transaction().await.map_err(|e| e.to_string())?;
    let rows = txn
        .query(SELECT, &[&BATCH])
        .await
        .map_err(|e| format!("poll.outbox select failed: {e}"))?;
    let mut seqs = Vec::with_capacity(rows.len());
    let mut created = Vec::with_capacity(rows.len());
    let mut next = 0;
    let mut acked = 0;
    let bytes = |s: Option<&str>| s.map(|v| Bytes::copy_from_slice(v.as_bytes()));
    while acked < rows.len() {
        while next < rows.len() {
            let row = &rows[next];
            let record = KafkaRecord {
                topic: format!("{prefix}{}", row.get::<_, &str>(2)),
                key: bytes(row.get(3)),
                value: bytes(row.get(5)),
                id: bytes(row.get(1)),
                event_type: bytes(row.get(4)),
                placed: pgoutbox::outbox::record::default_placed(bytes(row.get(4))),
                timestamp_ms: row.get::<_, i64>(6) / 1000,
                headers: Vec::new(),
            };
            match sink.send(&record, next) {
                Ok(()) => {
                    seqs.push(row.get::<_, i64>(0));
                    created.push(row.get::<_, i64>(6));
                    next += 1;
                }
                Err(SendError::QueueFull) => break,
                Err(SendError::Refused(e)) => return Err(e.to_string()),
            }
        }
        let delivery = sink
            .next_delivery()
            .await
            .ok_or("the producer stopped reporting deliveries")?;
        delivery.result.map_err(|e| e.to_string())?;
        latencies.push(now_us() - created[delivery.tag]);
        acked += 1;
    }
    if !seqs.is_empty() {
        txn.execute(MARK, &[&seqs])
            .await
            .map_err(|e| format!("poll.outbox update failed: {e}"))?;
    }
    txn.commit().await.map_err(|e| e.to_string())?;
    Ok(rows.len())
}

fn quantile(sorted: &[i64], q: f64) -> i64 {
    if sorted.is_empty() {
        return 0;
    }
    let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}

async fn run(url: &str, brokers: &str, prefix: &str) -> Result<(), String> {
    let (mut client, conn) = tokio_postgres::connect(url, NoTls)
        .await
        .map_err(|e| format!("cannot connect to {url}: {e}"))?;
    tokio::spawn(conn);
    let pid: i32 = client
        .query_one("SELECT pg_backend_pid()", &[])
        .await
        .map_err(|e| e.to_string())?
        .get(0);
    let config = producer_config(brokers, &KafkaOptions::default()).map_err(|e| e.to_string())?;
    let mut sink =
        KafkaSink::new(&config, Arc::new(Metrics::default())).map_err(|e| e.to_string())?;
    println!("{}", serde_json::json!({ "backend_pid": pid }));
    let mut term = signal(SignalKind::terminate()).map_err(|e| e.to_string())?;
    let mut tick = tokio::time::interval(INTERVAL);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let (mut latencies, mut polls) = (Vec::new(), 0u64);
    loop {
        tokio::select! {
            _ = term.recv() => break,
            _ = tick.tick() => {}
        }
        loop {
            polls += 1;
            let n = poll_once(&mut client, &mut sink, prefix, &mut latencies).await?;
            if n < BATCH as usize {
                break;
            }
        }
    }
    latencies.sort_unstable();
    println!(
        "{}",
        serde_json::json!({
            "events": latencies.len(),
            "polls": polls,
            "latency_p50_us": quantile(&latencies, 0.5),
            "latency_p99_us": quantile(&latencies, 0.99),
        })
    );
    Ok(())
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (Some(url), Some(brokers)) = (args.first(), args.get(1)) else {
        eprintln!("usage: polling_relay DATABASE_URL BROKERS [TOPIC_PREFIX]");
        return ExitCode::from(2);
    };
    let prefix = args.get(2).map_or("poll.", String::as_str);
    match run(url, brokers, prefix).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

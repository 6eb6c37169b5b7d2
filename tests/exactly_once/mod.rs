//! `--delivery exactly-once` on Apache Kafka (tansu and librdkafka's mock cluster
//! do not honour transactions: a `read_committed` reader sees aborted records on
//! both, so these tests always run on an Apache Kafka node,
//! [`Broker::shared_kafka`]).
//!
//! Every reader here is librdkafka's default, `read_committed`: what a consumer of
//! an exactly-once relay is told to use. Each test writes events under its own
//! watermark topic, then checks lost 0 *and duplicated 0*:
//! - `crashes`: kill -9 at random points and at each named step of a Kafka
//!   transaction (`PGOUTBOX_FAILPOINT`, each proven hit by the line it prints), 20
//!   times each (200 with `PGOUTBOX_LONG=1`); rows with logical messages; a zombie;
//! - `kafka_faults`: a broker killed mid-transaction, a row refused mid-transaction,
//!   commits slower than `wal_sender_timeout`;
//! - `stops`: where the relay must stop with the fix instead of going on.
//!
//! The fault suites of `restart`, `failover` and `cluster` run with exactly-once
//! too (their `eos` variants, through [`eos_args`]).

use crate::support;

use std::collections::HashSet;
use std::time::Duration;

use support::kafka::{java_reader, Broker, Reader};
use support::verify::{verify, Ledger, Verdict};
use support::workload::{
    current_lsn, run_args, start_run, topics, wait_confirmed, write_events, Workload,
};
use support::{PgCluster, Pgoutbox, Rng, TestDb, WAIT};

const TYPES: &[&str] = &["order", "payment"];

/// The relay's arguments for exactly-once with `db`'s own watermark topic.
pub(crate) fn eos_args(db: &TestDb<'_>, extra: &[&str]) -> Vec<String> {
    let mut args = vec![
        "--delivery".to_owned(),
        "exactly-once".to_owned(),
        "--watermark-topic".to_owned(),
        watermark_topic(db),
    ];
    args.extend(extra.iter().map(|s| s.to_string()));
    args
}

fn watermark_topic(db: &TestDb<'_>) -> String {
    format!("{}.offsets", db.name)
}

/// Run an exactly-once relay that is expected to stop by itself: its exit code
/// and log.
fn eos_until_exit(db: &TestDb<'_>, broker: &Broker, extra: &[&str]) -> (Option<i32>, String) {
    let args = eos_args(db, extra);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut relay = Pgoutbox::spawn(&run_args(db, &broker.addr(), &args));
    let status = relay.wait_exit(WAIT);
    (status.code(), relay.stderr())
}

fn start_eos(db: &TestDb<'_>, broker: &Broker, extra: &[&str]) -> Pgoutbox {
    let args = eos_args(db, extra);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    start_run(db, &broker.addr(), &args)
}

/// The workload of these tests: transactions of up to 10 events over 10 keys,
/// some rolled back.
const WORKLOAD: Workload<'static> = Workload {
    types: TYPES,
    keys: 10,
    max_rows: 10,
    rollbacks: true,
};

/// Write `transactions` transactions of [`WORKLOAD`] on a fresh connection.
async fn write(db: &TestDb<'_>, seed: u64, ledger: &mut Ledger, transactions: usize) {
    let client = db.client().await;
    let mut rng = Rng::new(seed);
    write_events(&client, &mut rng, ledger, &WORKLOAD, transactions).await;
}

/// How long [`read_all`]'s librdkafka reader may go on reading before Apache
/// Kafka's Java consumer is asked instead.
const LIBRDKAFKA_READ: Duration = Duration::from_secs(300);

/// Read until every committed event arrived (or the wait ends), settle, verify.
///
/// librdkafka's `read_committed` consumer was seen to crawl past hundreds of
/// aborted Kafka transactions (the long form's 200 crashes: stalled at 430,880 of
/// 1,236,665 events, a fresh consumer at that position slow too). When it falls
/// short, Apache Kafka's own Java consumer reads the topics with `read_committed`
/// as well ([`java_reader`]), and its records decide: the property under test is
/// what the topics hold for a `read_committed` consumer, not one client's speed.
/// Both counts are printed, so a client stall stays visible.
fn read_all(broker: &Broker, db: &TestDb<'_>, ledger: &Ledger) -> Verdict {
    let ids: HashSet<&str> = ledger.committed.iter().map(|(id, _)| id.as_str()).collect();
    let mut reader = Reader::new(&broker.addr(), &topics(db, TYPES));
    // Large runs (the long form's 200 rounds write ~500,000 events) take longer to
    // read than one wait: go on while records keep arriving, for at most
    // LIBRDKAFKA_READ (a crawl of a few hundred records a wait would go on for hours).
    let (mut before, started) = (0, std::time::Instant::now());
    while !reader.try_read_until(WAIT, |records| {
        let got: HashSet<String> = records.iter().map(|r| r.id()).collect();
        ids.iter().all(|id| got.contains(*id))
    }) && reader.records.len() > before
        && started.elapsed() < LIBRDKAFKA_READ
    {
        before = reader.records.len();
    }
    // Anything sent twice would arrive right behind: give it time to show.
    reader.settle(Duration::from_secs(2));
    let verdict = verify(ledger, &reader.records);
    if verdict.lost == 0 {
        return verdict;
    }
    let started = std::time::Instant::now();
    let java = java_read_committed(broker, db, 30);
    let second = verify(ledger, &java);
    eprintln!(
        "librdkafka's read_committed reader fell short: {} records, {} stalls, {verdict:?}; \
         Apache Kafka's Java consumer (read_committed) read {} records in {:?}: {second:?}",
        reader.records.len(),
        reader.stalls,
        java.len(),
        started.elapsed()
    );
    second
}

/// `db`'s event topics as Apache Kafka's Java consumer reads them with
/// `read_committed`, each until `idle_secs` pass without a record.
fn java_read_committed(
    broker: &Broker,
    db: &TestDb<'_>,
    idle_secs: u32,
) -> Vec<support::kafka::Consumed> {
    topics(db, TYPES)
        .iter()
        .flat_map(|t| java_reader::read(&broker.addr(), t, "read_committed", idle_secs))
        .collect()
}

fn assert_exactly_once(scenario: &str, verdict: &Verdict) {
    eprintln!("{scenario}: {verdict:?}");
    verdict.assert_no_loss();
    assert_eq!(verdict.lost, 0, "{scenario}: {verdict:?}");
    assert_eq!(
        verdict.duplicated_total, 0,
        "{scenario}: a read_committed reader saw events twice: {verdict:?}"
    );
    assert_eq!(verdict.reordered, 0, "{scenario}: {verdict:?}");
}

/// The watermarks written for `db`, oldest first (their JSON).
fn watermarks(broker: &Broker, db: &TestDb<'_>) -> Vec<serde_json::Value> {
    let mut reader = Reader::new(&broker.addr(), &[watermark_topic(db)]);
    reader.try_read_until(WAIT, |r| !r.is_empty());
    reader.settle(Duration::from_secs(1));
    reader
        .records
        .iter()
        .filter_map(|r| serde_json::from_slice(r.value.as_deref()?).ok())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_event_arrives_once_and_the_watermark_follows_the_stream() {
    let db = PgCluster::shared().fresh_db();
    let broker = Broker::shared_kafka();
    let relay = start_eos(&db, broker, &[]);
    relay.wait_stderr("exactly-once: no watermark yet", WAIT);
    // `status` says which mode the relay is in, read from its endpoint.
    let mut status = Pgoutbox::spawn(&[
        "status",
        "--database-url",
        &db.url(),
        "--slot",
        &db.name,
        "--http-addr",
        &support::workload::http_addr(&relay),
    ]);
    assert!(status.wait_exit(WAIT).success(), "{}", status.stderr());
    let out = status.stdout_so_far().join("\n");
    assert!(
        out.lines()
            .any(|l| l.trim() == "delivery:             exactly-once"),
        "{out}"
    );
    let mut ledger = Ledger::default();
    write(&db, 7, &mut ledger, 300).await;
    let end = current_lsn(&db);
    wait_confirmed(&db, end, &relay, WAIT);
    let verdict = read_all(broker, &db, &ledger);
    assert_exactly_once("exactly-once", &verdict);
    // The second opinion `read_all` falls back on agrees with librdkafka's reader.
    let java = java_read_committed(broker, &db, 10);
    assert_exactly_once(
        "exactly-once, Apache Kafka's Java consumer",
        &verify(&ledger, &java),
    );

    let marks = watermarks(broker, &db);
    let system_id = db.psql("SELECT system_identifier FROM pg_control_system()");
    let newest = marks.last().expect("at least one watermark");
    eprintln!(
        "{} watermarks for 300 transactions; newest {newest}",
        marks.len()
    );
    assert_eq!(newest["system_id"], system_id.as_str());
    assert_eq!(newest["slot"], db.name.as_str());
    let end_lsn: pgoutbox::pg::lsn::Lsn = newest["end_lsn"].as_str().unwrap().parse().unwrap();
    assert!(end_lsn <= end, "watermark {end_lsn} past the WAL end {end}");
    assert!(
        marks.len() < 300,
        "Kafka transactions carry several PostgreSQL transactions: {} watermarks",
        marks.len()
    );
}

/// A Kafka transaction also commits once it holds 16 MiB of records, whatever
/// its age: 100 one-row transactions of 400 KB each, with an interval of an hour,
/// commit in transactions of at most 42 rows (16 MiB / 400 KB) while the relay
/// runs, and arrive once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn large_rows_commit_by_the_byte_bound() {
    let db = PgCluster::shared().fresh_db();
    let broker = Broker::shared_kafka();
    let relay = start_eos(&db, broker, &["--transaction-interval", "1h"]);
    let insert = "INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload) \
                  VALUES ('order', 'big', 'Large', to_jsonb(repeat('x', 400000))) RETURNING id;";
    let mut ledger = Ledger::default();
    for _ in 0..100 {
        ledger.push(db.psql(insert), "big".into());
    }
    let commits = support::wait_for("two Kafka transactions by size", WAIT * 2, || {
        let n = http_metric(&relay, "pgoutbox_kafka_transactions_committed_total");
        (n >= 2.0).then_some(n)
    });
    let records = http_metric(&relay, "pgoutbox_kafka_transaction_records_total");
    eprintln!("{commits} Kafka transactions by size, {records} records in them");
    assert!(
        records <= commits * 42.0,
        "{records} records in {commits} transactions: more than 16 MiB in one"
    );
    // The rest is in a transaction an hour would commit: a clean stop does.
    let mut relay = relay;
    relay.signal("TERM");
    assert!(relay.wait_exit(WAIT).success(), "{}", relay.stderr());
    let mut reader = Reader::new(&broker.addr(), &topics(&db, &["order"]));
    reader.try_read_until(WAIT, |r| r.len() >= ledger.len());
    reader.settle(Duration::from_secs(2));
    assert_exactly_once("exactly-once large rows", &verify(&ledger, &reader.records));
}

/// Writes transactions of [`WORKLOAD`] until told to stop; returns what it
/// committed.
async fn writer(
    db: &TestDb<'_>,
    seed: u64,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
) -> tokio::task::JoinHandle<Ledger> {
    let client = db.client().await;
    tokio::spawn(async move {
        let mut rng = Rng::new(seed);
        let mut ledger = Ledger::default();
        while !stop.load(std::sync::atomic::Ordering::Relaxed) {
            write_events(&client, &mut rng, &mut ledger, &WORKLOAD, 5).await;
        }
        ledger
    })
}

/// A counter or gauge summed over its label sets on the relay's `/metrics`.
fn metric_sum(relay: &Pgoutbox, name: &str) -> f64 {
    let metrics = support::workload::http_get(relay, "/metrics");
    metrics
        .lines()
        .filter(|l| {
            l.strip_prefix(name)
                .is_some_and(|rest| rest.starts_with(' ') || rest.starts_with('{'))
        })
        .filter_map(|l| l.rsplit(' ').next()?.trim().parse::<f64>().ok())
        .sum()
}

/// A counter's value on the relay's `/metrics`.
fn http_metric(relay: &Pgoutbox, name: &str) -> f64 {
    let metrics = support::workload::http_get(relay, "/metrics");
    metrics
        .lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {name} in\n{metrics}"))
}

mod crashes;
mod kafka_faults;
mod stops;

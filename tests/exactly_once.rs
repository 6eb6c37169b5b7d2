//! `--delivery exactly-once` on Apache Kafka (tansu and librdkafka's mock cluster
//! do not honour transactions: a `read_committed` reader sees aborted records on
//! both, so these tests always run on an Apache Kafka node,
//! [`Broker::shared_kafka`]).
//!
//! Every reader here is librdkafka's default, `read_committed`: what a consumer of
//! an exactly-once relay is told to use. Each test writes events under its own
//! watermark topic, then checks lost 0 *and duplicated 0* — after kill -9 at
//! random points (mostly between produce and commit), and at the two named crash
//! points of a Kafka transaction (`PGOUTBOX_FAILPOINT`, each proven hit by the line
//! it prints): right before the commit (watermark sent) and right after it, before
//! the slot is confirmed.

use crate::support;

use std::collections::HashSet;
use std::time::Duration;

use support::kafka::{Broker, Reader};
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

/// Write `transactions` transactions of up to 10 events on a fresh connection.
async fn write(db: &TestDb<'_>, seed: u64, ledger: &mut Ledger, transactions: usize) {
    let (client, conn) = tokio_postgres::connect(&db.url(), tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(conn);
    let mut rng = Rng::new(seed);
    let workload = Workload {
        types: TYPES,
        keys: 10,
        max_rows: 10,
        rollbacks: true,
    };
    write_events(&client, &mut rng, ledger, &workload, transactions).await;
}

/// Read until every committed event arrived (or the wait ends), settle, verify.
fn read_all(broker: &Broker, db: &TestDb<'_>, ledger: &Ledger) -> (Verdict, Reader) {
    let ids: HashSet<&str> = ledger.committed.iter().map(|(id, _)| id.as_str()).collect();
    let mut reader = Reader::new(&broker.addr(), &topics(db, TYPES));
    reader.try_read_until(WAIT * 2, |records| {
        let got: HashSet<String> = records.iter().map(|r| r.id()).collect();
        ids.iter().all(|id| got.contains(*id))
    });
    // Anything sent twice would arrive right behind: give it time to show.
    reader.settle(Duration::from_secs(2));
    (verify(ledger, &reader.records), reader)
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
    let (verdict, _) = read_all(broker, &db, &ledger);
    assert_exactly_once("exactly-once", &verdict);

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

/// Writes transactions of up to 10 events until told to stop; returns what it
/// committed.
fn writer(
    db: &TestDb<'_>,
    seed: u64,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
) -> tokio::task::JoinHandle<Ledger> {
    let url = db.url();
    tokio::spawn(async move {
        let (client, conn) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
            .await
            .unwrap();
        tokio::spawn(conn);
        let mut rng = Rng::new(seed);
        let workload = Workload {
            types: TYPES,
            keys: 10,
            max_rows: 10,
            rollbacks: true,
        };
        let mut ledger = Ledger::default();
        while !stop.load(std::sync::atomic::Ordering::Relaxed) {
            write_events(&client, &mut rng, &mut ledger, &workload, 5).await;
        }
        ledger
    })
}

/// Crash the relay `kills` times while events are written — by kill -9 after a
/// random while, or at the `failpoint` step (proven hit: the relay prints it) —
/// restarting it each time, then check what a read_committed reader gets.
async fn crash_and_resume(scenario: &str, seed: u64, kills: usize, failpoint: Option<&str>) {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;

    let db = PgCluster::shared().fresh_db();
    let broker = Broker::shared_kafka();
    let mut ledger = Ledger::default();
    let mut rng = Rng::new(seed);
    let mut hit = 0;
    // A set-up step is reached once per session: crash at its first pass, with the
    // writer already writing. The slot must exist before anything is written (rows
    // committed before it are never decoded): a first relay creates it.
    let at_start = failpoint.is_some_and(|step| step.contains("init-transactions"));
    if at_start {
        let mut first = start_eos(&db, broker, &[]);
        first.signal("TERM");
        first.wait_exit(WAIT);
    }
    for round in 0..kills {
        let nth = if at_start { 1 } else { 1 + round % 3 };
        let env: Vec<(&str, String)> = failpoint
            .map(|step| ("PGOUTBOX_FAILPOINT", format!("{step}:{nth}")))
            .into_iter()
            .collect();
        let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
        let args = eos_args(&db, &[]);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let mut relay = Pgoutbox::spawn_with_env(&run_args(&db, &broker.addr(), &args), &env);
        if !at_start {
            relay.wait_stderr("relaying outbox to kafka", WAIT);
        }
        let stop = Arc::new(AtomicBool::new(false));
        let writing = writer(&db, seed + round as u64, stop.clone());
        match failpoint {
            Some(step) => {
                relay.wait_stderr(&format!("failpoint {step} hit"), WAIT);
                hit += 1;
            }
            None => {
                let after = Duration::from_millis(rng.range(200, 1_500));
                tokio::time::sleep(after).await;
                relay.signal("KILL");
            }
        }
        relay.wait_exit(WAIT);
        stop.store(true, Ordering::Relaxed);
        ledger.committed.extend(writing.await.unwrap().committed);
    }
    // A last relay finishes the stream.
    let relay = start_eos(&db, broker, &[]);
    write(&db, seed + 1_000, &mut ledger, 20).await;
    let end = current_lsn(&db);
    wait_confirmed(&db, end, &relay, WAIT * 2);
    let (verdict, _) = read_all(broker, &db, &ledger);
    eprintln!("{scenario}: {kills} crashes ({hit} at the failpoint)");
    assert_exactly_once(scenario, &verdict);
    if failpoint.is_some() {
        assert_eq!(hit, kills, "every crash at the failpoint");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_before_init_transactions_sends_nothing_twice() {
    crash_and_resume(
        "exactly-once crash before init_transactions",
        400,
        4,
        Some("before-init-transactions"),
    )
    .await;
}

/// `init_transactions` aborts what the previous producer left open; a crash right
/// after it (before the watermark is read) leaves nothing half-done.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_right_after_init_transactions_sends_nothing_twice() {
    crash_and_resume(
        "exactly-once crash after init_transactions",
        500,
        4,
        Some("after-init-transactions"),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_mid_stream_sends_nothing_twice() {
    crash_and_resume("exactly-once kill -9", 100, 6, None).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_before_the_kafka_commit_sends_nothing_twice() {
    crash_and_resume(
        "exactly-once crash before the commit",
        200,
        4,
        Some("before-kafka-commit"),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_between_the_kafka_commit_and_the_slot_sends_nothing_twice() {
    crash_and_resume(
        "exactly-once crash after the commit",
        300,
        4,
        Some("after-kafka-commit"),
    )
    .await;
}

/// A zombie: relay A stops (SIGSTOP, raised by a failpoint right before its
/// commit, so it is paused holding an open Kafka transaction with records and a
/// watermark in it); its walsender is ended (as `wal_sender_timeout` would);
/// relay B takes the slot and fences A's transactional id. Resumed (SIGCONT), A
/// goes on to commit — a write — is fenced, says so and stops; a read_committed
/// reader sees nothing A's open transaction held, and every event once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_zombie_relay_is_fenced_and_nothing_it_wrote_is_visible() {
    let db = PgCluster::shared().fresh_db();
    let broker = Broker::shared_kafka();
    let mut ledger = Ledger::default();
    let args = eos_args(&db, &[]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut zombie = Pgoutbox::spawn_with_env(
        &run_args(&db, &broker.addr(), &args),
        &[("PGOUTBOX_FAILPOINT", "before-kafka-commit:2:stop")],
    );
    zombie.wait_stderr("relaying outbox to kafka", WAIT);
    // A first Kafka transaction commits; the second one is where A stops.
    write(&db, 700, &mut ledger, 20).await;
    wait_confirmed(&db, current_lsn(&db), &zombie, WAIT * 2);
    write(&db, 703, &mut ledger, 20).await;
    zombie.wait_stderr("failpoint before-kafka-commit hit", WAIT);
    // Stopped with its transaction open: its records went out, none committed.
    let successor = Pgoutbox::spawn(&run_args(&db, &broker.addr(), &args));
    successor.wait_stderr("standing by", WAIT);
    db.psql(&format!(
        "SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots \
         WHERE slot_name = '{}' AND active_pid IS NOT NULL",
        db.name
    ));
    successor.wait_stderr(
        "exactly-once: resuming after the newest committed watermark",
        WAIT,
    );
    write(&db, 701, &mut ledger, 40).await;
    let end = current_lsn(&db);
    wait_confirmed(&db, end, &successor, WAIT * 2);
    zombie.signal("CONT");
    let status = zombie.wait_exit(WAIT);
    let log = zombie.stderr();
    assert!(
        log.contains("this relay was fenced"),
        "the resumed zombie must be told it was fenced (status {status:?}):\n{log}"
    );
    assert_ne!(
        status.code(),
        Some(0),
        "a fenced relay exits non-zero:\n{log}"
    );
    let fenced = log
        .lines()
        .filter(|l| l.contains("fenced"))
        .collect::<Vec<_>>();
    eprintln!("the zombie's end ({status:?}):\n{}", fenced.join("\n"));
    write(&db, 702, &mut ledger, 10).await;
    let end = current_lsn(&db);
    wait_confirmed(&db, end, &successor, WAIT * 2);
    let (verdict, _) = read_all(broker, &db, &ledger);
    assert_exactly_once("exactly-once zombie", &verdict);
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

/// A broker outage in the middle of a Kafka transaction: the Apache Kafka node is
/// killed (kill -9) while records of an uncommitted transaction are acked in it
/// (the relay's acked count runs ahead of the records its committed transactions
/// hold), stays down while the writers go on, and is started again (its
/// transaction log on disk: the coordinator aborts or completes what was open)
/// after 30 more transactions were written. The relay keeps running through it;
/// a read_committed reader gets every event once, in order per key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broker_killed_mid_transaction_loses_and_repeats_nothing() {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;

    let db = PgCluster::shared().fresh_db();
    let broker = Broker::start_kafka(&[]);
    let mut relay = start_eos(&db, &broker, &["--transaction-interval", "1s"]);
    let mut ledger = Ledger::default();
    let stop = Arc::new(AtomicBool::new(false));
    let writing = writer(&db, 800, stop.clone());
    // A transaction committed, and the open one holds 100 acked records or more.
    let open = || {
        let committed = metric_sum(&relay, "pgoutbox_kafka_transaction_records_total");
        let acked = metric_sum(&relay, "outbox_events_published_total");
        (committed > 0.0 && acked >= committed + 100.0).then_some((committed, acked))
    };
    let (committed, acked) = support::wait_for(
        "an open Kafka transaction holding acked records",
        WAIT,
        open,
    );
    broker.kill();
    eprintln!("broker killed with {acked} records acked, {committed} of them committed");
    // One writer at a time, so the ledger's order is the commit order.
    stop.store(true, Ordering::Relaxed);
    ledger.committed.extend(writing.await.unwrap().committed);
    support::wait_for("the relay to see the producer down", WAIT, || {
        (metric_sum(&relay, "pgoutbox_producer_connected") == 0.0).then_some(())
    });
    // The outage lasts while 30 more transactions are written.
    write(&db, 801, &mut ledger, 30).await;
    broker.start_again();
    write(&db, 802, &mut ledger, 10).await;
    let end = current_lsn(&db);
    wait_confirmed(&db, end, &relay, WAIT * 3);
    let log = relay.stderr();
    assert!(
        relay.try_exit().is_none(),
        "the relay must ride out the outage:\n{log}"
    );
    let failed = metric_sum(&relay, "pgoutbox_kafka_transactions_failed_total");
    let commits = metric_sum(&relay, "pgoutbox_kafka_transactions_committed_total");
    eprintln!("broker outage: {commits} Kafka transactions committed, {failed} failed");
    let (verdict, _) = read_all(&broker, &db, &ledger);
    assert_exactly_once("exactly-once broker outage", &verdict);
    relay.signal("TERM");
    relay.wait_exit(WAIT);
}

/// One record, acked.
fn produce_one(brokers: &str, topic: &str, key: &str, value: &str) {
    use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
    let producer: BaseProducer = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .create()
        .expect("producer");
    producer
        .send(BaseRecord::to(topic).key(key).payload(value))
        .expect("queued");
    producer.flush(WAIT).expect("acked");
}

#[test]
fn a_watermark_of_another_database_system_stops_the_relay() {
    let db = PgCluster::shared().fresh_db();
    let broker = Broker::shared_kafka();
    let id = format!("test-{}", db.name);
    // The topic (compacted, as the relay would create it) holds a watermark for
    // this relay's id, written by another cluster.
    broker.kafka_tool(
        "org.apache.kafka.tools.TopicCommand",
        &[
            "--create",
            "--topic",
            &watermark_topic(&db),
            "--partitions",
            "1",
            "--config",
            "cleanup.policy=compact",
        ],
    );
    let foreign = serde_json::json!({
        "system_id": "1", "timeline": 1, "database": "other", "slot": "other",
        "commit_lsn": "0/1000", "end_lsn": "0/1008"
    });
    produce_one(
        &broker.addr(),
        &watermark_topic(&db),
        &id,
        &foreign.to_string(),
    );
    let (status, stderr) = eos_until_exit(&db, broker, &["--transactional-id", &id]);
    assert_eq!(status, Some(5), "{stderr}");
    assert!(
        stderr.contains("written for database system 1") && stderr.contains("--transactional-id"),
        "the stop names the watermark's system and the fix: {stderr}"
    );
}

#[test]
fn poll_mode_refuses_exactly_once_with_the_reason() {
    let db = PgCluster::shared().fresh_db();
    let args = eos_args(&db, &["--source", "poll"]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut relay = Pgoutbox::spawn(&run_args(&db, "127.0.0.1:1", &args));
    let status = relay.wait_exit(WAIT);
    let stderr = relay.stderr();
    assert_eq!(status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("--delivery exactly-once needs --source logical"),
        "{stderr}"
    );
}

#[test]
fn accept_watermark_reset_without_exactly_once_is_refused() {
    let db = PgCluster::shared().fresh_db();
    let args = run_args(&db, "127.0.0.1:1", &["--accept-watermark-reset"]);
    let mut relay = Pgoutbox::spawn(&args);
    let status = relay.wait_exit(WAIT);
    let stderr = relay.stderr();
    assert_eq!(status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("--accept-watermark-reset applies only with --delivery exactly-once"),
        "{stderr}"
    );
}

#[test]
fn a_watermark_topic_that_is_not_compacted_stops_the_relay_with_the_command() {
    let db = PgCluster::shared().fresh_db();
    let broker = Broker::shared_kafka();
    // Created by hand with the broker's default cleanup.policy (delete): retention
    // would one day delete the newest watermark of an idle relay.
    broker.kafka_tool(
        "org.apache.kafka.tools.TopicCommand",
        &[
            "--create",
            "--topic",
            &watermark_topic(&db),
            "--partitions",
            "1",
        ],
    );
    let (status, stderr) = eos_until_exit(&db, broker, &[]);
    assert_ne!(status, Some(0), "{stderr}");
    assert!(
        stderr.contains("cleanup.policy=delete")
            && stderr.contains("--add-config cleanup.policy=compact"),
        "the stop names the policy and the kafka-configs command: {stderr}"
    );
    assert!(
        !stderr.contains("relaying outbox to kafka"),
        "nothing streamed before the stop: {stderr}"
    );
}

#[test]
fn check_and_tail_say_which_delivery_mode_is_in_force() {
    let db = PgCluster::shared().fresh_db();
    let broker = Broker::shared_kafka();
    let topic = watermark_topic(&db);
    let url = db.url();
    let addr = broker.addr();
    let check = |extra: &[&str]| {
        let mut args = vec![
            "check",
            "--database-url",
            url.as_str(),
            "--slot",
            db.name.as_str(),
        ];
        args.extend_from_slice(extra);
        let mut p = Pgoutbox::spawn(&args);
        let status = p.wait_exit(WAIT);
        (status, p.stdout_so_far().join("\n"))
    };
    let line = |out: &str, name: &str| {
        out.lines()
            .find(|l| l.contains(&format!(" {name}: ")))
            .unwrap_or_else(|| panic!("no {name} line:\n{out}"))
            .to_owned()
    };
    // The default says so.
    let (_, out) = check(&[]);
    let mode = line(&out, "delivery");
    assert!(
        mode.starts_with("✔ delivery: --delivery at-least-once = at-least-once"),
        "{out}"
    );
    assert!(!out.contains("watermark_topic"), "{out}");
    // Exactly-once names the derived transactional id and looks at the topic
    // without creating it.
    let eos = [
        "--delivery",
        "exactly-once",
        "--watermark-topic",
        topic.as_str(),
        "--brokers",
        addr.as_str(),
    ];
    let (_, out) = check(&eos);
    let mode = line(&out, "delivery");
    let system_id = db.psql("SELECT system_identifier FROM pg_control_system()");
    let derived = format!(
        "transactional.id pgoutbox-{system_id}-{}-{}",
        db.name, db.name
    );
    assert!(
        mode.contains("exactly-once") && mode.contains(&derived),
        "{mode}"
    );
    let wm = line(&out, "watermark_topic");
    assert!(
        wm.starts_with(&format!("✔ watermark_topic: {topic} = does not exist yet"))
            && wm.contains("cleanup.policy=compact"),
        "{wm}"
    );
    // check only reads: the topic is still missing.
    let (_, again) = check(&eos);
    assert!(line(&again, "watermark_topic").contains("does not exist yet"));
    // A topic with retention fails with the kafka-configs command.
    broker.kafka_tool(
        "org.apache.kafka.tools.TopicCommand",
        &["--create", "--topic", &topic, "--partitions", "1"],
    );
    let (status, out) = check(&eos);
    let wm = line(&out, "watermark_topic");
    assert!(!status.success(), "{out}");
    assert!(
        wm.starts_with(&format!(
            "✘ watermark_topic: {topic} = cleanup.policy=delete"
        )) && wm.contains("--add-config cleanup.policy=compact"),
        "{wm}"
    );
    // tail says which mode run would be in with the same flags.
    let mut tail = Pgoutbox::spawn(&[
        "tail",
        "--database-url",
        &url,
        "--delivery",
        "exactly-once",
        "--watermark-topic",
        &topic,
    ]);
    tail.wait_stderr("tailing outbox", WAIT);
    let stderr = tail.stderr();
    let started = stderr
        .lines()
        .find(|l| l.contains("tailing outbox"))
        .unwrap();
    assert!(
        started.contains("delivery=exactly-once") && started.contains(&topic),
        "{started}"
    );
    tail.signal("TERM");
    tail.wait_exit(WAIT);
}

/// After a promotion the relay reads the server's timeline history: its own
/// watermark from timeline 1 (before the switch point) leads to timeline 2 and the
/// events of both arrive once; a watermark of timeline 1 that ends past the switch
/// point (transactions a promoted standby never received) stops the relay, even
/// though the new timeline's WAL has grown past it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_promotion_a_watermark_past_the_branch_point_stops_the_relay() {
    let cluster = PgCluster::start(support::ClusterOptions::default());
    let db = cluster.fresh_db();
    let broker = Broker::shared_kafka();
    let id = format!("test-{}", db.name);
    let mut relay = start_eos(&db, broker, &["--transactional-id", &id]);
    let mut ledger = Ledger::default();
    write(&db, 21, &mut ledger, 20).await;
    wait_confirmed(&db, current_lsn(&db), &relay, WAIT);
    relay.signal("TERM");
    relay.wait_exit(WAIT);

    cluster.promote_in_place();
    assert_eq!(cluster.timeline(), 2);
    write(&db, 22, &mut ledger, 20).await;
    let mut relay = start_eos(&db, broker, &["--transactional-id", &id]);
    relay.wait_stderr(
        "exactly-once: resuming after the newest committed watermark",
        WAIT,
    );
    wait_confirmed(&db, current_lsn(&db), &relay, WAIT);
    let (verdict, _) = read_all(broker, &db, &ledger);
    assert_exactly_once("across a promotion", &verdict);
    relay.signal("TERM");
    relay.wait_exit(WAIT);

    // Timeline 1 ended at the switch point; a watermark of timeline 1 past it
    // (but below the new WAL end) names WAL this server does not have.
    let history = db.psql("SELECT pg_read_file('pg_wal/00000002.history')");
    let switch: pgoutbox::pg::lsn::Lsn = history
        .split_whitespace()
        .nth(1)
        .and_then(|l| l.parse().ok())
        .unwrap_or_else(|| panic!("no switch point in {history:?}"));
    let past = |bytes: u64| pgoutbox::pg::lsn::Lsn::from(u64::from(switch) + bytes).to_string();
    assert!(u64::from(current_lsn(&db)) > u64::from(switch) + 64);
    let system_id = db.psql("SELECT system_identifier FROM pg_control_system()");
    let forged = serde_json::json!({
        "system_id": system_id, "timeline": 1, "database": db.name, "slot": db.name,
        "commit_lsn": past(8), "end_lsn": past(64)
    });
    produce_one(
        &broker.addr(),
        &watermark_topic(&db),
        &id,
        &forged.to_string(),
    );
    let (status, stderr) = eos_until_exit(&db, broker, &["--transactional-id", &id]);
    assert_eq!(status, Some(5), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "past {switch} where this server's timeline 2 branched off it"
        )),
        "the stop names the branch point: {stderr}"
    );
    assert!(!stderr.contains("relaying outbox to kafka"), "{stderr}");
}

/// The state file records where the relay committed watermarks, so a topic deleted
/// behind its back is a stop with the fix, not a silent restart from the slot;
/// `--accept-watermark-reset` goes on once, and nothing arrives twice after a clean
/// stop.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_watermark_topic_stops_the_relay_until_the_reset_is_accepted() {
    let db = PgCluster::shared().fresh_db();
    let broker = Broker::shared_kafka();
    let id = format!("test-{}", db.name);
    let topic = watermark_topic(&db);
    let mut relay = start_eos(&db, broker, &["--transactional-id", &id]);
    let mut ledger = Ledger::default();
    write(&db, 31, &mut ledger, 20).await;
    wait_confirmed(&db, current_lsn(&db), &relay, WAIT);
    relay.signal("TERM");
    relay.wait_exit(WAIT);

    broker.kafka_tool(
        "org.apache.kafka.tools.TopicCommand",
        &["--delete", "--topic", &topic],
    );
    support::wait_for("the watermark topic to be gone", WAIT, || {
        let listed = broker.kafka_tool("org.apache.kafka.tools.TopicCommand", &["--list"]);
        (!listed.lines().any(|l| l.trim() == topic)).then_some(())
    });
    let (status, stderr) = eos_until_exit(&db, broker, &["--transactional-id", &id]);
    assert_eq!(status, Some(5), "{stderr}");
    assert!(
        stderr.contains("holds no watermark for transactional id")
            && stderr.contains("--accept-watermark-reset"),
        "the stop says what was lost and the fix: {stderr}"
    );
    assert!(!stderr.contains("relaying outbox to kafka"), "{stderr}");

    let mut relay = start_eos(
        &db,
        broker,
        &["--transactional-id", &id, "--accept-watermark-reset"],
    );
    assert!(relay.stderr().contains("--accept-watermark-reset"));
    write(&db, 32, &mut ledger, 20).await;
    wait_confirmed(&db, current_lsn(&db), &relay, WAIT);
    let (verdict, _) = read_all(broker, &db, &ledger);
    assert_exactly_once("after an accepted watermark reset", &verdict);
    relay.signal("TERM");
    relay.wait_exit(WAIT);
    // The new topic holds the watermark again: a plain restart goes on.
    let mut relay = start_eos(&db, broker, &["--transactional-id", &id]);
    relay.wait_stderr(
        "exactly-once: resuming after the newest committed watermark",
        WAIT,
    );
    relay.signal("TERM");
    relay.wait_exit(WAIT);
}

/// A row the broker refuses for its size in the middle of a Kafka transaction:
/// librdkafka makes the transaction abortable, so the relay aborts it and redoes it
/// from the newest committed watermark with the row turned poison before it is
/// sent — the at-least-once outcome: with `too-large=dlq` the dead letter and the
/// rows around it arrive once each; with the default (`fail`) the relay stops
/// naming the row and nothing of its Kafka transaction becomes visible.
/// (`batch.size` below the topic's limit: librdkafka does not split a batch the
/// broker refuses, so small rows batched with the large one would be refused too.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_row_the_broker_refuses_mid_transaction_is_redone_as_poison() {
    let db = PgCluster::shared().fresh_db();
    let broker = Broker::shared_kafka();
    let topic = format!("{}.small", db.name);
    let dlq = format!("{}.dlq", db.name);
    broker.kafka_tool(
        "org.apache.kafka.tools.TopicCommand",
        &[
            "--create",
            "--topic",
            &topic,
            "--partitions",
            "1",
            "--config",
            "max.message.bytes=10000",
        ],
    );
    let row = |id: &str, len: usize| {
        format!(
            "INSERT INTO outbox (id, aggregate_type, aggregate_id, event_type, payload) \
             VALUES ('{id}', 'small', 'k1', 'Created', to_jsonb(repeat('x', {len})));"
        )
    };
    let ids = [
        "00000000-0000-4000-8000-0000000000a1",
        "00000000-0000-4000-8000-0000000000a2",
        "00000000-0000-4000-8000-0000000000a3",
        "00000000-0000-4000-8000-0000000000a4",
    ];
    let extra = [
        "--kafka-option",
        "batch.size=9000",
        "--transaction-interval",
        "2s",
    ];
    let mut args = extra.to_vec();
    args.extend(["--on-invalid", "too-large=dlq", "--dlq-topic", &dlq]);
    let mut relay = start_eos(&db, broker, &args);
    // One Kafka transaction (2 s) holds all three PostgreSQL transactions.
    db.psql(&format!(
        "BEGIN; {} {} COMMIT;",
        row(ids[0], 10),
        row(ids[1], 20_000)
    ));
    db.psql(&row(ids[2], 10));
    wait_confirmed(&db, current_lsn(&db), &relay, WAIT);
    let read = |topic: &str, n: usize| {
        let mut reader = Reader::new(&broker.addr(), &[topic.to_owned()]);
        reader.try_read_until(WAIT, |r| r.len() >= n);
        reader.settle(Duration::from_secs(2));
        reader.records.iter().map(|r| r.id()).collect::<Vec<_>>()
    };
    let log = relay.stderr();
    assert_eq!(read(&topic, 2), [ids[0], ids[2]], "{log}");
    assert_eq!(read(&dlq, 1), [ids[1]], "{log}");
    assert!(
        log.contains("the open kafka transaction is aborted and redone"),
        "{log}"
    );
    relay.signal("TERM");
    relay.wait_exit(WAIT);

    // The default policy stops on the row; nothing of its Kafka transaction shows.
    let mut relay = start_eos(&db, broker, &extra);
    let again = ids[1].replace("a2", "b2");
    db.psql(&format!(
        "BEGIN; {} {} COMMIT;",
        row(ids[3], 10),
        row(&again, 20_000)
    ));
    let written = current_lsn(&db);
    let status = relay.wait_exit(WAIT * 2);
    let log = relay.stderr();
    assert!(!status.success(), "{log}");
    assert!(
        log.contains("poison row (too-large) in public.outbox"),
        "{log}"
    );
    assert_eq!(read(&topic, 2), [ids[0], ids[2]], "{log}");
    assert!(
        support::workload::slot_lsn(&db, "confirmed_flush_lsn") < written,
        "slot past the stopped transaction\n{log}"
    );
}

/// rust-rdkafka's transactional calls block: they run off the runtime that reads
/// WAL and answers keepalives. With 1.5 s added to every chunk on the Kafka link,
/// each `init_transactions` and commit takes 3 s or more (measured on the relay's
/// own commit-time counter), beyond a 2 s `wal_sender_timeout`; the walsender must
/// never time the relay out (same walsender pid throughout, no interrupted
/// session) and every event arrives once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_kafka_transactions_do_not_trip_a_two_second_wal_sender_timeout() {
    let db = PgCluster::shared().fresh_db();
    let broker = Broker::start_kafka(&[]);
    broker.proxy().latency(Duration::from_millis(1500));
    let url = format!("{}&options=-c%20wal_sender_timeout%3D2s", db.url());
    let args = eos_args(&db, &[]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let args = support::workload::run_args_via(&db, &url, &broker.addr(), &args);
    let mut relay = support::workload::start_relay(&args);
    let walsender = || {
        db.psql(&format!(
            "SELECT active_pid FROM pg_replication_slots WHERE slot_name = '{}'",
            db.name
        ))
    };
    let pid = walsender();
    let mut ledger = Ledger::default();
    write(&db, 41, &mut ledger, 30).await;
    wait_confirmed(&db, current_lsn(&db), &relay, WAIT * 2);
    let log = relay.stderr();
    let commits = http_metric(&relay, "pgoutbox_kafka_transactions_committed_total");
    let seconds = http_metric(&relay, "pgoutbox_kafka_transaction_commit_seconds_total");
    eprintln!("{commits} commits in {seconds:.1} s");
    assert!(commits >= 1.0, "{commits} commits\n{log}");
    assert!(
        seconds / commits >= 2.0,
        "commits took {seconds} s for {commits}: the latency did not apply"
    );
    assert_eq!(walsender(), pid, "the walsender was replaced\n{log}");
    assert!(!log.contains("interrupted"), "{log}");
    broker.proxy().latency(Duration::ZERO);
    let (verdict, _) = read_all(&broker, &db, &ledger);
    assert_exactly_once("slow kafka transactions", &verdict);
    relay.signal("TERM");
    relay.wait_exit(WAIT);
}

/// A counter's value on the relay's `/metrics`.
fn http_metric(relay: &Pgoutbox, name: &str) -> f64 {
    let metrics = support::workload::http_get(relay, "/metrics");
    metrics
        .lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {name} in\n{metrics}"))
}

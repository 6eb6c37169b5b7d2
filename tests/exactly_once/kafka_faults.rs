//! What Kafka does to an exactly-once relay: a broker killed in the middle of a
//! transaction, a row the broker refuses mid-transaction, commits slower than
//! `wal_sender_timeout`.

use super::*;

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
    let writing = writer(&db, 800, stop.clone()).await;
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
    let verdict = read_all(&broker, &db, &ledger);
    assert_exactly_once("exactly-once broker outage", &verdict);
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
    let verdict = read_all(&broker, &db, &ledger);
    assert_exactly_once("slow kafka transactions", &verdict);
    relay.signal("TERM");
    relay.wait_exit(WAIT);
}

//! The relay on a three-node Apache Kafka cluster (KRaft, every node broker and
//! controller; replication factor 3, `min.insync.replicas=2`, `acks=all`), with a
//! writer writing throughout. One cluster, three faults in a row:
//!
//! 1. kill -9 the leader of the busiest partition: the relay goes on (leadership
//!    moves to an in-sync replica);
//! 2. kill -9 two of the three nodes (below `min.insync.replicas`, and the
//!    controller quorum is lost too: the harsher case): the relay waits — the slot
//!    does not move past the waiting events, the stall is logged once, `/readyz`
//!    answers 503 and the stall counter rises — and drains once one node returns;
//! 3. a rolling restart of all three (SIGTERM, start, wait until every replica is
//!    in sync again, next node — as an operator does it).
//!
//! At the end: lost 0, per-key order kept, duplicates counted and printed, and
//! every ack the relay got is read back at its offset ([`audit_acks`]).
//! Always Apache Kafka, whatever `PGOUTBOX_TEST_BROKER` says (tansu has no
//! replication).

use crate::support;

use std::time::{Duration, Instant};

use support::kafka::{KafkaCluster, Reader};
use support::verify::{acks_in, audit_acks, explain_lost, verify};
use support::workload::{
    http_get, read_acked, read_all, start_run_audited, topics, Monitor, Writer, WriterConfig,
};
use support::{hold_for, wait_for, PgCluster, Pgoutbox, WAIT};

const STALL_TIMEOUT: &str = "5s";
const STALL_LINE: &str = "no kafka ack for the oldest in-flight record";

fn log_tail(relay: &Pgoutbox) -> String {
    crate::faults::log_tail(relay)
}

/// Wait until the slot is confirmed past the WAL written by now.
fn wait_progress(monitor: &mut Monitor, relay: &Pgoutbox, what: &str) -> Duration {
    let now = monitor.wait_sample().current;
    monitor.wait_confirmed_past(what, now, WAIT * 3, || log_tail(relay))
}

/// The partition of `records` holding the most records.
fn busiest(records: &[support::kafka::Consumed]) -> i32 {
    let mut counts = std::collections::BTreeMap::<i32, usize>::new();
    for r in records {
        *counts.entry(r.partition).or_default() += 1;
    }
    counts
        .into_iter()
        .max_by_key(|(_, n)| *n)
        .map(|(p, _)| p)
        .expect("records were read")
}

#[test]
fn three_brokers_leader_kill_two_down_and_a_rolling_restart_lose_nothing() {
    let db = PgCluster::shared().fresh_db();
    let cluster = KafkaCluster::start(3, &[]);
    let mut monitor = Monitor::new(&db);
    let relay = start_run_audited(&db, &cluster.addrs(), &["--stall-timeout", STALL_TIMEOUT]);
    let writer = Writer::spawn(WriterConfig {
        url: db.url(),
        seed: 3301,
        types: vec!["order"],
        keys: 20,
        max_rows: 10,
        rollbacks: true,
        pause: Duration::from_millis(10),
    });
    let topic = topics(&db, &["order"]);
    let mut reader = Reader::new(&cluster.addrs(), &topic);
    reader.read_until("records before the leader kill", WAIT, |r| r.len() >= 300);

    // 1. The leader of the busiest partition dies.
    let partition = busiest(&reader.records);
    let leaders = cluster.leaders(&topic[0]);
    let leader = leaders
        .iter()
        .find(|(p, _)| *p == partition)
        .map(|(_, l)| *l)
        .expect("the busiest partition has a leader");
    cluster.node(leader).kill();
    let took = wait_progress(&mut monitor, &relay, "progress with a leader dead");
    eprintln!(
        "FIGURES leader kill: node {leader} (leader of partition {partition}) killed; \
         the slot passed the WAL written by then {took:?} later"
    );
    cluster.node(leader).start_again();
    cluster.wait_in_sync(&topic[0]);

    // 2. Two nodes die: no record can reach two in-sync replicas. `b` dies first,
    // `a` last, so `a` is in every partition's last in-sync replica set and its
    // return alone brings the partitions back (with the controller quorum).
    let stalls_before = relay.stderr().matches(STALL_LINE).count();
    let (a, b) = (1 + leader % 3, 1 + (leader + 1) % 3);
    cluster.node(b).kill();
    cluster.node(a).kill();
    let killed = Instant::now();
    wait_for(
        "the stall to be logged with two nodes down",
        WAIT * 2,
        || (relay.stderr().matches(STALL_LINE).count() > stalls_before).then_some(()),
    );
    let detected = killed.elapsed();
    let held = monitor.wait_sample();
    let ready = http_get(&relay, "/readyz");
    assert!(
        ready.starts_with("HTTP/1.1 503") && ready.contains("stalled"),
        "readyz while two of three nodes are down: {ready}"
    );
    let metrics = http_get(&relay, "/metrics");
    assert!(
        metrics
            .lines()
            .any(|l| l.starts_with("pgoutbox_stalls_total ") && !l.ends_with(" 0")),
        "pgoutbox_stalls_total while stalled:\n{metrics}"
    );
    // Waiting, not moving: for a further 10 s the confirmed position stays where
    // it is, with events waiting behind it (WAL past the confirmed position).
    let checks = hold_for(
        Instant::now(),
        Duration::from_secs(10),
        Duration::from_millis(500),
        || {
            let now = monitor.wait_sample();
            assert_eq!(
                now.confirmed, held.confirmed,
                "the slot moved while no record could be acked"
            );
            assert!(now.current > now.confirmed, "events wait behind the slot");
        },
    );
    assert_eq!(
        relay.stderr().matches(STALL_LINE).count(),
        stalls_before + 1,
        "the stall is logged once while it lasts:\n{}",
        log_tail(&relay)
    );
    cluster.node(a).start_again();
    let drained = wait_progress(&mut monitor, &relay, "the drain after a node returned");
    cluster.node(b).start_again();
    cluster.wait_in_sync(&topic[0]);
    eprintln!(
        "FIGURES two of three down: stall logged {detected:?} after the kill, slot held at {} \
         for 10 s ({checks} checks); drained {drained:?} after one node returned",
        held.confirmed
    );

    // 3. A rolling restart: each node in turn stops (SIGTERM) and comes back.
    for node in &cluster.nodes {
        node.terminate();
        node.start_again();
        wait_progress(&mut monitor, &relay, "progress after a node's restart");
        cluster.wait_in_sync(&topic[0]);
    }

    let (ledger, stats) = writer.finish();
    let complete = read_all(&mut reader, &ledger, WAIT * 4);
    let acks = acks_in(&relay.stderr());
    read_acked(&mut reader, &acks, WAIT);
    reader.settle(Duration::from_secs(2));
    let verdict = verify(&ledger, &reader.records);
    let audit = audit_acks(&acks, &reader.records);
    eprintln!(
        "FIGURES three brokers: {verdict:?}; writer {stats:?}; acks audited {}",
        audit.acked
    );
    assert!(
        complete,
        "not every event arrived: {}\nrelay:\n{}",
        explain_lost(&ledger, &reader.records, &acks, 10),
        log_tail(&relay)
    );
    if verdict.reordered > 0 || verdict.lost > 0 {
        // The whole log, every delivery report in it, for the post-mortem.
        let path =
            std::env::temp_dir().join(format!("pgoutbox-cluster-relay-{}.log", std::process::id()));
        let _ = std::fs::write(&path, relay.stderr());
        eprintln!("relay log: {}\n{}", path.display(), log_tail(&relay));
    }
    verdict.assert_no_loss();
    audit.assert_clean();
}

/// `--delivery exactly-once` on the three-node cluster: the leader of the busiest
/// partition is killed (kill -9) while the writer writes, then the node that
/// coordinates the relay's transactions (the leader of its `__transaction_state`
/// partition is not known to the test: the node leading the watermark topic is
/// killed instead, which also moves that topic's leadership mid-transaction).
/// Both come back; a read_committed reader gets every event once, in order per key.
#[test]
fn three_brokers_leader_kill_with_exactly_once_sends_nothing_twice() {
    let db = PgCluster::shared().fresh_db();
    let cluster = KafkaCluster::start(3, &[]);
    let mut monitor = Monitor::new(&db);
    let args = crate::exactly_once::eos_args(&db, &["--stall-timeout", STALL_TIMEOUT]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let relay = support::workload::start_run(&db, &cluster.addrs(), &args);
    let writer = Writer::spawn(WriterConfig {
        url: db.url(),
        seed: 3302,
        types: vec!["order"],
        keys: 20,
        max_rows: 10,
        rollbacks: true,
        pause: Duration::from_millis(10),
    });
    let topic = topics(&db, &["order"]);
    let mut reader = Reader::new(&cluster.addrs(), &topic);
    reader.read_until("records before the leader kill", WAIT, |r| r.len() >= 300);
    let partition = busiest(&reader.records);
    let leader = cluster
        .leaders(&topic[0])
        .iter()
        .find(|(p, _)| *p == partition)
        .map(|(_, l)| *l)
        .expect("the busiest partition has a leader");
    cluster.node(leader).kill();
    let took = wait_progress(&mut monitor, &relay, "progress with a leader dead");
    cluster.node(leader).start_again();
    cluster.wait_in_sync(&topic[0]);
    let watermarks = format!("{}.offsets", db.name);
    let (_, marks_leader) = cluster.leaders(&watermarks)[0];
    cluster.node(marks_leader).kill();
    let took_marks = wait_progress(
        &mut monitor,
        &relay,
        "progress with the watermark leader dead",
    );
    cluster.node(marks_leader).start_again();
    cluster.wait_in_sync(&topic[0]);
    wait_progress(&mut monitor, &relay, "progress with every node back");
    let (ledger, stats) = writer.finish();
    let complete = read_all(&mut reader, &ledger, WAIT * 4);
    reader.settle(Duration::from_secs(2));
    let verdict = verify(&ledger, &reader.records);
    eprintln!(
        "FIGURES three brokers, exactly-once: node {leader} (leader of partition {partition})          killed, the slot passed the WAL written by then {took:?} later; node {marks_leader}          (watermark topic leader) killed, {took_marks:?}; {verdict:?}; writer {stats:?}"
    );
    assert!(
        complete,
        "not every event arrived: {verdict:?}\nrelay:\n{}",
        log_tail(&relay)
    );
    verdict.assert_no_loss();
    assert_eq!(
        verdict.duplicated_total,
        0,
        "a read_committed reader saw events twice: {verdict:?}\n{}",
        log_tail(&relay)
    );
}

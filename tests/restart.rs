//! Resuming where the relay confirmed (issue 11, items 1 and 4): after a PostgreSQL
//! restart the slot's `confirmed_flush_lsn` may fall back (PostgreSQL ≤ 16 writes it
//! only when the slot is otherwise dirtied); `pgoutbox run` then starts at the state
//! file's LSN, so only what was in flight is sent again. When the server's history
//! differs from the file's — a promotion, an older timeline, a file written before
//! timelines were recorded — it trusts the slot, follows a promotion that kept the
//! slot, and fails closed on one that lost it.
//!
//! Real PostgreSQL (the shared cluster, and private clusters for restarts and
//! promotions) and the tansu broker.

use crate::faults::{conclude, first_progress, log_tail, progress_after_restart, TYPES};
use crate::slot_safety::{insert, read_all, start, start_failing, state_file, stop};
use crate::support;

use std::path::Path;
use std::time::Duration;

use pgoutbox::pg::lsn::Lsn;
use support::kafka::Broker;
use support::workload::{current_lsn, http_get, slot_lsn, Monitor, Writer, WriterConfig};
use support::{temp_dir, ClusterOptions, PgCluster, Rng, TestDb};

/// Rewrite the state file of `db`: its LSN, and its timeline (`None` removes the
/// line, as pgoutbox wrote it before timelines were recorded).
fn rewrite_state(state: &Path, db: &TestDb<'_>, lsn: Lsn, timeline: Option<u32>) {
    let path = state_file(state, db);
    let text = std::fs::read_to_string(&path).expect("a state file");
    let text: Vec<String> = text
        .lines()
        .filter_map(|line| {
            if line.starts_with("confirmed_lsn = ") {
                Some(format!("confirmed_lsn = \"{lsn}\""))
            } else if line.starts_with("timeline = ") {
                timeline.map(|t| format!("timeline = {t}"))
            } else {
                Some(line.to_owned())
            }
        })
        .collect();
    std::fs::write(&path, text.join("\n") + "\n").unwrap();
}

/// The timeline recorded in the state file.
fn state_timeline(state: &Path, db: &TestDb<'_>) -> Option<u32> {
    std::fs::read_to_string(state_file(state, db))
        .ok()?
        .lines()
        .find_map(|l| l.strip_prefix("timeline = "))
        .map(|t| t.parse().expect("a timeline number"))
}

/// Three transactions of `order` events; the WAL position between the second and
/// the third (past the second's commit, before the third's).
struct ThreeTxns {
    a: Vec<(String, String)>,
    b: Vec<(String, String)>,
    c: Vec<(String, String)>,
    after_b: Lsn,
}

fn three_txns(db: &TestDb<'_>) -> ThreeTxns {
    let a = insert(db, "order", 3);
    let b = insert(db, "order", 3);
    let after_b = current_lsn(db);
    let c = insert(db, "order", 3);
    ThreeTxns { a, b, c, after_b }
}

/// A relay that ran once on `db` (slot and state file created), then stopped.
fn relayed_once(db: &TestDb<'_>, broker: &str) -> std::path::PathBuf {
    let state = temp_dir("resume-state");
    stop(start(db, broker, &state, &[]));
    state
}

/// Which of `ids` the topic holds once `until` arrived (same keys, so the same
/// partitions: anything sent before `until` is in front of it).
fn delivered(
    broker: &str,
    db: &TestDb<'_>,
    until: &[(String, String)],
    ids: &[(String, String)],
) -> usize {
    let reader = read_all(broker, db, "order", until);
    ids.iter()
        .filter(|(id, _)| reader.records.iter().any(|r| &r.id() == id))
        .count()
}

#[test]
fn a_slot_behind_the_state_file_resumes_at_the_state_file() {
    let db = PgCluster::shared().fresh_db();
    let broker = Broker::shared().addr();
    let state = relayed_once(&db, &broker);
    let t = three_txns(&db);
    // As after a restart of PostgreSQL ≤ 16: the relay confirmed through b, the
    // slot remembers less (here: nothing of a, b, c).
    assert!(slot_lsn(&db, "confirmed_flush_lsn") < t.after_b);
    rewrite_state(&state, &db, t.after_b, state_timeline(&state, &db));
    let relay = start(&db, &broker, &state, &[]);
    let stderr = relay.stderr();
    let already: Vec<_> = t.a.iter().chain(&t.b).cloned().collect();
    assert_eq!(
        delivered(&broker, &db, &t.c, &already),
        0,
        "a and b were confirmed before the restart and must not be sent again\n{stderr}"
    );
    assert!(
        stderr.contains("resume_from=\"state file\"") && stderr.contains(&t.after_b.to_string()),
        "the start line names the state file and its position:\n{stderr}"
    );
    stop(relay);
}

#[test]
fn a_state_file_of_unknown_timeline_or_past_the_wal_end_trusts_the_slot() {
    let db = PgCluster::shared().fresh_db();
    let broker = Broker::shared().addr();
    let state = relayed_once(&db, &broker);
    let t = three_txns(&db);
    // Written by a pgoutbox that did not record the timeline.
    rewrite_state(&state, &db, t.after_b, None);
    let relay = start(&db, &broker, &state, &[]);
    let all: Vec<_> = t.a.iter().chain(&t.b).cloned().collect();
    assert_eq!(delivered(&broker, &db, &t.c, &all), all.len());
    assert!(
        relay.stderr().contains("does not record a timeline"),
        "{}",
        relay.stderr()
    );
    stop(relay);
    assert_eq!(state_timeline(&state, &db), Some(1), "recorded from now on");

    // A position the server never reached: a restored snapshot of the cluster.
    let d = insert(&db, "order", 3);
    let far = Lsn(current_lsn(&db).0 + (1 << 32));
    rewrite_state(&state, &db, far, Some(1));
    let relay = start(&db, &broker, &state, &[]);
    assert_eq!(delivered(&broker, &db, &d, &d), d.len());
    assert!(
        relay.stderr().contains("past the server's WAL end"),
        "{}",
        relay.stderr()
    );
    stop(relay);
}

#[test]
fn an_older_timeline_than_relayed_is_refused() {
    let db = PgCluster::shared().fresh_db();
    let broker = Broker::shared().addr();
    let state = relayed_once(&db, &broker);
    let lsn = slot_lsn(&db, "confirmed_flush_lsn");
    rewrite_state(&state, &db, lsn, Some(7));
    let stderr = start_failing(&db, &broker, &state, &[]);
    for needle in [
        "the server is on timeline 1",
        "on timeline 7",
        "former primary",
        "--accept-slot-reset",
    ] {
        assert!(stderr.contains(needle), "{needle}:\n{stderr}");
    }
}

#[test]
fn a_promotion_that_kept_the_slot_is_followed_one_that_lost_it_fails_closed() {
    let cluster = PgCluster::start(ClusterOptions::default());
    let db = cluster.fresh_db();
    let broker = Broker::shared().addr();
    let state = relayed_once(&db, &broker);
    let before = insert(&db, "order", 3);
    cluster.promote_in_place();
    assert_eq!(cluster.timeline(), 2);
    let after = insert(&db, "order", 3);
    let relay = start(&db, &broker, &state, &[]);
    assert_eq!(delivered(&broker, &db, &after, &before), before.len());
    let stderr = relay.stderr();
    assert!(
        stderr.contains("WARN") && stderr.contains("promoted from timeline 1 to 2"),
        "{stderr}"
    );
    let metrics = http_get(&relay, "/metrics");
    assert!(
        metrics.contains("pgoutbox_promotions_followed_total 1"),
        "{metrics}"
    );
    stop(relay);
    assert_eq!(state_timeline(&state, &db), Some(2));

    // The next failover target has no copy of the slot.
    cluster.promote_in_place();
    db.psql(&format!("SELECT pg_drop_replication_slot('{}')", db.name));
    let stderr = start_failing(&db, &broker, &state, &[]);
    for needle in [
        "does not exist on this server, which was promoted from timeline 2 to 3",
        "--accept-slot-reset",
        "Patroni permanent slots",
    ] {
        assert!(stderr.contains(needle), "{needle}:\n{stderr}");
    }
}

/// `--max-in-flight` of the restart run: what one session can leave unconfirmed.
const MAX_IN_FLIGHT: usize = 200;

#[test]
fn fast_and_immediate_restarts_under_load_resend_only_what_was_in_flight() {
    restarts_under_load(false);
}

/// The same restarts with `--delivery exactly-once` on Apache Kafka: a
/// read_committed reader sees no event twice.
#[test]
fn fast_and_immediate_restarts_under_load_with_exactly_once_resend_nothing() {
    restarts_under_load(true);
}

/// Three fast and three immediate PostgreSQL restarts under load; with `eos`, in
/// exactly-once mode (whose acks are not audited: a record acked in a transaction
/// that was then aborted is rightly never read back).
fn restarts_under_load(eos: bool) {
    let cluster = PgCluster::start(ClusterOptions::default());
    let db = cluster.fresh_db();
    let mut monitor = Monitor::new(&db);
    let in_flight = MAX_IN_FLIGHT.to_string();
    let mut args = vec!["--max-in-flight".to_owned(), in_flight];
    let (broker, relay) = if eos {
        let broker = Broker::shared_kafka().addr();
        args.extend(crate::exactly_once::eos_args(&db, &[]));
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let relay = support::workload::start_run(&db, &broker, &args);
        (broker, relay)
    } else {
        let broker = Broker::shared().addr();
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let relay = support::workload::start_run_audited(&db, &broker, &args);
        (broker, relay)
    };
    let writer = Writer::spawn(WriterConfig {
        url: db.url(),
        seed: 11,
        types: TYPES.to_vec(),
        keys: 50,
        max_rows: 20,
        rollbacks: true,
        pause: Duration::from_millis(20),
    });
    let mut reader = first_progress(&db, &broker, &relay, &mut monitor);
    let mut rng = Rng::new(11);
    let mut recoveries = Vec::new();
    let modes = [
        "fast",
        "fast",
        "fast",
        "immediate",
        "immediate",
        "immediate",
    ];
    for (round, mode) in modes.iter().enumerate() {
        // Let history accumulate behind the slot's on-disk position.
        reader.settle(Duration::from_millis(rng.range(1500, 4000)));
        let before = monitor.wait_sample().confirmed;
        cluster.stop(mode);
        cluster.start_again();
        recoveries.push(progress_after_restart(
            &mut monitor,
            before,
            (mode, round + 1),
            &relay,
            &cluster,
        ));
    }
    let stderr = relay.stderr();
    let from_file = stderr.matches("resume_from=\"state file\"").count();
    let note =
        format!("restarts=3 fast + 3 immediate, sessions resumed from the state file: {from_file}");
    let scenario = if eos {
        "postgres restarts, exactly-once"
    } else {
        "postgres restarts"
    };
    let verdict = conclude(
        scenario,
        writer,
        &mut reader,
        &relay,
        &[],
        &mut monitor,
        &mut recoveries,
        &note,
    );
    if eos {
        assert_eq!(
            verdict.duplicated_total,
            0,
            "{scenario}: a read_committed reader saw events twice: {verdict:?}\n{}",
            log_tail(&relay)
        );
        return;
    }
    // Each restart ends one session; it can leave at most the records it had
    // handed to the producer and not yet confirmed. Twice the cap: records acked
    // behind an earlier unacked one are held back too.
    let bound = modes.len() * 2 * MAX_IN_FLIGHT;
    assert!(
        verdict.duplicated_total <= bound,
        "{} duplicates of {} events after {} restarts, more than the {bound} that could have been in flight: history was replayed\n{}",
        verdict.duplicated_total,
        verdict.committed,
        modes.len(),
        log_tail(&relay)
    );
}

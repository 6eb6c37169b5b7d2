//! Slot safety end to end: a slot that moved behind the relay's back (advanced,
//! dropped, re-created, invalidated, its publication dropped, another cluster) stops
//! `pgoutbox run` with a non-zero exit and a message naming the slot, the positions
//! and the fix; `--accept-slot-reset` goes past it once; normal restarts, `kill -9`
//! and standby takeovers never raise a false alarm, and a crash never leaves the
//! slot ahead of the state file.
//!
//! Real PostgreSQL (the shared cluster, plus one private cluster with a tiny
//! `max_slot_wal_keep_size`) and the tansu broker.

use crate::support;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use pgoutbox::pg::lsn::Lsn;
use support::kafka::{Broker, Reader};
use support::verify::{verify, Ledger};
use support::{temp_dir, wait_for, ClusterOptions, PgCluster, Pgoutbox, Rng, TestDb, WAIT};

/// A private cluster whose slots lose their WAL after 1 MB of lag (case c), also
/// used as "another cluster" (case e).
fn small_wal_cluster() -> &'static PgCluster {
    static CLUSTER: OnceLock<PgCluster> = OnceLock::new();
    CLUSTER.get_or_init(|| {
        PgCluster::start(ClusterOptions {
            conf: vec![
                "max_slot_wal_keep_size = '1MB'".into(),
                "min_wal_size = '32MB'".into(),
                "max_wal_size = '32MB'".into(),
                "wal_keep_size = 0".into(),
                "checkpoint_timeout = '1h'".into(),
            ],
            ..ClusterOptions::default()
        })
    })
}

/// `run` arguments for `db` (slot and topic prefix named after the database),
/// keeping the state file in `state`.
fn run_args(db: &TestDb<'_>, broker: &str, state: &Path, extra: &[&str]) -> Vec<String> {
    let state = state.display().to_string();
    let mut with_state = vec!["--state-dir", &state];
    with_state.extend_from_slice(extra);
    support::workload::run_args(db, broker, &with_state)
}

/// Every relay of these tests logs its acks ([`support::verify::ACK_LOG`]): a lost
/// event is then told apart — acked by the broker, or never delivered.
pub(crate) fn spawn(db: &TestDb<'_>, broker: &str, state: &Path, extra: &[&str]) -> Pgoutbox {
    Pgoutbox::spawn_with_env(
        &run_args(db, broker, state, extra),
        &[support::verify::ACK_LOG],
    )
}

/// Start `run` and wait until it streams (failing with its stderr if it exits).
pub(crate) fn start(db: &TestDb<'_>, broker: &str, state: &Path, extra: &[&str]) -> Pgoutbox {
    let mut relay = spawn(db, broker, state, extra);
    wait_for("run to start relaying", WAIT, || {
        if relay.stderr().contains("relaying outbox to kafka") {
            return Some(());
        }
        if let Ok(Some(status)) = relay.child.try_wait() {
            panic!(
                "run exited ({status}) instead of relaying:\n{}",
                relay.stderr()
            );
        }
        None
    });
    relay
}

/// Start `run`, expect it to fail: non-zero exit, nothing relayed. Returns stderr.
pub(crate) fn start_failing(db: &TestDb<'_>, broker: &str, state: &Path, extra: &[&str]) -> String {
    let mut relay = spawn(db, broker, state, extra);
    let status = relay.wait_exit(WAIT);
    let stderr = relay.stderr();
    assert_eq!(
        status.code(),
        Some(i32::from(pgoutbox::exit::Status::SlotSafety.code())),
        "run must refuse the slot with the slot-safety status:\n{stderr}"
    );
    assert!(
        !stderr.contains("relaying outbox to kafka"),
        "run must not start relaying:\n{stderr}"
    );
    stderr
}

/// SIGTERM and a clean exit.
pub(crate) fn stop(mut relay: Pgoutbox) {
    relay.signal("TERM");
    let status = relay.wait_exit(WAIT);
    assert!(status.success(), "{status:?}\n{}", relay.stderr());
}

pub(crate) fn state_file(state: &Path, db: &TestDb<'_>) -> PathBuf {
    state.join(format!("{}.{}.state", db.name, db.name))
}

fn parse_lsn(text: &str) -> Lsn {
    text.trim()
        .parse()
        .unwrap_or_else(|e| panic!("from psql or the state file: {e}"))
}

/// The LSN in the state file (`None` without a file).
fn state_lsn(state: &Path, db: &TestDb<'_>) -> Option<Lsn> {
    let text = std::fs::read_to_string(state_file(state, db)).ok()?;
    let line = text
        .lines()
        .find_map(|l| l.strip_prefix("confirmed_lsn = "))
        .expect("confirmed_lsn in the state file");
    // `"00000017/00000000" # check 1a2b3c4d`, or `"17/0"` in a file edited by hand.
    Some(parse_lsn(line.split('"').nth(1).expect("a quoted LSN")))
}

/// `(confirmed_flush_lsn, active)` of the test's slot, `None` when it does not exist.
pub(crate) fn slot(db: &TestDb<'_>) -> Option<(Lsn, bool)> {
    let row = db.psql(&format!(
        "SELECT coalesce(confirmed_flush_lsn::text, '0/0') || ' ' || active \
         FROM pg_replication_slots WHERE slot_name = '{}'",
        db.name
    ));
    let (lsn, active) = row.split_once(' ')?;
    Some((parse_lsn(lsn), active == "t"))
}

/// Insert `n` events of aggregate type `kind` in one transaction; returns the ledger
/// entries (id, key) in commit order.
pub(crate) fn insert(db: &TestDb<'_>, kind: &str, n: usize) -> Vec<(String, String)> {
    let out = db.psql(&format!(
        "INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload) \
         SELECT '{kind}', 'k' || (g % 3), 'E', jsonb_build_object('n', g) \
         FROM generate_series(1, {n}) g RETURNING id::text || ' ' || aggregate_id"
    ));
    out.lines()
        .map(|l| {
            let (id, key) = l.split_once(' ').unwrap();
            (id.to_owned(), key.to_owned())
        })
        .collect()
}

pub(crate) fn topic(db: &TestDb<'_>, kind: &str) -> String {
    format!("{}.{kind}", db.name)
}

/// Wait until every id of `events` is in topic `kind`; returns the reader.
pub(crate) fn read_all(
    broker: &str,
    db: &TestDb<'_>,
    kind: &str,
    events: &[(String, String)],
) -> Reader {
    let mut reader = Reader::new(broker, &[topic(db, kind)]);
    reader.read_until(&format!("{} events of {kind}", events.len()), WAIT, |r| {
        events.iter().all(|(id, _)| r.iter().any(|c| &c.id() == id))
    });
    reader
}

/// Wait until the slot is released and has caught up with the state file's LSN
/// after a clean stop, and return both.
fn settled(db: &TestDb<'_>, state: &Path) -> (Lsn, Lsn) {
    wait_for("the slot to be released", WAIT, || {
        slot(db).filter(|(_, active)| !active).map(|_| ())
    });
    let (slot_lsn, _) = slot(db).unwrap();
    let file = state_lsn(state, db).expect("a state file");
    assert!(
        slot_lsn <= file,
        "slot {} ahead of the state file {}",
        slot_lsn,
        file
    );
    (slot_lsn, file)
}

fn assert_mentions(stderr: &str, needles: &[&str]) {
    for needle in needles {
        assert!(
            stderr.contains(needle),
            "stderr lacks {needle:?}:\n{stderr}"
        );
    }
}

// --------------------------------------------------------------------------------
// a. slot advanced, or dropped and re-created
// --------------------------------------------------------------------------------

#[test]
fn advanced_slot_is_fatal_and_accept_slot_reset_skips_the_range_once() {
    let db = PgCluster::shared().fresh_db();
    let broker = Broker::shared().addr();
    let state = temp_dir("state");
    let relay = start(&db, &broker, &state, &[]);
    assert_mentions(&relay.stderr(), &["no state file yet: adopting"]);
    let before = insert(&db, "order", 5);
    read_all(&broker, &db, "order", &before);
    stop(relay);
    let (_, persisted) = settled(&db, &state);

    insert(&db, "order", 3); // committed while the relay is down …
    let advanced = parse_lsn(&db.psql(&format!(
        "SELECT end_lsn FROM pg_replication_slot_advance('{}', pg_current_wal_lsn())",
        db.name
    )));
    assert!(advanced > persisted);

    // … and skipped by the advance: the relay refuses to go on.
    let stderr = start_failing(&db, &broker, &state, &[]);
    assert_mentions(
        &stderr,
        &[
            &format!("replication slot \"{}\"", db.name),
            &advanced.to_string(),
            &persisted.to_string(),
            "pg_replication_slot_advance",
            "--accept-slot-reset",
            "re-publish",
            &state_file(&state, &db).display().to_string(),
        ],
    );
    assert_eq!(slot(&db).unwrap().0, advanced, "the slot was not touched");
    assert_eq!(
        state_lsn(&state, &db),
        Some(persisted),
        "nor the state file"
    );

    // Accepted deliberately: the exact range is logged, relaying goes on.
    let relay = start(&db, &broker, &state, &["--accept-slot-reset"]);
    assert_mentions(
        &relay.stderr(),
        &[&format!(
            "skipping the WAL from {} to {}",
            persisted, advanced
        )],
    );
    let after = insert(&db, "after", 2);
    read_all(&broker, &db, "after", &after);
    stop(relay);
    let (_, rewritten) = settled(&db, &state);
    assert!(rewritten >= advanced);

    // The flag applied once: the next start is a normal one, without it.
    let relay = start(&db, &broker, &state, &[]);
    let stderr = relay.stderr();
    assert!(!stderr.contains("accept"), "{stderr}");
    let later = insert(&db, "later", 1);
    read_all(&broker, &db, "later", &later);
    stop(relay);
}

#[test]
fn recreated_slot_is_fatal_and_the_documented_republish_recovers_every_event() {
    let db = PgCluster::shared().fresh_db();
    let broker = Broker::shared().addr();
    let state = temp_dir("state");
    let relay = start(&db, &broker, &state, &[]);
    let mut ledger = Ledger::default();
    let before = insert(&db, "order", 4);
    read_all(&broker, &db, "order", &before);
    ledger.committed.extend(before);
    stop(relay);
    let (_, persisted) = settled(&db, &state);
    let mark = db.psql("SELECT clock_timestamp()");

    let gap = insert(&db, "order", 6);
    ledger.committed.extend(gap.iter().cloned());
    db.psql(&format!(
        "SELECT pg_drop_replication_slot('{0}'); \
         SELECT pg_create_logical_replication_slot('{0}', 'pgoutput')",
        db.name
    ));
    let recreated = slot(&db).unwrap().0;

    let stderr = start_failing(&db, &broker, &state, &[]);
    assert_mentions(
        &stderr,
        &[
            &format!("replication slot \"{}\"", db.name),
            &recreated.to_string(),
            &persisted.to_string(),
            "dropped and re-created",
            "--accept-slot-reset",
        ],
    );

    // The README's recovery: re-insert the rows of the range with their ids, then
    // accept the reset once. Nothing is lost.
    db.psql(&format!(
        "WITH r AS (DELETE FROM outbox WHERE created_at >= '{mark}' RETURNING *) \
         INSERT INTO outbox SELECT * FROM r"
    ));
    let relay = start(&db, &broker, &state, &["--accept-slot-reset"]);
    let mut reader = read_all(&broker, &db, "order", &ledger.committed);
    reader.settle(Duration::from_secs(1));
    let verdict = verify(&ledger, &reader.records);
    eprintln!("re-created slot, re-published: {verdict:?}");
    verdict.assert_no_loss();
    stop(relay);
}

/// Regression (issue 13 item 12): `teardown --yes` left the state file, so the next
/// `run` refused ("slot does not exist, but this relay confirmed up to …"). A
/// deliberate teardown clears the state: run, teardown, run again works.
#[test]
fn run_after_teardown_starts_afresh() {
    let db = PgCluster::shared().fresh_db();
    let broker = Broker::shared().addr();
    let state = temp_dir("state");
    let relay = start(&db, &broker, &state, &[]);
    let first = insert(&db, "order", 2);
    read_all(&broker, &db, "order", &first);
    stop(relay);
    let file = state_file(&state, &db);
    assert!(file.exists(), "run keeps a state file");

    let state_arg = state.display().to_string();
    let mut teardown = Pgoutbox::spawn(&[
        "teardown",
        "--database-url",
        &db.url(),
        "--slot",
        &db.name,
        "--state-dir",
        &state_arg,
        "--yes",
    ]);
    let status = teardown.wait_exit(WAIT);
    let out = teardown.stdout_so_far().join("\n");
    assert!(status.success(), "{out}\n{}", teardown.stderr());
    assert!(
        out.contains(&format!(
            "state file {}: removed (the next run starts afresh)",
            file.display()
        )),
        "{out}"
    );
    assert!(!file.exists());
    assert_eq!(slot(&db), None);

    let relay = start(&db, &broker, &state, &[]);
    assert_mentions(&relay.stderr(), &["no state file yet: adopting"]);
    let after = insert(&db, "after", 2);
    read_all(&broker, &db, "after", &after);
    stop(relay);
}

// --------------------------------------------------------------------------------
// b. slot missing while a state file exists
// --------------------------------------------------------------------------------

#[test]
fn missing_slot_is_not_recreated_silently() {
    let db = PgCluster::shared().fresh_db();
    let broker = Broker::shared().addr();
    let state = temp_dir("state");
    let relay = start(&db, &broker, &state, &[]);
    let first = insert(&db, "order", 2);
    read_all(&broker, &db, "order", &first);
    stop(relay);
    let (_, persisted) = settled(&db, &state);
    db.psql(&format!("SELECT pg_drop_replication_slot('{}')", db.name));

    let stderr = start_failing(&db, &broker, &state, &[]);
    assert_mentions(
        &stderr,
        &[
            &format!("replication slot \"{}\" does not exist", db.name),
            &persisted.to_string(),
            "--accept-slot-reset",
            "re-publish",
        ],
    );
    assert_eq!(slot(&db), None, "no slot was created");

    let relay = start(&db, &broker, &state, &["--accept-slot-reset"]);
    assert_mentions(
        &relay.stderr(),
        &["created replication slot", "skipping the WAL from"],
    );
    let after = insert(&db, "after", 2);
    read_all(&broker, &db, "after", &after);
    stop(relay);
}

// --------------------------------------------------------------------------------
// c. slot invalidated (wal_status = lost)
// --------------------------------------------------------------------------------

/// Write WAL and checkpoint until the slot of `db` reports `wal_status = lost`.
fn lose_slot(db: &TestDb<'_>) {
    db.psql("CREATE TABLE IF NOT EXISTS ballast (b text)");
    let mut rounds = 0;
    wait_for(
        "the slot to be invalidated (wal_status = lost)",
        WAIT * 3,
        || {
            rounds += 1;
            db.psql(
                "INSERT INTO ballast SELECT repeat('x', 1000) FROM generate_series(1, 3000); \
             SELECT pg_switch_wal(); CHECKPOINT;",
            );
            let status = db.psql(&format!(
                "SELECT wal_status FROM pg_replication_slots WHERE slot_name = '{}'",
                db.name
            ));
            (status == "lost").then_some(())
        },
    );
    eprintln!("slot lost after {rounds} rounds of WAL + CHECKPOINT");
}

#[test]
fn lost_slot_is_fatal_even_with_accept_and_recovers_after_a_drop() {
    let cluster = small_wal_cluster();
    let db = cluster.fresh_db();
    let broker = Broker::shared().addr();
    let state = temp_dir("state");
    let relay = start(&db, &broker, &state, &[]);
    let first = insert(&db, "order", 2);
    read_all(&broker, &db, "order", &first);
    stop(relay);
    settled(&db, &state);
    lose_slot(&db);

    let needles = [
        format!("replication slot \"{}\"", db.name),
        "wal_status = lost".to_owned(),
        "max_slot_wal_keep_size".to_owned(),
        format!("pg_drop_replication_slot('{}')", db.name),
        "--accept-slot-reset".to_owned(),
    ];
    let needles: Vec<&str> = needles.iter().map(String::as_str).collect();
    let stderr = start_failing(&db, &broker, &state, &[]);
    assert_mentions(&stderr, &needles);
    // A lost slot cannot be accepted: it has to be dropped first.
    let stderr = start_failing(&db, &broker, &state, &["--accept-slot-reset"]);
    assert_mentions(&stderr, &needles);

    db.psql(&format!("SELECT pg_drop_replication_slot('{}')", db.name));
    let relay = start(&db, &broker, &state, &["--accept-slot-reset"]);
    let after = insert(&db, "after", 2);
    read_all(&broker, &db, "after", &after);
    stop(relay);
}

#[test]
fn slot_lost_while_the_broker_is_down_stops_the_running_relay() {
    let cluster = small_wal_cluster();
    let db = cluster.fresh_db();
    let broker = Broker::start();
    let state = temp_dir("state");
    let mut relay = start(&db, &broker.addr(), &state, &[]);
    let first = insert(&db, "order", 2);
    read_all(&broker.addr(), &db, "order", &first);
    // Kafka gone: the relay cannot confirm the next event, the slot falls behind.
    broker.stop();
    insert(&db, "order", 1);
    lose_slot(&db);
    let status = relay.wait_exit(WAIT * 2);
    let stderr = relay.stderr();
    assert!(!status.success(), "{stderr}");
    assert_mentions(
        &stderr,
        &[
            &format!("replication slot \"{}\"", db.name),
            "invalidated",
            "max_slot_wal_keep_size",
            "--accept-slot-reset",
        ],
    );
    broker.resume();
}

// --------------------------------------------------------------------------------
// d. publication missing
// --------------------------------------------------------------------------------

#[test]
fn missing_publication_is_fatal_at_start_and_not_recreated() {
    let db = PgCluster::shared().fresh_db();
    let broker = Broker::shared().addr();
    let state = temp_dir("state");
    let relay = start(&db, &broker, &state, &[]);
    let first = insert(&db, "order", 2);
    read_all(&broker, &db, "order", &first);
    stop(relay);
    let (_, persisted) = settled(&db, &state);
    db.psql("DROP PUBLICATION pgoutbox");

    let stderr = start_failing(&db, &broker, &state, &[]);
    assert_mentions(
        &stderr,
        &[
            "publication \"pgoutbox\" does not exist",
            &format!("slot \"{}\"", db.name),
            &persisted.to_string(),
            &format!("pg_drop_replication_slot('{}')", db.name),
            "--accept-slot-reset",
        ],
    );
    assert_eq!(
        db.psql("SELECT count(*) FROM pg_publication WHERE pubname = 'pgoutbox'"),
        "0",
        "the publication was not re-created"
    );
}

#[test]
fn publication_dropped_mid_stream_is_a_definite_error_not_a_reconnect_loop() {
    let db = PgCluster::shared().fresh_db();
    let broker = Broker::shared().addr();
    let state = temp_dir("state");
    let mut relay = start(&db, &broker, &state, &[]);
    let first = insert(&db, "order", 2);
    read_all(&broker, &db, "order", &first);
    db.psql("DROP PUBLICATION pgoutbox");
    insert(&db, "order", 1);
    let status = relay.wait_exit(WAIT);
    let stderr = relay.stderr();
    assert!(!status.success(), "{stderr}");
    assert_mentions(
        &stderr,
        &[
            &format!("cannot decode replication slot \"{}\"", db.name),
            "publication \"pgoutbox\"",
            "pgoutbox setup --print-sql",
            &format!("pg_drop_replication_slot('{}')", db.name),
            "--accept-slot-reset",
        ],
    );
    assert!(
        !stderr.contains("resuming from the slot"),
        "no reconnect attempt:\n{stderr}"
    );
}

// --------------------------------------------------------------------------------
// e. another cluster (system identifier changed)
// --------------------------------------------------------------------------------

fn system_id(cluster: &PgCluster) -> String {
    cluster.psql(
        "postgres",
        "SELECT system_identifier FROM pg_control_system()",
    )
}

/// A database named `e_<pid>` with the outbox table on `cluster` (fresh_db names
/// repeat across clusters, so this test names its own).
fn same_db_on<'a>(cluster: &'a PgCluster, name: &str) -> TestDb<'a> {
    cluster.psql("postgres", &format!("CREATE DATABASE {name}"));
    let db = TestDb {
        cluster,
        name: name.to_owned(),
    };
    db.psql(
        &std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/sql/outbox.sql")).unwrap(),
    );
    db
}

#[test]
fn another_cluster_behind_the_same_url_is_detected() {
    let original = PgCluster::shared();
    let name = format!("e_{}", std::process::id());
    let db = same_db_on(original, &name);
    let broker = Broker::shared().addr();
    let state = temp_dir("state");
    let relay = start(&db, &broker, &state, &[]);
    let first = insert(&db, "order", 2);
    read_all(&broker, &db, "order", &first);
    stop(relay);
    let (_, persisted) = settled(&db, &state);

    // The same database name on another cluster (a restored backup, a new server).
    let other = small_wal_cluster();
    let moved = same_db_on(other, &name);
    let stderr = start_failing(&moved, &broker, &state, &[]);
    assert_mentions(
        &stderr,
        &[
            &format!("system identifier is {}", system_id(other)),
            &format!("on system {}", system_id(original)),
            &format!("slot \"{}\"", db.name),
            &persisted.to_string(),
            "--accept-slot-reset",
        ],
    );
    assert_eq!(
        slot(&moved),
        None,
        "nothing was created on the other cluster"
    );

    let relay = start(&moved, &broker, &state, &["--accept-slot-reset"]);
    assert_mentions(&relay.stderr(), &["relaying from another cluster"]);
    let after = insert(&moved, "after", 2);
    read_all(&broker, &moved, "after", &after);
    stop(relay);
    let text = std::fs::read_to_string(state_file(&state, &db)).unwrap();
    assert!(text.contains(&system_id(other)), "{text}");
}

// --------------------------------------------------------------------------------
// no false alarms
// --------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_never_leaves_the_slot_ahead_of_the_state_file() {
    const CYCLES: usize = 8;
    let db = PgCluster::shared().fresh_db();
    let broker = Broker::shared().addr();
    let state = temp_dir("state");
    // The slot exists before the first event (the first run adopts it).
    let mut setup = Pgoutbox::spawn(&["setup", "--database-url", &db.url(), "--slot", &db.name]);
    assert!(setup.wait_exit(WAIT).success(), "{}", setup.stderr());
    let ledger = Arc::new(Mutex::new(Ledger::default()));
    let stop_writer = Arc::new(AtomicBool::new(false));
    let writer = {
        let (ledger, stop_writer, url) = (ledger.clone(), stop_writer.clone(), db.url());
        tokio::spawn(async move {
            let (client, conn) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
                .await
                .unwrap();
            tokio::spawn(conn);
            let mut rng = Rng::new(42);
            while !stop_writer.load(Ordering::Relaxed) {
                let rows = rng.range(1, 10);
                let out = client
                    .query(
                        &format!(
                            "INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload) \
                             SELECT 'order', 'k' || (g % 7), 'E', jsonb_build_object('n', g) \
                             FROM generate_series(1, {rows}) g RETURNING id::text, aggregate_id"
                        ),
                        &[],
                    )
                    .await
                    .unwrap();
                {
                    let mut ledger = ledger.lock().unwrap();
                    for row in out {
                        ledger.push(row.get(0), row.get(1));
                    }
                }
                tokio::time::sleep(Duration::from_millis(rng.range(5, 25))).await;
            }
        })
    };
    let mut rng = Rng::new(7);
    let mut max_gap = 0u64;
    let mut acks = Vec::new();
    for cycle in 0..CYCLES {
        let mut relay = start(&db, &broker, &state, &[]);
        if cycle == 0 {
            assert_mentions(&relay.stderr(), &["no state file yet: adopting"]);
        }
        // Kill at a random point: right away, mid-batch, or after a few status updates.
        let delay = rng.range(0, 1500);
        std::thread::sleep(Duration::from_millis(delay));
        relay.signal("KILL");
        relay.wait_exit(WAIT);
        let stderr = relay.stderr();
        acks.extend(support::verify::acks_in(&stderr));
        assert!(!stderr.contains("ahead of"), "false alarm:\n{stderr}");
        // The server may hold the dead relay's walsender for a moment; once it is
        // gone the slot is final.
        wait_for("the slot to be released", WAIT, || {
            slot(&db).filter(|(_, active)| !active).map(|_| ())
        });
        let (slot_lsn, _) = slot(&db).unwrap();
        let file = state_lsn(&state, &db).expect("a state file");
        eprintln!(
            "cycle {cycle}: killed after {delay} ms, slot {} ≤ state {}",
            slot_lsn, file
        );
        assert!(
            slot_lsn <= file,
            "cycle {cycle}: the slot {} is ahead of the state file {} after kill -9",
            slot_lsn,
            file
        );
        max_gap = max_gap.max(file.bytes_since(slot_lsn));
    }
    // A last, clean run delivers everything.
    let relay = start(&db, &broker, &state, &[]);
    stop_writer.store(true, Ordering::Relaxed);
    writer.await.unwrap();
    let ledger = ledger.lock().unwrap().clone();
    let mut reader = Reader::new(&broker, &[topic(&db, "order")]);
    let complete = reader.try_read_until(WAIT * 3, |r| {
        let got: std::collections::HashSet<String> = r.iter().map(|c| c.id()).collect();
        ledger.committed.iter().all(|(id, _)| got.contains(id))
    });
    let verdict = verify(&ledger, &reader.records);
    acks.extend(support::verify::acks_in(&relay.stderr()));
    assert!(
        complete,
        "not every event arrived: {verdict:?}\n{}",
        support::verify::explain_lost(&ledger, &reader.records, &acks, 10)
    );
    let audit = support::verify::audit_acks(&acks, &reader.records);
    eprintln!(
        "{CYCLES} kill -9 cycles: {verdict:?}; largest state-file lead over the slot {max_gap} bytes; acks audited {}",
        audit.acked
    );
    audit.assert_clean();
    verdict.assert_no_loss();
    stop(relay);
}

#[test]
fn standby_with_its_own_state_dir_takes_over_without_a_false_alarm() {
    let db = PgCluster::shared().fresh_db();
    let broker = Broker::shared().addr();
    let (state_a, state_b) = (temp_dir("state-a"), temp_dir("state-b"));
    // B ran once and knows an old position.
    let relay_b = start(&db, &broker, &state_b, &[]);
    stop(relay_b);
    // A (another host: its own state) runs and moves the slot on.
    let relay_a = start(&db, &broker, &state_a, &[]);
    let first = insert(&db, "order", 3);
    read_all(&broker, &db, "order", &first);
    let moved = wait_for("the slot to pass B's position", WAIT, || {
        let (lsn, _) = slot(&db)?;
        (lsn > state_lsn(&state_b, &db)?).then_some(lsn)
    });
    // B stands by while A holds the slot, then takes over.
    let relay_b = spawn(&db, &broker, &state_b, &[]);
    relay_b.wait_stderr("standing by", WAIT);
    let mut relay_a = relay_a;
    relay_a.signal("KILL");
    relay_a.wait_exit(WAIT);
    relay_b.wait_stderr("relaying outbox to kafka", WAIT);
    assert_mentions(&relay_b.stderr(), &["while another process held it"]);
    assert!(state_lsn(&state_b, &db).unwrap() >= moved);
    let after = insert(&db, "after", 2);
    read_all(&broker, &db, "after", &after);
    stop(relay_b);
}

#[test]
fn state_dir_off_warns_and_cannot_detect_a_reset() {
    let db = PgCluster::shared().fresh_db();
    let broker = Broker::shared().addr();
    let off = Path::new("off");
    let relay = start(&db, &broker, off, &[]);
    assert_mentions(
        &relay.stderr(),
        &["--state-dir off", "will not be detected"],
    );
    stop(relay);
    assert!(!off.exists(), "no directory named off");
    db.psql(&format!(
        "SELECT pg_replication_slot_advance('{}', pg_current_wal_lsn())",
        db.name
    ));
    // Documented trade-off: without a state file the advance goes unnoticed.
    let relay = start(&db, &broker, off, &[]);
    stop(relay);
}

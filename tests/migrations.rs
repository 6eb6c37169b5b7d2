//! Migrations while the relay runs (issue 28): a DDL that stops outbox rows from
//! being decoded — the table dropped from the publication, re-created or swapped by
//! a rename, inserts switched off (and back on), a row filter, any of them undone
//! before anyone looks, or made while the relay was stopped — stops `pgoutbox run`
//! with the slot-safety status and a message naming the publication, the table, the
//! change, the window and the fix; the slot is never confirmed past the first row
//! written after the change; the printed `replay` delivers the rows of the window,
//! and `--accept-publication-change` resumes once the publication is fixed.
//!
//! How each test fails without the watch: the relay keeps running (no exit within
//! the wait), or confirms the slot past the lost rows (the slot assertion).
//!
//! Real PostgreSQL (the shared cluster) and the test broker.

use crate::slot_safety::{insert, read_all, slot, spawn, start, stop};
use crate::support;

use std::path::{Path, PathBuf};
use std::time::Instant;

use pgoutbox::pg::lsn::Lsn;
use support::kafka::Broker;
use support::{temp_dir, wait_for, PgCluster, Pgoutbox, TestDb, WAIT};

/// A reading is asked for at every confirm; heartbeats make one every second even
/// when nothing else is decoded (the lost rows are not).
const FAST: &[&str] = &["--heartbeat-interval", "1s"];

fn wal(db: &TestDb<'_>) -> Lsn {
    db.psql("SELECT pg_current_wal_lsn()")
        .parse()
        .expect("an LSN from psql")
}

/// Wait until the slot is confirmed at `lsn` or past it: the watch vouched for it.
fn slot_reaches(db: &TestDb<'_>, lsn: Lsn) {
    wait_for(
        &format!("the slot to be confirmed past {lsn}"),
        WAIT,
        || slot(db).filter(|(at, _)| *at >= lsn).map(|_| ()),
    );
}

/// Events delivered and the slot confirmed past them: the relay streams and its
/// watch vouches.
fn delivered(db: &TestDb<'_>, broker: &str, kind: &str, n: usize) {
    let events = insert(db, kind, n);
    read_all(broker, db, kind, &events);
    slot_reaches(db, wal(db));
}

/// Wait for the relay to stop on the change; returns its stderr and how long the
/// stop took from `since`.
fn stops(relay: &mut Pgoutbox, since: Instant, needles: &[&str]) -> (String, f64) {
    let status = relay.wait_exit(WAIT);
    let took = since.elapsed().as_secs_f64();
    let stderr = relay.stderr();
    assert_eq!(
        status.code(),
        Some(i32::from(pgoutbox::exit::Status::SlotSafety.code())),
        "the relay must stop with the slot-safety status:\n{stderr}"
    );
    for needle in [
        "the publication stopped covering the outbox",
        "\"pgoutbox\"",
        "\"public\".\"outbox\"",
        "pgoutbox replay --from '",
        "--accept-publication-change",
    ]
    .iter()
    .chain(needles)
    {
        assert!(
            stderr.contains(needle),
            "stderr lacks {needle:?}:\n{stderr}"
        );
    }
    eprintln!("detected in {took:.2}s");
    (stderr, took)
}

/// The slot was not confirmed past `gap`, the WAL position before the first row
/// that was not decoded.
fn not_confirmed_past(db: &TestDb<'_>, gap: Lsn) {
    wait_for("the slot to be released", WAIT, || {
        slot(db).filter(|(_, active)| !active).map(|_| ())
    });
    let (at, _) = slot(db).expect("the slot");
    assert!(
        at <= gap,
        "the slot was confirmed to {at}, past {gap}, where rows stopped being decoded"
    );
}

/// The `--from`/`--to` of the printed replay command.
fn window(stderr: &str) -> (String, String) {
    let after = |marker: &str| {
        let start = stderr.find(marker).expect(marker) + marker.len();
        let end = stderr[start..].find('\'').expect("closing quote");
        stderr[start..start + end].to_owned()
    };
    (after("replay --from '"), after("--to '"))
}

/// Run the printed replay for `db` and wait for it to finish cleanly.
fn replay(db: &TestDb<'_>, broker: &str, from: &str, to: &str) {
    let done = crate::replay::replay(db, &["--brokers", broker, "--from", from, "--to", to]);
    assert!(done.status.success(), "replay failed:\n{}", done.stderr);
}

/// A relay streaming `db` that delivered a first pair of events.
struct Streaming {
    db: TestDb<'static>,
    broker: String,
    state: PathBuf,
    relay: Pgoutbox,
}

impl Streaming {
    fn start() -> Self {
        Self::start_with(&[])
    }

    /// [`Streaming::start`] with `extra` arguments for the relay.
    fn start_with(extra: &[&str]) -> Self {
        let db = PgCluster::shared().fresh_db();
        let broker = Broker::shared().addr();
        let state = temp_dir("state");
        let args: Vec<&str> = FAST.iter().chain(extra).copied().collect();
        let relay = start(&db, &broker, &state, &args);
        delivered(&db, &broker, "order", 2);
        Self {
            db,
            broker,
            state,
            relay,
        }
    }

    /// Run `ddl`, write rows that are not decoded, run `then`; the relay must stop
    /// on the change (mentioning `needles`) without confirming past those rows.
    /// Returns its stderr and the rows written after the change.
    fn stops_on(
        &mut self,
        ddl: &[&str],
        then: &[&str],
        needles: &[&str],
    ) -> (String, Vec<(String, String)>) {
        for sql in ddl {
            self.db.psql(sql);
        }
        let since = Instant::now();
        let gap = wal(&self.db);
        let lost = insert(&self.db, "order", 3);
        for sql in then {
            self.db.psql(sql);
        }
        let (stderr, _) = stops(&mut self.relay, since, needles);
        not_confirmed_past(&self.db, gap);
        (stderr, lost)
    }
}

fn state_text(state: &Path, db: &TestDb<'_>) -> String {
    std::fs::read_to_string(crate::slot_safety::state_file(state, db)).expect("a state file")
}

#[test]
fn a_table_removed_from_the_publication_stops_the_relay_and_the_printed_fix_recovers_every_row() {
    let mut streaming = Streaming::start();
    assert!(
        state_text(&streaming.state, &streaming.db).contains("[publication.state]"),
        "the baseline is kept in the state file"
    );
    let (stderr, lost) = streaming.stops_on(
        &["ALTER PUBLICATION pgoutbox DROP TABLE outbox"],
        &[],
        &["outbox table \"public\".\"outbox\" was removed from the publication"],
    );
    let Streaming {
        db, broker, state, ..
    } = streaming;

    // The printed fix: the table back in the publication, the window replayed,
    // one start that accepts the change; then rows flow again.
    db.psql("ALTER PUBLICATION pgoutbox ADD TABLE outbox");
    let (from, to) = window(&stderr);
    replay(&db, &broker, &from, &to);
    read_all(&broker, &db, "order", &lost);
    let refused = spawn(&db, &broker, &state, FAST).wait_exit(WAIT);
    assert_eq!(
        refused.code(),
        Some(i32::from(pgoutbox::exit::Status::SlotSafety.code())),
        "without --accept-publication-change a restart stops again"
    );
    let relay = start(
        &db,
        &broker,
        &state,
        &["--heartbeat-interval", "1s", "--accept-publication-change"],
    );
    delivered(&db, &broker, "order", 2);
    stop(relay);
}

/// With `--publication-repair off` (with it on, the relay repairs this case:
/// `repair::`).
#[test]
fn an_outbox_table_swapped_by_a_rename_stops_the_relay() {
    // The usual way to reset or re-partition it: a new table under the old name.
    Streaming::start_with(&["--publication-repair", "off"]).stops_on(
        &["BEGIN; ALTER TABLE outbox RENAME TO outbox_old; \
           CREATE TABLE outbox (LIKE outbox_old INCLUDING ALL); COMMIT"],
        &[],
        &["was re-created (OID ", "and is not published"],
    );
}

#[test]
fn a_dropped_and_recreated_outbox_table_stops_the_relay_even_once_published_again() {
    // Put back into the publication before anyone looks: the rows in between were
    // never decoded, and the new pg_publication_rel row says so. A reading between
    // the DROP and the RENAME finds no table; after, a new one.
    let (stderr, _) = Streaming::start().stops_on(
        &[
            "CREATE TABLE outbox_shape (LIKE outbox INCLUDING ALL)",
            "DROP TABLE outbox",
            "ALTER TABLE outbox_shape RENAME TO outbox",
        ],
        &["ALTER PUBLICATION pgoutbox ADD TABLE outbox"],
        &[],
    );
    assert!(
        stderr.contains("re-created (OID ") || stderr.contains("outbox\" no longer exists"),
        "{stderr}"
    );
}

#[test]
fn inserts_switched_off_and_on_again_stop_the_relay() {
    let (stderr, _) = Streaming::start().stops_on(
        &["ALTER PUBLICATION pgoutbox SET (publish = 'update, delete')"],
        &["ALTER PUBLICATION pgoutbox SET (publish = 'insert')"],
        &[],
    );
    // Whichever reading came first: inserts off, or the publication row rewritten.
    assert!(
        stderr.contains("no longer publishes inserts") || stderr.contains("was altered"),
        "{stderr}"
    );
}

#[test]
fn a_row_filter_that_excludes_outbox_rows_stops_the_relay() {
    let db = PgCluster::shared().fresh_db();
    let version: i32 = db
        .psql("SHOW server_version_num")
        .parse()
        .expect("a version");
    if version < 150_000 {
        // Before 15 the change cannot be made: the server refuses the filter.
        db.psql("CREATE PUBLICATION pgoutbox FOR TABLE outbox");
        let refused = PgCluster::shared().psql_output(
            &db.name,
            "ALTER PUBLICATION pgoutbox SET TABLE outbox WHERE (aggregate_type <> 'order')",
        );
        let stderr = String::from_utf8_lossy(&refused.stderr);
        assert!(
            !refused.status.success() && stderr.contains("syntax error"),
            "PostgreSQL {version} took a row filter: {stderr}"
        );
        return;
    }
    drop(db);
    Streaming::start().stops_on(
        &["ALTER PUBLICATION pgoutbox SET TABLE outbox WHERE (aggregate_type <> 'order')"],
        &[],
        &["with a row filter WHERE (aggregate_type <> 'order'::text) (was none)"],
    );
}

#[test]
fn a_change_made_while_the_relay_was_stopped_stops_the_next_start() {
    let db = PgCluster::shared().fresh_db();
    let broker = Broker::shared().addr();
    let state = temp_dir("state");
    let relay = start(&db, &broker, &state, FAST);
    delivered(&db, &broker, "order", 2);
    stop(relay);

    // Dropped and re-added while nobody streamed: rows in between never decoded.
    db.psql("ALTER PUBLICATION pgoutbox DROP TABLE outbox");
    let gap = wal(&db);
    insert(&db, "order", 2);
    db.psql("ALTER PUBLICATION pgoutbox ADD TABLE outbox");

    let mut relay = spawn(&db, &broker, &state, FAST);
    let (stderr, _) = stops(
        &mut relay,
        Instant::now(),
        &["removed from \"pgoutbox\" and added again (pg_publication_rel row "],
    );
    assert!(
        !stderr.contains("relaying outbox to kafka"),
        "stopped before streaming:\n{stderr}"
    );
    not_confirmed_past(&db, gap);
}

#[test]
fn adding_a_column_and_publishing_updates_too_keep_the_relay_going() {
    let Streaming {
        db, broker, relay, ..
    } = Streaming::start();
    db.psql("ALTER TABLE outbox ADD COLUMN tenant text");
    db.psql("ALTER PUBLICATION pgoutbox SET (publish = 'insert, update')");
    delivered(&db, &broker, "order", 2);
    stop(relay);
}

#[test]
fn a_table_swapped_for_a_partitioned_one_and_published_in_one_transaction_keeps_the_relay_going() {
    let Streaming {
        db,
        broker,
        mut relay,
        ..
    } = Streaming::start();
    // The README's recipe (partitioning the outbox): the new table is published
    // from its creation.
    db.psql(
        "BEGIN; ALTER TABLE outbox RENAME TO outbox_old; \
         CREATE TABLE outbox (LIKE outbox_old INCLUDING DEFAULTS INCLUDING CONSTRAINTS) \
           PARTITION BY RANGE (created_at); \
         CREATE TABLE outbox_all PARTITION OF outbox DEFAULT; \
         ALTER PUBLICATION pgoutbox ADD TABLE outbox; \
         ALTER PUBLICATION pgoutbox DROP TABLE outbox_old; COMMIT",
    );
    delivered(&db, &broker, "order", 3);
    assert!(
        relay.child.try_wait().expect("try_wait").is_none(),
        "the relay keeps running:\n{}",
        relay.stderr()
    );
    relay.wait_stderr("added to \"pgoutbox\" in the same transaction", WAIT);
    stop(relay);
}

#[test]
fn a_publication_re_created_while_the_relay_was_stopped_stops_the_next_start_with_the_slot_fix() {
    let db = PgCluster::shared().fresh_db();
    let broker = Broker::shared().addr();
    let state = temp_dir("state");
    let relay = start(&db, &broker, &state, FAST);
    delivered(&db, &broker, "order", 2);
    stop(relay);
    db.psql("DROP PUBLICATION pgoutbox");
    db.psql("CREATE PUBLICATION pgoutbox FOR TABLE outbox WITH (publish = 'insert')");

    let mut relay = spawn(&db, &broker, &state, FAST);
    let status = relay.wait_exit(WAIT);
    let stderr = relay.stderr();
    assert_eq!(
        status.code(),
        Some(i32::from(pgoutbox::exit::Status::SlotSafety.code())),
        "{stderr}"
    );
    for needle in [
        "publication \"pgoutbox\" was dropped and re-created (OID ",
        "pg_drop_replication_slot",
        "--accept-slot-reset",
    ] {
        assert!(
            stderr.contains(needle),
            "stderr lacks {needle:?}:\n{stderr}"
        );
    }
}

//! Poison rows end to end (`--on-invalid fail|dlq|skip`): every cause under every
//! policy, with real PostgreSQL and the real broker.
//!
//! The outbox table here keeps `payload` as `text` (so invalid JSON can exist) and
//! the key/route columns nullable. Each row is its own transaction, so the slot
//! position tells exactly which rows the relay has passed.

use crate::support;

use std::sync::OnceLock;
use std::time::Duration;

use pgoutbox::pg::lsn::Lsn;
use support::kafka::{Broker, Consumed, Reader};
use support::workload::{confirmed, current_lsn, metrics, wait_confirmed};
use support::{wait_for, ClusterOptions, PgCluster, Pgoutbox, TestDb, WAIT};

const TABLE: &str = "CREATE TABLE poison_outbox (
    id text PRIMARY KEY,
    aggregate_type text,
    aggregate_id text,
    event_type text NOT NULL DEFAULT 'Happened',
    payload text,
    created_at timestamptz NOT NULL DEFAULT now())";

/// One row to insert: id, route value, key, payload (SQL expressions).
struct Row {
    id: &'static str,
    route: &'static str,
    key: &'static str,
    payload: &'static str,
}

const fn row(
    id: &'static str,
    route: &'static str,
    key: &'static str,
    payload: &'static str,
) -> Row {
    Row {
        id,
        route,
        key,
        payload,
    }
}

/// Rows that must be delivered whatever the policy.
const GOOD: &[Row] = &[
    row("good-1", "'order'", "'k1'", "'{\"n\": 1}'"),
    // Valid JSON nested 10,000 deep: no recursion limit may refuse it.
    row(
        "deep-valid",
        "'order'",
        "'k1'",
        "repeat('[', 10000) || repeat(']', 10000)",
    ),
    // A JSON \u0000 escape is legal JSON text and passes byte-identical.
    row("nul-escape", "'order'", "'k2'", "'{\"a\": \"\\u0000\"}'"),
    row("good-2", "'order'", "'k1'", "'{\"n\": 2}'"),
];

/// (row, cause) for each poison row; the renamed-column case comes last (it breaks
/// every later row of the table).
const POISON: &[(Row, &str)] = &[
    (row("null-key", "'order'", "NULL", "'{}'"), "null-key"),
    (row("empty-key", "'order'", "''", "'{}'"), "null-key"),
    (
        row("bad-topic", "'no such/topic'", "'k1'", "'{}'"),
        "invalid-topic",
    ),
    // Without a routing value the topic would be the template's bare prefix
    // (`<db>.`), which no consumer reads: Debezium fails its task on it.
    (row("null-route", "NULL", "'k1'", "'{}'"), "null-route"),
    (row("empty-route", "''", "'k1'", "'{}'"), "null-route"),
    // 10 MB: above pgoutbox's default message.max.bytes (1,048,588, the broker's default).
    (
        row(
            "ten-mb",
            "'order'",
            "'k1'",
            "'\"' || repeat('x', 10 * 1024 * 1024) || '\"'",
        ),
        "too-large",
    ),
    (
        row("not-json", "'order'", "'k1'", "'not json'"),
        "invalid-json",
    ),
    (
        row("deep-unclosed", "'order'", "'k1'", "repeat('[', 10000)"),
        "invalid-json",
    ),
];

fn insert(db: &TestDb<'_>, r: &Row) {
    db.psql(&insert_sql(r));
}

/// Run `insert` in a transaction and return the WAL insert position right after
/// its row (before the commit): a slot confirmed at or past it has passed the row.
fn insert_lsn(db: &TestDb<'_>, insert: &str) -> Lsn {
    let out = db.psql(&format!(
        "BEGIN; {insert}; SELECT pg_current_wal_insert_lsn(); COMMIT;"
    ));
    out.lines()
        .find_map(|l| l.trim().parse().ok())
        .expect("the insert position")
}

/// A cluster of its own, where nothing else writes, for the test that bounds the slot
/// by [`insert_lsn`] of a row whose transaction has not committed yet. That bound is
/// exact only on a quiet server: on the shared one, another test's commit flushes
/// the WAL past the row before its own commit, the walsender reads that far and
/// reports it in a keepalive, and the relay (with nothing in flight) rightly
/// confirms it — PostgreSQL still decodes the transaction, whose commit comes later.
fn quiet_cluster() -> &'static PgCluster {
    static CLUSTER: OnceLock<PgCluster> = OnceLock::new();
    CLUSTER.get_or_init(|| PgCluster::start(ClusterOptions::default()))
}

fn insert_sql(r: &Row) -> String {
    format!(
        "INSERT INTO poison_outbox (id, aggregate_type, aggregate_id, payload) \
         VALUES ('{}', {}, {}, {})",
        r.id, r.route, r.key, r.payload
    )
}

fn renamed_insert_sql(id: &str) -> String {
    format!(
        "INSERT INTO poison_outbox (id, aggregate_type, agg_id, payload) \
         VALUES ('{id}', 'order', 'k1', '{{}}')"
    )
}

fn setup(db: &TestDb<'_>) {
    db.psql(TABLE);
    db.psql("CREATE PUBLICATION pgoutbox FOR TABLE poison_outbox WITH (publish = 'insert')");
    db.psql(&format!(
        "SELECT pg_create_logical_replication_slot('{}', 'pgoutput')",
        db.name
    ));
}

fn start(db: &TestDb<'_>, broker: &Broker, policy: &[&str]) -> Pgoutbox {
    let dlq = format!("{}.dlq", db.name);
    let mut extra = vec!["--table", "public.poison_outbox", "--dlq-topic", &dlq];
    for p in policy {
        extra.extend(["--on-invalid", p]);
    }
    support::workload::start_run(db, &broker.addr(), &extra)
}

fn ids(records: &[Consumed]) -> Vec<String> {
    records.iter().map(Consumed::id).collect()
}

fn counter(metrics: &str, cause: &str, action: &str) -> u64 {
    let prefix = format!("pgoutbox_invalid_rows_total{{cause=\"{cause}\",action=\"{action}\"}} ");
    metrics
        .lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {prefix} in\n{metrics}"))
}

/// Insert every good and poison row (interleaved), then rename the key column and
/// insert one more. Returns the WAL position after the last commit.
fn write_all_rows(db: &TestDb<'_>) -> Lsn {
    for (i, (poison, _)) in POISON.iter().enumerate() {
        if let Some(good) = GOOD.get(i) {
            insert(db, good);
        }
        insert(db, poison);
    }
    for good in GOOD.iter().skip(POISON.len()) {
        insert(db, good);
    }
    db.psql("ALTER TABLE poison_outbox RENAME COLUMN aggregate_id TO agg_id");
    db.psql(&renamed_insert_sql("renamed"));
    current_lsn(db)
}

fn expected_causes() -> Vec<(&'static str, &'static str)> {
    let mut v: Vec<_> = POISON.iter().map(|(r, c)| (r.id, *c)).collect();
    v.push(("renamed", "missing-column"));
    v
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dlq_policy_dead_letters_every_cause_and_delivers_the_rest() {
    let db = PgCluster::shared().fresh_db();
    let broker = Broker::shared();
    setup(&db);
    let relay = start(&db, broker, &["dlq"]);
    let end = write_all_rows(&db);

    let mut main = Reader::new(&broker.addr(), &[format!("{}.order", db.name)]);
    main.read_until("every good row", WAIT, |r| r.len() >= GOOD.len());
    let mut got = ids(&main.records);
    got.sort();
    let mut want: Vec<_> = GOOD.iter().map(|r| r.id.to_owned()).collect();
    want.sort();
    assert_eq!(got, want, "main topic holds exactly the good rows");
    let nul = main
        .records
        .iter()
        .find(|r| r.id() == "nul-escape")
        .unwrap();
    assert_eq!(nul.value.as_deref(), Some(&b"{\"a\": \"\\u0000\"}"[..]));
    let deep = main
        .records
        .iter()
        .find(|r| r.id() == "deep-valid")
        .unwrap();
    assert_eq!(deep.value.as_ref().map(Vec::len), Some(20_000));

    let mut dlq = Reader::new(&broker.addr(), &[format!("{}.dlq", db.name)]);
    let want = expected_causes();
    dlq.read_until("every poison row in the DLQ", WAIT, |r| {
        r.len() >= want.len()
    });
    assert_eq!(dlq.records.len(), want.len(), "{:?}", ids(&dlq.records));
    for (id, cause) in &want {
        let letter = dlq
            .records
            .iter()
            .find(|r| r.id() == *id)
            .unwrap_or_else(|| panic!("{id} not dead-lettered: {:?}", ids(&dlq.records)));
        assert_eq!(
            letter.header("pgoutbox.dlq.cause").as_deref(),
            Some(*cause),
            "{id}"
        );
        assert!(letter.header("pgoutbox.dlq.reason").is_some(), "{id}");
        // A record the broker refused after the fact carries no table/LSN (the
        // delivery report does not know them); librdkafka may refuse it up front.
        if *id != "ten-mb" {
            assert_eq!(
                letter.header("pgoutbox.dlq.table").as_deref(),
                Some("public.poison_outbox"),
                "{id}"
            );
            assert!(letter.header("pgoutbox.dlq.lsn").is_some(), "{id}");
        }
    }
    let letter = |id: &str| dlq.records.iter().find(|r| r.id() == id).unwrap();
    assert_eq!(letter("not-json").value.as_deref(), Some(&b"not json"[..]));
    assert_eq!(
        letter("bad-topic").header("pgoutbox.dlq.topic").as_deref(),
        Some(format!("{}.no such/topic", db.name).as_str())
    );
    assert_eq!(
        letter("null-route").header("pgoutbox.dlq.topic").as_deref(),
        Some(format!("{}.", db.name).as_str()),
        "the topic the row would have gone to"
    );
    assert_eq!(
        letter("ten-mb").value,
        None,
        "a too-large payload is omitted"
    );
    assert!(letter("ten-mb")
        .header("pgoutbox.dlq.payload-omitted")
        .is_some());
    // The renamed-column row is kept whole, as a JSON object of its columns.
    let renamed: serde_json::Value =
        serde_json::from_slice(letter("renamed").value.as_deref().unwrap()).unwrap();
    assert_eq!(renamed["agg_id"], "k1");
    assert_eq!(renamed["id"], "renamed");

    // Dead letters count as delivered: the slot moves past every row.
    wait_confirmed(&db, end, &relay, WAIT);
    let m = metrics(&relay);
    assert_eq!(counter(&m, "null-key", "dlq"), 2);
    assert_eq!(counter(&m, "invalid-topic", "dlq"), 1);
    assert_eq!(counter(&m, "null-route", "dlq"), 2);
    assert_eq!(counter(&m, "too-large", "dlq"), 1);
    assert_eq!(counter(&m, "invalid-json", "dlq"), 2);
    assert_eq!(counter(&m, "missing-column", "dlq"), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn skip_policy_counts_and_moves_on_without_a_dead_letter() {
    let db = PgCluster::shared().fresh_db();
    let broker = Broker::shared();
    setup(&db);
    let relay = start(&db, broker, &["skip"]);
    let end = write_all_rows(&db);
    // One more good row after everything, so "all good rows arrived" also means
    // every poison row before it was passed.
    let mut main = Reader::new(&broker.addr(), &[format!("{}.order", db.name)]);
    main.read_until("every good row", WAIT, |r| r.len() >= GOOD.len());
    wait_confirmed(&db, end, &relay, WAIT);
    let mut got = ids(&main.records);
    got.sort();
    let mut want: Vec<_> = GOOD.iter().map(|r| r.id.to_owned()).collect();
    want.sort();
    assert_eq!(got, want);
    let m = metrics(&relay);
    assert_eq!(counter(&m, "null-key", "skip"), 2);
    assert_eq!(counter(&m, "invalid-topic", "skip"), 1);
    assert_eq!(counter(&m, "null-route", "skip"), 2);
    assert_eq!(counter(&m, "too-large", "skip"), 1);
    assert_eq!(counter(&m, "invalid-json", "skip"), 2);
    assert_eq!(counter(&m, "missing-column", "skip"), 1);
    assert_eq!(counter(&m, "null-key", "dlq"), 0);
    let log = relay.stderr();
    assert_eq!(
        log.matches("poison row: skipping").count(),
        expected_causes().len(),
        "{log}"
    );
    assert!(
        !m.contains(&format!("topic=\"{}.dlq\"", db.name)),
        "nothing may reach the DLQ topic under skip:\n{m}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fail_policy_stops_before_each_cause_without_confirming_past_it() {
    let broker = Broker::shared();
    let mut cases: Vec<(&Row, &str)> = POISON.iter().map(|(r, c)| (r, *c)).collect();
    let renamed = row("renamed", "", "", "");
    cases.push((&renamed, "missing-column"));
    for (poison, cause) in cases {
        let db = quiet_cluster().fresh_db();
        setup(&db);
        // The default policy is fail: no --on-invalid at all.
        let mut relay = start(&db, broker, &[]);
        insert(&db, &GOOD[0]);
        let mut main = Reader::new(&broker.addr(), &[format!("{}.order", db.name)]);
        main.read_until("the row before the poison row", WAIT, |r| !r.is_empty());
        let poison_lsn = if cause == "missing-column" {
            db.psql("ALTER TABLE poison_outbox RENAME COLUMN aggregate_id TO agg_id");
            insert_lsn(&db, &renamed_insert_sql(poison.id))
        } else {
            let at = insert_lsn(&db, &insert_sql(poison));
            insert(&db, &GOOD[3]);
            at
        };
        let status = relay.wait_exit(WAIT);
        let log = relay.stderr();
        assert_eq!(
            status.code(),
            Some(i32::from(pgoutbox::exit::Status::Poison.code())),
            "{cause}: relay must exit with the poison-row status\n{log}"
        );
        assert!(
            log.contains(&format!("poison row ({cause})")) && log.contains(poison.id),
            "{cause}: the error names the cause and the event\n{log}"
        );
        assert!(
            log.contains(&format!("--on-invalid {cause}=dlq")) && log.contains("Fix:"),
            "{cause}: the error offers the fix and the flags\n{log}"
        );
        // Issue 13 item 20: editing the row is no fix (the relay reads the INSERT
        // from the WAL); the text says so instead of asking for it.
        assert!(
            !log.contains("correct the row"),
            "{cause}: no fix asks to edit the row\n{log}"
        );
        if ["null-key", "invalid-topic", "invalid-json"].contains(&cause) {
            assert!(
                log.contains("UPDATE") && log.contains("changes nothing"),
                "{cause}: the error says an UPDATE of the row changes nothing\n{log}"
            );
        }
        let at = confirmed(&db);
        assert!(
            at < poison_lsn,
            "{cause}: slot confirmed {at}, past the poison row (which ends before {poison_lsn})"
        );
        // Nothing after the poison row went out.
        main.settle(Duration::from_secs(1));
        assert_eq!(ids(&main.records), ["good-1"], "{cause}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_utf8_in_a_sql_ascii_database_is_poison_or_passes_as_bytes() {
    let cluster = PgCluster::shared();
    let name = format!("ascii{}", std::process::id());
    cluster.psql(
        "postgres",
        &format!(
            "CREATE DATABASE {name} ENCODING 'SQL_ASCII' LC_COLLATE 'C' LC_CTYPE 'C' TEMPLATE template0"
        ),
    );
    let db = TestDb { cluster, name };
    let broker = Broker::shared();
    setup(&db);
    let relay = start(&db, broker, &["dlq"]);
    // Key with bytes that are not UTF-8: Kafka keys are bytes, so it is delivered as is.
    insert(&db, &row("bin-key", "'order'", "E'k\\xff\\xfe'", "'{}'"));
    // Payload with invalid UTF-8 inside a JSON string: not JSON text.
    insert(
        &db,
        &row("bin-payload", "'order'", "'k'", "E'{\"a\": \"\\xff\"}'"),
    );
    // Routing value with invalid UTF-8: no legal topic.
    insert(&db, &row("bin-route", "E'or\\xffder'", "'k'", "'{}'"));
    let end = current_lsn(&db);
    wait_confirmed(&db, end, &relay, WAIT);
    let mut main = Reader::new(&broker.addr(), &[format!("{}.order", db.name)]);
    main.read_until("the binary-key row", WAIT, |r| !r.is_empty());
    assert_eq!(ids(&main.records), ["bin-key"]);
    assert_eq!(main.records[0].key.as_deref(), Some(&b"k\xff\xfe"[..]));
    let mut dlq = Reader::new(&broker.addr(), &[format!("{}.dlq", db.name)]);
    dlq.read_until("two dead letters", WAIT, |r| r.len() >= 2);
    let cause = |id: &str| {
        dlq.records
            .iter()
            .find(|r| r.id() == id)
            .and_then(|r| r.header("pgoutbox.dlq.cause"))
    };
    assert_eq!(cause("bin-payload").as_deref(), Some("invalid-json"));
    assert_eq!(cause("bin-route").as_deref(), Some("invalid-topic"));
    let payload = dlq
        .records
        .iter()
        .find(|r| r.id() == "bin-payload")
        .unwrap();
    assert_eq!(
        payload.value.as_deref(),
        Some(&b"{\"a\": \"\xff\"}"[..]),
        "bytes unchanged"
    );
    wait_for("slot confirmed past the last row", WAIT, || {
        (confirmed(&db) >= end).then_some(())
    });
    drop(relay);
}

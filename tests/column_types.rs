//! A mapped column's type changed while the relay runs (issue 28, item 4):
//! `ALTER TABLE outbox ALTER COLUMN … TYPE …`. pgoutput sends the table's Relation
//! again with the new type; the relay judges it against the type it first saw
//! (`src/outbox/pinned.rs`): the records keep their shape where the new type's
//! values fit the first type's Connect schema (a jsonb payload made text, a text
//! key made bigint), else the table's rows are poison `type-changed`, which stops
//! the relay before the first of them — and `tail` shows the same.
//!
//! The types are kept in the state file, so a relay restarted after the change
//! stops too, until `--accept-type-change`.
//!
//! How each test fails without the judgement: the records after the change differ
//! from those before it (a schema `int64` key, a payload schema without its
//! `io.debezium.data.Json` name), or the relay goes on past the row.
//!
//! Real PostgreSQL (the shared cluster) and the test broker, with
//! `JsonConverter(schemas.enable=true)` on key and value: the format where a
//! column's type shows most.

use crate::slot_safety::{slot, start, stop, topic};
use crate::support;

use pgoutbox::pg::lsn::Lsn;
use support::kafka::{Broker, Reader};
use support::workload::current_lsn;
use support::{temp_dir, PgCluster, Pgoutbox, TestDb, WAIT};

const SCHEMAS: &[&str] = &[
    "--key-converter",
    "json-schemas",
    "--value-converter",
    "json-schemas",
];

/// One row with key `key` (SQL) and payload `payload` (SQL); its id.
fn insert(db: &TestDb<'_>, key: &str, payload: &str) -> String {
    db.psql(&format!(
        "INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload) \
         VALUES ('order', {key}, 'Placed', {payload}) RETURNING id"
    ))
}

#[test]
fn a_text_payload_and_a_bigint_key_keep_the_records_shape() {
    let db = PgCluster::shared().fresh_db();
    let broker = Broker::shared().addr();
    let state = temp_dir("state");
    let relay = start(&db, &broker, &state, SCHEMAS);
    insert(&db, "'42'", "'{\"n\": 1}'");
    db.psql("ALTER TABLE outbox ALTER COLUMN payload TYPE text");
    insert(&db, "'42'", "'{\"n\": 1}'");
    db.psql("ALTER TABLE outbox ALTER COLUMN aggregate_id TYPE bigint USING aggregate_id::bigint");
    insert(&db, "42", "'{\"n\": 1}'");
    let mut reader = Reader::new(&broker, &[topic(&db, "order")]);
    reader.read_until("three records", WAIT, |r| r.len() >= 3);
    let shape = |i: usize| {
        let r = &reader.records[i];
        (r.key.clone(), r.value.clone())
    };
    let first = shape(0);
    let key = String::from_utf8_lossy(first.0.as_deref().unwrap_or_default()).into_owned();
    assert!(
        key.contains("\"type\":\"string\"") && key.contains("\"payload\":\"42\""),
        "{key}"
    );
    assert_eq!(shape(1), first, "after payload jsonb → text");
    assert_eq!(shape(2), first, "after aggregate_id text → bigint");
    let log = relay.stderr();
    assert_eq!(
        log.matches("its records keep their shape").count(),
        2,
        "each change is logged once:\n{log}"
    );
    stop(relay);
}

#[test]
fn a_bigint_key_made_text_stops_the_relay_before_the_row_and_tail_shows_it() {
    let db = PgCluster::shared().fresh_db();
    let broker = Broker::shared().addr();
    let state = temp_dir("state");
    db.psql("ALTER TABLE outbox ALTER COLUMN aggregate_id TYPE bigint USING aggregate_id::bigint");
    let url = db.url();
    let mut tail_args = vec!["tail", "--database-url", url.as_str(), "--limit", "2"];
    tail_args.extend_from_slice(SCHEMAS);
    let mut tail = Pgoutbox::spawn(&tail_args);
    tail.wait_stderr("tailing outbox", WAIT);
    let relay = start(&db, &broker, &state, SCHEMAS);
    insert(&db, "7", "'{}'");
    let mut reader = Reader::new(&broker, &[topic(&db, "order")]);
    reader.read_until("the row before the change", WAIT, |r| r.len() == 1);
    db.psql("ALTER TABLE outbox ALTER COLUMN aggregate_id TYPE text");
    let before = current_lsn(&db);
    let id = insert(&db, "'7'", "'{}'");
    stops_before(
        &db,
        relay,
        &id,
        before,
        &["an int64 → a string", "ALTER TABLE"],
    );
    // tail saw both Relations too: the same diagnosis.
    let lines = tail.take_lines(2, WAIT);
    let second: serde_json::Value = serde_json::from_str(&lines[1]).unwrap();
    assert_eq!(second["poison"]["cause"], "type-changed", "{}", lines[1]);
    assert_eq!(second["poison"]["action"], "fail", "{}", lines[1]);
    accept_the_new_type(&db, &broker, &state, &mut reader);
}

/// `relay` exits with a poison row's status before row `id` (written after WAL
/// position `before`), its last line naming the row, the change, the fix and `more`;
/// the slot is not confirmed past the row.
fn stops_before(db: &TestDb<'_>, mut relay: Pgoutbox, id: &str, before: Lsn, more: &[&str]) {
    let status = relay.wait_exit(WAIT);
    let log = relay.stderr();
    assert_eq!(status.code(), Some(4), "a poison row's stop:\n{log}");
    let said = log.lines().last().unwrap_or_default();
    let needles = [
        id,
        "type-changed",
        "\"aggregate_id\" changed type from bigint to text",
        "--accept-type-change",
    ];
    for needle in needles.iter().chain(more) {
        assert!(said.contains(needle), "{needle} in: {said}");
    }
    let (confirmed, _) = slot(db).expect("the slot");
    assert!(
        confirmed <= before,
        "the slot passed the row: {confirmed} > {before}"
    );
}

/// A plain restart stops at the same row (the types are kept in the state file);
/// the documented way on, `--accept-type-change`, writes the new type.
fn accept_the_new_type(
    db: &TestDb<'_>,
    broker: &str,
    state: &std::path::Path,
    reader: &mut Reader,
) {
    let mut again = start(db, broker, state, SCHEMAS);
    let status = again.wait_exit(WAIT);
    let log = again.stderr();
    assert_eq!(status.code(), Some(4), "a restart stops again:\n{log}");
    assert!(log.contains("type-changed"), "{log}");
    let mut args = SCHEMAS.to_vec();
    args.push("--accept-type-change");
    let relay = start(db, broker, state, &args);
    reader.read_until("the row after --accept-type-change", WAIT, |r| r.len() == 2);
    let key =
        String::from_utf8_lossy(reader.records[1].key.as_deref().unwrap_or_default()).into_owned();
    assert!(key.contains("\"type\":\"string\""), "{key}");
    stop(relay);
}

/// The change made while the relay is stopped, after it confirmed every row: the
/// first Relation the next start reads already has the new type, so only the types
/// kept in the state file tell it apart (without them this start pins `text` and
/// sends the row with a string key).
#[test]
fn a_type_change_made_while_the_relay_was_stopped_stops_the_next_start() {
    let db = PgCluster::shared().fresh_db();
    let broker = Broker::shared().addr();
    let state = temp_dir("state");
    db.psql("ALTER TABLE outbox ALTER COLUMN aggregate_id TYPE bigint USING aggregate_id::bigint");
    let relay = start(&db, &broker, &state, SCHEMAS);
    insert(&db, "7", "'{}'");
    let mut reader = Reader::new(&broker, &[topic(&db, "order")]);
    reader.read_until("the row before the change", WAIT, |r| r.len() == 1);
    stop(relay);
    db.psql("ALTER TABLE outbox ALTER COLUMN aggregate_id TYPE text");
    let before = current_lsn(&db);
    let id = insert(&db, "'7'", "'{}'");
    let relay = start(&db, &broker, &state, SCHEMAS);
    stops_before(&db, relay, &id, before, &[]);
    reader.settle(std::time::Duration::from_millis(500));
    assert_eq!(reader.records.len(), 1, "nothing past the stop was sent");
    accept_the_new_type(&db, &broker, &state, &mut reader);
}

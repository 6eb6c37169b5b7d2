//! `tail`, `run` and `replay` make the same records of the same rows: one record
//! path (`pipeline::record::row`), one poison diagnosis and policy, one delivery
//! path. Real binaries, real PostgreSQL, a real broker.
//!
//! The rows carry an explicit `created_at` (`--record-timestamp column`, the
//! default), so every record's time is fixed by its row; the poison rows are one
//! of each cause that does not depend on the broker's limits (`too-large` is the
//! broker's to find, and tail sees no broker), dead-lettered (`--on-invalid dlq`)
//! so that `run` sends a record for each.

use crate::support;

use std::collections::{BTreeMap, HashMap};

use pgoutbox::pg::timestamp::{from_unix_micros, to_rfc3339};
use support::kafka::{Broker, Consumed, Reader};
use support::{PgCluster, Pgoutbox, TestDb, WAIT};

const TABLE: &str = "CREATE TABLE eq_outbox (
    id text PRIMARY KEY,
    aggregate_type text,
    aggregate_id text,
    event_type text NOT NULL DEFAULT 'Happened',
    payload text,
    created_at timestamptz NOT NULL)";

/// Renamed after `run` and `tail` start, before its row: the missing-column table.
const BROKEN: &str = "CREATE TABLE eq_broken (
    id text PRIMARY KEY,
    aggregate_type text,
    aggregate_id text,
    event_type text NOT NULL DEFAULT 'Happened',
    payload text,
    created_at timestamptz NOT NULL)";

const CREATED_AT: &str = "2026-01-02 03:04:05.678901+00";

/// (table, id, route, key, payload) as SQL, and the poison cause (if any).
type Row = (
    &'static str,
    &'static str,
    &'static str,
    &'static str,
    &'static str,
    Option<&'static str>,
);

const ROWS: &[Row] = &[
    (
        "eq_outbox",
        "good-1",
        "'order'",
        "'k1'",
        "'{\"n\": 1}'",
        None,
    ),
    (
        "eq_outbox",
        "good-2",
        "'invoice'",
        "'k2'",
        "'{\"n\": 2}'",
        None,
    ),
    (
        "eq_outbox",
        "null-key",
        "'order'",
        "NULL",
        "'{}'",
        Some("null-key"),
    ),
    (
        "eq_outbox",
        "bad-topic",
        "'no such/topic'",
        "'k1'",
        "'{}'",
        Some("invalid-topic"),
    ),
    (
        "eq_outbox",
        "null-route",
        "NULL",
        "'k1'",
        "'{}'",
        Some("null-route"),
    ),
    (
        "eq_outbox",
        "bad-json",
        "'order'",
        "'k1'",
        "'{\"unclosed\": '",
        Some("invalid-json"),
    ),
    (
        "eq_broken",
        "no-payload",
        "'order'",
        "'k3'",
        "'{}'",
        Some("missing-column"),
    ),
];

/// What a record is made of, as compared here (the timestamp as RFC 3339).
#[derive(Debug, Clone, PartialEq)]
struct Shape {
    topic: String,
    key: Option<String>,
    value: Option<serde_json::Value>,
    headers: BTreeMap<String, Option<String>>,
    timestamp: Option<String>,
}

/// A value as tail and `replay --dry-run` show it: embedded when it is JSON, a
/// string otherwise.
fn value_of(bytes: &[u8]) -> serde_json::Value {
    let text = String::from_utf8_lossy(bytes);
    serde_json::from_str(&text).unwrap_or(serde_json::Value::String(text.into_owned()))
}

fn consumed_shape(r: &Consumed) -> Shape {
    let text = |v: &Vec<u8>| String::from_utf8_lossy(v).into_owned();
    Shape {
        topic: r.topic.clone(),
        key: r.key.as_ref().map(text),
        value: r.value.as_deref().map(value_of),
        headers: r
            .header_list
            .iter()
            .map(|(k, v)| (k.clone(), v.as_ref().map(text)))
            .collect(),
        timestamp: r
            .timestamp
            .map(|ms| to_rfc3339(from_unix_micros(ms * 1000))),
    }
}

fn tail_shape(record: &serde_json::Value) -> Shape {
    let text = |v: &serde_json::Value| v.as_str().map(str::to_owned);
    let headers = record["headers"].as_object().expect("headers");
    Shape {
        topic: text(&record["topic"]).expect("topic"),
        key: text(&record["key"]),
        value: Some(record["value"].clone()).filter(|v| !v.is_null()),
        headers: headers.iter().map(|(k, v)| (k.clone(), text(v))).collect(),
        timestamp: text(&record["timestamp"]),
    }
}

fn insert(db: &TestDb<'_>, (table, id, route, key, payload, _): &Row) {
    // eq_broken's payload column is renamed by then.
    let column = if *table == "eq_broken" {
        "body"
    } else {
        "payload"
    };
    db.psql(&format!(
        "INSERT INTO {table} (id, aggregate_type, aggregate_id, {column}, created_at) \
         VALUES ('{id}', {route}, {key}, {payload}, '{CREATED_AT}')"
    ));
}

/// The record flags all three share.
fn record_flags(db: &TestDb<'_>) -> Vec<String> {
    [
        "--table",
        "public.eq_outbox,public.eq_broken",
        "--on-invalid",
        "dlq",
        "--dlq-topic",
        &format!("{}.dlq", db.name),
    ]
    .map(String::from)
    .to_vec()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tail_prints_the_records_run_sends_and_replay_sends_them_again_with_its_header() {
    let db = PgCluster::shared().fresh_db();
    let broker = Broker::shared();
    let addr = broker.addr();
    db.psql(TABLE);
    db.psql(BROKEN);
    db.psql("CREATE PUBLICATION pgoutbox FOR TABLE eq_outbox, eq_broken WITH (publish = 'insert')");
    let flags = record_flags(&db);
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let template = format!("{}.${{routedByValue}}", db.name);

    let mut relay = support::workload::start_run(&db, &addr, &flags);
    let url = db.url();
    let mut tail_args = vec![
        "tail",
        "--database-url",
        &url,
        "--topic-template",
        &template,
    ];
    tail_args.extend(&flags);
    let mut tail = Pgoutbox::spawn(&tail_args);
    tail.wait_stderr("tailing outbox", WAIT);
    db.psql("ALTER TABLE eq_broken RENAME COLUMN payload TO body");
    for row in ROWS {
        insert(&db, row);
    }

    // tail: one line per row, each with the record `run` sends (a dead letter for
    // the poison rows) and the diagnosis.
    let lines = tail.take_lines(ROWS.len(), WAIT);
    tail.signal("TERM");
    assert!(tail.wait_exit(WAIT).success(), "{}", tail.stderr());
    let mut tailed: HashMap<String, Shape> = HashMap::new();
    for (line, (_, id, .., cause)) in lines.iter().zip(ROWS) {
        let json: serde_json::Value =
            serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}"));
        assert_eq!(json["poison"]["cause"].as_str(), *cause, "{line}");
        let record = &json["record"];
        assert!(
            record.is_object(),
            "tail shows the record run sends: {line}"
        );
        assert_eq!(record["headers"]["id"].as_str(), Some(*id), "{line}");
        tailed.insert(id.to_string(), tail_shape(record));
    }

    // run: the same records, read back from the broker.
    let topics: Vec<String> = ["order", "invoice", "dlq"]
        .iter()
        .map(|t| format!("{}.{t}", db.name))
        .collect();
    let mut reader = Reader::new(&addr, &topics);
    reader.read_until("run's records", WAIT, |r| r.len() >= ROWS.len());
    let sent: HashMap<String, Shape> = reader
        .records
        .iter()
        .map(|r| (r.id(), consumed_shape(r)))
        .collect();
    assert_eq!(sent.len(), ROWS.len(), "{:?}", reader.records);
    for (_, id, .., cause) in ROWS {
        assert_eq!(tailed[*id], sent[*id], "{id} ({cause:?}): tail vs run");
    }
    relay.signal("TERM");
    assert!(relay.wait_exit(WAIT).success(), "{}", relay.stderr());

    // replay: the same records again, plus its header; a dead letter of a row read
    // with SQL names no LSN (the row keeps none), and a missing-column row's stand-in
    // takes the replay's start as its commit time (the row keeps none either).
    let mut replay_args = vec![
        "replay",
        "--database-url",
        &url,
        "--topic-template",
        &template,
        "--brokers",
        &addr,
        "--all",
    ];
    replay_args.extend(&flags);
    let mut replay = Pgoutbox::spawn(&replay_args);
    assert!(replay.wait_exit(WAIT * 3).success(), "{}", replay.stderr());
    reader.read_until("replay's records", WAIT, |r| r.len() >= 2 * ROWS.len());
    let replayed: Vec<&Consumed> = reader
        .records
        .iter()
        .filter(|r| r.header("pgoutbox.replay").is_some())
        .collect();
    assert_eq!(replayed.len(), ROWS.len());
    for again in replayed {
        let id = again.id();
        let mut shape = consumed_shape(again);
        shape.headers.remove("pgoutbox.replay");
        let mut expected = sent[&id].clone();
        expected.headers.remove("pgoutbox.dlq.lsn");
        if id == "no-payload" {
            expected.timestamp = shape.timestamp.clone();
        }
        assert_eq!(shape, expected, "{id}: replay vs run");
    }
}

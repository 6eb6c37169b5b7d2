//! `pgoutbox replay` end to end: rows still in the outbox table, selected by time
//! or id, sent again through the relay's record path with the `pgoutbox.replay`
//! header; `--dry-run`; the refusals; a poison row under `--on-invalid`.

use crate::support;

use std::collections::{HashMap, HashSet};
use std::process::ExitStatus;

use support::kafka::{Broker, Consumed, Reader};
use support::verify::acks_in;
use support::workload::{start_run, start_run_audited, topics};
use support::{PgCluster, Pgoutbox, TestDb, WAIT};

const HEADER: &str = "pgoutbox.replay";

/// What a finished `pgoutbox replay` left.
pub(crate) struct Finished {
    pub(crate) status: ExitStatus,
    pub(crate) stdout: Vec<String>,
    pub(crate) stderr: String,
}

/// Run `pgoutbox replay` on `db` (topics `<db>.<aggregate_type>`) with `extra`.
pub(crate) fn replay(db: &TestDb<'_>, extra: &[&str]) -> Finished {
    let template = format!("{}.${{routedByValue}}", db.name);
    let mut args = vec![
        "replay",
        "--database-url",
        &db.url(),
        "--topic-template",
        &template,
    ]
    .into_iter()
    .map(String::from)
    .collect::<Vec<_>>();
    args.extend(extra.iter().map(|s| s.to_string()));
    let mut process = Pgoutbox::spawn(&args);
    let status = process.wait_exit(WAIT * 3);
    Finished {
        status,
        stdout: process.stdout_so_far(),
        stderr: process.stderr(),
    }
}

/// `count` rows of alternating aggregate types, `created_at` one second apart from
/// `start`, each with its sequence number `n` in the payload.
fn insert_rows(db: &TestDb<'_>, start: &str, count: u32) {
    db.psql(&format!(
        "INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload, created_at) \
         SELECT CASE WHEN g % 2 = 0 THEN 'order' ELSE 'payment' END, 'k' || (g % 20), \
                'Happened', jsonb_build_object('n', g), \
                timestamptz '{start}' + g * interval '1 second' \
         FROM generate_series(0, {}) g",
        count - 1
    ));
}

/// The headers of `record` without the replay header.
fn without_replay_header(record: &Consumed) -> Vec<(String, Option<Vec<u8>>)> {
    let list = record.header_list.iter().filter(|(k, _)| k != HEADER);
    list.cloned().collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_time_range_replays_its_thousand_events_as_run_sent_them() {
    let db = PgCluster::shared().fresh_db();
    let broker = Broker::shared();
    let relay = start_run_audited(&db, &broker.addr(), &[]);
    insert_rows(&db, "2020-12-31 23:00:00+00", 200); // before the range
    insert_rows(&db, "2021-01-01 00:00:00+00", 1000); // in it, from its first µs
    insert_rows(&db, "2021-01-01 00:30:00+00", 200); // after it, from its end on
    let names = topics(&db, &["order", "payment"]);
    let mut reader = Reader::new(&broker.addr(), &names);
    // Seen twice on Apache Kafka under load: 1,399 of 1,400 read (the broker held
    // 1,399). Say which record, and whether the relay got an ack for it.
    let complete = reader.try_read_until(WAIT * 3, |r| r.len() >= 1400);
    let acks = acks_in(&relay.stderr());
    let read: std::collections::HashSet<String> = reader.records.iter().map(|r| r.id()).collect();
    assert!(
        complete,
        "run's 1,400 records: read {}; acked but not read: {:?}; acks {} in all\n{}",
        reader.records.len(),
        acks.iter()
            .filter(|a| !read.contains(&a.id))
            .collect::<Vec<_>>(),
        acks.len(),
        relay
            .stderr()
            .lines()
            .filter(|l| !l.contains(" acked topic="))
            .collect::<Vec<_>>()
            .join("\n")
    );
    // What the relay logged besides its acks: why it sent a record twice, if it did.
    let relay_log: String = (relay.stderr().lines())
        .filter(|l| !l.contains(" acked topic="))
        .collect::<Vec<_>>()
        .join("\n");
    drop(relay);

    // --to without an offset: UTC.
    let done = replay(
        &db,
        &[
            "--brokers",
            &broker.addr(),
            "--from",
            "2021-01-01T00:00:00Z",
            "--to",
            "2021-01-01 00:30:00",
        ],
    );
    assert!(done.status.success(), "{}", done.stderr);
    let summary = done.stdout.join("\n");
    assert!(
        summary.contains("1000 row(s) read, sent 1000 record(s), 0 failed"),
        "{summary}"
    );
    assert!(
        summary.contains(&format!("topic {}.order: 500", db.name)),
        "{summary}"
    );

    reader.read_until("1,000 replayed records", WAIT * 3, |r| r.len() >= 2400);
    reader.settle(std::time::Duration::from_secs(2));
    let (replayed, original): (Vec<&Consumed>, Vec<&Consumed>) = reader
        .records
        .iter()
        .partition(|r| r.header(HEADER).is_some());
    let distinct =
        |records: &[&Consumed]| records.iter().map(|r| r.id()).collect::<HashSet<_>>().len();
    assert_eq!(
        reader.records.len(),
        2400,
        "nothing beyond the range was sent, nothing twice: {} replayed ({} ids), {} from run \
         ({} ids); run logged:\n{relay_log}",
        replayed.len(),
        distinct(&replayed),
        original.len(),
        distinct(&original),
    );
    assert_eq!(original.len(), 1400);
    let expected: HashSet<String> = db
        .psql(
            "SELECT id FROM outbox WHERE created_at >= '2021-01-01 00:00:00+00' \
             AND created_at < '2021-01-01 00:30:00+00'",
        )
        .lines()
        .map(str::to_owned)
        .collect();
    assert_eq!(expected.len(), 1000);
    let ids: HashSet<String> = replayed.iter().map(|r| r.id()).collect();
    assert_eq!(ids, expected, "exactly the rows of the range, each once");
    assert_eq!(replayed.len(), 1000);

    let by_id: HashMap<String, &Consumed> = original.iter().map(|r| (r.id(), *r)).collect();
    let stamp = replayed[0].header(HEADER).unwrap();
    assert!(stamp.ends_with('Z') && stamp.contains('T'), "{stamp}");
    for again in &replayed {
        let first = by_id[&again.id()];
        assert_eq!(again.topic, first.topic);
        assert_eq!(again.partition, first.partition, "same key, same partition");
        assert_eq!(again.key, first.key);
        assert_eq!(again.value, first.value);
        assert_eq!(again.timestamp, first.timestamp);
        assert_eq!(without_replay_header(again), first.header_list);
        assert_eq!(again.header(HEADER).as_deref(), Some(stamp.as_str()));
    }
    // Per key, the replay keeps the timestamp order.
    let mut last: HashMap<(&str, &[u8]), i64> = HashMap::new();
    for again in &replayed {
        let at = again.timestamp.unwrap();
        let key = (again.topic.as_str(), again.key.as_deref().unwrap());
        if let Some(before) = last.insert(key, at) {
            assert!(before < at, "per-key order of {key:?}");
        }
    }
}

const IDS: [&str; 3] = [
    "00000000-0000-4000-8000-000000000001",
    "00000000-0000-4000-8000-000000000002",
    "00000000-0000-4000-8000-000000000003",
];

fn insert_known(db: &TestDb<'_>) {
    for (i, id) in IDS.iter().enumerate() {
        db.psql(&format!(
            "INSERT INTO outbox (id, aggregate_type, aggregate_id, event_type, payload, created_at) \
             VALUES ('{id}', 'order', 'k{i}', 'Created', '{{\"n\": {i}}}', \
                     timestamptz '2021-06-01 00:00:00+00' - {i} * interval '1 minute')"
        ));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dry_run_prints_the_records_of_the_ids_and_sends_nothing() {
    let db = PgCluster::shared().fresh_db();
    let broker = Broker::shared();
    insert_known(&db);
    // An id in capitals matches its row; the brokers are given and still unused.
    let upper = IDS[0].to_uppercase();
    let ids = format!("{upper},{}", IDS[2]);
    let done = replay(
        &db,
        &["--dry-run", "--brokers", &broker.addr(), "--id", &ids],
    );
    assert!(done.status.success(), "{}", done.stderr);
    assert!(
        done.stderr
            .contains("2 row(s) read, would send 2 record(s)"),
        "{}",
        done.stderr
    );
    let lines: Vec<serde_json::Value> = done
        .stdout
        .iter()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    assert_eq!(lines.len(), 2, "{:?}", done.stdout);
    // Timestamp order: the third row is a minute older than the first.
    assert_eq!(lines[0]["headers"]["id"], IDS[2]);
    assert_eq!(lines[1]["headers"]["id"], IDS[0]);
    let line = &lines[1];
    assert_eq!(line["table"], "public.outbox");
    assert_eq!(line["topic"], format!("{}.order", db.name));
    assert_eq!(line["key"], "k0");
    assert_eq!(line["headers"]["event_type"], "Created");
    assert!(line["headers"][HEADER].as_str().unwrap().ends_with('Z'));
    assert_eq!(line["timestamp"], "2021-06-01T00:00:00.000000Z");
    assert_eq!(line["value"], serde_json::json!({"n": 0}));

    // Now for real: exactly the two records reach the topic, so the dry run sent none.
    let done = replay(&db, &["--brokers", &broker.addr(), "--id", &ids]);
    assert!(done.status.success(), "{}", done.stderr);
    let mut reader = Reader::new(&broker.addr(), &topics(&db, &["order"]));
    reader.read_until("the 2 replayed records", WAIT, |r| r.len() >= 2);
    reader.settle(std::time::Duration::from_secs(2));
    let got: Vec<String> = reader.records.iter().map(Consumed::id).collect();
    assert_eq!(got, vec![IDS[2], IDS[0]]);

    // An id no row has is named, and the replay fails.
    let missing = "00000000-0000-4000-8000-0000000000ff";
    let done = replay(
        &db,
        &["--dry-run", "--id", &format!("{},{missing}", IDS[1])],
    );
    assert_eq!(done.status.code(), Some(1), "{}", done.stderr);
    assert_eq!(done.stdout.len(), 1, "the id that exists is still printed");
    assert!(
        done.stderr
            .contains(&format!("no selected row has --id {missing}")),
        "{}",
        done.stderr
    );
    // Ids and a time range narrow each other.
    let done = replay(
        &db,
        &["--dry-run", "--id", &ids, "--from", "2021-06-01T00:00:00Z"],
    );
    assert_eq!(done.status.code(), Some(1), "{}", done.stderr);
    assert_eq!(done.stdout.len(), 1, "{:?}", done.stdout);
    assert!(
        done.stderr
            .contains(&format!("no selected row has --id {}", IDS[2])),
        "{}",
        done.stderr
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refusals_name_the_reason_and_the_fix() {
    let db = PgCluster::shared().fresh_db();
    insert_known(&db);
    let cases: [(&[&str], &str); 6] = [
        (&["--dry-run"], "replay needs a selector"),
        (
            &["--dry-run", "--since-lsn", "0/16B3748"],
            "no WAL position",
        ),
        (
            &["--dry-run", "--all", "--table", ""],
            "logical decoding messages",
        ),
        (
            &["--dry-run", "--all", "--table", "public.gone"],
            "outbox table public.gone does not exist",
        ),
        (&["--all"], "no Kafka brokers given"),
        (
            &["--dry-run", "--from", "yesterday-ish"],
            "invalid --from \"yesterday-ish\"",
        ),
    ];
    for (args, message) in cases {
        let done = replay(&db, args);
        assert_eq!(done.status.code(), Some(2), "{args:?}: {}", done.stderr);
        assert!(done.stderr.contains(message), "{args:?}: {}", done.stderr);
        assert!(done.stdout.is_empty(), "{args:?}: {:?}", done.stdout);
    }
    // A time range needs a time column to compare.
    let done = replay(
        &db,
        &[
            "--dry-run",
            "--from",
            "1h",
            "--timestamp-column",
            "event_type",
        ],
    );
    assert_eq!(done.status.code(), Some(2), "{}", done.stderr);
    assert!(
        done.stderr.contains("which is of type text"),
        "{}",
        done.stderr
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_poison_row_is_stopped_on_or_dead_lettered_by_the_policy() {
    let db = PgCluster::shared().fresh_db();
    let broker = Broker::shared();
    insert_known(&db);
    let poison = "00000000-0000-4000-8000-0000000000aa";
    db.psql(&format!(
        "INSERT INTO outbox (id, aggregate_type, aggregate_id, event_type, payload) \
         VALUES ('{poison}', 'order', '', 'Created', '{{}}')"
    ));
    // The default policy stops before it, naming it (exit 4), as `run` would.
    let done = replay(&db, &["--dry-run", "--all"]);
    assert_eq!(done.status.code(), Some(4), "{}", done.stderr);
    assert!(
        done.stderr.contains(poison) && done.stderr.contains("null-key"),
        "{}",
        done.stderr
    );
    // The fix fits a replay: no slot, and the row is read as it is now.
    assert!(
        done.stderr.contains("the replay stopped before it")
            && done.stderr.contains("correct the row")
            && !done.stderr.contains("slot"),
        "{}",
        done.stderr
    );

    let dlq = format!("{}.dlq", db.name);
    let done = replay(
        &db,
        &[
            "--all",
            "--brokers",
            &broker.addr(),
            "--on-invalid",
            "dlq",
            "--dlq-topic",
            &dlq,
        ],
    );
    assert!(done.status.success(), "{}", done.stderr);
    let summary = done.stdout.join("\n");
    assert!(
        summary.contains("4 row(s) read, sent 4 record(s), 0 failed, 1 dead-lettered"),
        "{summary}"
    );
    let mut reader = Reader::new(&broker.addr(), &[dlq.clone(), format!("{}.order", db.name)]);
    reader.read_until("3 records and 1 dead letter", WAIT, |r| r.len() >= 4);
    let letter = reader
        .records
        .iter()
        .find(|r| r.topic == dlq)
        .expect("dead letter");
    assert_eq!(letter.id(), poison);
    assert_eq!(
        letter.header("pgoutbox.dlq.cause").as_deref(),
        Some("null-key")
    );
    assert_eq!(
        letter.header("pgoutbox.dlq.table").as_deref(),
        Some("public.outbox")
    );
    assert!(
        letter.header(HEADER).is_some(),
        "the dead letter is marked as replayed too"
    );
    assert!(reader.records.iter().all(|r| r.header(HEADER).is_some()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn converters_placements_and_trace_context_match_what_run_sent() {
    let db = PgCluster::shared().fresh_db();
    let broker = Broker::shared();
    let format = [
        "--key-converter",
        "json",
        "--value-converter",
        "json-schemas",
        "--expand-json-payload",
        "--placement",
        "event_type:header:eventType,aggregate_type:envelope:type",
        "--trace-context",
        "payload.meta.traceparent",
    ];
    let relay = start_run(&db, &broker.addr(), &format);
    db.psql(
        "INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload) \
         SELECT 'order', 'k' || (g % 3), 'Created', jsonb_build_object('n', g, 'meta', \
                jsonb_build_object('traceparent', \
                '00-0af7651916cd43dd8448eb211c80319c-b7ad6b716920333' || (g % 10) || '-01')) \
         FROM generate_series(1, 20) g",
    );
    let mut reader = Reader::new(&broker.addr(), &topics(&db, &["order"]));
    reader.read_until("run's 20 records", WAIT, |r| r.len() >= 20);
    drop(relay);

    let mut args = vec!["--all", "--brokers"];
    let addr = broker.addr();
    args.push(&addr);
    args.extend(format);
    let done = replay(&db, &args);
    assert!(done.status.success(), "{}", done.stderr);
    reader.read_until("20 replayed records", WAIT, |r| r.len() >= 40);
    let (replayed, original): (Vec<&Consumed>, Vec<&Consumed>) = reader
        .records
        .iter()
        .partition(|r| r.header(HEADER).is_some());
    assert_eq!((replayed.len(), original.len()), (20, 20));
    let by_id: HashMap<String, &Consumed> = original.iter().map(|r| (r.id(), *r)).collect();
    for again in &replayed {
        let first = by_id[&again.id()];
        assert!(first.header("traceparent").is_some(), "{first:?}");
        assert!(first.header("eventType").is_some(), "{first:?}");
        assert_eq!(again.key, first.key);
        assert_eq!(again.partition, first.partition);
        assert_eq!(again.value, first.value);
        assert_eq!(without_replay_header(again), first.header_list);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_record_too_large_for_the_producer_follows_the_too_large_policy() {
    let db = PgCluster::shared().fresh_db();
    let broker = Broker::shared();
    insert_known(&db);
    let big = "00000000-0000-4000-8000-0000000000bb";
    // 2 MB: above the producer's message.max.bytes, refused before it is sent.
    db.psql(&format!(
        "INSERT INTO outbox (id, aggregate_type, aggregate_id, event_type, payload) \
         VALUES ('{big}', 'order', 'k9', 'Created', \
                 jsonb_build_object('blob', repeat('x', 2000000)))"
    ));
    let addr = broker.addr();
    let done = replay(&db, &["--all", "--brokers", &addr]);
    assert_eq!(done.status.code(), Some(4), "{}", done.stderr);
    assert!(
        done.stderr.contains(big) && done.stderr.contains("too-large"),
        "{}",
        done.stderr
    );

    let dlq = format!("{}.dlq", db.name);
    let policy = ["--on-invalid", "too-large=dlq", "--dlq-topic", &dlq];
    let mut args = vec!["--all", "--brokers", &addr];
    args.extend(policy);
    let done = replay(&db, &args);
    assert!(done.status.success(), "{}", done.stderr);
    let summary = done.stdout.join("\n");
    assert!(summary.contains("1 dead-lettered"), "{summary}");
    let mut reader = Reader::new(&addr, std::slice::from_ref(&dlq));
    reader.read_until("the dead letter", WAIT, |r| !r.is_empty());
    let letter = &reader.records[0];
    assert_eq!(letter.id(), big);
    assert_eq!(
        letter.header("pgoutbox.dlq.cause").as_deref(),
        Some("too-large")
    );
    assert!(letter.header("pgoutbox.dlq.payload-omitted").is_some());
    assert!(letter.header(HEADER).is_some());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_signal_ends_the_wait_for_a_broker_that_is_down() {
    let db = PgCluster::shared().fresh_db();
    let broker = Broker::start();
    insert_known(&db);
    broker.stop();
    let template = format!("{}.${{routedByValue}}", db.name);
    let url = db.url();
    let addr = broker.addr();
    let args = [
        "replay",
        "--database-url",
        &url,
        "--topic-template",
        &template,
        "--brokers",
        &addr,
        "--all",
    ];
    let mut process = Pgoutbox::spawn(&args);
    process.wait_stderr("replaying outbox rows", WAIT);
    // No ack can come: without the signal it would wait for message.timeout.ms (5 min).
    process.signal("INT");
    let status = process.wait_exit(WAIT * 2);
    let stderr = process.stderr();
    assert_eq!(status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("interrupted"), "{stderr}");
}

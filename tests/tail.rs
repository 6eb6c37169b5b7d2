//! `pgoutbox tail` against a real PostgreSQL: exactly-once, commit order, rollbacks,
//! payload fidelity, slot hygiene, publication handling.

use crate::support;

use std::collections::HashMap;

use pgoutbox::pg::lsn::Lsn;
use serde::Deserialize;
use serde_json::value::RawValue;
use support::workload::uuid;
use support::{wait_until_eq, PgCluster, Pgoutbox, Rng, TestDb, WAIT};

#[derive(Debug, Deserialize)]
struct Line {
    lsn: String,
    commit_lsn: String,
    xid: u64,
    commit_time: String,
    table: String,
    op: String,
    id: String,
    aggregate_type: String,
    aggregate_id: String,
    event_type: String,
    topic: String,
    key: String,
    payload: Box<RawValue>,
}

fn parse(lines: &[String]) -> Vec<Line> {
    lines
        .iter()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("bad line {l:?}: {e}")))
        .collect()
}

fn lsn(text: &str) -> Lsn {
    text.parse()
        .unwrap_or_else(|e| panic!("tail's output: {e}"))
}

/// Start tail on `db` and wait until it streams. The slot being listed is not
/// enough: a new logical slot appears (active) while it still waits for a consistent
/// snapshot, and rows committed before that point are, by design, not decoded.
fn start_tail(db: &TestDb<'_>, extra: &[&str]) -> Pgoutbox {
    let url = db.url();
    let mut args = vec!["tail", "--database-url", url.as_str()];
    args.extend_from_slice(extra);
    let tail = Pgoutbox::spawn(&args);
    tail.wait_stderr("tailing outbox", WAIT);
    tail
}

struct Expected {
    id: String,
    aggregate_type: String,
    aggregate_id: String,
    event_type: String,
}

fn insert_sql(table: &str, e: &Expected, seq: usize) -> String {
    format!(
        "INSERT INTO {table} (id, aggregate_type, aggregate_id, event_type, payload) VALUES \
         ('{}', '{}', '{}', '{}', '{{\"seq\": {seq}, \"name\": \"ünïcødé ✓\", \"list\": [1, 2.50, null, true]}}');",
        e.id, e.aggregate_type, e.aggregate_id, e.event_type
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thousand_events_with_rollbacks_arrive_once_in_commit_order() {
    let db = PgCluster::shared().fresh_db();
    db.psql(
        "CREATE TABLE other_events (LIKE outbox INCLUDING ALL); \
         CREATE PUBLICATION pgoutbox FOR TABLE outbox, other_events WITH (publish = 'insert');",
    );
    let mut tail = start_tail(&db, &["--limit", "1001"]);
    let client = db.client().await;
    let mut rng = Rng::new(0x5eed);
    let mut expected: Vec<Expected> = Vec::new();
    let event = |rng: &mut Rng| Expected {
        id: uuid(rng),
        aggregate_type: ["order", "payment", "customer"][rng.range(0, 2) as usize].to_owned(),
        aggregate_id: rng.range(1, 20).to_string(),
        event_type: ["Created", "Updated", "Cancelled"][rng.range(0, 2) as usize].to_owned(),
    };
    let mut seq = 0;
    while expected.len() < 1000 {
        let rows = rng.range(1, 50).min(1000 - expected.len() as u64) as usize;
        let mut sql = String::from("BEGIN;");
        let mut committed = Vec::new();
        for _ in 0..rows {
            let e = event(&mut rng);
            seq += 1;
            sql.push_str(&insert_sql("outbox", &e, seq));
            committed.push(e);
            match rng.range(0, 9) {
                // A savepoint whose rows are rolled back.
                0 => {
                    let ghost = event(&mut rng);
                    sql.push_str("SAVEPOINT s;");
                    sql.push_str(&insert_sql("outbox", &ghost, 0));
                    sql.push_str("ROLLBACK TO SAVEPOINT s;");
                }
                // A row in a published non-outbox table.
                1 => sql.push_str(&insert_sql("other_events", &event(&mut rng), 0)),
                _ => {}
            }
        }
        sql.push_str("COMMIT;");
        client.batch_execute(&sql).await.unwrap();
        expected.extend(committed);
        if rng.range(0, 4) == 0 {
            let ghost = event(&mut rng);
            client
                .batch_execute(&format!(
                    "BEGIN; {} ROLLBACK;",
                    insert_sql("outbox", &ghost, 0)
                ))
                .await
                .unwrap();
        }
    }
    // A committed sentinel last: anything that leaked would shift or precede it.
    let sentinel = event(&mut rng);
    client
        .batch_execute(&insert_sql("outbox", &sentinel, 0))
        .await
        .unwrap();
    expected.push(sentinel);

    let lines = parse(&tail.take_lines(1001, WAIT * 2));
    assert!(
        tail.wait_exit(WAIT).success(),
        "tail failed: {}",
        tail.stderr()
    );

    let payloads: HashMap<String, String> = client
        .query("SELECT id::text, payload::text FROM outbox", &[])
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    assert_eq!(
        payloads.len(),
        1001,
        "rolled-back rows must not be in the table either"
    );
    let got_ids: Vec<&str> = lines.iter().map(|l| l.id.as_str()).collect();
    let want_ids: Vec<&str> = expected.iter().map(|e| e.id.as_str()).collect();
    assert_eq!(
        got_ids, want_ids,
        "exactly the committed events, in commit order"
    );
    let mut last_commit = Lsn::INVALID;
    for (line, want) in lines.iter().zip(&expected) {
        assert_eq!(line.table, "public.outbox");
        assert_eq!(line.op, "insert");
        assert_eq!(line.aggregate_type, want.aggregate_type);
        assert_eq!(line.aggregate_id, want.aggregate_id);
        assert_eq!(line.key, want.aggregate_id);
        assert_eq!(line.event_type, want.event_type);
        assert_eq!(line.topic, format!("outbox.event.{}", want.aggregate_type));
        assert_eq!(line.payload.get(), payloads[&line.id]);
        assert!(line.xid > 0);
        assert!(line.commit_time.ends_with('Z'), "{}", line.commit_time);
        let commit = lsn(&line.commit_lsn);
        assert!(commit >= last_commit, "commit LSNs must not go backwards");
        assert!(lsn(&line.lsn) < commit, "a row's LSN precedes its commit");
        last_commit = commit;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unicode_and_toasted_megabyte_payloads_are_byte_identical() {
    let db = PgCluster::shared().fresh_db();
    let mut tail = start_tail(&db, &["--limit", "3"]);
    let client = db.client().await;
    // Incompressible 1 MB string: forces out-of-line TOAST storage.
    let mut rng = Rng::new(42);
    let big: String = (0..1_048_576 / 16)
        .map(|_| format!("{:016x}", rng.next_u64()))
        .collect();
    let unicode = r#"{"emoji": "😀🚀", "cjk": "漢字かな", "rtl": "שלום", "escapes": "line\nbreak \"q\" \\ \u0001 tab\t", "num": 1e3, "deep": {"a": [{"b": {"c": []}}]}}"#;
    client
        .batch_execute(&format!(
            "INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload) VALUES \
             ('doc', 'ü-1', 'Unicode', '{}');",
            unicode.replace('\'', "''")
        ))
        .await
        .unwrap();
    client
        .execute(
            "INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload) \
             VALUES ('doc', 'big', 'Big', jsonb_build_object('blob', $1::text, 'n', 1))",
            &[&big],
        )
        .await
        .unwrap();
    client
        .batch_execute("INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload) VALUES ('doc', 's', 'Scalar', '\"just a string\"')")
        .await
        .unwrap();
    let stored_size: i32 = client
        .query_one(
            "SELECT pg_column_size(payload) FROM outbox WHERE aggregate_id = 'big'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert!(
        stored_size > 500_000,
        "payload should be stored TOASTed, size {stored_size}"
    );

    let lines = parse(&tail.take_lines(3, WAIT));
    assert!(tail.wait_exit(WAIT).success(), "{}", tail.stderr());
    for line in &lines {
        let want: String = client
            .query_one(
                "SELECT payload::text FROM outbox WHERE id = $1::text::uuid",
                &[&line.id],
            )
            .await
            .unwrap()
            .get(0);
        assert_eq!(line.payload.get(), want, "payload of {}", line.aggregate_id);
    }
    assert_eq!(lines[0].aggregate_id, "ü-1");
    assert!(lines[1].payload.get().len() > 1_048_576);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tail_leaves_replication_slots_as_they_were() {
    let db = PgCluster::shared().fresh_db();
    db.psql("SELECT pg_create_logical_replication_slot('keep', 'pgoutput')");
    // Publication must exist before the events that `--slot keep` will read back.
    db.psql("CREATE PUBLICATION pgoutbox FOR TABLE outbox WITH (publish = 'insert')");
    let insert = "INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload) \
                  SELECT 'order', g::text, 'Created', jsonb_build_object('n', g) FROM generate_series(1, 5) g";
    db.psql(insert);
    let before = db.slots_snapshot();

    // Temporary slot: sees new events only, and disappears afterwards.
    let mut tail = start_tail(&db, &["--limit", "5"]);
    db.psql(insert);
    assert_eq!(tail.take_lines(5, WAIT).len(), 5);
    assert!(tail.wait_exit(WAIT).success(), "{}", tail.stderr());
    wait_until_eq("temporary slot to disappear", WAIT, &before, || {
        db.slots_snapshot()
    });

    // Existing slot: reads its backlog (all 10 events), confirms nothing.
    let url = db.url();
    let mut tail = Pgoutbox::spawn(&[
        "tail",
        "--database-url",
        &url,
        "--slot",
        "keep",
        "--limit",
        "10",
    ]);
    let lines = parse(&tail.take_lines(10, WAIT));
    assert!(tail.wait_exit(WAIT).success(), "{}", tail.stderr());
    let keys: Vec<&str> = lines.iter().map(|l| l.aggregate_id.as_str()).collect();
    assert_eq!(keys, ["1", "2", "3", "4", "5", "1", "2", "3", "4", "5"]);
    wait_until_eq(
        "slot 'keep' to be inactive and unchanged",
        WAIT,
        &before,
        || db.slots_snapshot(),
    );
}

/// `name:insert|update|delete|truncate` of every publication of `db`, sorted.
fn publications(db: &TestDb<'_>) -> Vec<String> {
    let text = db.psql(
        "SELECT pubname || ':' || pubinsert || '|' || pubupdate || '|' || pubdelete || '|' \
         || pubtruncate FROM pg_publication ORDER BY pubname",
    );
    text.lines().map(str::to_owned).collect()
}

/// Without a publication tail reads through a temporary, insert-only one of the
/// outbox tables — and (issue 13 item 11) drops it when it ends, here at `--limit`:
/// the database is left as tail found it.
#[test]
fn missing_publication_is_created_insert_only() {
    let db = PgCluster::shared().fresh_db();
    let mut tail = start_tail(&db, &["--limit", "1"]);
    let pubs = publications(&db);
    assert_eq!(pubs.len(), 1, "{pubs:?}");
    assert!(
        pubs[0].starts_with("pgoutbox_tail_") && pubs[0].ends_with(":true|false|false|false"),
        "a temporary insert-only publication, not the relay's: {pubs:?}"
    );
    let name = pubs[0].split(':').next().unwrap_or_default().to_owned();
    assert_eq!(
        db.psql(&format!(
            "SELECT schemaname || '.' || tablename FROM pg_publication_tables WHERE pubname = '{name}'"
        )),
        "public.outbox"
    );
    insert_one(&db, "1");
    assert_eq!(tail.take_lines(1, WAIT).len(), 1);
    assert!(tail.wait_exit(WAIT).success());
    assert_eq!(publications(&db), Vec::<String>::new(), "{}", tail.stderr());
    assert!(
        tail.stderr().contains("dropped the temporary publication"),
        "{}",
        tail.stderr()
    );
}

/// Issue 13 item 11: however tail ends — SIGINT (Ctrl-C), SIGTERM, an error — the
/// publication it created is gone; one that existed is left alone.
#[test]
fn tail_drops_its_publication_on_signals_and_errors_and_keeps_an_existing_one() {
    let db = PgCluster::shared().fresh_db();
    for signal in ["INT", "TERM"] {
        let mut tail = start_tail(&db, &[]);
        assert_eq!(publications(&db).len(), 1);
        tail.signal(signal);
        assert!(tail.wait_exit(WAIT).success(), "{}", tail.stderr());
        assert_eq!(
            publications(&db),
            Vec::<String>::new(),
            "SIG{signal}: {}",
            tail.stderr()
        );
    }
    // An error after the publication was made: the replication connection is
    // cut. (A mapped column the table lacks is no error any more: tail shows its
    // rows as the missing-column poison rows `run` sees.)
    let mut tail = start_tail(&db, &["--payload-column", "body"]);
    insert_one(&db, "1");
    let line: serde_json::Value = serde_json::from_str(&tail.take_lines(1, WAIT)[0]).unwrap();
    assert_eq!(line["poison"]["cause"], "missing-column", "{line}");
    assert!(
        line["poison"]["reason"].as_str().unwrap().contains("body"),
        "{line}"
    );
    db.psql(
        "SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots \
         WHERE slot_name LIKE 'pgoutbox_tail_%' AND database = current_database()",
    );
    assert!(!tail.wait_exit(WAIT).success());
    assert_eq!(publications(&db), Vec::<String>::new(), "{}", tail.stderr());
    // An existing publication is read through and left as it was.
    db.psql("CREATE PUBLICATION pgoutbox FOR TABLE outbox WITH (publish = 'insert, update')");
    let mut tail = start_tail(&db, &["--limit", "1"]);
    insert_one(&db, "2");
    assert_eq!(tail.take_lines(1, WAIT).len(), 1);
    assert!(tail.wait_exit(WAIT).success());
    assert_eq!(publications(&db), ["pgoutbox:true|true|false|false"]);
}

#[test]
fn without_privilege_tail_prints_the_sql_to_run() {
    let db = PgCluster::shared().fresh_db();
    let role = format!("weak_{}", db.name);
    db.psql(&format!(
        "CREATE ROLE {role} LOGIN REPLICATION; GRANT SELECT ON outbox TO {role}; \
         REVOKE CREATE ON DATABASE {} FROM PUBLIC;",
        db.name
    ));
    let url = format!(
        "postgres://{role}@127.0.0.1:{}/{}?sslmode=disable",
        db.cluster.port, db.name
    );
    let mut tail = Pgoutbox::spawn(&["tail", "--database-url", &url]);
    let status = tail.wait_exit(WAIT);
    assert!(!status.success());
    let stderr = tail.stderr();
    assert!(
        stderr.contains("CREATE PUBLICATION \"pgoutbox\" FOR TABLE \"public\".\"outbox\" WITH (publish = 'insert', publish_via_partition_root = true)"),
        "{stderr}"
    );
    assert!(stderr.contains(&role), "{stderr}");
}

#[test]
fn missing_table_names_the_table_and_the_fix() {
    let db = PgCluster::shared().fresh_db();
    let url = db.url();
    let mut tail = Pgoutbox::spawn(&[
        "tail",
        "--database-url",
        &url,
        "--table",
        "sales.order_outbox",
    ]);
    assert!(!tail.wait_exit(WAIT).success());
    let stderr = tail.stderr();
    assert!(
        stderr.contains("sales.order_outbox does not exist"),
        "{stderr}"
    );
    assert!(stderr.contains("sql/outbox.sql"), "{stderr}");
}

#[test]
fn pretty_format_is_readable() {
    let db = PgCluster::shared().fresh_db();
    let mut tail = start_tail(&db, &["--limit", "1", "--format", "pretty"]);
    db.psql("INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload) VALUES ('order', '7', 'Paid', '{\"amount\": 5}')");
    // Header, id, event_type, topic, key, payload over 3 lines, blank separator.
    let lines = tail.take_lines(9, WAIT);
    assert!(tail.wait_exit(WAIT).success());
    let text = lines.join("\n");
    assert!(text.contains("public.outbox insert"), "{text}");
    assert!(text.contains("topic       outbox.event.order"), "{text}");
    assert!(text.contains("\"amount\": 5"), "{text}");
    assert_eq!(lines[8], "", "{text}");
}

#[test]
fn rows_of_a_partitioned_outbox_are_seen_under_the_root_table() {
    let db = PgCluster::shared().fresh_db();
    db.psql(
        "CREATE TABLE public.p_outbox (LIKE public.outbox INCLUDING DEFAULTS) PARTITION BY LIST (aggregate_type); \
         CREATE TABLE public.p_outbox_order PARTITION OF public.p_outbox FOR VALUES IN ('order'); \
         CREATE TABLE public.p_outbox_other PARTITION OF public.p_outbox DEFAULT;",
    );
    let mut tail = start_tail(&db, &["--table", "public.p_outbox", "--limit", "2"]);
    db.psql(
        "INSERT INTO public.p_outbox (aggregate_type, aggregate_id, event_type, payload) \
         VALUES ('order', '1', 'Created', '{}'), ('invoice', '2', 'Issued', '{}')",
    );
    let lines = parse(&tail.take_lines(2, WAIT));
    assert!(tail.wait_exit(WAIT).success(), "{}", tail.stderr());
    let tables: Vec<&str> = lines.iter().map(|l| l.table.as_str()).collect();
    assert_eq!(tables, ["public.p_outbox", "public.p_outbox"]);
    assert_eq!(lines[1].topic, "outbox.event.invoice");
}

/// Issue 13 item 9: tail marks an event whose topic `run` would refuse (a poison
/// row of cause invalid-topic), and only that one.
#[test]
fn events_with_an_illegal_topic_are_marked() {
    let db = PgCluster::shared().fresh_db();
    let mut tail = start_tail(&db, &["--limit", "2"]);
    db.psql(
        "INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload) VALUES \
         ('new order', '1', 'T', '{}'), ('order', '2', 'T', '{}')",
    );
    let lines = tail.take_lines(2, WAIT);
    let json: Vec<serde_json::Value> = lines
        .iter()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    assert_eq!(json[0]["topic"], "outbox.event.new order");
    assert_eq!(
        json[0]["topic_invalid"],
        "topic \"outbox.event.new order\" is not a legal Kafka topic name \
         (1-249 of [a-zA-Z0-9._-]): `run` treats this row as a poison row (invalid-topic)"
    );
    // The poison diagnosis `run` makes, and what it does by default: stop.
    assert_eq!(json[0]["poison"]["cause"], "invalid-topic", "{}", lines[0]);
    assert_eq!(json[0]["poison"]["action"], "fail", "{}", lines[0]);
    assert!(json[0].get("record").is_none(), "{}", lines[0]);
    assert_eq!(json[1]["topic"], "outbox.event.order");
    assert!(json[1].get("topic_invalid").is_none(), "{}", lines[1]);
    assert!(json[1].get("poison").is_none(), "{}", lines[1]);
    assert_eq!(json[1]["record"]["topic"], "outbox.event.order");
    assert_eq!(json[1]["record"]["key"], "2");
    assert!(tail.wait_exit(WAIT).success());
}

/// The `pgoutbox_tail_…` publications of `db`, sorted.
fn tail_publications(db: &TestDb<'_>) -> Vec<String> {
    let text = db.psql(
        "SELECT pubname FROM pg_publication WHERE pubname LIKE 'pgoutbox\\_tail\\_%' ORDER BY pubname",
    );
    text.lines().map(str::to_owned).collect()
}

/// Start a tail that creates its own publication; returns it and that publication.
fn tail_with_own_publication(db: &TestDb<'_>) -> (Pgoutbox, String) {
    let before = tail_publications(db);
    let tail = start_tail(db, &[]);
    let new: Vec<String> = tail_publications(db)
        .into_iter()
        .filter(|p| !before.contains(p))
        .collect();
    assert_eq!(new.len(), 1, "one new publication: {new:?}");
    (tail, new[0].clone())
}

/// SIGKILL a tail (no chance to drop its publication); returns once the server
/// ended its sessions: no slot of the publication's name is left.
fn kill_tail(db: &TestDb<'_>, mut tail: Pgoutbox, publication: &str) {
    tail.signal("KILL");
    tail.wait_exit(WAIT);
    wait_until_eq(
        "the killed tail's sessions to end (its temporary slots with them)",
        WAIT,
        &"0".to_owned(),
        || {
            db.psql(&format!(
                "SELECT count(*) FROM pg_replication_slots WHERE slot_name = '{publication}'"
            ))
        },
    );
    assert!(
        tail_publications(db).iter().any(|p| p == publication),
        "SIGKILL leaves the publication {publication}"
    );
}

/// One outbox row: aggregate `a`/`aggregate_id`, event type `T`, payload `{}`.
fn insert_one(db: &TestDb<'_>, aggregate_id: &str) {
    db.psql(&format!(
        "INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload) \
         VALUES ('a', '{aggregate_id}', 'T', '{{}}')"
    ));
}

/// House II item 7: a tail killed with SIGKILL leaves its publication; `check`
/// reports it, the next tail drops it (and says so), a publication merely named
/// like tail's is kept.
#[test]
fn a_killed_tails_publication_is_reported_by_check_and_dropped_by_the_next_tail() {
    let db = PgCluster::shared().fresh_db();
    // Lookalikes the tool never generates.
    for name in [
        "pgoutbox_tail_mine",
        "pgoutbox_tail_1_2_3",
        "pgoutbox_tail_1_",
    ] {
        db.psql(&format!("CREATE PUBLICATION \"{name}\" FOR TABLE outbox"));
    }
    let lookalikes = tail_publications(&db);
    let (killed, left) = tail_with_own_publication(&db);
    kill_tail(&db, killed, &left);
    let leftovers: Vec<&str> = lookalikes
        .iter()
        .map(String::as_str)
        .chain([left.as_str()])
        .collect();

    let mut check = Pgoutbox::spawn(&["check", "--database-url", &db.url()]);
    check.wait_exit(WAIT);
    let report = check.stdout_so_far().join("\n");
    let named: Vec<&str> = report
        .lines()
        .filter(|l| l.contains("tail_publication"))
        .collect();
    assert_eq!(named.len(), 1, "{report}");
    assert!(
        named[0].contains(&format!("DROP PUBLICATION IF EXISTS \"{left}\";")),
        "{report}"
    );
    assert_eq!(
        tail_publications(&db).len(),
        leftovers.len(),
        "check only reads"
    );

    let (mut next, own) = tail_with_own_publication(&db);
    let mut expected = lookalikes.clone();
    expected.push(own.clone());
    expected.sort();
    assert_eq!(tail_publications(&db), expected, "{}", next.stderr());
    assert!(
        next.stderr()
            .lines()
            .any(|l| l.contains("dropped publications left behind") && l.contains(&left)),
        "{}",
        next.stderr()
    );
    next.signal("TERM");
    assert!(next.wait_exit(WAIT).success(), "{}", next.stderr());
    assert_eq!(tail_publications(&db), lookalikes);
}

/// House II item 7: `teardown` drops a killed tail's publication, and neither
/// `teardown` nor another tail ever drops the publication of a tail that runs.
#[test]
fn teardown_drops_a_killed_tails_publication_and_never_a_live_ones() {
    let db = PgCluster::shared().fresh_db();
    let (killed, left) = tail_with_own_publication(&db);
    kill_tail(&db, killed, &left);
    let (mut live, in_use) = tail_with_own_publication(&db);
    assert_eq!(
        tail_publications(&db),
        [in_use.as_str()],
        "the next tail drops {left}"
    );
    let (mut other, also_in_use) = tail_with_own_publication(&db);
    let mut both = vec![in_use.clone(), also_in_use];
    both.sort();
    assert_eq!(
        tail_publications(&db),
        both,
        "another tail keeps a live one's"
    );
    other.signal("TERM");
    assert!(other.wait_exit(WAIT).success(), "{}", other.stderr());

    let (killed, left) = tail_with_own_publication(&db);
    kill_tail(&db, killed, &left);
    let url = db.url();
    let mut teardown = Pgoutbox::spawn(&["teardown", "--database-url", &url, "--yes"]);
    assert!(teardown.wait_exit(WAIT).success(), "{}", teardown.stderr());
    let out = teardown.stdout_so_far().join("\n");
    assert!(out.contains(&left), "teardown names what it dropped: {out}");
    assert_eq!(tail_publications(&db), [in_use.as_str()], "{out}");

    // The live tail still reads through its publication.
    insert_one(&db, "after-teardown");
    let lines = parse(&live.take_lines(1, WAIT));
    assert_eq!(lines[0].aggregate_id, "after-teardown");
    live.signal("TERM");
    assert!(live.wait_exit(WAIT).success(), "{}", live.stderr());
    assert_eq!(tail_publications(&db), Vec::<String>::new());
}

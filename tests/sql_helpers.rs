//! The SQL helpers in `sql/` against a real PostgreSQL: `outbox_emit`
//! (insert, insert-then-delete, rollback, logical decoding), `outbox_cleanup` /
//! `outbox_cleanup_batched` (exact cutoff, batching, validation), the
//! `outbox_backlog` view and the consumer dedup table.

use crate::support;

use std::path::PathBuf;
use std::process::Command;

use support::{PgCluster, TestDb};

const FILES: [&str; 6] = [
    "outbox_emit.sql",
    // Exercised with the relay in `messages` (the table-less outbox).
    "outbox_message.sql",
    "outbox_cleanup.sql",
    "outbox_backlog.sql",
    "consumer_dedup.sql",
    // Exercised with the relay in `edges` (trace context read back from Kafka).
    "outbox_trace.sql",
];

fn sql_path(file: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("sql")
        .join(file)
}

/// Load `sql/<file>` the way a user would (`psql -f`, ON_ERROR_STOP), then once more
/// through `psql -c` to prove the file is re-runnable.
fn load(db: &TestDb<'_>, file: &str) {
    let path = sql_path(file);
    let out = Command::new(db.cluster.psql_bin())
        .args(["-X", "-q", "-v", "ON_ERROR_STOP=1", "-h", "127.0.0.1"])
        .arg("-p")
        .arg(db.cluster.port.to_string())
        .args(["-U", "postgres", "-d", &db.name, "-f"])
        .arg(&path)
        .output()
        .expect("run psql -f");
    assert!(
        out.status.success(),
        "psql -f {} failed: {}",
        path.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    let text = std::fs::read_to_string(&path).expect("read sql file");
    db.psql(&text);
}

/// Run SQL that is expected to fail; returns psql's stderr.
fn psql_err(db: &TestDb<'_>, sql: &str) -> String {
    let out = db.cluster.psql_output(&db.name, sql);
    assert!(!out.status.success(), "expected {sql:?} to fail");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn count(db: &TestDb<'_>, sql: &str) -> i64 {
    db.psql(sql)
        .parse()
        .unwrap_or_else(|e| panic!("{sql}: not a number: {e}"))
}

fn assert_uuid(text: &str) {
    let ok = text.len() == 36
        && text.char_indices().all(|(i, c)| match i {
            8 | 13 | 18 | 23 => c == '-',
            _ => c.is_ascii_hexdigit(),
        });
    assert!(ok, "not a uuid: {text:?}");
}

#[test]
fn every_file_has_a_header_comment() {
    for file in FILES {
        let text = std::fs::read_to_string(sql_path(file)).unwrap();
        let header: Vec<&str> = text.lines().take_while(|l| l.starts_with("--")).collect();
        assert!(
            header.len() >= 10,
            "{file}: expected a header comment explaining its semantics"
        );
    }
}

#[test]
fn outbox_emit_keeps_or_deletes_the_row() {
    let db = PgCluster::shared().fresh_db();
    load(&db, "outbox_emit.sql");

    let kept = db.psql("SELECT outbox_emit('order', '42', 'OrderPaid', '{\"order_id\": 42}')");
    assert_uuid(&kept);
    assert_eq!(
        db.psql(&format!(
            "SELECT aggregate_type, aggregate_id, event_type, payload::text \
             FROM outbox WHERE id = '{kept}'"
        )),
        "order|42|OrderPaid|{\"order_id\": 42}"
    );

    let gone = db.psql(
        "SELECT outbox_emit('order', '43', 'OrderPaid', '{\"order_id\": 43}', keep => false)",
    );
    assert_uuid(&gone);
    assert_ne!(kept, gone);
    assert_eq!(
        count(
            &db,
            &format!("SELECT count(*) FROM outbox WHERE id = '{gone}'")
        ),
        0
    );
    assert_eq!(count(&db, "SELECT count(*) FROM outbox"), 1);

    // An event is never dropped silently.
    let err = psql_err(
        &db,
        "SELECT outbox_emit('order', '44', 'OrderPaid', '{}', keep => NULL)",
    );
    assert!(err.contains("keep must be true or false"), "{err}");
    let err = psql_err(&db, "SELECT outbox_emit('order', '44', 'OrderPaid', NULL)");
    assert!(err.contains("not-null"), "{err}");
    assert_eq!(count(&db, "SELECT count(*) FROM outbox"), 1);
}

#[tokio::test]
async fn outbox_emit_follows_the_callers_transaction() {
    let db = PgCluster::shared().fresh_db();
    load(&db, "outbox_emit.sql");
    db.psql("CREATE TABLE orders (id int PRIMARY KEY, status text NOT NULL)");
    let client = db.client().await;
    let emit = "SELECT outbox_emit($1, $2, 'OrderPaid', $3::text::jsonb, keep => $4)::text";
    let outbox_rows = "SELECT count(*) FROM outbox";

    // Rolled back: neither the business row nor any event row survives.
    client.batch_execute("BEGIN").await.unwrap();
    client
        .execute("INSERT INTO orders VALUES (1, 'paid')", &[])
        .await
        .unwrap();
    client
        .query_one(emit, &[&"order", &"1", &r#"{"n": 1}"#, &true])
        .await
        .unwrap();
    client
        .query_one(emit, &[&"order", &"1", &r#"{"n": 2}"#, &false])
        .await
        .unwrap();
    let inside: i64 = client.query_one(outbox_rows, &[]).await.unwrap().get(0);
    assert_eq!(inside, 1, "the kept row is visible inside the transaction");
    client.batch_execute("ROLLBACK").await.unwrap();
    assert_eq!(count(&db, "SELECT count(*) FROM outbox"), 0);
    assert_eq!(count(&db, "SELECT count(*) FROM orders"), 0);

    // Committed: the kept event stays, the keep => false one is gone; no COMMIT
    // happened inside the function (a later ROLLBACK TO SAVEPOINT still works).
    client.batch_execute("BEGIN").await.unwrap();
    client
        .execute("INSERT INTO orders VALUES (2, 'paid')", &[])
        .await
        .unwrap();
    let kept: String = client
        .query_one(emit, &[&"order", &"2", &r#"{"n": 3}"#, &true])
        .await
        .unwrap()
        .get(0);
    let deleted: String = client
        .query_one(emit, &[&"order", &"2", &r#"{"n": 4}"#, &false])
        .await
        .unwrap()
        .get(0);
    client.batch_execute("SAVEPOINT s").await.unwrap();
    client
        .query_one(emit, &[&"order", &"2", &r#"{"n": 5}"#, &true])
        .await
        .unwrap();
    client
        .batch_execute("ROLLBACK TO SAVEPOINT s")
        .await
        .unwrap();
    client.batch_execute("COMMIT").await.unwrap();
    assert_uuid(&kept);
    assert_uuid(&deleted);
    assert_eq!(db.psql("SELECT id FROM outbox"), kept);
    assert_eq!(db.psql("SELECT payload::text FROM outbox"), r#"{"n": 3}"#);
    assert_eq!(db.psql("SELECT id FROM orders"), "2");
}

#[test]
fn outbox_emit_without_keep_is_still_in_logical_decoding() {
    let db = PgCluster::shared().fresh_db();
    load(&db, "outbox_emit.sql");
    let slot = format!("td_{}", db.name);
    db.psql(&format!(
        "SELECT pg_create_logical_replication_slot('{slot}', 'test_decoding')"
    ));

    let small = db.psql("SELECT outbox_emit('order', '7', 'OrderPaid', '{\"k\": 7}', false)");
    // A payload large enough to be TOASTed: decoding must rebuild it from the WAL.
    let big = db.psql(
        "SELECT outbox_emit('blob', '8', 'Big', jsonb_build_object('blob', \
           (SELECT string_agg(md5(i::text), '') FROM generate_series(1, 2000) i)), false)",
    );
    let rolled_back =
        db.psql("BEGIN; SELECT outbox_emit('order', '9', 'Never', '{}', false); ROLLBACK;");
    assert_uuid(&small);
    assert_uuid(&big);
    assert_uuid(&rolled_back);
    assert_eq!(count(&db, "SELECT count(*) FROM outbox"), 0);

    let changes = db.psql(&format!(
        "SELECT data FROM pg_logical_slot_get_changes('{slot}', NULL, NULL) \
         WHERE data LIKE 'table public.outbox:%'"
    ));
    let inserts: Vec<&str> = changes
        .lines()
        .filter(|l| l.starts_with("table public.outbox: INSERT:"))
        .collect();
    assert_eq!(inserts.len(), 2, "decoded changes:\n{changes}");
    assert!(
        inserts[0].contains(&format!("id[uuid]:'{small}'"))
            && inserts[0].contains(r#"payload[jsonb]:'{"k": 7}'"#),
        "{}",
        inserts[0]
    );
    let last_md5 = db.psql("SELECT md5('2000')");
    assert!(
        inserts[1].contains(&format!("id[uuid]:'{big}'")) && inserts[1].contains(&last_md5),
        "TOASTed payload not decoded: {}…",
        &inserts[1][..inserts[1].len().min(300)]
    );
    assert!(inserts[1].len() > 64_000, "payload truncated");
    assert!(!changes.contains(&rolled_back), "rolled-back event decoded");

    db.psql(&format!("SELECT pg_drop_replication_slot('{slot}')"));
}

/// `outbox_emit_message` emits one transactional logical decoding message per
/// committed call, whose content the relay maps like a default outbox row; rolled
/// back calls (whole transaction or savepoint) emit nothing; bad input is refused.
#[test]
fn outbox_emit_message_is_a_transactional_message_the_relay_can_map() {
    use pgoutbox::outbox::event::ColumnMapping;
    use pgoutbox::outbox::message::MessageRow;

    let db = PgCluster::shared().fresh_db();
    load(&db, "outbox_message.sql");
    let slot = format!("tm_{}", db.name);
    db.psql(&format!(
        "SELECT pg_create_logical_replication_slot('{slot}', 'test_decoding')"
    ));
    let kept = db.psql(
        "BEGIN; SELECT outbox_emit_message('order', '42', 'OrderPaid', '{\"n\": 1}', \
           '{\"traceparent\": \"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01\"}'); \
         SAVEPOINT s; SELECT outbox_emit_message('order', '42', 'Never', '{}'); \
         ROLLBACK TO SAVEPOINT s; COMMIT;",
    );
    let kept = kept.lines().next().unwrap_or_default().to_owned();
    assert_uuid(&kept);
    db.psql("BEGIN; SELECT outbox_emit_message('order', '43', 'Never', '{}'); ROLLBACK;");
    for (call, error) in [
        ("NULL, '1', 't', '{}'", "must not be NULL"),
        ("'o', '1', 't', NULL", "must not be NULL"),
        (
            "'o', '1', 't', '{}', '[]'",
            "headers must be a JSON object of string values",
        ),
        (
            "'o', '1', 't', '{}', '{\"n\": 1}'",
            "headers must be a JSON object of string values",
        ),
        ("'o', '1', 't', '{}', NULL, ''", "prefix must be one of"),
    ] {
        let err = psql_err(&db, &format!("SELECT outbox_emit_message({call})"));
        assert!(err.contains(error), "{call}: {err}");
    }

    let changes = db.psql(&format!(
        "SELECT data FROM pg_logical_slot_get_changes('{slot}', NULL, NULL) \
         WHERE data LIKE 'message:%'"
    ));
    let messages: Vec<&str> = changes.lines().collect();
    assert_eq!(messages.len(), 1, "decoded messages:\n{changes}");
    assert!(
        messages[0].starts_with("message: transactional: 1 prefix: pgoutbox, sz: "),
        "{}",
        messages[0]
    );
    let content = messages[0].split_once("content:").unwrap().1;
    let content = bytes::Bytes::copy_from_slice(content.as_bytes());
    let row = MessageRow::parse(&content, "pgoutbox", "payload").unwrap();
    let event = row
        .resolve(&ColumnMapping::default())
        .unwrap()
        .event(&row.tuple);
    let text = |b: Option<bytes::Bytes>| String::from_utf8(b.unwrap().to_vec()).unwrap();
    assert_eq!(text(event.id), kept);
    assert_eq!(text(event.route_value), "order");
    assert_eq!(text(event.key), "42");
    assert_eq!(text(event.event_type), "OrderPaid");
    assert_eq!(
        text(event.payload),
        r#"{"n": 1}"#,
        "as a jsonb column's text"
    );
    assert!(text(event.timestamp).contains('T'), "ISO 8601 created_at");
    assert_eq!(&*row.headers[0].0, "traceparent");
    db.psql(&format!("SELECT pg_drop_replication_slot('{slot}')"));
}

/// Insert `n` rows with `created_at = now() - age`.
fn insert_aged(db: &TestDb<'_>, n: u32, age: &str) {
    db.psql(&format!(
        "INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload, created_at) \
         SELECT 'order', i::text, 'Aged', '{{}}', now() - interval '{age}' - i * interval '1 second' \
         FROM generate_series(1, {n}) i"
    ));
}

#[test]
fn outbox_cleanup_deletes_exactly_the_old_rows_in_batches() {
    let db = PgCluster::shared().fresh_db();
    load(&db, "outbox_cleanup.sql");
    insert_aged(&db, 25, "10 days");
    insert_aged(&db, 5, "8 days");
    insert_aged(&db, 6, "6 days");
    insert_aged(&db, 4, "0 seconds");
    // Record every DELETE statement and how many rows it removed.
    db.psql(
        "CREATE TABLE delete_log (seq bigserial, n bigint NOT NULL); \
         CREATE FUNCTION log_delete() RETURNS trigger LANGUAGE plpgsql AS $$ \
           BEGIN INSERT INTO delete_log (n) SELECT count(*) FROM old_rows; RETURN NULL; END $$; \
         CREATE TRIGGER log_delete AFTER DELETE ON outbox REFERENCING OLD TABLE AS old_rows \
           FOR EACH STATEMENT EXECUTE FUNCTION log_delete();",
    );

    assert_eq!(db.psql("SELECT outbox_cleanup('7 days', 4)"), "30");
    assert_eq!(
        db.psql("SELECT string_agg(n::text, ',' ORDER BY seq) FROM delete_log"),
        "4,4,4,4,4,4,4,2",
        "batches of at most batch_size rows, stopping at the first short batch"
    );
    assert_eq!(count(&db, "SELECT count(*) FROM outbox"), 10);
    assert_eq!(
        count(
            &db,
            "SELECT count(*) FROM outbox WHERE created_at < now() - interval '7 days'"
        ),
        0
    );
    // Nothing left to do: one empty statement, 0 returned.
    assert_eq!(db.psql("SELECT outbox_cleanup('7 days', 4)"), "0");

    // Defaults (7 days, 10000) and a cutoff that is an exact multiple of the batch.
    insert_aged(&db, 8, "30 days");
    db.psql("TRUNCATE delete_log");
    assert_eq!(db.psql("SELECT outbox_cleanup()"), "8");
    assert_eq!(db.psql("SELECT outbox_cleanup('1 day', 3)"), "6");
    assert_eq!(
        db.psql("SELECT string_agg(n::text, ',' ORDER BY seq) FROM delete_log"),
        "8,3,3,0"
    );
    assert_eq!(count(&db, "SELECT count(*) FROM outbox"), 4);

    // Runs in the caller's transaction: a rollback undoes it.
    assert_eq!(
        db.psql("BEGIN; SELECT outbox_cleanup('0 seconds', 2); ROLLBACK;"),
        "4"
    );
    assert_eq!(count(&db, "SELECT count(*) FROM outbox"), 4);

    for bad in [
        "SELECT outbox_cleanup('7 days', 0)",
        "SELECT outbox_cleanup('7 days', NULL)",
        "SELECT outbox_cleanup('-1 day')",
        "SELECT outbox_cleanup(NULL)",
    ] {
        let err = psql_err(&db, bad);
        assert!(err.contains("outbox_cleanup: "), "{bad}: {err}");
    }
}

#[test]
fn outbox_cleanup_batched_commits_every_batch() {
    let db = PgCluster::shared().fresh_db();
    load(&db, "outbox_cleanup.sql");
    insert_aged(&db, 11, "9 days");
    insert_aged(&db, 3, "1 hour");
    db.psql(
        "CREATE TABLE delete_log (seq bigserial, n bigint NOT NULL, \
           xid bigint NOT NULL DEFAULT txid_current()); \
         CREATE FUNCTION log_delete() RETURNS trigger LANGUAGE plpgsql AS $$ \
           BEGIN INSERT INTO delete_log (n) SELECT count(*) FROM old_rows; RETURN NULL; END $$; \
         CREATE TRIGGER log_delete AFTER DELETE ON outbox REFERENCING OLD TABLE AS old_rows \
           FOR EACH STATEMENT EXECUTE FUNCTION log_delete();",
    );

    assert_eq!(db.psql("CALL outbox_cleanup_batched('7 days', 5)"), "11");
    assert_eq!(
        db.psql("SELECT string_agg(n::text, ',' ORDER BY seq) FROM delete_log"),
        "5,5,1"
    );
    assert_eq!(
        count(&db, "SELECT count(DISTINCT xid) FROM delete_log"),
        3,
        "one transaction per batch"
    );
    assert_eq!(count(&db, "SELECT count(*) FROM outbox"), 3);
    assert_eq!(db.psql("CALL outbox_cleanup_batched()"), "0");

    let err = psql_err(&db, "CALL outbox_cleanup_batched('7 days', 0)");
    assert!(err.contains("batch_size must be at least 1"), "{err}");
}

#[test]
fn outbox_backlog_reports_slot_lag_and_table_age() {
    let db = PgCluster::shared().fresh_db();
    load(&db, "outbox_backlog.sql");
    let cols = "coalesce(slot_name, '-'), outbox_rows, oldest_row_age IS NULL";

    // No slot yet: still one row, so "slot missing" and the table are visible.
    assert_eq!(
        db.psql(&format!("SELECT {cols} FROM outbox_backlog")),
        "-|0|t"
    );

    let slot = format!("bk_{}", db.name);
    let other = format!("bk_td_{}", db.name);
    db.psql(&format!(
        "SELECT pg_create_logical_replication_slot('{slot}', 'pgoutput')"
    ));
    db.psql(&format!(
        "SELECT pg_create_logical_replication_slot('{other}', 'test_decoding')"
    ));
    insert_aged(&db, 3, "2 hours");
    db.psql(
        "INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload) \
         SELECT 'order', i::text, 'New', '{}' FROM generate_series(1, 100) i",
    );

    let row = db.psql(
        "SELECT slot_name, active, temporary, lag_bytes > 0, \
                lag_pretty = pg_size_pretty(lag_bytes::numeric), \
                confirmed_flush_lsn < pg_current_wal_lsn(), retained_bytes >= lag_bytes, \
                wal_status, safe_wal_size IS NULL, outbox_rows, \
                oldest_row_age > interval '2 hours', oldest_row_age < interval '3 hours' \
         FROM outbox_backlog",
    );
    assert_eq!(
        row,
        format!("{slot}|f|f|t|t|t|t|reserved|t|103|t|t"),
        "only the pgoutput slot of this database is listed"
    );

    // Lag keeps growing while the slot is not consumed.
    let before = count(&db, "SELECT lag_bytes FROM outbox_backlog");
    db.psql(
        "INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload) \
         VALUES ('order', 'x', 'More', '{}')",
    );
    let after = count(&db, "SELECT lag_bytes FROM outbox_backlog");
    assert!(after > before, "lag {before} -> {after}");

    db.psql(&format!("SELECT pg_drop_replication_slot('{slot}')"));
    db.psql(&format!("SELECT pg_drop_replication_slot('{other}')"));
    assert_eq!(
        db.psql(&format!("SELECT {cols} FROM outbox_backlog")),
        "-|104|f"
    );
}

#[tokio::test]
async fn consumer_dedup_skips_a_second_delivery() {
    let db = PgCluster::shared().fresh_db();
    load(&db, "consumer_dedup.sql");
    db.psql("CREATE TABLE stock (sku text PRIMARY KEY, reserved int NOT NULL)");
    db.psql("INSERT INTO stock VALUES ('A-1', 0)");
    let client = db.client().await;
    let event_id = "6f1c1a6e-3c1b-4f43-9a4e-1d7f3b2a9c01";
    let mark =
        "INSERT INTO processed_events (event_id) VALUES ($1::text::uuid) ON CONFLICT DO NOTHING";

    // The example consumer transaction, delivered twice.
    for (delivery, expect) in [(1, 1), (2, 0)] {
        client.batch_execute("BEGIN").await.unwrap();
        let inserted = client.execute(mark, &[&event_id]).await.unwrap();
        assert_eq!(inserted, expect, "delivery {delivery}");
        if inserted == 1 {
            client
                .execute(
                    "UPDATE stock SET reserved = reserved + 1 WHERE sku = 'A-1'",
                    &[],
                )
                .await
                .unwrap();
        }
        client.batch_execute("COMMIT").await.unwrap();
    }
    assert_eq!(db.psql("SELECT reserved FROM stock"), "1");
    assert_eq!(
        db.psql("SELECT event_id, processed_at <= now() FROM processed_events"),
        format!("{event_id}|t")
    );

    // A crash before COMMIT (rollback) does not mark the event: the redelivery applies it.
    let other = "0b7e4f3a-8d2c-4e61-b5a9-2c4d6e8f0a13";
    client.batch_execute("BEGIN").await.unwrap();
    assert_eq!(client.execute(mark, &[&other]).await.unwrap(), 1);
    client.batch_execute("ROLLBACK").await.unwrap();
    assert_eq!(client.execute(mark, &[&other]).await.unwrap(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn consumer_dedup_concurrent_duplicate_waits_for_the_first() {
    let db = PgCluster::shared().fresh_db();
    load(&db, "consumer_dedup.sql");
    let mark =
        "INSERT INTO processed_events (event_id) VALUES ($1::text::uuid) ON CONFLICT DO NOTHING";

    for (first_commits, second_expect) in [(true, 0u64), (false, 1u64)] {
        let event_id = if first_commits {
            "11111111-2222-4333-8444-555555555555"
        } else {
            "66666666-7777-4888-9999-aaaaaaaaaaaa"
        };
        let a = db.client().await;
        let b = db.client().await;
        let b_pid: i32 = b
            .query_one("SELECT pg_backend_pid()", &[])
            .await
            .unwrap()
            .get(0);
        a.batch_execute("BEGIN").await.unwrap();
        assert_eq!(a.execute(mark, &[&event_id]).await.unwrap(), 1);

        let second = tokio::spawn(async move {
            b.batch_execute("BEGIN").await.unwrap();
            let n = b.execute(mark, &[&event_id]).await.unwrap();
            b.batch_execute("COMMIT").await.unwrap();
            n
        });
        // The server shows the duplicate's session waiting for a lock it was not
        // granted (the first transaction's id): it started and is blocked.
        let waiting = format!("SELECT count(*) FROM pg_locks WHERE pid = {b_pid} AND NOT granted");
        tokio::task::block_in_place(|| {
            support::wait_for(
                "the duplicate to wait for the first transaction's lock",
                support::WAIT,
                || (count(&db, &waiting) > 0).then_some(()),
            )
        });
        assert!(
            !second.is_finished(),
            "the duplicate must wait for the first transaction"
        );
        a.batch_execute(if first_commits { "COMMIT" } else { "ROLLBACK" })
            .await
            .unwrap();
        let n = tokio::time::timeout(support::WAIT, second)
            .await
            .expect("second consumer finished")
            .unwrap();
        assert_eq!(n, second_expect, "first_commits = {first_commits}");
        assert_eq!(
            count(
                &db,
                &format!("SELECT count(*) FROM processed_events WHERE event_id = '{event_id}'")
            ),
            1
        );
    }
}

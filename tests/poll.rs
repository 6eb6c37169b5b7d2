//! `pgoutbox run --source poll` and `setup --source poll`: real PostgreSQL (a
//! `wal_level=replica` server where logical replication is impossible, and the
//! shared logical one to compare with the slot-based relay), real broker.

use crate::support;

use std::sync::OnceLock;
use std::time::Duration;

use pgoutbox::pg::names::TableName;
use pgoutbox::poll::sql;
use support::kafka::{Broker, Consumed, Reader};
use support::verify::{acks_in, audit_acks, verify};
use support::workload::{
    http_get, read_acked, read_all, run_args, spawn_run, start_relay, start_relay_audited,
    start_run, topics, Writer, WriterConfig,
};
use support::{wait_for, ClusterOptions, PgCluster, Pgoutbox, Rng, TestDb, WAIT};

/// A server where logical replication is impossible: the reason poll mode exists.
fn replica_cluster() -> &'static PgCluster {
    static CLUSTER: OnceLock<PgCluster> = OnceLock::new();
    CLUSTER.get_or_init(|| {
        PgCluster::start(ClusterOptions {
            // Appended after the harness's `wal_level = logical`: the last one wins.
            conf: vec!["wal_level = replica".into()],
            ..ClusterOptions::default()
        })
    })
}

/// `pgoutbox setup --source poll` on `db`'s outbox table.
fn setup_poll(db: &TestDb<'_>, extra: &[&str]) -> String {
    let mut args = vec!["setup", "--source", "poll"];
    let url = db.url();
    args.extend(["--database-url", &url]);
    args.extend(extra);
    let out = Pgoutbox::command(&args, &[]).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "setup --source poll failed: {stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

/// Arguments of a poll relay on `db` (plus `extra`).
fn poll_args(db: &TestDb<'_>, broker: &str, extra: &[&str]) -> Vec<String> {
    let mut all = vec!["--source", "poll"];
    all.extend(extra);
    run_args(db, broker, &all)
}

fn insert(db: &TestDb<'_>, rows: &[(&str, &str, &str)]) {
    let values: Vec<String> = rows
        .iter()
        .map(|(t, k, n)| format!("('{t}', '{k}', 'Happened', '{{\"n\": {n}}}')"))
        .collect();
    db.psql(&format!(
        "INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload) VALUES {}",
        values.join(", ")
    ));
}

/// The values read, in the order read, as text.
fn values(reader: &Reader) -> Vec<String> {
    reader
        .records
        .iter()
        .map(|r| String::from_utf8_lossy(r.value.as_deref().unwrap_or_default()).into_owned())
        .collect()
}

fn unpublished(db: &TestDb<'_>) -> u64 {
    db.psql("SELECT count(*) FROM outbox WHERE published_at IS NULL")
        .trim()
        .parse()
        .unwrap()
}

/// What a consumer compares between the two modes (topic prefix stripped), as text.
fn contract(r: &Consumed, prefix: &str) -> String {
    let topic = r.topic.strip_prefix(prefix).unwrap_or(&r.topic);
    format!(
        "{topic} key={:?} value={:?} headers={:?} ts={:?}",
        r.key, r.value, r.header_list, r.timestamp
    )
}

#[test]
fn poll_mode_records_equal_the_logical_modes_for_the_same_rows() {
    let db = PgCluster::shared().fresh_db();
    let broker = Broker::shared().addr();
    setup_poll(&db, &[]);
    let _logical = start_run(&db, &broker, &[]);
    let poll_prefix = format!("{}_poll.", db.name);
    // The same arguments but another topic prefix (the template flag is given once).
    let mut args = poll_args(&db, &broker, &[]);
    let template = args.iter().position(|a| a == "--topic-template").unwrap() + 1;
    args[template] = format!("{poll_prefix}${{routedByValue}}");
    let _poll = start_relay(&args);
    insert(
        &db,
        &[
            ("order", "k1", "1"),
            ("order", "k1", "2"),
            ("payment", "k2", "3"),
        ],
    );
    insert(&db, &[("payment", "k3", "4")]);
    let logical_topics = topics(&db, &["order", "payment"]);
    let poll_topics: Vec<String> = ["order", "payment"]
        .iter()
        .map(|t| format!("{poll_prefix}{t}"))
        .collect();
    let mut a = Reader::new(&broker, &logical_topics);
    a.read_until("4 logical records", WAIT, |r| r.len() >= 4);
    let mut b = Reader::new(&broker, &poll_topics);
    b.read_until("4 poll records", WAIT, |r| r.len() >= 4);
    a.settle(Duration::from_secs(1));
    b.settle(Duration::from_secs(1));
    let sorted = |records: &[Consumed], prefix: &str| {
        let mut v: Vec<String> = records.iter().map(|r| contract(r, prefix)).collect();
        v.sort();
        v
    };
    let logical = sorted(&a.records, &format!("{}.", db.name));
    assert_eq!(logical.len(), 4, "{logical:?}");
    assert_eq!(logical, sorted(&b.records, &poll_prefix));
    wait_for("every row marked published", WAIT, || {
        (unpublished(&db) == 0).then_some(())
    });
}

#[test]
fn notify_wakes_the_relay_long_before_the_poll_interval() {
    let db = replica_cluster().fresh_db();
    let broker = Broker::shared().addr();
    setup_poll(&db, &[]);
    // A row written before the start makes the startup poll a batch whose end is
    // observable (`batches_total 1` is counted after its commit); rows written after
    // that can only be polled on a NOTIFY, an hour short of the interval.
    insert(&db, &[("order", "k0", "0")]);
    let relay = start_relay(&poll_args(&db, &broker, &["--poll-interval", "1h"]));
    wait_for("the startup poll's batch committed", WAIT, || {
        http_get(&relay, "/metrics")
            .contains("pgoutbox_poll_batches_total 1\n")
            .then_some(())
    });
    insert(&db, &[("order", "k1", "1"), ("order", "k1", "2")]);
    let mut reader = Reader::new(&broker, &topics(&db, &["order"]));
    reader.read_until("all three records", WAIT, |r| r.len() >= 3);
    // The counters move after the batch's commit, which follows the acks.
    let metrics = wait_for("the second batch counted", WAIT, || {
        let m = http_get(&relay, "/metrics");
        m.contains("pgoutbox_poll_rows_published_total 3\n")
            .then_some(m)
    });
    assert!(
        metrics.contains("pgoutbox_poll_wakeups_total{cause=\"notify\"} 1\n")
            && metrics.contains("pgoutbox_poll_wakeups_total{cause=\"interval\"} 1\n"),
        "the startup poll, then one poll woken by the INSERT statement's notification: {metrics}"
    );
    wait_for("backlog gauge at 0", WAIT, || {
        http_get(&relay, "/metrics")
            .contains("pgoutbox_poll_backlog_rows 0\n")
            .then_some(())
    });
}

#[test]
fn a_second_relay_stands_by_and_takes_over_after_kill_9() {
    let db = replica_cluster().fresh_db();
    let broker = Broker::shared().addr();
    setup_poll(&db, &[]);
    let args = poll_args(&db, &broker, &["--poll-interval", "200ms"]);
    let active = start_relay(&args);
    let standby = Pgoutbox::spawn(&args);
    standby.wait_stderr("standing by to take over", WAIT);
    let readyz = http_get(&standby, "/readyz");
    assert!(readyz.contains("role: standby"), "{readyz}");
    insert(&db, &[("order", "k1", "1")]);
    let mut reader = Reader::new(&broker, &topics(&db, &["order"]));
    reader.read_until("the first record", WAIT, |r| r.len() == 1);
    // Killed between the broker's ack and the mark, the active relay leaves the row
    // unpublished and the standby sends it again (at least once): kill it only once
    // the row is marked, so a second copy of it would be the standby's mistake.
    wait_for("the first row marked published", WAIT, || {
        (unpublished(&db) == 0).then_some(())
    });
    assert!(!standby.stderr().contains("relaying outbox to kafka"));
    active.signal("KILL");
    standby.wait_stderr("relaying outbox to kafka by polling", WAIT);
    insert(&db, &[("order", "k1", "2")]);
    reader.read_until("the record sent by the new active relay", WAIT, |r| {
        r.len() >= 2
    });
    reader.settle(Duration::from_secs(1));
    let ns = values(&reader);
    assert_eq!(ns, [r#"{"n": 1}"#, r#"{"n": 2}"#]);
}

#[test]
fn poll_mark_delete_empties_the_table_after_the_acks() {
    let db = replica_cluster().fresh_db();
    let broker = Broker::shared().addr();
    setup_poll(&db, &[]);
    insert(
        &db,
        &[
            ("order", "k1", "1"),
            ("order", "k2", "2"),
            ("order", "k3", "3"),
        ],
    );
    let _relay = start_relay(&poll_args(
        &db,
        &broker,
        &["--poll-mark", "delete", "--poll-batch-size", "2"],
    ));
    let mut reader = Reader::new(&broker, &topics(&db, &["order"]));
    reader.read_until("three records", WAIT, |r| r.len() >= 3);
    wait_for("the rows deleted", WAIT, || {
        (db.psql("SELECT count(*) FROM outbox").trim() == "0").then_some(())
    });
    reader.settle(Duration::from_secs(1));
    assert_eq!(reader.records.len(), 3);
}

#[test]
fn run_without_setup_names_what_is_missing_and_the_setup_command() {
    let db = replica_cluster().fresh_db();
    let broker = Broker::shared().addr();
    let mut relay = spawn_run(&db, &broker, &["--source", "poll"]);
    let status = relay.wait_exit(WAIT);
    assert!(!status.success());
    let log = relay.stderr();
    assert!(
        log.contains("outbox table public.outbox is not set up for poll mode: no column \"published_at\", no column \"seq\"")
            && log.contains("pgoutbox setup --source poll --table public.outbox"),
        "{log}"
    );
    // setup is idempotent: the second run adds nothing.
    assert!(setup_poll(&db, &[]).contains("added column(s) published_at, seq"));
    assert!(setup_poll(&db, &[]).contains("columns already present"));
    let printed = Pgoutbox::command(&["setup", "--source", "poll", "--print-sql"], &[])
        .output()
        .unwrap();
    let printed = String::from_utf8_lossy(&printed.stdout);
    assert!(
        printed.contains("CREATE TRIGGER pgoutbox_poll_notify") && !printed.contains("PUBLICATION"),
        "{printed}"
    );
}

/// Order is the ordering column's, not commit order, exactly as documented: rows of
/// one transaction keep their insert order (equal `created_at` does not scramble
/// them); a long transaction's row committed after a newer row was published
/// arrives after it.
#[test]
fn order_follows_the_ordering_column_and_a_long_transaction_arrives_late() {
    let db = replica_cluster().fresh_db();
    let broker = Broker::shared().addr();
    setup_poll(&db, &[]);
    let relay = start_relay(&poll_args(
        &db,
        &broker,
        &["--poll-interval", "100ms", "--poll-batch-size", "7"],
    ));
    let rt = tokio::runtime::Runtime::new().unwrap();
    let long = rt.block_on(db.client());
    rt.block_on(long.batch_execute(
        "BEGIN; INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload) VALUES ('order', 'k', 'Happened', '{\"n\": \"long\"}')",
    ))
    .unwrap();
    // 50 rows of one key in one transaction: one created_at for all of them.
    let rows: Vec<(&str, &str, String)> = (0..50).map(|n| ("order", "k", n.to_string())).collect();
    let rows: Vec<(&str, &str, &str)> = rows.iter().map(|(t, k, n)| (*t, *k, n.as_str())).collect();
    insert(&db, &rows);
    let mut reader = Reader::new(&broker, &topics(&db, &["order"]));
    reader.read_until("the 50 rows", WAIT, |r| r.len() >= 50);
    rt.block_on(long.batch_execute("COMMIT")).unwrap();
    reader.read_until("the long transaction's row", WAIT, |r| r.len() >= 51);
    let ns = values(&reader);
    let mut expected: Vec<String> = (0..50).map(|n| format!("{{\"n\": {n}}}")).collect();
    expected.push(r#"{"n": "long"}"#.to_owned());
    assert_eq!(ns, expected, "relay log:\n{}", relay.stderr());
}

/// Kill -9 the poll relay 20 times under load (the fault suite's writer and
/// verifier): nothing lost, nothing reordered per key (one serial writer, so the
/// ordering column's order is commit order), duplicates at most one batch per
/// kill. `PGOUTBOX_POLL_KILLS` changes the number of cycles.
#[test]
fn poll_relay_kill_9_cycles_under_load_lose_nothing() {
    const BATCH: usize = 200;
    const BIG: usize = 5_000;
    const SAMPLE: usize = 300;
    let kills: usize = std::env::var("PGOUTBOX_POLL_KILLS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20);
    let db = replica_cluster().fresh_db();
    let broker = Broker::shared().addr();
    setup_poll(&db, &[]);
    let batch = BATCH.to_string();
    let args = poll_args(&db, &broker, &["--poll-batch-size", &batch]);
    let mut relay = start_relay_audited(&args);
    let mut acks = Vec::new();
    let writer = Writer::spawn(WriterConfig {
        url: db.url(),
        seed: 15,
        types: vec!["order", "payment"],
        keys: 50,
        max_rows: 20,
        rollbacks: true,
        pause: Duration::from_millis(20),
    });
    let published = || -> u64 {
        db.psql("SELECT count(*) FROM outbox WHERE published_at IS NOT NULL")
            .trim()
            .parse()
            .unwrap()
    };
    let mut rng = Rng::new(7);
    let (mut big, mut mid_backlog) = (0, 0);
    for cycle in 0..kills {
        let before = published();
        if cycle % 5 == 4 {
            // A backlog drained in full batches: kill while it is being drained, so
            // the batch in flight is a full one.
            let ids = writer.big_transaction(BIG);
            // A sample stands for the transaction (5,000 ids overflow psql's argv).
            let ids: Vec<String> = ids
                .into_iter()
                .take(SAMPLE)
                .map(|id| format!("'{id}'"))
                .collect();
            let done = || -> u64 {
                db.psql(&format!(
                    "SELECT count(*) FROM outbox WHERE published_at IS NOT NULL AND id IN ({})",
                    ids.join(",")
                ))
                .trim()
                .parse()
                .unwrap()
            };
            let seen = wait_for("the large transaction's first batch", WAIT, || {
                let n = done();
                (n > 0).then_some(n)
            });
            big += 1;
            mid_backlog += usize::from(seen < SAMPLE as u64);
        } else {
            wait_for(
                &format!("progress before kill #{}", cycle + 1),
                WAIT,
                || (published() > before).then_some(()),
            );
            std::thread::sleep(Duration::from_millis(rng.range(0, 1500)));
        }
        relay.signal("KILL");
        relay.wait_exit(WAIT);
        acks.extend(acks_in(&relay.stderr()));
        relay = start_relay_audited(&args);
    }
    let (ledger, stats) = writer.finish();
    let mut reader = Reader::new(&broker, &topics(&db, &["order", "payment"]));
    let complete = read_all(&mut reader, &ledger, WAIT * 5);
    // Every offset a relay was told it wrote is read back with its record.
    acks.extend(acks_in(&relay.stderr()));
    read_acked(&mut reader, &acks, WAIT);
    reader.settle(Duration::from_secs(2));
    let audit = audit_acks(&acks, &reader.records);
    eprintln!("poll kill -9 ack audit: {audit:?}");
    audit.assert_clean();
    let verdict = verify(&ledger, &reader.records);
    eprintln!(
        "FIGURES poll relay kill -9: kills={kills} (during a {BIG}-row backlog: {mid_backlog}/{big}) batch={BATCH} written={} delivered={} lost={} unexpected={} reordered={} duplicated_total={} duplicated_max_copies={} writer={stats:?}",
        verdict.committed, verdict.delivered, verdict.lost, verdict.unexpected, verdict.reordered, verdict.duplicated_total, verdict.duplicated_max
    );
    assert!(
        complete,
        "not every committed event arrived: {verdict:?}\n{}",
        relay.stderr()
    );
    verdict.assert_no_loss();
    assert!(
        verdict.duplicated_total <= kills * BATCH,
        "duplicates beyond one batch per kill: {verdict:?}"
    );
    wait_for("every row marked", WAIT, || {
        (unpublished(&db) == 0).then_some(())
    });
}

#[test]
fn poll_settings_come_from_flags_env_and_the_config_file() {
    let file = std::env::temp_dir().join(format!("pgoutbox-poll-{}.toml", std::process::id()));
    std::fs::write(
        &file,
        "brokers = \"b:1\"\nsource = \"poll\"\npoll_batch_size = 7\npoll_mark = \"delete\"\n",
    )
    .unwrap();
    let file = file.display().to_string();
    let show = |args: &[&str], env: &[(&str, &str)]| {
        let mut all = vec!["config", "show", "--config", &file];
        all.extend_from_slice(args);
        let out = Pgoutbox::command(&all, env).output().unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let out = show(&[], &[]);
    for line in [
        "source = \"poll\"",
        "poll_batch_size = 7",
        "poll_interval = \"1s\"",
        "poll_mark = \"delete\"",
        "poll_order_by = \"seq\"",
    ] {
        assert!(out.contains(line), "{line} in {out}");
    }
    let out = show(
        &["--poll-order-by", "n"],
        &[("PGOUTBOX_POLL_INTERVAL", "250ms")],
    );
    assert!(
        out.contains("poll_interval = \"250ms\"") && out.contains("poll_order_by = \"n\""),
        "{out}"
    );
    let out = show(&["--source", "logical"], &[]);
    assert!(
        out.contains("source = \"logical\"") && !out.contains("poll_batch_size"),
        "{out}"
    );
}

/// A broker outage: the claimed batch is never marked while unacked, `/readyz`
/// says so, the stall watch rolls the batch back and retries, and everything
/// arrives once the broker is back.
#[test]
fn broker_outage_never_marks_unacked_rows_and_drains_after() {
    let db = replica_cluster().fresh_db();
    let broker = Broker::start();
    setup_poll(&db, &[]);
    let relay = start_relay(&poll_args(&db, &broker.addr(), &["--stall-timeout", "3s"]));
    insert(&db, &[("order", "k1", "1")]);
    wait_for("the first row published", WAIT, || {
        (unpublished(&db) == 0).then_some(())
    });
    broker.stop();
    insert(&db, &[("order", "k1", "2"), ("order", "k2", "3")]);
    wait_for("/readyz to report the outage", WAIT, || {
        http_get(&relay, "/readyz")
            .starts_with("HTTP/1.1 503")
            .then_some(())
    });
    wait_for("a stall detected and the batch rolled back", WAIT, || {
        relay.stderr().contains("poll batch stalled").then_some(())
    });
    assert_eq!(unpublished(&db), 2, "rows marked without an ack");
    broker.resume();
    wait_for("the backlog drained after the outage", WAIT * 2, || {
        (unpublished(&db) == 0).then_some(())
    });
    let mut reader = Reader::new(&broker.addr(), &topics(&db, &["order"]));
    reader.read_until("all three events", WAIT, |r| {
        let ns: std::collections::HashSet<_> = r.iter().filter_map(|r| r.value.clone()).collect();
        ns.len() == 3
    });
}

/// A relay that becomes active while its killed predecessor's batch transaction
/// still holds its rows (the predecessor's lock session ended first) waits for that
/// batch to end instead of skipping the locked rows: they go first, in order. Seen
/// as `reordered` in the kill -9 cycles below on a loaded machine.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_active_relay_waits_for_its_predecessors_batch() {
    let db = replica_cluster().fresh_db();
    let broker = Broker::shared().addr();
    setup_poll(&db, &[]);
    insert(
        &db,
        &[
            ("order", "k1", "1"),
            ("order", "k1", "2"),
            ("order", "k1", "3"),
        ],
    );
    // The predecessor's open batch: its first row claimed, nothing marked yet.
    let (blocker, conn) = tokio_postgres::connect(&db.url(), tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(conn);
    blocker
        .batch_execute(&format!(
            "{}; SELECT id FROM outbox WHERE published_at IS NULL ORDER BY seq LIMIT 1 FOR UPDATE",
            sql::begin(&TableName::parse("public.outbox").unwrap())
        ))
        .await
        .unwrap();
    let _relay = start_relay(&poll_args(&db, &broker, &[]));
    let waiting = || {
        db.psql(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() \
             AND wait_event_type = 'Lock' AND state = 'active'",
        ) != "0"
    };
    // Fixed: the relay waits for the batch. Broken: it publishes rows 2 and 3.
    wait_for(
        "the relay to wait for the batch, or to publish",
        WAIT,
        || (waiting() || unpublished(&db) < 3).then_some(()),
    );
    blocker.batch_execute("ROLLBACK").await.unwrap();
    let mut reader = Reader::new(&broker, &topics(&db, &["order"]));
    reader.read_until("the three records", WAIT, |r| r.len() >= 3);
    reader.settle(Duration::from_secs(1));
    let ns = values(&reader);
    assert_eq!(ns, [r#"{"n": 1}"#, r#"{"n": 2}"#, r#"{"n": 3}"#]);
}

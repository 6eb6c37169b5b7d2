//! Failover: a PostgreSQL 17 primary with a physical standby ([`support::standby`]).
//!
//! - `target_session_attrs` picks the right server of a two-host list, for the
//!   replication connection and for the SQL connection alike, whatever the order; on
//!   PostgreSQL 13 (no `in_hot_standby` report) by asking the server.
//! - The relay, given both hosts with `target_session_attrs=read-write`, survives the
//!   primary's death (`pg_ctl stop -m immediate`) and the standby's promotion by
//!   itself, from the failover slot synchronized to the standby: every event present
//!   on the new primary is delivered (lost 0), none from a transaction the failover
//!   undid (unexpected 0), duplicates bounded. Expected events are the writer's
//!   committed events that exist on the new primary: asynchronous replication may
//!   lose the last commits of the old one, and those never happened.
//!
//! The relay creates its logical slot itself, with `failover` (its default on
//! PostgreSQL 17+); the test checks that and waits until the slot is synchronized to
//! the standby before the fault.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use pgoutbox::pg::client::connection::{PgConnection, PgError};
use pgoutbox::pg::client::conninfo::ConnInfo;
use pgoutbox::pg::source::catalog;
use pgoutbox::pg::source::sql_client;

use crate::support::kafka::{Broker, Reader};
use crate::support::standby::Pair;
use crate::support::verify::{verify, Ledger};
use crate::support::workload::{
    http_get, read_all, run_args_via, start_relay, topics, Writer, WriterConfig,
};
use crate::support::{wait_for, PgCluster, Pgoutbox, WAIT};

const TYPES: [&str; 2] = ["order", "customer"];

/// The port of the server a connection string leads to, through the replication
/// connection and through the SQL connection (which must agree), checked against
/// the server's own idea of its port.
async fn chosen_port(conn: &str) -> Result<u16, String> {
    let info = ConnInfo::parse(conn).map_err(|e| e.to_string())?;
    let mut repl = PgConnection::connect(&info, true)
        .await
        .map_err(|e| e.to_string())?;
    let rows = repl
        .simple_query("SELECT inet_server_port()")
        .await
        .unwrap();
    let server_port: u16 = rows[0].values[0].as_deref().unwrap().parse().unwrap();
    assert_eq!(repl.host().port, server_port, "{conn}");
    let (client, host) = sql_client::connect_on(&info)
        .await
        .map_err(|e| e.to_string())?;
    let row = client
        .query_one("SELECT inet_server_port()", &[])
        .await
        .unwrap();
    assert_eq!(host.port, row.get::<_, i32>(0) as u16, "{conn}");
    assert_eq!(
        host.port, server_port,
        "both connections choose alike: {conn}"
    );
    Ok(server_port)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn target_session_attrs_choose_the_right_server() {
    let pair = tokio::task::spawn_blocking(Pair::start).await.unwrap();
    let (p, s) = (pair.primary.port, pair.standby.port);
    let url = |first: u16, second: u16, attrs: &str| {
        format!(
            "postgres://postgres@127.0.0.1:{first},127.0.0.1:{second}/postgres\
             ?sslmode=disable&target_session_attrs={attrs}"
        )
    };
    for (first, second) in [(p, s), (s, p)] {
        let pick = |attrs: &'static str| chosen_port_owned(url(first, second, attrs));
        assert_eq!(pick("any").await, Ok(first));
        assert_eq!(pick("read-write").await, Ok(p));
        assert_eq!(pick("primary").await, Ok(p));
        assert_eq!(pick("read-only").await, Ok(s));
        assert_eq!(pick("standby").await, Ok(s));
        assert_eq!(pick("prefer-standby").await, Ok(s));
    }
    // The keyword form, with one port per host.
    let kv = format!(
        "host=127.0.0.1,127.0.0.1 port={s},{p} user=postgres dbname=postgres sslmode=disable \
         target_session_attrs=read-write"
    );
    assert_eq!(chosen_port(&kv).await, Ok(p));
    // prefer-standby with no standby listed: any server.
    let only_primary = format!(
        "postgres://postgres@127.0.0.1:{p}/postgres?sslmode=disable&target_session_attrs=prefer-standby"
    );
    assert_eq!(chosen_port(&only_primary).await, Ok(p));
    // Nothing acceptable: every host is named with why it was passed over.
    let refused = ConnInfo::parse(&url(s, 1, "read-write")).unwrap();
    let err = PgConnection::connect(&refused, true)
        .await
        .err()
        .expect("no read-write server");
    assert!(matches!(err, PgError::NoHost(_)), "{err}");
    assert!(
        err.is_transient(),
        "a failover may still promote one: {err}"
    );
    let text = err.to_string();
    assert!(
        text.contains(&format!("127.0.0.1:{s}: session is read-only"))
            && text.contains("; connecting to 127.0.0.1:1: ")
            && text.contains("target_session_attrs=read-write"),
        "{text}"
    );
    let sql_err = catalog::connect(&refused)
        .await
        .expect_err("no read-write server");
    assert!(sql_err.is_transient(), "{sql_err}");
    assert!(
        sql_err
            .to_string()
            .contains(&format!("127.0.0.1:{s}: session is read-only")),
        "{sql_err}"
    );
}

/// PostgreSQL 13 reports neither `in_hot_standby` nor `default_transaction_read_only`,
/// so the state check asks (`SHOW transaction_read_only`, `pg_is_in_recovery()`),
/// on the replication connection in simple-query mode as on the SQL connection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn target_session_attrs_ask_servers_before_14() {
    let cluster = PgCluster::of_major(13).await;
    let p = cluster.port;
    let conn = |attrs: &str| {
        format!(
            "postgres://postgres@127.0.0.1:1,127.0.0.1:{p}/postgres?sslmode=disable\
             &target_session_attrs={attrs}"
        )
    };
    assert_eq!(chosen_port(&conn("read-write")).await, Ok(p));
    assert_eq!(chosen_port(&conn("primary")).await, Ok(p));
    let refused = chosen_port(&conn("standby")).await.unwrap_err();
    assert!(
        refused.contains("server is not in hot standby mode"),
        "{refused}"
    );
    cluster.psql(
        "postgres",
        "ALTER SYSTEM SET default_transaction_read_only = on",
    );
    cluster.psql("postgres", "SELECT pg_reload_conf()");
    wait_for("the read-only default to apply", WAIT, || {
        (cluster.psql("postgres", "SHOW default_transaction_read_only") == "on").then_some(())
    });
    let refused = chosen_port(&conn("read-write")).await.unwrap_err();
    assert!(refused.contains("session is read-only"), "{refused}");
    assert_eq!(chosen_port(&conn("read-only")).await, Ok(p));
    assert_eq!(chosen_port(&conn("primary")).await, Ok(p));
}

/// [`chosen_port`] on an owned string (for a closure's future).
async fn chosen_port_owned(conn: String) -> Result<u16, String> {
    chosen_port(&conn).await
}

/// `pgoutbox_heartbeats_seen_total` of `relay`.
fn heartbeats_seen(relay: &Pgoutbox) -> f64 {
    http_get(relay, "/metrics")
        .lines()
        .find_map(|l| l.strip_prefix("pgoutbox_heartbeats_seen_total "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0.0)
}

fn log_tail(relay: &Pgoutbox) -> String {
    let log = relay.stderr();
    let lines: Vec<&str> = log.lines().collect();
    lines[lines.len().saturating_sub(60)..].join("\n")
}

/// Insert one marker event on `db` of the server `pair.standby` (the new primary);
/// its id.
fn insert_marker(pair: &Pair, db: &str) -> String {
    pair.standby.psql(
        db,
        "INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload) \
         VALUES ('order', 'marker', 'AfterFailover', '{}') RETURNING id",
    )
}

#[test]
fn relay_resumes_on_the_promoted_standby() {
    resumes_on_the_promoted_standby(false);
}

/// The same failover with `--delivery exactly-once` on Apache Kafka: the
/// watermark written on the old primary is at or below what the standby flushed
/// (`synchronized_standby_slots` holds the relay back until it has), so the relay
/// resumes on the new primary after it and a read_committed reader sees no event
/// twice.
#[test]
fn relay_with_exactly_once_resumes_on_the_promoted_standby_sending_nothing_twice() {
    resumes_on_the_promoted_standby(true);
}

fn resumes_on_the_promoted_standby(eos: bool) {
    let pair = Pair::start();
    let db = pair.primary.fresh_db();
    let url = pair.url(&db.name, "read-write");
    let broker = if eos {
        Broker::shared_kafka().addr()
    } else {
        Broker::shared().addr()
    };
    let mut args = vec!["--heartbeat-interval".to_owned(), "500ms".to_owned()];
    if eos {
        args.extend(crate::exactly_once::eos_args(&db, &[]));
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let relay = start_relay(&run_args_via(&db, &url, &broker, &args));
    let writer = Writer::spawn(WriterConfig {
        url: url.clone(),
        seed: 17,
        types: TYPES.to_vec(),
        keys: 40,
        max_rows: 10,
        rollbacks: true,
        pause: Duration::from_millis(10),
    });
    wait_for("the writer's first 300 events", WAIT, || {
        (writer.committed() >= 300).then_some(())
    });
    let mut reader = Reader::new(&broker, &topics(&db, &TYPES));
    let before = writer.ledger_snapshot();
    assert!(
        read_all(&mut reader, &before, WAIT * 2),
        "events before the failover: {}",
        log_tail(&relay)
    );
    // The relay created its slot itself, as a failover slot (PostgreSQL 17+).
    assert_eq!(
        db.psql(&format!(
            "SELECT failover FROM pg_replication_slots WHERE slot_name = '{}'",
            db.name
        )),
        "t",
        "the relay creates its slot with failover on PostgreSQL 17+"
    );
    pair.wait_slot_synced(&db.name);
    // More load with the slot synced, then the fault mid-stream.
    let target = writer.committed() + 300;
    wait_for("300 more events", WAIT, || {
        (writer.committed() >= target).then_some(())
    });
    // Only events committed before the fault can be delivered by the first session,
    // so only they can come again from the second.
    let committed_before = writer.committed();
    pair.primary.stop("immediate");
    // Until a standby is promoted there is no server to relay from: the relay walks
    // both hosts on every retry, finds the old primary gone and the standby
    // read-only, and keeps trying.
    relay.wait_stderr("session is read-only", WAIT);
    let promoting = Instant::now();
    pair.promote();
    let promoted = promoting.elapsed();
    let marker = insert_marker(&pair, &db.name);
    let found = reader.try_read_until(WAIT * 3, |records| records.iter().any(|r| r.id() == marker));
    assert!(found, "no event after the failover:\n{}", log_tail(&relay));
    let resumed = promoting.elapsed();
    // Heartbeats follow the stream: one seen after the marker (WAL after the
    // promotion) was emitted on the new primary.
    let seen = heartbeats_seen(&relay);
    wait_for("a heartbeat back from the new primary", WAIT, || {
        (heartbeats_seen(&relay) > seen).then_some(())
    });
    let target = writer.committed() + 200;
    wait_for("200 events on the new primary", WAIT, || {
        (writer.committed() >= target).then_some(())
    });
    let (ledger, stats) = writer.finish();
    let on_new_primary: HashSet<String> = pair
        .standby
        .psql(&db.name, "SELECT id FROM outbox")
        .lines()
        .map(str::to_owned)
        .collect();
    let mut expected = Ledger::default();
    for (id, key) in &ledger.committed {
        if on_new_primary.contains(id) {
            expected.push(id.clone(), key.clone());
        }
    }
    expected.push(marker, "marker".into());
    let undone = ledger.len() + 1 - expected.len();
    let complete = read_all(&mut reader, &expected, WAIT * 3);
    reader.settle(Duration::from_secs(2));
    let verdict = verify(&expected, &reader.records);
    eprintln!(
        "FIGURES failover{}: expected={} delivered={} lost={} unexpected={} reordered={} \
         duplicated_total={} duplicated_max_copies={} undone_by_failover={undone} \
         committed_before_fault={committed_before} promote_s={:.1} resume_s={:.1} \
         (pg_ctl promote → first event committed on the new primary delivered) \
         writer={stats:?}",
        if eos { " (exactly-once)" } else { "" },
        verdict.committed,
        verdict.delivered,
        verdict.lost,
        verdict.unexpected,
        verdict.reordered,
        verdict.duplicated_total,
        verdict.duplicated_max,
        promoted.as_secs_f64(),
        resumed.as_secs_f64(),
    );
    let log = relay.stderr();
    let walk: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("WARN") || l.contains("connected for replication"))
        .take(4)
        .collect();
    eprintln!("relay during the failover:\n{}", walk.join("\n"));
    assert!(
        complete,
        "not every expected event arrived: {verdict:?}\n{}",
        log_tail(&relay)
    );
    verdict.assert_no_loss();
    if eos {
        assert_eq!(
            verdict.duplicated_total,
            0,
            "a read_committed reader saw events twice: {verdict:?}\n{}",
            log_tail(&relay)
        );
    }
    // One resumption from a synchronized slot that may lag what the relay confirmed
    // on the old primary: each event at most once again, and only events committed
    // before the fault.
    assert!(verdict.duplicated_max <= 2, "{verdict:?}");
    assert!(
        verdict.duplicated_total <= committed_before,
        "{verdict:?}, committed before the fault: {committed_before}"
    );
    let sessions = relay.stderr().matches("relaying outbox to kafka").count();
    assert_eq!(sessions, 2, "one session per server:\n{}", log_tail(&relay));
}

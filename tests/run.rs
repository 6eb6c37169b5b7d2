//! `pgoutbox run` end to end: real PostgreSQL, a real broker (Apache Kafka, or tansu),
//! records read back with rdkafka over real sockets.

use crate::support;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::debezium::fixtures::java_partition;
use support::kafka::broker::Kind;
use support::kafka::{Broker, Reader};
use support::verify::{acks_in, assert_acked_or_read, audit_acks, explain_lost, verify, Ledger};
use support::workload::{
    current_lsn, http_addr, http_get, read_acked, slot_lsn, spawn_run, start_run,
    start_run_audited, topics, write_events, Workload,
};
use support::{wait_for, PgCluster, Rng, WAIT};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn twenty_thousand_events_arrive_exactly_once_with_contract_fields() {
    let db = PgCluster::shared().fresh_db();
    let broker = Broker::shared();
    let relay = start_run_audited(&db, &broker.addr(), &[]);
    let client = db.client().await;
    let mut rng = Rng::new(20_000);
    let mut ledger = Ledger::default();
    let types = ["order", "payment"];
    write_events(
        &client,
        &mut rng,
        &mut ledger,
        &Workload {
            types: &types,
            keys: 20,
            max_rows: 100,
            rollbacks: true,
        },
        20_000,
    )
    .await;

    let mut reader = Reader::new(&broker.addr(), &topics(&db, &types));
    let complete = reader.try_read_until(WAIT * 3, |r| r.len() >= 20_000);
    reader.settle(Duration::from_secs(2));
    let acks = acks_in(&relay.stderr());
    assert!(
        complete,
        "{}",
        explain_lost(&ledger, &reader.records, &acks, 10)
    );
    audit_acks(&acks, &reader.records).assert_clean();
    let verdict = verify(&ledger, &reader.records);
    verdict.assert_no_loss();
    assert_eq!(
        verdict.duplicated_total, 0,
        "no restart happened: {verdict:?}"
    );
    assert_eq!(verdict.delivered, 20_000);

    // Every field against the row as PostgreSQL stored it.
    let rows: HashMap<String, (String, String, String, i64)> = client
        .query(
            "SELECT id::text, aggregate_type, aggregate_id, payload::text, \
                    floor(extract(epoch from created_at) * 1000)::bigint FROM outbox",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), (r.get(1), r.get(2), r.get(3), r.get(4))))
        .collect();
    for rec in &reader.records {
        let (agg_type, agg_id, payload, created_ms) = &rows[&rec.id()];
        assert_eq!(rec.topic, format!("{}.{agg_type}", db.name));
        assert_eq!(rec.key.as_deref(), Some(agg_id.as_bytes()));
        assert_eq!(rec.value.as_deref(), Some(payload.as_bytes()));
        assert_eq!(rec.header("event_type").as_deref(), Some("Happened"));
        assert_eq!(rec.timestamp, Some(*created_ms), "timestamp = created_at");
    }
    // Each key on the partition the Java client would put it on (Debezium's
    // consumers see the same placement), so per-key order is checkable at all.
    for rec in &reader.records {
        let key = rec.key.as_deref().unwrap();
        let partitions = reader.partitions_of(&rec.topic);
        assert_eq!(
            java_partition(key, partitions),
            u32::try_from(rec.partition).unwrap(),
            "key {:?} of {} partitions",
            String::from_utf8_lossy(key),
            partitions
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slot_is_not_confirmed_past_events_the_broker_has_not_acked() {
    let db = PgCluster::shared().fresh_db();
    let broker = Broker::start();
    let relay = start_run(&db, &broker.addr(), &[]);
    let client = db.client().await;
    let mut rng = Rng::new(7);
    let mut ledger = Ledger::default();
    write_events(
        &client,
        &mut rng,
        &mut ledger,
        &Workload {
            types: &["order"],
            keys: 5,
            max_rows: 5,
            rollbacks: false,
        },
        10,
    )
    .await;
    let mut reader = Reader::new(&broker.addr(), &topics(&db, &["order"]));
    reader.read_until("the first 10 records", WAIT, |r| r.len() >= 10);
    drop(reader);

    broker.stop();
    let mut ledger_down = Ledger::default();
    write_events(
        &client,
        &mut rng,
        &mut ledger_down,
        &Workload {
            types: &["order"],
            keys: 5,
            max_rows: 10,
            rollbacks: false,
        },
        50,
    )
    .await;
    let committed = current_lsn(&db);
    // For 30 s the slot must stay below the commit of the unacknowledged events.
    let (since, down) = (Instant::now(), Duration::from_secs(30));
    support::hold_for(since, down, Duration::from_millis(500), || {
        let confirmed = slot_lsn(&db, "confirmed_flush_lsn");
        assert!(
            confirmed < committed,
            "slot confirmed {confirmed} ≥ {committed} while the broker is down"
        );
    });
    broker.resume();
    let mut reader = Reader::new(&broker.addr(), &topics(&db, &["order"]));
    let complete = reader.try_read_until(WAIT * 2, |r| {
        let ids: std::collections::HashSet<String> = r.iter().map(|c| c.id()).collect();
        ledger_down.committed.iter().all(|(id, _)| ids.contains(id))
    });
    assert!(
        complete,
        "events written while the broker was down did not arrive; relay:\n{}",
        relay.stderr()
    );
    wait_for("slot to advance past the delivered events", WAIT, || {
        (slot_lsn(&db, "confirmed_flush_lsn") >= committed).then_some(())
    });
    assert!(relay.child.id() > 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_outbox_on_a_busy_database_does_not_pin_wal() {
    let db = PgCluster::shared().fresh_db();
    let broker = Broker::shared();
    let _relay = start_run(&db, &broker.addr(), &[]);
    db.psql("CREATE TABLE busy (id bigserial primary key, v text)");
    let client = db.client().await;
    for _ in 0..100 {
        let mut sql = String::new();
        for _ in 0..100 {
            sql.push_str("INSERT INTO busy (v) VALUES (repeat('x', 200));");
        }
        client.batch_execute(&sql).await.unwrap(); // 100 statements = 100 transactions
    }
    // Lag behind the end of those transactions, a fixed position: the cluster is
    // shared with tests that write all the time, and a slot trails a moving
    // `pg_current_wal_lsn()` by whatever they wrote since its last status update.
    let written = current_lsn(&db);
    let lag = || written.bytes_since(slot_lsn(&db, "confirmed_flush_lsn"));
    let before = lag();
    wait_for("slot lag to drop below 1 MB", WAIT, || {
        (lag() < 1 << 20).then_some(())
    });
    eprintln!(
        "idle outbox: lag after 10,000 foreign transactions {before} bytes → {} bytes",
        lag()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_mid_stream_loses_nothing() {
    let db = PgCluster::shared().fresh_db();
    let broker = Broker::shared();
    let mut relay = start_run_audited(&db, &broker.addr(), &[]);
    let ledger = Arc::new(Mutex::new(Ledger::default()));
    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let (ledger, stop, url) = (ledger.clone(), stop.clone(), db.url());
        tokio::spawn(async move {
            let (client, conn) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
                .await
                .unwrap();
            tokio::spawn(conn);
            let mut rng = Rng::new(99);
            // Bounded, so the test's size does not depend on the machine's speed.
            while !stop.load(Ordering::Relaxed) && ledger.lock().unwrap().len() < 15_000 {
                let mut local = Ledger::default();
                write_events(
                    &client,
                    &mut rng,
                    &mut local,
                    &Workload {
                        types: &["order"],
                        keys: 10,
                        max_rows: 20,
                        rollbacks: false,
                    },
                    20,
                )
                .await;
                ledger.lock().unwrap().committed.extend(local.committed);
            }
        })
    };
    let topic = topics(&db, &["order"]);
    let mut reader = Reader::new(&broker.addr(), &topic);
    reader.read_until("some records before the kill", WAIT, |r| r.len() >= 500);
    relay.signal("KILL");
    relay.wait_exit(WAIT);
    let mut acks = acks_in(&relay.stderr());
    let relay2 = start_run_audited(&db, &broker.addr(), &[]);
    reader.read_until("more records after the restart", WAIT, |r| r.len() >= 2_000);
    stop.store(true, Ordering::Relaxed);
    writer.await.unwrap();
    let ledger = ledger.lock().unwrap().clone();
    let ids: std::collections::HashSet<String> =
        ledger.committed.iter().map(|(id, _)| id.clone()).collect();
    // A wait, not the verdict: on a saturated machine the reader may need longer
    // than this, and reads on below (acked offsets); `lost` decides.
    reader.try_read_until(WAIT * 2, |r| {
        let got: std::collections::HashSet<String> = r.iter().map(|c| c.id()).collect();
        ids.iter().all(|id| got.contains(id))
    });
    // The broker's side: every record either relay got an ack for is read back at
    // the acked offset (reading on until each acked offset was reached).
    acks.extend(acks_in(&relay2.stderr()));
    read_acked(&mut reader, &acks, WAIT);
    let audit = audit_acks(&acks, &reader.records);
    let verdict = verify(&ledger, &reader.records);
    eprintln!(
        "kill -9: {verdict:?}; acks audited {} (missing {}, overwritten {})",
        audit.acked,
        audit.missing.len(),
        audit.overwritten.len()
    );
    if broker.kind == Kind::Tansu {
        // tansu can ack records a reading consumer never gets (its Fetch can race
        // a Produce: see `assert_acked_or_read`): the relay is held to what it
        // controls — every committed event acked — and what tansu lost is printed.
        let tansu_lost = assert_acked_or_read(&ledger, &reader.records, &acks);
        eprintln!(
            "kill -9 on tansu: {} acked events not served by tansu (first: {:?}); missing acked offsets: {:?}",
            tansu_lost.len(),
            &tansu_lost[..tansu_lost.len().min(5)],
            &audit.missing[..audit.missing.len().min(5)]
        );
        assert!(
            verdict.unexpected == 0 && verdict.reordered == 0,
            "{verdict:?}"
        );
        return;
    }
    audit.assert_clean();

    if verdict.lost > 0 {
        eprintln!("{}", explain_lost(&ledger, &reader.records, &acks, 10));
    }
    verdict.assert_no_loss();
    assert!(
        verdict.duplicated_total <= 50_000,
        "duplicates must be bounded by the in-flight window (10,000) plus what was acked \
         but not yet confirmed: {verdict:?}"
    );
    drop(relay2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_under_load_exits_zero_and_restart_loses_nothing() {
    let db = PgCluster::shared().fresh_db();
    let broker = Broker::shared();
    let mut relay = start_run(&db, &broker.addr(), &[]);
    let client = db.client().await;
    let mut rng = Rng::new(5);
    let mut ledger = Ledger::default();
    write_events(
        &client,
        &mut rng,
        &mut ledger,
        &Workload {
            types: &["order"],
            keys: 10,
            max_rows: 50,
            rollbacks: false,
        },
        3_000,
    )
    .await;
    relay.signal("TERM");
    let status = relay.wait_exit(WAIT);
    assert!(
        status.success(),
        "SIGTERM must exit 0: {status:?}\n{}",
        relay.stderr()
    );
    assert!(relay.stderr().contains("stopped"), "{}", relay.stderr());
    let confirmed_at_exit = slot_lsn(&db, "confirmed_flush_lsn");
    assert!(
        !confirmed_at_exit.is_invalid(),
        "a final status update must confirm what was acked"
    );
    write_events(
        &client,
        &mut rng,
        &mut ledger,
        &Workload {
            types: &["order"],
            keys: 10,
            max_rows: 50,
            rollbacks: false,
        },
        500,
    )
    .await;
    let _relay = start_run(&db, &broker.addr(), &[]);
    let mut reader = Reader::new(&broker.addr(), &topics(&db, &["order"]));
    let ids: std::collections::HashSet<String> =
        ledger.committed.iter().map(|(id, _)| id.clone()).collect();
    reader.read_until("every committed event", WAIT * 2, |r| {
        let got: std::collections::HashSet<String> = r.iter().map(|c| c.id()).collect();
        ids.iter().all(|id| got.contains(id))
    });
    let verdict = verify(&ledger, &reader.records);
    eprintln!("sigterm: {verdict:?}");
    verdict.assert_no_loss();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_hundred_thousand_row_transaction_with_flat_memory() {
    let db = PgCluster::shared().fresh_db();
    let broker = Broker::shared();
    let mut relay = start_run(&db, &broker.addr(), &[]);
    db.psql(
        "INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload) \
         SELECT 'bulk', (g % 50)::text, 'Loaded', jsonb_build_object('n', g, 'pad', repeat('p', 100)) \
         FROM generate_series(1, 200000) g",
    );
    let mut reader = Reader::new(&broker.addr(), &topics(&db, &["bulk"]));
    reader.read_until("200,000 records", WAIT * 5, |r| r.len() >= 200_000);
    let status = std::fs::read_to_string(format!("/proc/{}/status", relay.child.id())).unwrap();
    let hwm_kb: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap();
    eprintln!(
        "200,000-row transaction: relay peak RSS {} MB",
        hwm_kb / 1024
    );
    let distinct: std::collections::HashSet<String> =
        reader.records.iter().map(|r| r.id()).collect();
    assert_eq!(distinct.len(), 200_000);
    assert!(
        hwm_kb < 100 * 1024,
        "peak RSS {hwm_kb} kB should stay well under 100 MB"
    );
    relay.signal("TERM");
    assert!(relay.wait_exit(WAIT).success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn record_timestamp_is_created_at_whatever_the_server_datestyle_and_zone() {
    let db = PgCluster::shared().fresh_db();
    db.psql(&format!(
        "ALTER DATABASE {} SET DateStyle = 'SQL, DMY'; ALTER DATABASE {} SET TimeZone = 'Asia/Kolkata'",
        db.name, db.name
    ));
    let broker = Broker::shared();
    let _relay = start_run(&db, &broker.addr(), &[]);
    db.psql(
        "INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload, created_at) \
         VALUES ('ts', '1', 'T', '{}', '2026-03-01 12:34:56.789+00')",
    );
    let mut reader = Reader::new(&broker.addr(), &topics(&db, &["ts"]));
    reader.read_until("the record", WAIT, |r| !r.is_empty());
    assert_eq!(reader.records[0].timestamp, Some(1_772_368_496_789));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_show_progress_and_readiness_follows_the_broker() {
    let db = PgCluster::shared().fresh_db();
    let broker = Broker::start();
    let relay = start_run(&db, &broker.addr(), &[]);
    wait_for("/readyz to be ready", WAIT, || {
        http_get(&relay, "/readyz")
            .starts_with("HTTP/1.1 200")
            .then_some(())
    });
    let client = db.client().await;
    let mut rng = Rng::new(11);
    let mut ledger = Ledger::default();
    write_events(
        &client,
        &mut rng,
        &mut ledger,
        &Workload {
            types: &["order"],
            keys: 5,
            max_rows: 10,
            rollbacks: false,
        },
        100,
    )
    .await;
    let topic = format!("{}.order", db.name);
    let published = format!("outbox_events_published_total{{topic=\"{topic}\"}} 100");
    let metrics = wait_for("100 published records in /metrics", WAIT, || {
        let m = http_get(&relay, "/metrics");
        m.contains(&published).then_some(m)
    });
    assert!(
        metrics.contains("outbox_relay_latency_seconds_count 100"),
        "{metrics}"
    );
    // The window's caps beside its use, and the process's memory now and at peak
    // (issue 29).
    assert!(
        metrics.contains("\npgoutbox_in_flight_max_records 10000\n")
            && metrics.contains("\npgoutbox_in_flight_max_bytes 67108864\n"),
        "{metrics}"
    );
    let gauge = |name: &str| -> u64 {
        let line = metrics.lines().find(|l| l.starts_with(&format!("{name} ")));
        line.and_then(|l| l.split(' ').nth(1)?.parse().ok())
            .unwrap_or_else(|| panic!("no {name} in {metrics}"))
    };
    let (rss, peak) = (
        gauge("process_resident_memory_bytes"),
        gauge("pgoutbox_resident_memory_peak_bytes"),
    );
    assert!(rss > 0 && peak >= rss, "rss {rss}, peak {peak}");
    // `status` shows them too, read from the relay's endpoint.
    let mut status = support::Pgoutbox::spawn(&[
        "status",
        "--database-url",
        &db.url(),
        "--slot",
        &db.name,
        "--http-addr",
        &http_addr(&relay),
        "--json",
    ]);
    assert!(status.wait_exit(WAIT).success(), "{}", status.stderr());
    let out = status.stdout_so_far().join("\n");
    let json: serde_json::Value =
        serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
    let relay_json = &json["relay"];
    assert_eq!(relay_json["reachable"], true, "{out}");
    assert_eq!(relay_json["max_in_flight_records"], 10_000, "{out}");
    // The window in use: 1,000 records per partition the 100 events went to, under
    // the cap; what /metrics said (nothing was acked since).
    let window = gauge("pgoutbox_in_flight_window_records");
    assert!((1_000..=10_000).contains(&window), "window {window}");
    assert_eq!(relay_json["window_records"], window, "{out}");
    assert_eq!(relay_json["max_in_flight_bytes"], 64 << 20, "{out}");
    let (rss, peak) = (
        relay_json["resident_memory_bytes"].as_u64().unwrap_or(0),
        relay_json["resident_memory_peak_bytes"]
            .as_u64()
            .unwrap_or(0),
    );
    assert!(rss > 0 && peak >= rss, "{out}");
    assert_eq!(relay_json["delivery"], "at-least-once", "{out}");
    assert!(
        metrics.contains("outbox_relay_latency_seconds_bucket{le=\"+Inf\"} 100"),
        "{metrics}"
    );
    // The Kafka share, by librdkafka's clock: one sample per ack, each within its
    // commit → ack sample.
    assert!(
        metrics.contains("pgoutbox_kafka_latency_seconds_count 100"),
        "{metrics}"
    );
    let sum = |name: &str| -> f64 {
        let line = metrics
            .lines()
            .find(|l| l.starts_with(&format!("{name}_sum ")));
        line.and_then(|l| l.split(' ').nth(1)?.parse().ok())
            .unwrap_or_else(|| panic!("no {name}_sum in {metrics}"))
    };
    let (total, kafka) = (
        sum("outbox_relay_latency_seconds"),
        sum("pgoutbox_kafka_latency_seconds"),
    );
    assert!(
        kafka > 0.0 && kafka <= total,
        "kafka share {kafka} s of {total} s"
    );
    assert!(metrics.contains("pgoutbox_slot_lag_bytes "), "{metrics}");
    assert!(
        metrics.contains("pgoutbox_replication_connected 1"),
        "{metrics}"
    );
    assert!(http_get(&relay, "/healthz").starts_with("HTTP/1.1 200"));

    broker.stop();
    wait_for("/readyz to report the broker outage", WAIT, || {
        http_get(&relay, "/readyz")
            .starts_with("HTTP/1.1 503")
            .then_some(())
    });
    assert!(
        http_get(&relay, "/healthz").starts_with("HTTP/1.1 200"),
        "alive while not ready"
    );
    broker.resume();
    wait_for("/readyz to recover", WAIT, || {
        http_get(&relay, "/readyz")
            .starts_with("HTTP/1.1 200")
            .then_some(())
    });
}

/// Regression (issue 13): `compression.type=zstd` failed with "libzstd not available
/// at build time". Records compressed with zstd reach the broker and read back intact.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zstd_compressed_records_arrive_intact() {
    let db = PgCluster::shared().fresh_db();
    let broker = Broker::shared();
    let _relay = start_run(
        &db,
        &broker.addr(),
        &["--kafka-option", "compression.type=zstd"],
    );
    let client = db.client().await;
    let mut rng = Rng::new(23);
    let mut ledger = Ledger::default();
    write_events(
        &client,
        &mut rng,
        &mut ledger,
        &Workload {
            types: &["zstd"],
            keys: 3,
            max_rows: 20,
            rollbacks: false,
        },
        300,
    )
    .await;
    let mut reader = Reader::new(&broker.addr(), &topics(&db, &["zstd"]));
    reader.read_until("300 zstd-compressed records", WAIT, |r| r.len() >= 300);
    reader.settle(Duration::from_secs(1));
    let verdict = verify(&ledger, &reader.records);
    verdict.assert_no_loss();
    assert_eq!(verdict.delivered, 300, "{verdict:?}");
    assert_eq!(verdict.duplicated_total, 0, "{verdict:?}");
    for rec in &reader.records {
        let value = rec.value.as_deref().unwrap_or_default();
        assert!(
            serde_json::from_slice::<serde_json::Value>(value).is_ok(),
            "value not the JSON payload after zstd: {:?}",
            String::from_utf8_lossy(value)
        );
    }
}

/// Regression (issue 13): a standby's `/readyz` was the same 503 "replication: down"
/// as a broken relay. A standby is alive, ready (it can take over) and says it
/// stands by; `pgoutbox_role` tells the two instances apart, and flips on takeover.
#[test]
fn a_standby_says_so_in_readyz_and_pgoutbox_role_and_takes_over() {
    let db = PgCluster::shared().fresh_db();
    let broker = Broker::shared().addr();
    let active = start_run(&db, &broker, &[]);
    let active_ready = wait_for("the active relay to be ready", WAIT, || {
        let r = http_get(&active, "/readyz");
        r.starts_with("HTTP/1.1 200").then_some(r)
    });
    assert!(
        active_ready.contains("role: active\nreplication: connected\n"),
        "{active_ready}"
    );
    let standby = spawn_run(&db, &broker, &[]);
    standby.wait_stderr("standing by", WAIT);
    let ready = wait_for("the standby to be ready (its producer up)", WAIT, || {
        let r = http_get(&standby, "/readyz");
        r.starts_with("HTTP/1.1 200").then_some(r)
    });
    assert!(
        ready.contains("role: standby\nreplication: standing by"),
        "{ready}"
    );
    assert!(http_get(&standby, "/livez").starts_with("HTTP/1.1 200"));
    let metrics = http_get(&standby, "/metrics");
    for line in [
        "pgoutbox_role{role=\"standby\"} 1",
        "pgoutbox_role{role=\"active\"} 0",
        "pgoutbox_replication_connected 0",
        "pgoutbox_build_info{version=\"",
        "process_cpu_seconds_total ",
        "process_resident_memory_bytes ",
        "process_open_fds ",
        "process_start_time_seconds ",
    ] {
        assert!(metrics.contains(line), "{line} missing:\n{metrics}");
    }
    assert!(http_get(&active, "/metrics").contains("pgoutbox_role{role=\"active\"} 1"));

    active.signal("TERM");
    let took_over = wait_for("the standby to take over", WAIT, || {
        let r = http_get(&standby, "/readyz");
        r.contains("role: active\nreplication: connected")
            .then_some(r)
    });
    assert!(took_over.starts_with("HTTP/1.1 200"), "{took_over}");
    assert!(http_get(&standby, "/metrics").contains("pgoutbox_role{role=\"active\"} 1"));
}

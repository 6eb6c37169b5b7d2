//! `status` and `teardown`: the slot's lag as the server reports it, and removing the
//! slot, the publication and this server's state file — idempotent, never touching a
//! slot of another database or an active one. Also how a server notice is logged.

use pgoutbox::ops::check::check;
use pgoutbox::ops::status::status;
use pgoutbox::ops::teardown::{teardown, StateCleanup, TeardownError};
use pgoutbox::pg::lsn::Lsn;
use pgoutbox::pg::source::catalog::CatalogError;
use pgoutbox::pg::source::replication::ReplicationClient;
use pgoutbox::state::{SlotState, StateFile};

use crate::support;
use crate::support::{wait_until_eq, PgCluster, Pgoutbox, WAIT};

use super::{conninfo, create_slot, get, input};

#[tokio::test]
async fn status_shows_lag_after_inserts() {
    let db = PgCluster::shared().fresh_db();
    let slot = format!("{}_slot", db.name);
    let info = conninfo(&db.url());
    let missing = status(&info, &slot).await.unwrap();
    assert!(!missing.exists);
    assert_eq!(missing.lag_bytes, None);
    assert!(missing.render().contains("does not exist"));

    create_slot(&db, &slot);
    db.psql(
        "INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload) \
         SELECT 'order', i::text, 'Created', jsonb_build_object('n', i, 'pad', repeat('x', 200)) \
         FROM generate_series(1, 500) i",
    );
    let s = status(&info, &slot).await.unwrap();
    assert!(s.exists);
    assert_eq!(s.active_pid, None);
    assert_eq!(s.wal_status.as_deref(), Some("reserved"));
    let confirmed = s
        .confirmed_flush_lsn
        .expect("a logical slot has a confirmed_flush_lsn");
    let lag = s.lag_bytes.unwrap();
    assert_eq!(lag, s.current_wal_lsn.bytes_since(confirmed));
    // 500 rows of > 200 bytes each.
    assert!(lag > 100_000, "lag {lag}");
    assert!(s.retained_bytes.unwrap() >= lag);
    let text = s.render();
    assert!(text.contains(&format!("({lag} bytes)")), "{text}");
    assert!(text.contains(" KiB (") || text.contains(" MiB ("), "{text}");
    assert_eq!(s.to_json()["lag_bytes"], lag);
}

#[tokio::test]
async fn teardown_removes_slot_and_publication_and_is_idempotent() {
    let db = PgCluster::shared().fresh_db();
    let slot = format!("{}_slot", db.name);
    db.psql("CREATE PUBLICATION pgoutbox FOR TABLE outbox WITH (publish = 'insert')");
    create_slot(&db, &slot);
    let info = conninfo(&db.url());
    let first = teardown(&info, &slot, "pgoutbox", None).await.unwrap();
    assert!(first.slot_dropped && first.publication_dropped, "{first:?}");
    assert_eq!(
        db.psql(&format!(
            "SELECT count(*) FROM pg_replication_slots WHERE slot_name = '{slot}'"
        )),
        "0"
    );
    assert_eq!(db.psql("SELECT count(*) FROM pg_publication"), "0");
    let second = teardown(&info, &slot, "pgoutbox", None).await.unwrap();
    assert!(
        !second.slot_dropped && !second.publication_dropped,
        "{second:?}"
    );
    assert!(second.render().contains("already absent"));
}

#[tokio::test]
async fn teardown_leaves_a_slot_of_another_database_alone() {
    let cluster = PgCluster::shared();
    let (db, other) = (cluster.fresh_db(), cluster.fresh_db());
    let slot = format!("{}_slot", db.name);
    create_slot(&db, &slot);
    let err = teardown(&conninfo(&other.url()), &slot, "pgoutbox", None)
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            TeardownError::Catalog(CatalogError::SlotDatabase { .. })
        ),
        "{err}"
    );
    assert_eq!(
        db.psql(&format!(
            "SELECT count(*) FROM pg_replication_slots WHERE slot_name = '{slot}'"
        )),
        "1"
    );
    db.psql(&format!("SELECT pg_drop_replication_slot('{slot}')"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn teardown_refuses_an_active_slot() {
    let db = PgCluster::shared().fresh_db();
    let slot = format!("{}_slot", db.name);
    db.psql("CREATE PUBLICATION pgoutbox FOR TABLE outbox WITH (publish = 'insert')");
    create_slot(&db, &slot);
    let info = conninfo(&db.url());
    let stream = ReplicationClient::connect(&info)
        .await
        .unwrap()
        .start_pgoutput(
            &slot,
            Lsn::INVALID,
            &["pgoutbox".to_owned()],
            std::time::Duration::ZERO,
        )
        .await
        .unwrap();
    let active_sql = format!(
        "SELECT coalesce(active_pid::text, '') FROM pg_replication_slots WHERE slot_name = '{slot}'"
    );
    let pid: i32 = support::wait_for("the slot to become active", WAIT, || {
        db.psql(&active_sql).parse().ok()
    });
    assert_eq!(status(&info, &slot).await.unwrap().active_pid, Some(pid));
    // check does not count the relay's own walsender or slot against the headroom.
    let mut check_input = input(&db);
    check_input.slot = slot.clone();
    let report = check(&check_input).await;
    assert!(report.ok(), "{}", report.render());
    assert_eq!(
        get(&report, "slot", &slot).observed,
        format!("pgoutput logical slot, active (walsender pid {pid})")
    );

    let err = teardown(&info, &slot, "pgoutbox", None).await.unwrap_err();
    match &err {
        TeardownError::Catalog(CatalogError::SlotActive { slot: s, pid: p }) => {
            assert_eq!((s.as_str(), *p), (slot.as_str(), pid));
        }
        other => panic!("expected SlotActive, got {other}"),
    }
    assert!(err.to_string().contains("stop the relay first"), "{err}");
    // Nothing was dropped: the publication stays while the slot does.
    assert_eq!(db.psql("SELECT count(*) FROM pg_publication"), "1");

    stream.close().await.unwrap();
    wait_until_eq("the slot to become inactive", WAIT, &String::new(), || {
        db.psql(&active_sql)
    });
    let outcome = teardown(&info, &slot, "pgoutbox", None).await.unwrap();
    assert!(outcome.slot_dropped && outcome.publication_dropped);
}

/// Issue 13 item 12: teardown removes `run`'s state file of the slot it dropped —
/// but only one that records this server; another server's file is kept.
#[tokio::test]
async fn teardown_removes_the_state_file_of_this_server_only() {
    let db = PgCluster::shared().fresh_db();
    let slot = format!("{}_slot", db.name);
    let dir = support::temp_dir("teardown-state");
    let server = db.psql("SELECT system_identifier FROM pg_control_system()");
    let file = StateFile::open(&dir, &db.name, &slot).unwrap();
    let write = |system_id: &str| {
        file.write(&SlotState::new(system_id, 1, &db.name, &slot, Lsn(0x100)))
            .unwrap()
    };
    let info = conninfo(&db.url());

    // Another server's file stays, and the output says why.
    write("1");
    create_slot(&db, &slot);
    let outcome = teardown(&info, &slot, "pgoutbox", Some(&dir))
        .await
        .unwrap();
    assert!(outcome.slot_dropped);
    assert_eq!(
        outcome.state,
        StateCleanup::OtherServer {
            path: file.path().to_owned(),
            recorded: "1".into(),
            server: server.clone(),
        }
    );
    assert!(file.path().exists());
    assert!(
        outcome.render().contains(&format!(
            "state file {}: kept — it records server 1, this is server {server}",
            file.path().display()
        )),
        "{}",
        outcome.render()
    );

    // This server's file goes with the slot.
    write(&server);
    create_slot(&db, &slot);
    let outcome = teardown(&info, &slot, "pgoutbox", Some(&dir))
        .await
        .unwrap();
    assert_eq!(
        outcome.state,
        StateCleanup::Removed {
            path: file.path().to_owned(),
            confirmed: Lsn(0x100),
        }
    );
    assert!(!file.path().exists());
    let again = teardown(&info, &slot, "pgoutbox", Some(&dir))
        .await
        .unwrap();
    assert_eq!(again.state, StateCleanup::Absent(file.path().to_owned()));
}

/// A server WARNING reached the log at INFO (tokio-postgres logs every notice at
/// info). An invalid per-database setting makes PostgreSQL send one at connection
/// start: it must log as a warning.
#[test]
fn server_warnings_are_logged_as_warnings() {
    let db = PgCluster::shared().fresh_db();
    // Accepted with a NOTICE at ALTER time, refused with a WARNING at session start.
    db.psql(&format!(
        "ALTER DATABASE {} SET default_text_search_config = 'pg_catalog.no_such_config'",
        db.name
    ));
    let mut p = Pgoutbox::spawn(&["status", "--database-url", &db.url(), "--slot", &db.name]);
    p.wait_exit(WAIT);
    let err = p.stderr();
    let line = err
        .lines()
        .find(|l| l.contains("no_such_config"))
        .unwrap_or_else(|| panic!("the warning is logged:\n{err}"));
    eprintln!("{line}");
    assert!(
        line.contains(" WARN ")
            && line.contains("server notice")
            && line.contains("severity=\"WARNING\""),
        "{line}"
    );
}

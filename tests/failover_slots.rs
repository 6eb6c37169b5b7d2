//! Failover slots (issue 11, item 3): on PostgreSQL 17+ `setup` and `run` create the
//! slot with `failover`, `--slot-failover false` does not; `check` reports the slot's
//! property and `synchronized_standby_slots` with their fixes, and the printed fix
//! for an existing slot works; `status` shows both. On 16 and older `check` and
//! `status` say failover slots do not exist there.
//!
//! The 17+ tests run on a private PostgreSQL 17 cluster ([`support::pg17_bindir`]);
//! the ≤ 16 test runs on the shared cluster and asserts whichever behaviour its
//! version must have.

use crate::support;

use std::process::Command;

use pgoutbox::ops::check::{check, CheckInput, CheckReport};
use pgoutbox::ops::status::status;
use pgoutbox::pg::client::conninfo::ConnInfo;
use pgoutbox::pg::names::TableName;
use support::kafka::Broker;
use support::workload::start_run;
use support::{pg17_bindir, ClusterOptions, PgCluster, Pgoutbox, TestDb, WAIT};

fn pg17() -> &'static PgCluster {
    static CLUSTER: std::sync::OnceLock<PgCluster> = std::sync::OnceLock::new();
    CLUSTER.get_or_init(|| {
        PgCluster::start(ClusterOptions {
            bindir: Some(pg17_bindir()),
            ..ClusterOptions::default()
        })
    })
}

fn conninfo(db: &TestDb<'_>) -> ConnInfo {
    ConnInfo::parse_with_env(&db.url(), &|_| None).unwrap()
}

fn input(db: &TestDb<'_>, slot_failover: bool) -> CheckInput {
    CheckInput {
        mode: Default::default(),
        conninfo: conninfo(db),
        publication: "pgoutbox".into(),
        tables: vec![TableName::parse("public.outbox").unwrap()],
        slot: db.name.clone(),
        slot_failover,
        columns: vec!["id".into()],
        brokers: None,
        kafka_options: Default::default(),
        templates: vec![],
        message_prefixes: vec!["pgoutbox".into()],
        messages_only: false,
        delivery: None,
    }
}

/// `pgoutbox setup` for `db` (slot named after it) with `extra` arguments.
fn setup(db: &TestDb<'_>, extra: &[&str]) {
    let mut args = vec!["setup", "--database-url"];
    let url = db.url();
    args.push(&url);
    args.extend(["--slot", &db.name]);
    args.extend_from_slice(extra);
    let mut setup = Pgoutbox::spawn(&args);
    assert!(setup.wait_exit(WAIT).success(), "{}", setup.stderr());
}

/// `pg_replication_slots.failover` of the slot named after `db` (17+).
fn failover(db: &TestDb<'_>) -> String {
    db.psql(&format!(
        "SELECT failover FROM pg_replication_slots WHERE slot_name = '{}'",
        db.name
    ))
}

/// (observed, fix) of one check.
fn verdict(report: &CheckReport, name: &str, object: &str) -> (String, String) {
    let c = report
        .find(name, object)
        .unwrap_or_else(|| panic!("no {name} check:\n{}", report.render()));
    assert!(c.ok, "{name} is a warning, never a failure: {c:?}");
    (c.observed.clone(), c.fix.clone().unwrap_or_default())
}

#[tokio::test]
async fn on_17_setup_makes_a_failover_slot_and_check_and_status_report_it() {
    let db = pg17().fresh_db();
    setup(&db, &[]);
    assert_eq!(failover(&db), "t");
    let report = check(&input(&db, true)).await;
    let (observed, fix) = verdict(&report, "slot_failover", &db.name);
    assert_eq!((observed.as_str(), fix.as_str()), ("failover = true", ""));
    let (observed, fix) = verdict(&report, "synchronized_standby_slots", "server");
    assert!(observed.starts_with("empty"), "{observed}");
    assert!(
        fix.starts_with("ALTER SYSTEM SET synchronized_standby_slots"),
        "{fix}"
    );
    let shown = status(&conninfo(&db), &db.name).await.unwrap();
    assert!(
        shown
            .render()
            .contains("failover:             yes; synchronized_standby_slots is empty"),
        "{}",
        shown.render()
    );
    assert_eq!(shown.to_json()["failover"], true);
}

#[tokio::test]
async fn on_17_a_slot_without_failover_gets_the_fix_and_the_fix_works() {
    let db = pg17().fresh_db();
    setup(&db, &["--slot-failover", "false"]);
    assert_eq!(failover(&db), "f");
    // Turned off on purpose: said, no fix.
    let report = check(&input(&db, false)).await;
    let (observed, fix) = verdict(&report, "slot_failover", &db.name);
    assert!(observed.contains("--slot-failover false"), "{observed}");
    assert!(fix.is_empty(), "{fix}");
    // Wanted but missing: the fix is a replication command.
    let report = check(&input(&db, true)).await;
    let (observed, fix) = verdict(&report, "slot_failover", &db.name);
    assert!(observed.starts_with("failover = false"), "{observed}");
    let command = fix
        .split("run over a replication connection: ")
        .nth(1)
        .and_then(|rest| rest.split("; on each standby").next())
        .unwrap_or_else(|| panic!("no command in the fix: {fix}"));
    // Exactly as printed: the connection string is the relay's, without a password.
    let out = Command::new("sh").arg("-c").arg(command).output().unwrap();
    assert!(
        out.status.success(),
        "{command}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(failover(&db), "t", "after {command}");
}

#[test]
fn on_17_run_creates_a_failover_slot_and_warns_about_one_without() {
    let db = pg17().fresh_db();
    let broker = Broker::shared().addr();
    let mut relay = start_run(&db, &broker, &[]);
    assert_eq!(failover(&db), "t");
    let stderr = relay.stderr();
    assert!(stderr.contains("failover=true"), "{stderr}");
    assert!(!stderr.contains("not a failover slot"), "{stderr}");
    relay.signal("TERM");
    assert!(relay.wait_exit(WAIT).success());

    let db = pg17().fresh_db();
    setup(&db, &["--slot-failover", "false"]);
    let mut relay = start_run(&db, &broker, &[]);
    let stderr = relay.stderr();
    assert!(
        stderr.contains("the slot is not a failover slot")
            && stderr.contains("ALTER_REPLICATION_SLOT"),
        "{stderr}"
    );
    relay.signal("TERM");
    assert!(relay.wait_exit(WAIT).success());
}

#[tokio::test]
async fn check_and_status_say_what_this_version_has() {
    let db = PgCluster::shared().fresh_db();
    setup(&db, &[]);
    let version = db.server_version_num();
    let report = check(&input(&db, true)).await;
    let (observed, fix) = verdict(&report, "slot_failover", &db.name);
    let shown = status(&conninfo(&db), &db.name).await.unwrap().render();
    if version >= 170000 {
        assert_eq!(observed, "failover = true");
        assert!(shown.contains("failover:             yes"), "{shown}");
    } else {
        assert!(
            observed.starts_with("not available before PostgreSQL 17"),
            "{observed}"
        );
        assert!(fix.contains("Patroni permanent slots"), "{fix}");
        assert!(report
            .find("synchronized_standby_slots", "server")
            .is_none());
        assert!(
            shown.contains("failover:             not available"),
            "{shown}"
        );
    }
}

//! `check` on a server that can decode logically: a correct set-up passes, every
//! problem is one failed check naming the object and its fix (publication coverage,
//! partitions, column lists, privileges, topic templates, connection and broker).

use pgoutbox::ops::check::{check, CheckInput};
use pgoutbox::pg::source::catalog::grants_sql;

use crate::support;
use crate::support::kafka::Broker;
use crate::support::{PgCluster, WAIT};

use super::{conninfo, create_slot, failures, fix, get, input, names, table};

#[tokio::test]
async fn check_passes_on_a_correct_setup() {
    let db = PgCluster::shared().fresh_db();
    let input = input(&db);
    db.psql("CREATE PUBLICATION pgoutbox FOR TABLE public.outbox WITH (publish = 'insert')");
    create_slot(&db, &input.slot);
    let report = check(&input).await;
    assert!(report.ok(), "{}", report.render());
    // Failover slots exist since PostgreSQL 17: one line before, two from then on.
    let failover_checks: &[&str] = if db.server_version_num() >= 170000 {
        &["slot_failover", "synchronized_standby_slots"]
    } else {
        &["slot_failover"]
    };
    let mut expected = vec![
        "connection",
        "server_version",
        "wal_level",
        "max_replication_slots",
        "max_wal_senders",
        "role_replication",
        "role_login",
        "table",
        "columns",
        "select_privilege",
        "publication",
        "layout",
        "publication_operations",
        "publication_other_tables",
        "publication_tables",
        "messages",
        "slot",
        "slot_wal_status",
    ];
    expected.extend_from_slice(failover_checks);
    expected.push("max_slot_wal_keep_size");
    expected.push("heartbeat");
    expected.push("delivery");
    assert_eq!(names(&report), expected);
    assert_eq!(get(&report, "wal_level", "server").observed, "logical");
    assert_eq!(
        get(&report, "role_replication", "postgres").observed,
        "superuser"
    );
    assert_eq!(
        get(&report, "slot", &input.slot).observed,
        "pgoutput logical slot, inactive"
    );
    assert_eq!(
        get(&report, "publication_operations", "pgoutbox").observed,
        "insert only"
    );
    assert_eq!(report.to_json()["ok"], true);
}

#[tokio::test]
async fn check_reports_every_failure_with_its_fix() {
    let db = PgCluster::shared().fresh_db();
    db.psql("ALTER TABLE outbox DROP COLUMN payload");
    let mut input = input(&db);
    input.tables.push(table("public.nope"));
    let report = check(&input).await;
    assert!(!report.ok());
    assert_eq!(
        failures(&report),
        [
            ("columns", "public.outbox"),
            ("table", "public.nope"),
            ("publication", "pgoutbox"),
        ],
        "{}",
        report.render()
    );
    let columns = get(&report, "columns", "public.outbox");
    assert!(
        columns.observed.starts_with("missing payload (has id, "),
        "{columns:?}"
    );
    assert!(fix(columns).contains("--payload-column"), "{columns:?}");
    let missing = get(&report, "table", "public.nope");
    assert_eq!(missing.observed, "missing");
    assert!(fix(missing).contains("sql/outbox.sql"));
    let publication = get(&report, "publication", "pgoutbox");
    assert!(
        fix(publication).starts_with(
            "CREATE PUBLICATION \"pgoutbox\" FOR TABLE \"public\".\"outbox\", \"public\".\"nope\" \
             WITH (publish = 'insert', publish_via_partition_root = true);"
        ),
        "{publication:?}"
    );
    // A missing slot is not a failure: setup and run create it.
    let slot = get(&report, "slot", &input.slot);
    assert!(slot.ok);
    assert!(slot.observed.starts_with("missing"), "{slot:?}");
    // The rendering shows each failure on its own line with its fix.
    let text = report.render();
    assert_eq!(
        text.lines().filter(|l| l.starts_with('✘')).count(),
        3,
        "{text}"
    );
    assert!(
        text.contains("✘ table: public.nope = missing — fix: create it"),
        "{text}"
    );
}

#[tokio::test]
async fn check_publication_coverage_and_operations_then_the_fix_works() {
    let db = PgCluster::shared().fresh_db();
    db.psql("CREATE TABLE outbox2 (LIKE outbox INCLUDING ALL)");
    // Default publish: insert, update, delete, truncate.
    db.psql("CREATE PUBLICATION pgoutbox FOR TABLE outbox");
    let mut input = input(&db);
    input.tables.push(table("public.outbox2"));
    let report = check(&input).await;
    assert_eq!(
        failures(&report),
        [("publication_tables", "pgoutbox")],
        "{}",
        report.render()
    );
    let tables = get(&report, "publication_tables", "pgoutbox");
    assert_eq!(tables.observed, "does not include public.outbox2");
    assert_eq!(
        fix(tables),
        "ALTER PUBLICATION \"pgoutbox\" ADD TABLE \"public\".\"outbox2\";"
    );
    let ops = get(&report, "publication_operations", "pgoutbox");
    assert!(ops.ok);
    assert!(
        ops.observed
            .starts_with("publishes insert, update, delete, truncate"),
        "{ops:?}"
    );
    assert_eq!(
        fix(ops),
        "ALTER PUBLICATION \"pgoutbox\" SET (publish = 'insert');"
    );
    // The fixes, run as given, fix it.
    db.psql(fix(tables));
    db.psql(fix(ops));
    let report = check(&input).await;
    assert!(report.ok(), "{}", report.render());
    assert_eq!(
        get(&report, "publication_tables", "pgoutbox").observed,
        "includes public.outbox, public.outbox2"
    );
    assert_eq!(
        get(&report, "publication_operations", "pgoutbox").observed,
        "insert only"
    );
}

#[tokio::test]
async fn check_partitioned_table_needs_publish_via_partition_root() {
    let db = PgCluster::shared().fresh_db();
    db.psql(
        "CREATE TABLE outbox_p (LIKE outbox) PARTITION BY LIST (aggregate_type); \
         CREATE TABLE outbox_p_order PARTITION OF outbox_p FOR VALUES IN ('order'); \
         CREATE PUBLICATION pgoutbox FOR TABLE outbox_p WITH (publish = 'insert')",
    );
    let mut input = input(&db);
    input.tables = vec![table("public.outbox_p")];
    let report = check(&input).await;
    assert_eq!(
        failures(&report),
        [("publication_partition_root", "pgoutbox")],
        "{}",
        report.render()
    );
    assert_eq!(
        get(&report, "table", "public.outbox_p").observed,
        "exists (partitioned)"
    );
    let root = get(&report, "publication_partition_root", "pgoutbox");
    db.psql(fix(root));
    let report = check(&input).await;
    assert!(report.ok(), "{}", report.render());
    assert_eq!(
        get(&report, "publication_tables", "pgoutbox").observed,
        "includes public.outbox_p"
    );
}

#[tokio::test]
async fn check_publication_column_list_must_keep_mapped_columns() {
    let db = PgCluster::shared().fresh_db();
    let version: i32 = db.psql("SHOW server_version_num").parse().unwrap();
    if version < 150000 {
        eprintln!("skipped: column lists need PostgreSQL 15");
        return;
    }
    db.psql("CREATE PUBLICATION pgoutbox FOR TABLE outbox (id, aggregate_type, aggregate_id)");
    let report = check(&input(&db)).await;
    assert_eq!(
        failures(&report),
        [("publication_columns", "public.outbox")],
        "{}",
        report.render()
    );
    let columns = get(&report, "publication_columns", "public.outbox");
    assert!(
        columns
            .observed
            .ends_with("but not event_type, payload, created_at"),
        "{columns:?}"
    );
    // The fix is two statements; psql -c runs them in one transaction.
    let sql = fix(columns)
        .strip_prefix("publish every column: ")
        .and_then(|s| s.split(" (").next())
        .unwrap();
    db.psql(sql);
    assert!(check(&input(&db)).await.ok());
}

#[tokio::test]
async fn check_as_a_plain_role_then_with_the_least_privilege_grants() {
    let db = PgCluster::shared().fresh_db();
    let plain = format!("{}_plain", db.name);
    db.psql(&format!("CREATE ROLE {plain} LOGIN"));
    db.psql("CREATE PUBLICATION pgoutbox FOR TABLE outbox WITH (publish = 'insert')");
    let url = |role: &str| {
        format!(
            "postgres://{role}@127.0.0.1:{}/{}?sslmode=disable",
            db.cluster.port, db.name
        )
    };
    let mut input = input(&db);
    input.conninfo = conninfo(&url(&plain));
    let report = check(&input).await;
    assert_eq!(
        failures(&report),
        [
            ("role_replication", plain.as_str()),
            ("select_privilege", "public.outbox"),
        ],
        "{}",
        report.render()
    );
    assert_eq!(
        fix(get(&report, "role_replication", &plain)),
        format!(
            "ALTER ROLE \"{plain}\" REPLICATION; (on Amazon RDS: GRANT rds_replication TO \"{plain}\";)"
        )
    );
    assert_eq!(
        fix(get(&report, "select_privilege", "public.outbox")),
        format!("GRANT SELECT ON \"public\".\"outbox\" TO \"{plain}\";")
    );

    // A role made exactly as grants_sql says passes every check.
    let app = format!("{}_app", db.name);
    for statement in grants_sql(&app, &[table("public.outbox")]) {
        if !statement.starts_with("--") {
            db.psql(&statement);
        }
    }
    input.conninfo = conninfo(&url(&app));
    let report = check(&input).await;
    assert!(report.ok(), "{}", report.render());
    assert_eq!(
        get(&report, "role_replication", &app).observed,
        "REPLICATION"
    );
}

/// Regression (issue 13 item 10): a missing publication that `run` creates itself
/// was a failure (exit 1). `check` predicts `run`: the role may create it, so it
/// passes with a note — and `run` then does create it. A role that may not create
/// it still fails, with the SQL for an owner.
#[tokio::test]
async fn check_missing_publication_fails_only_when_run_cannot_create_it() {
    let db = PgCluster::shared().fresh_db();
    let mut input = input(&db);
    let report = check(&input).await;
    assert!(report.ok(), "{}", report.render());
    let publication = get(&report, "publication", "pgoutbox");
    assert_eq!(
        publication.observed,
        "missing — `pgoutbox run` (or `setup`) will create it: postgres may create a \
         publication of the outbox tables"
    );
    assert!(report.render().contains(
        "✔ publication: pgoutbox = missing — `pgoutbox run` (or `setup`) will create it"
    ));

    // `run` (here with no broker to reach) creates it, as `check` said.
    let mut relay = support::Pgoutbox::spawn(&[
        "run",
        "--database-url",
        &db.url(),
        "--slot",
        &input.slot,
        "--brokers",
        "127.0.0.1:1",
        "--http-addr",
        "off",
    ]);
    relay.wait_stderr("created publication", WAIT);
    relay.signal("TERM");
    relay.wait_exit(WAIT);
    assert_eq!(
        db.psql("SELECT count(*) FROM pg_publication WHERE pubname = 'pgoutbox'"),
        "1"
    );

    // A least-privilege role owns no table: `run` cannot create it, `check` fails.
    db.psql("DROP PUBLICATION pgoutbox");
    let app = format!("{}_app", db.name);
    for statement in grants_sql(&app, &[table("public.outbox")]) {
        if !statement.starts_with("--") {
            db.psql(&statement);
        }
    }
    input.conninfo = conninfo(&format!(
        "postgres://{app}@127.0.0.1:{}/{}?sslmode=disable",
        db.cluster.port, db.name
    ));
    let report = check(&input).await;
    assert_eq!(
        failures(&report),
        [("publication", "pgoutbox")],
        "{}",
        report.render()
    );
    let publication = get(&report, "publication", "pgoutbox");
    assert_eq!(
        publication.observed,
        format!(
            "missing, and `run` cannot create it: every outbox table must exist, and {app} \
             must own them all and have CREATE on the database (or be a superuser)"
        )
    );
    assert!(
        fix(publication)
            .starts_with("CREATE PUBLICATION \"pgoutbox\" FOR TABLE \"public\".\"outbox\""),
        "{publication:?}"
    );
}

/// Regression (issue 13 item 9): templates `run` stops on at the first row passed
/// `check`. Each is now a failed `topic_template` check with the fix.
#[test]
fn check_refuses_bad_topic_templates_with_the_fix() {
    let db = PgCluster::shared().fresh_db();
    db.psql("CREATE PUBLICATION pgoutbox FOR TABLE outbox WITH (publish = 'insert')");
    for (template, fixed) in [
        (
            "orders/${routedByValue}",
            "fix: e.g. orders.${routedByValue}",
        ),
        (
            "outbox.${routedbyvalue}",
            "fix: did you mean ${routedByValue}?",
        ),
    ] {
        let mut p = support::Pgoutbox::spawn(&[
            "check",
            "--database-url",
            &db.url(),
            "--slot",
            &db.name,
            "--topic-template",
            template,
        ]);
        let status = p.wait_exit(WAIT);
        let out = p.stdout_so_far().join("\n");
        assert!(!status.success(), "{template}: {out}");
        let line = out
            .lines()
            .find(|l| l.starts_with("✘ topic_template: public.outbox"))
            .unwrap_or_else(|| panic!("{template}: no failed topic_template check:\n{out}"));
        assert!(line.contains(fixed), "{line}");
        assert_eq!(out.matches('✘').count(), 1, "{out}");
        // `run` refuses it before connecting, with the same words.
        let mut run = support::Pgoutbox::spawn(&[
            "run",
            "--database-url",
            &db.url(),
            "--brokers",
            "127.0.0.1:1",
            "--topic-template",
            template,
        ]);
        assert!(!run.wait_exit(WAIT).success());
        let err = run.stderr();
        assert!(
            err.contains(&format!("invalid --topic-template {template:?}")) && err.contains(fixed),
            "{err}"
        );
    }
}

#[tokio::test]
async fn check_connection_failure_is_one_check_and_brokers_are_still_checked() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let input = CheckInput {
        mode: Default::default(),
        conninfo: conninfo(&format!(
            "postgres://app@127.0.0.1:{port}/shop?sslmode=disable&connect_timeout=5"
        )),
        publication: "pgoutbox".into(),
        tables: vec![table("outbox")],
        slot: "pgoutbox".into(),
        slot_failover: true,
        columns: vec![],
        // Nothing listens on port 1.
        brokers: Some("127.0.0.1:1".into()),
        kafka_options: Default::default(),
        templates: vec![],
        message_prefixes: vec!["pgoutbox".into()],
        messages_only: false,
        delivery: None,
    };
    let report = check(&input).await;
    assert_eq!(
        failures(&report),
        [
            ("connection", input.conninfo.redacted().as_str()),
            ("kafka", "127.0.0.1:1")
        ],
        "{}",
        report.render()
    );
    // Plus the delivery mode, which needs neither.
    assert_eq!(report.checks.len(), 3);
    assert_eq!(report.checks[2].name, "delivery");
    // The cause, not only tokio-postgres' "error connecting to server".
    assert!(
        report.checks[0].observed.contains("refused"),
        "{:?}",
        report.checks[0]
    );
    assert!(fix(&report.checks[0]).contains("pg_hba.conf"));
    assert!(fix(&report.checks[1]).contains("--brokers"));
}

#[tokio::test]
async fn check_reaches_the_broker() {
    let broker = Broker::shared();
    let db = PgCluster::shared().fresh_db();
    db.psql("CREATE PUBLICATION pgoutbox FOR TABLE outbox WITH (publish = 'insert')");
    let mut input = input(&db);
    input.brokers = Some(broker.addr());
    let report = check(&input).await;
    assert!(report.ok(), "{}", report.render());
    let kafka = get(&report, "kafka", &broker.addr());
    assert!(
        kafka.observed.starts_with("reachable: 1 broker(s)"),
        "{kafka:?}"
    );
}

//! Operator commands against a real server: `check` finds every problem and names its
//! fix, `status` reports the slot's lag, `teardown` removes what `setup` made.

use crate::support;

use pgoutbox::ops::check::{check, Check, CheckInput, CheckMode, CheckReport, PollMark};
use pgoutbox::ops::status::status;
use pgoutbox::ops::teardown::{teardown, StateCleanup, TeardownError};
use pgoutbox::pg::client::conninfo::ConnInfo;
use pgoutbox::pg::lsn::Lsn;
use pgoutbox::pg::names::TableName;
use pgoutbox::pg::source::catalog::{grants_sql, CatalogError};
use pgoutbox::pg::source::replication::ReplicationClient;
use pgoutbox::state::{SlotState, StateFile};
use support::kafka::Broker;
use support::{wait_until_eq, ClusterOptions, PgCluster, Pgoutbox, TestDb, WAIT};

/// The columns of sql/outbox.sql the default mapping uses.
const COLUMNS: [&str; 6] = [
    "id",
    "aggregate_type",
    "aggregate_id",
    "event_type",
    "payload",
    "created_at",
];

fn conninfo(url: &str) -> ConnInfo {
    ConnInfo::parse_with_env(url, &|_| None).unwrap()
}

fn table(name: &str) -> TableName {
    TableName::parse(name).unwrap()
}

/// Input for `db` with the default table and mapping, slot and publication named
/// after the database (slot names are cluster-wide).
fn input(db: &TestDb<'_>) -> CheckInput {
    CheckInput {
        mode: Default::default(),
        conninfo: conninfo(&db.url()),
        publication: "pgoutbox".into(),
        tables: vec![table("public.outbox")],
        slot: format!("{}_slot", db.name),
        slot_failover: true,
        columns: COLUMNS.iter().map(|c| c.to_string()).collect(),
        brokers: None,
        kafka_options: Default::default(),
        templates: vec![],
        message_prefixes: vec!["pgoutbox".into()],
        messages_only: false,
    }
}

fn names(report: &CheckReport) -> Vec<&str> {
    report.checks.iter().map(|c| c.name.as_str()).collect()
}

fn failures(report: &CheckReport) -> Vec<(&str, &str)> {
    report
        .failures()
        .map(|c| (c.name.as_str(), c.object.as_str()))
        .collect()
}

fn get<'a>(report: &'a CheckReport, name: &str, object: &str) -> &'a Check {
    report
        .find(name, object)
        .unwrap_or_else(|| panic!("no {name} check of {object}:\n{}", report.render()))
}

fn fix(check: &Check) -> &str {
    check.fix.as_deref().unwrap_or_default()
}

fn create_slot(db: &TestDb<'_>, slot: &str) {
    db.psql(&format!(
        "SELECT pg_create_logical_replication_slot('{slot}', 'pgoutput')"
    ));
}

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

/// A server of its own without logical replication.
fn replica_cluster() -> PgCluster {
    PgCluster::start(ClusterOptions {
        conf: vec!["wal_level = replica".into()],
        ..Default::default()
    })
}

#[tokio::test]
async fn check_with_wal_level_replica_names_the_setting_and_the_fix() {
    let cluster = replica_cluster();
    let db = cluster.fresh_db();
    let report = check(&input(&db)).await;
    assert!(!report.ok());
    let wal = get(&report, "wal_level", "server");
    assert!(!wal.ok);
    assert_eq!(wal.observed, "replica");
    assert!(
        fix(wal).contains("ALTER SYSTEM SET wal_level = logical"),
        "{wal:?}"
    );
    assert!(fix(wal).contains("restart"), "{wal:?}");
    cluster.stop("fast");
}

/// What `setup --source poll` installs, written out here so the test does not
/// depend on it: the column, the partial index, a NOTIFY trigger.
const POLL_OBJECTS: &str = "\
    ALTER TABLE outbox ADD COLUMN published_at timestamptz; \
    ALTER TABLE outbox ADD COLUMN seq bigint GENERATED BY DEFAULT AS IDENTITY; \
    CREATE INDEX outbox_unpublished_idx ON outbox (seq) WHERE published_at IS NULL; \
    CREATE FUNCTION outbox_wake() RETURNS trigger LANGUAGE plpgsql AS \
      $$BEGIN PERFORM pg_notify('pgoutbox', ''); RETURN NULL; END$$; \
    CREATE TRIGGER outbox_wake AFTER INSERT ON outbox \
      FOR EACH STATEMENT EXECUTE FUNCTION outbox_wake();";

/// Issue 15: on a server without logical replication, `check` names the way out
/// (`--source poll`) on the wal_level line, and `check --source poll` checks what
/// poll mode needs — each missing piece a failure with its fix, which works —
/// without asking for wal_level, REPLICATION, a publication or a slot.
#[tokio::test]
async fn check_source_poll_on_wal_level_replica() {
    let cluster = replica_cluster();
    let db = cluster.fresh_db();
    let mut logical = Pgoutbox::spawn(&["check", "--database-url", &db.url()]);
    assert!(!logical.wait_exit(WAIT).success());
    let out = logical.stdout_so_far();
    let wal: Vec<_> = out.iter().filter(|l| l.contains("wal_level")).collect();
    assert_eq!(wal.len(), 1, "{out:?}");
    assert!(wal[0]
        .starts_with("✘ wal_level: server = replica — fix: ALTER SYSTEM SET wal_level = logical"));
    assert!(
        wal[0].contains("`pgoutbox check --source poll`"),
        "{}",
        wal[0]
    );

    let poll = |mark| CheckInput {
        mode: CheckMode::Poll {
            mark,
            order_by: "seq".into(),
        },
        ..input(&db)
    };
    let report = check(&poll(PollMark::Published)).await;
    assert_eq!(
        failures(&report),
        [
            ("published_at", "public.outbox"),
            ("unpublished_index", "public.outbox"),
            ("poll_order", "public.outbox"),
        ],
        "{}",
        report.render()
    );
    assert_eq!(
        fix(get(&report, "published_at", "public.outbox")),
        "ALTER TABLE \"public\".\"outbox\" ADD COLUMN \"published_at\" timestamptz; or: \
         `pgoutbox setup --source poll --table public.outbox` installs it; with --print-sql \
         it prints the SQL for a DBA instead"
    );
    let trigger = get(&report, "notify_trigger", "public.outbox");
    assert!(
        trigger.ok && trigger.observed.contains("poll interval"),
        "{trigger:?}"
    );
    for name in ["wal_level", "role_replication", "publication", "slot"] {
        assert!(
            !names(&report).contains(&name),
            "{name}: {}",
            report.render()
        );
    }

    db.psql(POLL_OBJECTS);
    let report = check(&poll(PollMark::Published)).await;
    assert!(report.ok(), "{}", report.render());
    assert_eq!(
        names(&report),
        [
            "connection",
            "server_version",
            "role_login",
            "table",
            "columns",
            "select_privilege",
            "published_at",
            "unpublished_index",
            "poll_order",
            "poll_privileges",
            "notify_trigger"
        ]
    );
    assert_eq!(
        get(&report, "unpublished_index", "public.outbox").observed,
        "outbox_unpublished_idx (WHERE published_at IS NULL)"
    );
    assert_eq!(
        get(&report, "notify_trigger", "public.outbox").observed,
        "outbox_wake (INSERT, NOTIFY)"
    );

    // A role with SELECT (and DELETE): each mark names the grants it lacks; the fixes work.
    let relay = format!("{}_poll", db.name);
    db.psql(&format!(
        "CREATE ROLE {relay} LOGIN; GRANT SELECT ON outbox TO {relay}"
    ));
    let as_relay = |mark| CheckInput {
        conninfo: conninfo(&format!(
            "postgres://{relay}@127.0.0.1:{}/{}?sslmode=disable",
            cluster.port, db.name
        )),
        ..poll(mark)
    };
    // What the relay will run, as that role: the check must predict it.
    let relay_url = format!(
        "postgres://{relay}@127.0.0.1:{}/{}?sslmode=disable",
        cluster.port, db.name
    );
    let (client, conn) = tokio_postgres::connect(&relay_url, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(conn);
    db.psql("INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload) VALUES ('a', '1', 't', '{}')");
    let claim_and_delete = || async {
        client
            .batch_execute(
                "BEGIN; \
                 DELETE FROM outbox WHERE id IN \
                   (SELECT id FROM outbox ORDER BY seq LIMIT 1 FOR UPDATE SKIP LOCKED); \
                 ROLLBACK",
            )
            .await
            .map_err(|e| e.as_db_error().map(|d| d.message().to_owned()))
    };
    // DELETE alone is not enough: SELECT … FOR UPDATE needs UPDATE on a column.
    db.psql(&format!("GRANT DELETE ON outbox TO {relay}"));
    let denied = claim_and_delete().await;
    let _ = client.batch_execute("ROLLBACK").await;
    assert!(
        matches!(&denied, Err(Some(m)) if m.contains("permission denied")),
        "{denied:?}"
    );
    for mark in [PollMark::Delete, PollMark::Published] {
        let report = check(&as_relay(mark)).await;
        assert_eq!(
            failures(&report),
            [("poll_privileges", "public.outbox")],
            "{}",
            report.render()
        );
        let grants = fix(get(&report, "poll_privileges", "public.outbox")).to_owned();
        let expected = match mark {
            PollMark::Published => {
                format!("GRANT UPDATE (\"published_at\") ON \"public\".\"outbox\" TO \"{relay}\";")
            }
            PollMark::Delete => {
                format!("GRANT UPDATE (\"id\") ON \"public\".\"outbox\" TO \"{relay}\";")
            }
        };
        assert_eq!(grants, expected);
        db.psql(&grants);
        let report = check(&as_relay(mark)).await;
        assert!(report.ok(), "{}", report.render());
        if mark == PollMark::Delete {
            assert_eq!(claim_and_delete().await, Ok(()));
        }
    }

    // The binary: --source poll passes on this server, exit 0.
    let mut cli = Pgoutbox::spawn(&["check", "--source", "poll", "--database-url", &db.url()]);
    assert!(cli.wait_exit(WAIT).success(), "{}", cli.stderr());
    let out = cli.stdout_so_far().join("\n");
    assert!(out.contains("✔ published_at: public.outbox"), "{out}");
    db.psql("DROP INDEX outbox_unpublished_idx");
    let mut cli = Pgoutbox::spawn(&["check", "--source", "poll", "--database-url", &db.url()]);
    assert!(!cli.wait_exit(WAIT).success());
    let out = cli.stdout_so_far().join("\n");
    assert!(
        out.contains("✘ unpublished_index: public.outbox = no valid index"),
        "{out}"
    );
    cluster.stop("fast");
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
    assert_eq!(report.checks.len(), 2);
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
        .start_pgoutput(&slot, Lsn::INVALID, &["pgoutbox".to_owned()])
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

/// On `wal_level = replica`, `run` used to create the publication and then die on
/// the slot with the raw server text (`logical decoding requires wal_level >=
/// logical (SQLSTATE 55000)`). Now run, setup and tail refuse before creating
/// anything, with `check`'s fix.
#[test]
fn wal_level_replica_is_refused_before_anything_is_created_with_checks_fix() {
    let cluster = PgCluster::start(ClusterOptions {
        conf: vec!["wal_level = replica".into()],
        ..ClusterOptions::default()
    });
    let db = cluster.fresh_db();
    let url = db.url();
    let fix = pgoutbox::pg::source::catalog::WAL_LEVEL_FIX;
    let mut check = Pgoutbox::spawn(&["check", "--database-url", &url, "--slot", &db.name]);
    assert!(!check.wait_exit(WAIT).success());
    let report = check.stdout_so_far().join("\n");
    assert!(
        report.contains(&format!("✘ wal_level: server = replica — fix: {fix}")),
        "{report}"
    );
    let state = support::temp_dir("wal-level-state");
    let state = state.display().to_string();
    let commands: [&[&str]; 3] = [
        &[
            "run",
            "--database-url",
            &url,
            "--slot",
            &db.name,
            "--brokers",
            "127.0.0.1:1",
            "--http-addr",
            "off",
            "--state-dir",
            &state,
        ],
        &["setup", "--database-url", &url, "--slot", &db.name],
        &["tail", "--database-url", &url],
    ];
    for args in commands {
        let mut p = Pgoutbox::spawn(args);
        let status = p.wait_exit(WAIT);
        let err = p.stderr();
        assert_eq!(status.code(), Some(1), "{args:?}: {err}");
        assert!(
            err.contains(&format!(
                "wal_level is replica, but logical replication needs wal_level = logical; fix: {fix}"
            )),
            "{args:?}: {err}"
        );
        assert!(!err.contains("SQLSTATE"), "{args:?}: {err}");
        assert_eq!(
            db.psql("SELECT count(*) FROM pg_publication").trim(),
            "0",
            "{args:?} created a publication"
        );
    }
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

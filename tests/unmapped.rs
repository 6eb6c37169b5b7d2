//! A table the publication carries but `--table` does not (issue 11, "never
//! silent"): a newcomer followed `check`'s own `ALTER PUBLICATION … ADD TABLE` fix
//! for a second table and ran the relay without `--table` for it. Its rows were
//! confirmed past and never sent, without a log line. Now `run` stops at its first
//! row (nothing confirmed past it) naming the table and both fixes, `check` fails
//! with the same fixes, and `tail` warns.

use crate::support;

use pgoutbox::ops::check::{check, CheckInput};
use pgoutbox::pg::client::conninfo::ConnInfo;
use pgoutbox::pg::names::TableName;
use support::kafka::{Broker, Reader};
use support::workload::{current_lsn, slot_lsn, spawn_run, start_run, topics};
use support::{wait_for, PgCluster, Pgoutbox, TestDb, WAIT};

const ORDERS: &str = "CREATE TABLE public.orders (id int PRIMARY KEY, note text)";

fn insert_event(db: &TestDb<'_>, id: &str) {
    db.psql(&format!(
        "INSERT INTO outbox (id, aggregate_type, aggregate_id, event_type, payload) \
         VALUES ('{id}', 'order', 'k', 'Created', '{{}}')"
    ));
}

#[test]
fn run_stops_at_the_first_row_of_a_published_table_it_does_not_map() {
    let db = PgCluster::shared().fresh_db();
    let broker = Broker::shared();
    db.psql(ORDERS);
    let mut relay = start_run(&db, &broker.addr(), &[]);
    let first = "00000000-0000-4000-8000-000000000001";
    insert_event(&db, first);
    let mut reader = Reader::new(&broker.addr(), &topics(&db, &["order"]));
    reader.read_until("the first event", WAIT, |r| {
        r.iter().any(|c| c.id() == first)
    });
    // check's own fix for a second table, without telling the relay about it.
    db.psql("ALTER PUBLICATION pgoutbox ADD TABLE public.orders");
    let before = current_lsn(&db);
    db.psql("INSERT INTO public.orders VALUES (1, 'not an outbox row')");
    insert_event(&db, "00000000-0000-4000-8000-000000000002");
    let status = relay.wait_exit(WAIT);
    assert!(!status.success(), "must stop, not pass the row: {status:?}");
    let log = relay.stderr();
    for needle in [
        "publishes table public.orders, which is not an outbox table of this relay (--table public.outbox)",
        "add --table public.orders",
        "ALTER PUBLICATION \"pgoutbox\" DROP TABLE \"public\".\"orders\";",
    ] {
        assert!(log.contains(needle), "no {needle:?} in:\n{log}");
    }
    // Nothing of the orders transaction is confirmed: the slot still holds its row
    // and the event after it. (The confirmed position itself may pass `before`: a
    // keepalive or heartbeat read while that transaction was still open is safe to
    // confirm, because PostgreSQL decodes every transaction committing after the
    // confirmed position.)
    let held = db.psql(&format!(
        "SELECT count(*) FROM pg_logical_slot_peek_binary_changes('{}', NULL, NULL, \
         'proto_version', '1', 'publication_names', 'pgoutbox') WHERE get_byte(data, 0) = 73",
        db.name
    ));
    let confirmed = slot_lsn(&db, "confirmed_flush_lsn");
    assert!(
        held.trim().parse::<u32>().unwrap() >= 2,
        "the slot (confirmed {confirmed}; {before} before the orders row) no longer holds \
         the orders row and the event after it: {held} inserts left"
    );
    assert!(log.contains("--on-invalid missing-column=skip"), "{log}");
    // The message's way past the rows already published: explicitly, logged and
    // counted; then the table leaves the publication and the plain relay runs on.
    let skip = [
        "--table",
        "public.outbox",
        "--table",
        "public.orders",
        "--on-invalid",
        "missing-column=skip",
    ];
    let mut once = spawn_run(&db, &broker.addr(), &skip);
    let second = "00000000-0000-4000-8000-000000000002";
    let arrived = reader.try_read_until(WAIT, |r| r.iter().any(|c| c.id() == second));
    assert!(
        arrived,
        "the event after the row; relay:\n{}",
        once.stderr()
    );
    once.signal("TERM");
    once.wait_exit(WAIT);
    assert!(
        once.stderr().contains("poison row: skipping"),
        "{}",
        once.stderr()
    );
    db.psql("ALTER PUBLICATION pgoutbox DROP TABLE public.orders");
    db.psql("INSERT INTO public.orders VALUES (2, 'after the drop')");
    let third = "00000000-0000-4000-8000-000000000003";
    insert_event(&db, third);
    let _relay = start_run(&db, &broker.addr(), &[]);
    reader.read_until("the event after the drop", WAIT, |r| {
        r.iter().any(|c| c.id() == third)
    });
}

#[tokio::test]
async fn check_fails_on_a_published_table_that_is_not_an_outbox_table() {
    let db = PgCluster::shared().fresh_db();
    db.psql(ORDERS);
    db.psql("CREATE PUBLICATION pgoutbox FOR TABLE outbox, orders WITH (publish = 'insert')");
    let input = CheckInput {
        mode: Default::default(),
        conninfo: ConnInfo::parse_with_env(&db.url(), &|_| None).unwrap(),
        publication: "pgoutbox".into(),
        tables: vec![TableName::parse("public.outbox").unwrap()],
        slot: format!("{}_slot", db.name),
        columns: [
            "id",
            "aggregate_type",
            "aggregate_id",
            "event_type",
            "payload",
        ]
        .map(String::from)
        .to_vec(),
        brokers: None,
        slot_failover: true,
        kafka_options: Default::default(),
        templates: vec![],
        message_prefixes: vec!["pgoutbox".into()],
        messages_only: false,
        delivery: None,
    };
    let report = check(&input).await;
    let other = report
        .find("publication_other_tables", "pgoutbox")
        .unwrap_or_else(|| panic!("{}", report.render()));
    assert!(!other.ok, "{}", report.render());
    assert!(
        other
            .observed
            .starts_with("also publishes public.orders, not among the outbox tables"),
        "{other:?}"
    );
    let fix = other.fix.as_deref().unwrap_or_default();
    assert!(fix.contains("add --table public.orders"), "{fix}");
    let sql = fix.split(" with: ").nth(1).expect("the SQL");
    assert_eq!(
        sql,
        "ALTER PUBLICATION \"pgoutbox\" DROP TABLE \"public\".\"orders\";"
    );
    db.psql(sql);
    let report = check(&input).await;
    let other = report.find("publication_other_tables", "pgoutbox").unwrap();
    assert!(other.ok, "{}", report.render());
}

#[test]
fn tail_warns_about_a_published_table_it_does_not_show() {
    let db = PgCluster::shared().fresh_db();
    db.psql(ORDERS);
    // The relay's publication (tail uses it as it finds it; without one, tail would
    // read through a temporary publication of its own).
    db.psql("CREATE PUBLICATION pgoutbox FOR TABLE outbox WITH (publish = 'insert')");
    let url = db.url();
    let mut tail = Pgoutbox::spawn(&["tail", "--database-url", url.as_str()]);
    tail.wait_stderr("tailing outbox", WAIT);
    db.psql("ALTER PUBLICATION pgoutbox ADD TABLE public.orders");
    db.psql("INSERT INTO public.orders VALUES (1, 'not an outbox row')");
    insert_event(&db, "00000000-0000-4000-8000-000000000003");
    let lines = tail.take_lines(1, WAIT);
    assert!(
        lines[0].contains("00000000-0000-4000-8000-000000000003"),
        "{lines:?}"
    );
    wait_for("tail's warning", WAIT, || {
        tail.stderr()
            .contains("publishes table public.orders, which is not an outbox table (--table)")
            .then_some(())
    });
    tail.signal("TERM");
    tail.wait_exit(WAIT);
}

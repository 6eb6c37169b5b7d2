//! Layouts that survive re-creating the outbox table (issue 28, item 3): with the
//! republish trigger (`pgoutbox setup --republish-trigger`), a rename swap and a
//! DROP + CREATE of the outbox table, each with rows written right after, keep
//! the relay going and lose nothing; `check` says which layout is in place and
//! offers the trigger where it is missing.
//!
//! How the test fails without the trigger: the publication watch stops the relay
//! at the first re-creation (`migrations::` covers that stop).

use crate::slot_safety::{insert, read_all, start, stop};
use crate::support;

use support::kafka::Broker;
use support::{temp_dir, PgCluster, Pgoutbox, TestDb, WAIT};

/// `pgoutbox check`'s `layout` line for `db`.
fn layout_line(db: &TestDb<'_>) -> String {
    let url = db.url();
    let mut check = Pgoutbox::spawn(&["check", "--database-url", &url, "--slot", &db.name]);
    check.wait_exit(WAIT);
    let out = check.stdout_so_far().join("\n");
    out.lines()
        .find(|l| l.contains(" layout: "))
        .unwrap_or_else(|| panic!("no layout line in:\n{out}"))
        .to_owned()
}

/// Wait until the relay's publication watch adopted `n` re-creations (each
/// published in the transaction that made it).
fn adopted(relay: &Pgoutbox, n: usize) {
    let found = support::wait_for_opt(WAIT, || {
        let log = relay.stderr();
        (log.matches("in the same transaction").count() >= n).then_some(())
    });
    assert!(
        found.is_some(),
        "{n} re-creations adopted:\n{}",
        relay.stderr()
    );
}

#[test]
fn with_the_republish_trigger_a_swap_and_a_recreate_keep_the_relay_going() {
    let db = PgCluster::shared().fresh_db();
    let broker = Broker::shared().addr();
    let state = temp_dir("state");
    let url = db.url();
    let setup = |extra: &[&str]| {
        let mut args = vec!["setup", "--database-url", url.as_str(), "--slot", &db.name];
        args.extend_from_slice(extra);
        let mut setup = Pgoutbox::spawn(&args);
        let status = setup.wait_exit(WAIT);
        assert!(status.success(), "setup {extra:?}:\n{}", setup.stderr());
    };
    setup(&[]);
    let before = layout_line(&db);
    assert!(
        before.contains("a DROP + CREATE or a rename swap of one stops the relay")
            && before.contains("pgoutbox setup --republish-trigger"),
        "{before}"
    );
    setup(&["--republish-trigger"]);
    let after = layout_line(&db);
    assert!(
        after.contains("republish trigger \"pgoutbox_republish_pgoutbox\""),
        "{after}"
    );
    assert!(!after.contains("suggestion"), "{after}");

    let relay = start(&db, &broker, &state, &["--heartbeat-interval", "1s"]);
    let mut events = insert(&db, "order", 2);
    // The README's swap without the publication step: the trigger does it.
    db.psql(
        "BEGIN; ALTER TABLE outbox RENAME TO outbox_old; \
         CREATE TABLE outbox (LIKE outbox_old INCLUDING ALL); COMMIT",
    );
    events.extend(insert(&db, "order", 3));
    read_all(&broker, &db, "order", &events);
    adopted(&relay, 1);
    db.psql("DROP TABLE outbox; CREATE TABLE outbox (LIKE outbox_old INCLUDING ALL)");
    events.extend(insert(&db, "order", 3));
    read_all(&broker, &db, "order", &events);
    adopted(&relay, 2);
    let mut relay = relay;
    assert!(
        relay.child.try_wait().expect("try_wait").is_none(),
        "the relay keeps running:\n{}",
        relay.stderr()
    );
    events.extend(insert(&db, "order", 1));
    read_all(&broker, &db, "order", &events);
    stop(relay);
}

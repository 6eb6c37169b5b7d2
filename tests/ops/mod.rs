//! Operator commands against a real server: `check` finds every problem and names its
//! fix, `status` reports the slot's lag, `teardown` removes what `setup` made.
//!
//! - [`check`]: `check` on a server that decodes logically;
//! - [`wal_level`]: a server at `wal_level = replica` (check, poll mode, refusal);
//! - [`slot`]: `status` and `teardown`, and how server notices are logged.
//!
//! Here: the helpers they share (the outbox columns, a `CheckInput` for a test
//! database, reading a `CheckReport`).

mod check;
mod slot;
mod wal_level;

use crate::support;

use pgoutbox::ops::check::{Check, CheckInput, CheckReport};
use pgoutbox::pg::client::conninfo::ConnInfo;
use pgoutbox::pg::names::TableName;
use support::TestDb;

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
        delivery: None,
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

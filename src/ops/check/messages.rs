//! The `messages` check: whether logical decoding messages can be outbox events on
//! this server, and in `--messages-only` mode whether the publication is empty.
//!
//! Invariants: `--messages-only` on PostgreSQL 13 or older fails with the fix
//! (upgrade); table mode with message prefixes on such a server passes with the
//! caveat that only the tables are relayed; in `--messages-only` mode a
//! publication that publishes any table fails (a row of it would stop `run`).

use tokio_postgres::Client;

use super::server::Facts;
use super::{Check, CheckInput};
use crate::pg::names::quote_ident;
use crate::pg::names::TableName;
use crate::pg::source::catalog::{MESSAGES_MIN_VERSION_NUM, MESSAGES_ONLY_NEEDS_14};

/// `messages`, and in `--messages-only` mode `publication_empty`.
pub(super) async fn message_checks(
    client: &Client,
    input: &CheckInput,
    facts: &Facts,
) -> Vec<Check> {
    let prefixes = input.message_prefixes.join(", ");
    let supported = facts.version_num >= MESSAGES_MIN_VERSION_NUM;
    let mut checks = vec![mode_check(input, &prefixes, supported, &facts.version)];
    if input.messages_only && supported {
        checks.push(publication_empty(client, input).await);
    }
    checks
}

fn mode_check(input: &CheckInput, prefixes: &str, supported: bool, version: &str) -> Check {
    let object = format!("prefix {prefixes}");
    match (input.messages_only, supported, input.message_prefixes.is_empty()) {
        (true, true, _) => Check::pass(
            "messages",
            object,
            "messages only: logical decoding messages with these prefixes are the outbox events; no outbox table is expected",
        ),
        (true, false, _) => Check::fail(
            "messages",
            object,
            format!("--messages-only on PostgreSQL {version}"),
            MESSAGES_ONLY_NEEDS_14,
        ),
        (false, _, true) => Check::pass("messages", "no prefix", "off (--message-prefix is empty): only the outbox tables are relayed"),
        (false, true, false) => Check::pass(
            "messages",
            object,
            "relayed too, in commit order with the rows of their transaction",
        ),
        (false, false, false) => Check::pass(
            "messages",
            object,
            format!("not available on PostgreSQL {version} (pgoutput streams them from 14 on): only the outbox tables are relayed"),
        ),
    }
}

/// In `--messages-only` mode the publication must publish no table.
async fn publication_empty(client: &Client, input: &CheckInput) -> Check {
    let name = input.publication.as_str();
    let rows = client
        .query(
            "SELECT schemaname::text, tablename::text FROM pg_publication_tables WHERE pubname = $1",
            &[&name],
        )
        .await;
    let tables: Vec<TableName> = match rows {
        Ok(rows) => rows
            .iter()
            .map(|r| TableName {
                schema: r.get(0),
                name: r.get(1),
            })
            .collect(),
        Err(err) => return Check::query_failed("publication_empty", name, &err),
    };
    if tables.is_empty() {
        return Check::pass(
            "publication_empty",
            name,
            "publishes no table (--messages-only)",
        );
    }
    let shown: Vec<String> = tables.iter().take(10).map(ToString::to_string).collect();
    let quoted: Vec<String> = tables.iter().map(TableName::quoted).collect();
    let ident = quote_ident(name);
    Check::fail(
        "publication_empty",
        name,
        format!(
            "publishes {} table(s) ({}{}): in --messages-only mode a row of any of them stops the relay",
            tables.len(),
            shown.join(", "),
            if tables.len() > shown.len() { ", …" } else { "" }
        ),
        format!(
            "ALTER PUBLICATION {ident} DROP TABLE {}; (a FOR ALL TABLES publication: DROP PUBLICATION {ident}; and let `pgoutbox setup --messages-only` create an empty one) — or use another --publication",
            quoted.join(", ")
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn input(messages_only: bool, prefixes: &[&str]) -> CheckInput {
        CheckInput {
            mode: Default::default(),
            conninfo: crate::pg::client::conninfo::ConnInfo::parse("postgres://u@h/db").unwrap(),
            publication: "p".into(),
            tables: Vec::new(),
            slot: "s".into(),
            slot_failover: false,
            columns: Vec::new(),
            brokers: None,
            kafka_options: Default::default(),
            templates: Vec::new(),
            message_prefixes: prefixes.iter().map(|p| (*p).to_owned()).collect(),
            messages_only,
            delivery: None,
        }
    }

    #[test]
    fn thirteen_refuses_messages_only_with_the_fix_and_tables_mode_passes() {
        let only = input(true, &["pgoutbox"]);
        let c = mode_check(&only, "pgoutbox", false, "13.22");
        assert!(!c.ok);
        assert_eq!(c.observed, "--messages-only on PostgreSQL 13.22");
        assert!(c
            .fix
            .unwrap()
            .contains("upgrade the server to PostgreSQL 14 or later"));
        assert!(mode_check(&only, "pgoutbox", true, "17.6").ok);
        let tables = input(false, &["pgoutbox"]);
        let c = mode_check(&tables, "pgoutbox", false, "13.22");
        assert!(c.ok && c.observed.contains("only the outbox tables are relayed"));
    }
}

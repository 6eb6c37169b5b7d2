//! `pgoutbox setup`: create the publication and the slot when missing.
//!
//! Owns the order of creation — publication first, then slot — because pgoutput
//! reads the publication through the slot's historic snapshot: a slot created before
//! its publication fails to decode changes older than the publication. The slot is a
//! failover slot on PostgreSQL 17+ unless `--slot-failover false` ([`crate::pg::failover`]).
//! With `--messages-only` there is no table and the publication is created empty
//! (`CREATE PUBLICATION name WITH (…)`): pgoutput needs one, the messages do not.
//! Invariant: idempotent; running it twice changes nothing the second time (an
//! existing slot is never altered).

use crate::pg::catalog::TableName;
use crate::pg::catalog::{self, create_publication_sql, CatalogError, Ensured};
use crate::pg::conninfo::ConnInfo;
use crate::pg::failover;

/// The SQL `setup` would run, in order, one statement per line. With `failover`,
/// the slot statement picks the form by server version when it runs (PostgreSQL
/// 17+: a failover slot), so the same text works on every version.
pub fn sql(publication: &str, tables: &[TableName], slot: &str, failover: bool) -> Vec<String> {
    let slot_sql = if failover {
        format!(
            "DO $$ BEGIN IF current_setting('server_version_num')::int >= {} THEN PERFORM {}; ELSE PERFORM {}; END IF; END $$;",
            failover::MIN_VERSION_NUM,
            failover::create_slot_call(slot, true, failover::MIN_VERSION_NUM),
            failover::create_slot_call(slot, false, 0),
        )
    } else {
        format!("{};", failover::create_slot_sql(slot, false, 0))
    };
    vec![
        format!("{};", create_publication_sql(publication, tables)),
        slot_sql,
    ]
}

/// What setup did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SetupOutcome {
    /// Publication created or found.
    pub publication: Ensured,
    /// Slot created or found.
    pub slot: Ensured,
}

/// Ensure publication and slot exist. `messages_only` (no table: an empty
/// publication) is refused before PostgreSQL 14, before anything is created.
pub async fn run(
    conninfo: &ConnInfo,
    publication: &str,
    tables: &[TableName],
    slot: &str,
    slot_failover: bool,
    messages_only: bool,
) -> Result<SetupOutcome, CatalogError> {
    let client = catalog::connect(conninfo).await?;
    catalog::require_logical_wal(&client).await?;
    if messages_only {
        catalog::require_messages(&client).await?;
    }
    let publication = catalog::ensure_publication(&client, publication, tables).await?;
    let slot = catalog::ensure_slot(&client, slot, slot_failover).await?;
    Ok(SetupOutcome { publication, slot })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn print_sql_makes_a_failover_slot_on_17_and_a_plain_one_before() {
        let tables = [TableName::parse("outbox").unwrap()];
        let on = sql("p", &tables, "s", true);
        assert_eq!(on.len(), 2);
        assert!(on[0].starts_with("CREATE PUBLICATION"), "{on:?}");
        assert_eq!(
            on[1],
            "DO $$ BEGIN IF current_setting('server_version_num')::int >= 170000 THEN \
             PERFORM pg_create_logical_replication_slot('s', 'pgoutput', false, false, true); \
             ELSE PERFORM pg_create_logical_replication_slot('s', 'pgoutput'); END IF; END $$;"
        );
        let off = sql("p", &tables, "s", false);
        assert_eq!(
            off[1],
            "SELECT pg_create_logical_replication_slot('s', 'pgoutput');"
        );
    }
}

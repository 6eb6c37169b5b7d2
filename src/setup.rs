//! `pgoutbox setup`: create the publication and the slot when missing.
//!
//! Owns the order of creation — publication first, then slot — because pgoutput
//! reads the publication through the slot's historic snapshot: a slot created before
//! its publication fails to decode changes older than the publication. Invariant:
//! idempotent; running it twice changes nothing the second time.

use crate::pg::catalog::TableName;
use crate::pg::catalog::{self, create_publication_sql, CatalogError, Ensured};
use crate::pg::conninfo::ConnInfo;
use crate::pg::replication::quote_literal;

/// The SQL `setup` would run, in order.
pub fn sql(publication: &str, tables: &[TableName], slot: &str) -> Vec<String> {
    vec![
        format!("{};", create_publication_sql(publication, tables)),
        format!(
            "SELECT pg_create_logical_replication_slot({}, 'pgoutput');",
            quote_literal(slot)
        ),
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

/// Ensure publication and slot exist.
pub async fn run(
    conninfo: &ConnInfo,
    publication: &str,
    tables: &[TableName],
    slot: &str,
) -> Result<SetupOutcome, CatalogError> {
    let client = catalog::connect(conninfo).await?;
    catalog::require_logical_wal(&client).await?;
    let publication = catalog::ensure_publication(&client, publication, tables).await?;
    let slot = catalog::ensure_slot(&client, slot).await?;
    Ok(SetupOutcome { publication, slot })
}

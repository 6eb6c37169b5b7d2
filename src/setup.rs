//! `pgoutbox setup`: create the publication and the slot when missing.
//!
//! Owns the order of creation — publication first, then slot — because pgoutput
//! reads the publication through the slot's historic snapshot: a slot created before
//! its publication fails to decode changes older than the publication. The slot is a
//! failover slot on PostgreSQL 17+ unless `--slot-failover false` ([`crate::pg::source::failover`]).
//! With `--messages-only` there is no table and the publication is created empty
//! (`CREATE PUBLICATION name WITH (…)`): pgoutput needs one, the messages do not.
//! Invariant: idempotent; running it twice changes nothing the second time (an
//! existing slot is never altered).
//!
//! `setup --source poll` ([`poll_sql`], [`run_poll`]) instead installs what poll
//! mode needs on an existing outbox table (the `published_at` column, the ordering
//! column when it is the default, the partial index on unpublished rows, the NOTIFY
//! trigger; [`crate::poll::sql`]), in one transaction, never a publication or slot.

use crate::pg::client::conninfo::ConnInfo;
use crate::pg::names::TableName;
use crate::pg::source::catalog::{self, create_publication_sql, CatalogError, Ensured};
use crate::pg::source::failover;

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

/// Install the republish trigger ([`crate::pg::source::republish`]): a re-created
/// outbox table is added to the publication in the transaction that creates it.
/// Needs a superuser (event triggers); the error says so with the alternative.
pub async fn install_republish_trigger(
    conninfo: &ConnInfo,
    publication: &str,
    tables: &[TableName],
) -> Result<(), CatalogError> {
    let client = catalog::connect(conninfo).await?;
    let sql = crate::pg::source::republish::install_sql(publication, tables).join("\n");
    client
        .batch_execute(&format!("BEGIN;\n{sql}\nCOMMIT;"))
        .await
        .map_err(catalog::query_err(
            "creating the republish event trigger (fix: run `pgoutbox setup --republish-trigger` as a superuser: event triggers need one, on a managed service its highest role if that may create event triggers; or have a DBA run what `pgoutbox setup --print-sql --republish-trigger` prints)",
        ))
}

/// The SQL `setup --source poll` would run on `tables`; the ordering column is
/// added only when it is the default one (an existing column named with
/// `--poll-order-by` is used as it is).
pub fn poll_sql(tables: &[TableName], order_by: &str) -> Vec<String> {
    let add = order_by == crate::poll::sql::DEFAULT_ORDER_COLUMN;
    tables
        .iter()
        .flat_map(|t| crate::poll::sql::setup(t, order_by, add))
        .collect()
}

/// What `setup --source poll` did to one table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PollOutcome {
    /// The table.
    pub table: TableName,
    /// Columns it added (`published_at`, the ordering column).
    pub added: Vec<String>,
}

/// Install poll mode's objects on each of `tables` (one transaction per table).
pub async fn run_poll(
    conninfo: &ConnInfo,
    tables: &[TableName],
    order_by: &str,
) -> Result<Vec<PollOutcome>, PollSetupError> {
    let client = catalog::connect(conninfo).await?;
    let mut outcomes = Vec::new();
    for table in tables {
        let before = columns(&client, table).await?;
        let add = order_by == crate::poll::sql::DEFAULT_ORDER_COLUMN;
        if !add && !before.iter().any(|c| c == order_by) {
            return Err(PollSetupError::NoOrderColumn {
                table: table.clone(),
                column: order_by.to_owned(),
            });
        }
        let sql = crate::poll::sql::setup(table, order_by, add).join("\n");
        client
            // IF NOT EXISTS reports what it skipped as NOTICEs: the outcome says it.
            .batch_execute(&format!(
                "BEGIN;\nSET LOCAL client_min_messages = warning;\n{sql}\nCOMMIT;"
            ))
            .await
            .map_err(|error| CatalogError::Query {
                context: format!("installing poll mode on {table}"),
                error,
            })?;
        let after = columns(&client, table).await?;
        let added = after.into_iter().filter(|c| !before.contains(c)).collect();
        outcomes.push(PollOutcome {
            table: table.clone(),
            added,
        });
    }
    Ok(outcomes)
}

/// Why `setup --source poll` stopped.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PollSetupError {
    /// Connecting or a statement failed (a missing table included).
    #[error(transparent)]
    Catalog(#[from] CatalogError),
    /// `--poll-order-by` names a column the table does not have.
    #[error("outbox table {table} has no column {column:?} (--poll-order-by); fix: create it (an increasing bigint, e.g. GENERATED BY DEFAULT AS IDENTITY) or leave --poll-order-by at its default, seq, which setup adds")]
    NoOrderColumn { table: TableName, column: String },
}

/// The live columns of `table`; a missing table is [`CatalogError::MissingTable`].
async fn columns(
    client: &tokio_postgres::Client,
    table: &TableName,
) -> Result<Vec<String>, CatalogError> {
    let context = || format!("reading the columns of {table}");
    let exists = client
        .query_one("SELECT to_regclass($1) IS NOT NULL", &[&table.quoted()])
        .await
        .map_err(|error| CatalogError::Query {
            context: context(),
            error,
        })?;
    if !exists.get::<_, bool>(0) {
        return Err(CatalogError::MissingTable {
            table: table.clone(),
        });
    }
    let rows = client
        .query(
            "SELECT attname::text FROM pg_attribute WHERE attrelid = $1::text::regclass AND attnum > 0 AND NOT attisdropped",
            &[&table.quoted()],
        )
        .await
        .map_err(|error| CatalogError::Query {
            context: context(),
            error,
        })?;
    Ok(rows.iter().map(|r| r.get(0)).collect())
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

//! Publication repair: an outbox table re-created while the relay runs (DROP +
//! CREATE, or a rename swap) and not published is added back by the relay, and
//! the rows written to it meanwhile go out through the WAL, in the stream's order.
//!
//! ```text
//!  watch: "re-created (OID a → b) and not published", nothing else changed
//!    └─ one transaction on the relay's catalog connection:
//!         LOCK TABLE t IN SHARE ROW EXCLUSIVE MODE   writers wait; in-progress ones finish first
//!         still OID b, still not published?          (else: someone else acted: judged as found)
//!         ALTER PUBLICATION p ADD TABLE t            rows committed after this are decoded as usual
//!         pg_logical_emit_message(true, 'pgoutbox.repair.relation', {table, columns})
//!         pg_logical_emit_message(true, 'pgoutbox.repair.row', [text values]) per row present
//!       COMMIT
//!  stream: the repair transaction arrives at its commit, before any row written
//!          after it; the relay turns its messages into the rows' records
//!          ([`crate::pipeline::relay`]), acked and confirmed like any transaction
//! ```
//!
//! Why messages in the WAL rather than rows sent from the SQL connection: the
//! rows then take the stream's path — their order against later rows is the WAL's,
//! a kill -9 resends them from the slot like any transaction, and under
//! exactly-once the watermark covers them. The one thing kept in the state file:
//! before the commit, the `pg_publication_rel` row the repair made
//! ([`RepairRecord`], in the baseline), so a later session — or a process started
//! after a crash right after the commit — tells the relay's own `ADD TABLE` from
//! someone else's and adopts it.
//!
//! Invariants: every row the lock lets the repair see was not decoded (the table
//! was never in the publication before the repair's `ADD TABLE`, and rows
//! committed after it are decoded by the stream, never re-read); a repair only
//! runs on a session's connection, so only the relay holding the slot repairs;
//! rows are emitted in the order their transactions started (`age(xmin)`), then in
//! the order they were written (`ctid`); a table copied into the new one (`INSERT
//! … SELECT` from the old table) is sent again whole — rows the relay cannot tell
//! from new events. Needs PostgreSQL 14+ (pgoutput's `messages`).

use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use tokio_postgres::Client;

use crate::pg::names::{quote_ident, quote_literal};
use crate::pg::source::publication_state::{Member, PublicationState, RepairRecord};

/// The prefix of the message that describes the re-created table's columns.
pub const RELATION_PREFIX: &str = "pgoutbox.repair.relation";
/// The prefix of the message that carries one row.
pub const ROW_PREFIX: &str = "pgoutbox.repair.row";
/// The least server version (pgoutput streams messages from 14 on).
pub const MIN_VERSION_NUM: i32 = 140_000;
/// How long the repair waits for writers in progress to finish.
const LOCK_TIMEOUT: &str = "30s";

/// Whether `prefix` is one of a repair's messages.
pub fn is_repair(prefix: &str) -> bool {
    prefix == RELATION_PREFIX || prefix == ROW_PREFIX
}

/// The content of a [`RELATION_PREFIX`] message.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RepairedRelation {
    /// The table's OID (the relation id its later rows arrive with).
    pub oid: u32,
    pub schema: String,
    pub name: String,
    /// Its columns in attribute order: name and type OID.
    pub columns: Vec<(String, u32)>,
}

/// What a repair did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Repaired {
    /// The table, quoted.
    pub table: String,
    /// Rows emitted.
    pub rows: u64,
    /// How long the lock took to get (writers in progress finishing).
    pub waited: Duration,
    /// How long writers were held (lock to commit).
    pub held: Duration,
}

/// Why a repair did not happen.
#[derive(Debug, thiserror::Error)]
pub enum RepairError {
    /// A statement failed (permission, lock timeout, a lost connection).
    #[error("repairing {table}: {reason}")]
    Failed { table: String, reason: String },
    /// Between the reading and the lock, the table changed again or was added.
    #[error(
        "repairing {table}: it changed again before the lock was taken ({now}); judged as found"
    )]
    Moved { table: String, now: String },
}

/// The tables of `now` whose only change from `before` is that they were
/// re-created (a new OID) and are not published — when that is the whole
/// difference (the publication itself unchanged): the relay may repair them.
pub fn repairable<'a>(before: &PublicationState, now: &'a PublicationState) -> Vec<&'a str> {
    if before.oid.is_none() || before.oid != now.oid || before.row_version != now.row_version {
        return Vec::new();
    }
    let mut tables = Vec::new();
    for is in &now.tables {
        let Some(was) = before.tables.iter().find(|w| w.table == is.table) else {
            continue;
        };
        let recreated_unpublished = is.member == Member::None
            && is.oid.is_some()
            && was.oid.is_some()
            && is.oid != was.oid
            && was.member == Member::Table;
        if recreated_unpublished {
            tables.push(is.table.as_str());
        } else if was != is {
            return Vec::new();
        }
    }
    tables
}

/// A repair whose transaction is open, everything emitted, not yet committed:
/// the caller records [`Prepared::record`] durably, then [`commit`]s (or
/// [`rollback`]s).
#[derive(Debug)]
pub struct Prepared {
    pub record: RepairRecord,
    rows: u64,
    waited: Duration,
    locked: Instant,
}

/// Lock `table` (quoted, as the catalog reading names it), expected to have OID
/// `oid` and not be in `publication`, re-add it and emit its rows, leaving the
/// transaction open (rolled back on error). See the module doc.
pub async fn prepare(
    client: &Client,
    publication: &str,
    table: &str,
    oid: u32,
) -> Result<Prepared, RepairError> {
    let began = Instant::now();
    client
        .batch_execute(&format!(
            "BEGIN; SET LOCAL lock_timeout = '{LOCK_TIMEOUT}'; \
             LOCK TABLE {table} IN SHARE ROW EXCLUSIVE MODE"
        ))
        .await
        .map_err(|e| failed(table, &e))?;
    let locked = Instant::now();
    match repair_locked(client, publication, table, oid).await {
        Ok((member_oid, rows)) => Ok(Prepared {
            record: RepairRecord {
                table: table.to_owned(),
                oid,
                member_oid,
            },
            rows,
            waited: locked - began,
            locked,
        }),
        Err(err) => {
            rollback(client).await;
            Err(err)
        }
    }
}

/// Commit a prepared repair.
pub async fn commit(client: &Client, prepared: Prepared) -> Result<Repaired, RepairError> {
    crate::failpoint::hit("repair-before-commit");
    let table = prepared.record.table.clone();
    client
        .batch_execute("COMMIT")
        .await
        .map_err(|e| failed(&table, &e))?;
    Ok(Repaired {
        table,
        rows: prepared.rows,
        waited: prepared.waited,
        held: prepared.locked.elapsed(),
    })
}

/// Roll an open repair back (its lock released, nothing added or emitted).
pub async fn rollback(client: &Client) {
    if let Err(err) = client.batch_execute("ROLLBACK").await {
        tracing::debug!(error = %err, "rolling a publication repair back");
    }
}

fn failed(table: &str, e: &tokio_postgres::Error) -> RepairError {
    RepairError::Failed {
        table: table.to_owned(),
        reason: crate::pg::source::catalog::describe(e),
    }
}

/// The repair's statements once the lock is held: the `pg_publication_rel` row
/// made and the rows emitted.
async fn repair_locked(
    client: &Client,
    publication: &str,
    table: &str,
    oid: u32,
) -> Result<(u32, u64), RepairError> {
    let failed = |e: tokio_postgres::Error| failed(table, &e);
    let row = client
        .query_one(
            "SELECT c.oid::int8, n.nspname::text, c.relname::text, \
                    EXISTS (SELECT 1 FROM pg_publication_tables p \
                            WHERE p.pubname = $2 AND p.schemaname = n.nspname \
                              AND p.tablename = c.relname) \
             FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace \
             WHERE c.oid = to_regclass($1)",
            &[&table, &publication],
        )
        .await
        .map_err(failed)?;
    let (now_oid, schema, name, published): (i64, String, String, bool) =
        (row.get(0), row.get(1), row.get(2), row.get(3));
    if now_oid != i64::from(oid) || published {
        return Err(RepairError::Moved {
            table: table.to_owned(),
            now: format!("OID {now_oid}, published: {published}"),
        });
    }
    client
        .batch_execute(&format!(
            "ALTER PUBLICATION {} ADD TABLE {table}",
            quote_ident(publication)
        ))
        .await
        .map_err(failed)?;
    let member: i64 = client
        .query_one(
            "SELECT r.oid::int8 FROM pg_publication_rel r \
             JOIN pg_publication p ON p.oid = r.prpubid \
             WHERE p.pubname = $1 AND r.prrelid = $2::int8::oid",
            &[&publication, &now_oid],
        )
        .await
        .map_err(failed)?
        .get(0);
    let columns: Vec<(String, u32)> = client
        .query(
            "SELECT attname::text, atttypid::int8 FROM pg_attribute \
             WHERE attrelid = $1::int8::oid AND attnum > 0 AND NOT attisdropped ORDER BY attnum",
            &[&now_oid],
        )
        .await
        .map_err(failed)?
        .iter()
        .map(|r| (r.get::<_, String>(0), r.get::<_, i64>(1) as u32))
        .collect();
    let relation = RepairedRelation {
        oid,
        schema,
        name,
        columns: columns.clone(),
    };
    let described = serde_json::to_string(&relation).expect("a relation serializes");
    client
        .execute(
            "SELECT pg_logical_emit_message(true, $1, $2)",
            &[&RELATION_PREFIX, &described],
        )
        .await
        .map_err(failed)?;
    let values: Vec<String> = columns
        .iter()
        .map(|(c, _)| format!("o.{}::text", quote_ident(c)))
        .collect();
    let emitted = client
        .query_one(
            &format!(
                "SELECT count(pg_logical_emit_message(true, {}, jsonb_build_array({})::text)) \
                 FROM (SELECT * FROM {table} ORDER BY age(xmin) DESC, ctid) AS o",
                quote_literal(ROW_PREFIX),
                values.join(", ")
            ),
            &[],
        )
        .await
        .map_err(failed)?;
    Ok((member as u32, emitted.get::<_, i64>(0) as u64))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pg::source::publication_state::TableState;

    fn state(oid: Option<u32>, member: Member) -> PublicationState {
        PublicationState {
            oid: Some(1),
            row_version: "10".into(),
            all_tables: false,
            publish: "insert".into(),
            tables: vec![TableState {
                table: "\"public\".\"outbox\"".into(),
                oid,
                member,
                member_oid: (member == Member::Table).then_some(50),
                row_filter: None,
                created_by: None,
                member_by: None,
            }],
        }
    }

    #[test]
    fn only_a_recreated_unpublished_table_is_repairable() {
        let before = state(Some(100), Member::Table);
        let recreated = state(Some(200), Member::None);
        assert_eq!(repairable(&before, &recreated), ["\"public\".\"outbox\""]);
        // Removed from the publication (same table): its window cannot be told apart.
        assert!(repairable(&before, &state(Some(100), Member::None)).is_empty());
        // Dropped and not re-created: nothing to add.
        assert!(repairable(&before, &state(None, Member::None)).is_empty());
        // The publication altered too: not only a re-creation.
        let mut altered = recreated.clone();
        altered.row_version = "11".into();
        assert!(repairable(&before, &altered).is_empty());
    }
}

//! `pgoutbox cleanup`: delete outbox rows the relay is done with, older than a
//! cutoff, in small batches — one DELETE per batch, each its own short transaction,
//! so no lock is held for long and vacuum can reclaim space as the job goes.
//!
//! Owns which rows may go, per mode:
//! - poll: `published_at < cutoff`; an unpublished row (NULL) never matches.
//! - logical: `timestamp column < cutoff` **and** the row's inserting transaction
//!   finished before the slot's `catalog_xmin`: PostgreSQL moves a logical slot's
//!   `catalog_xmin` to a candidate horizon only once the client confirmed a position
//!   at or past the WAL record that horizon came from (LogicalConfirmReceivedLocation),
//!   and every transaction older than the horizon had finished before that record.
//!   So such a row's commit is at or before `confirmed_flush_lsn`: relayed and acked
//!   (or older than the slot itself, which never relays it). Test: `age(xmin) >
//!   age(catalog_xmin)`, both aged against the same next xid. Conservative: a
//!   confirmed row may wait for the next horizon move; an unconfirmed one never goes.
//!   The xmin system column shows the raw xid even of a frozen row, so freezing does
//!   not make a young row look old. Without a usable slot cleanup refuses, unless the
//!   caller states the table is not the last copy ([`CleanupMode::Logical`]
//!   `slot: None`).
//!
//! Batches walk the table in ctid order (`ctid > last`), so each batch starts where
//! the last stopped instead of rescanning dead rows (a TID range scan on
//! PostgreSQL 14+); synchronized seq scans are switched off so the walk starts at
//! page 0. A ctid names a row only within one heap, so a partitioned table is walked
//! partition by partition. Rows that newly qualify during the run wait for the next
//! one.

use std::time::{Duration, Instant};

use tokio_postgres::Client;

use crate::pg::client::conninfo::ConnInfo;
use crate::pg::names::quote_ident;
use crate::pg::names::TableName;
use crate::pg::source::catalog::{self, describe, CatalogError};

/// Rows per batch by default, from `bench/run.sh cleanup` (1,000,000 published rows,
/// batch sizes 1,000 to 20,000, three runs on 2 cores under load 10–17): the total
/// time did not depend on the batch size beyond the machine's noise (7.6–16 s at
/// 5,000), while the longest batch — the longest any lock is held — grew with it
/// (5,000: 74–386 ms, 10,000–20,000: up to 524 ms). 5,000 keeps a batch well under a
/// second on a busy server at a fifth of the round trips of 1,000.
pub const DEFAULT_BATCH_SIZE: u32 = 5000;

/// The column poll mode marks published rows in.
pub use crate::ops::check::PUBLISHED_COLUMN;

/// Which rows the relay is done with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CleanupMode {
    /// Poll mode: rows with `published_at` older than the cutoff.
    Poll,
    /// Logical mode: rows older than the cutoff (by their timestamp column) that the
    /// slot confirmed; `slot: None` deletes by age alone (`--not-last-copy`).
    Logical { slot: Option<String> },
}

/// One outbox table and its row timestamp column (logical mode's age).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CleanupTable {
    pub table: TableName,
    pub timestamp_column: String,
}

/// What to clean up.
#[derive(Debug, Clone)]
pub struct CleanupInput {
    pub conninfo: ConnInfo,
    pub tables: Vec<CleanupTable>,
    pub mode: CleanupMode,
    /// Rows older than now() minus this go.
    pub older_than: Duration,
    /// Rows per DELETE (and so per transaction); at least 1.
    pub batch_size: u32,
    /// Only count.
    pub dry_run: bool,
}

/// What happened to one table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableSummary {
    pub table: TableName,
    /// The column compared with the cutoff.
    pub column: String,
    /// Rows deleted (or, with `dry_run`, that would be).
    pub rows: u64,
    pub batches: u64,
    pub elapsed: Duration,
    /// The longest batch: the longest any of its row locks was held.
    pub longest_batch: Duration,
}

/// The whole run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CleanupSummary {
    /// The cutoff as the server printed it.
    pub cutoff: String,
    pub dry_run: bool,
    /// Logical mode: the slot and its catalog_xmin used as the confirmed horizon.
    pub horizon: Option<(String, String)>,
    pub tables: Vec<TableSummary>,
}

/// Why cleanup refused or stopped. Rows already deleted stay deleted (each batch
/// commits on its own); nothing unconfirmed was touched.
#[derive(Debug, thiserror::Error)]
pub enum CleanupError {
    #[error(transparent)]
    Connect(CatalogError),
    #[error("replication slot {slot:?} does not exist{detail}, so cleanup cannot tell which rows the relay has delivered; fix: pass the relay's --slot (or --source poll, if the relay polls), or, if the outbox table is not the last copy of its events (the relay is retired, events are archived), --not-last-copy to delete by age alone")]
    MissingSlot { slot: String, detail: String },
    #[error("replication slot {slot:?} {reason}, so cleanup cannot tell which rows the relay has delivered; fix: repair the slot first (see `pgoutbox check`), or, if the outbox table is not the last copy of its events, pass --not-last-copy")]
    UnusableSlot { slot: String, reason: String },
    #[error("outbox table {table} does not exist; fix: pass the right --table")]
    MissingTable { table: TableName },
    #[error("outbox table {table} has no column {column:?}; fix: {fix}")]
    MissingColumn {
        table: TableName,
        column: String,
        fix: String,
    },
    #[error("{context}: {}", describe(error))]
    Query {
        context: String,
        /// Rendered in the message (so not a `source`).
        error: tokio_postgres::Error,
    },
}

fn query_err(context: impl Into<String>) -> impl FnOnce(tokio_postgres::Error) -> CleanupError {
    let context = context.into();
    move |error| CleanupError::Query { context, error }
}

/// Run the cleanup (see the module docs).
pub async fn cleanup(input: &CleanupInput) -> Result<CleanupSummary, CleanupError> {
    let client = catalog::connect(&input.conninfo)
        .await
        .map_err(CleanupError::Connect)?;
    client
        .batch_execute("SET synchronize_seqscans = off")
        .await
        .map_err(query_err("setting synchronize_seqscans"))?;
    let cutoff: String = client
        .query_one(
            "SELECT (now() - $1::float8 * interval '1 second')::text",
            &[&input.older_than.as_secs_f64()],
        )
        .await
        .map_err(query_err("computing the cutoff"))?
        .get(0);
    let horizon = match &input.mode {
        CleanupMode::Logical { slot: Some(slot) } => {
            Some((slot.clone(), horizon(&client, slot).await?))
        }
        _ => None,
    };
    let mut summary = CleanupSummary {
        cutoff,
        dry_run: input.dry_run,
        horizon,
        tables: Vec::new(),
    };
    for t in &input.tables {
        let done = clean_table(&client, input, t, &summary).await?;
        summary.tables.push(done);
    }
    Ok(summary)
}

/// One outbox table: each of its heaps (partitions) walked on its own, since a ctid
/// names a row only within one heap.
async fn clean_table(
    client: &Client,
    input: &CleanupInput,
    t: &CleanupTable,
    summary: &CleanupSummary,
) -> Result<TableSummary, CleanupError> {
    let started = Instant::now();
    let column = match input.mode {
        CleanupMode::Poll => PUBLISHED_COLUMN.to_owned(),
        CleanupMode::Logical { .. } => t.timestamp_column.clone(),
    };
    require_column(client, &t.table, &column, &input.mode).await?;
    let xmin = summary.horizon.as_ref().map(|(_, x)| x.as_str());
    let mut done =
        Plan::new(&t.table, &column, xmin.is_some()).summary(0, 0, started, Duration::ZERO);
    for leaf in leaves(client, &t.table).await? {
        let plan = Plan::new(&leaf, &column, xmin.is_some());
        let part = if input.dry_run {
            plan.count(client, &summary.cutoff, xmin).await?
        } else {
            plan.delete(client, &summary.cutoff, xmin, input.batch_size)
                .await?
        };
        done.rows += part.rows;
        done.batches += part.batches;
        done.longest_batch = done.longest_batch.max(part.longest_batch);
    }
    done.elapsed = started.elapsed();
    Ok(done)
}

/// The heaps of `table`: itself, or the leaf partitions of a partitioned table.
async fn leaves(client: &Client, table: &TableName) -> Result<Vec<TableName>, CleanupError> {
    let rows = client
        .query(
            "SELECT n.nspname::text, c.relname::text FROM pg_partition_tree(to_regclass($1)) t \
             JOIN pg_class c ON c.oid = t.relid JOIN pg_namespace n ON n.oid = c.relnamespace \
             WHERE t.isleaf AND c.relkind = 'r' ORDER BY t.level, 1, 2",
            &[&table.quoted()],
        )
        .await
        .map_err(query_err(format!("listing the partitions of {table}")))?;
    let leaves: Vec<TableName> = rows
        .iter()
        .map(|r| TableName {
            schema: r.get(0),
            name: r.get(1),
        })
        .collect();
    // A table outside any partition tree has no rows there: it is its own heap.
    Ok(if leaves.is_empty() {
        vec![table.clone()]
    } else {
        leaves
    })
}

/// The slot's `catalog_xmin`, checked to be a usable logical slot of this database.
async fn horizon(client: &Client, slot: &str) -> Result<String, CleanupError> {
    let row = client
        .query_opt(
            "SELECT s.database::text, current_database()::text, s.catalog_xmin::text, \
                    s.wal_status, s.slot_type::text \
             FROM pg_replication_slots s WHERE s.slot_name = $1",
            &[&slot],
        )
        .await
        .map_err(query_err(format!("reading replication slot {slot:?}")))?;
    let Some(row) = row else {
        return Err(CleanupError::MissingSlot {
            slot: slot.to_owned(),
            detail: String::new(),
        });
    };
    let (database, current): (Option<String>, String) = (row.get(0), row.get(1));
    let (xmin, wal_status, kind): (Option<String>, Option<String>, String) =
        (row.get(2), row.get(3), row.get(4));
    let unusable = |reason: String| CleanupError::UnusableSlot {
        slot: slot.to_owned(),
        reason,
    };
    if kind != "logical" || database.as_deref() != Some(current.as_str()) {
        return Err(CleanupError::MissingSlot {
            slot: slot.to_owned(),
            detail: format!(" as a logical slot of database {current}"),
        });
    }
    if wal_status.as_deref() == Some("lost") {
        return Err(unusable("is lost (wal_status = lost)".into()));
    }
    xmin.ok_or_else(|| unusable("has no catalog_xmin (invalidated)".into()))
}

/// Refuse a missing table or column with the fix for the mode.
async fn require_column(
    client: &Client,
    table: &TableName,
    column: &str,
    mode: &CleanupMode,
) -> Result<(), CleanupError> {
    let row = client
        .query_one(
            "SELECT to_regclass($1) IS NOT NULL, EXISTS (SELECT 1 FROM pg_attribute \
                 WHERE attrelid = to_regclass($1) AND attname = $2 AND attnum > 0 \
                 AND NOT attisdropped)",
            &[&table.quoted(), &column],
        )
        .await
        .map_err(query_err(format!("reading outbox table {table}")))?;
    let (exists, has_column): (bool, bool) = (row.get(0), row.get(1));
    if !exists {
        return Err(CleanupError::MissingTable {
            table: table.clone(),
        });
    }
    if has_column {
        return Ok(());
    }
    let fix = match mode {
        CleanupMode::Poll => format!(
            "poll mode marks published rows in {column}: `pgoutbox setup --source poll` adds it; \
             with --poll-mark delete the relay deletes published rows itself and there is \
             nothing to clean up"
        ),
        CleanupMode::Logical { .. } => {
            "name the row's creation time column with --timestamp-column".to_owned()
        }
    };
    Err(CleanupError::MissingColumn {
        table: table.clone(),
        column: column.to_owned(),
        fix,
    })
}

/// The statements of one table.
struct Plan {
    table: TableName,
    column: String,
    /// Only rows of transactions older than the horizon (logical mode with a slot).
    confirmed_only: bool,
}

impl Plan {
    fn new(table: &TableName, column: &str, confirmed_only: bool) -> Self {
        Plan {
            table: table.clone(),
            column: column.to_owned(),
            confirmed_only,
        }
    }

    /// The `WHERE` condition: `$1` is the cutoff, `$<xmin_param>` the horizon xid
    /// (a parameter only when it is used: an unused one has no type).
    fn condition(&self, xmin_param: u8) -> String {
        let mut condition = format!("{} < $1::text::timestamptz", quote_ident(&self.column));
        if self.confirmed_only {
            condition.push_str(&format!(" AND age(xmin) > age(${xmin_param}::text::xid)"));
        }
        condition
    }

    fn summary(
        &self,
        rows: u64,
        batches: u64,
        started: Instant,
        longest: Duration,
    ) -> TableSummary {
        TableSummary {
            table: self.table.clone(),
            column: self.column.clone(),
            rows,
            batches,
            elapsed: started.elapsed(),
            longest_batch: longest,
        }
    }

    async fn count(
        &self,
        client: &Client,
        cutoff: &str,
        xmin: Option<&str>,
    ) -> Result<TableSummary, CleanupError> {
        let started = Instant::now();
        let sql = format!(
            "SELECT count(*) FROM {} WHERE {}",
            self.table.quoted(),
            self.condition(2)
        );
        let row = match xmin.filter(|_| self.confirmed_only) {
            Some(x) => client.query_one(&sql, &[&cutoff, &x]).await,
            None => client.query_one(&sql, &[&cutoff]).await,
        }
        .map_err(query_err(format!("counting rows of {}", self.table)))?;
        let rows: i64 = row.get(0);
        Ok(self.summary(rows.max(0) as u64, 0, started, Duration::ZERO))
    }

    async fn delete(
        &self,
        client: &Client,
        cutoff: &str,
        xmin: Option<&str>,
        batch_size: u32,
    ) -> Result<TableSummary, CleanupError> {
        // $2 last ctid, $3 batch size, $4 horizon; ctid = ANY(ARRAY(…)) is a TID scan.
        let t = self.table.quoted();
        let sql = format!(
            "WITH gone AS (DELETE FROM {t} WHERE ctid = ANY (ARRAY(\
                 SELECT ctid FROM {t} WHERE ctid > $2::text::tid AND {c} LIMIT $3::bigint)) \
                 AND {c} RETURNING ctid) \
             SELECT count(*), (SELECT g.ctid::text FROM gone g ORDER BY g.ctid DESC LIMIT 1) \
             FROM gone",
            c = self.condition(4)
        );
        let xmin = xmin.filter(|_| self.confirmed_only);
        let (started, mut last) = (Instant::now(), "(0,0)".to_owned());
        let (mut rows, mut batches, mut longest) = (0u64, 0u64, Duration::ZERO);
        let limit = i64::from(batch_size);
        loop {
            let batch = Instant::now();
            let row = match xmin {
                Some(x) => client.query_one(&sql, &[&cutoff, &last, &limit, &x]).await,
                None => client.query_one(&sql, &[&cutoff, &last, &limit]).await,
            }
            .map_err(query_err(format!(
                "deleting batch {} of {} (after {rows} rows deleted)",
                batches + 1,
                self.table
            )))?;
            longest = longest.max(batch.elapsed());
            let (n, max): (i64, Option<String>) = (row.get(0), row.get(1));
            tracing::debug!(table = %self.table, rows = n, elapsed_ms = batch.elapsed().as_millis() as u64, "cleanup batch");
            batches += 1;
            rows += n.max(0) as u64;
            match max {
                Some(max) if n >= limit => last = max,
                _ => break,
            }
        }
        Ok(self.summary(rows, batches, started, longest))
    }
}

impl CleanupSummary {
    /// Total rows over every table.
    pub fn rows(&self) -> u64 {
        self.tables.iter().map(|t| t.rows).sum()
    }

    /// One line per table, then the horizon used.
    pub fn render(&self) -> String {
        let mut out = String::new();
        for t in &self.tables {
            let which = format!("{} before {}", t.column, self.cutoff);
            if self.dry_run {
                out.push_str(&format!(
                    "{}: would delete {} rows ({which}; dry run, nothing deleted)\n",
                    t.table, t.rows
                ));
            } else {
                out.push_str(&format!(
                    "{}: deleted {} rows ({which}) in {} batches, {:.1} s, longest batch {} ms\n",
                    t.table,
                    t.rows,
                    t.batches,
                    t.elapsed.as_secs_f64(),
                    t.longest_batch.as_millis()
                ));
            }
        }
        if let Some((slot, xmin)) = &self.horizon {
            out.push_str(&format!(
                "only rows of transactions the slot {slot:?} has confirmed (finished before \
                 its catalog_xmin {xmin}); newer rows stay until the relay has delivered them\n"
            ));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table() -> TableName {
        TableName::parse("public.outbox").unwrap()
    }

    #[test]
    fn conditions_per_mode() {
        assert_eq!(
            Plan::new(&table(), "published_at", false).condition(4),
            "\"published_at\" < $1::text::timestamptz"
        );
        assert_eq!(
            Plan::new(&table(), "created_at", true).condition(4),
            "\"created_at\" < $1::text::timestamptz AND age(xmin) > age($4::text::xid)"
        );
    }

    #[test]
    fn render_names_rows_batches_and_horizon() {
        let summary = CleanupSummary {
            cutoff: "2026-11-24 19:00:00+00".into(),
            dry_run: false,
            horizon: Some(("pgoutbox".into(), "1234".into())),
            tables: vec![TableSummary {
                table: table(),
                column: "created_at".into(),
                rows: 12000,
                batches: 3,
                elapsed: Duration::from_millis(1500),
                longest_batch: Duration::from_millis(42),
            }],
        };
        let text = summary.render();
        assert!(text.starts_with(
            "public.outbox: deleted 12000 rows (created_at before 2026-11-24 19:00:00+00) \
             in 3 batches, 1.5 s, longest batch 42 ms\n"
        ));
        assert!(text.contains("catalog_xmin 1234"));
        assert_eq!(summary.rows(), 12000);
        let dry = CleanupSummary {
            dry_run: true,
            horizon: None,
            ..summary
        };
        assert!(dry.render().contains("would delete 12000 rows"));
    }

    #[test]
    fn refusals_name_the_fix() {
        let missing = CleanupError::MissingSlot {
            slot: "pgoutbox".into(),
            detail: String::new(),
        };
        let text = missing.to_string();
        assert!(
            text.contains("--slot") && text.contains("--not-last-copy"),
            "{text}"
        );
    }
}

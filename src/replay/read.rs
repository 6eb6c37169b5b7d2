//! Reading a replay's rows: table by table, each in one read-only snapshot
//! through a cursor, every row handed to the relay's record path
//! ([`crate::pipeline::record`]) and on to the [`Output`].
//!
//! Invariants: every row read is counted and ends as a record, a dead letter, a
//! skipped poison row, or the error of `--on-invalid fail` that stops the replay;
//! a signal stops the reading between batches (never inside a row), and says so.

use std::collections::{HashMap, HashSet};

use tokio_postgres::Client;
use tokio_util::sync::CancellationToken;

use crate::outbox::invalid::Origin;
use crate::outbox::tables::{OutboxTables, RelationRoute, TableSpec};
use crate::pg::lsn::Lsn;
use crate::pg::names::TableName;
use crate::pg::source::catalog::{self};
use crate::pg::source::pgoutput::TupleData;
use crate::pipeline::record::{self, Built};

use super::deliver::{Ctx, Output};
use super::table::{self, Bounds, TableColumns};
use super::{simple, ReplayError};

/// Reads the selected rows, table by table, and hands them on.
pub(super) struct Reader<'r> {
    pub client: &'r Client,
    pub bounds: &'r Bounds,
    pub batch: usize,
    /// The replay's start (stands in for the commit time a row does not keep).
    pub started: i64,
    /// `--id` values a row had.
    pub found: HashSet<String>,
    /// A signal stopped the reading before every selected row was read.
    pub interrupted: bool,
}

impl Reader<'_> {
    pub async fn all(
        &mut self,
        ctx: &mut Ctx<'_>,
        output: &mut Output<'_>,
        shutdown: &CancellationToken,
    ) -> Result<(), ReplayError> {
        let specs = ctx.cfg.tables.clone();
        for spec in &specs {
            if shutdown.is_cancelled() {
                self.interrupted = true;
                break;
            }
            self.table(ctx, output, spec, shutdown).await?;
        }
        Ok(())
    }

    /// One table, in one read-only snapshot.
    async fn table(
        &mut self,
        ctx: &mut Ctx<'_>,
        output: &mut Output<'_>,
        spec: &TableSpec,
        shutdown: &CancellationToken,
    ) -> Result<(), ReplayError> {
        let cols = TableColumns::read(self.client, &spec.table)
            .await?
            .publication(self.client, &ctx.cfg.publication)
            .await?;
        let relation = cols.relation();
        let mut tables = OutboxTables::new(vec![spec.clone()]);
        if let Err(mismatch) = tables.on_relation(&relation) {
            let cause = mismatch.cause();
            tracing::warn!(error = %mismatch, "outbox table does not match the column mapping; its rows are handled by --on-invalid {cause}");
        }
        let route = tables.route(relation.id).cloned();
        let Some(route) = route else { return Ok(()) };
        simple(
            self.client,
            "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY",
        )
        .await?;
        let ids = self.canonical_ids(&cols, spec).await?;
        let (sql, params) = table::declare(&cols, &spec.mapping, self.bounds)?;
        let params: Vec<&(dyn tokio_postgres::types::ToSql + Sync)> =
            params.iter().map(|p| &**p as _).collect();
        self.client
            .execute(sql.as_str(), &params)
            .await
            .map_err(|e| {
                table::query_failed(format!("selecting the rows of {}", spec.table), &e)
            })?;
        let fetch = format!("FETCH {} FROM {}", self.batch.max(1), table::CURSOR);
        loop {
            if shutdown.is_cancelled() {
                self.interrupted = true;
                break;
            }
            let rows = self.client.simple_query(&fetch).await.map_err(|e| {
                table::query_failed(format!("reading the rows of {}", spec.table), &e)
            })?;
            let tuples = table::tuples(rows);
            if tuples.is_empty() {
                break;
            }
            for tuple in tuples {
                ctx.summary.rows += 1;
                self.row(ctx, output, &route, &tuple, &ids).await?;
            }
        }
        simple(self.client, "COMMIT").await
    }

    /// The requested ids in the id column's own text form (a UUID in capitals
    /// matches its row), mapped to the text given; empty without `--id`.
    async fn canonical_ids(
        &self,
        cols: &TableColumns,
        spec: &TableSpec,
    ) -> Result<HashMap<String, String>, ReplayError> {
        let Some(ty) = cols.columns.iter().find(|c| c.0 == spec.mapping.id) else {
            return Ok(HashMap::new());
        };
        if self.bounds.ids.is_empty() {
            return Ok(HashMap::new());
        }
        let sql = format!("SELECT x, x::{}::text FROM unnest($1::text[]) AS x", ty.2);
        let rows = self
            .client
            .query(sql.as_str(), &[&self.bounds.ids])
            .await
            .map_err(|e| ReplayError::Id {
                table: spec.table.clone(),
                column: spec.mapping.id.clone(),
                message: catalog::describe(&e),
            })?;
        Ok(rows.iter().map(|r| (r.get(1), r.get(0))).collect())
    }

    /// One row: the record `run` would have sent, or its poison-row handling.
    async fn row(
        &mut self,
        ctx: &mut Ctx<'_>,
        output: &mut Output<'_>,
        route: &RelationRoute,
        tuple: &TupleData,
        ids: &HashMap<String, String>,
    ) -> Result<(), ReplayError> {
        let lsn = Lsn::INVALID;
        let built = record::row(ctx.cfg, ctx.metrics, route, tuple, self.started, lsn);
        let Ok((table, built)) = built else {
            return Ok(()); // not an outbox table: replay reads only the ones given
        };
        let (Built::Send(record) | Built::Poison(record, _)) = &built;
        let id = record.id.as_deref().map(String::from_utf8_lossy);
        if let Some(given) = id.and_then(|id| ids.get(id.as_ref())) {
            self.found.insert(given.clone());
        }
        match built {
            Built::Send(record) => output.emit(ctx, record, origin(table)).await,
            Built::Poison(record, invalid) => {
                output.poison(ctx, invalid, record, origin(table)).await
            }
        }
    }
}

/// Where a replayed row came from (no LSN: it was read with SQL).
fn origin(table: &TableName) -> Origin {
    Origin {
        table: Some(table.to_string()),
        lsn: None,
    }
}

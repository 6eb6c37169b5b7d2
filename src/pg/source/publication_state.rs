//! What the catalog says about the publication and the outbox tables, read in one
//! snapshot: the raw material of the publication watch
//! ([`crate::safety::publication`]), which decides what a difference means.
//!
//! Owns the one catalog query and the shape it fills, which is also what the state
//! file keeps as the baseline (so it serializes). Every field is something a DDL
//! that stops rows from being decoded changes, and changes for good, so that a
//! change undone between two reads still shows:
//!
//! - the publication's OID (dropped and re-created: a new one), the `xmin` of its
//!   `pg_publication` row (`ALTER PUBLICATION … SET (publish = …)`, even when set
//!   back, writes a new row version; `ADD/DROP TABLE` do not touch it) and its
//!   publish actions;
//! - per outbox table (by name): its `pg_class` OID (dropped and re-created, or
//!   renamed away and another renamed in: a new one) and how the publication holds
//!   it: its own `pg_publication_rel` row (by OID: dropped and re-added, or its row
//!   filter or column list set, gives a new row), the table's schema
//!   (`FOR TABLES IN SCHEMA`, by the `pg_publication_namespace` row's OID), or
//!   `FOR ALL TABLES`; and its row filter (PostgreSQL 15+).
//!
//! Invariant: [`read`] reads the WAL position first and the catalog after it, in a
//! later statement (a snapshot taken after that position was read), so whatever the
//! catalog shows holds for all WAL before [`Observed::wal`] (see the watch for the
//! one residual race).

use serde::{Deserialize, Serialize};
use tokio_postgres::Client;

use super::catalog::{query_err, CatalogError};
use crate::pg::lsn::Lsn;
use crate::pg::names::TableName;

/// The `xmin` PostgreSQL shows for a frozen row (`FrozenTransactionId`): VACUUM
/// FREEZE rewrites a row's xmin to it without changing the row.
pub const FROZEN_XMIN: &str = "2";

/// The publication as the catalog shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PublicationState {
    /// `pg_publication.oid`; `None`: no publication of that name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub oid: Option<u32>,
    /// The `xmin` of its `pg_publication` row (decimal).
    #[serde(default)]
    pub row_version: String,
    /// `FOR ALL TABLES`.
    #[serde(default)]
    pub all_tables: bool,
    /// Its publish actions, as `publish = '…'` lists them (`insert, update, …`).
    #[serde(default)]
    pub publish: String,
    /// The outbox tables, in the relay's order.
    #[serde(default)]
    pub tables: Vec<TableState>,
}

/// One outbox table as the catalog shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TableState {
    /// The table's name, quoted (`"public"."outbox"`).
    pub table: String,
    /// Its `pg_class` OID; `None`: no table of that name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub oid: Option<u32>,
    /// How the publication holds it.
    pub member: Member,
    /// The OID of the catalog row that holds it: `pg_publication_rel` for
    /// [`Member::Table`], `pg_publication_namespace` for [`Member::Schema`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub member_oid: Option<u32>,
    /// Its row filter (`WHERE (…)`, PostgreSQL 15+), as `pg_get_expr` prints it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub row_filter: Option<String>,
    /// The `xmin` of the table's `pg_class` row and of its `pg_publication_rel`
    /// row: equal when the table was created (or last altered) and added to the
    /// publication in one transaction, so no row of it went unpublished.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub created_by: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub member_by: Option<String>,
}

/// How a publication holds a table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Member {
    /// It is listed (`FOR TABLE` / `ADD TABLE`).
    Table,
    /// Its schema is (`FOR TABLES IN SCHEMA`, PostgreSQL 15+).
    Schema,
    /// `FOR ALL TABLES`.
    AllTables,
    /// Not published (or the table or the publication does not exist).
    None,
}

impl Member {
    /// How a message names it.
    pub fn describe(self) -> &'static str {
        match self {
            Member::Table => "listed in the publication",
            Member::Schema => "published through its schema (FOR TABLES IN SCHEMA)",
            Member::AllTables => "published FOR ALL TABLES",
            Member::None => "not published",
        }
    }
}

/// What the state file keeps: the publication as last found unchanged, and the
/// WAL position and time that reading vouches for.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Baseline {
    /// WAL before this position was written under `state`.
    pub vouched_lsn: Lsn,
    /// The server's clock at that reading.
    pub checked_at: String,
    /// The publication then.
    pub state: PublicationState,
    /// Repairs this relay was about to commit when the baseline was written
    /// ([`crate::safety::repair`]): a table found with exactly that OID and that
    /// `pg_publication_rel` row was re-added by the relay itself (its rows are in
    /// the WAL), not by someone else.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub repairs: Vec<RepairRecord>,
}

/// A repair about to commit: the table (quoted), its OID and the
/// `pg_publication_rel` row the repair's `ADD TABLE` made.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RepairRecord {
    pub table: String,
    pub oid: u32,
    pub member_oid: u32,
}

impl Baseline {
    /// The baseline a reading gives.
    pub fn of(observed: &Observed) -> Self {
        Self {
            vouched_lsn: observed.wal,
            checked_at: observed.at.clone(),
            state: observed.state.clone(),
            repairs: Vec::new(),
        }
    }
}

/// One reading: the catalog, the WAL position read just before it, and the server's
/// clock then.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Observed {
    /// `pg_current_wal_lsn()`, read before the catalog.
    pub wal: Lsn,
    /// The server's `now()` when the catalog was read (RFC 3339, UTC).
    pub at: String,
    /// What the catalog showed.
    pub state: PublicationState,
}

/// Read `publication` and `tables` on a server of `version` (its
/// `server_version_num`, read once per connection; see the module doc for the
/// order).
pub async fn read(
    client: &Client,
    publication: &str,
    tables: &[TableName],
    version: i32,
) -> Result<Observed, CatalogError> {
    let wal: i64 = client
        .query_one("SELECT (pg_current_wal_lsn() - '0/0'::pg_lsn)::int8", &[])
        .await
        .map_err(query_err("reading the WAL position"))?
        .get(0);
    let wal = Lsn(u64::try_from(wal).unwrap_or(0));
    let schemas: Vec<&str> = tables.iter().map(|t| t.schema.as_str()).collect();
    let names: Vec<&str> = tables.iter().map(|t| t.name.as_str()).collect();
    let rows = client
        .query(&query(version), &[&publication, &schemas, &names])
        .await
        .map_err(query_err(format!(
            "reading publication {publication} and its outbox tables"
        )))?;
    let mut state = PublicationState {
        oid: None,
        row_version: String::new(),
        all_tables: false,
        publish: String::new(),
        tables: Vec::with_capacity(rows.len()),
    };
    let mut at = String::new();
    for (row, table) in rows.iter().zip(tables) {
        at = row.get(0);
        state.oid = row.get::<_, Option<i64>>(1).map(oid);
        state.row_version = row.get::<_, Option<String>>(2).unwrap_or_default();
        state.all_tables = row.get::<_, Option<bool>>(3).unwrap_or(false);
        state.publish = row.get::<_, Option<String>>(4).unwrap_or_default();
        let rel = row.get::<_, Option<i64>>(6).map(oid);
        let schema = row.get::<_, Option<i64>>(7).map(oid);
        let (member, member_oid) = match (rel, schema) {
            (Some(rel), _) => (Member::Table, Some(rel)),
            (None, Some(nsp)) => (Member::Schema, Some(nsp)),
            _ if state.all_tables && state.oid.is_some() => (Member::AllTables, None),
            _ => (Member::None, None),
        };
        state.tables.push(TableState {
            table: table.quoted(),
            oid: row.get::<_, Option<i64>>(5).map(oid),
            member,
            member_oid,
            row_filter: row.get(8),
            created_by: row.get(9),
            member_by: row.get(10),
        });
    }
    Ok(Observed { wal, at, state })
}

/// An OID read as `int8` (OIDs are unsigned 32-bit).
fn oid(value: i64) -> u32 {
    u32::try_from(value).unwrap_or(u32::MAX)
}

/// The catalog query for a server of `version` (`server_version_num`): one row per
/// outbox table, in the order given. Schema publications and row filters exist
/// from PostgreSQL 15.
fn query(version: i32) -> String {
    let (schema, filter) = if version >= 150_000 {
        (
            "(SELECT pn.oid::int8 FROM pg_publication_namespace pn \
              WHERE pn.pnpubid = p.oid AND pn.pnnspid = c.relnamespace)",
            "pg_get_expr(pr.prqual, pr.prrelid)",
        )
    } else {
        ("NULL::int8", "NULL::text")
    };
    format!(
        "SELECT to_char(now() AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"'), p.oid::int8, p.xmin::text, p.puballtables, \
           concat_ws(', ', CASE WHEN p.pubinsert THEN 'insert' END, \
             CASE WHEN p.pubupdate THEN 'update' END, \
             CASE WHEN p.pubdelete THEN 'delete' END, \
             CASE WHEN p.pubtruncate THEN 'truncate' END), \
           c.oid::int8, pr.oid::int8, {schema}, {filter}, c.xmin::text, pr.xmin::text \
         FROM unnest($2::text[], $3::text[]) WITH ORDINALITY AS t(nsp, rel, n) \
         LEFT JOIN pg_publication p ON p.pubname = $1 \
         LEFT JOIN pg_namespace n ON n.nspname = t.nsp \
         LEFT JOIN pg_class c ON c.relnamespace = n.oid AND c.relname = t.rel \
         LEFT JOIN pg_publication_rel pr ON pr.prpubid = p.oid AND pr.prrelid = c.oid \
         ORDER BY t.n"
    )
}

//! One outbox table as replay reads it: its columns from the catalog (as the
//! [`Relation`] pgoutput would send, so the relay's mapping resolves against it
//! unchanged), the cursor over the selected rows, and each fetched row as the
//! [`TupleData`] the relay would have decoded.
//!
//! Invariants: values are read in text format with `DateStyle` ISO, the output
//! functions pgoutput uses, so the mapping sees the same bytes as `run` (NULL stays
//! NULL); generated columns are left out as pgoutput leaves them out, and so are
//! the columns outside the publication's column list (PostgreSQL 15+), so replay
//! sees the columns `run` sees (ordering and `--id` may still use any column); every
//! identifier is quoted and every user value is a bind parameter cast to the
//! column's own type (so `--id` uses the id column's index); rows come in the order
//! of the timestamp column, then the id column (without a timestamp column, the id
//! column); a time range never matches a row whose timestamp is NULL.

use bytes::Bytes;
use tokio_postgres::types::ToSql;
use tokio_postgres::{Client, SimpleQueryMessage};

use crate::outbox::event::ColumnMapping;
use crate::pg::names::quote_ident;
use crate::pg::names::TableName;
use crate::pg::source::catalog::describe;
use crate::pg::source::pgoutput::{
    ColumnValue, Relation, RelationColumn, ReplicaIdentity, TupleData,
};

use super::ReplayError;

/// The cursor a replay reads through (one at a time, in its own transaction).
pub const CURSOR: &str = "pgoutbox_replay";

/// Types a time range can compare.
const TIME_TYPES: [&str; 3] = [
    "timestamp with time zone",
    "timestamp without time zone",
    "date",
];

/// A table's columns, in tuple order.
#[derive(Debug, Clone)]
pub struct TableColumns {
    /// The table.
    pub table: TableName,
    /// Its oid (the relation id a Relation message would carry).
    pub oid: u32,
    /// Name, type oid and SQL type name (`format_type`), every column.
    pub columns: Vec<(String, u32, String)>,
    /// The publication's column list for the table (PostgreSQL 15+), when it has
    /// one: only these columns reach `run`, so only these are read.
    pub published: Option<Vec<String>>,
}

impl TableColumns {
    /// The columns of `table`; a missing table is an error that says replay reads
    /// the table and that events sent without one cannot be replayed.
    pub async fn read(client: &Client, table: &TableName) -> Result<Self, ReplayError> {
        let row = client
            .query_one("SELECT to_regclass($1)::oid", &[&table.quoted()])
            .await
            .map_err(|e| query_failed(format!("looking up table {table}"), &e))?;
        let oid: Option<u32> = row.get(0);
        let oid = oid.ok_or_else(|| ReplayError::NoTable(table.clone()))?;
        let rows = client
            .query(
                "SELECT attname::text, atttypid, format_type(atttypid, atttypmod) \
                 FROM pg_attribute WHERE attrelid = $1 AND attnum > 0 \
                 AND NOT attisdropped AND attgenerated = '' ORDER BY attnum",
                &[&oid],
            )
            .await
            .map_err(|e| query_failed(format!("reading the columns of {table}"), &e))?;
        let columns = rows
            .iter()
            .map(|r| (r.get(0), r.get(1), r.get(2)))
            .collect();
        Ok(Self {
            table: table.clone(),
            oid,
            columns,
            published: None,
        })
    }

    /// Keep to the columns `publication` publishes of the table (its column list,
    /// PostgreSQL 15+), as pgoutput sends them to `run`: a mapped column left out
    /// makes the rows `missing-column` poison here as there. A publication that
    /// does not exist or does not list the table leaves every column (nothing to
    /// compare with; `pgoutbox check` says so).
    pub async fn publication(
        mut self,
        client: &Client,
        publication: &str,
    ) -> Result<Self, ReplayError> {
        let failed = |e: &tokio_postgres::Error| {
            query_failed(format!("reading publication {publication:?}"), e)
        };
        let version: i32 = client
            .query_one("SELECT current_setting('server_version_num')::int", &[])
            .await
            .map_err(|e| failed(&e))?
            .get(0);
        if version < 150000 {
            return Ok(self); // no column lists before PostgreSQL 15
        }
        let row = client
            .query_opt(
                "SELECT attnames::text[] FROM pg_publication_tables \
                 WHERE pubname = $1 AND schemaname = $2 AND tablename = $3",
                &[&publication, &self.table.schema, &self.table.name],
            )
            .await
            .map_err(|e| failed(&e))?;
        self.published = row.and_then(|r| r.get(0));
        Ok(self)
    }

    /// The columns `run` sees (all, or the publication's column list), in tuple
    /// order.
    fn seen(&self) -> impl Iterator<Item = &(String, u32, String)> {
        self.columns
            .iter()
            .filter(|(name, _, _)| match &self.published {
                Some(list) => list.iter().any(|p| p == name),
                None => true,
            })
    }

    /// The Relation message pgoutput would send for this table.
    pub fn relation(&self) -> Relation {
        Relation {
            xid: None,
            id: self.oid,
            namespace: self.table.schema.clone(),
            name: self.table.name.clone(),
            replica_identity: ReplicaIdentity::Default,
            columns: self
                .seen()
                .map(|(name, type_oid, _)| RelationColumn {
                    flags: 0,
                    name: name.clone(),
                    type_oid: *type_oid,
                    type_modifier: -1,
                })
                .collect(),
        }
    }

    /// The SQL type of `column`, if the table has it.
    fn type_of(&self, column: &str) -> Option<&str> {
        self.columns
            .iter()
            .find(|(name, _, _)| name == column)
            .map(|(_, _, ty)| ty.as_str())
    }
}

/// The resolved selection: time bounds as µs since the Unix epoch.
#[derive(Debug, Clone, Default)]
pub struct Bounds {
    /// At or after.
    pub from: Option<i64>,
    /// Before.
    pub to: Option<i64>,
    /// Event ids as given.
    pub ids: Vec<String>,
}

/// The `DECLARE` of the cursor over `cols`' selected rows, and its parameters.
pub fn declare(
    cols: &TableColumns,
    mapping: &ColumnMapping,
    bounds: &Bounds,
) -> Result<(String, Vec<Box<dyn ToSql + Sync + Send>>), ReplayError> {
    let id_type = cols
        .type_of(&mapping.id)
        .ok_or_else(|| ReplayError::MissingColumn {
            table: cols.table.clone(),
            column: mapping.id.clone(),
            role: "id (--id-column)",
        })?;
    let ts_type = cols.type_of(&mapping.timestamp);
    let list: Vec<String> = cols.seen().map(|c| quote_ident(&c.0)).collect();
    let (id, ts) = (quote_ident(&mapping.id), quote_ident(&mapping.timestamp));
    let mut filters: Vec<String> = Vec::new();
    let mut params: Vec<Box<dyn ToSql + Sync + Send>> = Vec::new();
    if bounds.from.is_some() || bounds.to.is_some() {
        match ts_type {
            Some(ty) if TIME_TYPES.contains(&ty) => {}
            found => return Err(time_column(cols, mapping, found)),
        }
    }
    for (bound, op) in [(bounds.from, ">="), (bounds.to, "<")] {
        if let Some(micros) = bound {
            params.push(Box::new(micros));
            let at = format!(
                "'epoch'::timestamptz + ${}::int8 * interval '1 microsecond'",
                params.len()
            );
            filters.push(format!("{ts} {op} {at}"));
        }
    }
    if !bounds.ids.is_empty() {
        params.push(Box::new(bounds.ids.clone()));
        filters.push(format!(
            "{id} = ANY(${}::text[]::{id_type}[])",
            params.len()
        ));
    }
    let filter = match filters.is_empty() {
        true => String::new(),
        false => format!(" WHERE {}", filters.join(" AND ")),
    };
    let order = match ts_type {
        Some(_) => format!("{ts}, {id}"),
        None => id.clone(),
    };
    let sql = format!(
        "DECLARE {CURSOR} NO SCROLL CURSOR FOR SELECT {} FROM {}{filter} ORDER BY {order}",
        list.join(", "),
        cols.table.quoted()
    );
    Ok((sql, params))
}

/// Why a time range cannot be applied to `cols`.
fn time_column(cols: &TableColumns, mapping: &ColumnMapping, found: Option<&str>) -> ReplayError {
    ReplayError::TimeColumn {
        table: cols.table.clone(),
        column: mapping.timestamp.clone(),
        found: found.map_or_else(|| "missing".to_owned(), |t| format!("of type {t}")),
    }
}

/// The rows of one `FETCH` on the simple protocol (text values), as tuples.
pub fn tuples(messages: Vec<SimpleQueryMessage>) -> Vec<TupleData> {
    messages
        .into_iter()
        .filter_map(|m| match m {
            SimpleQueryMessage::Row(row) => Some(row),
            _ => None,
        })
        .map(|row| {
            let values = (0..row.len())
                .map(|i| match row.get(i) {
                    Some(text) => ColumnValue::Text(Bytes::copy_from_slice(text.as_bytes())),
                    None => ColumnValue::Null,
                })
                .collect();
            TupleData(values)
        })
        .collect()
}

/// A failed query, with PostgreSQL's own message.
pub fn query_failed(context: String, err: &tokio_postgres::Error) -> ReplayError {
    ReplayError::Query {
        context,
        message: describe(err),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn outbox(with_ts: bool) -> TableColumns {
        let mut columns = vec![
            ("id".to_owned(), 2950, "uuid".to_owned()),
            ("aggregate_type".to_owned(), 25, "text".to_owned()),
            ("payload".to_owned(), 3802, "jsonb".to_owned()),
        ];
        if with_ts {
            columns.push((
                "created_at".to_owned(),
                1184,
                "timestamp with time zone".to_owned(),
            ));
        }
        TableColumns {
            table: TableName::parse("app.Outbox").unwrap(),
            oid: 42,
            columns,
            published: None,
        }
    }

    #[test]
    fn only_the_publications_column_list_is_read_and_described() {
        let mut cols = outbox(true);
        cols.published = Some(vec!["id".into(), "payload".into(), "created_at".into()]);
        let names: Vec<String> = cols
            .relation()
            .columns
            .into_iter()
            .map(|c| c.name)
            .collect();
        assert_eq!(names, ["id", "payload", "created_at"]);
        let (sql, _) = declare(&cols, &ColumnMapping::default(), &Bounds::default()).unwrap();
        assert!(
            sql.contains(r#"SELECT "id", "payload", "created_at" FROM"#),
            "{sql}"
        );
    }

    #[test]
    fn the_cursor_selects_every_column_in_time_then_id_order() {
        let bounds = Bounds {
            from: Some(1),
            to: Some(2),
            ids: vec!["x".into()],
        };
        let (sql, params) = declare(&outbox(true), &ColumnMapping::default(), &bounds).unwrap();
        assert_eq!(params.len(), 3);
        assert_eq!(
            sql,
            "DECLARE pgoutbox_replay NO SCROLL CURSOR FOR SELECT \"id\", \"aggregate_type\", \"payload\", \"created_at\" \
             FROM \"app\".\"Outbox\" WHERE \"created_at\" >= 'epoch'::timestamptz + $1::int8 * interval '1 microsecond' \
             AND \"created_at\" < 'epoch'::timestamptz + $2::int8 * interval '1 microsecond' \
             AND \"id\" = ANY($3::text[]::uuid[]) ORDER BY \"created_at\", \"id\""
        );
    }

    #[test]
    fn without_a_timestamp_column_ids_order_and_time_ranges_are_refused() {
        let all = Bounds::default();
        let (sql, params) = declare(&outbox(false), &ColumnMapping::default(), &all).unwrap();
        assert!(params.is_empty());
        assert!(
            sql.ends_with("FROM \"app\".\"Outbox\" ORDER BY \"id\""),
            "{sql}"
        );
        let ranged = Bounds {
            from: Some(1),
            ..Bounds::default()
        };
        let err = declare(&outbox(false), &ColumnMapping::default(), &ranged)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("created_at") && err.contains("missing"),
            "{err}"
        );
        assert!(err.contains("--timestamp-column"), "{err}");
    }

    #[test]
    fn a_missing_id_column_is_named() {
        let mapping = ColumnMapping {
            id: "event_id".into(),
            ..ColumnMapping::default()
        };
        let err = declare(&outbox(true), &mapping, &Bounds::default())
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("event_id") && err.contains("app.Outbox"),
            "{err}"
        );
    }
}

//! Outbox row → [`OutboxEvent`].
//!
//! Owns the column mapping (which column holds the event id, the routing value, the
//! key, the type, the payload, the timestamp and the trace context) and its resolution against the
//! columns of a pgoutput `Relation`. Values stay as zero-copy `Bytes` slices of the
//! replication message in PostgreSQL text format.
//!
//! It also resolves the placed columns (`--placement`, Debezium's
//! `table.fields.additional.placement`) and each column's Connect schema (type and
//! nullability), which the record format ([`crate::outbox::connect`]) needs.
//!
//! Invariants: a mapping is resolved once per Relation message (so a changed table
//! definition is picked up when PostgreSQL resends the Relation); a mapped column
//! missing from the table is an error naming the table, the column and the columns
//! that do exist; a row never panics the mapping, whatever its values.

use std::sync::Arc;

use bytes::Bytes;

use crate::outbox::connect::{ColumnSchema, ColumnType, EnvelopeCache, Place, Placement};
use crate::outbox::trace::TraceField;
use crate::pg::source::pgoutput::{ColumnValue, Relation, TupleData};

/// Which column carries which part of the event. Defaults are the table of
/// `sql/outbox.sql` (Debezium's outbox columns in snake case).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ColumnMapping {
    /// Event id (Debezium `table.field.event.id`), header `id`.
    pub id: String,
    /// Aggregate type; reported as `aggregate_type`.
    pub aggregate_type: String,
    /// The column whose value fills `${routedByValue}` (Debezium `route.by.field`).
    pub route_by: String,
    /// Record key (Debezium `table.field.event.key`).
    pub key: String,
    /// Event type, header `event_type`.
    pub event_type: String,
    /// Record value (Debezium `table.field.event.payload`).
    pub payload: String,
    /// Record timestamp (Debezium `table.field.event.timestamp`); optional in the table.
    pub timestamp: String,
    /// Where the W3C trace context is (`--trace-context`); `None`: not propagated.
    /// When set, its column must exist.
    pub trace_context: Option<TraceField>,
    /// Columns placed in headers or the value's envelope. `None`: the default, the
    /// event type column as header `event_type` (absent column: a null header).
    pub placements: Option<Vec<Placement>>,
    /// Columns the catalog reports `NOT NULL` (Connect schemas mark them
    /// `optional: false`); filled by `run` when a converter writes schemas.
    pub not_null: Vec<String>,
}

/// Header name of the default placement.
pub const EVENT_TYPE_HEADER: &str = "event_type";

impl Default for ColumnMapping {
    fn default() -> Self {
        Self {
            id: "id".into(),
            aggregate_type: "aggregate_type".into(),
            route_by: "aggregate_type".into(),
            key: "aggregate_id".into(),
            event_type: "event_type".into(),
            payload: "payload".into(),
            timestamp: "created_at".into(),
            trace_context: None,
            placements: None,
            not_null: Vec::new(),
        }
    }
}

/// A mapped column is not in the table.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("outbox table {table} has no column {column:?} (mapped as {role}); columns are: {available}; fix: map {role} to an existing column or add the column")]
pub struct MissingColumn {
    /// `schema.table`.
    pub table: String,
    /// The missing column name.
    pub column: String,
    /// What the column was mapped as (`payload`, `key`, …).
    pub role: &'static str,
    /// Comma-separated existing columns.
    pub available: String,
}

/// Column positions of a mapping in one relation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResolvedMapping {
    id: usize,
    aggregate_type: Option<usize>,
    route_by: usize,
    key: usize,
    event_type: Option<usize>,
    payload: usize,
    timestamp: Option<usize>,
    /// The trace-context column and the JSON keys to follow in it.
    trace: Option<(usize, Vec<String>)>,
    /// The payload column is neither `json` nor `jsonb`: PostgreSQL did not check
    /// that it holds JSON.
    payload_unchecked: bool,
    /// Connect schema of the key column.
    pub(crate) key_schema: ColumnSchema,
    /// Connect schema of the payload column.
    pub(crate) payload_schema: ColumnSchema,
    /// The placed columns, in configuration order.
    pub(crate) placed: Vec<ResolvedPlacement>,
    /// `schema.table`, for the envelope's schema name.
    pub(crate) table: String,
    /// Envelope schemas already written (shared by the tables of one session).
    pub(crate) envelope_cache: EnvelopeCache,
}

/// One placed column of a relation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ResolvedPlacement {
    /// Position in the tuple; `None` only for the default `event_type` header.
    pub(crate) index: Option<usize>,
    pub(crate) place: Place,
    pub(crate) alias: Arc<str>,
    pub(crate) schema: ColumnSchema,
}

/// Type oids whose values PostgreSQL guarantees to be JSON.
const JSON_OID: u32 = 114;
const JSONB_OID: u32 = 3802;

impl ResolvedMapping {
    /// Write `column` (of `relation`) with Connect type `kind`, its first type,
    /// wherever its type decides the record's shape (key, payload, placements):
    /// see [`crate::outbox::pinned`].
    pub(crate) fn keep_type(&mut self, relation: &Relation, column: &str, kind: ColumnType) {
        let named = |index: usize| {
            relation
                .columns
                .get(index)
                .is_some_and(|c| c.name == column)
        };
        if named(self.key) {
            self.key_schema.kind = kind;
        }
        if named(self.payload) {
            self.payload_schema.kind = kind;
        }
        for placed in &mut self.placed {
            if placed.index.is_some_and(named) {
                placed.schema.kind = kind;
            }
        }
    }
}

impl ColumnMapping {
    /// Find every mapped column in `relation`. id, route, key and payload are
    /// required; aggregate type, event type and timestamp may be absent.
    pub fn resolve(&self, relation: &Relation) -> Result<ResolvedMapping, MissingColumn> {
        let find = |name: &str| relation.columns.iter().position(|c| c.name == name);
        let require = |name: &str, role: &'static str| {
            find(name).ok_or_else(|| MissingColumn {
                table: format!("{}.{}", relation.namespace, relation.name),
                column: name.to_owned(),
                role,
                available: relation
                    .columns
                    .iter()
                    .map(|c| c.name.as_str())
                    .collect::<Vec<_>>()
                    .join(", "),
            })
        };
        let payload = require(&self.payload, "payload")?;
        let payload_type = relation.columns[payload].type_oid;
        let trace = match &self.trace_context {
            Some(field) => Some((require(&field.column, "trace context")?, field.keys.clone())),
            None => None,
        };
        let key = require(&self.key, "key")?;
        let schema = |idx: usize| {
            let column = &relation.columns[idx];
            ColumnSchema {
                kind: ColumnType::of(column.type_oid).unwrap_or(ColumnType::Text),
                optional: !self.not_null.contains(&column.name),
            }
        };
        let event_type = find(&self.event_type);
        let placed = match &self.placements {
            None => vec![ResolvedPlacement {
                index: event_type,
                place: Place::Header,
                alias: Arc::from(EVENT_TYPE_HEADER),
                schema: event_type.map_or(
                    ColumnSchema {
                        kind: ColumnType::Text,
                        optional: true,
                    },
                    schema,
                ),
            }],
            Some(list) => list
                .iter()
                .map(|p| {
                    let index = require(&p.column, "placement")?;
                    Ok(ResolvedPlacement {
                        index: Some(index),
                        place: p.place,
                        alias: p.alias.clone(),
                        schema: schema(index),
                    })
                })
                .collect::<Result<_, MissingColumn>>()?,
        };
        Ok(ResolvedMapping {
            id: require(&self.id, "id")?,
            aggregate_type: find(&self.aggregate_type),
            route_by: require(&self.route_by, "route-by field")?,
            key,
            event_type,
            payload,
            timestamp: find(&self.timestamp),
            trace,
            payload_unchecked: payload_type != JSON_OID && payload_type != JSONB_OID,
            key_schema: schema(key),
            payload_schema: schema(payload),
            placed,
            table: format!("{}.{}", relation.namespace, relation.name),
            envelope_cache: EnvelopeCache::default(),
        })
    }
}

/// One outbox row, its values in PostgreSQL text format (`None` = SQL NULL).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OutboxEvent {
    /// Event id.
    pub id: Option<Bytes>,
    /// Aggregate type.
    pub aggregate_type: Option<Bytes>,
    /// Value that fills the topic template.
    pub route_value: Option<Bytes>,
    /// Record key.
    pub key: Option<Bytes>,
    /// Event type.
    pub event_type: Option<Bytes>,
    /// Payload text (JSON for `jsonb`/`json` columns).
    pub payload: Option<Bytes>,
    /// Timestamp text, e.g. `2026-11-29 13:09:37.123456+00`.
    pub timestamp: Option<Bytes>,
    /// The trace-context column's text (`None` when NULL or not mapped).
    pub trace_context: Option<Bytes>,
    /// Values of the placed columns, in the mapping's placement order.
    pub placed: Vec<Option<Bytes>>,
}

impl ResolvedMapping {
    /// Whether the payload column's type leaves JSON syntax unchecked (`text`,
    /// `varchar`, `bytea`, …), so the relay must check it.
    pub fn payload_unchecked(&self) -> bool {
        self.payload_unchecked
    }

    /// The JSON keys to follow in the trace-context column, when one is mapped.
    pub fn trace_keys(&self) -> Option<&[String]> {
        self.trace.as_ref().map(|(_, keys)| keys.as_slice())
    }

    /// Extract the event from an inserted tuple.
    pub fn event(&self, tuple: &TupleData) -> OutboxEvent {
        let value = |idx: usize| match tuple.0.get(idx) {
            Some(ColumnValue::Text(b) | ColumnValue::Binary(b)) => Some(b.clone()),
            _ => None,
        };
        let optional = |idx: Option<usize>| idx.and_then(value);
        OutboxEvent {
            id: value(self.id),
            aggregate_type: optional(self.aggregate_type),
            route_value: value(self.route_by),
            key: value(self.key),
            event_type: optional(self.event_type),
            payload: value(self.payload),
            timestamp: optional(self.timestamp),
            trace_context: optional(self.trace.as_ref().map(|(i, _)| *i)),
            placed: self.placed.iter().map(|p| optional(p.index)).collect(),
        }
    }

    /// This mapping, writing envelope schemas through `cache` (one per relay
    /// session, shared by its tables, as Debezium's is by its task).
    pub fn with_envelope_cache(mut self, cache: &EnvelopeCache) -> Self {
        self.envelope_cache = cache.clone();
        self
    }

    /// The header placements of `event`: name and value, in placement order.
    pub fn headers(&self, event: &OutboxEvent) -> Vec<(Arc<str>, Option<Bytes>)> {
        self.placed
            .iter()
            .zip(&event.placed)
            .filter(|(p, _)| p.place == Place::Header)
            .map(|(p, v)| (p.alias.clone(), v.clone()))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_mapping_extracts_every_field() {
        let rel = Relation::text_columns(
            1,
            "outbox",
            &[
                "id",
                "aggregate_type",
                "aggregate_id",
                "event_type",
                "payload",
                "created_at",
            ],
        );
        let m = ColumnMapping::default().resolve(&rel).unwrap();
        let t = |s: &'static str| ColumnValue::Text(Bytes::from_static(s.as_bytes()));
        let tuple = TupleData(vec![
            t("e1"),
            t("order"),
            t("42"),
            t("created"),
            t("{}"),
            ColumnValue::Null,
        ]);
        let ev = m.event(&tuple);
        assert_eq!(ev.id.as_deref(), Some(&b"e1"[..]));
        assert_eq!(ev.route_value.as_deref(), Some(&b"order"[..]));
        assert_eq!(ev.key.as_deref(), Some(&b"42"[..]));
        assert_eq!(ev.payload.as_deref(), Some(&b"{}"[..]));
        assert_eq!(ev.timestamp, None);
    }

    #[test]
    fn missing_column_names_table_and_alternatives() {
        let rel = Relation::text_columns(
            1,
            "outbox",
            &["id", "aggregate_type", "aggregate_id", "body"],
        );
        let err = ColumnMapping::default().resolve(&rel).unwrap_err();
        assert_eq!(err.column, "payload");
        let text = err.to_string();
        assert!(text.contains("public.outbox"), "{text}");
        assert!(
            text.contains("id, aggregate_type, aggregate_id, body"),
            "{text}"
        );
    }

    #[test]
    fn short_tuple_gives_nulls_not_panics() {
        let rel = Relation::text_columns(
            1,
            "outbox",
            &[
                "id",
                "aggregate_type",
                "aggregate_id",
                "event_type",
                "payload",
            ],
        );
        let m = ColumnMapping::default().resolve(&rel).unwrap();
        let ev = m.event(&TupleData(vec![]));
        assert_eq!(ev.id, None);
        assert_eq!(ev.payload, None);
    }
}

//! Which relations of the replication stream are outbox tables, and how each maps.
//!
//! Owns the per-relid routing decision, rebuilt whenever pgoutput sends a Relation
//! message (it does before the first change of a relation in a session and after
//! every schema change), so a renamed or added column is picked up in stream order.
//! Invariant: a relation is an outbox table only if its `schema.name` is one of the
//! configured tables; every other relation is [`RelationRoute::NotOutbox`], named, so
//! the caller can refuse it: a published table the relay does not map would have
//! its rows confirmed without being sent (`run` stops on it, `tail` warns). A
//! mapped column whose type changed is judged against the table's first Relation
//! ([`PinnedTypes`]): kept with its first Connect type, or the table's rows are
//! poison (`type-changed`). The
//! tables of one session share one envelope schema cache ([`EnvelopeCache`]), as
//! Debezium's Outbox Event Router does within its task.

use std::collections::HashMap;

use crate::outbox::connect::EnvelopeCache;
use crate::outbox::event::{ColumnMapping, MissingColumn, ResolvedMapping};
use crate::outbox::invalid::{self, Invalid};
use crate::outbox::pinned::{self, PinnedTypes, Role, TypeChange};
use crate::outbox::routing::TopicTemplate;
use crate::pg::names::TableName;
use crate::pg::source::pgoutput::Relation;

/// One outbox table with its own column mapping and topic template.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableSpec {
    /// The table.
    pub table: TableName,
    /// Which column means what.
    pub mapping: ColumnMapping,
    /// Where its records go.
    pub template: TopicTemplate,
}

/// What to do with rows of one relation.
#[derive(Debug, Clone)]
pub enum RelationRoute {
    /// A published table that is not one of the configured outbox tables.
    NotOutbox(TableName),
    /// An outbox table, its resolved column mapping and its topic template.
    Outbox(TableName, Box<ResolvedMapping>, TopicTemplate),
    /// An outbox table that lacks a mapped column (renamed or dropped) or whose
    /// mapped column changed type beyond what its records absorb: its rows are
    /// poison (`missing-column`, `type-changed`).
    Unmapped(Box<Unmapped>),
}

/// An outbox table whose columns no longer match its mapping. Keeps the column
/// names so a row can still be dead-lettered whole.
#[derive(Debug, Clone)]
pub struct Unmapped {
    /// The table.
    pub table: TableName,
    /// What every row of it is diagnosed as.
    pub invalid: Invalid,
    /// The table's columns, in tuple order.
    pub columns: Vec<String>,
    /// Position of the id column, if it still exists.
    pub id: Option<usize>,
}

/// Why an outbox table's Relation no longer matches its mapping.
#[derive(Debug, Clone, thiserror::Error)]
pub enum Mismatch {
    /// A mapped column is missing.
    #[error(transparent)]
    Missing(#[from] MissingColumn),
    /// A mapped column changed type beyond what its records absorb.
    #[error("outbox table {table}: {change}")]
    TypeChanged {
        table: TableName,
        change: TypeChange,
    },
}

impl Mismatch {
    /// The `--on-invalid` cause its rows are poison for.
    pub fn cause(&self) -> &'static str {
        match self {
            Mismatch::Missing(_) => "missing-column",
            Mismatch::TypeChanged { .. } => "type-changed",
        }
    }
}

/// Routing decisions by relation id.
#[derive(Debug, Default)]
pub struct OutboxTables {
    specs: Vec<TableSpec>,
    routes: HashMap<u32, RelationRoute>,
    /// The first types of mapped columns (shared by a relay's sessions).
    pinned: PinnedTypes,
    /// Envelope schemas written in this session, shared by every table.
    envelope_cache: EnvelopeCache,
}

impl OutboxTables {
    /// The configured outbox tables.
    pub fn new(specs: Vec<TableSpec>) -> Self {
        Self {
            specs,
            routes: HashMap::new(),
            pinned: PinnedTypes::default(),
            envelope_cache: EnvelopeCache::default(),
        }
    }

    /// Judge type changes against `pinned` (a relay's, shared by its sessions)
    /// instead of a set of this value's own.
    pub fn pinning(mut self, pinned: PinnedTypes) -> Self {
        self.pinned = pinned;
        self
    }

    /// Record (or replace) the decision for a relation. A configured outbox table
    /// that lacks a mapped column is recorded as [`RelationRoute::Unmapped`] and
    /// also returned as an error, for callers that stop right there.
    pub fn on_relation(&mut self, relation: &Relation) -> Result<(), Mismatch> {
        let table = TableName {
            schema: relation.namespace.clone(),
            name: relation.name.clone(),
        };
        let (route, result) = match self.specs.iter().find(|s| s.table == table) {
            Some(spec) => match spec.mapping.resolve(relation) {
                Ok(mut mapping) => {
                    let checked = self.pinned.check(&table, relation, &mapped(&spec.mapping));
                    for kept in &checked.kept {
                        mapping.keep_type(relation, &kept.column, pinned::kind(kept.first));
                        if kept.new {
                            tracing::info!(
                                table = %table,
                                column = %kept.column,
                                from = %pinned::type_name(kept.first),
                                to = %pinned::type_name(kept.now),
                                "an outbox column changed type; its records keep their shape (the column's first type goes on being written)"
                            );
                        }
                    }
                    match checked.refused {
                        None => {
                            let mapping = mapping.with_envelope_cache(&self.envelope_cache);
                            let route = RelationRoute::Outbox(
                                table,
                                Box::new(mapping),
                                spec.template.clone(),
                            );
                            (route, Ok(()))
                        }
                        Some(change) => {
                            let invalid = invalid::type_changed(&change);
                            let mismatch = Mismatch::TypeChanged {
                                table: table.clone(),
                                change,
                            };
                            (unmapped(table, relation, spec, invalid), Err(mismatch))
                        }
                    }
                }
                Err(missing) => {
                    let invalid = invalid::missing_column(&missing);
                    (
                        unmapped(table, relation, spec, invalid),
                        Err(missing.into()),
                    )
                }
            },
            None => (RelationRoute::NotOutbox(table), Ok(())),
        };
        self.routes.insert(relation.id, route);
        result
    }

    /// The decision for `relid`, `None` if no Relation message described it.
    pub fn route(&self, relid: u32) -> Option<&RelationRoute> {
        self.routes.get(&relid)
    }
}

/// The route of a table whose rows are all `invalid`.
fn unmapped(
    table: TableName,
    relation: &Relation,
    spec: &TableSpec,
    invalid: Invalid,
) -> RelationRoute {
    let columns: Vec<String> = relation.columns.iter().map(|c| c.name.clone()).collect();
    let id = columns.iter().position(|c| *c == spec.mapping.id);
    RelationRoute::Unmapped(Box::new(Unmapped {
        table,
        invalid,
        columns,
        id,
    }))
}

/// The mapped columns of `mapping` and how each is written: the key, the payload
/// and placed columns by their Connect type, the rest as their text.
fn mapped(mapping: &ColumnMapping) -> Vec<(&str, Role)> {
    let mut columns = vec![
        (mapping.key.as_str(), Role::Typed { payload: false }),
        (mapping.payload.as_str(), Role::Typed { payload: true }),
    ];
    for p in mapping.placements.iter().flatten() {
        if !columns.iter().any(|(c, _)| *c == p.column) {
            columns.push((p.column.as_str(), Role::Typed { payload: false }));
        }
    }
    let text = [
        &mapping.id,
        &mapping.aggregate_type,
        &mapping.route_by,
        &mapping.event_type,
        &mapping.timestamp,
    ];
    let trace = mapping.trace_context.iter().map(|t| &t.column);
    for column in text.into_iter().chain(trace) {
        if !columns.iter().any(|(c, _)| c == column) {
            columns.push((column.as_str(), Role::Text));
        }
    }
    columns
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_configured_tables_route_and_relations_are_replaced() {
        let mut t = OutboxTables::new(vec![TableSpec {
            table: TableName::parse("public.outbox").unwrap(),
            mapping: ColumnMapping::default(),
            template: TopicTemplate::default(),
        }]);
        let cols = [
            "id",
            "aggregate_type",
            "aggregate_id",
            "event_type",
            "payload",
        ];
        t.on_relation(&Relation::text_columns(1, "outbox", &cols))
            .unwrap();
        t.on_relation(&Relation::text_columns(2, "orders", &cols))
            .unwrap();
        assert!(matches!(t.route(1), Some(RelationRoute::Outbox(..))));
        assert!(
            matches!(t.route(2), Some(RelationRoute::NotOutbox(n)) if n.to_string() == "public.orders")
        );
        assert!(t.route(3).is_none());
        // The outbox loses its payload column: the next Relation message says so.
        let err = t
            .on_relation(&Relation::text_columns(
                1,
                "outbox",
                &["id", "aggregate_type", "aggregate_id"],
            ))
            .unwrap_err();
        assert!(
            matches!(&err, Mismatch::Missing(m) if m.column == "payload"),
            "{err:?}"
        );
    }
}

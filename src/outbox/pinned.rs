//! The types of an outbox table's mapped columns as the relay first saw them
//! ([`PinnedTypes`]), so an `ALTER TABLE … ALTER COLUMN … TYPE` cannot change the
//! shape of the records unnoticed.
//!
//! pgoutput sends a table's Relation message again after every change of its
//! schema, and the mapping is resolved again from it ([`crate::outbox::tables`]).
//! For each mapped column whose type differs from the first Relation of the table:
//! - a column sent as its text (id, route-by, aggregate type, the default
//!   `event_type` header, the timestamp) gives the same bytes whatever its type:
//!   the change is logged and the relay goes on;
//! - the key, the payload and placed columns are written by their Connect type (a
//!   JSON number or a string, a schema with a logical name): the first type is
//!   kept when every value of the new one is a valid value of it ([`keeps`]: a
//!   string takes any text; a text payload is checked to be JSON row by row, as
//!   ever; a wider integer takes a narrower one), and the change is logged;
//!   otherwise the table's rows are poison, cause `type-changed`, which stops the
//!   relay before the first of them by default (`--on-invalid`).
//!
//! Invariants: one [`PinnedTypes`] is shared by every session of a relay (a clone
//! shares it), so a reconnect does not adopt a change; the first type stays pinned
//! across several changes (a change undone is no change); the pins are kept in the
//! state file ([`PinnedTypes::kept`], written with every persisted LSN) and taken
//! back at the next start ([`PinnedTypes::seed`]), so a relay restarted after the
//! change judges it as the running one would have; only `run --accept-type-change`
//! drops them, once, and pins what it finds (the stop message says so).

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

use crate::outbox::connect::ColumnType;
use crate::pg::names::TableName;
use crate::pg::source::pgoutput::Relation;

/// Per mapped column of one table: its first type oid and the last one seen.
type Columns = HashMap<String, (u32, u32)>;

/// The first type of each mapped column of each outbox table.
#[derive(Debug, Clone, Default)]
pub struct PinnedTypes {
    inner: Arc<Mutex<Inner>>,
}

#[derive(Debug, Default)]
struct Inner {
    tables: HashMap<TableName, Columns>,
    /// Pins taken back from the state file for tables not seen yet in this
    /// process (by [`TableName::quoted`]).
    seeded: KeptTypes,
}

/// The pins as the state file keeps them: per table ([`TableName::quoted`]), per
/// mapped column, the first type oid.
pub type KeptTypes = BTreeMap<String, BTreeMap<String, u32>>;

/// How a mapped column is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// The column's text, whatever its type.
    Text,
    /// By its Connect type; `payload` is the payload column.
    Typed { payload: bool },
}

/// A mapped column whose type changed in a way its records cannot absorb.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TypeChange {
    /// The column.
    pub column: String,
    /// Its first type oid and the new one.
    pub from: u32,
    pub to: u32,
}

impl std::fmt::Display for TypeChange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "column {:?} changed type from {} to {} since the relay first read the table: its records would change shape ({} → {})",
            self.column,
            type_name(self.from),
            type_name(self.to),
            connect_name(self.from),
            connect_name(self.to),
        )
    }
}

/// A mapped column written with its first type although its type changed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Kept {
    pub column: String,
    pub first: u32,
    pub now: u32,
    /// Whether this Relation is the first to show this type (to log it once).
    pub new: bool,
}

/// What [`PinnedTypes::check`] found for one Relation.
#[derive(Debug, Default)]
pub struct Checked {
    /// Columns whose type differs from the first and whose records keep their
    /// shape — the caller keeps the first type's Connect schema.
    pub kept: Vec<Kept>,
    /// The first change the records cannot absorb.
    pub refused: Option<TypeChange>,
}

impl PinnedTypes {
    /// Compare the `mapped` columns of `relation` (name and how each is written)
    /// with the table's first Relation, pinning them on first sight.
    pub fn check(
        &self,
        table: &TableName,
        relation: &Relation,
        mapped: &[(&str, Role)],
    ) -> Checked {
        let mut inner = self.lock();
        let oid_of = |name: &str| {
            relation
                .columns
                .iter()
                .find(|c| c.name == name)
                .map(|c| c.type_oid)
        };
        let Inner { tables, seeded } = &mut *inner;
        let pinned = tables.entry(table.clone()).or_insert_with(|| {
            seeded
                .remove(&table.quoted())
                .unwrap_or_default()
                .into_iter()
                .map(|(column, oid)| (column, (oid, oid)))
                .collect()
        });
        let mut checked = Checked::default();
        for &(column, role) in mapped {
            let Some(now) = oid_of(column) else { continue };
            let seen = pinned.entry(column.to_owned()).or_insert((now, now));
            let (first, new) = (seen.0, seen.1 != now);
            seen.1 = now;
            if first == now {
                continue;
            }
            let absorbed = match role {
                Role::Text => true,
                Role::Typed { payload } => keeps(kind(first), kind(now), payload),
            };
            if absorbed {
                checked.kept.push(Kept {
                    column: column.to_owned(),
                    first,
                    now,
                    new,
                });
            } else if checked.refused.is_none() {
                checked.refused = Some(TypeChange {
                    column: column.to_owned(),
                    from: first,
                    to: now,
                });
            }
        }
        checked
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// What the state file keeps: every pin of this process, and those taken back
    /// from the file for tables not seen since.
    pub fn kept(&self) -> KeptTypes {
        let inner = self.lock();
        let mut kept = inner.seeded.clone();
        for (table, columns) in &inner.tables {
            let columns = columns
                .iter()
                .map(|(column, (first, _))| (column.clone(), *first))
                .collect();
            kept.insert(table.quoted(), columns);
        }
        kept
    }

    /// Take back the pins a state file kept, for the tables this process has not
    /// pinned yet (its own pins are never replaced).
    pub fn seed(&self, kept: &KeptTypes) {
        let mut inner = self.lock();
        let Inner { tables, seeded } = &mut *inner;
        for (table, columns) in kept {
            let seen = tables.keys().any(|t| t.quoted() == *table);
            if !seen {
                seeded
                    .entry(table.clone())
                    .or_insert_with(|| columns.clone());
            }
        }
    }
}

/// The Connect type pgoutbox writes a column of type `oid` as (text for types it
/// has no Connect type for, as [`crate::outbox::event`] resolves them).
pub fn kind(oid: u32) -> ColumnType {
    ColumnType::of(oid).unwrap_or(ColumnType::Text)
}

/// Whether every value of a column now written as `now` is a valid value of the
/// `first` type's Connect schema (the payload's text is checked to be JSON row by
/// row, so a payload keeps its JSON schema).
pub fn keeps(first: ColumnType, now: ColumnType, payload: bool) -> bool {
    use ColumnType as T;
    first == now
        || first == T::Text
        || (first == T::Json && payload)
        || matches!(
            (first, now),
            (T::Int64, T::Int16 | T::Int32) | (T::Int32, T::Int16)
        )
}

/// A type oid's SQL name, for messages.
pub fn type_name(oid: u32) -> String {
    let name = match oid {
        16 => "boolean",
        19 => "name",
        20 => "bigint",
        21 => "smallint",
        23 => "integer",
        25 => "text",
        114 => "json",
        1042 => "character",
        1043 => "character varying",
        1114 => "timestamp",
        1184 => "timestamptz",
        1700 => "numeric",
        2950 => "uuid",
        3802 => "jsonb",
        _ => return format!("type oid {oid}"),
    };
    name.to_owned()
}

fn connect_name(oid: u32) -> &'static str {
    match kind(oid) {
        ColumnType::Text => "a string",
        ColumnType::Uuid => "a string named io.debezium.data.Uuid",
        ColumnType::Json => "a string named io.debezium.data.Json",
        ColumnType::Int16 => "an int16",
        ColumnType::Int32 => "an int32",
        ColumnType::Int64 => "an int64",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pg::source::pgoutput::{RelationColumn, ReplicaIdentity};

    fn relation(types: &[(&str, u32)]) -> Relation {
        Relation {
            xid: None,
            id: 1,
            namespace: "public".into(),
            name: "outbox".into(),
            replica_identity: ReplicaIdentity::Default,
            columns: types
                .iter()
                .map(|(name, oid)| RelationColumn {
                    flags: 0,
                    name: (*name).into(),
                    type_oid: *oid,
                    type_modifier: -1,
                })
                .collect(),
        }
    }

    const MAPPED: &[(&str, Role)] = &[
        ("id", Role::Text),
        ("aggregate_id", Role::Typed { payload: false }),
        ("payload", Role::Typed { payload: true }),
    ];

    #[test]
    fn a_change_records_absorb_is_kept_and_one_they_cannot_is_refused() {
        let pinned = PinnedTypes::default();
        let table = TableName::parse("public.outbox").unwrap();
        let first = relation(&[("id", 2950), ("aggregate_id", 25), ("payload", 3802)]);
        let checked = pinned.check(&table, &first, MAPPED);
        assert!(checked.kept.is_empty() && checked.refused.is_none());
        // uuid id → text, text key → bigint, jsonb payload → text: all absorbed.
        let absorbed = relation(&[("id", 25), ("aggregate_id", 20), ("payload", 25)]);
        let checked = pinned.check(&table, &absorbed, MAPPED);
        assert_eq!(checked.kept.len(), 3, "{checked:?}");
        assert!(checked.kept.iter().all(|k| k.new), "{checked:?}");
        assert!(checked.refused.is_none());
        // The same types again (another column's change): still kept, not new.
        let again = pinned.check(&table, &absorbed, MAPPED);
        assert!(again.kept.iter().all(|k| !k.new) && again.kept.len() == 3);
        // Compared with the first types, not the previous ones.
        let back = relation(&[("id", 2950), ("aggregate_id", 25), ("payload", 3802)]);
        assert!(pinned.check(&table, &back, MAPPED).kept.is_empty());
    }

    #[test]
    fn pins_kept_in_the_state_file_judge_the_first_relation_after_a_restart() {
        let table = TableName::parse("public.outbox").unwrap();
        let other = TableName::parse("app.events").unwrap();
        let before = PinnedTypes::default();
        before.check(
            &table,
            &relation(&[("aggregate_id", 20), ("payload", 3802)]),
            MAPPED,
        );
        let kept = before.kept();
        assert_eq!(kept[&table.quoted()]["aggregate_id"], 20, "{kept:?}");

        // A new process: the first Relation it reads already has the new type.
        let after = PinnedTypes::default();
        after.seed(&kept);
        assert_eq!(
            after.kept(),
            kept,
            "seeded pins are kept until the table is seen"
        );
        let checked = after.check(
            &table,
            &relation(&[("aggregate_id", 25), ("payload", 3802)]),
            MAPPED,
        );
        let change = checked.refused.expect("judged against the kept pin");
        assert_eq!((change.from, change.to), (20, 25));
        // The process's own pins win over a later seed; other tables are seeded.
        let mut stale = kept.clone();
        stale
            .get_mut(&table.quoted())
            .unwrap()
            .insert("aggregate_id".into(), 23);
        stale.insert(other.quoted(), BTreeMap::from([("payload".into(), 25)]));
        after.seed(&stale);
        let now = after.kept();
        assert_eq!(now[&table.quoted()]["aggregate_id"], 20);
        assert_eq!(now[&other.quoted()]["payload"], 25);
    }

    #[test]
    fn a_numeric_key_made_text_is_refused_and_named() {
        let pinned = PinnedTypes::default();
        let table = TableName::parse("public.outbox").unwrap();
        pinned.check(
            &table,
            &relation(&[("aggregate_id", 20), ("payload", 3802)]),
            MAPPED,
        );
        let shared = pinned.clone();
        let checked = shared.check(
            &table,
            &relation(&[("aggregate_id", 25), ("payload", 3802)]),
            MAPPED,
        );
        let change = checked.refused.expect("refused");
        assert_eq!((change.from, change.to), (20, 25));
        let text = change.to_string();
        assert!(
            text.contains("\"aggregate_id\" changed type from bigint to text"),
            "{text}"
        );
        assert!(text.contains("an int64 → a string"), "{text}");
    }

    #[test]
    fn what_a_schema_keeps() {
        use ColumnType as T;
        assert!(keeps(T::Text, T::Int64, false));
        assert!(keeps(T::Json, T::Text, true));
        assert!(!keeps(T::Json, T::Text, false));
        assert!(keeps(T::Int64, T::Int32, false));
        assert!(!keeps(T::Int32, T::Int64, false));
        assert!(!keeps(T::Int64, T::Text, false));
        assert!(!keeps(T::Uuid, T::Text, false));
    }
}

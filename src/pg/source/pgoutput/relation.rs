//! The relation cache: the latest Relation message seen for each relation oid.
//!
//! Row messages carry only a relation oid; their values line up with the columns of
//! the last Relation message for that oid, which pgoutput sends before the first row
//! change of a relation in a session and again whenever its schema may have changed.
//! Invariant: an entry is replaced whole by each new Relation for its oid, never
//! merged, so readers always see one consistent schema. Entries are `Arc`ed so a
//! consumer can hold a schema while the cache moves on.

use std::collections::HashMap;
use std::sync::Arc;

use super::message::{Oid, Relation};

/// Latest [`Relation`] per relation oid.
#[derive(Debug, Clone, Default)]
pub struct RelationCache {
    by_id: HashMap<Oid, Arc<Relation>>,
}

impl RelationCache {
    /// An empty cache.
    pub fn new() -> Self {
        Self::default()
    }

    /// Stores `relation`, replacing any earlier entry for its oid, and returns the
    /// shared entry.
    pub fn insert(&mut self, relation: Relation) -> Arc<Relation> {
        let relation = Arc::new(relation);
        self.by_id.insert(relation.id, Arc::clone(&relation));
        relation
    }

    /// The latest schema for `relid`.
    pub fn get(&self, relid: Oid) -> Option<&Arc<Relation>> {
        self.by_id.get(&relid)
    }

    /// Number of cached relations.
    pub fn len(&self) -> usize {
        self.by_id.len()
    }

    /// Whether no relation is cached.
    pub fn is_empty(&self) -> bool {
        self.by_id.is_empty()
    }

    /// Forgets every relation, e.g. when a new replication session starts: pgoutput
    /// resends Relation messages per session, so stale entries must not leak across.
    pub fn clear(&mut self) {
        self.by_id.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn later_relation_replaces_earlier() {
        let mut cache = RelationCache::new();
        let first = cache.insert(Relation::text_columns(7, "outbox", &["id"]));
        cache.insert(Relation::text_columns(8, "other", &["x"]));
        cache.insert(Relation::text_columns(7, "outbox", &["id", "payload"]));
        assert_eq!(cache.len(), 2);
        let now = cache.get(7).unwrap();
        assert_eq!(now.columns.len(), 2);
        // A holder of the old schema keeps it unchanged.
        assert_eq!(first.columns.len(), 1);
        cache.clear();
        assert!(cache.is_empty());
        assert!(cache.get(7).is_none());
    }
}

//! Debezium's envelope schema cache, reproduced: the Outbox Event Router builds the
//! Connect schema of an envelope value (`{payload, <placed fields>}`) once per
//! distinct **payload schema** and reuses it for every later record whose payload
//! has the same schema — whatever its table or route value. So the schema's name
//! (`<logical>.<schema>.<table>.<route>.Value`) and its placed fields' types are
//! those of the first such record (the golden records show a `uuid` column of a
//! second table written with the first table's `string` schema).
//!
//! Invariant: one cache per relay session (Debezium's lives as long as its task);
//! an entry never changes once written.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// Payload field schema (JSON bytes) → the whole envelope schema (JSON bytes).
type Schemas = HashMap<Vec<u8>, Arc<[u8]>>;

/// The envelope schemas of one session.
#[derive(Debug, Clone, Default)]
pub struct EnvelopeCache(Arc<Mutex<Schemas>>);

impl EnvelopeCache {
    /// The envelope schema for `payload_schema`, built by `build` the first time.
    pub fn get_or_build(
        &self,
        payload_schema: &[u8],
        build: impl FnOnce() -> Vec<u8>,
    ) -> Arc<[u8]> {
        let mut map = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(schema) = map.get(payload_schema) {
            return schema.clone();
        }
        let schema: Arc<[u8]> = Arc::from(build());
        map.insert(payload_schema.to_vec(), schema.clone());
        schema
    }
}

/// Caches compare as the same cache.
impl PartialEq for EnvelopeCache {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl Eq for EnvelopeCache {}

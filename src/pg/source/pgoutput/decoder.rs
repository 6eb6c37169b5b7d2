//! The stateful decoder for one replication session.
//!
//! Owns the two pieces of state a pgoutput stream needs across messages: whether the
//! stream is inside a streamed-transaction block (which decides if row and schema
//! messages start with an xid) and the [`RelationCache`]. Invariant: state changes
//! only after a message decoded successfully, so a failed decode leaves the decoder
//! as it was.

use std::sync::Arc;

use bytes::Bytes;

use super::decode::decode_message;
use super::error::DecodeError;
use super::message::{Oid, PgOutputMessage, Relation};
use super::relation::RelationCache;

/// Decodes the pgoutput messages of one replication session in order.
#[derive(Debug, Clone, Default)]
pub struct Decoder {
    in_stream: bool,
    relations: RelationCache,
}

impl Decoder {
    /// A decoder for a new session: outside any streamed block, no relations known.
    pub fn new() -> Self {
        Self::default()
    }

    /// Decodes one pgoutput message (the XLogData payload).
    ///
    /// Tracks Stream Start/Stop to know whether xid prefixes are present, and updates
    /// the relation cache on every Relation message (replacing any previous entry for
    /// that relid). Stream Start/Stop are not checked for nesting: pgoutput never
    /// nests them, and the flag simply follows the last one seen.
    pub fn decode(&mut self, data: Bytes) -> Result<PgOutputMessage, DecodeError> {
        let msg = decode_message(&data, self.in_stream)?;
        match &msg {
            PgOutputMessage::StreamStart(_) => self.in_stream = true,
            PgOutputMessage::StreamStop => self.in_stream = false,
            // Relation messages are rare (once per relation per session and after
            // DDL), so cloning one into the cache costs nothing that matters.
            PgOutputMessage::Relation(relation) => {
                self.relations.insert(relation.clone());
            }
            _ => {}
        }
        Ok(msg)
    }

    /// The latest schema received for `relid`.
    pub fn relation(&self, relid: Oid) -> Option<&Arc<Relation>> {
        self.relations.get(relid)
    }

    /// All cached schemas.
    pub fn relations(&self) -> &RelationCache {
        &self.relations
    }

    /// Whether the stream is between Stream Start and Stream Stop.
    pub fn in_streamed_txn(&self) -> bool {
        self.in_stream
    }
}

#[cfg(test)]
mod tests {
    use super::super::fixtures::Wire;
    use super::*;

    fn relation_bytes(xid: Option<u32>, relid: u32, columns: &[&str]) -> Bytes {
        let mut w = Wire::tag(b'R');
        if let Some(xid) = xid {
            w = w.u32(xid);
        }
        w = w.u32(relid).cstr("public").cstr("outbox").u8(b'd');
        w = w.i16(i16::try_from(columns.len()).unwrap());
        for c in columns {
            w = w.u8(0).cstr(c).u32(25).i32(-1);
        }
        w.bytes()
    }

    #[test]
    fn second_relation_for_same_relid_replaces_first() {
        let mut d = Decoder::new();
        d.decode(relation_bytes(None, 16384, &["id"])).unwrap();
        assert_eq!(d.relation(16384).unwrap().columns.len(), 1);
        d.decode(relation_bytes(None, 16384, &["id", "payload"]))
            .unwrap();
        let rel = d.relation(16384).unwrap();
        assert_eq!(rel.columns.len(), 2);
        assert_eq!(rel.columns[1].name, "payload");
        assert_eq!(d.relations().len(), 1);
        assert!(d.relation(1).is_none());
    }

    #[test]
    fn tracks_stream_blocks_for_xid_prefixes() {
        let mut d = Decoder::new();
        d.decode(Wire::tag(b'S').u32(900).u8(1).bytes()).unwrap();
        assert!(d.in_streamed_txn());
        let PgOutputMessage::Relation(rel) =
            d.decode(relation_bytes(Some(900), 5, &["id"])).unwrap()
        else {
            panic!("expected Relation");
        };
        assert_eq!(rel.xid, Some(900));
        assert_eq!(d.relation(5).unwrap().xid, Some(900));
        d.decode(Wire::tag(b'E').bytes()).unwrap();
        assert!(!d.in_streamed_txn());
        // Outside the block the same bytes would be misread, so they must fail.
        assert!(d.decode(relation_bytes(Some(900), 5, &["id"])).is_err());
        d.decode(relation_bytes(None, 5, &["id"])).unwrap();
        assert_eq!(d.relation(5).unwrap().xid, None);
    }

    #[test]
    fn failed_decode_leaves_state_alone() {
        let mut d = Decoder::new();
        assert!(d.decode(Wire::tag(b'S').u32(1).bytes()).is_err());
        assert!(!d.in_streamed_txn());
        assert!(d
            .decode(relation_bytes(None, 5, &["id"]).slice(..10))
            .is_err());
        assert!(d.relation(5).is_none());
    }
}

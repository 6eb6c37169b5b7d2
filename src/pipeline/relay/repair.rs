//! The relay's side of a publication repair ([`crate::safety::repair`]): the
//! repair transaction's messages become the re-created table's rows.
//!
//! A relation message describes the table (its OID, names, columns and their
//! types) and is routed like a pgoutput Relation message — the same mapping, the
//! same pinned types; each row message (the row's columns as text, in attribute
//! order) is then handled as an Insert of that relation, inside the repair's
//! transaction: skipped under exactly-once when the watermark holds it, poison by
//! the same rules, acked and confirmed with the transaction.
//!
//! Invariant: a row message before any relation message, or one that does not
//! decode, stops the relay before it (never a silent skip).

use bytes::Bytes;

use super::Relay;
use crate::pg::source::pgoutput::{
    ColumnValue, Insert, LogicalMessage, Relation, RelationColumn, ReplicaIdentity, TupleData,
};
use crate::pipeline::error::PipelineError;
use crate::pipeline::sink::Sink;
use crate::safety::repair::{RepairedRelation, RELATION_PREFIX};

impl Relay<'_> {
    /// A message of a publication repair (its prefix says which kind).
    pub(super) fn on_repair_message<S: Sink>(
        &mut self,
        sink: &mut S,
        message: &LogicalMessage,
    ) -> Result<(), PipelineError> {
        let bad = |reason: String| PipelineError::RepairMessage {
            lsn: message.lsn,
            prefix: message.prefix.clone(),
            reason,
        };
        if message.prefix == RELATION_PREFIX {
            let described: RepairedRelation = serde_json::from_slice(&message.content)
                .map_err(|e| bad(format!("not a relation description: {e}")))?;
            let relation = Relation {
                xid: None,
                id: described.oid,
                namespace: described.schema,
                name: described.name,
                replica_identity: ReplicaIdentity::Default,
                columns: described
                    .columns
                    .into_iter()
                    .map(|(name, type_oid)| RelationColumn {
                        flags: 0,
                        name,
                        type_oid,
                        type_modifier: -1,
                    })
                    .collect(),
            };
            if let Err(mismatch) = self.tables.on_relation(&relation) {
                let cause = mismatch.cause();
                tracing::warn!(error = %mismatch, "repaired outbox table does not match the column mapping; its rows are handled by --on-invalid {cause}");
            }
            self.repairing = Some(described.oid);
            return Ok(());
        }
        let relation_id = self
            .repairing
            .ok_or_else(|| bad("a row before the relation it belongs to".to_owned()))?;
        let values: Vec<Option<String>> = serde_json::from_slice(&message.content)
            .map_err(|e| bad(format!("not a row (a JSON array of text or null): {e}")))?;
        let tuple = TupleData(
            values
                .into_iter()
                .map(|v| v.map_or(ColumnValue::Null, |t| ColumnValue::Text(Bytes::from(t))))
                .collect(),
        );
        let insert = Insert {
            xid: None,
            relation_id,
            tuple,
        };
        self.on_insert(sink, message.lsn, &insert)
    }
}

//! Sans-I/O decoder for PostgreSQL's `pgoutput` logical replication plugin,
//! protocol versions 1 to 4.
//!
//! Input is one XLogData payload as [`bytes::Bytes`]; output is a typed
//! [`PgOutputMessage`]. Nothing here does I/O or knows about connections, so all of
//! it is unit tested, property tested and fuzzable. Layouts follow PostgreSQL's
//! "Logical Replication Message Formats" and `src/backend/replication/logical/proto.c`.
//!
//! Files:
//! - `message.rs`: the typed messages.
//! - `decode.rs` / `rows.rs`: stateless decoding ([`decode_message`]); `rows.rs` holds
//!   the hot path (row messages and TupleData).
//! - `reader.rs`: the bounds-checked cursor every read goes through.
//! - `decoder.rs` / `relation.rs`: the per-session [`Decoder`] with its
//!   streamed-transaction flag and [`RelationCache`].
//! - `encode.rs`: the inverse, [`encode::encode`], for tests, fixtures and fuzzing.
//! - `error.rs`: [`DecodeError`].
//!
//! Invariants: decoding never panics on any input and never allocates in proportion
//! to a length or count it has not checked against the bytes present; a message must
//! be consumed exactly (trailing bytes are an error); column values are zero-copy
//! slices of the input.
//!
//! Protocol facts worth knowing: the xid that row, schema and Message messages carry
//! inside a streamed transaction is not flagged on the wire, so decoding needs to
//! know whether a Stream Start is open ([`Decoder`] tracks it). Likewise v4 parallel
//! streaming adds abort_lsn/abort_time to Stream Abort without a flag, so the decoder
//! tells the two forms apart by length.

mod decode;
mod decoder;
pub mod encode;
mod error;
mod message;
mod reader;
mod relation;
mod row_message;
mod rows;

#[cfg(test)]
mod fixtures;
#[cfg(test)]
mod strategies;

pub use decode::decode_message;
pub use decoder::Decoder;
pub use error::DecodeError;
pub use message::{
    Begin, BeginPrepare, ColumnValue, Commit, CommitPrepared, Delete, Insert, LogicalMessage, Oid,
    OldTuple, Origin, PgOutputMessage, PgTimestamp, Prepare, Relation, RelationColumn,
    ReplicaIdentity, RollbackPrepared, StreamAbort, StreamAbortInfo, StreamCommit, StreamStart,
    Truncate, TupleData, TypeMessage, Update, Xid, PG_CATALOG,
};
pub use relation::RelationCache;

//! Typed pgoutput messages, protocol versions 1 to 4.
//!
//! Owns the data model only; [`super::decode`] fills it and [`super::encode`] writes it
//! back. One struct per message layout of PostgreSQL's "Logical Replication Message
//! Formats". Invariants kept by the decoder (and assumed by the encoder):
//! - `xid: Option<u32>` fields are `Some` exactly when the message was inside a streamed
//!   transaction (between Stream Start and Stream Stop, protocol version 2 or later).
//! - Column values and logical-message content are zero-copy slices of the received
//!   buffer, so holding one keeps that whole XLogData payload alive.
//! - Strings never contain NUL (the wire terminator) and are valid UTF-8.
//! - `Relation::namespace` and `TypeMessage::namespace` are never empty: the wire's
//!   empty string is PostgreSQL's shorthand for `pg_catalog` and is expanded.
//! - Flag bytes are kept raw (with helper methods) so a future flag bit does not make
//!   an otherwise valid stream undecodable.

use bytes::Bytes;

use crate::pg::lsn::Lsn;

pub use super::row_message::{
    ColumnValue, Delete, Insert, OldTuple, Relation, RelationColumn, ReplicaIdentity, Truncate,
    TupleData, TypeMessage, Update,
};

/// A `timestamptz` on the wire: microseconds since 2000-01-01 00:00:00 UTC, kept raw.
/// Add 946 684 800 000 000 (saturating) for Unix-epoch microseconds.
pub type PgTimestamp = i64;

/// Transaction id (`TransactionId`, an unsigned 32-bit counter).
pub type Xid = u32;

/// Object id of a relation or type.
pub type Oid = u32;

/// Namespace the wire's empty namespace string stands for.
pub const PG_CATALOG: &str = "pg_catalog";

/// One pgoutput message, the payload of one XLogData message.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum PgOutputMessage {
    /// `B`: a (non-streamed) transaction starts.
    Begin(Begin),
    /// `C`: the transaction opened by the last Begin committed.
    Commit(Commit),
    /// `O`: the transaction originated on another node (replication origin).
    Origin(Origin),
    /// `M`: a `pg_logical_emit_message` message.
    Message(LogicalMessage),
    /// `R`: a relation's schema; sent before its first row change and after DDL.
    Relation(Relation),
    /// `Y`: a non-builtin type referenced by a later Relation.
    Type(TypeMessage),
    /// `I`: a row was inserted.
    Insert(Insert),
    /// `U`: a row was updated.
    Update(Update),
    /// `D`: a row was deleted.
    Delete(Delete),
    /// `T`: one or more tables were truncated.
    Truncate(Truncate),
    /// `S`: a block of a streamed (in-progress) transaction starts (v2+).
    StreamStart(StreamStart),
    /// `E`: the current streamed block ends (v2+).
    StreamStop,
    /// `c`: a streamed transaction committed (v2+).
    StreamCommit(StreamCommit),
    /// `A`: a streamed transaction or subtransaction aborted (v2+).
    StreamAbort(StreamAbort),
    /// `b`: a two-phase transaction starts being decoded at PREPARE (v3+).
    BeginPrepare(BeginPrepare),
    /// `P`: the transaction opened by Begin Prepare was prepared (v3+).
    Prepare(Prepare),
    /// `K`: a prepared transaction was committed (v3+).
    CommitPrepared(CommitPrepared),
    /// `r`: a prepared transaction was rolled back (v3+).
    RollbackPrepared(RollbackPrepared),
    /// `p`: a streamed transaction was prepared (v3+); same layout as Prepare.
    StreamPrepare(Prepare),
}

impl PgOutputMessage {
    /// The tag byte that starts this message on the wire.
    pub fn tag(&self) -> u8 {
        match self {
            Self::Begin(_) => b'B',
            Self::Commit(_) => b'C',
            Self::Origin(_) => b'O',
            Self::Message(_) => b'M',
            Self::Relation(_) => b'R',
            Self::Type(_) => b'Y',
            Self::Insert(_) => b'I',
            Self::Update(_) => b'U',
            Self::Delete(_) => b'D',
            Self::Truncate(_) => b'T',
            Self::StreamStart(_) => b'S',
            Self::StreamStop => b'E',
            Self::StreamCommit(_) => b'c',
            Self::StreamAbort(_) => b'A',
            Self::BeginPrepare(_) => b'b',
            Self::Prepare(_) => b'P',
            Self::CommitPrepared(_) => b'K',
            Self::RollbackPrepared(_) => b'r',
            Self::StreamPrepare(_) => b'p',
        }
    }
}

/// `B` Begin.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Begin {
    /// LSN of the commit record: the transaction's final LSN.
    pub final_lsn: Lsn,
    /// Commit time.
    pub commit_time: PgTimestamp,
    /// Transaction id.
    pub xid: Xid,
}

/// `C` Commit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Commit {
    /// Flags; currently always 0.
    pub flags: u8,
    /// LSN of the commit record.
    pub commit_lsn: Lsn,
    /// End LSN of the transaction: the position to confirm once it is handled.
    pub end_lsn: Lsn,
    /// Commit time.
    pub commit_time: PgTimestamp,
}

/// `O` Origin.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Origin {
    /// LSN of the commit on the origin server.
    pub commit_lsn: Lsn,
    /// Replication origin name.
    pub name: String,
}

/// `M` logical decoding message (`pg_logical_emit_message`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogicalMessage {
    /// Transaction id, inside a streamed transaction only.
    pub xid: Option<Xid>,
    /// Flags; bit 0 set when the message is transactional.
    pub flags: u8,
    /// LSN of the message.
    pub lsn: Lsn,
    /// The prefix given to `pg_logical_emit_message`.
    pub prefix: String,
    /// The content, a slice of the received buffer.
    pub content: Bytes,
}

impl LogicalMessage {
    /// Flag bit for a transactional message.
    pub const TRANSACTIONAL: u8 = 1;

    /// Whether the message was emitted transactionally.
    pub fn transactional(&self) -> bool {
        self.flags & Self::TRANSACTIONAL != 0
    }
}

/// `S` Stream Start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StreamStart {
    /// Transaction id of the streamed transaction.
    pub xid: Xid,
    /// Whether this is the first block streamed for `xid`.
    pub first_segment: bool,
}

/// `c` Stream Commit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StreamCommit {
    /// Transaction id of the streamed transaction.
    pub xid: Xid,
    /// Flags; currently always 0.
    pub flags: u8,
    /// LSN of the commit record.
    pub commit_lsn: Lsn,
    /// End LSN of the transaction.
    pub end_lsn: Lsn,
    /// Commit time.
    pub commit_time: PgTimestamp,
}

/// `A` Stream Abort.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StreamAbort {
    /// Transaction id of the streamed (top-level) transaction.
    pub xid: Xid,
    /// Aborted subtransaction; equal to `xid` when the whole transaction aborted.
    pub subxid: Xid,
    /// Abort position, sent only by protocol version 4 with `streaming = parallel`.
    pub abort: Option<StreamAbortInfo>,
}

/// The optional tail of a v4 parallel-streaming Stream Abort.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StreamAbortInfo {
    /// LSN of the abort.
    pub abort_lsn: Lsn,
    /// Abort time.
    pub abort_time: PgTimestamp,
}

/// `b` Begin Prepare.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BeginPrepare {
    /// LSN of the prepare.
    pub prepare_lsn: Lsn,
    /// End LSN of the prepared transaction.
    pub end_lsn: Lsn,
    /// Prepare time.
    pub prepare_time: PgTimestamp,
    /// Transaction id.
    pub xid: Xid,
    /// Global identifier given to `PREPARE TRANSACTION`.
    pub gid: String,
}

/// `P` Prepare, and `p` Stream Prepare (same layout).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Prepare {
    /// Flags; currently always 0.
    pub flags: u8,
    /// LSN of the prepare.
    pub prepare_lsn: Lsn,
    /// End LSN of the prepared transaction.
    pub end_lsn: Lsn,
    /// Prepare time.
    pub prepare_time: PgTimestamp,
    /// Transaction id.
    pub xid: Xid,
    /// Global identifier given to `PREPARE TRANSACTION`.
    pub gid: String,
}

/// `K` Commit Prepared.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommitPrepared {
    /// Flags; currently always 0.
    pub flags: u8,
    /// LSN of the commit prepared.
    pub commit_lsn: Lsn,
    /// End LSN of the commit prepared transaction.
    pub end_lsn: Lsn,
    /// Commit time.
    pub commit_time: PgTimestamp,
    /// Transaction id.
    pub xid: Xid,
    /// Global identifier of the prepared transaction.
    pub gid: String,
}

/// `r` Rollback Prepared.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RollbackPrepared {
    /// Flags; currently always 0.
    pub flags: u8,
    /// End LSN of the prepared transaction.
    pub prepare_end_lsn: Lsn,
    /// End LSN of the rollback prepared transaction.
    pub rollback_end_lsn: Lsn,
    /// Prepare time.
    pub prepare_time: PgTimestamp,
    /// Rollback time.
    pub rollback_time: PgTimestamp,
    /// Transaction id.
    pub xid: Xid,
    /// Global identifier of the prepared transaction.
    pub gid: String,
}

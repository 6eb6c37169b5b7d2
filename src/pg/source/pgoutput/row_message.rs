//! Typed pgoutput row and schema messages: Relation, Type, Insert, Update, Delete,
//! Truncate, and the TupleData they carry.
//!
//! Owns the data model of the hot path; re-exported through [`super::message`].
//! Invariants kept by the decoder (and assumed by the encoder): `xid` is `Some`
//! exactly inside a streamed transaction; column values are zero-copy slices of the
//! received buffer; names never contain NUL; namespaces are never empty (the wire's
//! empty string is expanded to `pg_catalog`).

use bytes::Bytes;

use super::message::{Oid, Xid};

/// A table's `REPLICA IDENTITY` setting (`pg_class.relreplident`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ReplicaIdentity {
    /// `d`: the primary key (PostgreSQL's default).
    #[default]
    Default,
    /// `n`: nothing.
    Nothing,
    /// `f`: all columns.
    Full,
    /// `i`: a chosen unique index.
    Index,
    /// Any other byte. Kept rather than rejected: the decoder does not act on the
    /// setting, so a new one must not stop the stream. Never holds `d`, `n`, `f`, `i`.
    Other(u8),
}

impl ReplicaIdentity {
    /// The setting for a wire byte.
    pub fn from_byte(byte: u8) -> Self {
        match byte {
            b'd' => Self::Default,
            b'n' => Self::Nothing,
            b'f' => Self::Full,
            b'i' => Self::Index,
            other => Self::Other(other),
        }
    }

    /// The wire byte.
    pub fn to_byte(self) -> u8 {
        match self {
            Self::Default => b'd',
            Self::Nothing => b'n',
            Self::Full => b'f',
            Self::Index => b'i',
            Self::Other(byte) => byte,
        }
    }
}

/// `R` Relation: the schema that later row messages with the same id follow.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Relation {
    /// Transaction id, inside a streamed transaction only.
    pub xid: Option<Xid>,
    /// Relation oid: the id row messages refer to.
    pub id: Oid,
    /// Schema name; `pg_catalog` when the wire sent the empty string.
    pub namespace: String,
    /// Relation name.
    pub name: String,
    /// Replica identity, which decides what old-row data Update and Delete carry.
    pub replica_identity: ReplicaIdentity,
    /// Published columns in tuple order: row messages' values line up with these.
    pub columns: Vec<RelationColumn>,
}

impl Relation {
    /// A `public.<name>` relation whose columns are all `text` — for tests,
    /// examples and benchmarks that need a Relation without a server.
    pub fn text_columns(id: Oid, name: &str, columns: &[&str]) -> Self {
        Relation {
            xid: None,
            id,
            namespace: "public".into(),
            name: name.into(),
            replica_identity: ReplicaIdentity::Default,
            columns: columns
                .iter()
                .map(|c| RelationColumn {
                    flags: 0,
                    name: (*c).into(),
                    type_oid: 25,
                    type_modifier: -1,
                })
                .collect(),
        }
    }

    /// Index of the column called `name`, to look its value up in a [`TupleData`].
    pub fn column_index(&self, name: &str) -> Option<usize> {
        self.columns.iter().position(|c| c.name == name)
    }
}

/// One column of a [`Relation`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RelationColumn {
    /// Flags; bit 0 set when the column is part of the replica identity key.
    pub flags: u8,
    /// Column name.
    pub name: String,
    /// Oid of the column's type.
    pub type_oid: Oid,
    /// Type modifier (`atttypmod`); -1 when the type has none.
    pub type_modifier: i32,
}

impl RelationColumn {
    /// Flag bit for a replica identity key column.
    pub const KEY: u8 = 1;

    /// Whether the column is part of the replica identity key.
    pub fn is_key(&self) -> bool {
        self.flags & Self::KEY != 0
    }
}

/// `Y` Type.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TypeMessage {
    /// Transaction id, inside a streamed transaction only.
    pub xid: Option<Xid>,
    /// Type oid.
    pub id: Oid,
    /// Schema name; `pg_catalog` when the wire sent the empty string.
    pub namespace: String,
    /// Type name.
    pub name: String,
}

/// The values of one row, in the column order of the relation's last Relation message.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TupleData(pub Vec<ColumnValue>);

impl TupleData {
    /// The columns' values.
    pub fn columns(&self) -> &[ColumnValue] {
        &self.0
    }
}

/// One column's value in a [`TupleData`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ColumnValue {
    /// `n`: SQL NULL.
    Null,
    /// `u`: an unchanged TOASTed value; PostgreSQL does not resend it.
    UnchangedToast,
    /// `t`: the type's text output (not NUL-terminated), a slice of the received buffer.
    Text(Bytes),
    /// `b`: the type's binary send format, a slice of the received buffer.
    Binary(Bytes),
}

/// Old-row data of an Update or Delete.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum OldTuple {
    /// `K`: only the replica identity key columns are set; the rest are Null.
    Key(TupleData),
    /// `O`: the whole old row (`REPLICA IDENTITY FULL`).
    Full(TupleData),
}

impl OldTuple {
    /// The old row data, whichever form it has.
    pub fn tuple(&self) -> &TupleData {
        match self {
            Self::Key(tuple) | Self::Full(tuple) => tuple,
        }
    }
}

/// `I` Insert.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Insert {
    /// Transaction id, inside a streamed transaction only.
    pub xid: Option<Xid>,
    /// Oid of the relation, described by an earlier Relation message.
    pub relation_id: Oid,
    /// The inserted row.
    pub tuple: TupleData,
}

/// `U` Update.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Update {
    /// Transaction id, inside a streamed transaction only.
    pub xid: Option<Xid>,
    /// Oid of the relation, described by an earlier Relation message.
    pub relation_id: Oid,
    /// Old key or row; absent when the key did not change and identity is not FULL.
    pub old: Option<OldTuple>,
    /// The new row.
    pub new: TupleData,
}

/// `D` Delete.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Delete {
    /// Transaction id, inside a streamed transaction only.
    pub xid: Option<Xid>,
    /// Oid of the relation, described by an earlier Relation message.
    pub relation_id: Oid,
    /// The deleted row's key or whole old row.
    pub old: OldTuple,
}

/// `T` Truncate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Truncate {
    /// Transaction id, inside a streamed transaction only.
    pub xid: Option<Xid>,
    /// Option bits: [`Truncate::CASCADE`], [`Truncate::RESTART_IDENTITY`].
    pub options: u8,
    /// Oids of the truncated relations.
    pub relation_ids: Vec<Oid>,
}

impl Truncate {
    /// Option bit for `TRUNCATE ... CASCADE`.
    pub const CASCADE: u8 = 1;
    /// Option bit for `TRUNCATE ... RESTART IDENTITY`.
    pub const RESTART_IDENTITY: u8 = 2;

    /// Whether CASCADE was given.
    pub fn cascade(&self) -> bool {
        self.options & Self::CASCADE != 0
    }

    /// Whether RESTART IDENTITY was given.
    pub fn restart_identity(&self) -> bool {
        self.options & Self::RESTART_IDENTITY != 0
    }
}

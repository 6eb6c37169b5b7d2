//! Hand-built wire bytes for every pgoutput message type (test only).
//!
//! Owns the byte fixtures the decode tests assert field by field and the error tests
//! truncate and corrupt. Invariant: fixtures are assembled here with explicit
//! big-endian pushes, never with [`super::encode`], so an encoder bug cannot hide a
//! matching decoder bug. The `F_*` constants are the field values the fixtures use.

use bytes::Bytes;

/// Big-endian byte builder for fixtures.
pub(crate) struct Wire(Vec<u8>);

impl Wire {
    /// Starts a message with its tag byte.
    pub(crate) fn tag(tag: u8) -> Self {
        Wire(vec![tag])
    }
    pub(crate) fn u8(mut self, v: u8) -> Self {
        self.0.push(v);
        self
    }
    pub(crate) fn i16(mut self, v: i16) -> Self {
        self.0.extend_from_slice(&v.to_be_bytes());
        self
    }
    pub(crate) fn i32(mut self, v: i32) -> Self {
        self.0.extend_from_slice(&v.to_be_bytes());
        self
    }
    pub(crate) fn u32(mut self, v: u32) -> Self {
        self.0.extend_from_slice(&v.to_be_bytes());
        self
    }
    pub(crate) fn i64(mut self, v: i64) -> Self {
        self.0.extend_from_slice(&v.to_be_bytes());
        self
    }
    pub(crate) fn u64(mut self, v: u64) -> Self {
        self.0.extend_from_slice(&v.to_be_bytes());
        self
    }
    pub(crate) fn raw(mut self, v: &[u8]) -> Self {
        self.0.extend_from_slice(v);
        self
    }
    /// A NUL-terminated string.
    pub(crate) fn cstr(self, s: &str) -> Self {
        self.raw(s.as_bytes()).u8(0)
    }
    pub(crate) fn bytes(self) -> Bytes {
        Bytes::from(self.0)
    }
}

pub(crate) const F_XID: u32 = 0x0102_0304;
pub(crate) const F_SUBXID: u32 = 0x0A0B_0C0D;
pub(crate) const F_LSN1: u64 = 0x0000_0016_B374_D848;
pub(crate) const F_LSN2: u64 = 0x0000_0016_B374_D900;
pub(crate) const F_TIME1: i64 = 827_000_000_123_456;
pub(crate) const F_TIME2: i64 = -5;
pub(crate) const F_RELID: u32 = 16_384;
pub(crate) const F_GID: &str = "pgoutbox-2pc-1";

pub(crate) fn begin() -> Bytes {
    Wire::tag(b'B').u64(F_LSN1).i64(F_TIME1).u32(F_XID).bytes()
}
pub(crate) fn commit() -> Bytes {
    Wire::tag(b'C')
        .u8(0)
        .u64(F_LSN1)
        .u64(F_LSN2)
        .i64(F_TIME1)
        .bytes()
}
pub(crate) fn origin() -> Bytes {
    Wire::tag(b'O').u64(F_LSN1).cstr("node_a").bytes()
}
fn message_with(xid: Option<u32>) -> Bytes {
    let w = Wire::tag(b'M');
    let w = match xid {
        Some(xid) => w.u32(xid),
        None => w,
    };
    w.u8(1)
        .u64(F_LSN2)
        .cstr("outbox")
        .i32(3)
        .raw(b"a\0z")
        .bytes()
}
pub(crate) fn message_v1() -> Bytes {
    message_with(None)
}
pub(crate) fn message_streamed() -> Bytes {
    message_with(Some(F_XID))
}
fn relation_with(xid: Option<u32>) -> Bytes {
    let w = Wire::tag(b'R');
    let w = match xid {
        Some(xid) => w.u32(xid),
        None => w,
    };
    w.u32(F_RELID)
        .cstr("public")
        .cstr("outbox")
        .u8(b'f')
        .i16(3)
        .u8(1)
        .cstr("id")
        .u32(20)
        .i32(-1)
        .u8(0)
        .cstr("payload")
        .u32(3802)
        .i32(-1)
        .u8(0)
        .cstr("topic")
        .u32(1043)
        .i32(68)
        .bytes()
}
pub(crate) fn relation_v1() -> Bytes {
    relation_with(None)
}
pub(crate) fn relation_streamed() -> Bytes {
    relation_with(Some(F_XID))
}
/// Relation in pg_catalog (empty namespace on the wire) with no columns.
pub(crate) fn relation_catalog() -> Bytes {
    Wire::tag(b'R')
        .u32(1259)
        .cstr("")
        .cstr("pg_class")
        .u8(b'n')
        .i16(0)
        .bytes()
}
pub(crate) fn type_v1() -> Bytes {
    Wire::tag(b'Y').u32(90_001).cstr("app").cstr("mood").bytes()
}
pub(crate) fn type_streamed() -> Bytes {
    Wire::tag(b'Y')
        .u32(F_XID)
        .u32(90_001)
        .cstr("")
        .cstr("int4")
        .bytes()
}
/// TupleData with all four kinds: 'n', 'u', 't' "hi", 'b' [0xde, 0xad], 't' "".
fn all_kinds(w: Wire) -> Wire {
    w.i16(5)
        .u8(b'n')
        .u8(b'u')
        .u8(b't')
        .i32(2)
        .raw(b"hi")
        .u8(b'b')
        .i32(2)
        .raw(&[0xde, 0xad])
        .u8(b't')
        .i32(0)
}
/// TupleData with one text column.
fn one_text(w: Wire, text: &str) -> Wire {
    let len = i32::try_from(text.len()).unwrap_or(i32::MAX);
    w.i16(1).u8(b't').i32(len).raw(text.as_bytes())
}
pub(crate) fn insert_v1() -> Bytes {
    all_kinds(Wire::tag(b'I').u32(F_RELID).u8(b'N')).bytes()
}
pub(crate) fn insert_streamed() -> Bytes {
    one_text(Wire::tag(b'I').u32(F_XID).u32(F_RELID).u8(b'N'), "7").bytes()
}
pub(crate) fn update_key() -> Bytes {
    let w = one_text(Wire::tag(b'U').u32(F_RELID).u8(b'K'), "1");
    all_kinds(w.u8(b'N')).bytes()
}
pub(crate) fn update_old() -> Bytes {
    let w = all_kinds(Wire::tag(b'U').u32(F_RELID).u8(b'O'));
    one_text(w.u8(b'N'), "2").bytes()
}
pub(crate) fn update_new_only() -> Bytes {
    one_text(Wire::tag(b'U').u32(F_RELID).u8(b'N'), "3").bytes()
}
pub(crate) fn update_streamed() -> Bytes {
    let w = one_text(Wire::tag(b'U').u32(F_XID).u32(F_RELID).u8(b'K'), "1");
    one_text(w.u8(b'N'), "4").bytes()
}
pub(crate) fn delete_key_v1() -> Bytes {
    one_text(Wire::tag(b'D').u32(F_RELID).u8(b'K'), "5").bytes()
}
pub(crate) fn delete_old_streamed() -> Bytes {
    all_kinds(Wire::tag(b'D').u32(F_XID).u32(F_RELID).u8(b'O')).bytes()
}
pub(crate) fn truncate_v1() -> Bytes {
    Wire::tag(b'T')
        .i32(2)
        .u8(3)
        .u32(F_RELID)
        .u32(16_390)
        .bytes()
}
pub(crate) fn truncate_streamed() -> Bytes {
    Wire::tag(b'T').u32(F_XID).i32(1).u8(0).u32(F_RELID).bytes()
}
pub(crate) fn stream_start() -> Bytes {
    Wire::tag(b'S').u32(F_XID).u8(1).bytes()
}
pub(crate) fn stream_stop() -> Bytes {
    Wire::tag(b'E').bytes()
}
pub(crate) fn stream_commit() -> Bytes {
    Wire::tag(b'c')
        .u32(F_XID)
        .u8(0)
        .u64(F_LSN1)
        .u64(F_LSN2)
        .i64(F_TIME1)
        .bytes()
}
pub(crate) fn stream_abort() -> Bytes {
    Wire::tag(b'A').u32(F_XID).u32(F_SUBXID).bytes()
}
pub(crate) fn stream_abort_parallel() -> Bytes {
    Wire::tag(b'A')
        .u32(F_XID)
        .u32(F_XID)
        .u64(F_LSN2)
        .i64(F_TIME2)
        .bytes()
}
pub(crate) fn begin_prepare() -> Bytes {
    Wire::tag(b'b')
        .u64(F_LSN1)
        .u64(F_LSN2)
        .i64(F_TIME1)
        .u32(F_XID)
        .cstr(F_GID)
        .bytes()
}
pub(crate) fn prepare() -> Bytes {
    Wire::tag(b'P')
        .u8(0)
        .u64(F_LSN1)
        .u64(F_LSN2)
        .i64(F_TIME1)
        .u32(F_XID)
        .cstr(F_GID)
        .bytes()
}
pub(crate) fn commit_prepared() -> Bytes {
    Wire::tag(b'K')
        .u8(0)
        .u64(F_LSN1)
        .u64(F_LSN2)
        .i64(F_TIME2)
        .u32(F_XID)
        .cstr(F_GID)
        .bytes()
}
pub(crate) fn rollback_prepared() -> Bytes {
    Wire::tag(b'r')
        .u8(0)
        .u64(F_LSN1)
        .u64(F_LSN2)
        .i64(F_TIME1)
        .i64(F_TIME2)
        .u32(F_XID)
        .cstr(F_GID)
        .bytes()
}
pub(crate) fn stream_prepare() -> Bytes {
    Wire::tag(b'p')
        .u8(0)
        .u64(F_LSN2)
        .u64(F_LSN1)
        .i64(F_TIME2)
        .u32(F_XID)
        .cstr("")
        .bytes()
}

/// Every fixture with the `in_streamed_txn` flag it decodes under.
pub(crate) fn all() -> Vec<(&'static str, Bytes, bool)> {
    vec![
        ("begin", begin(), false),
        ("commit", commit(), false),
        ("origin", origin(), false),
        ("message_v1", message_v1(), false),
        ("message_streamed", message_streamed(), true),
        ("relation_v1", relation_v1(), false),
        ("relation_streamed", relation_streamed(), true),
        ("relation_catalog", relation_catalog(), false),
        ("type_v1", type_v1(), false),
        ("type_streamed", type_streamed(), true),
        ("insert_v1", insert_v1(), false),
        ("insert_streamed", insert_streamed(), true),
        ("update_key", update_key(), false),
        ("update_old", update_old(), false),
        ("update_new_only", update_new_only(), false),
        ("update_streamed", update_streamed(), true),
        ("delete_key_v1", delete_key_v1(), false),
        ("delete_old_streamed", delete_old_streamed(), true),
        ("truncate_v1", truncate_v1(), false),
        ("truncate_streamed", truncate_streamed(), true),
        ("stream_start", stream_start(), false),
        ("stream_stop", stream_stop(), true),
        ("stream_commit", stream_commit(), false),
        ("stream_abort", stream_abort(), false),
        ("stream_abort_parallel", stream_abort_parallel(), false),
        ("begin_prepare", begin_prepare(), false),
        ("prepare", prepare(), false),
        ("commit_prepared", commit_prepared(), false),
        ("rollback_prepared", rollback_prepared(), false),
        ("stream_prepare", stream_prepare(), false),
    ]
}

//! Encoding of [`PgOutputMessage`]s back to pgoutput wire bytes: the exact inverse of
//! [`super::decode_message`], for tests, fixtures, benches and fuzzing (pgoutbox
//! itself never sends pgoutput).
//!
//! Invariant: for every message `m` that `decode_message(_, s)` can return,
//! `decode_message(&encode(&m, s), s) == Ok(m)`. Like PostgreSQL, the encoder writes
//! the `pg_catalog` namespace as the empty string, which the decoder expands again.

use bytes::{BufMut, Bytes};

use super::message::{
    ColumnValue, OldTuple, PgOutputMessage, Prepare, Relation, TupleData, PG_CATALOG,
};
use crate::pg::lsn::Lsn;

/// Encodes `msg` as pgoutput would send it.
///
/// `in_streamed_txn` decides whether the messages that carry an xid only inside a
/// streamed transaction (Relation, Type, Insert, Update, Delete, Truncate, Message)
/// get one: when true their `xid` is written (0, `InvalidTransactionId`, if it is
/// `None`); when false it is left out whatever it holds.
///
/// # Panics
///
/// On messages the protocol cannot express, which the decoder never produces: a
/// string containing NUL, a value or message content longer than `i32::MAX` bytes,
/// more than `u16::MAX` columns, or more than `i32::MAX` truncated relations.
pub fn encode(msg: &PgOutputMessage, in_streamed_txn: bool) -> Bytes {
    let mut w = Vec::with_capacity(64);
    w.put_u8(msg.tag());
    let xid = |w: &mut Vec<u8>, xid: Option<u32>| {
        if in_streamed_txn {
            w.put_u32(xid.unwrap_or(0));
        }
    };
    match msg {
        PgOutputMessage::Begin(m) => {
            put_lsn(&mut w, m.final_lsn);
            w.put_i64(m.commit_time);
            w.put_u32(m.xid);
        }
        PgOutputMessage::Commit(m) => {
            w.put_u8(m.flags);
            put_lsn(&mut w, m.commit_lsn);
            put_lsn(&mut w, m.end_lsn);
            w.put_i64(m.commit_time);
        }
        PgOutputMessage::Origin(m) => {
            put_lsn(&mut w, m.commit_lsn);
            put_str(&mut w, &m.name);
        }
        PgOutputMessage::Message(m) => {
            xid(&mut w, m.xid);
            w.put_u8(m.flags);
            put_lsn(&mut w, m.lsn);
            put_str(&mut w, &m.prefix);
            put_counted(&mut w, &m.content);
        }
        PgOutputMessage::Relation(m) => {
            xid(&mut w, m.xid);
            put_relation(&mut w, m);
        }
        PgOutputMessage::Type(m) => {
            xid(&mut w, m.xid);
            w.put_u32(m.id);
            put_namespace(&mut w, &m.namespace);
            put_str(&mut w, &m.name);
        }
        PgOutputMessage::Insert(m) => {
            xid(&mut w, m.xid);
            w.put_u32(m.relation_id);
            w.put_u8(b'N');
            put_tuple(&mut w, &m.tuple);
        }
        PgOutputMessage::Update(m) => {
            xid(&mut w, m.xid);
            w.put_u32(m.relation_id);
            if let Some(old) = &m.old {
                put_old(&mut w, old);
            }
            w.put_u8(b'N');
            put_tuple(&mut w, &m.new);
        }
        PgOutputMessage::Delete(m) => {
            xid(&mut w, m.xid);
            w.put_u32(m.relation_id);
            put_old(&mut w, &m.old);
        }
        PgOutputMessage::Truncate(m) => {
            xid(&mut w, m.xid);
            let count = i32::try_from(m.relation_ids.len()).expect("too many relations");
            w.put_i32(count);
            w.put_u8(m.options);
            for &id in &m.relation_ids {
                w.put_u32(id);
            }
        }
        PgOutputMessage::StreamStart(m) => {
            w.put_u32(m.xid);
            w.put_u8(u8::from(m.first_segment));
        }
        PgOutputMessage::StreamStop => {}
        PgOutputMessage::StreamCommit(m) => {
            w.put_u32(m.xid);
            w.put_u8(m.flags);
            put_lsn(&mut w, m.commit_lsn);
            put_lsn(&mut w, m.end_lsn);
            w.put_i64(m.commit_time);
        }
        PgOutputMessage::StreamAbort(m) => {
            w.put_u32(m.xid);
            w.put_u32(m.subxid);
            if let Some(abort) = &m.abort {
                put_lsn(&mut w, abort.abort_lsn);
                w.put_i64(abort.abort_time);
            }
        }
        PgOutputMessage::BeginPrepare(m) => {
            put_lsn(&mut w, m.prepare_lsn);
            put_lsn(&mut w, m.end_lsn);
            w.put_i64(m.prepare_time);
            w.put_u32(m.xid);
            put_str(&mut w, &m.gid);
        }
        PgOutputMessage::Prepare(m) | PgOutputMessage::StreamPrepare(m) => put_prepare(&mut w, m),
        PgOutputMessage::CommitPrepared(m) => {
            w.put_u8(m.flags);
            put_lsn(&mut w, m.commit_lsn);
            put_lsn(&mut w, m.end_lsn);
            w.put_i64(m.commit_time);
            w.put_u32(m.xid);
            put_str(&mut w, &m.gid);
        }
        PgOutputMessage::RollbackPrepared(m) => {
            w.put_u8(m.flags);
            put_lsn(&mut w, m.prepare_end_lsn);
            put_lsn(&mut w, m.rollback_end_lsn);
            w.put_i64(m.prepare_time);
            w.put_i64(m.rollback_time);
            w.put_u32(m.xid);
            put_str(&mut w, &m.gid);
        }
    }
    Bytes::from(w)
}

fn put_lsn(w: &mut Vec<u8>, lsn: Lsn) {
    w.put_u64(lsn.0);
}

/// A NUL-terminated string.
fn put_str(w: &mut Vec<u8>, s: &str) {
    assert!(
        !s.contains('\0'),
        "pgoutput strings cannot contain NUL: {s:?}"
    );
    w.put_slice(s.as_bytes());
    w.put_u8(0);
}

fn put_namespace(w: &mut Vec<u8>, namespace: &str) {
    put_str(
        w,
        if namespace == PG_CATALOG {
            ""
        } else {
            namespace
        },
    );
}

/// An Int32 length followed by the bytes.
fn put_counted(w: &mut Vec<u8>, bytes: &[u8]) {
    let len = i32::try_from(bytes.len()).expect("value longer than i32::MAX bytes");
    w.put_i32(len);
    w.put_slice(bytes);
}

fn put_column_count(w: &mut Vec<u8>, count: usize) {
    w.put_u16(u16::try_from(count).expect("more than u16::MAX columns"));
}

fn put_relation(w: &mut Vec<u8>, m: &Relation) {
    w.put_u32(m.id);
    put_namespace(w, &m.namespace);
    put_str(w, &m.name);
    w.put_u8(m.replica_identity.to_byte());
    put_column_count(w, m.columns.len());
    for column in &m.columns {
        w.put_u8(column.flags);
        put_str(w, &column.name);
        w.put_u32(column.type_oid);
        w.put_i32(column.type_modifier);
    }
}

fn put_prepare(w: &mut Vec<u8>, m: &Prepare) {
    w.put_u8(m.flags);
    put_lsn(w, m.prepare_lsn);
    put_lsn(w, m.end_lsn);
    w.put_i64(m.prepare_time);
    w.put_u32(m.xid);
    put_str(w, &m.gid);
}

fn put_old(w: &mut Vec<u8>, old: &OldTuple) {
    match old {
        OldTuple::Key(tuple) => {
            w.put_u8(b'K');
            put_tuple(w, tuple);
        }
        OldTuple::Full(tuple) => {
            w.put_u8(b'O');
            put_tuple(w, tuple);
        }
    }
}

fn put_tuple(w: &mut Vec<u8>, tuple: &TupleData) {
    put_column_count(w, tuple.0.len());
    for value in &tuple.0 {
        match value {
            ColumnValue::Null => w.put_u8(b'n'),
            ColumnValue::UnchangedToast => w.put_u8(b'u'),
            ColumnValue::Text(bytes) => {
                w.put_u8(b't');
                put_counted(w, bytes);
            }
            ColumnValue::Binary(bytes) => {
                w.put_u8(b'b');
                put_counted(w, bytes);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::decode_message;
    use super::super::fixtures as fx;
    use super::super::strategies;
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn re_encoding_a_fixture_gives_its_bytes() {
        for (name, data, in_stream) in fx::all() {
            let msg = decode_message(&data, in_stream).unwrap();
            assert_eq!(encode(&msg, in_stream), data, "fixture {name}");
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        #[test]
        fn round_trip_outside_stream(msg in strategies::message(false)) {
            let bytes = encode(&msg, false);
            prop_assert_eq!(decode_message(&bytes, false), Ok(msg));
        }

        #[test]
        fn round_trip_inside_stream(msg in strategies::message(true)) {
            let bytes = encode(&msg, true);
            prop_assert_eq!(decode_message(&bytes, true), Ok(msg));
        }

        #[test]
        fn truncated_encodings_never_panic(
            msg in strategies::message(true),
            cut in any::<prop::sample::Index>(),
        ) {
            let bytes = encode(&msg, true);
            let cut = cut.index(bytes.len());
            let _ = decode_message(&bytes.slice(..cut), true);
            let _ = decode_message(&bytes.slice(..cut), false);
        }
    }
}

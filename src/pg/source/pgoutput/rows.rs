//! Decoding of the schema and row messages (Relation, Type, Insert, Update, Delete,
//! Truncate) and of TupleData, the hot path of a replication stream.
//!
//! Invariants: column values are [`bytes::Bytes`] slices of the input (one refcount
//! bump, no allocation, no UTF-8 check: text values are whatever the type's output
//! function wrote); the only per-row allocation is the `Vec` of values; a count read
//! from the wire never reserves more than the bytes left could fill, so a corrupt
//! count cannot make the relay allocate.

use super::decode::streamed_xid;
use super::error::DecodeError;
use super::message::{
    ColumnValue, Delete, Insert, OldTuple, Relation, RelationColumn, ReplicaIdentity, Truncate,
    TupleData, TypeMessage, Update, PG_CATALOG,
};
use super::reader::Reader;

/// Smallest encoding of a Relation column: flags, empty name's NUL, type oid, typmod.
const MIN_RELATION_COLUMN_LEN: usize = 1 + 1 + 4 + 4;

/// Tuple-announcing bytes of Insert, Update and Delete.
const NEW_TUPLE: u8 = b'N';
const OLD_KEY: u8 = b'K';
const OLD_TUPLE: u8 = b'O';

/// Reads a namespace, expanding the empty string PostgreSQL sends for `pg_catalog`.
fn namespace(r: &mut Reader<'_>) -> Result<String, DecodeError> {
    let name = r.string("namespace")?;
    Ok(if name.is_empty() {
        PG_CATALOG.to_owned()
    } else {
        name
    })
}

pub(crate) fn relation(r: &mut Reader<'_>, in_streamed_txn: bool) -> Result<Relation, DecodeError> {
    let xid = streamed_xid(r, in_streamed_txn)?;
    let id = r.u32("relation oid")?;
    let namespace = namespace(r)?;
    let name = r.string("relation name")?;
    let replica_identity = ReplicaIdentity::from_byte(r.u8("replica identity")?);
    let ncols = usize::from(r.u16("column count")?);
    let mut columns = Vec::with_capacity(ncols.min(r.remaining() / MIN_RELATION_COLUMN_LEN));
    for _ in 0..ncols {
        columns.push(RelationColumn {
            flags: r.u8("column flags")?,
            name: r.string("column name")?,
            type_oid: r.u32("column type oid")?,
            type_modifier: r.i32("column type modifier")?,
        });
    }
    Ok(Relation {
        xid,
        id,
        namespace,
        name,
        replica_identity,
        columns,
    })
}

pub(crate) fn type_message(
    r: &mut Reader<'_>,
    in_streamed_txn: bool,
) -> Result<TypeMessage, DecodeError> {
    Ok(TypeMessage {
        xid: streamed_xid(r, in_streamed_txn)?,
        id: r.u32("type oid")?,
        namespace: namespace(r)?,
        name: r.string("type name")?,
    })
}

pub(crate) fn insert(r: &mut Reader<'_>, in_streamed_txn: bool) -> Result<Insert, DecodeError> {
    let xid = streamed_xid(r, in_streamed_txn)?;
    let relation_id = r.u32("relation oid")?;
    let tag = r.u8("new tuple tag")?;
    expect_tag(r, tag, NEW_TUPLE, "'N'")?;
    Ok(Insert {
        xid,
        relation_id,
        tuple: tuple_data(r)?,
    })
}

pub(crate) fn update(r: &mut Reader<'_>, in_streamed_txn: bool) -> Result<Update, DecodeError> {
    let xid = streamed_xid(r, in_streamed_txn)?;
    let relation_id = r.u32("relation oid")?;
    let (old, new_tag) = match r.u8("tuple tag")? {
        OLD_KEY => (Some(OldTuple::Key(tuple_data(r)?)), r.u8("new tuple tag")?),
        OLD_TUPLE => (Some(OldTuple::Full(tuple_data(r)?)), r.u8("new tuple tag")?),
        NEW_TUPLE => (None, NEW_TUPLE),
        other => {
            return Err(DecodeError::UnexpectedTupleTag {
                message: r.message(),
                tag: other,
                expected: "'K', 'O' or 'N'",
            })
        }
    };
    expect_tag(r, new_tag, NEW_TUPLE, "'N'")?;
    Ok(Update {
        xid,
        relation_id,
        old,
        new: tuple_data(r)?,
    })
}

pub(crate) fn delete(r: &mut Reader<'_>, in_streamed_txn: bool) -> Result<Delete, DecodeError> {
    let xid = streamed_xid(r, in_streamed_txn)?;
    let relation_id = r.u32("relation oid")?;
    let old = match r.u8("old tuple tag")? {
        OLD_KEY => OldTuple::Key(tuple_data(r)?),
        OLD_TUPLE => OldTuple::Full(tuple_data(r)?),
        other => {
            return Err(DecodeError::UnexpectedTupleTag {
                message: r.message(),
                tag: other,
                expected: "'K' or 'O'",
            })
        }
    };
    Ok(Delete {
        xid,
        relation_id,
        old,
    })
}

pub(crate) fn truncate(r: &mut Reader<'_>, in_streamed_txn: bool) -> Result<Truncate, DecodeError> {
    let xid = streamed_xid(r, in_streamed_txn)?;
    let count = r.len_i32("relation count")?;
    let options = r.u8("options")?;
    // Check the whole oid array up front so the Vec is sized by honest data only.
    let needed = count.saturating_mul(4);
    if needed > r.remaining() {
        return Err(DecodeError::Truncated {
            message: r.message(),
            what: "relation oids",
            needed,
            remaining: r.remaining(),
        });
    }
    let mut relation_ids = Vec::with_capacity(count);
    for _ in 0..count {
        relation_ids.push(r.u32("relation oid")?);
    }
    Ok(Truncate {
        xid,
        options,
        relation_ids,
    })
}

fn expect_tag(
    r: &Reader<'_>,
    tag: u8,
    wanted: u8,
    expected: &'static str,
) -> Result<(), DecodeError> {
    if tag == wanted {
        Ok(())
    } else {
        Err(DecodeError::UnexpectedTupleTag {
            message: r.message(),
            tag,
            expected,
        })
    }
}

/// TupleData: Int16 column count, then per column a kind byte and, for `t` and `b`,
/// an Int32 length and that many bytes.
pub(crate) fn tuple_data(r: &mut Reader<'_>) -> Result<TupleData, DecodeError> {
    let ncols = usize::from(r.u16("tuple column count")?);
    // Each column takes at least its kind byte.
    let mut values = Vec::with_capacity(ncols.min(r.remaining()));
    for column in 0..ncols {
        let value = match r.u8("tuple column kind")? {
            b'n' => ColumnValue::Null,
            b'u' => ColumnValue::UnchangedToast,
            b't' => {
                let len = r.len_i32("text value length")?;
                ColumnValue::Text(r.bytes(len, "text value")?)
            }
            b'b' => {
                let len = r.len_i32("binary value length")?;
                ColumnValue::Binary(r.bytes(len, "binary value")?)
            }
            kind => {
                return Err(DecodeError::UnknownColumnKind {
                    message: r.message(),
                    column,
                    kind,
                })
            }
        };
        values.push(value);
    }
    Ok(TupleData(values))
}

#[cfg(test)]
mod tests {
    use super::super::decode_message;
    use super::super::fixtures::{self as fx, Wire};
    use super::super::message::*;
    use super::*;
    use bytes::Bytes;

    fn decode(data: Bytes, in_stream: bool) -> PgOutputMessage {
        decode_message(&data, in_stream).unwrap()
    }

    fn text(s: &str) -> ColumnValue {
        ColumnValue::Text(Bytes::copy_from_slice(s.as_bytes()))
    }

    /// The TupleData `fixtures::all_kinds` builds.
    fn all_kinds() -> TupleData {
        TupleData(vec![
            ColumnValue::Null,
            ColumnValue::UnchangedToast,
            text("hi"),
            ColumnValue::Binary(Bytes::from_static(&[0xde, 0xad])),
            text(""),
        ])
    }

    fn one_text(s: &str) -> TupleData {
        TupleData(vec![text(s)])
    }

    #[test]
    fn relation_v1_and_streamed() {
        for (data, in_stream, xid) in [
            (fx::relation_v1(), false, None),
            (fx::relation_streamed(), true, Some(fx::F_XID)),
        ] {
            let PgOutputMessage::Relation(rel) = decode(data, in_stream) else {
                panic!("expected Relation");
            };
            assert_eq!(rel.xid, xid);
            assert_eq!(rel.id, fx::F_RELID);
            assert_eq!(rel.namespace, "public");
            assert_eq!(rel.name, "outbox");
            assert_eq!(rel.replica_identity, ReplicaIdentity::Full);
            let cols: Vec<_> = rel
                .columns
                .iter()
                .map(|c| {
                    (
                        c.flags,
                        c.name.as_str(),
                        c.type_oid,
                        c.type_modifier,
                        c.is_key(),
                    )
                })
                .collect();
            assert_eq!(
                cols,
                [
                    (1, "id", 20, -1, true),
                    (0, "payload", 3802, -1, false),
                    (0, "topic", 1043, 68, false),
                ]
            );
            assert_eq!(rel.column_index("topic"), Some(2));
        }
    }

    #[test]
    fn empty_namespace_means_pg_catalog() {
        let PgOutputMessage::Relation(rel) = decode(fx::relation_catalog(), false) else {
            panic!("expected Relation");
        };
        assert_eq!(rel.namespace, "pg_catalog");
        assert_eq!(rel.name, "pg_class");
        assert_eq!(rel.replica_identity, ReplicaIdentity::Nothing);
        assert!(rel.columns.is_empty());
    }

    #[test]
    fn type_v1_and_streamed() {
        assert_eq!(
            decode(fx::type_v1(), false),
            PgOutputMessage::Type(TypeMessage {
                xid: None,
                id: 90_001,
                namespace: "app".into(),
                name: "mood".into(),
            })
        );
        assert_eq!(
            decode(fx::type_streamed(), true),
            PgOutputMessage::Type(TypeMessage {
                xid: Some(fx::F_XID),
                id: 90_001,
                namespace: "pg_catalog".into(),
                name: "int4".into(),
            })
        );
    }

    #[test]
    fn insert_with_all_four_column_kinds() {
        let data = fx::insert_v1();
        let PgOutputMessage::Insert(ins) = decode(data.clone(), false) else {
            panic!("expected Insert");
        };
        assert_eq!(ins.xid, None);
        assert_eq!(ins.relation_id, fx::F_RELID);
        assert_eq!(ins.tuple, all_kinds());
        // Zero-copy: text and binary values point into the input buffer.
        let range = data.as_ptr_range();
        for value in ins.tuple.columns() {
            if let ColumnValue::Text(b) | ColumnValue::Binary(b) = value {
                if !b.is_empty() {
                    assert!(range.contains(&b.as_ptr()));
                }
            }
        }
    }

    #[test]
    fn insert_streamed() {
        assert_eq!(
            decode(fx::insert_streamed(), true),
            PgOutputMessage::Insert(Insert {
                xid: Some(fx::F_XID),
                relation_id: fx::F_RELID,
                tuple: one_text("7"),
            })
        );
    }

    #[test]
    fn update_with_key_old_and_new_only() {
        let expect = |xid, old, new| {
            PgOutputMessage::Update(Update {
                xid,
                relation_id: fx::F_RELID,
                old,
                new,
            })
        };
        assert_eq!(
            decode(fx::update_key(), false),
            expect(None, Some(OldTuple::Key(one_text("1"))), all_kinds())
        );
        assert_eq!(
            decode(fx::update_old(), false),
            expect(None, Some(OldTuple::Full(all_kinds())), one_text("2"))
        );
        assert_eq!(
            decode(fx::update_new_only(), false),
            expect(None, None, one_text("3"))
        );
        assert_eq!(
            decode(fx::update_streamed(), true),
            expect(
                Some(fx::F_XID),
                Some(OldTuple::Key(one_text("1"))),
                one_text("4")
            )
        );
    }

    #[test]
    fn delete_with_key_and_old() {
        assert_eq!(
            decode(fx::delete_key_v1(), false),
            PgOutputMessage::Delete(Delete {
                xid: None,
                relation_id: fx::F_RELID,
                old: OldTuple::Key(one_text("5")),
            })
        );
        let PgOutputMessage::Delete(del) = decode(fx::delete_old_streamed(), true) else {
            panic!("expected Delete");
        };
        assert_eq!(del.xid, Some(fx::F_XID));
        assert_eq!(del.old, OldTuple::Full(all_kinds()));
        assert_eq!(del.old.tuple(), &all_kinds());
    }

    #[test]
    fn truncate_v1_and_streamed() {
        let PgOutputMessage::Truncate(t) = decode(fx::truncate_v1(), false) else {
            panic!("expected Truncate");
        };
        assert_eq!(t.xid, None);
        assert_eq!(t.options, 3);
        assert!(t.cascade() && t.restart_identity());
        assert_eq!(t.relation_ids, [fx::F_RELID, 16_390]);

        let PgOutputMessage::Truncate(t) = decode(fx::truncate_streamed(), true) else {
            panic!("expected Truncate");
        };
        assert_eq!(t.xid, Some(fx::F_XID));
        assert!(!t.cascade() && !t.restart_identity());
        assert_eq!(t.relation_ids, [fx::F_RELID]);
    }

    #[test]
    fn unknown_column_kind() {
        let data = Wire::tag(b'I')
            .u32(1)
            .u8(b'N')
            .i16(2)
            .u8(b'n')
            .u8(b'x')
            .bytes();
        assert_eq!(
            decode_message(&data, false),
            Err(DecodeError::UnknownColumnKind {
                message: "Insert",
                column: 1,
                kind: b'x'
            })
        );
    }

    #[test]
    fn unknown_tuple_tags() {
        let cases = [
            (Wire::tag(b'I').u32(1).u8(b'K').i16(0).bytes(), "Insert"),
            (Wire::tag(b'U').u32(1).u8(b'X').i16(0).bytes(), "Update"),
            // Old key must be followed by 'N', not another old tuple.
            (
                Wire::tag(b'U')
                    .u32(1)
                    .u8(b'K')
                    .i16(0)
                    .u8(b'O')
                    .i16(0)
                    .bytes(),
                "Update",
            ),
            (Wire::tag(b'D').u32(1).u8(b'N').i16(0).bytes(), "Delete"),
        ];
        for (data, name) in cases {
            assert!(
                matches!(
                    decode_message(&data, false),
                    Err(DecodeError::UnexpectedTupleTag { message, .. }) if message == name
                ),
                "{name}: {data:?}"
            );
        }
    }

    #[test]
    fn negative_lengths() {
        for kind in [b't', b'b'] {
            let data = Wire::tag(b'I')
                .u32(1)
                .u8(b'N')
                .i16(1)
                .u8(kind)
                .i32(-1)
                .bytes();
            assert!(matches!(
                decode_message(&data, false),
                Err(DecodeError::NegativeLength { value: -1, .. })
            ));
        }
        let data = Wire::tag(b'T').i32(i32::MIN).u8(0).bytes();
        assert!(matches!(
            decode_message(&data, false),
            Err(DecodeError::NegativeLength {
                what: "relation count",
                ..
            })
        ));
    }

    #[test]
    fn huge_counts_fail_without_allocating() {
        // Column and relation counts far beyond the bytes present.
        let cases = [
            Wire::tag(b'I').u32(1).u8(b'N').i16(-1).bytes(),
            Wire::tag(b'R')
                .u32(1)
                .cstr("s")
                .cstr("t")
                .u8(b'd')
                .i16(-1)
                .bytes(),
            Wire::tag(b'T').i32(i32::MAX).u8(0).u32(1).bytes(),
            Wire::tag(b'M').u8(0).u64(1).cstr("p").i32(i32::MAX).bytes(),
        ];
        for data in cases {
            assert!(
                matches!(
                    decode_message(&data, false),
                    Err(DecodeError::Truncated { .. })
                ),
                "{data:?}"
            );
        }
    }

    #[test]
    fn invalid_utf8_in_names() {
        let bad = [0xc3, 0x28];
        let cases = [
            Wire::tag(b'R')
                .u32(1)
                .raw(&bad)
                .u8(0)
                .cstr("t")
                .u8(b'd')
                .i16(0)
                .bytes(),
            Wire::tag(b'R')
                .u32(1)
                .cstr("s")
                .raw(&bad)
                .u8(0)
                .u8(b'd')
                .i16(0)
                .bytes(),
            Wire::tag(b'R')
                .u32(1)
                .cstr("s")
                .cstr("t")
                .u8(b'd')
                .i16(1)
                .u8(0)
                .raw(&bad)
                .u8(0)
                .u32(25)
                .i32(-1)
                .bytes(),
            Wire::tag(b'Y').u32(1).cstr("s").raw(&bad).u8(0).bytes(),
        ];
        for data in cases {
            assert!(
                matches!(
                    decode_message(&data, false),
                    Err(DecodeError::InvalidUtf8 { .. })
                ),
                "{data:?}"
            );
        }
    }

    #[test]
    fn unknown_replica_identity_is_kept() {
        let data = Wire::tag(b'R')
            .u32(1)
            .cstr("s")
            .cstr("t")
            .u8(b'z')
            .i16(0)
            .bytes();
        let PgOutputMessage::Relation(rel) = decode(data, false) else {
            panic!("expected Relation");
        };
        assert_eq!(rel.replica_identity, ReplicaIdentity::Other(b'z'));
        assert_eq!(rel.replica_identity.to_byte(), b'z');
    }

    #[test]
    fn tuple_reader_stops_at_its_end() {
        // Two tuples back to back: the first read must not swallow the second.
        let data = Wire::tag(0).i16(1).u8(b'n').i16(0).bytes();
        let mut r = Reader::new(&data, 1, "Test");
        assert_eq!(
            tuple_data(&mut r).unwrap(),
            TupleData(vec![ColumnValue::Null])
        );
        assert_eq!(tuple_data(&mut r).unwrap(), TupleData(vec![]));
        assert!(r.finish().is_ok());
    }
}

//! Proptest strategies for every [`PgOutputMessage`] variant (test only).
//!
//! Owns the generators the round-trip and robustness properties use. Invariant: every
//! generated message is one the decoder could return under the given
//! `in_streamed_txn`: xids present exactly inside a streamed transaction, strings
//! without NUL, namespaces non-empty, [`ReplicaIdentity`] normalised via `from_byte`.

use bytes::Bytes;
use proptest::prelude::*;
use proptest::strategy::Union;

use super::message::{
    Begin, BeginPrepare, ColumnValue, Commit, CommitPrepared, Delete, Insert, LogicalMessage,
    OldTuple, Origin, PgOutputMessage, Prepare, Relation, RelationColumn, ReplicaIdentity,
    RollbackPrepared, StreamAbort, StreamAbortInfo, StreamCommit, StreamStart, Truncate, TupleData,
    TypeMessage, Update,
};
use crate::pg::lsn::Lsn;

fn lsn() -> impl Strategy<Value = Lsn> {
    any::<u64>().prop_map(Lsn)
}

/// Any UTF-8 string without NUL, including non-ASCII.
fn name() -> impl Strategy<Value = String> {
    "[^\u{0}]{0,12}"
}

fn namespace() -> impl Strategy<Value = String> {
    prop_oneof![Just("pg_catalog".to_owned()), "[^\u{0}]{1,12}"]
}

fn payload() -> impl Strategy<Value = Bytes> {
    prop::collection::vec(any::<u8>(), 0..24).prop_map(Bytes::from)
}

fn xid(in_stream: bool) -> BoxedStrategy<Option<u32>> {
    if in_stream {
        any::<u32>().prop_map(Some).boxed()
    } else {
        Just(None).boxed()
    }
}

fn column_value() -> impl Strategy<Value = ColumnValue> {
    prop_oneof![
        Just(ColumnValue::Null),
        Just(ColumnValue::UnchangedToast),
        payload().prop_map(ColumnValue::Text),
        payload().prop_map(ColumnValue::Binary),
    ]
}

fn tuple() -> impl Strategy<Value = TupleData> {
    prop::collection::vec(column_value(), 0..6).prop_map(TupleData)
}

fn old_tuple() -> impl Strategy<Value = OldTuple> {
    prop_oneof![
        tuple().prop_map(OldTuple::Key),
        tuple().prop_map(OldTuple::Full)
    ]
}

fn relation(in_stream: bool) -> impl Strategy<Value = Relation> {
    let column = (any::<u8>(), name(), any::<u32>(), any::<i32>()).prop_map(
        |(flags, name, type_oid, type_modifier)| RelationColumn {
            flags,
            name,
            type_oid,
            type_modifier,
        },
    );
    (
        xid(in_stream),
        any::<u32>(),
        namespace(),
        name(),
        any::<u8>(),
        prop::collection::vec(column, 0..5),
    )
        .prop_map(|(xid, id, namespace, name, ident, columns)| Relation {
            xid,
            id,
            namespace,
            name,
            replica_identity: ReplicaIdentity::from_byte(ident),
            columns,
        })
}

fn prepare() -> impl Strategy<Value = Prepare> {
    (
        any::<u8>(),
        lsn(),
        lsn(),
        any::<i64>(),
        any::<u32>(),
        name(),
    )
        .prop_map(
            |(flags, prepare_lsn, end_lsn, prepare_time, xid, gid)| Prepare {
                flags,
                prepare_lsn,
                end_lsn,
                prepare_time,
                xid,
                gid,
            },
        )
}

/// Any message that `decode_message(_, in_stream)` could return.
pub(crate) fn message(in_stream: bool) -> impl Strategy<Value = PgOutputMessage> {
    use PgOutputMessage as M;
    let t = any::<i64>;
    Union::new(vec![
        (lsn(), t(), any::<u32>())
            .prop_map(|(final_lsn, commit_time, xid)| {
                M::Begin(Begin {
                    final_lsn,
                    commit_time,
                    xid,
                })
            })
            .boxed(),
        (any::<u8>(), lsn(), lsn(), t())
            .prop_map(|(flags, commit_lsn, end_lsn, commit_time)| {
                M::Commit(Commit {
                    flags,
                    commit_lsn,
                    end_lsn,
                    commit_time,
                })
            })
            .boxed(),
        (lsn(), name())
            .prop_map(|(commit_lsn, name)| M::Origin(Origin { commit_lsn, name }))
            .boxed(),
        (xid(in_stream), any::<u8>(), lsn(), name(), payload())
            .prop_map(|(xid, flags, lsn, prefix, content)| {
                M::Message(LogicalMessage {
                    xid,
                    flags,
                    lsn,
                    prefix,
                    content,
                })
            })
            .boxed(),
        relation(in_stream).prop_map(M::Relation).boxed(),
        (xid(in_stream), any::<u32>(), namespace(), name())
            .prop_map(|(xid, id, namespace, name)| {
                M::Type(TypeMessage {
                    xid,
                    id,
                    namespace,
                    name,
                })
            })
            .boxed(),
        (xid(in_stream), any::<u32>(), tuple())
            .prop_map(|(xid, relation_id, tuple)| {
                M::Insert(Insert {
                    xid,
                    relation_id,
                    tuple,
                })
            })
            .boxed(),
        (
            xid(in_stream),
            any::<u32>(),
            prop::option::of(old_tuple()),
            tuple(),
        )
            .prop_map(|(xid, relation_id, old, new)| {
                M::Update(Update {
                    xid,
                    relation_id,
                    old,
                    new,
                })
            })
            .boxed(),
        (xid(in_stream), any::<u32>(), old_tuple())
            .prop_map(|(xid, relation_id, old)| {
                M::Delete(Delete {
                    xid,
                    relation_id,
                    old,
                })
            })
            .boxed(),
        (
            xid(in_stream),
            any::<u8>(),
            prop::collection::vec(any::<u32>(), 0..6),
        )
            .prop_map(|(xid, options, relation_ids)| {
                M::Truncate(Truncate {
                    xid,
                    options,
                    relation_ids,
                })
            })
            .boxed(),
        (any::<u32>(), any::<bool>())
            .prop_map(|(xid, first_segment)| M::StreamStart(StreamStart { xid, first_segment }))
            .boxed(),
        Just(M::StreamStop).boxed(),
        (any::<u32>(), any::<u8>(), lsn(), lsn(), t())
            .prop_map(|(xid, flags, commit_lsn, end_lsn, commit_time)| {
                M::StreamCommit(StreamCommit {
                    xid,
                    flags,
                    commit_lsn,
                    end_lsn,
                    commit_time,
                })
            })
            .boxed(),
        (any::<u32>(), any::<u32>(), prop::option::of((lsn(), t())))
            .prop_map(|(xid, subxid, abort)| {
                let abort = abort.map(|(abort_lsn, abort_time)| StreamAbortInfo {
                    abort_lsn,
                    abort_time,
                });
                M::StreamAbort(StreamAbort { xid, subxid, abort })
            })
            .boxed(),
        (lsn(), lsn(), t(), any::<u32>(), name())
            .prop_map(|(prepare_lsn, end_lsn, prepare_time, xid, gid)| {
                M::BeginPrepare(BeginPrepare {
                    prepare_lsn,
                    end_lsn,
                    prepare_time,
                    xid,
                    gid,
                })
            })
            .boxed(),
        prepare().prop_map(M::Prepare).boxed(),
        (any::<u8>(), lsn(), lsn(), t(), any::<u32>(), name())
            .prop_map(|(flags, commit_lsn, end_lsn, commit_time, xid, gid)| {
                M::CommitPrepared(CommitPrepared {
                    flags,
                    commit_lsn,
                    end_lsn,
                    commit_time,
                    xid,
                    gid,
                })
            })
            .boxed(),
        (any::<u8>(), lsn(), lsn(), t(), t(), any::<u32>(), name())
            .prop_map(
                |(
                    flags,
                    prepare_end_lsn,
                    rollback_end_lsn,
                    prepare_time,
                    rollback_time,
                    xid,
                    gid,
                )| {
                    M::RollbackPrepared(RollbackPrepared {
                        flags,
                        prepare_end_lsn,
                        rollback_end_lsn,
                        prepare_time,
                        rollback_time,
                        xid,
                        gid,
                    })
                },
            )
            .boxed(),
        prepare().prop_map(M::StreamPrepare).boxed(),
    ])
}

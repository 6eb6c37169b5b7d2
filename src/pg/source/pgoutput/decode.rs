//! Stateless decoding of one pgoutput message: tag dispatch and the transaction
//! control messages (Begin, Commit, Origin, Message, the Stream and two-phase ones).
//!
//! Row and schema messages live in [`super::rows`]. Invariants: a decode consumes the
//! whole input or fails (trailing bytes are an error, since they mean the client and
//! server disagree about the protocol version or options); no input panics; values are
//! zero-copy slices of the input.

use bytes::Bytes;

use super::error::DecodeError;
use super::message::{
    Begin, BeginPrepare, Commit, CommitPrepared, LogicalMessage, Origin, PgOutputMessage, Prepare,
    RollbackPrepared, StreamAbort, StreamAbortInfo, StreamCommit, StreamStart,
};
use super::reader::Reader;
use super::rows;

/// Length of the v4 parallel-streaming tail of Stream Abort: abort_lsn + abort_time.
const STREAM_ABORT_INFO_LEN: usize = 16;

/// Decodes one pgoutput message (an XLogData payload).
///
/// `in_streamed_txn` says whether the message sits between Stream Start and Stream
/// Stop; only then do Relation, Type, Insert, Update, Delete, Truncate and Message
/// start with an xid (protocol version 2 and later). The message itself does not say.
/// [`super::Decoder`] tracks this for a whole stream.
pub fn decode_message(data: &Bytes, in_streamed_txn: bool) -> Result<PgOutputMessage, DecodeError> {
    let Some(&tag) = data.first() else {
        return Err(DecodeError::Empty);
    };
    let name = message_name(tag).ok_or(DecodeError::UnknownTag(tag))?;
    let mut r = Reader::new(data, 1, name);
    let msg = match tag {
        b'B' => PgOutputMessage::Begin(begin(&mut r)?),
        b'C' => PgOutputMessage::Commit(commit(&mut r)?),
        b'O' => PgOutputMessage::Origin(origin(&mut r)?),
        b'M' => PgOutputMessage::Message(logical_message(&mut r, in_streamed_txn)?),
        b'R' => PgOutputMessage::Relation(rows::relation(&mut r, in_streamed_txn)?),
        b'Y' => PgOutputMessage::Type(rows::type_message(&mut r, in_streamed_txn)?),
        b'I' => PgOutputMessage::Insert(rows::insert(&mut r, in_streamed_txn)?),
        b'U' => PgOutputMessage::Update(rows::update(&mut r, in_streamed_txn)?),
        b'D' => PgOutputMessage::Delete(rows::delete(&mut r, in_streamed_txn)?),
        b'T' => PgOutputMessage::Truncate(rows::truncate(&mut r, in_streamed_txn)?),
        b'S' => PgOutputMessage::StreamStart(stream_start(&mut r)?),
        b'E' => PgOutputMessage::StreamStop,
        b'c' => PgOutputMessage::StreamCommit(stream_commit(&mut r)?),
        b'A' => PgOutputMessage::StreamAbort(stream_abort(&mut r)?),
        b'b' => PgOutputMessage::BeginPrepare(begin_prepare(&mut r)?),
        b'P' => PgOutputMessage::Prepare(prepare(&mut r)?),
        b'K' => PgOutputMessage::CommitPrepared(commit_prepared(&mut r)?),
        b'r' => PgOutputMessage::RollbackPrepared(rollback_prepared(&mut r)?),
        b'p' => PgOutputMessage::StreamPrepare(prepare(&mut r)?),
        other => return Err(DecodeError::UnknownTag(other)),
    };
    r.finish()?;
    Ok(msg)
}

/// The documented name of the message a tag starts, for error messages.
fn message_name(tag: u8) -> Option<&'static str> {
    Some(match tag {
        b'B' => "Begin",
        b'C' => "Commit",
        b'O' => "Origin",
        b'M' => "Message",
        b'R' => "Relation",
        b'Y' => "Type",
        b'I' => "Insert",
        b'U' => "Update",
        b'D' => "Delete",
        b'T' => "Truncate",
        b'S' => "Stream Start",
        b'E' => "Stream Stop",
        b'c' => "Stream Commit",
        b'A' => "Stream Abort",
        b'b' => "Begin Prepare",
        b'P' => "Prepare",
        b'K' => "Commit Prepared",
        b'r' => "Rollback Prepared",
        b'p' => "Stream Prepare",
        _ => return None,
    })
}

/// The xid prefix of a message that has one only inside a streamed transaction.
pub(crate) fn streamed_xid(
    r: &mut Reader<'_>,
    in_streamed_txn: bool,
) -> Result<Option<u32>, DecodeError> {
    if in_streamed_txn {
        r.u32("xid").map(Some)
    } else {
        Ok(None)
    }
}

fn begin(r: &mut Reader<'_>) -> Result<Begin, DecodeError> {
    Ok(Begin {
        final_lsn: r.lsn("final lsn")?,
        commit_time: r.i64("commit timestamp")?,
        xid: r.u32("xid")?,
    })
}

fn commit(r: &mut Reader<'_>) -> Result<Commit, DecodeError> {
    Ok(Commit {
        flags: r.u8("flags")?,
        commit_lsn: r.lsn("commit lsn")?,
        end_lsn: r.lsn("end lsn")?,
        commit_time: r.i64("commit timestamp")?,
    })
}

fn origin(r: &mut Reader<'_>) -> Result<Origin, DecodeError> {
    Ok(Origin {
        commit_lsn: r.lsn("origin commit lsn")?,
        name: r.string("origin name")?,
    })
}

fn logical_message(
    r: &mut Reader<'_>,
    in_streamed_txn: bool,
) -> Result<LogicalMessage, DecodeError> {
    let xid = streamed_xid(r, in_streamed_txn)?;
    let flags = r.u8("flags")?;
    let lsn = r.lsn("message lsn")?;
    let prefix = r.string("prefix")?;
    let len = r.len_i32("content length")?;
    let content = r.bytes(len, "content")?;
    Ok(LogicalMessage {
        xid,
        flags,
        lsn,
        prefix,
        content,
    })
}

fn stream_start(r: &mut Reader<'_>) -> Result<StreamStart, DecodeError> {
    let xid = r.u32("xid")?;
    // PostgreSQL only ever writes 0 or 1; anything else is corruption, not a new flag.
    let first_segment = match r.u8("first segment flag")? {
        0 => false,
        1 => true,
        value => {
            return Err(DecodeError::InvalidValue {
                message: r.message(),
                what: "first segment flag",
                value,
            })
        }
    };
    Ok(StreamStart { xid, first_segment })
}

fn stream_commit(r: &mut Reader<'_>) -> Result<StreamCommit, DecodeError> {
    Ok(StreamCommit {
        xid: r.u32("xid")?,
        flags: r.u8("flags")?,
        commit_lsn: r.lsn("commit lsn")?,
        end_lsn: r.lsn("end lsn")?,
        commit_time: r.i64("commit timestamp")?,
    })
}

fn stream_abort(r: &mut Reader<'_>) -> Result<StreamAbort, DecodeError> {
    let xid = r.u32("xid")?;
    let subxid = r.u32("subxid")?;
    // Whether abort_lsn/abort_time follow depends on the negotiated protocol version
    // and streaming mode, which the message does not carry: decide by length.
    let abort = match r.remaining() {
        0 => None,
        STREAM_ABORT_INFO_LEN => Some(StreamAbortInfo {
            abort_lsn: r.lsn("abort lsn")?,
            abort_time: r.i64("abort timestamp")?,
        }),
        remaining => return Err(DecodeError::StreamAbortLength { remaining }),
    };
    Ok(StreamAbort { xid, subxid, abort })
}

fn begin_prepare(r: &mut Reader<'_>) -> Result<BeginPrepare, DecodeError> {
    Ok(BeginPrepare {
        prepare_lsn: r.lsn("prepare lsn")?,
        end_lsn: r.lsn("end lsn")?,
        prepare_time: r.i64("prepare timestamp")?,
        xid: r.u32("xid")?,
        gid: r.string("gid")?,
    })
}

/// Prepare and Stream Prepare share this layout.
fn prepare(r: &mut Reader<'_>) -> Result<Prepare, DecodeError> {
    Ok(Prepare {
        flags: r.u8("flags")?,
        prepare_lsn: r.lsn("prepare lsn")?,
        end_lsn: r.lsn("end lsn")?,
        prepare_time: r.i64("prepare timestamp")?,
        xid: r.u32("xid")?,
        gid: r.string("gid")?,
    })
}

fn commit_prepared(r: &mut Reader<'_>) -> Result<CommitPrepared, DecodeError> {
    Ok(CommitPrepared {
        flags: r.u8("flags")?,
        commit_lsn: r.lsn("commit lsn")?,
        end_lsn: r.lsn("end lsn")?,
        commit_time: r.i64("commit timestamp")?,
        xid: r.u32("xid")?,
        gid: r.string("gid")?,
    })
}

fn rollback_prepared(r: &mut Reader<'_>) -> Result<RollbackPrepared, DecodeError> {
    Ok(RollbackPrepared {
        flags: r.u8("flags")?,
        prepare_end_lsn: r.lsn("prepare end lsn")?,
        rollback_end_lsn: r.lsn("rollback end lsn")?,
        prepare_time: r.i64("prepare timestamp")?,
        rollback_time: r.i64("rollback timestamp")?,
        xid: r.u32("xid")?,
        gid: r.string("gid")?,
    })
}

#[cfg(test)]
mod tests {
    use super::super::fixtures::{self as fx, Wire};
    use super::super::message::*;
    use super::*;
    use crate::pg::lsn::Lsn;
    use proptest::prelude::*;

    fn decode(data: Bytes, in_stream: bool) -> PgOutputMessage {
        decode_message(&data, in_stream).unwrap()
    }

    #[test]
    fn begin_and_commit() {
        let PgOutputMessage::Begin(b) = decode(fx::begin(), false) else {
            panic!("expected Begin");
        };
        assert_eq!(b.final_lsn, Lsn(fx::F_LSN1));
        assert_eq!(b.final_lsn.to_string(), "16/B374D848");
        assert_eq!(b.commit_time, fx::F_TIME1);
        assert_eq!(b.xid, fx::F_XID);

        let PgOutputMessage::Commit(c) = decode(fx::commit(), false) else {
            panic!("expected Commit");
        };
        assert_eq!(c.flags, 0);
        assert_eq!(c.commit_lsn, Lsn(fx::F_LSN1));
        assert_eq!(c.end_lsn, Lsn(fx::F_LSN2));
        assert_eq!(c.commit_time, fx::F_TIME1);
    }

    #[test]
    fn origin() {
        let PgOutputMessage::Origin(o) = decode(fx::origin(), false) else {
            panic!("expected Origin");
        };
        assert_eq!(o.commit_lsn, Lsn(fx::F_LSN1));
        assert_eq!(o.name, "node_a");
    }

    #[test]
    fn logical_message_v1_and_streamed() {
        for (data, in_stream, xid) in [
            (fx::message_v1(), false, None),
            (fx::message_streamed(), true, Some(fx::F_XID)),
        ] {
            let PgOutputMessage::Message(m) = decode(data.clone(), in_stream) else {
                panic!("expected Message");
            };
            assert_eq!(m.xid, xid);
            assert_eq!(m.flags, 1);
            assert!(m.transactional());
            assert_eq!(m.lsn, Lsn(fx::F_LSN2));
            assert_eq!(m.prefix, "outbox");
            assert_eq!(&m.content[..], b"a\0z");
            // Zero-copy: the content points into the input buffer.
            let range = data.as_ptr_range();
            assert!(range.contains(&m.content.as_ptr()));
        }
    }

    #[test]
    fn stream_start_stop_commit() {
        let PgOutputMessage::StreamStart(s) = decode(fx::stream_start(), false) else {
            panic!("expected Stream Start");
        };
        assert_eq!(s.xid, fx::F_XID);
        assert!(s.first_segment);
        let not_first = Wire::tag(b'S').u32(9).u8(0).bytes();
        assert_eq!(
            decode(not_first, false),
            PgOutputMessage::StreamStart(StreamStart {
                xid: 9,
                first_segment: false
            })
        );

        assert_eq!(decode(fx::stream_stop(), true), PgOutputMessage::StreamStop);

        let PgOutputMessage::StreamCommit(c) = decode(fx::stream_commit(), false) else {
            panic!("expected Stream Commit");
        };
        assert_eq!(c.xid, fx::F_XID);
        assert_eq!(c.flags, 0);
        assert_eq!(c.commit_lsn, Lsn(fx::F_LSN1));
        assert_eq!(c.end_lsn, Lsn(fx::F_LSN2));
        assert_eq!(c.commit_time, fx::F_TIME1);
    }

    #[test]
    fn stream_abort_both_forms() {
        assert_eq!(
            decode(fx::stream_abort(), false),
            PgOutputMessage::StreamAbort(StreamAbort {
                xid: fx::F_XID,
                subxid: fx::F_SUBXID,
                abort: None,
            })
        );
        assert_eq!(
            decode(fx::stream_abort_parallel(), false),
            PgOutputMessage::StreamAbort(StreamAbort {
                xid: fx::F_XID,
                subxid: fx::F_XID,
                abort: Some(StreamAbortInfo {
                    abort_lsn: Lsn(fx::F_LSN2),
                    abort_time: fx::F_TIME2,
                }),
            })
        );
        for extra in [1usize, 8, 15, 17, 32] {
            let data = Wire::tag(b'A').u32(1).u32(2).raw(&vec![0; extra]).bytes();
            assert_eq!(
                decode_message(&data, false),
                Err(DecodeError::StreamAbortLength { remaining: extra })
            );
        }
    }

    #[test]
    fn two_phase_messages() {
        let PgOutputMessage::BeginPrepare(b) = decode(fx::begin_prepare(), false) else {
            panic!("expected Begin Prepare");
        };
        assert_eq!(b.prepare_lsn, Lsn(fx::F_LSN1));
        assert_eq!(b.end_lsn, Lsn(fx::F_LSN2));
        assert_eq!(b.prepare_time, fx::F_TIME1);
        assert_eq!(b.xid, fx::F_XID);
        assert_eq!(b.gid, fx::F_GID);

        let expected = Prepare {
            flags: 0,
            prepare_lsn: Lsn(fx::F_LSN1),
            end_lsn: Lsn(fx::F_LSN2),
            prepare_time: fx::F_TIME1,
            xid: fx::F_XID,
            gid: fx::F_GID.to_owned(),
        };
        assert_eq!(
            decode(fx::prepare(), false),
            PgOutputMessage::Prepare(expected)
        );

        let PgOutputMessage::CommitPrepared(c) = decode(fx::commit_prepared(), false) else {
            panic!("expected Commit Prepared");
        };
        assert_eq!(c.flags, 0);
        assert_eq!(c.commit_lsn, Lsn(fx::F_LSN1));
        assert_eq!(c.end_lsn, Lsn(fx::F_LSN2));
        assert_eq!(c.commit_time, fx::F_TIME2);
        assert_eq!(c.xid, fx::F_XID);
        assert_eq!(c.gid, fx::F_GID);

        let PgOutputMessage::RollbackPrepared(r) = decode(fx::rollback_prepared(), false) else {
            panic!("expected Rollback Prepared");
        };
        assert_eq!(r.flags, 0);
        assert_eq!(r.prepare_end_lsn, Lsn(fx::F_LSN1));
        assert_eq!(r.rollback_end_lsn, Lsn(fx::F_LSN2));
        assert_eq!(r.prepare_time, fx::F_TIME1);
        assert_eq!(r.rollback_time, fx::F_TIME2);
        assert_eq!(r.xid, fx::F_XID);
        assert_eq!(r.gid, fx::F_GID);

        let PgOutputMessage::StreamPrepare(p) = decode(fx::stream_prepare(), false) else {
            panic!("expected Stream Prepare");
        };
        assert_eq!(p.flags, 0);
        assert_eq!(p.prepare_lsn, Lsn(fx::F_LSN2));
        assert_eq!(p.end_lsn, Lsn(fx::F_LSN1));
        assert_eq!(p.prepare_time, fx::F_TIME2);
        assert_eq!(p.xid, fx::F_XID);
        assert_eq!(p.gid, "");
    }

    #[test]
    fn every_fixture_decodes_to_its_tag() {
        for (name, data, in_stream) in fx::all() {
            let msg =
                decode_message(&data, in_stream).unwrap_or_else(|e| panic!("fixture {name}: {e}"));
            assert_eq!(Some(&msg.tag()), data.first(), "fixture {name}");
        }
    }

    #[test]
    fn every_truncation_is_an_error() {
        for (name, data, in_stream) in fx::all() {
            for len in 0..data.len() {
                // The only legal proper prefix: a v4 parallel Stream Abort cut right
                // after subxid is a complete pre-v4 Stream Abort.
                if name == "stream_abort_parallel" && len == 9 {
                    continue;
                }
                let prefix = data.slice(..len);
                assert!(
                    decode_message(&prefix, in_stream).is_err(),
                    "fixture {name} truncated to {len} bytes decoded"
                );
            }
        }
    }

    #[test]
    fn trailing_garbage_is_an_error() {
        for (name, data, in_stream) in fx::all() {
            let mut longer = data.to_vec();
            longer.push(0);
            let err = decode_message(&Bytes::from(longer), in_stream).unwrap_err();
            assert!(
                matches!(
                    err,
                    DecodeError::TrailingBytes { count: 1, .. }
                        | DecodeError::StreamAbortLength { .. }
                ),
                "fixture {name}: {err}"
            );
        }
    }

    #[test]
    fn empty_and_unknown_tags() {
        assert_eq!(
            decode_message(&Bytes::new(), false),
            Err(DecodeError::Empty)
        );
        for tag in [b'X', b'a', 0, 0xff, b'w', b'k'] {
            let data = Bytes::from(vec![tag, 0, 0, 0, 0]);
            assert_eq!(
                decode_message(&data, false),
                Err(DecodeError::UnknownTag(tag))
            );
        }
    }

    #[test]
    fn truncation_error_names_message_and_field() {
        let data = fx::begin().slice(..20);
        assert_eq!(
            decode_message(&data, false).unwrap_err().to_string(),
            "truncated pgoutput Begin message: needed 4 bytes for xid, 3 remaining"
        );
    }

    #[test]
    fn negative_message_content_length() {
        let data = Wire::tag(b'M').u8(0).u64(1).cstr("p").i32(-1).bytes();
        assert_eq!(
            decode_message(&data, false),
            Err(DecodeError::NegativeLength {
                message: "Message",
                what: "content length",
                value: -1,
            })
        );
    }

    #[test]
    fn invalid_utf8_in_names() {
        let bad = [b'o', 0xff, b'x'];
        let cases = [
            Wire::tag(b'O').u64(1).raw(&bad).u8(0).bytes(),
            Wire::tag(b'M').u8(0).u64(1).raw(&bad).u8(0).i32(0).bytes(),
            Wire::tag(b'b')
                .u64(1)
                .u64(2)
                .i64(3)
                .u32(4)
                .raw(&bad)
                .u8(0)
                .bytes(),
            Wire::tag(b'P')
                .u8(0)
                .u64(1)
                .u64(2)
                .i64(3)
                .u32(4)
                .raw(&bad)
                .u8(0)
                .bytes(),
        ];
        for data in cases {
            assert!(
                matches!(
                    decode_message(&data, false),
                    Err(DecodeError::InvalidUtf8 { valid_up_to: 1, .. })
                ),
                "{data:?}"
            );
        }
    }

    #[test]
    fn invalid_first_segment_flag() {
        let data = Wire::tag(b'S').u32(1).u8(2).bytes();
        assert!(matches!(
            decode_message(&data, false),
            Err(DecodeError::InvalidValue { value: 2, .. })
        ));
    }

    proptest! {
        #[test]
        fn arbitrary_bytes_never_panic(
            data in prop::collection::vec(any::<u8>(), 0..256),
            in_stream in any::<bool>(),
        ) {
            let _ = decode_message(&Bytes::from(data), in_stream);
        }

        #[test]
        fn tagged_arbitrary_bodies_never_panic(
            tag in prop::sample::select(b"BCOMRYIUDTSEcAbPKrp".to_vec()),
            body in prop::collection::vec(any::<u8>(), 0..128),
            in_stream in any::<bool>(),
        ) {
            let mut data = vec![tag];
            data.extend(body);
            let _ = decode_message(&Bytes::from(data), in_stream);
        }

        #[test]
        fn corrupted_fixtures_never_panic(
            which in any::<prop::sample::Index>(),
            at in any::<prop::sample::Index>(),
            byte in any::<u8>(),
            in_stream in any::<bool>(),
        ) {
            let all = fx::all();
            let (_, data, _) = &all[which.index(all.len())];
            let mut data = data.to_vec();
            let i = at.index(data.len());
            data[i] = byte;
            let _ = decode_message(&Bytes::from(data), in_stream);
        }
    }
}

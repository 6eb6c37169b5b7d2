//! Sans-I/O framing for the streaming-replication protocol.
//!
//! Owns two layers, both pure functions over byte buffers so they can be unit
//! tested and fuzzed without a socket:
//!
//! 1. **Backend frames**: [`parse_backend`] splits one complete backend message off a
//!    read buffer. `postgres_protocol`'s `Message::parse` does not know the
//!    `CopyBothResponse` (`W`) message that starts replication, so it is intercepted
//!    here before the rest is handed to `Message::parse`. A frame length above
//!    [`MAX_FRAME_LEN`] is an error *before* anything is reserved, so a corrupt or
//!    hostile length can never make the relay allocate gigabytes.
//! 2. **CopyData payloads** of a replication stream ([`parse_copy_data`]): XLogData
//!    (`w`) and primary keepalive (`k`), and the one message the client sends back,
//!    the standby status update (`r`, [`encode_standby_status`]).
//!
//! See <https://www.postgresql.org/docs/current/protocol-replication.html>.
//!
//! Invariant: a parse returns `Ok(None)` only when more bytes are needed and leaves
//! the buffer untouched in that case; on `Ok(Some(_))` exactly one frame was consumed.

use bytes::{Buf, BufMut, Bytes, BytesMut};
use postgres_protocol::message::backend::Message;

use crate::pg::lsn::Lsn;

/// The largest backend frame accepted (1 GiB + headroom). PostgreSQL cannot send a
/// single message larger than its 1 GB allocation limit plus a few header bytes.
pub const MAX_FRAME_LEN: usize = (1 << 30) + (1 << 20);

/// Tag of `CopyBothResponse`, the reply to `START_REPLICATION`.
const COPY_BOTH_RESPONSE_TAG: u8 = b'W';
/// Tag of an XLogData message inside CopyData.
const XLOG_DATA_TAG: u8 = b'w';
/// Tag of a primary keepalive message inside CopyData.
const PRIMARY_KEEPALIVE_TAG: u8 = b'k';
/// Tag of a standby status update inside CopyData.
const STANDBY_STATUS_UPDATE_TAG: u8 = b'r';
/// Tag of the frontend/backend CopyData message.
const COPY_DATA_TAG: u8 = b'd';

/// A malformed message from the server.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ProtocolError {
    /// The length field of a backend frame is impossible.
    #[error("invalid backend message length {len} for tag {tag:?}: must be 4..={max}")]
    FrameLength { tag: char, len: u32, max: usize },
    /// `postgres_protocol` rejected a frame body.
    #[error("malformed backend message with tag {tag:?}")]
    Malformed {
        tag: char,
        #[source]
        source: std::io::Error,
    },
    /// A replication CopyData payload was shorter than its fixed layout.
    #[error("truncated replication message {tag:?}: {len} bytes, expected {expected}")]
    Truncated {
        tag: char,
        len: usize,
        expected: usize,
    },
    /// A replication CopyData payload had a tag this client does not know.
    #[error("unknown replication message tag {0:?} in CopyData")]
    UnknownTag(char),
    /// A replication CopyData payload was empty.
    #[error("empty CopyData message in replication stream")]
    Empty,
}

/// One backend message, with `CopyBothResponse` added to what `postgres_protocol` knows.
pub enum Backend {
    /// `W`: the server entered CopyBoth mode (replication started).
    CopyBothResponse,
    /// Every other message, parsed by `postgres_protocol`.
    Message(Message),
}

impl std::fmt::Debug for Backend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // postgres_protocol's Message has no Debug; its tag is what matters here.
        match self {
            Backend::CopyBothResponse => f.write_str("CopyBothResponse"),
            Backend::Message(_) => f.write_str("Message(..)"),
        }
    }
}

/// Split one complete backend message off the front of `buf`.
///
/// Returns `Ok(None)` when `buf` does not yet hold a whole message (nothing consumed).
pub fn parse_backend(buf: &mut BytesMut) -> Result<Option<Backend>, ProtocolError> {
    if buf.len() < 5 {
        return Ok(None);
    }
    let tag = buf[0];
    let len = u32::from_be_bytes([buf[1], buf[2], buf[3], buf[4]]);
    let total = usize::try_from(len)
        .ok()
        .filter(|l| (4..=MAX_FRAME_LEN).contains(l))
        .ok_or(ProtocolError::FrameLength {
            tag: char::from(tag),
            len,
            max: MAX_FRAME_LEN,
        })?
        + 1;
    if buf.len() < total {
        buf.reserve(total - buf.len());
        return Ok(None);
    }
    let mut frame = buf.split_to(total);
    if tag == COPY_BOTH_RESPONSE_TAG {
        // Body: overall format (Int8), column count (Int16), per-column formats. For
        // replication it is always "binary, 0 columns", so only the frame is consumed.
        return Ok(Some(Backend::CopyBothResponse));
    }
    match Message::parse(&mut frame) {
        Ok(Some(message)) => Ok(Some(Backend::Message(message))),
        // The frame is complete, so "need more" cannot happen; treat it as malformed.
        Ok(None) => Err(ProtocolError::Malformed {
            tag: char::from(tag),
            source: std::io::Error::other("incomplete frame"),
        }),
        Err(source) => Err(ProtocolError::Malformed {
            tag: char::from(tag),
            source,
        }),
    }
}

/// A message the server sends inside CopyData while streaming.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ReplicationMessage {
    /// `w`: a chunk of WAL, here one pgoutput message.
    XLogData {
        /// WAL position where this data starts.
        wal_start: Lsn,
        /// Current end of WAL on the server.
        wal_end: Lsn,
        /// Server clock at transmission, µs since 2000-01-01.
        server_time: i64,
        /// The pgoutput message (zero-copy slice of the frame).
        data: Bytes,
    },
    /// `k`: a keepalive; `reply_requested` means the server wants a status update now
    /// or it will disconnect after `wal_sender_timeout`.
    PrimaryKeepalive {
        /// Current end of WAL on the server.
        wal_end: Lsn,
        /// Server clock at transmission, µs since 2000-01-01.
        server_time: i64,
        /// The server asks for an immediate standby status update.
        reply_requested: bool,
    },
}

/// Decode the payload of one CopyData message received while streaming.
pub fn parse_copy_data(mut data: Bytes) -> Result<ReplicationMessage, ProtocolError> {
    let tag = *data.first().ok_or(ProtocolError::Empty)?;
    let need = |expected: usize, data: &Bytes| {
        if data.len() < expected {
            Err(ProtocolError::Truncated {
                tag: char::from(tag),
                len: data.len(),
                expected,
            })
        } else {
            Ok(())
        }
    };
    match tag {
        XLOG_DATA_TAG => {
            need(25, &data)?;
            data.advance(1);
            let wal_start = Lsn(data.get_u64());
            let wal_end = Lsn(data.get_u64());
            let server_time = data.get_i64();
            Ok(ReplicationMessage::XLogData {
                wal_start,
                wal_end,
                server_time,
                data,
            })
        }
        PRIMARY_KEEPALIVE_TAG => {
            need(18, &data)?;
            if data.len() != 18 {
                return Err(ProtocolError::Truncated {
                    tag: 'k',
                    len: data.len(),
                    expected: 18,
                });
            }
            data.advance(1);
            Ok(ReplicationMessage::PrimaryKeepalive {
                wal_end: Lsn(data.get_u64()),
                server_time: data.get_i64(),
                reply_requested: data.get_u8() != 0,
            })
        }
        other => Err(ProtocolError::UnknownTag(char::from(other))),
    }
}

/// The standby status update (`r`), framed as a CopyData message ready to write.
///
/// `written`, `flushed` and `applied` are what the server records; for a logical slot
/// `flushed` becomes `confirmed_flush_lsn`, and `0/0` leaves the slot untouched.
pub fn encode_standby_status(
    written: Lsn,
    flushed: Lsn,
    applied: Lsn,
    client_time: i64,
    reply_requested: bool,
    out: &mut BytesMut,
) {
    // CopyData header: tag + length (4 + 34-byte body).
    out.put_u8(COPY_DATA_TAG);
    out.put_u32(4 + 34);
    out.put_u8(STANDBY_STATUS_UPDATE_TAG);
    out.put_u64(written.0);
    out.put_u64(flushed.0);
    out.put_u64(applied.0);
    out.put_i64(client_time);
    out.put_u8(u8::from(reply_requested));
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(tag: u8, body: &[u8]) -> BytesMut {
        let mut b = BytesMut::new();
        b.put_u8(tag);
        b.put_u32(u32::try_from(body.len() + 4).unwrap());
        b.put_slice(body);
        b
    }

    #[test]
    fn copy_both_response_is_intercepted() {
        let mut buf = frame(b'W', &[0, 0, 0]);
        buf.put_slice(&frame(b'd', b"k")[..]);
        assert!(matches!(
            parse_backend(&mut buf).unwrap(),
            Some(Backend::CopyBothResponse)
        ));
        match parse_backend(&mut buf).unwrap() {
            Some(Backend::Message(Message::CopyData(body))) => assert_eq!(body.data(), b"k"),
            other => panic!("unexpected {other:?}"),
        }
        assert!(buf.is_empty());
    }

    #[test]
    fn incomplete_frame_consumes_nothing() {
        let full = frame(b'd', b"hello");
        for cut in 0..full.len() {
            let mut buf = BytesMut::from(&full[..cut]);
            assert!(parse_backend(&mut buf).unwrap().is_none());
            assert_eq!(buf.len(), cut);
        }
    }

    #[test]
    fn absurd_length_is_rejected_before_allocating() {
        let mut buf = BytesMut::from(&[b'd', 0xFF, 0xFF, 0xFF, 0xFF][..]);
        assert!(matches!(
            parse_backend(&mut buf),
            Err(ProtocolError::FrameLength { .. })
        ));
        let mut buf = BytesMut::from(&[b'd', 0, 0, 0, 3][..]);
        assert!(parse_backend(&mut buf).is_err());
    }

    #[test]
    fn xlogdata_and_keepalive_decode() {
        let mut w = BytesMut::new();
        w.put_u8(b'w');
        w.put_u64(0x10);
        w.put_u64(0x20);
        w.put_i64(7);
        w.put_slice(b"B...");
        assert_eq!(
            parse_copy_data(w.freeze()).unwrap(),
            ReplicationMessage::XLogData {
                wal_start: Lsn(0x10),
                wal_end: Lsn(0x20),
                server_time: 7,
                data: Bytes::from_static(b"B..."),
            }
        );
        let mut k = BytesMut::new();
        k.put_u8(b'k');
        k.put_u64(0x30);
        k.put_i64(9);
        k.put_u8(1);
        assert_eq!(
            parse_copy_data(k.freeze()).unwrap(),
            ReplicationMessage::PrimaryKeepalive {
                wal_end: Lsn(0x30),
                server_time: 9,
                reply_requested: true,
            }
        );
    }

    #[test]
    fn malformed_copy_data_is_an_error() {
        assert!(parse_copy_data(Bytes::new()).is_err());
        assert!(parse_copy_data(Bytes::from_static(b"w1234")).is_err());
        assert!(parse_copy_data(Bytes::from_static(&[b'k'; 19])).is_err());
        assert!(matches!(
            parse_copy_data(Bytes::from_static(b"z")),
            Err(ProtocolError::UnknownTag('z'))
        ));
    }

    #[test]
    fn standby_status_update_layout() {
        let mut out = BytesMut::new();
        encode_standby_status(Lsn(1), Lsn(2), Lsn(3), 4, true, &mut out);
        assert_eq!(out.len(), 1 + 4 + 34);
        assert_eq!(&out[..6], &[b'd', 0, 0, 0, 38, b'r']);
        assert_eq!(out[out.len() - 1], 1);
        assert_eq!(&out[14..22], &2u64.to_be_bytes());
    }
}

//! Sans-I/O decoding of the CopyData payloads of a replication stream
//! ([`parse_copy_data`]): XLogData (`w`) and primary keepalive (`k`), and the one
//! message the client sends back, the standby status update (`r`,
//! [`encode_standby_status`]). Pure functions over byte buffers, so they are unit
//! tested and fuzzed without a socket; the backend frames around them are split off
//! by the wire client ([`crate::pg::client::frame`]), whose [`ProtocolError`] they share.
//!
//! See <https://www.postgresql.org/docs/current/protocol-replication.html>.
//!
//! Invariant: a payload shorter than its fixed layout, empty, or with an unknown tag
//! is an error, never a panic or a guess.

use bytes::{Buf, BufMut, Bytes, BytesMut};

use crate::pg::client::frame::ProtocolError;
use crate::pg::lsn::Lsn;

/// Tag of an XLogData message inside CopyData.
const XLOG_DATA_TAG: u8 = b'w';
/// Tag of a primary keepalive message inside CopyData.
const PRIMARY_KEEPALIVE_TAG: u8 = b'k';
/// Tag of a standby status update inside CopyData.
const STANDBY_STATUS_UPDATE_TAG: u8 = b'r';
/// Tag of the frontend/backend CopyData message.
const COPY_DATA_TAG: u8 = b'd';

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

impl ReplicationMessage {
    /// Whether this is WAL data (an event's part), not a keepalive.
    pub fn is_wal_data(&self) -> bool {
        matches!(self, ReplicationMessage::XLogData { .. })
    }

    /// Whether this is WAL data carrying a pgoutput Commit (`C`): the end of a
    /// transaction.
    pub fn is_commit(&self) -> bool {
        matches!(self, ReplicationMessage::XLogData { data, .. } if data.first() == Some(&b'C'))
    }
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
    use bytes::BufMut;

    use super::*;

    #[test]
    fn a_commit_is_wal_data_whose_pgoutput_tag_is_c() {
        let wal = |data: &'static [u8]| ReplicationMessage::XLogData {
            wal_start: Lsn(1),
            wal_end: Lsn(2),
            server_time: 0,
            data: Bytes::from_static(data),
        };
        assert!(wal(b"C\0rest").is_commit());
        assert!(wal(b"C").is_wal_data());
        for other in [&b"B..."[..], b"I...", b"R...", b"M...", b""] {
            assert!(!wal(other).is_commit(), "{other:?}");
        }
        let keepalive = ReplicationMessage::PrimaryKeepalive {
            wal_end: Lsn(2),
            server_time: 0,
            reply_requested: false,
        };
        assert!(!keepalive.is_commit() && !keepalive.is_wal_data());
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

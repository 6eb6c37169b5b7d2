//! Sans-I/O framing of the PostgreSQL backend protocol: [`parse_backend`] splits one
//! complete backend message off a read buffer.
//!
//! `postgres_protocol`'s `Message::parse` does not know the `CopyBothResponse` (`W`)
//! message that starts replication, so it is intercepted here before the rest is
//! handed to `Message::parse`. A frame length above [`MAX_FRAME_LEN`] is an error
//! *before* anything is reserved, so a corrupt or hostile length can never make the
//! relay allocate gigabytes. The payloads of a replication stream's CopyData
//! messages are decoded by the replication half of `pg`, above this room; their
//! errors share [`ProtocolError`], so a malformed stream surfaces as one
//! `PgError::Protocol`.
//!
//! See <https://www.postgresql.org/docs/current/protocol-message-formats.html>.
//!
//! Invariant: a parse returns `Ok(None)` only when more bytes are needed and leaves
//! the buffer untouched in that case; on `Ok(Some(_))` exactly one frame was consumed.

use bytes::BytesMut;
use postgres_protocol::message::backend::Message;

/// The largest backend frame accepted (1 GiB + headroom). PostgreSQL cannot send a
/// single message larger than its 1 GB allocation limit plus a few header bytes.
pub const MAX_FRAME_LEN: usize = (1 << 30) + (1 << 20);

/// Tag of `CopyBothResponse`, the reply to `START_REPLICATION`.
const COPY_BOTH_RESPONSE_TAG: u8 = b'W';

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

#[cfg(test)]
mod tests {
    use bytes::BufMut;

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
}

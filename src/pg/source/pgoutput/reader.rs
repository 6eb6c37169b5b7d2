//! A bounds-checked big-endian cursor over one pgoutput message.
//!
//! Owns every byte access the decoder makes. Invariants: `pos <= buf.len()` at all
//! times; each read checks the remaining length first and returns a [`DecodeError`]
//! naming the message and field instead of panicking; byte strings come back as
//! [`Bytes::slice`]s of the input, never copies.

use bytes::Bytes;

use super::error::DecodeError;
use crate::pg::lsn::Lsn;

/// Cursor over one message; `message` is its documented name, used in every error.
pub(crate) struct Reader<'a> {
    buf: &'a Bytes,
    pos: usize,
    message: &'static str,
}

impl<'a> Reader<'a> {
    /// A cursor at `pos` (clamped to the buffer) for the message called `message`.
    pub(crate) fn new(buf: &'a Bytes, pos: usize, message: &'static str) -> Self {
        Reader {
            buf,
            pos: pos.min(buf.len()),
            message,
        }
    }

    /// The message name errors use.
    pub(crate) fn message(&self) -> &'static str {
        self.message
    }

    /// Bytes not yet read.
    pub(crate) fn remaining(&self) -> usize {
        self.buf.len().saturating_sub(self.pos)
    }

    fn truncated(&self, what: &'static str, needed: usize) -> DecodeError {
        DecodeError::Truncated {
            message: self.message,
            what,
            needed,
            remaining: self.remaining(),
        }
    }

    /// The next `N` bytes as an array.
    fn array<const N: usize>(&mut self, what: &'static str) -> Result<[u8; N], DecodeError> {
        let end = self
            .pos
            .checked_add(N)
            .ok_or_else(|| self.truncated(what, N))?;
        let bytes: [u8; N] = self
            .buf
            .get(self.pos..end)
            .and_then(|s| s.try_into().ok())
            .ok_or_else(|| self.truncated(what, N))?;
        self.pos = end;
        Ok(bytes)
    }

    /// An Int8 / Byte1.
    pub(crate) fn u8(&mut self, what: &'static str) -> Result<u8, DecodeError> {
        self.array::<1>(what).map(|[b]| b)
    }

    /// An Int16 read as unsigned: PostgreSQL writes column counts with
    /// `pq_sendint16` from a `uint16` and reads them back unsigned.
    pub(crate) fn u16(&mut self, what: &'static str) -> Result<u16, DecodeError> {
        self.array(what).map(u16::from_be_bytes)
    }

    /// A signed Int32.
    pub(crate) fn i32(&mut self, what: &'static str) -> Result<i32, DecodeError> {
        self.array(what).map(i32::from_be_bytes)
    }

    /// An Int32 holding an unsigned value (xid, oid).
    pub(crate) fn u32(&mut self, what: &'static str) -> Result<u32, DecodeError> {
        self.array(what).map(u32::from_be_bytes)
    }

    /// A signed Int64 (timestamps).
    pub(crate) fn i64(&mut self, what: &'static str) -> Result<i64, DecodeError> {
        self.array(what).map(i64::from_be_bytes)
    }

    /// An Int64 LSN.
    pub(crate) fn lsn(&mut self, what: &'static str) -> Result<Lsn, DecodeError> {
        self.array(what).map(|b| Lsn(u64::from_be_bytes(b)))
    }

    /// An Int32 length or count that must not be negative.
    pub(crate) fn len_i32(&mut self, what: &'static str) -> Result<usize, DecodeError> {
        let value = self.i32(what)?;
        usize::try_from(value).map_err(|_| DecodeError::NegativeLength {
            message: self.message,
            what,
            value,
        })
    }

    /// The next `len` bytes as a zero-copy slice of the input.
    pub(crate) fn bytes(&mut self, len: usize, what: &'static str) -> Result<Bytes, DecodeError> {
        if len > self.remaining() {
            return Err(self.truncated(what, len));
        }
        let end = self.pos + len; // cannot overflow: len <= buf.len() - pos
        let slice = self.buf.slice(self.pos..end); // in bounds: checked above
        self.pos = end;
        Ok(slice)
    }

    /// A NUL-terminated UTF-8 string. Names are short and rare (Relation, Type,
    /// Origin, gids, message prefixes), so an owned `String` is fine here; row
    /// values never come through this path.
    pub(crate) fn string(&mut self, what: &'static str) -> Result<String, DecodeError> {
        let rest = self.buf.get(self.pos..).unwrap_or_default();
        let Some(nul) = rest.iter().position(|&b| b == 0) else {
            return Err(DecodeError::UnterminatedString {
                message: self.message,
                what,
                remaining: rest.len(),
            });
        };
        let raw = rest.get(..nul).unwrap_or_default();
        let text = std::str::from_utf8(raw).map_err(|e| DecodeError::InvalidUtf8 {
            message: self.message,
            what,
            valid_up_to: e.valid_up_to(),
        })?;
        let text = text.to_owned();
        self.pos += nul + 1; // nul < rest.len(), so pos stays <= buf.len()
        Ok(text)
    }

    /// Ends the message: leftover bytes mean a framing or version mismatch.
    pub(crate) fn finish(self) -> Result<(), DecodeError> {
        match self.remaining() {
            0 => Ok(()),
            count => Err(DecodeError::TrailingBytes {
                message: self.message,
                count,
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_big_endian_and_checks_bounds() {
        let buf = Bytes::from_static(&[0, 1, 0xff, 0xff, 0xff, 0xfe, b'a', 0, 9]);
        let mut r = Reader::new(&buf, 0, "Test");
        assert_eq!(r.u16("a").unwrap(), 1);
        assert_eq!(r.i32("b").unwrap(), -2);
        assert_eq!(r.string("c").unwrap(), "a");
        assert_eq!(
            r.i32("d"),
            Err(DecodeError::Truncated {
                message: "Test",
                what: "d",
                needed: 4,
                remaining: 1
            })
        );
        assert_eq!(
            r.bytes(2, "e").unwrap_err().to_string(),
            "truncated pgoutput Test message: needed 2 bytes for e, 1 remaining"
        );
        assert_eq!(r.bytes(1, "f").unwrap(), Bytes::from_static(&[9]));
        assert!(r.finish().is_ok());
    }

    #[test]
    fn negative_length_and_bad_strings_are_errors() {
        let buf = Bytes::from_static(&[0xff, 0xff, 0xff, 0xff]);
        let mut r = Reader::new(&buf, 0, "Test");
        assert!(matches!(
            r.len_i32("len"),
            Err(DecodeError::NegativeLength { value: -1, .. })
        ));

        let buf = Bytes::from_static(b"ab");
        let mut r = Reader::new(&buf, 0, "Test");
        assert!(matches!(
            r.string("name"),
            Err(DecodeError::UnterminatedString { remaining: 2, .. })
        ));

        let buf = Bytes::from_static(&[b'a', 0xc3, 0x28, 0]);
        let mut r = Reader::new(&buf, 0, "Test");
        assert!(matches!(
            r.string("name"),
            Err(DecodeError::InvalidUtf8 { valid_up_to: 1, .. })
        ));
    }

    #[test]
    fn start_past_end_is_clamped() {
        let buf = Bytes::from_static(&[1]);
        let mut r = Reader::new(&buf, 5, "Test");
        assert_eq!(r.remaining(), 0);
        assert!(r.u8("x").is_err());
    }
}

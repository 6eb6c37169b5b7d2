//! The one error type of the pgoutput decoder.
//!
//! Owns [`DecodeError`]. Invariant: every variant names the pgoutput message being
//! decoded (by its documented name, e.g. "Stream Abort") and, where there is one, the
//! field being read, so a log line alone says where a stream went wrong. Messages are
//! lowercase with no trailing period, as the rest of pgoutbox's errors are.

use std::fmt;

/// A pgoutput message that could not be decoded.
///
/// `message` fields hold the documented message name ("Relation", "Stream Commit", ...);
/// `what` fields name the field being read ("column type oid", "gid", ...).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DecodeError {
    /// The XLogData payload was empty: not even a tag byte.
    #[error("empty pgoutput message: no tag byte")]
    Empty,

    /// The first byte is not a pgoutput message tag this decoder knows.
    #[error("unknown pgoutput message tag {}", Tag(*.0))]
    UnknownTag(u8),

    /// The message ended before a fixed-size field or a counted byte string.
    #[error(
        "truncated pgoutput {message} message: needed {needed} bytes for {what}, {remaining} remaining"
    )]
    Truncated {
        /// Message being decoded.
        message: &'static str,
        /// Field being read.
        what: &'static str,
        /// Bytes the field needs.
        needed: usize,
        /// Bytes left in the message.
        remaining: usize,
    },

    /// A NUL-terminated string ran to the end of the message without its NUL.
    #[error("truncated pgoutput {message} message: no NUL terminator for {what} in the {remaining} remaining bytes")]
    UnterminatedString {
        /// Message being decoded.
        message: &'static str,
        /// Field being read.
        what: &'static str,
        /// Bytes left in the message when the string started.
        remaining: usize,
    },

    /// A string field (a name, prefix or gid) is not valid UTF-8.
    #[error(
        "invalid UTF-8 in {what} of pgoutput {message} message (byte {valid_up_to} of the string)"
    )]
    InvalidUtf8 {
        /// Message being decoded.
        message: &'static str,
        /// Field being read.
        what: &'static str,
        /// Length of the valid UTF-8 prefix of the string.
        valid_up_to: usize,
    },

    /// An Int32 length or count was negative.
    #[error("negative {what} {value} in pgoutput {message} message")]
    NegativeLength {
        /// Message being decoded.
        message: &'static str,
        /// Field being read.
        what: &'static str,
        /// The value on the wire.
        value: i32,
    },

    /// A TupleData column kind byte other than `n`, `u`, `t` or `b`.
    #[error("unknown tuple column kind {} for column {column} in pgoutput {message} message", Tag(*.kind))]
    UnknownColumnKind {
        /// Message being decoded.
        message: &'static str,
        /// Zero-based column index.
        column: usize,
        /// The kind byte on the wire.
        kind: u8,
    },

    /// The byte announcing a tuple (`N`, `K`, `O`) was not one allowed at that point.
    #[error("unexpected tuple tag {} in pgoutput {message} message: expected {expected}", Tag(*.tag))]
    UnexpectedTupleTag {
        /// Message being decoded.
        message: &'static str,
        /// The byte on the wire.
        tag: u8,
        /// What the protocol allows here, e.g. "'K', 'O' or 'N'".
        expected: &'static str,
    },

    /// A byte-sized field held a value the protocol does not define.
    #[error("invalid {what} {value} in pgoutput {message} message")]
    InvalidValue {
        /// Message being decoded.
        message: &'static str,
        /// Field being read.
        what: &'static str,
        /// The value on the wire.
        value: u8,
    },

    /// Stream Abort carried neither zero nor exactly 16 bytes after its subxid.
    ///
    /// Protocol version 4 with `streaming = parallel` appends abort_lsn and abort_time
    /// (16 bytes); earlier versions append nothing. Anything else is corrupt.
    #[error("invalid pgoutput Stream Abort message: {remaining} bytes after subxid, expected 0 or 16 (abort_lsn and abort_time)")]
    StreamAbortLength {
        /// Bytes left after the subxid.
        remaining: usize,
    },

    /// Bytes were left over after a complete message.
    #[error("{count} trailing bytes after pgoutput {message} message")]
    TrailingBytes {
        /// Message that was decoded.
        message: &'static str,
        /// Bytes left over.
        count: usize,
    },
}

/// Shows a tag byte as `'X' (0x58)` when printable, else as `0x07`, so a log line
/// shows both what PostgreSQL documents and what was really on the wire.
struct Tag(u8);

impl fmt::Display for Tag {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.is_ascii_graphic() {
            write!(f, "'{}' ({:#04x})", char::from(self.0), self.0)
        } else {
            write!(f, "{:#04x}", self.0)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_name_message_and_field() {
        let err = DecodeError::Truncated {
            message: "Relation",
            what: "column type oid",
            needed: 4,
            remaining: 1,
        };
        assert_eq!(
            err.to_string(),
            "truncated pgoutput Relation message: needed 4 bytes for column type oid, 1 remaining"
        );
        assert_eq!(
            DecodeError::UnknownTag(b'X').to_string(),
            "unknown pgoutput message tag 'X' (0x58)"
        );
        assert_eq!(
            DecodeError::UnknownTag(7).to_string(),
            "unknown pgoutput message tag 0x07"
        );
    }
}

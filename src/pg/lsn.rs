//! `Lsn`: a PostgreSQL write-ahead-log position (`pg_lsn`).
//!
//! Owns parsing and printing of the textual `X/Y` form (two hexadecimal halves of a
//! 64-bit byte position, as `pg_lsn` prints it) and the total order used everywhere
//! the relay compares positions. Invariant: the value is the raw 64-bit position;
//! `Lsn::INVALID` (`0/0`) is PostgreSQL's `InvalidXLogRecPtr` and sorts before every
//! real position.

use std::fmt;
use std::str::FromStr;

/// A position in the write-ahead log.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Lsn(pub u64);

/// Serialized as its `X/Y` text (state files).
impl serde::Serialize for Lsn {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> serde::Deserialize<'de> for Lsn {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

impl Lsn {
    /// `0/0`, PostgreSQL's `InvalidXLogRecPtr`. In a standby status update it means
    /// "nothing confirmed": the walsender leaves the slot where it is.
    pub const INVALID: Lsn = Lsn(0);

    /// Whether this is `0/0`.
    pub fn is_invalid(self) -> bool {
        self.0 == 0
    }

    /// The number of WAL bytes from `earlier` to `self`, zero when `earlier` is ahead.
    pub fn bytes_since(self, earlier: Lsn) -> u64 {
        self.0.saturating_sub(earlier.0)
    }
}

impl From<u64> for Lsn {
    fn from(value: u64) -> Self {
        Lsn(value)
    }
}

impl From<Lsn> for u64 {
    fn from(value: Lsn) -> Self {
        value.0
    }
}

impl fmt::Display for Lsn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:X}/{:X}", self.0 >> 32, self.0 & 0xFFFF_FFFF)
    }
}

/// The text was not of the `X/Y` form `pg_lsn` accepts.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "invalid LSN {input:?}: expected two hexadecimal numbers separated by '/', like 16/B374D848"
)]
pub struct ParseLsnError {
    input: String,
}

impl FromStr for Lsn {
    type Err = ParseLsnError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let err = || ParseLsnError {
            input: s.to_owned(),
        };
        let (hi, lo) = s.split_once('/').ok_or_else(err)?;
        let half = |part: &str| {
            // pg_lsn accepts 1..=8 hex digits per half; from_str_radix alone would also
            // take a leading '+', which PostgreSQL rejects.
            if part.is_empty() || part.len() > 8 || !part.bytes().all(|b| b.is_ascii_hexdigit()) {
                return Err(err());
            }
            u32::from_str_radix(part, 16).map_err(|_| err())
        };
        Ok(Lsn((u64::from(half(hi)?) << 32) | u64::from(half(lo)?)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn parses_and_prints_like_pg_lsn() {
        let lsn: Lsn = "16/B374D848".parse().unwrap();
        assert_eq!(lsn.0, 0x16_B374_D848);
        assert_eq!(lsn.to_string(), "16/B374D848");
        assert_eq!("0/0".parse::<Lsn>().unwrap(), Lsn::INVALID);
        assert_eq!(Lsn(0x1_0000_0000).to_string(), "1/0");
    }

    #[test]
    fn rejects_malformed_text() {
        for bad in [
            "",
            "1",
            "/1",
            "1/",
            "1/2/3",
            "G/0",
            "+1/0",
            "123456789/0",
            " 1/0",
        ] {
            assert!(bad.parse::<Lsn>().is_err(), "{bad:?} should not parse");
        }
    }

    #[test]
    fn orders_by_position() {
        assert!("0/FFFFFFFF".parse::<Lsn>().unwrap() < "1/0".parse::<Lsn>().unwrap());
        assert_eq!(Lsn(10).bytes_since(Lsn(4)), 6);
        assert_eq!(Lsn(4).bytes_since(Lsn(10)), 0);
    }

    proptest! {
        #[test]
        fn display_parse_round_trip(v in any::<u64>()) {
            prop_assert_eq!(Lsn(v).to_string().parse::<Lsn>().unwrap(), Lsn(v));
        }
    }
}

//! PostgreSQL timestamps on the replication protocol.
//!
//! The protocol carries `timestamptz` values as signed microseconds since
//! 2000-01-01 00:00:00 UTC (the PostgreSQL epoch). This module owns the conversion
//! to and from the Unix epoch and RFC 3339 text. Invariant: conversions saturate
//! instead of panicking on values outside the representable range.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Seconds from 1970-01-01 to 2000-01-01.
const PG_EPOCH_OFFSET_SECS: i64 = 946_684_800;
const PG_EPOCH_OFFSET_MICROS: i64 = PG_EPOCH_OFFSET_SECS * 1_000_000;

/// Microseconds since the Unix epoch for a PostgreSQL timestamp.
pub fn to_unix_micros(pg_micros: i64) -> i64 {
    pg_micros.saturating_add(PG_EPOCH_OFFSET_MICROS)
}

/// The current time as a PostgreSQL timestamp (for standby status updates).
pub fn now_pg_micros() -> i64 {
    let unix = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_micros()).unwrap_or(i64::MAX))
        .unwrap_or(0);
    unix.saturating_sub(PG_EPOCH_OFFSET_MICROS)
}

/// Largest Unix time (µs) that RFC 3339 can show: 9999-12-31T23:59:59.999999Z.
const MAX_RFC3339_UNIX_MICROS: i64 = 253_402_300_799_999_999;

/// RFC 3339 text in UTC with microseconds, e.g. `2026-11-29T13:09:37.123456Z`.
/// Values outside 1970..=9999 are clamped (commit times are never there).
pub fn to_rfc3339(pg_micros: i64) -> String {
    let unix = to_unix_micros(pg_micros).clamp(0, MAX_RFC3339_UNIX_MICROS);
    let time = UNIX_EPOCH + Duration::from_micros(unix.unsigned_abs());
    humantime::format_rfc3339_micros(time).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pg_epoch_is_2000() {
        assert_eq!(to_rfc3339(0), "2000-01-01T00:00:00.000000Z");
        assert_eq!(to_unix_micros(0), 946_684_800_000_000);
        assert_eq!(to_rfc3339(1_500_000), "2000-01-01T00:00:01.500000Z");
    }

    #[test]
    fn extremes_do_not_panic() {
        assert_eq!(to_rfc3339(i64::MAX), "9999-12-31T23:59:59.999999Z");
        assert_eq!(to_rfc3339(i64::MIN), "1970-01-01T00:00:00.000000Z");
        assert!(now_pg_micros() > 0);
    }
}

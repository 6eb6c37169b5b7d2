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

/// Days from 1970-01-01 to the civil date (proleptic Gregorian).
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// Parse PostgreSQL's ISO text output of `timestamptz` / `timestamp`
/// (`2026-11-29 13:28:54.980104+00`, `… +05:30`, no zone = UTC) into milliseconds
/// since the Unix epoch. `None` for anything else (BC dates, `infinity`, other
/// DateStyles).
pub fn parse_timestamptz_millis(text: &str) -> Option<i64> {
    let num = |s: &str| -> Option<i64> {
        (!s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()))
            .then(|| s.parse().ok())
            .flatten()
    };
    let (date, rest) = text.split_once(' ').or_else(|| text.split_once('T'))?;
    let mut d = date.splitn(3, '-');
    let (year, month, day) = (num(d.next()?)?, num(d.next()?)?, num(d.next()?)?);
    // Split the zone off: the first '+' or '-' after the time of day.
    let zone_at = rest.find(['+', '-']).unwrap_or(rest.len());
    let (time, zone) = rest.split_at(zone_at);
    let mut t = time.splitn(3, ':');
    let (hour, minute) = (num(t.next()?)?, num(t.next()?)?);
    let seconds = t.next()?;
    let (sec, frac) = match seconds.split_once('.') {
        Some((s, f)) => (num(s)?, f),
        None => (num(seconds)?, ""),
    };
    let millis_frac = if frac.is_empty() {
        0
    } else {
        let digits: String = frac.chars().chain("000".chars()).take(3).collect();
        num(&digits)?
    };
    let offset_secs = if zone.is_empty() {
        0
    } else {
        let sign = if zone.starts_with('-') { -1 } else { 1 };
        let mut z = zone[1..].split(':');
        let h = num(z.next()?)?;
        let m = z.next().map(num).unwrap_or(Some(0))?;
        let s = z.next().map(num).unwrap_or(Some(0))?;
        sign * (h * 3600 + m * 60 + s)
    };
    if !(1..=12).contains(&month)
        || !(1..=31).contains(&day)
        || hour > 24
        || minute > 59
        || sec > 60
    {
        return None;
    }
    let secs =
        days_from_civil(year, month, day) * 86_400 + hour * 3600 + minute * 60 + sec - offset_secs;
    secs.checked_mul(1000)?.checked_add(millis_frac)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_postgres_iso_timestamps() {
        assert_eq!(parse_timestamptz_millis("1970-01-01 00:00:00+00"), Some(0));
        assert_eq!(
            parse_timestamptz_millis("2000-01-01 00:00:00.5+00"),
            Some(946_684_800_500)
        );
        assert_eq!(
            parse_timestamptz_millis("2026-11-29 13:28:54.980104+00"),
            Some(1_795_958_934_980)
        );
        assert_eq!(
            parse_timestamptz_millis("2026-11-29 19:58:54.980104+06:30"),
            Some(1_795_958_934_980)
        );
        assert_eq!(
            parse_timestamptz_millis("2026-11-29 10:28:54.98-03"),
            Some(1_795_958_934_980)
        );
        assert_eq!(
            parse_timestamptz_millis("2026-11-29 13:28:54.980104"),
            Some(1_795_958_934_980)
        );
        assert_eq!(parse_timestamptz_millis("infinity"), None);
        assert_eq!(parse_timestamptz_millis("2026-13-01 00:00:00+00"), None);
        assert_eq!(parse_timestamptz_millis("2026-11-29 13:28"), None);
    }

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

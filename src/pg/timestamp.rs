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

/// A PostgreSQL timestamp for microseconds since the Unix epoch.
pub fn from_unix_micros(unix_micros: i64) -> i64 {
    unix_micros.saturating_sub(PG_EPOCH_OFFSET_MICROS)
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

/// [`parse_timestamptz_millis`] over raw column bytes, with a fast path for the
/// shape PostgreSQL's ISO output always has for years 1000-9999
/// (`YYYY-MM-DD HH:MI:SS[.f…][±HH[:MI[:SS]]]`): no UTF-8 check, no splitting, no
/// allocation (this runs once per relayed row). Anything else takes the general
/// parser; both agree wherever the fast path answers (property-tested).
pub fn parse_timestamp_bytes(text: &[u8]) -> Option<i64> {
    match parse_iso_fast(text) {
        Some(ms) => Some(ms),
        None => parse_timestamptz_millis(std::str::from_utf8(text).ok()?),
    }
}

fn parse_iso_fast(b: &[u8]) -> Option<i64> {
    let digit = |i: usize| -> Option<i64> {
        let c = b.get(i)?.wrapping_sub(b'0');
        (c < 10).then_some(i64::from(c))
    };
    let two = |i: usize| Some(digit(i)? * 10 + digit(i + 1)?);
    let at = |i: usize, c: u8| b.get(i) == Some(&c);
    if !(at(4, b'-') && at(7, b'-') && at(10, b' ') && at(13, b':') && at(16, b':')) {
        return None;
    }
    let year = two(0)? * 100 + two(2)?;
    let (month, day) = (two(5)?, two(8)?);
    let (hour, minute, sec) = (two(11)?, two(14)?, two(17)?);
    let mut i = 19;
    let mut millis = 0;
    if at(i, b'.') {
        i += 1;
        let start = i;
        while let Some(d) = digit(i) {
            if i - start < 3 {
                millis = millis * 10 + d;
            }
            i += 1;
        }
        match i - start {
            0 => return None,
            n @ 1..=2 => millis *= 10i64.pow(3 - n as u32),
            _ => {}
        }
    }
    let offset_secs = match b.get(i) {
        None => 0,
        Some(&sign @ (b'+' | b'-')) => {
            let mut parts = [two(i + 1)?, 0, 0];
            i += 3;
            for part in &mut parts[1..] {
                if !at(i, b':') {
                    break;
                }
                *part = two(i + 1)?;
                i += 3;
            }
            if i != b.len() {
                return None;
            }
            let secs = parts[0] * 3600 + parts[1] * 60 + parts[2];
            if sign == b'-' {
                -secs
            } else {
                secs
            }
        }
        Some(_) => return None,
    };
    to_unix_millis([year, month, day, hour, minute, sec], millis, offset_secs)
}

/// Milliseconds since the Unix epoch of a civil date and time at a UTC offset;
/// `None` when a field is out of range (24:00 and leap second 60 are accepted, as
/// PostgreSQL prints them).
fn to_unix_millis(fields: [i64; 6], millis: i64, offset_secs: i64) -> Option<i64> {
    let [year, month, day, hour, minute, sec] = fields;
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
    secs.checked_mul(1000)?.checked_add(millis)
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
    to_unix_millis(
        [year, month, day, hour, minute, sec],
        millis_frac,
        offset_secs,
    )
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
    fn fast_path_matches_the_general_parser_on_examples() {
        for text in [
            "1970-01-01 00:00:00+00",
            "2000-01-01 00:00:00.5+00",
            "2026-11-29 13:28:54.980104+00",
            "2026-11-29 19:58:54.980104+06:30",
            "2026-11-29 10:28:54.98-03",
            "2026-11-29 13:28:54.980104",
            "1883-11-18 12:03:58-04:56:02",
            "2026-11-29 13:28:54.9",
        ] {
            assert!(parse_iso_fast(text.as_bytes()).is_some(), "{text}");
            assert_eq!(
                parse_timestamp_bytes(text.as_bytes()),
                parse_timestamptz_millis(text),
                "{text}"
            );
        }
        // Shapes only the general parser takes, or nobody.
        for text in [
            "infinity",
            "12026-11-29 13:28:54+00",
            "2026-11-29T13:28:54Z",
            "2026-11-29 13:28:54+0",
        ] {
            assert_eq!(parse_iso_fast(text.as_bytes()), None, "{text}");
            assert_eq!(
                parse_timestamp_bytes(text.as_bytes()),
                parse_timestamptz_millis(text),
                "{text}"
            );
        }
    }

    proptest::proptest! {
        /// Wherever the fast path answers, the general parser gives the same value.
        #[test]
        fn fast_path_agrees_with_the_general_parser(
            y in 1000u32..10000, mo in 0u32..14, d in 0u32..33, h in 0u32..26,
            mi in 0u32..61, s in 0u32..62, frac in proptest::option::of("[0-9]{1,7}"),
            zone in proptest::option::of((proptest::bool::ANY, 0u32..16, proptest::option::of(0u32..60)))
        ) {
            let mut text = format!("{y:04}-{mo:02}-{d:02} {h:02}:{mi:02}:{s:02}");
            if let Some(f) = frac {
                text.push('.');
                text.push_str(&f);
            }
            if let Some((neg, zh, zm)) = zone {
                text.push_str(&format!("{}{zh:02}", if neg { '-' } else { '+' }));
                if let Some(zm) = zm {
                    text.push_str(&format!(":{zm:02}"));
                }
            }
            proptest::prop_assert_eq!(parse_iso_fast(text.as_bytes()), parse_timestamptz_millis(&text), "{}", text);
        }

        /// Arbitrary bytes never panic, and never disagree.
        #[test]
        fn fast_path_on_noise(bytes in proptest::collection::vec(proptest::sample::select(b"0123456789-: .+T".to_vec()), 0..34)) {
            if let Some(ms) = parse_iso_fast(&bytes) {
                proptest::prop_assert_eq!(Some(ms), parse_timestamptz_millis(std::str::from_utf8(&bytes).unwrap()));
            }
        }
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

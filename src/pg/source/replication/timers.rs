//! The replication stream's clocks, derived from the server's `wal_sender_timeout`:
//! how often the stream sends status updates, and how long it waits on a silent
//! server before it gives the connection up.
//!
//! Invariant: the status interval is at most half the server's timeout (and at most
//! [`MAX_STATUS_INTERVAL`]), so the server hears from the stream well within it.

use std::time::Duration;

/// Upper bound for the status-update interval.
pub(super) const MAX_STATUS_INTERVAL: Duration = Duration::from_secs(10);
/// Receive timeout when the server's `wal_sender_timeout` is disabled (0): the
/// default of PostgreSQL's own `wal_receiver_timeout`.
pub(super) const DEFAULT_RECEIVE_TIMEOUT: Duration = Duration::from_secs(60);

/// Parse a `SHOW` duration such as `60s`, `2500ms`, `1min`, `1h`, `0`.
pub fn parse_pg_duration(text: &str) -> Option<Duration> {
    let text = text.trim();
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (num, unit) = text.split_at(split);
    let n: u64 = num.parse().ok()?;
    let ms = match unit.trim() {
        "" | "ms" => n,
        "s" => n.checked_mul(1000)?,
        "min" => n.checked_mul(60_000)?,
        "h" => n.checked_mul(3_600_000)?,
        "d" => n.checked_mul(86_400_000)?,
        _ => return None,
    };
    Some(Duration::from_millis(ms))
}

/// The stream's clocks, derived from the session's `wal_sender_timeout`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Timers {
    /// Between timer-driven status updates: `min(10 s, wal_sender_timeout / 2)`, so
    /// the server hears from us well within its timeout.
    pub(super) status_interval: Duration,
    /// Silence after which the connection is given up: the same limit the server
    /// applies to us, so neither side waits on a dead peer longer than the other.
    pub(super) receive_timeout: Duration,
}

impl Timers {
    pub(super) fn for_wal_sender_timeout(wal_sender_timeout: Option<Duration>) -> Self {
        match wal_sender_timeout {
            Some(t) => Timers {
                status_interval: (t / 2).min(MAX_STATUS_INTERVAL),
                receive_timeout: t,
            },
            None => Timers {
                status_interval: MAX_STATUS_INTERVAL,
                receive_timeout: DEFAULT_RECEIVE_TIMEOUT,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_from_show() {
        assert_eq!(parse_pg_duration("60s"), Some(Duration::from_secs(60)));
        assert_eq!(
            parse_pg_duration("2500ms"),
            Some(Duration::from_millis(2500))
        );
        assert_eq!(parse_pg_duration("1min"), Some(Duration::from_secs(60)));
        assert_eq!(parse_pg_duration("0"), Some(Duration::ZERO));
        assert_eq!(parse_pg_duration("1 fortnight"), None);
    }

    #[test]
    fn timers_follow_wal_sender_timeout() {
        let t = Timers::for_wal_sender_timeout(Some(Duration::from_secs(60)));
        assert_eq!(t.status_interval, Duration::from_secs(10));
        assert_eq!(t.receive_timeout, Duration::from_secs(60));
        let t = Timers::for_wal_sender_timeout(Some(Duration::from_secs(4)));
        assert_eq!(t.status_interval, Duration::from_secs(2));
        assert_eq!(t.receive_timeout, Duration::from_secs(4));
        let t = Timers::for_wal_sender_timeout(None);
        assert_eq!(t.status_interval, MAX_STATUS_INTERVAL);
        assert_eq!(t.receive_timeout, DEFAULT_RECEIVE_TIMEOUT);
    }
}

//! [`Keepalives`]: libpq's `keepalives`, `keepalives_idle`, `keepalives_interval` and
//! `keepalives_count`, the TCP keepalive settings of every TCP connection (ignored for
//! Unix sockets, as in libpq).
//!
//! Invariant: keepalives are on unless `keepalives=0`; an unset idle, interval or count
//! leaves the operating system's default; a value that is not a positive whole number
//! is refused at parse time, naming the key (libpq would fail later, at `setsockopt`).

use std::time::Duration;

/// TCP keepalive settings.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Keepalives {
    /// Whether TCP keepalives are sent at all (libpq `keepalives`, default on).
    pub enabled: bool,
    /// Idle time before the first probe (`keepalives_idle`, `TCP_KEEPIDLE`).
    pub idle: Option<Duration>,
    /// Time between probes (`keepalives_interval`, `TCP_KEEPINTVL`).
    pub interval: Option<Duration>,
    /// Unanswered probes before the connection is dropped (`keepalives_count`,
    /// `TCP_KEEPCNT`).
    pub count: Option<u32>,
}

impl Default for Keepalives {
    fn default() -> Self {
        Keepalives {
            enabled: true,
            idle: None,
            interval: None,
            count: None,
        }
    }
}

impl Keepalives {
    /// What `keepalives` may be, for error messages.
    pub(super) const ENABLED_EXPECTED: &'static str = "an integer (0 turns keepalives off)";
    /// What the other three may be, for error messages.
    pub(super) const NUMBER_EXPECTED: &'static str = "a whole number, at least 1";

    /// `keepalives`: an integer, 0 = off (libpq).
    pub(super) fn parse_enabled(text: &str) -> Option<bool> {
        text.trim().parse::<i64>().ok().map(|n| n != 0)
    }

    /// `keepalives_count`, and the seconds of `keepalives_idle` / `_interval`.
    pub(super) fn parse_number(text: &str) -> Option<u32> {
        text.trim().parse::<u32>().ok().filter(|n| *n > 0)
    }

    /// The `socket2` form, `None` when keepalives are off.
    pub fn to_socket2(&self) -> Option<socket2::TcpKeepalive> {
        if !self.enabled {
            return None;
        }
        let mut keepalive = socket2::TcpKeepalive::new();
        if let Some(idle) = self.idle {
            keepalive = keepalive.with_time(idle);
        }
        #[cfg(not(any(target_os = "openbsd", target_os = "redox", target_os = "solaris")))]
        if let Some(interval) = self.interval {
            keepalive = keepalive.with_interval(interval);
        }
        #[cfg(not(any(
            target_os = "openbsd",
            target_os = "redox",
            target_os = "solaris",
            target_os = "windows"
        )))]
        if let Some(count) = self.count {
            keepalive = keepalive.with_retries(count);
        }
        Some(keepalive)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::super::testing::{parse, parse_err};
    use super::Keepalives;

    #[test]
    fn parsed_like_libpq() {
        assert_eq!(parse("").keepalives, Keepalives::default());
        assert!(parse("").keepalives.enabled);
        let c = parse("keepalives=1 keepalives_idle=30 keepalives_interval=5 keepalives_count=3");
        assert_eq!(
            c.keepalives,
            Keepalives {
                enabled: true,
                idle: Some(Duration::from_secs(30)),
                interval: Some(Duration::from_secs(5)),
                count: Some(3),
            }
        );
        assert_eq!(
            parse("postgres://h/d?keepalives_idle=30&keepalives_interval=5&keepalives_count=3")
                .keepalives,
            c.keepalives
        );
        assert!(!parse("keepalives=0").keepalives.enabled);
        assert!(parse("keepalives=2").keepalives.enabled);
        assert!(parse("keepalives=0").keepalives.to_socket2().is_none());
        assert!(c.keepalives.to_socket2().is_some());
    }

    /// The settings reach a real socket (Linux reports them back).
    #[cfg(target_os = "linux")]
    #[test]
    fn applied_to_a_socket() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let tcp = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let c = parse("keepalives_idle=31 keepalives_interval=7 keepalives_count=4");
        let sock = socket2::SockRef::from(&tcp);
        sock.set_tcp_keepalive(&c.keepalives.to_socket2().unwrap())
            .unwrap();
        assert!(sock.keepalive().unwrap());
        assert_eq!(sock.tcp_keepalive_time().unwrap(), Duration::from_secs(31));
        assert_eq!(
            sock.tcp_keepalive_interval().unwrap(),
            Duration::from_secs(7)
        );
        assert_eq!(sock.tcp_keepalive_retries().unwrap(), 4);
    }

    #[test]
    fn bad_values_name_the_key() {
        assert_eq!(
            parse_err("keepalives=yes").to_string(),
            "invalid keepalives \"yes\" from the connection string: expected an integer \
             (0 turns keepalives off)"
        );
        for key in ["keepalives_idle", "keepalives_interval", "keepalives_count"] {
            for bad in ["0", "-1", "1.5", "x"] {
                assert_eq!(
                    parse_err(&format!("{key}={bad}")).to_string(),
                    format!(
                        "invalid {key} \"{bad}\" from the connection string: expected a whole \
                         number, at least 1"
                    )
                );
            }
        }
    }
}

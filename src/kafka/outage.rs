//! Broker trouble said once, then summarized: what the producer logs of librdkafka's
//! client errors and warning log lines.
//!
//! librdkafka repeats itself during an outage: with every broker unreachable it
//! reports `AllBrokersDown` (and a transport failure per reconnect attempt) many
//! times a second — an hour-long outage would be hundreds of thousands of log lines.
//! [`OutageLog`] turns that stream into a few lines an operator can read:
//!
//! ```text
//!  AllBrokersDown ──▶ Down          "kafka brokers unreachable" (once)
//!  other kind, first in the outage ─▶ Error     (e.g. the TLS or SASL cause, once)
//!  repeats ──▶ counted; every `every` ─▶ StillDown "still unreachable", down for, N suppressed
//!  a delivery or a metadata probe succeeds ─▶ Up "reachable again", after, N suppressed
//!  outside an outage: each kind at most once per `every`, with the count since
//! ```
//!
//! Invariants: pure (time is passed in), so the policy is unit-tested without a
//! broker; every error is counted — suppressed ones appear in the next summary or
//! recovery line; the first error of every kind is logged in full; fatal errors are
//! never suppressed (the caller logs them directly).

use std::collections::HashMap;
use std::time::{Duration, Instant};

/// How often a lasting outage (or a repeating error) is summarized.
pub const SUMMARY_EVERY: Duration = Duration::from_secs(60);

/// What to log for one event (nothing when `None` is returned).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Report {
    /// Every broker became unreachable.
    Down {
        /// The error's text.
        error: String,
    },
    /// An error to log as is: the first of its kind in an outage, or one outside
    /// an outage whose kind was quiet for `every`.
    Error {
        /// The error's text.
        error: String,
        /// Errors of this kind not logged since its last line.
        suppressed: u64,
    },
    /// The outage lasts: a periodic summary.
    StillDown {
        /// Since the outage began.
        down_for: Duration,
        /// Errors not logged since the last line about the outage.
        suppressed: u64,
        /// The newest of them.
        last_error: String,
    },
    /// A broker answered again.
    Up {
        /// How long the outage lasted.
        after: Duration,
        /// Errors not logged during the whole outage.
        suppressed: u64,
    },
}

#[derive(Debug)]
struct Outage {
    since: Instant,
    last_line: Instant,
    /// Suppressed since the last line about the outage.
    pending: u64,
    /// Suppressed during the whole outage.
    total: u64,
    /// Kinds already logged in this outage.
    seen: Vec<String>,
    last_error: String,
}

#[derive(Debug)]
struct Quiet {
    last_line: Instant,
    suppressed: u64,
}

/// The log policy for broker errors (see the module docs).
#[derive(Debug)]
pub struct OutageLog {
    every: Duration,
    outage: Option<Outage>,
    /// Outside an outage: per kind, when it was last logged.
    quiet: HashMap<String, Quiet>,
}

impl OutageLog {
    /// A policy that summarizes every `every`.
    pub fn new(every: Duration) -> Self {
        Self {
            every,
            outage: None,
            quiet: HashMap::new(),
        }
    }

    /// An error of `kind` (an error code, a log facility) with text `error` at
    /// `now`; `all_down` says it means no broker is reachable.
    pub fn on_error(
        &mut self,
        now: Instant,
        kind: &str,
        all_down: bool,
        error: String,
    ) -> Option<Report> {
        match &mut self.outage {
            None if all_down => Some(self.begin(now, kind, error)),
            None => self.outside_outage(now, kind, error),
            Some(outage) if !outage.seen.iter().any(|k| k == kind) => {
                outage.seen.push(kind.to_owned());
                Some(Report::Error {
                    error,
                    suppressed: 0,
                })
            }
            Some(outage) => {
                outage.pending += 1;
                outage.total += 1;
                outage.last_error = error;
                if now.saturating_duration_since(outage.last_line) < self.every {
                    return None;
                }
                outage.last_line = now;
                Some(Report::StillDown {
                    down_for: now.saturating_duration_since(outage.since),
                    suppressed: std::mem::take(&mut outage.pending),
                    last_error: outage.last_error.clone(),
                })
            }
        }
    }

    /// Every broker became unreachable: the outage starts. Kinds just logged (the
    /// connection failures that led here) are not logged again as its news.
    fn begin(&mut self, now: Instant, kind: &str, error: String) -> Report {
        let mut seen: Vec<String> = self
            .quiet
            .iter()
            .filter(|(_, q)| now.saturating_duration_since(q.last_line) < self.every)
            .map(|(k, _)| k.clone())
            .collect();
        seen.push(kind.to_owned());
        self.outage = Some(Outage {
            since: now,
            last_line: now,
            pending: 0,
            total: 0,
            seen,
            last_error: error.clone(),
        });
        Report::Down { error }
    }

    fn outside_outage(&mut self, now: Instant, kind: &str, error: String) -> Option<Report> {
        match self.quiet.get_mut(kind) {
            Some(q) if now.saturating_duration_since(q.last_line) < self.every => {
                q.suppressed += 1;
                None
            }
            Some(q) => {
                q.last_line = now;
                Some(Report::Error {
                    error,
                    suppressed: std::mem::take(&mut q.suppressed),
                })
            }
            None => {
                self.quiet.insert(
                    kind.to_owned(),
                    Quiet {
                        last_line: now,
                        suppressed: 0,
                    },
                );
                Some(Report::Error {
                    error,
                    suppressed: 0,
                })
            }
        }
    }

    /// A broker answered (a delivery, a metadata probe): ends an outage.
    pub fn on_up(&mut self, now: Instant) -> Option<Report> {
        let outage = self.outage.take()?;
        Some(Report::Up {
            after: now.saturating_duration_since(outage.since),
            suppressed: outage.total,
        })
    }

    /// Whether an outage is going on.
    pub fn is_down(&self) -> bool {
        self.outage.is_some()
    }
}

/// The kind of an error for [`OutageLog::on_error`]: its `source` (an error code,
/// a log facility) and its text without digits and without librdkafka's trailing
/// `(after 3ms in state CONNECT…)`, so repeats of one problem share a kind while a
/// different cause (e.g. the same failure with the hint naming the setting) does not.
pub fn kind(source: &str, text: &str) -> String {
    let text = match text.rfind(" (after ") {
        Some(at) if text.ends_with(')') => &text[..at],
        _ => text,
    };
    let mut kind = String::with_capacity(source.len() + 2 + text.len());
    kind.push_str(source);
    kind.push_str(": ");
    kind.extend(text.chars().filter(|c| !c.is_ascii_digit()));
    kind
}

/// Log `report` (target `pgoutbox::kafka`), durations rounded to seconds.
pub fn log(report: Report) {
    let secs = |d: Duration| humantime::format_duration(Duration::from_secs(d.as_secs()));
    match report {
        Report::Down { error } => tracing::warn!(
            error = %error,
            summary_every = %secs(SUMMARY_EVERY),
            "kafka brokers unreachable: records wait and the slot does not move; repeats of this error are counted, not logged"
        ),
        Report::Error {
            error,
            suppressed: 0,
        } => tracing::warn!(error = %error, "kafka client error"),
        Report::Error { error, suppressed } => {
            tracing::warn!(error = %error, suppressed, "kafka client error (repeated)")
        }
        Report::StillDown {
            down_for,
            suppressed,
            last_error,
        } => tracing::warn!(
            down_for = %secs(down_for),
            errors_suppressed = suppressed,
            last_error = %last_error,
            "kafka brokers still unreachable"
        ),
        Report::Up { after, suppressed } => tracing::info!(
            after = %secs(after),
            errors_suppressed = suppressed,
            "kafka brokers reachable again"
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DOWN: &str = "AllBrokersDown";
    const TRANSPORT: &str = "BrokerTransportFailure";

    /// Regression (issue 13 item 6): an unreachable cluster gave two lines every
    /// 50 ms. Five minutes of it now give one line, then one a minute, then one
    /// when the brokers are back.
    #[test]
    fn an_outage_is_said_once_then_summarized_then_ended() {
        let t0 = Instant::now();
        let mut log = OutageLog::new(SUMMARY_EVERY);
        let mut lines = Vec::new();
        for i in 0..12_000u64 {
            let now = t0 + Duration::from_millis(25 * i);
            let (kind, down) = if i % 2 == 0 {
                (DOWN, true)
            } else {
                (TRANSPORT, false)
            };
            lines.extend(log.on_error(now, kind, down, format!("error {i}")));
        }
        assert_eq!(
            lines[0],
            Report::Down {
                error: "error 0".into()
            }
        );
        assert_eq!(
            lines[1],
            Report::Error {
                error: "error 1".into(),
                suppressed: 0
            }
        );
        let summaries: Vec<&Report> = lines[2..].iter().collect();
        assert_eq!(
            summaries.len(),
            4,
            "one a minute over 5 minutes: {summaries:?}"
        );
        assert!(
            matches!(
                summaries[0],
                Report::StillDown { down_for, suppressed: 2399, .. } if *down_for == Duration::from_secs(60)
            ),
            "{:?}",
            summaries[0]
        );
        let up = log.on_up(t0 + Duration::from_secs(301));
        assert_eq!(
            up,
            Some(Report::Up {
                after: Duration::from_secs(301),
                suppressed: 11_998
            })
        );
        assert!(!log.is_down());
        assert_eq!(log.on_up(t0 + Duration::from_secs(302)), None, "said once");
        // A new outage is said again.
        let later = t0 + Duration::from_secs(400);
        assert!(matches!(
            log.on_error(later, DOWN, true, "again".into()),
            Some(Report::Down { .. })
        ));
    }

    #[test]
    fn repeats_share_a_kind_and_other_causes_do_not() {
        let refused = |ms: u32, more: &str| {
            format!("b:1/bootstrap: Connect to ipv4#127.0.0.1:1 failed: Connection refused (after {ms}ms in state CONNECT{more})")
        };
        assert_eq!(
            kind("FAIL", &refused(0, "")),
            kind("FAIL", &refused(12, ", 1 identical error(s) suppressed"))
        );
        assert_eq!(
            kind("AllBrokersDown", "1/1 brokers are down"),
            kind("AllBrokersDown", "0/1 brokers are down")
        );
        let ssl = "SSL handshake failed: certificate verify failed";
        assert_ne!(
            kind("FAIL", &format!("{ssl} (after 3ms in state SSL_HANDSHAKE)")),
            kind(
                "FAIL",
                &format!("{ssl}: verify that ssl.ca.location is correctly configured (after 3ms in state SSL_HANDSHAKE)")
            )
        );
        assert_ne!(kind("FAIL", "x"), kind("SSL", "x"));
    }

    #[test]
    fn outside_an_outage_each_kind_is_said_once_per_period_with_its_count() {
        let t0 = Instant::now();
        let mut log = OutageLog::new(Duration::from_secs(60));
        let at = |s: u64| t0 + Duration::from_secs(s);
        assert!(log.on_error(at(0), TRANSPORT, false, "a".into()).is_some());
        assert_eq!(log.on_error(at(10), TRANSPORT, false, "b".into()), None);
        assert!(log.on_error(at(10), "SSL", false, "tls".into()).is_some());
        assert_eq!(log.on_error(at(20), TRANSPORT, false, "c".into()), None);
        assert_eq!(
            log.on_error(at(61), TRANSPORT, false, "d".into()),
            Some(Report::Error {
                error: "d".into(),
                suppressed: 2
            })
        );
        assert!(!log.is_down());
        assert_eq!(log.on_up(at(62)), None, "no outage, nothing to end");
        // The failures that led to an outage are not news again inside it.
        assert!(matches!(
            log.on_error(at(63), DOWN, true, "down".into()),
            Some(Report::Down { .. })
        ));
        assert_eq!(log.on_error(at(63), TRANSPORT, false, "e".into()), None);
        assert!(log
            .on_error(at(63), "Authentication", false, "sasl".into())
            .is_some());
    }
}

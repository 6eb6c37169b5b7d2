//! Poll mode's metrics (`pgoutbox run --source poll`): the backlog of unpublished
//! rows, batches, claimed and published rows, and what woke each poll.
//!
//! Invariants: lock-free updates; the backlog gauges are whatever the last backlog
//! query saw (every few seconds, by the active relay only), and a standby leaves
//! them untouched.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};

pub const BACKLOG_ROWS: &str = "pgoutbox_poll_backlog_rows";
pub const BACKLOG_OLDEST_AGE: &str = "pgoutbox_poll_backlog_oldest_age_seconds";
pub const BATCHES: &str = "pgoutbox_poll_batches_total";
pub const ROWS_CLAIMED: &str = "pgoutbox_poll_rows_claimed_total";
pub const ROWS_PUBLISHED: &str = "pgoutbox_poll_rows_published_total";
pub const WAKEUPS: &str = "pgoutbox_poll_wakeups_total";

/// Why a poll ran.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wake {
    /// A NOTIFY from the insert trigger.
    Notify,
    /// `--poll-interval` passed without one (the fallback).
    Interval,
    /// The last batch was full: more rows wait, poll again at once.
    Drain,
}

impl Wake {
    /// Every cause, in the order of the counter's series.
    pub const ALL: [Wake; 3] = [Wake::Notify, Wake::Interval, Wake::Drain];

    /// The label value.
    pub fn name(self) -> &'static str {
        match self {
            Wake::Notify => "notify",
            Wake::Interval => "interval",
            Wake::Drain => "drain",
        }
    }
}

/// The counters and gauges of poll mode.
#[derive(Debug, Default)]
pub struct PollMetrics {
    backlog_rows: AtomicU64,
    /// Age of the oldest unpublished row in ms; `u64::MAX`: unknown.
    backlog_age_ms: AtomicU64,
    batches: AtomicU64,
    claimed: AtomicU64,
    published: AtomicU64,
    wakeups: [AtomicU64; Wake::ALL.len()],
    /// Whether poll mode runs at all (the series are only rendered then).
    on: std::sync::atomic::AtomicBool,
}

impl PollMetrics {
    /// The backlog query's answer.
    pub fn set_backlog(&self, rows: u64, oldest_age: Option<std::time::Duration>) {
        self.on.store(true, Ordering::Relaxed);
        self.backlog_rows.store(rows, Ordering::Relaxed);
        let ms = oldest_age.map_or(0, |a| u64::try_from(a.as_millis()).unwrap_or(u64::MAX));
        self.backlog_age_ms.store(ms, Ordering::Relaxed);
    }

    /// A batch of `claimed` rows was claimed and `published` of them marked
    /// (the others were skipped by `--on-invalid skip`, which marks them too).
    pub fn batch(&self, claimed: u64, published: u64) {
        self.batches.fetch_add(1, Ordering::Relaxed);
        self.claimed.fetch_add(claimed, Ordering::Relaxed);
        self.published.fetch_add(published, Ordering::Relaxed);
    }

    /// A poll ran because of `cause`.
    pub fn woke(&self, cause: Wake) {
        self.on.store(true, Ordering::Relaxed);
        let i = Wake::ALL.iter().position(|w| *w == cause).unwrap_or(0);
        self.wakeups[i].fetch_add(1, Ordering::Relaxed);
    }

    /// Append the series (nothing in logical mode).
    pub fn render(&self, out: &mut String) {
        if !self.on.load(Ordering::Relaxed) {
            return;
        }
        let load = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let age = load(&self.backlog_age_ms) as f64 / 1000.0;
        for (name, kind, help, value) in [
            (
                BACKLOG_ROWS,
                "gauge",
                "Unpublished outbox rows (published_at IS NULL), as of the last backlog query.",
                load(&self.backlog_rows).to_string(),
            ),
            (
                BACKLOG_OLDEST_AGE,
                "gauge",
                "Age of the oldest unpublished outbox row by its timestamp column (0: none).",
                age.to_string(),
            ),
            (
                BATCHES,
                "counter",
                "Poll batches committed.",
                load(&self.batches).to_string(),
            ),
            (
                ROWS_CLAIMED,
                "counter",
                "Outbox rows claimed by committed poll batches.",
                load(&self.claimed).to_string(),
            ),
            (
                ROWS_PUBLISHED,
                "counter",
                "Outbox rows marked published (or deleted) after Kafka acked them.",
                load(&self.published).to_string(),
            ),
        ] {
            let _ = writeln!(
                out,
                "# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {value}"
            );
        }
        let _ = writeln!(
            out,
            "# HELP {WAKEUPS} Polls by what started them: notify (insert trigger), interval (--poll-interval fallback), drain (the last batch was full).\n# TYPE {WAKEUPS} counter"
        );
        for (cause, n) in Wake::ALL.iter().zip(&self.wakeups) {
            let _ = writeln!(out, "{WAKEUPS}{{cause=\"{}\"}} {}", cause.name(), load(n));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_nothing_until_poll_mode_runs_then_every_series() {
        let m = PollMetrics::default();
        let mut out = String::new();
        m.render(&mut out);
        assert!(out.is_empty());
        m.woke(Wake::Notify);
        m.woke(Wake::Drain);
        m.batch(10, 9);
        m.set_backlog(42, Some(std::time::Duration::from_millis(1500)));
        m.render(&mut out);
        assert!(out.contains("pgoutbox_poll_backlog_rows 42\n"), "{out}");
        assert!(
            out.contains("pgoutbox_poll_backlog_oldest_age_seconds 1.5\n"),
            "{out}"
        );
        assert!(
            out.contains("pgoutbox_poll_rows_claimed_total 10\n"),
            "{out}"
        );
        assert!(
            out.contains("pgoutbox_poll_rows_published_total 9\n"),
            "{out}"
        );
        assert!(
            out.contains("pgoutbox_poll_wakeups_total{cause=\"interval\"} 0\n"),
            "{out}"
        );
        assert!(
            out.contains("pgoutbox_poll_wakeups_total{cause=\"drain\"} 1\n"),
            "{out}"
        );
    }
}

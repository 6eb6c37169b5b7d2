//! Exactly-once's metrics (`--delivery exactly-once`): Kafka transactions
//! committed and failed, the records they carried, and the time their commits took.
//!
//! Invariants: lock-free updates; nothing is rendered until exactly-once runs (an
//! at-least-once relay's exposition is unchanged); records per transaction is
//! `records / committed`, the mean commit latency `commit_seconds / committed`.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

pub const COMMITTED: &str = "pgoutbox_kafka_transactions_committed_total";
pub const FAILED: &str = "pgoutbox_kafka_transactions_failed_total";
pub const RECORDS: &str = "pgoutbox_kafka_transaction_records_total";
pub const COMMIT_SECONDS: &str = "pgoutbox_kafka_transaction_commit_seconds_total";

/// The counters of exactly-once delivery.
#[derive(Debug, Default)]
pub struct TransactionMetrics {
    on: AtomicBool,
    committed: AtomicU64,
    failed: AtomicU64,
    records: AtomicU64,
    commit_micros: AtomicU64,
}

impl TransactionMetrics {
    /// Exactly-once runs: render the series from now on.
    pub fn enable(&self) {
        self.on.store(true, Ordering::Relaxed);
    }

    /// A transaction of `records` records (its watermark not counted) committed,
    /// the commit taking `took`.
    pub fn committed(&self, records: u64, took: Duration) {
        self.committed.fetch_add(1, Ordering::Relaxed);
        self.records.fetch_add(records, Ordering::Relaxed);
        let micros = u64::try_from(took.as_micros()).unwrap_or(u64::MAX);
        self.commit_micros.fetch_add(micros, Ordering::Relaxed);
    }

    /// A transaction could not commit (the next session aborts it and resumes
    /// after the last committed watermark).
    pub fn failed(&self) {
        self.failed.fetch_add(1, Ordering::Relaxed);
    }

    /// Append the series (nothing unless exactly-once runs).
    pub fn render(&self, out: &mut String) {
        if !self.on.load(Ordering::Relaxed) {
            return;
        }
        let load = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let seconds = load(&self.commit_micros) as f64 / 1e6;
        for (name, help, value) in [
            (
                COMMITTED,
                "Kafka transactions committed (each with its watermark).",
                load(&self.committed).to_string(),
            ),
            (
                FAILED,
                "Kafka transactions that could not commit; the next session aborted them and resumed after the last committed watermark.",
                load(&self.failed).to_string(),
            ),
            (
                RECORDS,
                "Records in committed Kafka transactions (watermarks not counted).",
                load(&self.records).to_string(),
            ),
            (
                COMMIT_SECONDS,
                "Time spent committing Kafka transactions (flush and commit).",
                seconds.to_string(),
            ),
        ] {
            let _ = writeln!(
                out,
                "# HELP {name} {help}\n# TYPE {name} counter\n{name} {value}"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_nothing_until_enabled_then_every_series() {
        let m = TransactionMetrics::default();
        let mut out = String::new();
        m.render(&mut out);
        assert!(out.is_empty());
        m.enable();
        m.committed(120, Duration::from_millis(15));
        m.committed(80, Duration::from_millis(5));
        m.failed();
        m.render(&mut out);
        assert!(out.contains(&format!("{COMMITTED} 2\n")), "{out}");
        assert!(out.contains(&format!("{FAILED} 1\n")), "{out}");
        assert!(out.contains(&format!("{RECORDS} 200\n")), "{out}");
        assert!(out.contains(&format!("{COMMIT_SECONDS} 0.02\n")), "{out}");
    }
}

//! Commit → broker-ack latency, as a log-scale histogram.
//!
//! Owns the measurement the product promises on ("milliseconds, not a poll
//! interval"): for every acked record, the time from its transaction's commit
//! (the commit timestamp pgoutput sends in Begin, from the server's clock) to the
//! delivery report. Invariant: recording is O(1) and allocation-free; quantiles are
//! reported as the upper bound of their bucket (≤ 19 % above the true value).

use std::time::Duration;

/// Buckets per power of two (resolution 2^(1/4) ≈ 1.19×).
const SUB: u32 = 4;
/// Covers 1 µs .. 2^40 µs (≈ 12.7 days).
const BUCKETS: usize = 40 * SUB as usize + 1;

/// A latency histogram in microseconds.
#[derive(Debug, Clone)]
pub struct LatencyHistogram {
    counts: Vec<u64>,
    total: u64,
}

impl Default for LatencyHistogram {
    fn default() -> Self {
        Self {
            counts: vec![0; BUCKETS],
            total: 0,
        }
    }
}

fn bucket(micros: u64) -> usize {
    if micros <= 1 {
        return 0;
    }
    // Precision loss of the u64 → f64 conversion is far below a bucket's width.
    let log2 = (micros.min(1 << 40) as f64).log2();
    ((log2 * f64::from(SUB)).ceil() as usize).min(BUCKETS - 1)
}

fn upper_bound(bucket: usize) -> Duration {
    let micros = 2f64.powf(bucket as f64 / f64::from(SUB));
    Duration::from_micros(micros.round() as u64)
}

impl LatencyHistogram {
    /// Record one sample (negative clock skew counts as zero).
    pub fn record_micros(&mut self, micros: i64) {
        let idx = bucket(u64::try_from(micros).unwrap_or(0));
        self.counts[idx] += 1;
        self.total += 1;
    }

    /// Number of samples.
    pub fn count(&self) -> u64 {
        self.total
    }

    /// The `q`-quantile (0.0..=1.0), `None` without samples.
    pub fn quantile(&self, q: f64) -> Option<Duration> {
        if self.total == 0 {
            return None;
        }
        let rank = ((q.clamp(0.0, 1.0) * self.total as f64).ceil() as u64).max(1);
        let mut seen = 0;
        for (i, c) in self.counts.iter().enumerate() {
            seen += c;
            if seen >= rank {
                return Some(upper_bound(i));
            }
        }
        Some(upper_bound(BUCKETS - 1))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_are_within_a_bucket() {
        let mut h = LatencyHistogram::default();
        for ms in 1..=100 {
            h.record_micros(ms * 1000);
        }
        let p50 = h.quantile(0.5).unwrap().as_micros() as f64;
        let p99 = h.quantile(0.99).unwrap().as_micros() as f64;
        assert!((50_000.0..=50_000.0 * 1.19).contains(&p50), "{p50}");
        assert!((99_000.0..=99_000.0 * 1.19).contains(&p99), "{p99}");
        assert_eq!(h.count(), 100);
    }

    #[test]
    fn extremes_do_not_panic() {
        let mut h = LatencyHistogram::default();
        assert_eq!(h.quantile(0.5), None);
        h.record_micros(-5);
        h.record_micros(i64::MAX);
        assert!(h.quantile(1.0).is_some());
    }
}

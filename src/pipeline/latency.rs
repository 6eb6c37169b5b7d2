//! Commit → broker-ack latency, as a log-linear (HDR-style) histogram.
//!
//! Owns the measurement the product promises on ("milliseconds, not a poll
//! interval"): for every acked record, the time from its transaction's commit
//! (the commit timestamp pgoutput sends in Begin, from the server's clock) to the
//! delivery report.
//!
//! Layout, in microseconds: values below 2^[`SUB_BITS`] (32 µs) each have a bucket
//! of their own; above, every power of two is split into 2^[`SUB_BITS`] equal
//! sub-buckets, so a bucket's width is at most 1/32 of its lower bound:
//!
//! ```text
//!  0 1 2 … 31 | 32 33 … 63 | 64 66 … 126 | 128 132 … 252 | … | 2^39 … 2^40−2^34
//!  exact        width 1       width 2       width 4              width 2^34
//! ```
//!
//! Invariants: recording is O(1) (a leading-zeros count and a shift) and
//! allocation-free; values past 2^40 µs (≈ 12.7 days) land in the last bucket. A
//! quantile is reported as the largest value of its bucket: never below the true
//! sample, and at most [`RESOLUTION`] (3.125 %) above it.

use std::time::Duration;

/// Sub-buckets per power of two, as a power of two (2^5 = 32).
const SUB_BITS: u32 = 5;
const SUB: u64 = 1 << SUB_BITS;
/// Highest power of two covered: values up to 2^40 − 1 µs.
const MAX_EXP: u32 = 40;
const MAX_MICROS: u64 = (1 << MAX_EXP) - 1;
/// The exact buckets below `SUB`, then `SUB` per octave from 2^SUB_BITS to 2^MAX_EXP.
const BUCKETS: usize = (SUB + (MAX_EXP - SUB_BITS) as u64 * SUB) as usize;

/// Worst-case relative error of a reported quantile (upward only): 1/32.
pub const RESOLUTION: f64 = 1.0 / SUB as f64;

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

/// The bucket of a value: exact below `SUB`, else octave and top `SUB_BITS` bits
/// after the leading one.
fn bucket(micros: u64) -> usize {
    let v = micros.min(MAX_MICROS);
    if v < SUB {
        return v as usize;
    }
    let exp = u64::BITS - 1 - v.leading_zeros(); // SUB_BITS ..= MAX_EXP - 1
    let shift = exp - SUB_BITS;
    let sub = (v >> shift) - SUB; // 0 .. SUB
    (SUB + u64::from(shift) * SUB + sub) as usize
}

/// The largest value (µs) that falls into `bucket`.
fn upper_bound(bucket: usize) -> u64 {
    let b = bucket as u64;
    if b < SUB {
        return b;
    }
    let shift = (b - SUB) / SUB;
    let sub = (b - SUB) % SUB;
    ((SUB + sub + 1) << shift) - 1
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

    /// The `q`-quantile (0.0..=1.0), `None` without samples: the largest value of
    /// the bucket holding the sample of rank ⌈q·n⌉ (see [`RESOLUTION`]).
    pub fn quantile(&self, q: f64) -> Option<Duration> {
        if self.total == 0 {
            return None;
        }
        let rank = ((q.clamp(0.0, 1.0) * self.total as f64).ceil() as u64).max(1);
        let mut seen = 0;
        let idx = self
            .counts
            .iter()
            .position(|c| {
                seen += c;
                seen >= rank
            })
            .unwrap_or(BUCKETS - 1);
        Some(Duration::from_micros(upper_bound(idx)))
    }

    /// [`Self::quantile`] in microseconds, 0 without samples (for log fields).
    pub fn quantile_micros(&self, q: f64) -> u128 {
        self.quantile(q).map_or(0, |d| d.as_micros())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The exact quantile of sorted samples, same rank rule as the histogram.
    fn exact(sorted: &[u64], q: f64) -> u64 {
        let rank = ((q * sorted.len() as f64).ceil() as usize).max(1);
        sorted[rank - 1]
    }

    /// Every reported quantile is ≥ the true one and within RESOLUTION above it.
    fn assert_within_resolution(samples: &mut [u64]) {
        let mut h = LatencyHistogram::default();
        for &s in samples.iter() {
            h.record_micros(s as i64);
        }
        samples.sort_unstable();
        for q in [0.0, 0.1, 0.5, 0.9, 0.99, 0.999, 1.0] {
            let want = exact(samples, q) as f64;
            let got = h.quantile(q).unwrap().as_micros() as f64;
            assert!(
                got >= want && got <= want * (1.0 + RESOLUTION),
                "q={q}: got {got}, true {want}"
            );
        }
        assert_eq!(h.count(), samples.len() as u64);
    }

    /// A small deterministic generator (xorshift64*), so the tests need no crate.
    fn rng(seed: u64) -> impl FnMut() -> f64 {
        let mut x = seed;
        move || {
            x ^= x >> 12;
            x ^= x << 25;
            x ^= x >> 27;
            (x.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 11) as f64 / (1u64 << 53) as f64
        }
    }

    #[test]
    fn every_bucket_bound_is_consistent() {
        // Each bucket's largest value maps to it, the next value to the next bucket,
        // and its width is at most RESOLUTION of its smallest value.
        let mut lower = 0;
        for b in 0..BUCKETS {
            let upper = upper_bound(b);
            assert_eq!(bucket(upper), b, "upper bound of bucket {b}");
            assert_eq!(bucket(lower), b, "lower bound of bucket {b}");
            assert!(
                (upper - lower) as f64 <= lower as f64 * RESOLUTION,
                "bucket {b}"
            );
            lower = upper + 1;
        }
        assert_eq!(
            lower,
            MAX_MICROS + 1,
            "buckets cover 0 ..= 2^40 − 1 µs without gaps"
        );
    }

    #[test]
    fn uniform_milliseconds() {
        let mut s: Vec<u64> = (1..=100).map(|ms| ms * 1000).collect();
        assert_within_resolution(&mut s);
    }

    #[test]
    fn log_normal_latencies_around_a_millisecond() {
        // exp(N(ln 1000 µs, 1)) by Box–Muller: a long-tailed latency distribution.
        let mut u = rng(0x5eed);
        let mut s: Vec<u64> = (0..50_000)
            .map(|_| {
                let (a, b) = (u().max(1e-12), u());
                let n = (-2.0 * a.ln()).sqrt() * (std::f64::consts::TAU * b).cos();
                (1000.0 * n.exp()).round() as u64
            })
            .collect();
        assert_within_resolution(&mut s);
    }

    #[test]
    fn close_quantiles_are_told_apart() {
        // 99 % at 5.00 ms, 1 % at 5.40 ms (+8 %): the old ±19 % buckets reported the
        // same p99 for both; 1/32 resolution must not.
        let mut h = LatencyHistogram::default();
        for i in 0..10_000 {
            h.record_micros(if i % 100 == 0 { 5_400 } else { 5_000 });
        }
        let p98 = h.quantile(0.98).unwrap().as_micros();
        let p999 = h.quantile(0.999).unwrap().as_micros();
        assert!(
            p98 < 5_000 * 33 / 32 && p999 >= 5_400,
            "p98 {p98}, p99.9 {p999}"
        );
    }

    #[test]
    fn small_values_are_exact() {
        let mut s: Vec<u64> = (0..32).collect();
        let mut h = LatencyHistogram::default();
        s.iter().for_each(|&v| h.record_micros(v as i64));
        assert_eq!(h.quantile(1.0), Some(Duration::from_micros(31)));
        assert_within_resolution(&mut s);
    }

    #[test]
    fn extremes_do_not_panic() {
        let mut h = LatencyHistogram::default();
        assert_eq!(h.quantile(0.5), None);
        h.record_micros(-5);
        assert_eq!(h.quantile(0.0), Some(Duration::ZERO));
        h.record_micros(i64::MAX);
        assert_eq!(h.quantile(1.0), Some(Duration::from_micros(MAX_MICROS)));
        assert_eq!(h.quantile(f64::NAN).map(|_| ()), Some(()));
    }
}

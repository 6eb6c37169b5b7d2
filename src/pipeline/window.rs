//! The in-flight window in use ([`Window`]): how many records may await an ack at
//! once, never more than `--max-in-flight` (the cap).
//!
//! A small record in flight costs about 1 KB (librdkafka's copy, its headers, its
//! share of the request buffers), and records beyond what keeps the broker busy buy
//! no throughput: they wait in librdkafka's queue, and the peak memory of a drain
//! then follows how full it happened to get the window. So the window in use is
//! what the broker needs, between `min(MIN_RECORDS, cap)` and the cap:
//!
//! ```text
//!  window = max(MIN_RECORDS, PER_PARTITION × partitions, 2 × ack rate × round trip)
//! ```
//!
//! - [`MIN_RECORDS`]: a window of 1,000 drained one-row and ten-row transactions
//!   into a topic of three partitions as fast as one of 10,000, on Apache Kafka and
//!   on tansu (`bench/run.sh memory`, 2026-12-07);
//! - *partitions*: how many distinct partitions the acks of the last 10–20 s went
//!   to (a linear-counting estimate over a 4,096-bit set: exact enough below a few
//!   thousand). Kafka batches per partition: a partition written to needs records of
//!   its own in each request, so the window grows with the partitions, reaching the
//!   default cap at 40;
//! - *ack rate*: acks per second over the last period (at least [`PERIOD`] and the
//!   round trip, ended by an ack);
//! - *round trip*: the shortest hand-over → ack time of the last 1–2 minutes
//!   (librdkafka's clock, [`Delivery::in_kafka`]): what a record takes when nothing
//!   queues ahead of it. It is never below the broker's true round trip: no record
//!   is acked faster than one.
//!
//! Little's law: a broker that acks R records a second, each a round trip L after
//! it was handed over, is kept busy by R × L records in flight. Where that product
//! binds (a broker far away), the window at most doubles per period: the rate a
//! window W measures is W / latency, so the next window is 2 W × round trip /
//! latency — twice W while nothing queues, and back toward 2 R L as soon as records
//! wait in librdkafka (latency above the round trip). On a near broker the product
//! is small and the partitions term decides.
//!
//! Invariants: the window is within `[min(MIN_RECORDS, cap), cap]`; it moves only
//! on an ack (no timer; an outage freezes it where it was); a new partition raises
//! it at once, anything else at a period's end; an ack costs a bit set, a compare
//! and, at a period's end, a division.
//!
//! [`Delivery::in_kafka`]: crate::kafka::producer::Delivery::in_kafka

use std::time::Duration;

/// The smallest window (see the module doc).
pub const MIN_RECORDS: usize = 1_000;

/// Records in flight per partition written to (see the module doc).
pub const PER_PARTITION: usize = 250;

/// The shortest span the ack rate is measured over (µs); a period also lasts at
/// least the round trip, so that it holds a whole round of acks (a far broker's
/// acks come in bursts a round trip apart, each spread over its responses: a
/// shorter period would end inside a burst and read the rest of it as the rate).
pub const PERIOD: i64 = 100_000;

/// How long a partition counts as written to after its last ack: one to two of
/// these (µs).
const SPREAD_SPAN: i64 = 10_000_000;

/// How long a round trip counts as the shortest: one to two of these (µs).
const TRIP_SPAN: i64 = 60_000_000;

/// Bits of the set the partitions are counted in.
const BITS: usize = 4096;

/// Headroom over Little's product: room for the rate to double in a period.
const HEADROOM: u128 = 2;

/// The window in use (see the module doc).
#[derive(Debug, Clone)]
pub struct Window {
    /// The window in use before the cap is applied.
    records: usize,
    spread: Spread,
    trip: RecentMin,
    /// Start of the period (µs since 2000-01-01) and the acks in it.
    period: Option<(i64, u64)>,
}

impl Default for Window {
    fn default() -> Self {
        Self {
            records: MIN_RECORDS,
            spread: Spread::default(),
            trip: RecentMin::default(),
            period: None,
        }
    }
}

impl Window {
    /// The window before any ack: [`MIN_RECORDS`].
    pub fn new() -> Self {
        Self::default()
    }

    /// The window in use under `cap` (`--max-in-flight`).
    pub fn records(&self, cap: usize) -> usize {
        self.records.clamp(MIN_RECORDS.min(cap), cap.max(1))
    }

    /// The partitions the recent acks went to (estimated).
    pub fn partitions(&self) -> usize {
        self.spread.estimate()
    }

    /// The shortest recent hand-over → ack time, if any ack carried one.
    pub fn round_trip(&self) -> Option<Duration> {
        self.trip.min().map(Duration::from_micros)
    }

    /// An ack of a record placed at `placement` (a hash of its topic and partition,
    /// see [`placement`](crate::kafka::producer::placement); `0`: unknown), handed
    /// over `in_kafka` before, served at `now` (µs since 2000-01-01).
    pub fn acked(&mut self, placement: u64, in_kafka: Option<Duration>, now: i64) {
        if placement != 0 && self.spread.add(placement, now) {
            self.records = self.records.max(self.floor());
        }
        if let Some(trip) = in_kafka {
            self.trip
                .add(u64::try_from(trip.as_micros()).unwrap_or(u64::MAX), now);
        }
        // The ack that opens a period marks its start; the rate is the acks after it
        // over the time since.
        let Some((start, acks)) = &mut self.period else {
            self.period = Some((now, 0));
            return;
        };
        *acks += 1;
        let (elapsed, acks) = (now - *start, *acks);
        if elapsed < 0 {
            // The wall clock stepped back: measure afresh.
            self.period = Some((now, 0));
        } else if elapsed >= PERIOD.max(self.trip.min().map_or(0, |t| t as i64)) {
            self.period = Some((now, 0));
            self.records = self.floor().max(self.little(acks, elapsed));
        }
    }

    /// [`PER_PARTITION`] records for each partition written to, at least
    /// [`MIN_RECORDS`].
    fn floor(&self) -> usize {
        PER_PARTITION
            .saturating_mul(self.spread.estimate())
            .max(MIN_RECORDS)
    }

    /// Twice the records `acks` in `elapsed` µs need in flight at the recent round
    /// trip (0 before any round trip is known).
    fn little(&self, acks: u64, elapsed: i64) -> usize {
        let (Some(trip), Ok(elapsed)) = (self.trip.min(), u128::try_from(elapsed)) else {
            return 0;
        };
        let want = HEADROOM * u128::from(acks) * u128::from(trip) / elapsed.max(1);
        usize::try_from(want).unwrap_or(usize::MAX)
    }
}

/// The distinct placements of the last one to two [`SPREAD_SPAN`]s: two bit sets,
/// the older cleared and made current when the current one is a span old.
#[derive(Debug, Clone)]
struct Spread {
    sets: [[u64; BITS / 64]; 2],
    ones: [usize; 2],
    current: usize,
    since: Option<i64>,
}

impl Default for Spread {
    fn default() -> Self {
        Self {
            sets: [[0; BITS / 64]; 2],
            ones: [0; 2],
            current: 0,
            since: None,
        }
    }
}

impl Spread {
    /// Count `placement` at `now`; `true` if the estimate may have grown.
    fn add(&mut self, placement: u64, now: i64) -> bool {
        if span_ended(&mut self.since, now, SPREAD_SPAN) {
            self.current ^= 1;
            self.sets[self.current] = [0; BITS / 64];
            self.ones[self.current] = 0;
        }
        // The top 12 bits of splitmix64's finalizer: as if drawn at random, which
        // linear counting assumes.
        let mut z = placement;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        let bit = ((z ^ (z >> 31)) >> 52) as usize;
        let (word, mask) = (bit / 64, 1u64 << (bit % 64));
        let set = &mut self.sets[self.current];
        if set[word] & mask != 0 {
            return false;
        }
        set[word] |= mask;
        self.ones[self.current] += 1;
        self.ones[self.current] > self.ones[self.current ^ 1]
    }

    /// Linear counting: `n ≈ -m ln(1 - ones / m)` over the fuller set.
    fn estimate(&self) -> usize {
        let ones = self.ones[0].max(self.ones[1]);
        if ones >= BITS {
            return usize::MAX;
        }
        let m = BITS as f64;
        (-m * (1.0 - ones as f64 / m).ln()).round() as usize
    }
}

/// Whether the bucket begun at `since` (the first call's `now`) is `span` old at
/// `now`, or `now` is before it (the wall clock stepped back): then the next one
/// begins at `now`.
fn span_ended(since: &mut Option<i64>, now: i64, span: i64) -> bool {
    let begun = *since.get_or_insert(now);
    let ended = now - begun >= span || now < begun;
    if ended {
        *since = Some(now);
    }
    ended
}

/// The smallest value of the last one to two [`TRIP_SPAN`]s.
#[derive(Debug, Clone, Default)]
struct RecentMin {
    mins: [Option<u64>; 2],
    current: usize,
    since: Option<i64>,
}

impl RecentMin {
    fn add(&mut self, value: u64, now: i64) {
        if span_ended(&mut self.since, now, TRIP_SPAN) {
            self.current ^= 1;
            self.mins[self.current] = None;
        }
        let min = &mut self.mins[self.current];
        *min = Some(min.map_or(value, |m| m.min(value)));
    }

    fn min(&self) -> Option<u64> {
        match self.mins {
            [Some(a), Some(b)] => Some(a.min(b)),
            [a, b] => a.or(b),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: i64 = 1_000;

    fn place(topic: u64, partition: u64) -> u64 {
        (topic << 32 | partition) + 1
    }

    /// An ack at `now` that opens the first period.
    fn primed() -> Window {
        let mut w = Window::new();
        w.acked(place(1, 0), None, 0);
        w
    }

    /// `n` acks evenly over the `span` µs after `start` (the last at `start + span`),
    /// round-robin over `partitions`, each `trip` µs after its hand-over; returns
    /// the time of the last.
    fn acks(w: &mut Window, start: i64, span: i64, n: u64, partitions: u64, trip: i64) -> i64 {
        for i in 1..=n {
            let now = start + span * i as i64 / n as i64;
            let trip = Duration::from_micros(trip as u64);
            w.acked(place(1, i % partitions), Some(trip), now);
        }
        start + span
    }

    #[test]
    fn starts_at_the_smallest_window_under_any_cap() {
        let w = Window::new();
        assert_eq!(w.records(10_000), MIN_RECORDS);
        assert_eq!(w.records(200), 200, "the cap wins");
        assert_eq!(w.records(0), 1, "never zero");
    }

    #[test]
    fn a_near_broker_keeps_the_smallest_window() {
        // 50,000 acks/s, each 2 ms after its hand-over: Little's product is 100.
        let mut w = primed();
        let mut now = 0;
        for _ in 0..20 {
            now = acks(&mut w, now, 100 * MS, 5_000, 1, 2 * MS);
        }
        assert_eq!(w.records(10_000), MIN_RECORDS);
        assert_eq!(w.partitions(), 1);
        assert_eq!(w.round_trip(), Some(Duration::from_millis(2)));
    }

    #[test]
    fn grows_with_the_partitions_written_to_and_at_once() {
        let mut w = Window::new();
        acks(&mut w, 0, 10 * MS, 3, 3, MS);
        assert_eq!(w.records(100_000), MIN_RECORDS, "3 × 250 < 1,000");
        acks(&mut w, 10 * MS, 10 * MS, 7, 7, MS);
        assert_eq!(w.partitions(), 7);
        let window = w.records(100_000);
        assert_eq!(window, 7 * PER_PARTITION, "no period had to end");
        assert_eq!(w.records(1_500), 1_500, "capped");
    }

    #[test]
    fn counts_a_thousand_partitions_within_a_few_percent() {
        let mut w = Window::new();
        for topic in 0..100 {
            for partition in 0..10 {
                w.acked(place(topic, partition), None, 0);
            }
        }
        let n = w.partitions();
        assert!((960..=1_040).contains(&n), "estimated {n} of 1,000");
    }

    #[test]
    fn a_far_broker_doubles_the_window_each_period_up_to_the_cap() {
        // Round trip 50 ms, nothing queued: a window W acks 2 W records a period.
        assert_eq!(MIN_RECORDS, 1_000);
        let mut w = primed();
        let mut now = 0;
        let mut seen = vec![w.records(10_000)];
        for _ in 0..6 {
            let window = w.records(10_000) as u64;
            now = acks(&mut w, now, 100 * MS, window * 2, 1, 50 * MS);
            seen.push(w.records(10_000));
        }
        assert_eq!(seen, [1_000, 2_000, 4_000, 8_000, 10_000, 10_000, 10_000]);
        // Under a larger cap: 2 × (200,000 acks/s of the 10,000 window) × 50 ms.
        assert_eq!(w.records(1_000_000), 20_000);
        acks(&mut w, now, 100 * MS, 40_000, 1, 50 * MS);
        assert_eq!(w.records(1_000_000), 40_000);
    }

    #[test]
    fn a_far_brokers_bursts_of_acks_still_double_it_each_round_trip() {
        // Round trip 1 s; each round's acks arrive spread over 150 ms (responses of
        // several requests), a round trip after the window was handed over.
        let mut w = primed();
        let mut seen = vec![];
        for round in 1..=4i64 {
            let window = w.records(10_000) as u64;
            acks(&mut w, round * 1_000 * MS, 150 * MS, window, 1, 1_000 * MS);
            seen.push(w.records(10_000));
        }
        // Each round's first ack ends a period that held the round before it; that
        // round was sized by the window of the period before, so the window doubles
        // every other round trip — never more than twice what the acks showed.
        assert_eq!(seen, [1_000, 2_000, 2_002, 4_001]);
    }

    #[test]
    fn records_queueing_in_the_client_shrink_it_back() {
        // Grown on a far broker's 20 ms round trip, then the broker becomes the
        // limit: acks at 20,000/s whatever the window, so latency rises with it.
        let mut w = primed();
        let now = acks(&mut w, 0, 100 * MS, 20_000, 1, 20 * MS);
        assert_eq!(w.records(100_000), 8_000, "2 × 200,000/s × 20 ms");
        acks(&mut w, now, 100 * MS, 2_000, 1, 400 * MS);
        assert_eq!(
            w.records(100_000),
            1_000,
            "2 × 20,000/s × 20 ms = 800 < 1,000"
        );
    }

    #[test]
    fn an_idle_spell_then_one_ack_leaves_the_floor() {
        let mut w = primed();
        let now = acks(&mut w, 0, 100 * MS, 20_000, 8, 20 * MS);
        assert_eq!(w.records(100_000), 8_000);
        w.acked(
            place(1, 0),
            Some(Duration::from_millis(20)),
            now + 60_000 * MS,
        );
        assert_eq!(w.partitions(), 8, "the older set still counts");
        assert_eq!(w.records(100_000), 8 * PER_PARTITION);
    }

    #[test]
    fn forgets_partitions_and_round_trips_after_their_spans() {
        let mut w = Window::new();
        acks(&mut w, 0, 10 * MS, 50, 50, 5 * MS);
        assert_eq!(w.partitions(), 50);
        assert_eq!(w.records(100_000), 50 * PER_PARTITION);
        // Acks to one partition over the next two spans: only it counts then.
        let later = 2 * SPREAD_SPAN;
        acks(&mut w, later, SPREAD_SPAN, 10, 1, 9 * MS);
        assert_eq!(w.partitions(), 50, "the older set still counts");
        acks(&mut w, later + SPREAD_SPAN, SPREAD_SPAN, 10, 1, 9 * MS);
        assert_eq!(w.partitions(), 1);
        assert_eq!(w.records(100_000), MIN_RECORDS);
        assert_eq!(w.round_trip(), Some(Duration::from_millis(5)));
        // The 5 ms round trip is forgotten once two trip spans passed.
        acks(&mut w, 2 * TRIP_SPAN, MS, 1, 1, 9 * MS);
        acks(&mut w, 3 * TRIP_SPAN + MS, MS, 1, 1, 9 * MS);
        assert_eq!(w.round_trip(), Some(Duration::from_millis(9)));
    }

    #[test]
    fn a_clock_step_back_restarts_the_period() {
        let mut w = Window::new();
        w.acked(place(1, 0), None, 10_000 * MS);
        acks(&mut w, 10_000 * MS, 100 * MS, 20_000, 1, 50 * MS);
        assert_eq!(w.records(100_000), 20_000);
        // Acks stamped before the period began open a new one: a period's worth
        // of them later, it measures again.
        acks(&mut w, 0, 50 * MS, 10, 1, 50 * MS);
        assert_eq!(w.records(100_000), 20_000);
        acks(&mut w, 50 * MS, 55 * MS, 10, 1, 50 * MS);
        assert_eq!(
            w.records(100_000),
            MIN_RECORDS,
            "2 × 19 acks in 100 ms × 50 ms"
        );
    }

    #[test]
    fn unknown_placements_count_no_partition() {
        let mut w = Window::new();
        for _ in 0..10 {
            w.acked(0, None, 0);
        }
        assert_eq!((w.partitions(), w.records(100_000)), (0, MIN_RECORDS));
    }
}

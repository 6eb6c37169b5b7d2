//! What the end-to-end heartbeat ([`crate::heartbeat`]) has seen, shared by its
//! emitter task, the relay core that recognises a heartbeat coming back, `/metrics`
//! and `/readyz`.
//!
//! Times are microseconds on one monotonic clock of the process ([`mono_us`]), so a
//! wall-clock step never makes a heartbeat look fresh or stale.
//!
//! The age is that of the newest heartbeat seen back — now minus its *emit* time — so
//! a heartbeat that sat in a buffer through a pause proves nothing fresh.
//!
//! Invariants: nothing here judges staleness unless the heartbeat is
//! [enabled](HeartbeatState::enable) (off, or PostgreSQL 13, leaves `/readyz` alone);
//! the age counts from the later of that emit time and the moment the relay last
//! became active ([`HeartbeatState::arm`]), so a relay that just took over the slot is
//! not stale because of an earlier owner's silence; `stale` flips at most once each
//! way per episode (back only on a heartbeat within the maximum age), so the WARN and
//! the INFO it drives are logged once.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// Microseconds since the first call in this process, on the monotonic clock.
pub fn mono_us() -> u64 {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    let epoch = *EPOCH.get_or_init(Instant::now);
    u64::try_from(epoch.elapsed().as_micros()).unwrap_or(u64::MAX)
}

/// Who emits the heartbeats this relay counts as its own.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    /// The relay's slot.
    pub slot: String,
    /// This process (a restarted relay does not count its predecessor's beats).
    pub relay: String,
}

/// A change of the heartbeat's staleness.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Staleness {
    /// No heartbeat came back for longer than the maximum age.
    BecameStale { age: Duration, max_age: Duration },
    /// A heartbeat came back after a stale episode.
    Recovered {
        /// How long the episode lasted (since it was found stale).
        stale_for: Duration,
        /// Round trip of the heartbeat that ended it.
        round_trip: Duration,
    },
}

/// The heartbeat's counters, gauges and staleness.
#[derive(Debug, Default)]
pub struct HeartbeatState {
    identity: OnceLock<Identity>,
    enabled: AtomicBool,
    max_age_us: AtomicU64,
    /// When the relay last became active ([`mono_us`]).
    armed_us: AtomicU64,
    /// Emit time of the newest of this relay's heartbeats seen back (0: none).
    emitted_us: AtomicU64,
    /// When the last one came back.
    seen_at_us: AtomicU64,
    /// Highest sequence number seen back: one read again after a reconnect (the
    /// session resumes from the slot) is not counted twice.
    last_seq: AtomicU64,
    round_trip_us: AtomicU64,
    stale: AtomicBool,
    /// When the current stale episode was found ([`mono_us`]).
    stale_since_us: AtomicU64,
    pub(super) sent: AtomicU64,
    pub(super) seen: AtomicU64,
    pub(super) failed: AtomicU64,
    pub(super) foreign: AtomicU64,
}

impl HeartbeatState {
    /// Set who this relay is (once; later calls change nothing).
    pub fn identify(&self, identity: Identity) {
        let _ = self.identity.set(identity);
    }

    /// Who this relay is, once identified.
    pub fn identity(&self) -> Option<&Identity> {
        self.identity.get()
    }

    /// Judge staleness against `max_age` from now on.
    pub fn enable(&self, max_age: Duration) {
        let us = u64::try_from(max_age.as_micros()).unwrap_or(u64::MAX);
        self.max_age_us.store(us, Ordering::Relaxed);
        self.arm();
        self.enabled.store(true, Ordering::Relaxed);
    }

    /// Stop judging staleness (the server cannot carry heartbeats).
    pub fn disable(&self) {
        self.enabled.store(false, Ordering::Relaxed);
        self.stale.store(false, Ordering::Relaxed);
    }

    /// Whether heartbeats are emitted and judged.
    pub fn enabled(&self) -> bool {
        self.enabled.load(Ordering::Relaxed)
    }

    /// The relay became active: the age counts from now at the latest.
    pub fn arm(&self) {
        self.armed_us.store(mono_us(), Ordering::Relaxed);
    }

    /// A heartbeat was emitted.
    pub fn sent(&self) {
        self.sent.fetch_add(1, Ordering::Relaxed);
    }

    /// An emission failed.
    pub fn failed(&self) {
        self.failed.fetch_add(1, Ordering::Relaxed);
    }

    /// A heartbeat of another relay (or an earlier process) passed by, ignored.
    pub fn foreign(&self) {
        self.foreign.fetch_add(1, Ordering::Relaxed);
    }

    /// This relay's heartbeat `seq` emitted at `sent_us` came back now. Returns the
    /// end of a stale episode, if this is one. A heartbeat seen before (read again
    /// after a reconnect) changes nothing.
    pub fn seen(&self, seq: u64, sent_us: u64) -> Option<Staleness> {
        if self.last_seq.fetch_max(seq, Ordering::Relaxed) >= seq {
            return None;
        }
        let now = mono_us();
        let round_trip = now.saturating_sub(sent_us);
        self.round_trip_us.store(round_trip, Ordering::Relaxed);
        self.emitted_us.fetch_max(sent_us, Ordering::Relaxed);
        self.seen_at_us.store(now, Ordering::Relaxed);
        self.seen.fetch_add(1, Ordering::Relaxed);
        let fresh = self.age_at(now) <= self.max_age();
        let since = self.stale_since_us.load(Ordering::Relaxed);
        (fresh && self.stale.swap(false, Ordering::Relaxed)).then(|| Staleness::Recovered {
            stale_for: Duration::from_micros(now.saturating_sub(since)),
            round_trip: Duration::from_micros(round_trip),
        })
    }

    /// The start of a stale episode, when one starts now (enabled only).
    pub fn check(&self) -> Option<Staleness> {
        let age = self.stale_age()?;
        let max_age = self.max_age();
        let began = !self.stale.swap(true, Ordering::Relaxed);
        if began {
            self.stale_since_us.store(mono_us(), Ordering::Relaxed);
        }
        began.then_some(Staleness::BecameStale { age, max_age })
    }

    /// The age past the maximum, when enabled and stale.
    pub fn stale_age(&self) -> Option<Duration> {
        let age = self.age()?;
        (age > self.max_age()).then_some(age)
    }

    /// The age of the newest of this relay's heartbeats seen back (counted from when
    /// the relay became active, if later); `None` while disabled.
    pub fn age(&self) -> Option<Duration> {
        self.enabled().then(|| self.age_at(mono_us()))
    }

    /// How long until the heartbeat goes stale if none comes back meanwhile:
    /// `Some(ZERO)` once it is stale, `None` while disabled. A heartbeat coming back
    /// (or the relay becoming active) only moves the moment later.
    pub fn until_stale(&self) -> Option<Duration> {
        self.until_stale_at(mono_us())
    }

    fn until_stale_at(&self, now: u64) -> Option<Duration> {
        self.enabled()
            .then(|| self.max_age().saturating_sub(self.age_at(now)))
    }

    /// The round trip of the last heartbeat seen.
    pub fn round_trip(&self) -> Option<Duration> {
        (self.seen.load(Ordering::Relaxed) > 0)
            .then(|| Duration::from_micros(self.round_trip_us.load(Ordering::Relaxed)))
    }

    /// `--heartbeat-max-age`.
    pub fn max_age(&self) -> Duration {
        Duration::from_micros(self.max_age_us.load(Ordering::Relaxed))
    }

    fn age_at(&self, now: u64) -> Duration {
        let since = self
            .emitted_us
            .load(Ordering::Relaxed)
            .max(self.armed_us.load(Ordering::Relaxed));
        Duration::from_micros(now.saturating_sub(since))
    }

    /// The `/readyz` line of an active relay (`None` while disabled), and whether
    /// it makes the relay not ready.
    pub(super) fn health_line(&self) -> Option<(String, bool)> {
        let age = self.age()?;
        let max_age = self.max_age();
        if age > max_age {
            return Some((
                format!(
                    "heartbeat: stale: the newest heartbeat back through the replication stream is {:.1}s old (--heartbeat-max-age {}): the stream is stalled or far behind; check the walsender (pg_stat_replication), pgoutbox_in_flight_records and the log",
                    age.as_secs_f64(),
                    humantime::format_duration(max_age)
                ),
                true,
            ));
        }
        let line = match self.round_trip() {
            Some(rtt) => format!(
                "heartbeat: ok, age {:.1}s, round trip {:.3}s",
                age.as_secs_f64(),
                rtt.as_secs_f64()
            ),
            None => format!(
                "heartbeat: waiting for the first, {:.1}s",
                age.as_secs_f64()
            ),
        };
        Some((line, false))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn disabled_judges_nothing() {
        let h = HeartbeatState::default();
        assert_eq!(h.age(), None);
        assert_eq!(h.check(), None);
        assert!(h.health_line().is_none());
    }

    /// A state whose maximum age (1 µs) has passed, but that is not judged yet.
    fn overdue() -> HeartbeatState {
        let h = HeartbeatState::default();
        h.enable(Duration::from_secs(3600));
        h.max_age_us.store(1, Ordering::Relaxed);
        std::thread::sleep(Duration::from_millis(2)); // the age must pass 1 µs
        h
    }

    #[test]
    fn the_time_until_stale_counts_down_from_the_newest_heartbeat() {
        let h = HeartbeatState::default();
        assert_eq!(h.until_stale(), None, "disabled: nothing to wait for");
        h.enable(Duration::from_secs(60));
        assert!(h.until_stale().unwrap() <= Duration::from_secs(60));
        let armed = h.armed_us.load(Ordering::Relaxed);
        let s = |secs: u64| armed + secs * 1_000_000;
        assert_eq!(h.until_stale_at(s(10)), Some(Duration::from_secs(50)));
        h.seen(1, s(30));
        assert_eq!(
            h.until_stale_at(s(40)),
            Some(Duration::from_secs(50)),
            "counted from the newest heartbeat's emission"
        );
        assert_eq!(h.until_stale_at(s(95)), Some(Duration::ZERO), "stale");
        assert_eq!(overdue().until_stale(), Some(Duration::ZERO));
    }

    #[test]
    fn goes_stale_once_and_recovers_once() {
        let h = overdue();
        let Some(Staleness::BecameStale { max_age, .. }) = h.check() else {
            panic!("not stale");
        };
        assert_eq!(max_age, Duration::from_micros(1));
        assert_eq!(h.check(), None, "logged once per episode");
        let (line, stale) = h.health_line().unwrap();
        assert!(stale);
        assert!(line.starts_with("heartbeat: stale: "), "{line}");
        assert!(line.contains("--heartbeat-max-age 1us"), "{line}");
        h.max_age_us.store(3_600_000_000, Ordering::Relaxed);
        assert!(matches!(
            h.seen(1, mono_us()),
            Some(Staleness::Recovered { .. })
        ));
        assert_eq!(h.seen(2, mono_us()), None, "recovered once");
    }

    #[test]
    fn a_heartbeat_older_than_the_max_age_does_not_end_an_episode() {
        let h = overdue();
        let old = mono_us();
        std::thread::sleep(Duration::from_millis(2));
        assert!(h.check().is_some());
        assert_eq!(
            h.seen(1, old),
            None,
            "emitted before the pause: still stale"
        );
        assert!(h.stale_age().is_some());
        assert!(h.health_line().unwrap().1);
    }

    #[test]
    fn fresh_after_a_heartbeat_and_reports_the_round_trip() {
        let h = HeartbeatState::default();
        h.enable(Duration::from_secs(3600));
        let (line, stale) = h.health_line().unwrap();
        assert!(!stale);
        assert!(
            line.starts_with("heartbeat: waiting for the first"),
            "{line}"
        );
        let sent = mono_us();
        assert_eq!(h.seen(1, sent), None);
        assert!(h.round_trip().is_some());
        h.seen(1, sent);
        assert_eq!(h.seen.load(Ordering::Relaxed), 1, "read again: not counted");
        assert!(h.age().unwrap() < Duration::from_secs(3600));
        let (line, stale) = h.health_line().unwrap();
        assert!(!stale);
        assert!(line.starts_with("heartbeat: ok, age "), "{line}");
        h.disable();
        assert!(h.health_line().is_none());
    }
}

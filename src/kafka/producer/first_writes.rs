//! The first write of a producer to a topic goes alone ([`FirstWrites`]).
//!
//! A broker keeps no sequence state for a producer id that has never written to a
//! partition, and Apache Kafka then accepts whatever sequence comes first (on
//! purpose: the state may have been lost to retention). If the producer's first
//! request there is refused as retriable (leader not ready: a topic just created, a
//! broker just restarted) while its second is in flight, the second is written
//! first; librdkafka then takes the first for written ("implicitly acked by a later
//! batch"), reports it without an offset, and the relay's resend lands after the
//! records behind it: a key's events out of order (`first_writes::…` in the test
//! suite: 8 of 8 new producers on the mock cluster before this gate).
//!
//! So a record for a topic the current producer has no ack from (with the broker's
//! offset) is a *probe*: handed over alone, and nothing more is handed over, of any
//! topic, until its report was served. librdkafka retries a refused probe by itself
//! until it is written, and an ack with an offset means the broker now holds this
//! producer's sequence for that partition, so later requests are checked against it.
//!
//! Invariants: at most one probe is in flight; while one is, [`FirstWrites::gated`]
//! is true and the sink hands nothing over; a probe's report (ack or failure) opens
//! the gate; only an ack with an offset marks its topic written. The state belongs
//! to one producer: a new producer (new producer id) starts with no topic written.
//!
//! What it does not cover: the gate is per topic, the broker's state per partition.
//! A probe's ack shows that one partition of the topic has a leader ready; the
//! others of a topic just created on the same broker become ready with it (one
//! metadata change), but partitions led by other brokers, or still loading after a
//! broker restart, can still refuse a first request (see the README's delivery
//! notes). Transactional producers are not gated: a reordered pair there sits in a
//! transaction the relay never commits (the unplaced report ends the session, and the
//! next producer's `init_transactions` aborts it).

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

/// Which topics the producer has written to, and the probe in flight.
pub(super) struct FirstWrites {
    state: Mutex<State>,
    /// A probe is in flight (read lock-free on every send and report).
    gated: AtomicBool,
    /// Off for transactional producers (see the module docs).
    enabled: bool,
}

#[derive(Default)]
struct State {
    written: HashSet<String>,
    /// Topic and tag of the probe in flight.
    probe: Option<(String, usize)>,
}

impl FirstWrites {
    pub(super) fn new(enabled: bool) -> Self {
        Self {
            state: Mutex::new(State::default()),
            gated: AtomicBool::new(false),
            enabled,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether a probe is in flight: nothing more may be handed over.
    pub(super) fn gated(&self) -> bool {
        self.gated.load(Ordering::Acquire)
    }

    /// Before handing record `tag` for `topic` over (the gate open): make it the
    /// probe if the producer has not written to `topic`. `true` if it is.
    pub(super) fn before_send(&self, topic: &str, tag: usize) -> bool {
        if !self.enabled {
            return false;
        }
        let mut state = self.lock();
        if state.written.contains(topic) {
            return false;
        }
        state.probe = Some((topic.to_owned(), tag));
        self.gated.store(true, Ordering::Release);
        true
    }

    /// The probe was not taken by librdkafka (its refusal is the caller's).
    pub(super) fn not_sent(&self) {
        self.lock().probe = None;
        self.gated.store(false, Ordering::Release);
    }

    /// A report of record `tag` for `topic` was served; `placed`: acked with the
    /// broker's offset. The probe's report opens the gate.
    pub(super) fn reported(&self, topic: &str, tag: usize, placed: bool) {
        if !self.gated() {
            return;
        }
        let mut state = self.lock();
        let is_probe = state
            .probe
            .as_ref()
            .is_some_and(|(t, probe)| *probe == tag && t == topic);
        if !is_probe {
            return;
        }
        state.probe = None;
        if placed {
            state.written.insert(topic.to_owned());
        }
        self.gated.store(false, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::FirstWrites;

    #[test]
    fn a_topics_first_record_gates_until_its_ack_and_then_the_topic_is_written() {
        let writes = FirstWrites::new(true);
        assert!(writes.before_send("a", 1));
        assert!(writes.gated());
        // Another record's report (same tag, other topic) does not open the gate.
        writes.reported("b", 1, true);
        assert!(writes.gated());
        writes.reported("a", 1, true);
        assert!(!writes.gated());
        assert!(!writes.before_send("a", 2), "written: no probe");
        assert!(writes.before_send("b", 3), "another topic: a probe");
    }

    #[test]
    fn a_failed_probe_opens_the_gate_and_the_next_record_probes_again() {
        let writes = FirstWrites::new(true);
        assert!(writes.before_send("a", 1));
        writes.reported("a", 1, false);
        assert!(!writes.gated());
        assert!(writes.before_send("a", 2));
        writes.not_sent();
        assert!(!writes.gated());
        assert!(writes.before_send("a", 3));
    }

    #[test]
    fn transactional_producers_are_not_gated() {
        let writes = FirstWrites::new(false);
        assert!(!writes.before_send("a", 1));
        assert!(!writes.gated());
    }
}

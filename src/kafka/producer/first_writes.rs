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
//! offset) is a *probe*: handed over alone, and no other record of that topic is
//! handed over until its report was served (records of other topics go on;
//! order only matters within a partition). librdkafka retries a refused probe by
//! itself until it is written, and an ack with an offset means the broker now holds
//! this producer's sequence for that partition, so later requests are checked
//! against it.
//!
//! Invariants: at most one probe per topic is in flight; while one is,
//! [`FirstWrites::gated`] is true for its topic and the sink hands nothing of that
//! topic over; a probe's report (ack or failure) opens its topic's gate; only an
//! ack with an offset marks its topic written. The state belongs to one producer: a
//! new producer (new producer id) starts with no topic written.
//!
//! What it does not cover: the gate is per topic, the broker's state per partition.
//! A probe's ack shows that one partition of the topic has a leader ready; the
//! others of a topic just created on the same broker become ready with it (one
//! metadata change), but partitions led by other brokers, or still loading after a
//! broker restart, can still refuse a first request (see the README's delivery
//! notes). Transactional producers are not gated: a reordered pair there sits in a
//! transaction the relay never commits (the unplaced report ends the session, and the
//! next producer's `init_transactions` aborts it).

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

/// Which topics the producer has written to, and the probes in flight.
pub(super) struct FirstWrites {
    state: Mutex<State>,
    /// Probes in flight (read lock-free on every send, hand-over and report).
    probing: AtomicUsize,
    /// Off for transactional producers (see the module docs).
    enabled: bool,
}

#[derive(Default)]
struct State {
    written: HashSet<String>,
    /// Per topic, the tag of its probe in flight.
    probes: HashMap<String, usize>,
}

impl FirstWrites {
    pub(super) fn new(enabled: bool) -> Self {
        Self {
            state: Mutex::new(State::default()),
            probing: AtomicUsize::new(0),
            enabled,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether `topic`'s probe is in flight: nothing more of it may be handed over.
    pub(super) fn gated(&self, topic: &str) -> bool {
        self.probing.load(Ordering::Acquire) > 0 && self.lock().probes.contains_key(topic)
    }

    /// Before handing record `tag` for `topic` over (its gate open): make it the
    /// probe if the producer has not written to `topic`. `true` if it is.
    pub(super) fn before_send(&self, topic: &str, tag: usize) -> bool {
        if !self.enabled {
            return false;
        }
        let mut state = self.lock();
        if state.written.contains(topic) || state.probes.contains_key(topic) {
            return false;
        }
        state.probes.insert(topic.to_owned(), tag);
        self.probing.fetch_add(1, Ordering::AcqRel);
        true
    }

    /// `topic`'s probe was not taken by librdkafka (its refusal is the caller's).
    pub(super) fn not_sent(&self, topic: &str) {
        if self.lock().probes.remove(topic).is_some() {
            self.probing.fetch_sub(1, Ordering::AcqRel);
        }
    }

    /// A report of record `tag` for `topic` was served; `placed`: acked with the
    /// broker's offset. A probe's report opens its topic's gate.
    pub(super) fn reported(&self, topic: &str, tag: usize, placed: bool) {
        if self.probing.load(Ordering::Acquire) == 0 {
            return;
        }
        let mut state = self.lock();
        if state.probes.get(topic) != Some(&tag) {
            return;
        }
        state.probes.remove(topic);
        if placed {
            state.written.insert(topic.to_owned());
        }
        self.probing.fetch_sub(1, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    use super::FirstWrites;

    #[test]
    fn a_topics_first_record_gates_that_topic_until_its_ack() {
        let writes = FirstWrites::new(true);
        assert!(writes.before_send("a", 1));
        assert!(writes.gated("a"));
        assert!(!writes.gated("b"), "other topics go on");
        // Another topic's report with the same tag does not open the gate.
        writes.reported("b", 1, true);
        assert!(writes.gated("a"));
        assert!(
            writes.before_send("b", 2),
            "another topic probes at the same time"
        );
        writes.reported("a", 1, true);
        assert!(!writes.gated("a") && writes.gated("b"));
        assert!(!writes.before_send("a", 3), "written: no probe");
    }

    #[test]
    fn a_failed_probe_opens_the_gate_and_the_next_record_probes_again() {
        let writes = FirstWrites::new(true);
        assert!(writes.before_send("a", 1));
        writes.reported("a", 1, false);
        assert!(!writes.gated("a"));
        assert!(writes.before_send("a", 2));
        writes.not_sent("a");
        assert!(!writes.gated("a"));
        assert!(writes.before_send("a", 3));
    }

    #[test]
    fn transactional_producers_are_not_gated() {
        let writes = FirstWrites::new(false);
        assert!(!writes.before_send("a", 1));
        assert!(!writes.gated("a"));
    }
}

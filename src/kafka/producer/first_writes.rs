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
//! So a record for a partition the current producer has no ack from (with the
//! broker's offset) is a *probe*: handed over alone, and no other record of that
//! partition is handed over until its report was served (records of other
//! partitions go on; order only matters within a partition). librdkafka retries a
//! refused probe by itself until it is written, and an ack with an offset means the
//! broker now holds this producer's sequence for that partition, so later requests
//! are checked against it.
//!
//! Where a record goes is known before it is handed over once the topic's partition
//! count is: the relay's partitioner (`partitioner`) reports it, and the key's
//! partition follows. Until then (a topic's first record), and for a record without
//! a key (librdkafka's sticky partitioner places it), the gate is the whole topic's:
//! its first record probes, and gates every record of the topic. Per partition
//! matters because a broker becomes leader of a new topic's partitions one after
//! another (Apache Kafka's `applyLocalLeadersDelta`), so a probe acked on one
//! partition says nothing of the others: a per-topic gate let a fresh partition's
//! first request be overtaken (`first_writes::another_partitions_first_request…`).
//!
//! Invariants: at most one probe per partition (or one for the whole topic) is in
//! flight; while one is, [`FirstWrites::gated`] is true for the records it gates and
//! the sink hands none of them over; a probe's report (ack or failure) opens its
//! gate; only an ack with an offset marks its partition written. The state belongs
//! to one producer: a new producer (new producer id) starts with nothing written.
//!
//! What it does not cover: a record without a key, after its topic's first ack, may
//! be the first on another partition (only a duplicate can follow: such records have
//! no key order to keep), and with a `partitioner` of the user's own the gate is the
//! topic's (see the README's delivery notes). Transactional producers are not gated:
//! a reordered pair there sits in a transaction the relay never commits (the
//! unplaced report ends the session, and the next producer's `init_transactions`
//! aborts it).

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use super::partitioner::java_partition;

/// Which partitions the producer has written to, and the probes in flight.
pub(super) struct FirstWrites {
    state: Mutex<HashMap<String, Topic>>,
    /// Probes in flight (read lock-free on every send, hand-over and report).
    probing: AtomicUsize,
    /// Off for transactional producers (see the module docs).
    enabled: bool,
}

/// One topic's gate.
#[derive(Default)]
struct Topic {
    /// Its partition count as the partitioner last saw it; 0 while unknown.
    partitions: i32,
    /// Partitions acked with an offset, ascending.
    written: Vec<i32>,
    /// Probes in flight: the record's tag, and its partition (`None`: the whole
    /// topic's probe).
    probes: Vec<(usize, Option<i32>)>,
}

impl Topic {
    /// Where a record with `key` goes, if that is known before librdkafka places it.
    fn partition(&self, key: Option<&[u8]>) -> Option<i32> {
        match key {
            Some(key) if self.partitions > 0 => Some(java_partition(key, self.partitions)),
            _ => None,
        }
    }

    /// Whether the probe in flight gates a record with `key`.
    fn gates(&self, key: Option<&[u8]>) -> bool {
        if self.probes.is_empty() {
            return false;
        }
        let to = self.partition(key);
        self.probes
            .iter()
            .any(|(_, probe)| probe.is_none() || (to.is_some() && *probe == to))
    }

    fn complete(&self) -> bool {
        self.partitions > 0 && self.written.len() >= self.partitions as usize
    }
}

impl FirstWrites {
    pub(super) fn new(enabled: bool) -> Self {
        Self {
            state: Mutex::new(HashMap::new()),
            probing: AtomicUsize::new(0),
            enabled,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Topic>> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether a probe in flight gates a record for `topic` with `key`: it may not
    /// be handed over yet.
    pub(super) fn gated(&self, topic: &str, key: Option<&[u8]>) -> bool {
        self.probing.load(Ordering::Acquire) > 0
            && self.lock().get(topic).is_some_and(|t| t.gates(key))
    }

    /// The partitioner saw `topic` with `partitions` partitions.
    pub(super) fn partitions_of(&self, topic: &str, partitions: i32) {
        if !self.enabled {
            return;
        }
        let mut state = self.lock();
        match state.get_mut(topic) {
            Some(t) => t.partitions = partitions,
            None => {
                let t = Topic {
                    partitions,
                    ..Topic::default()
                };
                state.insert(topic.to_owned(), t);
            }
        }
    }

    /// Before handing record `tag` for `topic` with `key` over (its gate open): make
    /// it the probe of its partition if the producer has not written there (of its
    /// topic, if where it goes is not known and nothing of the topic is written).
    /// `true` if it is.
    pub(super) fn before_send(&self, topic: &str, key: Option<&[u8]>, tag: usize) -> bool {
        if !self.enabled {
            return false;
        }
        let mut state = self.lock();
        let t = match state.get_mut(topic) {
            Some(t) => t,
            None => state.entry(topic.to_owned()).or_default(),
        };
        if t.complete() {
            return false;
        }
        let probe = match t.partition(key) {
            Some(p) if t.written.binary_search(&p).is_err() => Some(p),
            Some(_) => return false,
            None if t.written.is_empty() => None,
            None => return false,
        };
        if t.probes.iter().any(|(_, q)| *q == probe) {
            return false;
        }
        t.probes.push((tag, probe));
        self.probing.fetch_add(1, Ordering::AcqRel);
        true
    }

    /// Probe `tag` of `topic` was not taken by librdkafka (its refusal is the
    /// caller's).
    pub(super) fn not_sent(&self, topic: &str, tag: usize) {
        let mut state = self.lock();
        let Some(t) = state.get_mut(topic) else {
            return;
        };
        if let Some(at) = t.probes.iter().position(|(probe, _)| *probe == tag) {
            t.probes.swap_remove(at);
            self.probing.fetch_sub(1, Ordering::AcqRel);
        }
    }

    /// A report of record `tag` for `topic` was served; `placed`: acked with the
    /// broker's offset on `partition`. A probe's report opens its gate.
    pub(super) fn reported(&self, topic: &str, partition: i32, tag: usize, placed: bool) {
        if self.probing.load(Ordering::Acquire) == 0 {
            return;
        }
        let mut state = self.lock();
        let Some(t) = state.get_mut(topic) else {
            return;
        };
        let Some(at) = t.probes.iter().position(|(probe, _)| *probe == tag) else {
            return;
        };
        t.probes.swap_remove(at);
        if placed {
            if let Err(at) = t.written.binary_search(&partition) {
                t.written.insert(at, partition);
            }
        }
        self.probing.fetch_sub(1, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    use super::FirstWrites;
    use crate::kafka::producer::partitioner::java_partition;

    /// A key on `partition` of `partitions`.
    fn key_on(partition: i32, partitions: i32) -> Vec<u8> {
        (0..)
            .map(|k| format!("key-{k}").into_bytes())
            .find(|k| java_partition(k, partitions) == partition)
            .expect("a key for every partition")
    }

    #[test]
    fn a_topics_first_record_gates_that_topic_until_its_ack() {
        let writes = FirstWrites::new(true);
        let k = Some(&b"k"[..]);
        assert!(writes.before_send("a", k, 1));
        assert!(writes.gated("a", k) && writes.gated("a", None));
        assert!(!writes.gated("b", k), "other topics go on");
        // Another topic's report with the same tag does not open the gate.
        writes.reported("b", 0, 1, true);
        assert!(writes.gated("a", k));
        assert!(
            writes.before_send("b", k, 2),
            "another topic probes at the same time"
        );
        writes.reported("a", 0, 1, true);
        assert!(!writes.gated("a", k) && writes.gated("b", k));
        assert!(
            !writes.before_send("a", k, 3),
            "written, partitions unknown: no probe"
        );
    }

    #[test]
    fn once_the_partition_count_is_known_each_partition_probes_alone() {
        let writes = FirstWrites::new(true);
        let (p0, p1, p2) = (key_on(0, 3), key_on(1, 3), key_on(2, 3));
        let (p0, p1, p2) = (Some(&p0[..]), Some(&p1[..]), Some(&p2[..]));
        assert!(writes.before_send("a", p0, 1), "the topic's probe");
        writes.partitions_of("a", 3);
        assert!(
            writes.gated("a", p1),
            "the topic's probe gates every partition"
        );
        writes.reported("a", 0, 1, true);
        assert!(!writes.before_send("a", p0, 2), "partition 0 is written");
        assert!(writes.before_send("a", p1, 3), "partition 1 probes");
        assert!(writes.gated("a", p1) && !writes.gated("a", p0));
        assert!(
            !writes.gated("a", None),
            "a record without a key is not held"
        );
        assert!(
            writes.before_send("a", p2, 4),
            "partition 2 probes meanwhile"
        );
        assert!(!writes.before_send("a", p1, 5), "one probe per partition");
        writes.reported("a", 2, 4, true);
        writes.reported("a", 1, 3, false);
        assert!(!writes.gated("a", p1), "a failed probe opens its gate");
        assert!(
            writes.before_send("a", p1, 6),
            "and the next record probes again"
        );
        writes.reported("a", 1, 6, true);
        assert!(!writes.before_send("a", p1, 7) && !writes.before_send("a", None, 8));
        // A partition added later probes too.
        writes.partitions_of("a", 4);
        let p3 = key_on(3, 4);
        assert!(writes.before_send("a", Some(&p3), 9));
    }

    #[test]
    fn a_failed_probe_opens_the_gate_and_the_next_record_probes_again() {
        let writes = FirstWrites::new(true);
        assert!(writes.before_send("a", None, 1));
        writes.reported("a", 0, 1, false);
        assert!(!writes.gated("a", None));
        assert!(writes.before_send("a", None, 2));
        writes.not_sent("a", 2);
        assert!(!writes.gated("a", None));
        assert!(writes.before_send("a", None, 3));
    }

    #[test]
    fn transactional_producers_are_not_gated() {
        let writes = FirstWrites::new(false);
        assert!(!writes.before_send("a", None, 1));
        assert!(!writes.gated("a", None));
    }
}

//! [`StallWatch`]: whether the oldest in-flight record is getting anywhere.
//!
//! A record Kafka never acks blocks the confirmed LSN for good (librdkafka retries
//! it forever: `message.timeout.ms=0`), and nothing else would tell: the relay keeps
//! reading WAL up to its in-flight caps, the producer may reach its brokers fine
//! (e.g. a restarted broker that no longer knows the producer id the record is
//! retried under). This watch measures, per transaction with records in flight,
//! the time since it last made progress; the oldest such transaction is the one
//! that blocks the slot.
//!
//! ```text
//!  txn#:   9 [2 in flight, last ack 75 s ago]   10 [1 in flight]   11 [open]
//!          └── oldest in flight: age 75 s ≥ --stall-timeout ─▶ stalled
//! ```
//!
//! *Progress* of a transaction is its first record handed to the producer, then
//! every report for one of its records. Granularity is the transaction, not the
//! record (acks carry only the transaction number): a transaction whose other
//! records keep being acked counts as moving until only the stuck ones are left.
//!
//! Invariants: entries are in transaction order, one per transaction that had a
//! record sent, holding what names its first record (no payload, and nothing that
//! shares a read buffer: the event id is its own copy); an entry leaves
//! once its transaction has nothing in flight and is the oldest; time comes from
//! the caller, so every rule here is unit tested without sleeping.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use bytes::Bytes;

use crate::pg::lsn::Lsn;

/// What names the first record of a transaction in a stall report.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordRef {
    /// Destination topic.
    pub topic: String,
    /// The row's table (`schema.name`).
    pub table: String,
    /// WAL position of the row's change.
    pub lsn: Lsn,
    /// The `id` header (the event id), if any.
    pub event_id: Option<Bytes>,
}

/// The oldest in-flight record made no progress for `age` (≥ the timeout).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stall {
    /// The first record of the blocking transaction.
    pub record: RecordRef,
    /// Time since its transaction last made progress.
    pub age: Duration,
    /// The `--stall-timeout` it passed.
    pub timeout: Duration,
    /// Records in flight at the time.
    pub in_flight: usize,
}

impl RecordRef {
    /// The event id as text (`<null id>` when the row has none).
    pub fn event_id(&self) -> String {
        self.event_id.as_deref().map_or_else(
            || "<null id>".to_owned(),
            |id| String::from_utf8_lossy(id).into_owned(),
        )
    }
}

impl Stall {
    /// The event id as text (`<null id>` when the row has none).
    pub fn event_id(&self) -> String {
        self.record.event_id()
    }
}

impl std::fmt::Display for Stall {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "no kafka ack for {}s for the oldest in-flight record (event {}, topic {:?}, table {}, lsn {}; {} records in flight), past --stall-timeout {}",
            self.age.as_secs(),
            self.event_id(),
            self.record.topic,
            self.record.table,
            self.record.lsn,
            self.in_flight,
            humantime::format_duration(self.timeout),
        )
    }
}

struct Entry {
    txn: u64,
    /// Last progress of the transaction.
    since: Instant,
    first: RecordRef,
}

/// Progress of the transactions with records in flight.
#[derive(Default)]
pub struct StallWatch {
    entries: VecDeque<Entry>,
}

impl StallWatch {
    /// A record of `txn` was handed to the producer at `now`. The first one of a
    /// transaction starts its entry (`first` is only called then).
    pub fn sent(&mut self, txn: u64, now: Instant, first: impl FnOnce() -> RecordRef) {
        if self.entries.back().is_some_and(|e| e.txn >= txn) {
            return;
        }
        self.entries.push_back(Entry {
            txn,
            since: now,
            first: first(),
        });
    }

    /// The first record of `txn` while it is watched (it has records in flight).
    pub fn first_of(&self, txn: u64) -> Option<&RecordRef> {
        let i = self.entries.binary_search_by_key(&txn, |e| e.txn).ok()?;
        Some(&self.entries[i].first)
    }

    /// A record of `txn` was reported at `now`.
    pub fn progress(&mut self, txn: u64, now: Instant) {
        if let Ok(i) = self.entries.binary_search_by_key(&txn, |e| e.txn) {
            self.entries[i].since = now;
        }
    }

    /// The first record of every watched transaction with records in flight
    /// (`in_flight(txn)`), oldest first.
    pub fn entries<'w>(
        &'w self,
        in_flight: impl Fn(u64) -> bool + 'w,
    ) -> impl Iterator<Item = &'w RecordRef> + 'w {
        self.entries
            .iter()
            .filter(move |e| in_flight(e.txn))
            .map(|e| &e.first)
    }

    /// The oldest transaction that still has records in flight (`in_flight(txn)`),
    /// its first record and how long it has made no progress at `now`. Entries of
    /// older transactions, done by now, are dropped.
    pub fn oldest(
        &mut self,
        now: Instant,
        in_flight: impl Fn(u64) -> bool,
    ) -> Option<(&RecordRef, Duration)> {
        while self.entries.front().is_some_and(|e| !in_flight(e.txn)) {
            self.entries.pop_front();
        }
        let front = self.entries.front()?;
        Some((&front.first, now.saturating_duration_since(front.since)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(n: u64) -> RecordRef {
        RecordRef {
            topic: format!("t{n}"),
            table: "public.outbox".into(),
            lsn: Lsn(n),
            event_id: None,
        }
    }

    #[test]
    fn the_oldest_transaction_in_flight_ages_until_it_makes_progress() {
        let t0 = Instant::now();
        let s = Duration::from_secs;
        let mut w = StallWatch::default();
        w.sent(7, t0, || record(7));
        w.sent(7, t0 + s(1), || unreachable!("one entry per transaction"));
        w.sent(8, t0 + s(2), || record(8));
        let all = |_: u64| true;
        assert_eq!(w.oldest(t0 + s(10), all), Some((&record(7), s(10))));
        // An ack of 8 does not help 7; one of 7 does.
        w.progress(8, t0 + s(10));
        assert_eq!(w.oldest(t0 + s(12), all).unwrap().1, s(12));
        w.progress(7, t0 + s(12));
        assert_eq!(w.oldest(t0 + s(13), all).unwrap().1, s(1));
        // 7 done: 8 is the oldest, aged from its own last progress.
        assert_eq!(w.oldest(t0 + s(15), |t| t == 8), Some((&record(8), s(5))));
        assert_eq!(w.oldest(t0 + s(15), |_| false), None);
        assert!(w.entries.is_empty());
    }

    #[test]
    fn a_transaction_older_than_the_last_entry_is_not_added_again() {
        let t0 = Instant::now();
        let mut w = StallWatch::default();
        w.sent(3, t0, || record(3));
        w.sent(2, t0, || unreachable!("transactions arrive in order"));
        w.progress(99, t0); // unknown: ignored
        assert_eq!(w.entries.len(), 1);
    }

    #[test]
    fn the_message_names_the_record_and_the_setting() {
        let stall = Stall {
            record: RecordRef {
                event_id: Some(Bytes::from_static(b"e-1")),
                ..record(0x1000)
            },
            age: Duration::from_millis(61_400),
            timeout: Duration::from_secs(60),
            in_flight: 3,
        };
        assert_eq!(
            stall.to_string(),
            "no kafka ack for 61s for the oldest in-flight record (event e-1, topic \"t4096\", \
             table public.outbox, lsn 0/1000; 3 records in flight), past --stall-timeout 1m"
        );
    }
}

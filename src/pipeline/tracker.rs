//! Delivery tracking per transaction: the contiguous low-water mark.
//!
//! Owns the one rule the relay's safety rests on: the LSN confirmed to PostgreSQL is
//! the Commit `end_lsn` of the newest transaction whose records *and all earlier
//! transactions' records* are acked. Transactions arrive in commit order (pgoutput
//! without streaming), each gets a number, records count against their
//! transaction, and acks (which come back in any order across partitions) decrement
//! it. The front of the queue is popped while it is committed and fully acked.
//!
//! ```text
//!  txn#:   7 [done]  8 [done]  9 [2 left]  10 [done]  11 [open]
//!          └── popped: confirmed = end_lsn(8) ──┘  10 waits for 9
//! ```
//!
//! Invariants: `confirmed` never moves backwards; a transaction still open (no
//! Commit yet) or with a record outstanding blocks everything after it; memory is
//! one small entry per unconfirmed transaction (no record payloads).

use std::collections::VecDeque;

use crate::pg::lsn::Lsn;

#[derive(Debug, Clone, Copy)]
struct TxnEntry {
    /// Commit end LSN once the Commit message was seen.
    end_lsn: Option<Lsn>,
    /// Records sent and not yet acked.
    outstanding: usize,
    /// Commit time (µs since 2000-01-01), for latency.
    commit_time: i64,
}

/// An ack for a transaction number the tracker does not hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("delivery report for transaction #{0} which is not in flight")]
pub struct UnknownTxn(pub u64);

/// Per-transaction delivery accounting.
#[derive(Debug, Default)]
pub struct AckTracker {
    txns: VecDeque<TxnEntry>,
    /// Number of `txns[0]`.
    front: u64,
    records: usize,
    bytes: usize,
    confirmed: Lsn,
}

impl AckTracker {
    /// An empty tracker; `confirmed` starts at `0/0` (nothing).
    pub fn new() -> Self {
        Self::default()
    }

    /// A new transaction began (committed at `commit_time`); returns its number.
    pub fn begin(&mut self, commit_time: i64) -> u64 {
        self.txns.push_back(TxnEntry {
            end_lsn: None,
            outstanding: 0,
            commit_time,
        });
        self.front + self.txns.len() as u64 - 1
    }

    fn entry(&mut self, txn: u64) -> Result<&mut TxnEntry, UnknownTxn> {
        let idx = txn.checked_sub(self.front).ok_or(UnknownTxn(txn))?;
        usize::try_from(idx)
            .ok()
            .and_then(|i| self.txns.get_mut(i))
            .ok_or(UnknownTxn(txn))
    }

    /// A record of `txn` was handed to the producer.
    pub fn sent(&mut self, txn: u64, bytes: usize) -> Result<(), UnknownTxn> {
        self.entry(txn)?.outstanding += 1;
        self.records += 1;
        self.bytes += bytes;
        Ok(())
    }

    /// `txn` committed at `end_lsn`. Returns the new confirmed LSN if it advanced.
    pub fn commit(&mut self, txn: u64, end_lsn: Lsn) -> Result<Option<Lsn>, UnknownTxn> {
        self.entry(txn)?.end_lsn = Some(end_lsn);
        Ok(self.advance())
    }

    /// The commit end LSN of an in-flight transaction, once its Commit was seen.
    pub fn commit_lsn(&mut self, txn: u64) -> Result<Option<Lsn>, UnknownTxn> {
        Ok(self.entry(txn)?.end_lsn)
    }

    /// The commit time of an in-flight transaction.
    pub fn commit_time(&mut self, txn: u64) -> Result<i64, UnknownTxn> {
        Ok(self.entry(txn)?.commit_time)
    }

    /// A record of `txn` was acked. Returns the new confirmed LSN if it advanced.
    pub fn acked(&mut self, txn: u64, bytes: usize) -> Result<Option<Lsn>, UnknownTxn> {
        let entry = self.entry(txn)?;
        entry.outstanding = entry.outstanding.checked_sub(1).ok_or(UnknownTxn(txn))?;
        self.records -= 1;
        self.bytes = self.bytes.saturating_sub(bytes);
        Ok(self.advance())
    }

    fn advance(&mut self) -> Option<Lsn> {
        let before = self.confirmed;
        while let Some(front) = self.txns.front() {
            match front.end_lsn {
                Some(end) if front.outstanding == 0 => {
                    self.confirmed = self.confirmed.max(end);
                    self.txns.pop_front();
                    self.front += 1;
                }
                _ => break,
            }
        }
        (self.confirmed > before).then_some(self.confirmed)
    }

    /// Nothing open, nothing outstanding: every record seen so far is acked.
    pub fn is_idle(&self) -> bool {
        self.txns.is_empty()
    }

    /// Raise `confirmed` to a position known to hold no undelivered outbox row
    /// (a keepalive's WAL end while idle). Ignored unless idle and ahead.
    pub fn confirm_idle(&mut self, lsn: Lsn) -> Option<Lsn> {
        (self.is_idle() && lsn > self.confirmed).then(|| {
            self.confirmed = lsn;
            lsn
        })
    }

    /// The contiguous low-water mark.
    pub fn confirmed(&self) -> Lsn {
        self.confirmed
    }

    /// Records in flight.
    pub fn in_flight_records(&self) -> usize {
        self.records
    }

    /// Bytes in flight.
    pub fn in_flight_bytes(&self) -> usize {
        self.bytes
    }

    /// The number of the oldest transaction not yet confirmed (the next one to
    /// begin when there is none): no record of an earlier one is in flight.
    pub fn oldest(&self) -> u64 {
        self.front
    }

    /// Records of `txn` in flight (0 for a transaction no longer held).
    pub fn outstanding(&self, txn: u64) -> usize {
        txn.checked_sub(self.front)
            .and_then(|i| usize::try_from(i).ok())
            .and_then(|i| self.txns.get(i))
            .map_or(0, |e| e.outstanding)
    }

    /// Transactions not yet confirmed (open or waiting for acks).
    pub fn pending_txns(&self) -> usize {
        self.txns.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn later_acks_wait_for_earlier_transactions() {
        let mut t = AckTracker::new();
        let a = t.begin(0);
        t.sent(a, 10).unwrap();
        t.sent(a, 10).unwrap();
        assert_eq!(t.commit(a, Lsn(100)).unwrap(), None);
        let b = t.begin(0);
        t.sent(b, 5).unwrap();
        assert_eq!(t.commit(b, Lsn(200)).unwrap(), None);
        // b fully acked first: nothing moves, a is still outstanding.
        assert_eq!(t.acked(b, 5).unwrap(), None);
        assert_eq!((t.outstanding(a), t.outstanding(b)), (2, 0));
        assert_eq!(t.acked(a, 10).unwrap(), None);
        // a's last ack releases both.
        assert_eq!(t.acked(a, 10).unwrap(), Some(Lsn(200)));
        assert!(t.is_idle());
        assert_eq!(t.oldest(), b + 1, "both popped");
        assert_eq!(t.outstanding(a), 0, "popped");
        assert_eq!(t.in_flight_bytes(), 0);
    }

    #[test]
    fn open_transaction_blocks_and_empty_ones_confirm_at_commit() {
        let mut t = AckTracker::new();
        let a = t.begin(0);
        assert_eq!(t.commit(a, Lsn(50)).unwrap(), Some(Lsn(50)));
        let b = t.begin(0);
        t.sent(b, 1).unwrap();
        t.acked(b, 1).unwrap();
        assert_eq!(
            t.confirmed(),
            Lsn(50),
            "no commit yet: acked records do not count"
        );
        assert_eq!(
            t.confirm_idle(Lsn(999)),
            None,
            "not idle while a transaction is open"
        );
        assert_eq!(t.commit(b, Lsn(60)).unwrap(), Some(Lsn(60)));
        assert_eq!(t.confirm_idle(Lsn(999)), Some(Lsn(999)));
        assert_eq!(t.confirm_idle(Lsn(10)), None, "never backwards");
    }

    #[test]
    fn unknown_transactions_and_extra_acks_are_errors() {
        let mut t = AckTracker::new();
        assert_eq!(t.acked(0, 1), Err(UnknownTxn(0)));
        let a = t.begin(0);
        assert_eq!(t.acked(a, 1), Err(UnknownTxn(a)));
        t.commit(a, Lsn(1)).unwrap();
        assert_eq!(
            t.sent(a, 1),
            Err(UnknownTxn(a)),
            "popped transactions are gone"
        );
    }

    proptest! {
        /// For any interleaving of acks, the confirmed LSN is exactly the end LSN of
        /// the longest fully-acked prefix of committed transactions, and monotonic.
        #[test]
        fn confirmed_is_the_contiguous_prefix(
            sizes in proptest::collection::vec(0usize..5, 1..30),
            order in proptest::collection::vec(any::<u64>(), 0..200),
        ) {
            let mut t = AckTracker::new();
            let mut outstanding: Vec<(u64, usize)> = Vec::new();
            let mut remaining = Vec::new();
            for (i, &n) in sizes.iter().enumerate() {
                let txn = t.begin(0);
                for _ in 0..n {
                    t.sent(txn, 1).unwrap();
                    outstanding.push((txn, i));
                }
                remaining.push(n);
                t.commit(txn, Lsn((i as u64 + 1) * 10)).unwrap();
            }
            let mut last = t.confirmed();
            let mut picks = order.into_iter();
            while !outstanding.is_empty() {
                let pick = picks.next().unwrap_or(0) as usize % outstanding.len();
                let (txn, i) = outstanding.swap_remove(pick);
                remaining[i] -= 1;
                t.acked(txn, 1).unwrap();
                let prefix = remaining.iter().take_while(|&&r| r == 0).count();
                let expected = if prefix == 0 { Lsn(0) } else { Lsn(prefix as u64 * 10) };
                prop_assert_eq!(t.confirmed(), expected);
                prop_assert!(t.confirmed() >= last);
                last = t.confirmed();
            }
            prop_assert!(t.is_idle());
        }
    }
}

//! The delivery verifier: what the writer committed vs. what Kafka holds.
//!
//! The writer records every committed event id with its key, in commit order. After
//! a run, the consumer's records (each partition in offset order) are compared:
//! `lost` (committed, never delivered), `unexpected` (delivered, never committed —
//! e.g. from a rolled-back transaction), `duplicated` (delivered more than once),
//! `reordered` (within one key, the first deliveries are not in commit order).

use std::collections::{BTreeMap, HashMap};

use super::kafka::Consumed;

/// Committed events in commit order.
#[derive(Debug, Default, Clone)]
pub struct Ledger {
    /// (id, key) in commit order.
    pub committed: Vec<(String, String)>,
}

impl Ledger {
    pub fn push(&mut self, id: String, key: String) {
        self.committed.push((id, key));
    }
    pub fn len(&self) -> usize {
        self.committed.len()
    }
}

/// The comparison.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Verdict {
    pub committed: usize,
    pub delivered: usize,
    pub lost: usize,
    pub unexpected: usize,
    /// Records beyond the first copy of each event.
    pub duplicated_total: usize,
    /// Highest number of copies of one event.
    pub duplicated_max: usize,
    pub reordered: usize,
    /// A few lost ids, for the failure message.
    pub lost_sample: Vec<String>,
}

impl Verdict {
    pub fn assert_no_loss(&self) {
        assert!(
            self.lost == 0 && self.unexpected == 0 && self.reordered == 0,
            "delivery verdict: {self:?}"
        );
    }
}

/// Compare.
pub fn verify(ledger: &Ledger, records: &[Consumed]) -> Verdict {
    let rank: HashMap<&str, usize> = ledger
        .committed
        .iter()
        .enumerate()
        .map(|(i, (id, _))| (id.as_str(), i))
        .collect();
    let mut copies: HashMap<String, usize> = HashMap::new();
    let mut by_partition: BTreeMap<(String, i32), Vec<&Consumed>> = BTreeMap::new();
    for r in records {
        *copies.entry(r.id()).or_default() += 1;
        by_partition
            .entry((r.topic.clone(), r.partition))
            .or_default()
            .push(r);
    }
    let mut v = Verdict {
        committed: ledger.len(),
        delivered: records.len(),
        ..Verdict::default()
    };
    for (id, _) in &ledger.committed {
        if !copies.contains_key(id) {
            v.lost += 1;
            if v.lost_sample.len() < 5 {
                v.lost_sample.push(id.clone());
            }
        }
    }
    for (id, n) in &copies {
        if !rank.contains_key(id.as_str()) {
            v.unexpected += 1;
        }
        v.duplicated_total += n - 1;
        v.duplicated_max = v.duplicated_max.max(*n);
    }
    // Per key: first occurrences in offset order must follow commit order.
    let mut last_rank: HashMap<(String, Vec<u8>), usize> = HashMap::new();
    let mut seen: HashMap<String, ()> = HashMap::new();
    for records in by_partition.values_mut() {
        records.sort_by_key(|r| r.offset);
        for r in records.iter() {
            let id = r.id();
            if seen.insert(id.clone(), ()).is_some() {
                continue;
            }
            let Some(&rk) = rank.get(id.as_str()) else {
                continue;
            };
            let key = (r.topic.clone(), r.key.clone().unwrap_or_default());
            if let Some(prev) = last_rank.get(&key) {
                if rk < *prev {
                    v.reordered += 1;
                }
            }
            last_rank.insert(key, rk);
        }
    }
    v
}

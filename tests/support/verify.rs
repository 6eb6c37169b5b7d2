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
    /// A few reorderings (where, which ids, their commit ranks), for the failure
    /// message.
    pub reordered_sample: Vec<String>,
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
    let mut last_rank: HashMap<(String, Vec<u8>), (usize, String, i64)> = HashMap::new();
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
            if let Some((prev, prev_id, prev_offset)) = last_rank.get(&key) {
                if rk < *prev {
                    v.reordered += 1;
                    if v.reordered_sample.len() < 5 {
                        v.reordered_sample.push(format!(
                            "{}[{}] key {:?}: {id} (commit #{rk}) first at offset {}, after {prev_id} (commit #{prev}) at {prev_offset}",
                            r.topic,
                            r.partition,
                            String::from_utf8_lossy(&key.1),
                            r.offset
                        ));
                    }
                }
            }
            last_rank.insert(key, (rk, id.clone(), r.offset));
        }
    }
    v
}

/// The relay's environment that makes it log every delivery report it got
/// ([`acks_in`] reads them back): `pgoutbox::acks` at trace level.
pub const ACK_LOG: (&str, &str) = ("RUST_LOG", "info,pgoutbox::acks=trace");

/// One delivery report as the relay logged it: where the broker says it put the
/// record with this `id`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Ack {
    pub topic: String,
    pub partition: i32,
    pub offset: i64,
    pub id: String,
}

/// Every `acked` line of a relay's stderr (run with [`ACK_LOG`]).
pub fn acks_in(stderr: &str) -> Vec<Ack> {
    stderr
        .lines()
        .filter_map(|line| {
            let rest = &line[line.find(" acked topic=")? + " acked topic=".len()..];
            let (topic, rest) = rest.split_once(" partition=")?;
            let (partition, rest) = rest.split_once(" offset=")?;
            let (offset, id) = rest.split_once(" id=")?;
            Some(Ack {
                topic: topic.to_owned(),
                partition: partition.parse().ok()?,
                offset: offset.parse().ok()?,
                id: id.trim_end().to_owned(),
            })
        })
        .collect()
}

/// Acked records against what a consumer read: the broker's side of a loss.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct AckAudit {
    /// Delivery reports compared.
    pub acked: usize,
    /// Acked, but no record with that id was read at that offset (nor any
    /// record at all there): the broker acknowledged what it does not serve.
    pub missing: Vec<Ack>,
    /// One offset acknowledged for two different records, or read back with
    /// another record than the one acked there: the broker overwrote a record.
    pub overwritten: Vec<(Ack, String)>,
}

impl AckAudit {
    /// No acked record is missing or overwritten; prints a few of each if so.
    pub fn assert_clean(&self) {
        assert!(
            self.missing.is_empty() && self.overwritten.is_empty(),
            "the broker acked records it does not serve: {} missing (first: {:?}), {} overwritten (first: {:?}) of {} acked",
            self.missing.len(),
            &self.missing[..self.missing.len().min(5)],
            self.overwritten.len(),
            &self.overwritten[..self.overwritten.len().min(5)],
            self.acked
        );
    }
}

/// The relay's own side of "lost 0", for a broker that cannot be trusted to serve
/// what it acked: every committed event was either read back or acked by a relay.
///
/// tansu 0.6.0 (`tansu-storage/src/dynostore.rs`): a Produce raises the partition's
/// high watermark (a compare-and-swap) *before* it stores its batch; a Fetch in
/// between sees the watermark past both batches of two concurrent producers (a
/// killed relay's requests still in flight and its successor's) but only the later
/// batch, serves it, and the consumer moves past the earlier one — which is then
/// acked and never read by a consumer that reads on. Returns the events acked and not served (the
/// broker's loss), to be printed; fails naming any event no relay got an ack for.
pub fn assert_acked_or_read(ledger: &Ledger, records: &[Consumed], acks: &[Ack]) -> Vec<String> {
    let read: std::collections::HashSet<String> = records.iter().map(Consumed::id).collect();
    let acked: std::collections::HashSet<&str> = acks.iter().map(|a| a.id.as_str()).collect();
    let mut broker_lost = Vec::new();
    let mut never_acked = Vec::new();
    for (id, _) in &ledger.committed {
        if read.contains(id) {
            continue;
        }
        if acked.contains(id.as_str()) {
            broker_lost.push(id.clone());
        } else {
            never_acked.push(id.clone());
        }
    }
    assert!(
        never_acked.is_empty(),
        "{} committed events were neither read back nor acked to any relay (first: {:?})",
        never_acked.len(),
        &never_acked[..never_acked.len().min(5)]
    );
    broker_lost
}

/// For each committed event no record was read of (the first `limit`): where the
/// relay's acks put it, or that no relay got an ack for it. Tells a broker that
/// acked and does not serve from a relay that never delivered.
pub fn explain_lost(ledger: &Ledger, records: &[Consumed], acks: &[Ack], limit: usize) -> String {
    let read: std::collections::HashSet<String> = records.iter().map(Consumed::id).collect();
    let mut lines = Vec::new();
    let mut lost = 0;
    for (id, key) in &ledger.committed {
        if read.contains(id) {
            continue;
        }
        lost += 1;
        if lines.len() < limit {
            let places: Vec<String> = acks
                .iter()
                .filter(|a| &a.id == id)
                .map(|a| format!("{}[{}]@{}", a.topic, a.partition, a.offset))
                .collect();
            lines.push(if places.is_empty() {
                format!("  {id} (key {key}): no relay got an ack for it")
            } else {
                format!("  {id} (key {key}): acked at {}", places.join(", "))
            });
        }
    }
    format!(
        "{lost} committed events not read back:\n{}",
        lines.join("\n")
    )
}

/// Compare every ack with the records read (all of each partition, from 0).
pub fn audit_acks(acks: &[Ack], records: &[Consumed]) -> AckAudit {
    let mut read: HashMap<(&str, i32, i64), String> = HashMap::new();
    for r in records {
        read.insert((r.topic.as_str(), r.partition, r.offset), r.id());
    }
    let mut audit = AckAudit {
        acked: acks.len(),
        ..AckAudit::default()
    };
    let mut first_ack: HashMap<(&str, i32, i64), &str> = HashMap::new();
    for ack in acks {
        // A report at an unknown offset (-1001) is no ack (the relay fails it and
        // sends the record again: `kafka::producer::context::unplaced`); logged as
        // one, it is missing here.
        let at = (ack.topic.as_str(), ack.partition, ack.offset);
        let mut why = Vec::new();
        if let Some(earlier) = first_ack.insert(at, &ack.id) {
            if earlier != ack.id {
                why.push(format!("also acked for {earlier}"));
            }
        }
        match read.get(&at) {
            None => audit.missing.push(ack.clone()),
            Some(id) if *id != ack.id => why.push(format!("read back as {id}")),
            Some(_) => {}
        }
        if !why.is_empty() {
            audit.overwritten.push((ack.clone(), why.join("; ")));
        }
    }
    audit
}

#[cfg(test)]
mod tests {
    use super::*;

    fn consumed(topic: &str, partition: i32, offset: i64, id: &str) -> Consumed {
        let headers = HashMap::from([("id".to_owned(), id.as_bytes().to_vec())]);
        Consumed {
            topic: topic.to_owned(),
            partition,
            offset,
            key: None,
            value: None,
            headers,
            header_list: Vec::new(),
            timestamp: None,
        }
    }

    #[test]
    fn an_ack_line_is_read_back_with_its_place_and_id() {
        let log = "2026-12-03T16:20:00.1Z  INFO relaying outbox to kafka\n\
                   2026-12-03T16:20:00.2Z TRACE acked topic=db.order partition=2 offset=41 id=<null id>\n";
        assert_eq!(
            acks_in(log),
            vec![Ack {
                topic: "db.order".into(),
                partition: 2,
                offset: 41,
                id: "<null id>".into()
            }]
        );
    }

    #[test]
    fn the_audit_names_an_acked_record_not_read_and_an_offset_acked_twice() {
        let ack = |offset, id: &str| Ack {
            topic: "t".into(),
            partition: 0,
            offset,
            id: id.into(),
        };
        let acks = [
            ack(0, "a"),
            ack(1, "b"),
            ack(1, "c"),
            ack(2, "d"),
            ack(-1001, "e"),
        ];
        let read = [consumed("t", 0, 0, "a"), consumed("t", 0, 1, "b")];
        let audit = audit_acks(&acks, &read);
        assert_eq!(
            audit.missing,
            vec![ack(2, "d"), ack(-1001, "e")],
            "an ack at an unknown offset vouches for nothing"
        );
        assert_eq!(audit.overwritten.len(), 1);
        assert_eq!(audit.overwritten[0].0, ack(1, "c"));
        let clean = audit_acks(&acks[..2], &read);
        assert_eq!(
            clean,
            AckAudit {
                acked: 2,
                ..AckAudit::default()
            }
        );
    }
}

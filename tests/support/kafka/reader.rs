//! The verifier's consumer: reads every partition of a set of topics from the
//! beginning over real sockets, tracking its own positions so that no record is
//! skipped or read twice, and reporting gaps and re-reads ([`Reader`]).
//!
//! tansu's reported end offsets are unreliable, so the reader counts records
//! instead of comparing against end offsets; the same code reads Apache Kafka.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::{Headers, Message};
use rdkafka::{ClientConfig, Offset, TopicPartitionList};

use crate::support::{hold_for, poll_for, wait_for, WAIT};

/// One consumed record.
#[derive(Debug, Clone)]
pub struct Consumed {
    pub topic: String,
    pub partition: i32,
    pub offset: i64,
    pub key: Option<Vec<u8>>,
    pub value: Option<Vec<u8>>,
    pub headers: HashMap<String, Vec<u8>>,
    /// Every header in order, a null value as `None`.
    pub header_list: Vec<(String, Option<Vec<u8>>)>,
    pub timestamp: Option<i64>,
}

impl Consumed {
    /// A header as UTF-8 text.
    pub fn header(&self, name: &str) -> Option<String> {
        self.headers
            .get(name)
            .map(|v| String::from_utf8_lossy(v).into_owned())
    }

    /// The `id` header.
    pub fn id(&self) -> String {
        self.header("id").unwrap_or_default()
    }
}

/// A [`Reader`] rebuilds its consumer after this long without a new record, then
/// after twice as long each time, up to [`REBUILD_MAX`].
const REBUILD_FIRST: Duration = Duration::from_secs(1);
const REBUILD_MAX: Duration = Duration::from_secs(8);
/// A stalled wait's last consumer ([`Reader::last_chance`]) is left alone while it
/// reads something at least this often, up to [`LAST_CHANCE_MAX`].
const LAST_CHANCE_QUIET: Duration = Duration::from_secs(20);
const LAST_CHANCE_MAX: Duration = Duration::from_secs(120);

/// When a wait looks at its condition: after a poll that found nothing (the
/// broker has nothing more right now), and at least every [`Check::EVERY`] while
/// records stream in — never after every record. Conditions look at every record
/// read (most build a set of ids), so checking after each made a long read
/// quadratic: in a debug build, 2–5 ms per record at 15,000 records, the "reader
/// stalled" of loaded runs (a few hundred records a second while the broker had
/// them all).
struct Check {
    last: Option<Instant>,
    idle: bool,
}

impl Check {
    const EVERY: Duration = Duration::from_millis(250);

    fn new() -> Self {
        Self {
            last: None,
            idle: true,
        }
    }

    /// Whether to look at the condition now (and note that it is looked at).
    fn due(&mut self) -> bool {
        let due = self.idle || self.last.map_or(true, |t| t.elapsed() >= Self::EVERY);
        if due {
            self.last = Some(Instant::now());
        }
        due
    }

    /// The last poll's outcome: whether it brought a record.
    fn polled(&mut self, got: bool) {
        self.idle = !got;
    }
}

/// Reads all partitions of some topics from the beginning.
///
/// tansu quirk (0.6.0): a consumer assigned to a partition while it is still empty
/// never receives the records produced afterwards (a fresh consumer does). So the
/// reader rebuilds its consumer at its own positions whenever it goes without a new
/// record for a while; positions are tracked here, so no record is skipped or read
/// twice. That while doubles with every rebuild that brought nothing (1 s up to
/// 8 s): on a loaded machine a new consumer can take longer than a second to
/// fetch at all, and rebuilding it every second then reads nothing, ever (seen:
/// a reader stuck for minutes at two thirds of each partition, while a consumer
/// left alone at its positions read on at once).
///
/// Stalls were still seen with the backoff (1 in 23 stressed runs of the kill -9
/// tests; 4 in 14 under twice that load). One cause was the reader's own: waits
/// checked their condition after every record, quadratic in a long read ([`Check`]
/// now paces it). In case another remains, a wait that times
/// out gets a last chance, one consumer at the reader's positions left alone while
/// it reads on ([`Reader::last_chance`], counted in `stalls`). If that fails too,
/// the reader prints what a fresh consumer finds in each partition beside what it
/// read itself, so a missing record shows whether the broker has it (a reading
/// fault) or not. A record whose offset lies past the next one expected is kept,
/// and the skipped range recorded in `gaps`.
pub struct Reader {
    brokers: String,
    /// Extra client settings (security), applied to every consumer it builds.
    extra: Vec<(String, String)>,
    consumer: BaseConsumer,
    /// Next offset to read, per (topic, partition).
    positions: HashMap<(String, i32), i64>,
    /// When a new record was last read (or the consumer last rebuilt).
    progress_at: Instant,
    /// How long without a new record before the next rebuild.
    rebuild_after: Duration,
    pub records: Vec<Consumed>,
    /// Offset ranges the broker skipped: (topic, partition, expected, got).
    gaps: Vec<(String, i32, i64, i64)>,
    /// Records that came back below the next offset expected (read before).
    rereads: u64,
    /// Waits that timed out and went to their last chance.
    pub stalls: u32,
    /// Errors the consumer reported (and recovered from, or the wait timed out).
    pub errors: u32,
}

impl Reader {
    /// Assign every partition of `topics` from offset 0 (waiting for the topics).
    pub fn new(brokers: &str, topics: &[String]) -> Reader {
        Self::with_config(brokers, topics, &[])
    }

    /// [`Reader::new`] with extra client settings (e.g. SASL/TLS for a secured broker).
    pub fn with_config(brokers: &str, topics: &[String], extra: &[(&str, &str)]) -> Reader {
        let extra: Vec<(String, String)> = extra
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let probe = Self::consumer(brokers, &extra);
        let mut positions = HashMap::new();
        for topic in topics {
            let partitions = wait_for(&format!("metadata of topic {topic}"), WAIT, || {
                let md = probe
                    .fetch_metadata(Some(topic), Duration::from_secs(5))
                    .ok()?;
                let t = md.topics().iter().find(|t| t.name() == topic)?;
                (!t.partitions().is_empty() && t.error().is_none())
                    .then(|| t.partitions().iter().map(|p| p.id()).collect::<Vec<_>>())
            });
            for p in partitions {
                positions.insert((topic.clone(), p), 0);
            }
        }
        Self::at(brokers.to_owned(), extra, positions)
    }

    /// How many partitions of `topic` it reads (as the metadata said at the start).
    pub fn partitions_of(&self, topic: &str) -> u32 {
        let n = self.positions.keys().filter(|(t, _)| t == topic).count();
        u32::try_from(n).expect("partition count")
    }

    /// A reader that reads on from `positions`, with nothing read yet.
    fn at(
        brokers: String,
        extra: Vec<(String, String)>,
        positions: HashMap<(String, i32), i64>,
    ) -> Reader {
        Reader {
            consumer: Self::assigned(&brokers, &extra, &positions),
            brokers,
            extra,
            positions,
            progress_at: Instant::now(),
            rebuild_after: REBUILD_FIRST,
            records: Vec::new(),
            gaps: Vec::new(),
            rereads: 0,
            stalls: 0,
            errors: 0,
        }
    }

    fn consumer(brokers: &str, extra: &[(String, String)]) -> BaseConsumer {
        let mut config = ClientConfig::new();
        for (k, v) in extra {
            config.set(k, v);
        }
        config
            .set("bootstrap.servers", brokers)
            .set("group.id", format!("verifier-{}", std::process::id()))
            .set("enable.auto.commit", "false")
            .set("auto.offset.reset", "earliest")
            // tansu answers a fetch with about one batch per partition; do not let
            // each round trip wait the default 500 ms for more bytes.
            .set("fetch.wait.max.ms", "10")
            .set("fetch.max.bytes", "104857600")
            .set("receive.message.max.bytes", "105000000")
            .create()
            .expect("consumer")
    }

    fn assigned(
        brokers: &str,
        extra: &[(String, String)],
        positions: &HashMap<(String, i32), i64>,
    ) -> BaseConsumer {
        let consumer = Self::consumer(brokers, extra);
        let mut assignment = TopicPartitionList::new();
        for ((topic, p), offset) in positions {
            assignment
                .add_partition_offset(topic, *p, Offset::Offset(*offset))
                .unwrap();
        }
        consumer.assign(&assignment).expect("assign");
        consumer
    }

    /// Poll until `done(records)` holds, or panic after `timeout`.
    pub fn read_until(
        &mut self,
        what: &str,
        timeout: Duration,
        done: impl Fn(&[Consumed]) -> bool,
    ) {
        if !self.try_read_until(timeout, done) {
            panic!(
                "timed out after {timeout:?} waiting for {what}; have {} records ({} consumer errors)",
                self.records.len(),
                self.errors
            );
        }
    }

    /// Poll until `done(records)` holds (true) or `timeout` passes (false).
    pub fn try_read_until(
        &mut self,
        timeout: Duration,
        done: impl Fn(&[Consumed]) -> bool,
    ) -> bool {
        let mut check = Check::new();
        let read = poll_for(timeout, Duration::ZERO, || {
            if check.due() && done(&self.records) {
                return Some(());
            }
            check.polled(self.poll(Duration::from_millis(200)));
            None
        });
        read.is_some() || self.last_chance(done)
    }

    /// A stalled wait's last chance: one new consumer at this reader's positions,
    /// left alone (no rebuilds) while it reads on ([`LAST_CHANCE_QUIET`], at most
    /// [`LAST_CHANCE_MAX`]). Under load a reader was seen stuck for minutes while
    /// such a consumer read on at once (if slowly: 650 to 1,418 records in 20 s
    /// on a saturated machine); the cause is not known (see [`Reader`]), so a stall
    /// and its outcome are printed either way, and a failed last chance prints the
    /// audit.
    fn last_chance(&mut self, done: impl Fn(&[Consumed]) -> bool) -> bool {
        let (before, at) = (self.records.len(), self.positions.clone());
        self.stalls += 1;
        self.consumer = Self::assigned(&self.brokers, &self.extra, &self.positions);
        let mut read_at = Instant::now();
        let mut check = Check::new();
        // Ends early (`Some`) once done or quiet for LAST_CHANCE_QUIET.
        poll_for(LAST_CHANCE_MAX, Duration::ZERO, || {
            if read_at.elapsed() >= LAST_CHANCE_QUIET || (check.due() && done(&self.records)) {
                return Some(());
            }
            let had = self.records.len();
            self.progress_at = Instant::now(); // no rebuilds meanwhile
            check.polled(self.poll(Duration::from_millis(200)));
            if self.records.len() > had {
                read_at = Instant::now();
            }
            None
        });
        let ok = done(&self.records);
        eprintln!(
            "reader stalled at {at:?}; a consumer left alone there read {} more records ({})",
            self.records.len() - before,
            if ok { "enough" } else { "not enough" }
        );
        if !ok {
            eprintln!("{}", self.audit());
        }
        ok
    }

    /// Per partition, what this reader read beside what a fresh consumer reads now
    /// (records, highest offset), and the gaps seen: tells a record the broker lost
    /// from one the reader missed.
    pub fn audit(&self) -> String {
        let from_zero: HashMap<(String, i32), i64> =
            self.positions.keys().map(|k| (k.clone(), 0)).collect();
        let mut fresh = Self::at(self.brokers.clone(), self.extra.clone(), from_zero.clone());
        fresh.settle(Duration::from_secs(10));
        // The same with read_uncommitted: a record past the last stable offset
        // (an open transaction in the partition) shows here only.
        let mut extra = self.extra.clone();
        extra.push(("isolation.level".into(), "read_uncommitted".into()));
        let mut uncommitted = Self::at(self.brokers.clone(), extra, from_zero);
        uncommitted.settle(Duration::from_secs(10));
        let tally = |records: &[Consumed]| {
            let mut by: std::collections::BTreeMap<(String, i32), (usize, i64)> =
                Default::default();
            for r in records {
                let e = by.entry((r.topic.clone(), r.partition)).or_insert((0, -1));
                e.0 += 1;
                e.1 = e.1.max(r.offset);
            }
            by
        };
        let (mine, theirs) = (tally(&self.records), tally(&fresh.records));
        let all = tally(&uncommitted.records);
        let mut text = String::from("reader audit (partition: read here / by a fresh consumer / by a fresh read_uncommitted one, as records and highest offset):");
        for (tp, fresh) in &theirs {
            let here = mine.get(tp).copied().unwrap_or((0, -1));
            let any = all.get(tp).copied().unwrap_or((0, -1));
            text += &format!(
                "\n  {}[{}]: {} / {} / {} records, offset {} / {} / {}",
                tp.0, tp.1, here.0, fresh.0, any.0, here.1, fresh.1, any.1
            );
        }
        // What a consumer starting where this reader stands gets now.
        let probe = Self::assigned(&self.brokers, &self.extra, &self.positions);
        let mut first: std::collections::BTreeMap<(String, i32), String> = Default::default();
        hold_for(
            Instant::now(),
            Duration::from_secs(5),
            Duration::ZERO,
            || match probe.poll(Duration::from_millis(100)) {
                Some(Ok(m)) => {
                    let tp = (m.topic().to_owned(), m.partition());
                    first
                        .entry(tp)
                        .or_insert_with(|| format!("offset {}", m.offset()));
                }
                Some(Err(e)) => {
                    first
                        .entry((String::from("error"), -1))
                        .or_insert_with(|| e.to_string());
                }
                None => {}
            },
        );
        text + &format!(
            "\n  offset gaps seen by this reader: {:?}\n  records read again below the position: {}\n  at this reader's positions {:?} a new consumer first gets: {:?}",
            self.gaps, self.rereads, self.positions, first
        )
    }

    /// Keep polling for `quiet` more time (to catch duplicates/extras after a target).
    pub fn settle(&mut self, quiet: Duration) {
        hold_for(Instant::now(), quiet, Duration::ZERO, || {
            self.poll(Duration::from_millis(100));
        });
    }

    /// Poll once; `true` if a record (new or already seen) came back.
    fn poll(&mut self, timeout: Duration) -> bool {
        if self.progress_at.elapsed() > self.rebuild_after {
            self.consumer = Self::assigned(&self.brokers, &self.extra, &self.positions);
            self.progress_at = Instant::now();
            self.rebuild_after = (self.rebuild_after * 2).min(REBUILD_MAX);
        }
        let Some(result) = self.consumer.poll(timeout) else {
            return false;
        };
        {
            // A consumer error is librdkafka's news (a broker connection lost, a
            // partition's leader moving, a topic not yet known), not a lost record:
            // it goes on retrying by itself. Said, counted, and read on (the wait's
            // own timeout bounds a consumer that never recovers).
            let m = match result {
                Ok(m) => m,
                Err(err) => {
                    self.errors += 1;
                    if self.errors <= 5 {
                        eprintln!("reader: consumer error (reading on): {err}");
                    }
                    return false;
                }
            };
            let position = self
                .positions
                .entry((m.topic().to_owned(), m.partition()))
                .or_insert(0);
            if m.offset() < *position {
                self.rereads += 1;
                return true; // already read before a rebuild
            }
            if m.offset() > *position {
                self.gaps
                    .push((m.topic().to_owned(), m.partition(), *position, m.offset()));
            }
            *position = m.offset() + 1;
            self.progress_at = Instant::now();
            self.rebuild_after = REBUILD_FIRST;
            let header_list: Vec<(String, Option<Vec<u8>>)> = m
                .headers()
                .map(|h| {
                    h.iter()
                        .map(|x| (x.key.to_owned(), x.value.map(<[u8]>::to_vec)))
                        .collect()
                })
                .unwrap_or_default();
            let headers = header_list
                .iter()
                .map(|(k, v)| (k.clone(), v.clone().unwrap_or_default()))
                .collect();
            self.records.push(Consumed {
                topic: m.topic().to_owned(),
                partition: m.partition(),
                offset: m.offset(),
                key: m.key().map(<[u8]>::to_vec),
                value: m.payload().map(<[u8]>::to_vec),
                headers,
                header_list,
                timestamp: m.timestamp().to_millis(),
            });
        }
        true
    }
}

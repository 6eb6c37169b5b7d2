//! Unit tests of the relay core: pgoutput bytes in (built with
//! [`encode`]), records out into a `Vec` sink, delivery reports back.
//! `mod.rs`: the harness and the flow (order, caps, low-water mark, keepalive,
//! full queue, generations, drain, unexpected messages); `poison.rs`: poison rows;
//! `edges.rs`: rows Debezium delivers differently (NULL route, keyless rows by
//! policy), record timestamps and trace context; `heartbeat.rs`: heartbeats;
//! `messages.rs`: logical decoding messages.

mod edges;
mod heartbeat;
mod messages;
mod poison;

use std::collections::VecDeque;
use std::time::Duration;

use rdkafka::error::RDKafkaErrorCode;

use super::*;
use crate::kafka::producer::{DeliveryError, RefusedRecord, SendError};
use crate::outbox::event::ColumnMapping;
use crate::outbox::invalid::{header, InvalidPolicy};
use crate::outbox::record::KafkaRecord;
use crate::outbox::routing::TopicTemplate;
use crate::outbox::tables::TableSpec;
use crate::pg::names::TableName;
use crate::pg::source::pgoutput::encode::encode;
use crate::pg::source::pgoutput::{
    Begin, ColumnValue, Commit, Relation, StreamStart, TupleData, Update,
};
use crate::pipeline::tag::DeliveryTag;

const GENERATION: u16 = 3;
const RELID: u32 = 16_384;
const COLUMNS: [&str; 5] = [
    "id",
    "aggregate_type",
    "aggregate_id",
    "event_type",
    "payload",
];
/// Bytes one test record counts in flight: key `k` + `{}` + `outbox.event.order`.
const RECORD_SIZE: usize = 1 + 2 + 18;

/// Takes every record, except that it answers the next sends from `answers`.
#[derive(Default)]
struct VecSink {
    sent: Vec<(KafkaRecord, usize)>,
    answers: VecDeque<SendError>,
    /// What [`Sink::stopped`] says (librdkafka's fatal error).
    stopped: bool,
}

impl Sink for VecSink {
    fn send(&mut self, record: &KafkaRecord, tag: usize) -> Result<(), SendError> {
        match self.answers.pop_front() {
            Some(err) => Err(err),
            None => {
                self.sent.push((record.clone(), tag));
                Ok(())
            }
        }
    }

    fn stopped(&self) -> bool {
        self.stopped
    }
}

fn config() -> PipelineConfig {
    PipelineConfig {
        tables: vec![TableSpec {
            table: TableName::parse("public.outbox").unwrap(),
            mapping: ColumnMapping::default(),
            template: TopicTemplate::default(),
        }],
        messages: crate::pipeline::MessageConfig::default(),
        format: crate::outbox::connect::RecordFormat::default(),
        publication: "pgoutbox".into(),
        on_update: OnUpdate::Ignore,
        invalid: InvalidPolicy::default(),
        record_timestamp: Default::default(),
        max_in_flight_records: 100,
        max_in_flight_bytes: 1 << 20,
        drain_timeout: Duration::from_secs(1),
        status_interval: Duration::from_millis(100),
        stall_timeout: Some(Duration::from_secs(60)),
        refusals: Default::default(),
        pinned: Default::default(),
    }
}

fn policy(spec: &str) -> InvalidPolicy {
    InvalidPolicy::parse(&[spec.to_owned()], "dead").unwrap()
}

fn text(s: &str) -> ColumnValue {
    ColumnValue::Text(Bytes::copy_from_slice(s.as_bytes()))
}

/// An outbox row with id `id`; `key` `None` makes it a `null-key` poison row.
fn row(id: &str, key: Option<&str>) -> PgOutputMessage {
    PgOutputMessage::Insert(Insert {
        xid: None,
        relation_id: RELID,
        tuple: TupleData(vec![
            text(id),
            text("order"),
            key.map_or(ColumnValue::Null, text),
            text("Created"),
            text("{}"),
        ]),
    })
}

fn too_large(topic: &str, event_id: &str, refused: Option<RefusedRecord>) -> DeliveryError {
    DeliveryError {
        code: RDKafkaErrorCode::MessageSizeTooLarge,
        reason: "Broker: Message size too large".into(),
        topic: topic.into(),
        event_id: event_id.into(),
        permanent: true,
        refused: refused.map(Box::new),
    }
}

/// A relay fed like a session feeds it, with a `Vec` sink.
struct Harness<'a> {
    relay: Relay<'a>,
    sink: VecSink,
    lsn: u64,
}

impl<'a> Harness<'a> {
    fn new(cfg: &'a PipelineConfig) -> Self {
        let mut h = Self {
            relay: Relay::new(cfg, GENERATION, Arc::new(Metrics::default())),
            sink: VecSink::default(),
            lsn: 0x1000,
        };
        let relation = Relation::text_columns(RELID, "outbox", &COLUMNS);
        h.wal(PgOutputMessage::Relation(relation)).unwrap();
        h
    }

    fn wal(&mut self, message: PgOutputMessage) -> Result<(), PipelineError> {
        self.lsn += 0x10;
        let message = ReplicationMessage::XLogData {
            wal_start: Lsn(self.lsn),
            wal_end: Lsn(self.lsn),
            server_time: 0,
            data: encode(&message, false),
        };
        self.relay.on_wal(&mut self.sink, message)
    }

    fn begin(&mut self) {
        let begin = Begin {
            final_lsn: Lsn(0),
            commit_time: 0,
            xid: 1,
        };
        self.wal(PgOutputMessage::Begin(begin)).unwrap();
    }

    fn commit(&mut self, end: u64) {
        let commit = Commit {
            flags: 0,
            commit_lsn: Lsn(end),
            end_lsn: Lsn(end),
            commit_time: 0,
        };
        self.wal(PgOutputMessage::Commit(commit)).unwrap();
    }

    /// One transaction of good rows, committed at `end`.
    fn txn(&mut self, ids: &[&str], end: u64) {
        self.begin();
        for id in ids {
            self.wal(row(id, Some("k"))).unwrap();
        }
        self.commit(end);
    }

    fn keepalive(&mut self, wal_end: u64) {
        let keepalive = ReplicationMessage::PrimaryKeepalive {
            wal_end: Lsn(wal_end),
            server_time: 0,
            reply_requested: false,
        };
        self.relay.on_wal(&mut self.sink, keepalive).unwrap();
    }

    fn deliver(
        &mut self,
        tag: usize,
        result: Result<(), DeliveryError>,
    ) -> Result<(), PipelineError> {
        let size = RECORD_SIZE;
        let delivery = Delivery {
            tag,
            size,
            result,
            in_kafka: None,
            placement: 0,
        };
        self.relay.on_delivery(&mut self.sink, delivery)
    }

    /// Ack the `i`-th record the sink took.
    fn ack(&mut self, i: usize) {
        let (record, tag) = &self.sink.sent[i];
        let delivery = Delivery {
            tag: *tag,
            size: record.size(),
            result: Ok(()),
            in_kafka: Some(Duration::from_micros(700)),
            placement: 1,
        };
        self.relay.on_delivery(&mut self.sink, delivery).unwrap();
    }

    fn ids(&self) -> Vec<String> {
        self.sink.sent.iter().map(|(r, _)| r.id_text()).collect()
    }

    fn tags(&self) -> Vec<usize> {
        self.sink.sent.iter().map(|(_, t)| *t).collect()
    }

    fn in_flight(&self) -> usize {
        self.relay.tracker().in_flight_records()
    }
}

fn tag(txn: u64) -> usize {
    DeliveryTag::new(GENERATION).pack(txn)
}

fn header_of(record: &KafkaRecord, name: &str) -> Option<String> {
    let (_, value) = record.headers.iter().find(|(n, _)| *n == name)?;
    Some(String::from_utf8_lossy(value).into_owned())
}

#[test]
fn records_reach_the_sink_in_wal_order_tagged_by_transaction() {
    let cfg = config();
    let mut h = Harness::new(&cfg);
    h.txn(&["a1", "a2", "a3"], 0x100);
    h.txn(&["b1"], 0x200);
    assert_eq!(h.ids(), ["a1", "a2", "a3", "b1"]);
    assert_eq!(h.tags(), [tag(0), tag(0), tag(0), tag(1)]);
    let (first, _) = &h.sink.sent[0];
    assert_eq!(first.topic, "outbox.event.order");
    assert_eq!(first.size(), RECORD_SIZE);
    assert_eq!((h.in_flight(), h.relay.stats().produced), (4, 4));
}

#[test]
fn the_record_cap_stops_reading_until_an_ack() {
    let cfg = PipelineConfig {
        max_in_flight_records: 2,
        ..config()
    };
    let mut h = Harness::new(&cfg);
    h.begin();
    h.wal(row("a1", Some("k"))).unwrap();
    assert!(h.relay.can_read());
    h.wal(row("a2", Some("k"))).unwrap();
    assert!(!h.relay.can_read(), "2 records in flight");
    h.ack(1);
    assert!(h.relay.can_read());
}

#[test]
fn the_byte_cap_stops_reading_until_an_ack() {
    let cfg = PipelineConfig {
        max_in_flight_bytes: 2 * RECORD_SIZE,
        ..config()
    };
    let mut h = Harness::new(&cfg);
    h.begin();
    h.wal(row("a1", Some("k"))).unwrap();
    assert!(h.relay.can_read());
    h.wal(row("a2", Some("k"))).unwrap();
    assert!(!h.relay.can_read(), "{} bytes in flight", 2 * RECORD_SIZE);
    h.ack(0);
    assert!(h.relay.can_read());
    assert_eq!(h.relay.tracker().in_flight_bytes(), RECORD_SIZE);
}

#[test]
fn acks_confirm_only_the_contiguous_prefix() {
    let cfg = config();
    let mut h = Harness::new(&cfg);
    h.txn(&["a1", "a2"], 0x100);
    h.txn(&["b1"], 0x200);
    assert_eq!(h.relay.to_report(), None);
    h.ack(2); // b1: b is done, but a is not
    h.ack(1);
    assert_eq!((h.relay.confirmed(), h.relay.to_report()), (Lsn(0), None));
    h.ack(0);
    assert_eq!(h.relay.to_report(), Some(Lsn(0x200)), "a and b at once");
    h.relay.reported(Lsn(0x200));
    assert_eq!(h.relay.to_report(), None, "reported once");
    h.txn(&["c1"], 0x300);
    h.ack(3);
    assert_eq!(h.relay.to_report(), Some(Lsn(0x300)));
    assert_eq!(h.relay.stats().acked, 4);
}

#[test]
fn every_ack_records_its_latency_and_the_kafka_share_librdkafka_measured() {
    let cfg = config();
    let mut h = Harness::new(&cfg);
    h.txn(&["a1", "a2"], 0x100);
    h.ack(0); // librdkafka had it 700 µs (see `ack`)
    h.deliver(tag(0), Ok(())).unwrap(); // a report without librdkafka's clock
    let stats = h.relay.stats();
    assert_eq!((stats.latency.count(), stats.in_kafka.count()), (2, 1));
    let share = stats.in_kafka.quantile(0.5).unwrap();
    assert!(
        (700..=700 + 700 / 32).contains(&share.as_micros()),
        "{share:?}"
    );
}

#[test]
fn a_keepalive_confirms_the_wal_end_only_when_nothing_is_open_or_in_flight() {
    let cfg = config();
    let mut h = Harness::new(&cfg);
    h.begin();
    h.keepalive(0x500);
    assert_eq!(h.relay.confirmed(), Lsn(0), "a transaction is open");
    h.wal(row("a1", Some("k"))).unwrap();
    h.commit(0x100);
    h.keepalive(0x600);
    assert_eq!(h.relay.confirmed(), Lsn(0), "a1 is in flight");
    h.ack(0);
    assert_eq!(h.relay.confirmed(), Lsn(0x100));
    h.keepalive(0x700);
    assert_eq!(h.relay.confirmed(), Lsn(0x700));
    h.keepalive(0x650);
    assert_eq!(h.relay.confirmed(), Lsn(0x700), "never backwards");
}

#[test]
fn a_full_queue_holds_the_record_and_reading_until_it_is_taken() {
    let cfg = config();
    let mut h = Harness::new(&cfg);
    h.begin();
    h.wal(row("a1", Some("k"))).unwrap();
    h.sink.answers = VecDeque::from([SendError::QueueFull, SendError::QueueFull]);
    h.wal(row("a2", Some("k"))).unwrap();
    assert!(!h.relay.can_read() && h.relay.waiting_for_queue());
    h.relay.retry_pending(&mut h.sink).unwrap();
    assert!(!h.relay.can_read(), "still full");
    h.relay.retry_pending(&mut h.sink).unwrap();
    assert!(h.relay.can_read());
    h.wal(row("a3", Some("k"))).unwrap();
    assert_eq!(h.ids(), ["a1", "a2", "a3"]);
    assert_eq!((h.in_flight(), h.relay.stats().produced), (3, 3));
}

#[test]
fn reports_of_another_generation_change_nothing() {
    let cfg = config();
    let mut h = Harness::new(&cfg);
    h.txn(&["a1"], 0x100);
    let stale = DeliveryTag::new(GENERATION - 1).pack(0);
    h.deliver(stale, Ok(())).unwrap();
    let failed = Err(too_large("outbox.event.order", "a1", None));
    h.deliver(stale, failed).unwrap();
    assert_eq!((h.in_flight(), h.relay.stats().acked), (1, 0));
    assert_eq!(h.relay.confirmed(), Lsn(0));
    h.ack(0);
    assert_eq!(h.relay.confirmed(), Lsn(0x100));
}

#[test]
fn the_drain_still_sends_the_waiting_record_and_completes_at_zero_in_flight() {
    let cfg = config();
    let mut h = Harness::new(&cfg);
    h.begin();
    h.wal(row("a1", Some("k"))).unwrap();
    h.sink.answers = VecDeque::from([SendError::QueueFull]);
    h.wal(row("a2", Some("k"))).unwrap();
    assert!(!h.relay.is_drained(), "not draining");
    h.relay.start_drain();
    assert!(h.relay.waiting_for_queue() && !h.relay.can_read());
    assert_eq!(h.in_flight(), 2, "the waiting record counts in flight");
    h.ack(0);
    assert!(!h.relay.is_drained(), "a2 still waits for queue space");
    h.relay.retry_pending(&mut h.sink).unwrap();
    assert_eq!(
        h.ids(),
        ["a1", "a2"],
        "the waiting record is sent during the drain"
    );
    assert!(!h.relay.is_drained(), "a2 in flight");
    h.ack(1);
    assert!(h.relay.is_drained());
    assert_eq!(
        h.relay.confirmed(),
        Lsn(0),
        "the transaction never committed"
    );
}

#[test]
fn updates_follow_on_update_and_unexpected_messages_stop() {
    let update = || {
        PgOutputMessage::Update(Update {
            xid: None,
            relation_id: RELID,
            old: None,
            new: TupleData(vec![]),
        })
    };
    let cfg = config();
    let mut h = Harness::new(&cfg);
    h.begin();
    h.wal(update()).unwrap();
    let start = StreamStart {
        xid: 9,
        first_segment: true,
    };
    let err = h.wal(PgOutputMessage::StreamStart(start)).unwrap_err();
    assert!(
        matches!(err, PipelineError::UnexpectedMessage("Stream Start")),
        "{err:?}"
    );

    let cfg = PipelineConfig {
        on_update: OnUpdate::Fail,
        ..config()
    };
    let mut h = Harness::new(&cfg);
    h.begin();
    let err = h.wal(update()).unwrap_err();
    assert!(
        matches!(err, PipelineError::UpdateOnOutbox { op: "UPDATE", .. }),
        "{err:?}"
    );
    let mut unknown = row("x", Some("k"));
    if let PgOutputMessage::Insert(insert) = &mut unknown {
        insert.relation_id = 7;
    }
    let err = h.wal(unknown).unwrap_err();
    assert!(
        matches!(err, PipelineError::UnknownRelation { relid: 7, .. }),
        "{err:?}"
    );
}

#[test]
fn the_oldest_transaction_without_an_ack_past_the_timeout_is_a_stall_naming_its_first_record() {
    let cfg = config();
    let mut h = Harness::new(&cfg);
    let t0 = std::time::Instant::now();
    let later = |secs| t0 + Duration::from_secs(secs);
    assert_eq!(
        h.relay.stalled(later(600)),
        (None, Duration::ZERO),
        "nothing in flight"
    );
    h.txn(&["a1", "a2"], 0x100);
    h.txn(&["b1"], 0x200);
    let (stall, age) = h.relay.stalled(later(59));
    assert!(stall.is_none() && age >= Duration::from_secs(58), "{age:?}");
    let stall = h.relay.stalled(later(61)).0.expect("past 60 s");
    assert_eq!(stall.event_id(), "a1");
    assert_eq!(stall.record.topic, "outbox.event.order");
    assert_eq!(stall.record.table, "public.outbox");
    assert_eq!(
        (stall.in_flight, stall.timeout),
        (3, Duration::from_secs(60))
    );
    // a1 and a2 acked: b1, sent with them, is now the oldest, and just as stuck.
    h.ack(0);
    h.ack(1);
    let stall = h.relay.stalled(later(61)).0.expect("b1 is as old");
    assert_eq!(stall.event_id(), "b1");
    h.ack(2);
    assert_eq!(h.relay.stalled(later(600)).0, None, "all acked");
}

#[test]
fn an_ack_of_the_oldest_transaction_restarts_its_clock_and_a_drain_or_zero_disables() {
    let cfg = config();
    let mut h = Harness::new(&cfg);
    h.txn(&["a1", "a2"], 0x100);
    h.ack(0);
    let now = std::time::Instant::now();
    let (stall, age) = h.relay.stalled(now + Duration::from_secs(30));
    assert!(stall.is_none() && age < Duration::from_secs(31), "{age:?}");
    h.relay.start_drain();
    assert!(
        h.relay.stalled(now + Duration::from_secs(600)).0.is_none(),
        "draining"
    );

    let off = PipelineConfig {
        stall_timeout: None,
        ..config()
    };
    let mut h = Harness::new(&off);
    h.txn(&["a1"], 0x100);
    let (stall, age) = h
        .relay
        .stalled(std::time::Instant::now() + Duration::from_secs(3600));
    assert!(stall.is_none() && age >= Duration::from_secs(3599));
}

#[test]
fn a_row_of_a_published_table_that_is_not_an_outbox_table_stops_the_session() {
    let cfg = config();
    let mut h = Harness::new(&cfg);
    let orders = Relation::text_columns(RELID + 1, "orders", &["id", "note"]);
    h.wal(PgOutputMessage::Relation(orders)).unwrap();
    h.begin();
    let mut insert = row("o1", Some("k"));
    if let PgOutputMessage::Insert(i) = &mut insert {
        i.relation_id = RELID + 1;
    }
    let err = h.wal(insert).unwrap_err();
    assert!(
        matches!(&err, PipelineError::UnmappedTable { table, .. } if table.to_string() == "public.orders"),
        "{err:?}"
    );
    assert!(!err.is_transient());
    let text = err.to_string();
    assert!(text.contains("add --table public.orders"), "{text}");
    assert!(
        text.contains("ALTER PUBLICATION \"pgoutbox\" DROP TABLE \"public\".\"orders\";"),
        "{text}"
    );
    assert_eq!(h.relay.confirmed(), Lsn(0), "nothing confirmed past it");
}

//! The whole per-event path of the relay core without I/O, for instruction counting:
//! pgoutput bytes → `Relay::on_wal` (decode, route, poison checks, WAL-order send
//! into a sink, per-transaction accounting) → `Relay::on_delivery` (ack, latency,
//! low-water mark), for `N` events in transactions of `K` rows.
//!
//! `cargo run --release --example relay_core -- [N] [K]`. Like `decode_route`, the
//! messages of one transaction are encoded once and replayed, and the sink keeps
//! only the tags of one transaction (a reused buffer), so the marginal cost per
//! event is what a difference of two runs measures.

mod support;

use std::hint::black_box;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use pgoutbox::kafka::producer::{Delivery, SendError};
use pgoutbox::metrics::Metrics;
use pgoutbox::outbox::event::ColumnMapping;
use pgoutbox::outbox::invalid::InvalidPolicy;
use pgoutbox::outbox::record::KafkaRecord;
use pgoutbox::outbox::routing::TopicTemplate;
use pgoutbox::outbox::tables::TableSpec;
use pgoutbox::pg::lsn::Lsn;
use pgoutbox::pg::names::TableName;
use pgoutbox::pg::source::protocol::ReplicationMessage;
use pgoutbox::pipeline::relay::Relay;
use pgoutbox::pipeline::sink::Sink;
use pgoutbox::pipeline::{OnUpdate, PipelineConfig};

/// Takes every record; remembers (tag, size) to ack them after the commit.
struct AckLater(Vec<(usize, usize)>);

impl Sink for AckLater {
    fn send(&mut self, record: &KafkaRecord, tag: usize) -> Result<(), SendError> {
        self.0.push((tag, record.size()));
        Ok(())
    }
}

fn xlog(data: Bytes) -> ReplicationMessage {
    ReplicationMessage::XLogData {
        wal_start: Lsn(0x1_0000),
        wal_end: Lsn(0x1_0000),
        server_time: 0,
        data,
    }
}

fn main() {
    let support::Workload {
        n,
        k,
        relation,
        begin,
        insert,
        commit,
    } = support::workload();
    let cfg = PipelineConfig {
        tables: vec![TableSpec {
            table: TableName::parse("public.outbox").expect("table name"),
            mapping: ColumnMapping::default(),
            template: TopicTemplate::default(),
        }],
        messages: pgoutbox::pipeline::MessageConfig::default(),
        format: pgoutbox::outbox::connect::RecordFormat::default(),
        publication: "pgoutbox".into(),
        on_update: OnUpdate::Ignore,
        invalid: InvalidPolicy::default(),
        record_timestamp: Default::default(),
        max_in_flight_records: usize::MAX,
        max_in_flight_bytes: usize::MAX,
        drain_timeout: Duration::from_secs(1),
        status_interval: Duration::from_millis(100),
        stall_timeout: Some(Duration::from_secs(60)),
        refusals: Default::default(),
        pinned: Default::default(),
    };
    let mut relay = Relay::new(&cfg, 1, Arc::new(Metrics::default()));
    let mut sink = AckLater(Vec::with_capacity(k as usize));
    relay.on_wal(&mut sink, xlog(relation)).expect("relation");
    let mut acks = Vec::with_capacity(k as usize);
    let mut done = 0;
    while done < n {
        relay.on_wal(&mut sink, xlog(begin.clone())).expect("begin");
        for _ in 0..k.min(n - done) {
            relay
                .on_wal(&mut sink, xlog(insert.clone()))
                .expect("insert");
            done += 1;
        }
        relay
            .on_wal(&mut sink, xlog(commit.clone()))
            .expect("commit");
        std::mem::swap(&mut acks, &mut sink.0);
        for (tag, size) in acks.drain(..) {
            let delivery = Delivery {
                tag,
                size,
                result: Ok(()),
                // As librdkafka's clock gives it: recorded like the real path.
                in_kafka: Some(Duration::from_micros(1_500)),
                // Hashed by the producer's delivery callback, not the core.
                placement: 1,
            };
            relay.on_delivery(&mut sink, delivery).expect("ack");
        }
    }
    black_box(relay.confirmed());
    println!(
        "relayed {} events in transactions of {k}",
        relay.stats().acked
    );
}

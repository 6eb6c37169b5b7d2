//! The decode → route hot path without I/O, for instruction counting
//! (`bench/callgrind.sh`): pgoutput bytes → `Decoder` → outbox mapping →
//! `KafkaRecord`, for `N` events in transactions of `K` rows.
//!
//! `cargo run --release --example decode_route -- [N] [K]`. The messages of one
//! transaction are encoded once and replayed (cloning `Bytes` is a reference count),
//! so setup does not grow with `N` and the marginal cost per event is what a
//! difference of two runs measures.

mod support;

use std::hint::black_box;

use pgoutbox::outbox::event::ColumnMapping;
use pgoutbox::outbox::record::KafkaRecord;
use pgoutbox::outbox::routing::TopicTemplate;
use pgoutbox::outbox::tables::{OutboxTables, RelationRoute, TableSpec};
use pgoutbox::pg::names::TableName;
use pgoutbox::pg::source::pgoutput::{Decoder, PgOutputMessage};

fn main() {
    let support::Workload {
        n,
        k,
        relation,
        begin,
        insert,
        commit,
    } = support::workload();
    let mut decoder = Decoder::new();
    let mut tables = OutboxTables::new(vec![TableSpec {
        table: TableName::parse("public.outbox").expect("table name"),
        mapping: ColumnMapping::default(),
        template: TopicTemplate::default(),
    }]);
    let mut messages = vec![relation];
    let mut routed = 0u64;
    let mut commit_time = 0;
    let mut done = 0;
    while done < n {
        messages.push(begin.clone());
        for _ in 0..k.min(n - done) {
            messages.push(insert.clone());
            done += 1;
        }
        messages.push(commit.clone());
        for bytes in messages.drain(..) {
            match decoder.decode(bytes).expect("valid message") {
                PgOutputMessage::Relation(r) => tables.on_relation(&r).expect("mapped columns"),
                PgOutputMessage::Begin(b) => commit_time = b.commit_time,
                PgOutputMessage::Insert(i) => {
                    if let Some(RelationRoute::Outbox(_, mapping, template)) =
                        tables.route(i.relation_id)
                    {
                        let event = mapping.event(&i.tuple);
                        let record = KafkaRecord::from_event(&event, template, commit_time);
                        routed += u64::from(record.has_valid_topic());
                        black_box(record);
                    }
                }
                other => {
                    black_box(other);
                }
            }
        }
    }
    println!("routed {routed} events in transactions of {k}");
}

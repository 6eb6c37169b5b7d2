//! The decode → route hot path without I/O, for instruction counting
//! (`bench/callgrind.sh`): pgoutput bytes → `Decoder` → outbox mapping →
//! `KafkaRecord`, for `N` events in transactions of `K` rows.
//!
//! `cargo run --release --example decode_route -- [N] [K]`. The messages of one
//! transaction are encoded once and replayed (cloning `Bytes` is a reference count),
//! so setup does not grow with `N` and the marginal cost per event is what a
//! difference of two runs measures.

use std::hint::black_box;

use bytes::Bytes;
use pgoutbox::outbox::event::ColumnMapping;
use pgoutbox::outbox::record::KafkaRecord;
use pgoutbox::outbox::routing::TopicTemplate;
use pgoutbox::outbox::tables::{OutboxTables, RelationRoute, TableSpec};
use pgoutbox::pg::catalog::TableName;
use pgoutbox::pg::lsn::Lsn;
use pgoutbox::pg::pgoutput::encode::encode;
use pgoutbox::pg::pgoutput::{
    Begin, ColumnValue, Commit, Decoder, Insert, PgOutputMessage, Relation, TupleData,
};

fn text(s: &str) -> ColumnValue {
    ColumnValue::Text(Bytes::copy_from_slice(s.as_bytes()))
}

fn main() {
    let mut args = std::env::args().skip(1);
    let n: u64 = args.next().and_then(|v| v.parse().ok()).unwrap_or(100_000);
    let k: u64 = args
        .next()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10)
        .max(1);
    let columns = [
        "id",
        "aggregate_type",
        "aggregate_id",
        "event_type",
        "payload",
        "created_at",
    ];
    let relation = Relation::text_columns(16_384, "outbox", &columns);
    let insert = PgOutputMessage::Insert(Insert {
        xid: None,
        relation_id: 16_384,
        tuple: TupleData(vec![
            text("0b7e4c1e-2f0a-4c6b-9a51-3c2d8e9f1a77"),
            text("order"),
            text("customer-4711"),
            text("OrderCreated"),
            text(
                r#"{"order_id": 4711, "total": "19.99", "currency": "EUR", "lines": [{"sku": "A-1", "qty": 2}], "note": "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"}"#,
            ),
            text("2026-11-29 13:28:54.980104+00"),
        ]),
    });
    let begin = PgOutputMessage::Begin(Begin {
        final_lsn: Lsn(0x1_0000),
        commit_time: 1_000_000,
        xid: 742,
    });
    let commit = PgOutputMessage::Commit(Commit {
        flags: 0,
        commit_lsn: Lsn(0x1_0000),
        end_lsn: Lsn(0x1_0030),
        commit_time: 1_000_000,
    });
    let (begin, insert, commit) = (
        encode(&begin, false),
        encode(&insert, false),
        encode(&commit, false),
    );
    let mut decoder = Decoder::new();
    let mut tables = OutboxTables::new(vec![TableSpec {
        table: TableName::parse("public.outbox").expect("table name"),
        mapping: ColumnMapping::default(),
        template: TopicTemplate::default(),
    }]);
    let mut messages = vec![encode(&PgOutputMessage::Relation(relation), false)];
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

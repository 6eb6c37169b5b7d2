//! What the instruction-count examples share (`bench/callgrind.sh`): the `[N] [K]`
//! arguments and one outbox transaction as pgoutput bytes, encoded once so that
//! replaying it costs a reference count per message.

use bytes::Bytes;
use pgoutbox::pg::lsn::Lsn;
use pgoutbox::pg::source::pgoutput::encode::encode;
use pgoutbox::pg::source::pgoutput::{
    Begin, ColumnValue, Commit, Insert, PgOutputMessage, Relation, TupleData,
};

/// `N` events in transactions of `K` rows, and the messages to build them from.
pub struct Workload {
    /// Events in all.
    pub n: u64,
    /// Rows per transaction.
    pub k: u64,
    /// The outbox table's Relation message.
    pub relation: Bytes,
    /// A Begin.
    pub begin: Bytes,
    /// One outbox row's Insert.
    pub insert: Bytes,
    /// The Commit.
    pub commit: Bytes,
}

fn text(s: &str) -> ColumnValue {
    ColumnValue::Text(Bytes::copy_from_slice(s.as_bytes()))
}

/// The workload of the command line: `[N]` events (100,000) in transactions of `[K]`
/// rows (10).
pub fn workload() -> Workload {
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
    Workload {
        n,
        k,
        relation: encode(&PgOutputMessage::Relation(relation), false),
        begin: encode(&begin, false),
        insert: encode(&insert, false),
        commit: encode(&commit, false),
    }
}

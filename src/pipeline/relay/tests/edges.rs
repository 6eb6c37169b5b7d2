//! The relay on rows at the edges: a NULL or empty routing value, keyless rows
//! under `null-key=deliver`, `--record-timestamp`, and `--trace-context`.

use super::*;
use crate::outbox::record::RecordTimestamp;
use crate::outbox::trace::TraceField;

const PARENT: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

/// An outbox row with every column given (`None` = NULL).
fn full_row(id: &str, route: Option<&str>, key: Option<&str>, payload: &str) -> PgOutputMessage {
    PgOutputMessage::Insert(Insert {
        xid: None,
        relation_id: RELID,
        tuple: TupleData(vec![
            text(id),
            route.map_or(ColumnValue::Null, text),
            key.map_or(ColumnValue::Null, text),
            text("Created"),
            text(payload),
        ]),
    })
}

fn counter(h: &Harness<'_>, line: &str) -> bool {
    h.relay.metrics.render().lines().any(|l| l == line)
}

#[test]
fn a_null_or_empty_routing_value_is_a_poison_row_not_a_topic() {
    let cfg = config();
    let mut h = Harness::new(&cfg);
    h.begin();
    let err = h.wal(full_row("r1", None, Some("k"), "{}")).unwrap_err();
    let PipelineError::Invalid(poison) = err else {
        panic!("{err:?}")
    };
    assert_eq!(
        (poison.cause, poison.event_id.as_str()),
        ("null-route", "r1")
    );
    assert!(poison.to_string().contains("\"outbox.event.\""), "{poison}");
    assert!(h.ids().is_empty(), "nothing went to topic outbox.event.");

    let cfg = PipelineConfig {
        invalid: policy("null-route=dlq"),
        ..config()
    };
    let mut h = Harness::new(&cfg);
    h.begin();
    h.wal(full_row("r2", Some(""), Some("k"), "{}")).unwrap();
    h.commit(0x100);
    let (letter, _) = &h.sink.sent[0];
    assert_eq!(letter.topic, "dead");
    assert_eq!(
        header_of(letter, header::CAUSE).as_deref(),
        Some("null-route")
    );
    assert!(counter(
        &h,
        "pgoutbox_invalid_rows_total{cause=\"null-route\",action=\"dlq\"} 1"
    ));
}

#[test]
fn keyless_rows_are_delivered_as_they_are_by_policy_and_counted() {
    let cfg = PipelineConfig {
        invalid: policy("null-key=deliver"),
        ..config()
    };
    let mut h = Harness::new(&cfg);
    h.begin();
    h.wal(full_row("n1", Some("order"), None, "{}")).unwrap();
    h.wal(full_row("e1", Some("order"), Some(""), "{}"))
        .unwrap();
    h.commit(0x100);
    assert_eq!(h.ids(), ["n1", "e1"]);
    assert_eq!(h.sink.sent[0].0.key, None, "NULL stays a null key");
    assert_eq!(
        h.sink.sent[1].0.key.as_deref(),
        Some(&b""[..]),
        "empty stays empty"
    );
    assert_eq!(h.sink.sent[0].0.topic, "outbox.event.order");
    assert!(counter(
        &h,
        "pgoutbox_invalid_rows_total{cause=\"null-key\",action=\"deliver\"} 2"
    ));
    h.ack(0);
    h.ack(1);
    assert_eq!(h.relay.confirmed(), Lsn(0x100));
    // Delivering keyless rows lets no other cause through.
    h.begin();
    let err = h.wal(full_row("n2", None, None, "{}")).unwrap_err();
    assert!(
        matches!(&err, PipelineError::Invalid(p) if p.cause == "null-route"),
        "{err:?}"
    );
}

#[test]
fn record_timestamps_follow_the_mode() {
    let stamp = |mode| {
        let cfg = PipelineConfig {
            record_timestamp: mode,
            ..config()
        };
        let mut h = Harness::new(&cfg);
        h.txn(&["a1"], 0x100);
        h.sink.sent[0].0.timestamp_ms
    };
    // The harness commits at 2000-01-01 and has no timestamp column.
    assert_eq!(stamp(RecordTimestamp::Column), 946_684_800_000);
    assert_eq!(stamp(RecordTimestamp::Commit), 946_684_800_000);
    assert!(stamp(RecordTimestamp::Processing) > 1_700_000_000_000);
}

#[test]
fn trace_context_becomes_headers_and_a_bad_one_never_holds_the_event_back() {
    let mut cfg = config();
    cfg.tables[0].mapping.trace_context = TraceField::parse("payload.meta").unwrap();
    let mut h = Harness::new(&cfg);
    h.begin();
    let good = format!(r#"{{"meta": {{"traceparent": "{PARENT}", "tracestate": "rojo=1"}}}}"#);
    h.wal(full_row("t1", Some("order"), Some("k"), &good))
        .unwrap();
    h.wal(full_row(
        "t2",
        Some("order"),
        Some("k"),
        r#"{"meta": {"traceparent": "00-bad"}}"#,
    ))
    .unwrap();
    h.wal(full_row("t3", Some("order"), Some("k"), "{}"))
        .unwrap();
    h.commit(0x100);
    assert_eq!(h.ids(), ["t1", "t2", "t3"]);
    let sent = |i: usize, name: &str| header_of(&h.sink.sent[i].0, name);
    assert_eq!(sent(0, "traceparent").as_deref(), Some(PARENT));
    assert_eq!(sent(0, "tracestate").as_deref(), Some("rojo=1"));
    assert_eq!(
        (sent(1, "traceparent"), sent(2, "traceparent")),
        (None, None)
    );
    for line in [
        "pgoutbox_trace_context_total{outcome=\"propagated\"} 1",
        "pgoutbox_trace_context_total{outcome=\"invalid\"} 1",
        "pgoutbox_trace_context_total{outcome=\"absent\"} 1",
    ] {
        assert!(counter(&h, line), "{line}");
    }
}

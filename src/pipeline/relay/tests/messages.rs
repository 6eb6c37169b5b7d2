//! Logical decoding messages in the relay core: rows and messages of one
//! transaction in WAL order, the `bad-message` policies, prefixes and the
//! non-transactional policy.

use super::*;
use crate::outbox::message::HEARTBEAT_PREFIX;
use crate::pg::source::pgoutput::LogicalMessage;
use crate::pipeline::{MessageConfig, NonTransactional};

const EVENT: &str = r#"{"id":"m1","aggregate_type":"order","aggregate_id":"k","event_type":"Created","payload":{"n":1},"headers":{"traceparent":"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01","id":"not-this"}}"#;

fn message(prefix: &str, content: &str, transactional: bool) -> PgOutputMessage {
    PgOutputMessage::Message(LogicalMessage {
        xid: None,
        flags: u8::from(transactional),
        lsn: Lsn(0x5000),
        prefix: prefix.into(),
        content: Bytes::copy_from_slice(content.as_bytes()),
    })
}

fn event(id: &str) -> String {
    EVENT.replace("\"m1\"", &format!("{id:?}"))
}

fn placed(record: &KafkaRecord, name: &str) -> Option<String> {
    let (_, value) = record.placed.iter().find(|(n, _)| &**n == name)?;
    value
        .as_deref()
        .map(|v| String::from_utf8_lossy(v).into_owned())
}

#[test]
fn rows_and_messages_of_a_transaction_go_out_in_wal_order_as_one_unit() {
    let cfg = config();
    let mut h = Harness::new(&cfg);
    h.begin();
    h.wal(row("r1", Some("k"))).unwrap();
    h.wal(message("pgoutbox", &event("m1"), true)).unwrap();
    h.wal(row("r2", Some("k"))).unwrap();
    h.commit(0x100);
    assert_eq!(h.ids(), ["r1", "m1", "r2"]);
    assert_eq!(h.tags(), [tag(0), tag(0), tag(0)]);
    let (m, _) = &h.sink.sent[1];
    assert_eq!(m.topic, "outbox.event.order");
    assert_eq!(m.key.as_deref(), Some(&b"k"[..]));
    assert_eq!(m.value.as_deref(), Some(&br#"{"n":1}"#[..]));
    assert_eq!(placed(m, "event_type").as_deref(), Some("Created"));
    assert!(placed(m, "traceparent").unwrap().starts_with("00-0af7"));
    assert_eq!(
        placed(m, "id"),
        None,
        "the message cannot replace header id"
    );
    // The LSN passes the transaction only once the message is acked too.
    h.ack(0);
    h.ack(2);
    assert_eq!(h.relay.to_report(), None);
    h.ack(1);
    assert_eq!(h.relay.to_report(), Some(Lsn(0x100)));
}

#[test]
fn only_outbox_prefixes_are_events_and_never_the_heartbeat() {
    let cfg = PipelineConfig {
        messages: MessageConfig {
            prefixes: vec!["a".into(), HEARTBEAT_PREFIX.into()],
            ..MessageConfig::default()
        },
        ..config()
    };
    let mut h = Harness::new(&cfg);
    h.begin();
    for prefix in ["pgoutbox", "a", "ab", HEARTBEAT_PREFIX, ""] {
        h.wal(message(prefix, &event(prefix), true)).unwrap();
    }
    h.commit(0x100);
    assert_eq!(h.ids(), ["a"]);
}

#[test]
fn a_bad_message_stops_by_default_naming_prefix_lsn_and_problem() {
    let cfg = config();
    let mut h = Harness::new(&cfg);
    h.begin();
    let err = h.wal(message("pgoutbox", "[1]", true)).unwrap_err();
    let PipelineError::Invalid(poison) = err else {
        panic!("{err:?}")
    };
    assert_eq!(poison.cause, "bad-message");
    assert_eq!(poison.table, "message with prefix \"pgoutbox\"");
    assert_eq!(poison.lsn, "0/5000");
    let text = poison.to_string();
    assert!(
        text.contains("content is a JSON array, not an object with the outbox fields"),
        "{text}"
    );
    assert!(text.contains("--on-invalid bad-message=dlq"), "{text}");
}

#[test]
fn a_bad_message_is_dead_lettered_whole_or_skipped_by_policy() {
    let dlq = PipelineConfig {
        invalid: policy("bad-message=dlq"),
        ..config()
    };
    let mut h = Harness::new(&dlq);
    h.begin();
    h.wal(message("pgoutbox", "{\"id\":\"x\"}", true)).unwrap();
    h.wal(message("pgoutbox", &event("m2"), true)).unwrap();
    h.commit(0x100);
    let (letter, _) = &h.sink.sent[0];
    assert_eq!(letter.topic, "dead");
    assert_eq!(letter.value.as_deref(), Some(&b"{\"id\":\"x\"}"[..]));
    assert_eq!(
        header_of(letter, header::CAUSE).as_deref(),
        Some("bad-message")
    );
    assert_eq!(h.ids()[1], "m2");
    h.ack(0);
    h.ack(1);
    assert_eq!(h.relay.to_report(), Some(Lsn(0x100)));

    let skip = PipelineConfig {
        invalid: policy("bad-message=skip"),
        ..config()
    };
    let mut h = Harness::new(&skip);
    h.begin();
    h.wal(message("pgoutbox", "\u{1}not json", true)).unwrap();
    h.commit(0x100);
    assert!(h.sink.sent.is_empty());
    assert_eq!(h.relay.to_report(), Some(Lsn(0x100)));
}

#[test]
fn a_message_with_a_poison_field_follows_that_cause() {
    let cfg = PipelineConfig {
        invalid: policy("null-key=dlq"),
        ..config()
    };
    let mut h = Harness::new(&cfg);
    h.begin();
    let keyless = event("m3").replace(r#""aggregate_id":"k""#, r#""aggregate_id":null"#);
    h.wal(message("pgoutbox", &keyless, true)).unwrap();
    h.commit(0x100);
    let (letter, _) = &h.sink.sent[0];
    assert_eq!(letter.topic, "dead");
    assert_eq!(
        header_of(letter, header::CAUSE).as_deref(),
        Some("null-key")
    );
}

#[test]
fn non_transactional_messages_are_counted_and_ignored_or_relayed_alone() {
    let metrics = Arc::new(Metrics::default());
    let cfg = config();
    let mut relay = Relay::new(&cfg, GENERATION, metrics.clone());
    let mut sink = VecSink::default();
    let wal = |relay: &mut Relay<'_>, sink: &mut VecSink, m: PgOutputMessage| {
        let data = encode(&m, false);
        let (wal_start, wal_end, server_time) = (Lsn(0x4000), Lsn(0x4000), 0);
        let x = ReplicationMessage::XLogData {
            wal_start,
            wal_end,
            server_time,
            data,
        };
        relay.on_wal(sink, x).unwrap();
    };
    wal(
        &mut relay,
        &mut sink,
        message("pgoutbox", &event("n1"), false),
    );
    wal(
        &mut relay,
        &mut sink,
        message("pgoutbox", &event("n2"), false),
    );
    assert!(sink.sent.is_empty());
    assert!(metrics
        .render()
        .contains("pgoutbox_messages_ignored_total 2\n"));

    let cfg = PipelineConfig {
        messages: MessageConfig {
            non_transactional: NonTransactional::Relay,
            ..MessageConfig::default()
        },
        ..config()
    };
    let mut h = Harness::new(&cfg);
    h.wal(message("pgoutbox", &event("n3"), false)).unwrap();
    assert_eq!(h.ids(), ["n3"]);
    h.keepalive(0x9000);
    assert_eq!(h.relay.to_report(), None, "in flight: no idle confirmation");
    h.ack(0);
    assert_eq!(h.relay.to_report(), Some(Lsn(0x5000)));
}

#[test]
fn messages_work_without_any_table() {
    let cfg = PipelineConfig {
        tables: Vec::new(),
        ..config()
    };
    let mut h = Harness::new(&cfg);
    h.begin();
    h.wal(message("pgoutbox", &event("t1"), true)).unwrap();
    h.commit(0x900);
    assert_eq!(h.ids(), ["t1"]);
    h.ack(0);
    assert_eq!(h.relay.to_report(), Some(Lsn(0x900)));
}

#[test]
fn each_field_set_is_mapped_on_its_own() {
    let cfg = PipelineConfig {
        invalid: policy("bad-message=dlq"),
        ..config()
    };
    let mut h = Harness::new(&cfg);
    h.begin();
    let without_payload = r#"{"id":"a","aggregate_type":"order","aggregate_id":"k"}"#;
    h.wal(message("pgoutbox", without_payload, true)).unwrap();
    h.wal(message("pgoutbox", &event("b"), true)).unwrap();
    h.wal(message("pgoutbox", without_payload, true)).unwrap();
    let extra = event("c").replace(r#""id":"c""#, r#""id":"c","more":[1]"#);
    h.wal(message("pgoutbox", &extra, true)).unwrap();
    h.commit(0x100);
    let topics: Vec<&str> = h.sink.sent.iter().map(|(r, _)| r.topic.as_str()).collect();
    assert_eq!(
        topics,
        ["dead", "outbox.event.order", "dead", "outbox.event.order"]
    );
    let (letter, _) = &h.sink.sent[2];
    assert_eq!(
        header_of(letter, header::REASON).as_deref(),
        Some("no field \"payload\" (mapped as payload); fields are: aggregate_id, aggregate_type, id")
    );
    assert_eq!(h.sink.sent[3].0.id_text(), "c");
}

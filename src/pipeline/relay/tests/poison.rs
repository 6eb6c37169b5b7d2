//! Poison rows in the relay core: each `--on-invalid` action, the size refusals
//! at send and by the broker, and rows of a table that lost a mapped column.

use super::*;

#[test]
fn a_poison_row_with_fail_stops_the_relay_naming_the_row() {
    let cfg = config();
    let mut h = Harness::new(&cfg);
    h.begin();
    h.wal(row("a1", Some("k"))).unwrap();
    let err = h.wal(row("p1", None)).unwrap_err();
    let PipelineError::Invalid(poison) = err else {
        panic!("{err:?}")
    };
    assert_eq!(
        (
            poison.cause,
            poison.event_id.as_str(),
            poison.table.as_str()
        ),
        ("null-key", "p1", "public.outbox")
    );
    assert_eq!(poison.lsn, Lsn(h.lsn).to_string());
    assert_eq!(h.ids(), ["a1"]);
}

#[test]
fn a_skipped_poison_row_is_not_in_flight() {
    let cfg = PipelineConfig {
        invalid: policy("null-key=skip"),
        ..config()
    };
    let mut h = Harness::new(&cfg);
    h.begin();
    h.wal(row("a1", Some("k"))).unwrap();
    h.wal(row("p1", None)).unwrap();
    h.wal(row("a2", Some("k"))).unwrap();
    h.commit(0x100);
    assert_eq!(h.ids(), ["a1", "a2"]);
    h.ack(0);
    h.ack(1);
    assert_eq!(h.relay.confirmed(), Lsn(0x100));
}

#[test]
fn a_dead_letter_joins_the_transaction_in_wal_order() {
    let cfg = PipelineConfig {
        invalid: policy("dlq"),
        ..config()
    };
    let mut h = Harness::new(&cfg);
    h.begin();
    h.wal(row("a1", Some("k"))).unwrap();
    h.wal(row("p1", None)).unwrap();
    let p1_lsn = Lsn(h.lsn).to_string();
    h.commit(0x100);
    assert_eq!(h.ids(), ["a1", "p1"]);
    assert_eq!(h.tags(), [tag(0), tag(0)]);
    let (letter, _) = &h.sink.sent[1];
    assert_eq!(letter.topic, "dead");
    assert_eq!(
        header_of(letter, header::CAUSE).as_deref(),
        Some("null-key")
    );
    assert_eq!(
        header_of(letter, header::TABLE).as_deref(),
        Some("public.outbox")
    );
    assert_eq!(header_of(letter, header::LSN), Some(p1_lsn));
    h.ack(0);
    assert_eq!(h.relay.confirmed(), Lsn(0), "the dead letter is in flight");
    h.ack(1);
    assert_eq!(h.relay.confirmed(), Lsn(0x100));
}

#[test]
fn a_size_refusal_at_send_dead_letters_the_row_in_its_transaction() {
    let cfg = PipelineConfig {
        invalid: policy("too-large=dlq"),
        ..config()
    };
    let mut h = Harness::new(&cfg);
    h.begin();
    let refusal = too_large("outbox.event.order", "a1", None);
    h.sink.answers = VecDeque::from([SendError::Refused(refusal)]);
    h.wal(row("a1", Some("k"))).unwrap();
    h.wal(row("a2", Some("k"))).unwrap();
    h.commit(0x100);
    assert_eq!(h.ids(), ["a1", "a2"]);
    let (letter, letter_tag) = &h.sink.sent[0];
    assert_eq!((letter.topic.as_str(), *letter_tag), ("dead", tag(0)));
    assert_eq!(
        header_of(letter, header::PAYLOAD_OMITTED).as_deref(),
        Some("2 bytes")
    );
    h.ack(1);
    assert_eq!(h.relay.confirmed(), Lsn(0));
    h.ack(0);
    assert_eq!(h.relay.confirmed(), Lsn(0x100));
}

#[test]
fn a_size_refusal_at_send_with_fail_or_for_a_dead_letter_stops_the_relay() {
    let cfg = config();
    let mut h = Harness::new(&cfg);
    h.begin();
    let refusal = too_large("outbox.event.order", "a1", None);
    h.sink.answers = VecDeque::from([SendError::Refused(refusal)]);
    let err = h.wal(row("a1", Some("k"))).unwrap_err();
    assert!(
        matches!(&err, PipelineError::Invalid(p) if p.cause == "too-large"),
        "{err:?}"
    );

    let cfg = PipelineConfig {
        invalid: policy("dlq"),
        ..config()
    };
    let mut h = Harness::new(&cfg);
    h.begin();
    let first = too_large("outbox.event.order", "a1", None);
    let letter = too_large("dead", "a1", None);
    h.sink.answers = VecDeque::from([SendError::Refused(first), SendError::Refused(letter)]);
    let err = h.wal(row("a1", Some("k"))).unwrap_err();
    assert!(
        matches!(&err, PipelineError::Delivery(e) if e.topic == "dead"),
        "{err:?}"
    );
    assert!(h.ids().is_empty());
}

#[test]
fn a_size_refusal_by_the_broker_becomes_a_dead_letter_before_the_row_counts_done() {
    let cfg = PipelineConfig {
        invalid: policy("too-large=dlq"),
        ..config()
    };
    let mut h = Harness::new(&cfg);
    h.txn(&["a1", "a2"], 0x100);
    h.ack(1); // a2: the refused a1 is the last record of its transaction
    let refused = RefusedRecord {
        key: Some(Bytes::from_static(b"k")),
        event_type: Some(Bytes::from_static(b"Created")),
    };
    let refusal = too_large("outbox.event.order", "a1", Some(refused));
    h.deliver(tag(0), Err(refusal)).unwrap();
    assert_eq!(h.ids(), ["a1", "a2", "a1"]);
    let (letter, letter_tag) = &h.sink.sent[2];
    assert_eq!((letter.topic.as_str(), *letter_tag), ("dead", tag(0)));
    assert_eq!(
        (letter.key.as_deref(), letter.value.as_deref()),
        (Some(&b"k"[..]), None)
    );
    assert_eq!(letter.event_type.as_deref(), Some(&b"Created"[..]));
    assert_eq!(h.in_flight(), 1, "the dead letter");
    assert_eq!(
        h.relay.confirmed(),
        Lsn(0),
        "not before the dead letter's ack"
    );
    h.ack(2);
    assert_eq!(h.relay.confirmed(), Lsn(0x100));
    // The broker refusing a dead letter's size is not a poison row.
    h.txn(&["b1"], 0x200);
    let err = h
        .deliver(tag(1), Err(too_large("dead", "b1", None)))
        .unwrap_err();
    assert!(matches!(err, PipelineError::Delivery(_)), "{err:?}");
}

/// With the producer stopped by librdkafka (the gapless guarantee) a broker size
/// refusal cannot be dead-lettered through it: the row is noted and the session
/// ends to be redone with a new producer, where the row is poison before it is
/// sent — its dead letter goes out in its transaction's place.
#[test]
fn a_broker_size_refusal_by_a_stopped_producer_is_redone_with_the_row_poison() {
    let cfg = PipelineConfig {
        invalid: policy("too-large=dlq"),
        ..config()
    };
    let mut h = Harness::new(&cfg);
    h.txn(&["a1", "a2"], 0x100);
    h.sink.stopped = true;
    let err = h
        .deliver(tag(0), Err(too_large("outbox.event.order", "a1", None)))
        .unwrap_err();
    assert!(
        matches!(err, PipelineError::RedoWithNewProducer(_)),
        "{err:?}"
    );
    assert!(err.is_transient());
    assert_eq!(
        h.ids(),
        ["a1", "a2"],
        "no dead letter through a stopped producer"
    );
    assert_eq!(h.relay.confirmed(), Lsn(0));

    // The redo: a new session (and sink) with the same configuration.
    let mut redo = Harness::new(&cfg);
    redo.txn(&["a1", "a2"], 0x100);
    assert_eq!(redo.ids(), ["a1", "a2"]);
    assert_eq!(redo.sink.sent[0].0.topic, "dead", "a1 is poison up front");
    redo.ack(0);
    redo.ack(1);
    assert_eq!(redo.relay.confirmed(), Lsn(0x100));
}

#[test]
fn rows_of_a_table_that_lost_a_mapped_column_are_missing_column_poison() {
    let cfg = PipelineConfig {
        invalid: policy("missing-column=dlq"),
        ..config()
    };
    let mut h = Harness::new(&cfg);
    let altered = Relation::text_columns(RELID, "outbox", &COLUMNS[..4]);
    h.wal(PgOutputMessage::Relation(altered)).unwrap();
    h.begin();
    h.wal(row("m1", Some("k"))).unwrap();
    assert_eq!(h.ids(), ["m1"]);
    let (letter, _) = &h.sink.sent[0];
    assert_eq!(
        header_of(letter, header::CAUSE).as_deref(),
        Some("missing-column")
    );
    let value: serde_json::Value =
        serde_json::from_slice(letter.value.as_deref().unwrap()).unwrap();
    assert_eq!(value["aggregate_id"], "k");
}

/// Regression: a dead letter for a broker size refusal that met a full producer
/// queue was not counted in its transaction, so the refused row's "done" completed
/// the transaction and the LSN moved past the row before the letter was sent (the
/// retry then failed on an unknown transaction, and the letter was never written).
#[test]
fn a_dead_letter_that_meets_a_full_queue_holds_its_transaction_open() {
    let cfg = PipelineConfig {
        invalid: policy("too-large=dlq"),
        ..config()
    };
    let mut h = Harness::new(&cfg);
    h.txn(&["a1"], 0x100);
    h.sink.answers = VecDeque::from([SendError::QueueFull]);
    let refusal = too_large("outbox.event.order", "a1", None);
    h.deliver(tag(0), Err(refusal)).unwrap();
    assert!(h.relay.waiting_for_queue() && !h.relay.can_read());
    assert_eq!(h.in_flight(), 1, "the waiting dead letter");
    assert_eq!(h.relay.confirmed(), Lsn(0), "not before the letter is sent");
    h.relay.retry_pending(&mut h.sink).unwrap();
    assert_eq!(h.ids(), ["a1", "a1"]);
    assert_eq!(h.sink.sent[1].0.topic, "dead");
    assert_eq!(
        h.relay.confirmed(),
        Lsn(0),
        "not before the letter is acked"
    );
    h.ack(1);
    assert_eq!(h.relay.confirmed(), Lsn(0x100));
    assert_eq!(h.relay.stats().produced, 2);
}

/// A broker's size refusal (a topic's `max.message.bytes`) comes back as a report
/// that names the record, not its change: the poison row still says where its
/// transaction lies in the WAL (regression: "at an unknown LSN").
#[test]
fn a_broker_size_refusal_names_the_table_and_the_lsn_of_its_transaction() {
    let cfg = config();
    let mut h = Harness::new(&cfg);
    h.begin();
    h.wal(row("a1", Some("k"))).unwrap();
    let first = format!("{}", Lsn(h.lsn));
    h.commit(0x2000);
    let (_, tag) = h.sink.sent[0];
    let err = h
        .deliver(tag, Err(too_large("outbox.event.order", "a1", None)))
        .unwrap_err();
    let text = err.to_string();
    assert!(
        text.contains(&format!("in public.outbox: event a1 at {first}")),
        "{text}"
    );
    assert!(
        text.contains(&format!(
            "the row is in the transaction whose first outbox change is at {first} (committed at 0/2000)"
        )),
        "{text}"
    );
    assert_eq!(h.relay.confirmed(), Lsn(0), "the slot stays before the row");
}

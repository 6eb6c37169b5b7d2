//! The producer's rounds ([`KafkaSink::hold_rounds`], on in `pgoutbox run`): while
//! librdkafka holds [`ROUND_AT`] records, further ones wait in the sink and go
//! together once those are reported, in order; a record of [`HOLD_BELOW`] bytes or
//! more is never held; a held record's refusal comes back as its delivery; a renewed
//! producer abandons what was held. Slow acks come from librdkafka's mock cluster
//! (fault injection), and so do acks that never come (an hour's round trip), so the
//! counts are exact.

use std::time::Duration;

use bytes::Bytes;
use pgoutbox::kafka::producer::{KafkaSink, SendError, HELD_MAX, HOLD_BELOW, ROUND_AT};
use support::verify::verify;

use crate::mock_kafka::{ledger, mock, next, read_back, record, sink, warm, Mock, BROKERS};
use crate::support;

/// A sink with rounds on whose records are from now on never acked: its
/// producer's first write to each partition (which goes alone, `first_writes`) is
/// made and acked first, then the mock's brokers answer after an hour, so the counts
/// are exact. Keep the mock until the sink is dropped.
async fn unacked_sink(options: &[(&str, &str)]) -> (Mock, KafkaSink) {
    let mock = mock();
    let mut sink = sink(&mock, options);
    warm(&mut sink, FIRST).await;
    for broker in 1..=BROKERS {
        mock.broker_round_trip_time(broker, Duration::from_secs(3600))
            .unwrap();
    }
    sink.hold_rounds(true);
    (mock, sink)
}

/// The tag of [`unacked_sink`]'s first write (its first writes: `FIRST..FIRST + 10`).
const FIRST: usize = 1_000_000;

/// Records `0..n` sent; each must be taken.
fn send(sink: &mut KafkaSink, ns: std::ops::Range<usize>) {
    for n in ns {
        sink.send(&record(n), n)
            .unwrap_or_else(|e| panic!("record {n}: {e}"));
    }
}

/// Record `n` with a value of `len` bytes.
fn sized(n: usize, len: usize) -> pgoutbox::outbox::record::KafkaRecord {
    let mut r = record(n);
    r.value = Some(Bytes::from(vec![b'x'; len]));
    r
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn records_wait_for_the_round_in_flight_then_go_together_in_order() {
    let mock = mock();
    for broker in 1..=BROKERS {
        mock.broker_round_trip_time(broker, Duration::from_millis(200))
            .unwrap();
    }
    let mut sink = sink(&mock, &[]);
    // The producer's first write to each partition goes alone (`first_writes`).
    warm(&mut sink, FIRST).await;
    sink.hold_rounds(true);
    let total = 300;
    assert!(total - ROUND_AT <= HELD_MAX);
    send(&mut sink, 0..ROUND_AT);
    assert_eq!(sink.held(), 0, "the first round goes at once");
    send(&mut sink, ROUND_AT..total);
    assert_eq!(
        sink.held(),
        total - ROUND_AT,
        "everything after the first round waits for its acks"
    );
    assert!(
        sink.in_flight() >= total as i32,
        "held records count in flight"
    );
    let mut acked = 0;
    let mut rounds_seen = 0;
    let mut last_held = sink.held();
    while acked < total {
        let d = next(&mut sink).await;
        assert!(d.result.is_ok(), "record {}: {:?}", d.tag, d.result);
        acked += 1;
        if sink.held() < last_held {
            rounds_seen += 1;
            last_held = sink.held();
        }
    }
    assert_eq!(sink.held(), 0);
    assert_eq!(rounds_seen, 1, "the 295 held records went in one round");
    for broker in 1..=BROKERS {
        mock.broker_round_trip_time(broker, Duration::ZERO).unwrap();
    }
    let verdict = verify(
        &ledger((FIRST..FIRST + 10).chain(0..total)),
        &read_back(&mock, total + 10),
    );
    verdict.assert_no_loss();
    assert_eq!(verdict.duplicated_total, 0, "{verdict:?}");
    assert_eq!(verdict.reordered, 0, "{verdict:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_record_refused_for_its_size_comes_back_as_its_delivery() {
    // Below HOLD_BELOW, above this message.max.bytes: held, then refused when
    // handed over (a flush hands everything over, round or not).
    let (_mock, mut sink) = unacked_sink(&[("message.max.bytes", "10000")]).await;
    send(&mut sink, 0..ROUND_AT);
    let big = sized(ROUND_AT, 20_000);
    assert!(big.size() < HOLD_BELOW);
    sink.send(&big, 99).expect("held, not refused yet");
    assert_eq!(sink.held(), 1);
    assert!(!sink.flush(Duration::from_millis(200)), "nothing is acked");
    assert_eq!(sink.held(), 0);
    let d = sink
        .try_next_delivery()
        .expect("the refusal, as a delivery");
    assert_eq!(d.tag, 99);
    assert_eq!(d.size, big.size());
    let err = d.result.expect_err("refused");
    assert!(err.is_too_large(), "{err}");
    assert_eq!(err.event_id, "event-5");
    let refused = err.refused.expect("what a dead letter needs");
    assert_eq!(refused.key, big.key);
    assert_eq!(refused.event_type.as_deref(), Some(&b"Happened"[..]));
    assert_eq!(sink.held(), 0, "the refused record is reported, not held");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_large_record_is_never_held_and_its_size_refusal_is_immediate() {
    let (_mock, mut sink) = unacked_sink(&[]).await;
    send(&mut sink, 0..ROUND_AT + 3);
    assert_eq!(sink.held(), 3);
    // Over the default message.max.bytes (1,048,588) and over HOLD_BELOW.
    let huge = sized(100, 2 << 20);
    match sink.send(&huge, 100) {
        Err(SendError::Refused(err)) => assert!(err.is_too_large(), "{err}"),
        other => panic!("expected an immediate size refusal, got {other:?}"),
    }
    assert_eq!(sink.held(), 0, "the held records went first, in order");
    // A large record librdkafka takes is not held either.
    sink.send(&sized(101, HOLD_BELOW), 101).expect("taken");
    assert_eq!(sink.held(), 0);
    sink.send(&record(102), 102).expect("taken");
    assert_eq!(sink.held(), 1, "a small record after it waits again");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_renewed_producer_abandons_held_records_and_rounds_off_hold_nothing() {
    let (_mock, mut sink) = unacked_sink(&[]).await;
    sink.hold_rounds(false);
    send(&mut sink, 0..20);
    assert_eq!(sink.held(), 0, "rounds off: nothing held");

    sink.hold_rounds(true);
    send(&mut sink, 20..27);
    assert_eq!(sink.held(), 7);
    sink.renew().expect("renew");
    assert_eq!(sink.held(), 0);
    send(&mut sink, 0..ROUND_AT);
    assert_eq!(
        sink.held(),
        ROUND_AT - 1,
        "the new producer's first write to the topic goes alone, the rest waits for it"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn held_records_are_bounded_and_handed_over_in_batches() {
    let (_mock, mut sink) = unacked_sink(&[]).await;
    send(&mut sink, 0..ROUND_AT + HELD_MAX);
    assert_eq!(sink.held(), HELD_MAX, "held up to the bound");
    send(&mut sink, 0..1);
    assert_eq!(
        sink.held(),
        1,
        "the full batch went over, the next one starts"
    );
    // A full librdkafka queue: the bound holds, and the record is sent back.
    let (_mock, mut sink) = unacked_sink(&[("queue.buffering.max.messages", "10")]).await;
    send(&mut sink, 0..ROUND_AT + HELD_MAX);
    match sink.send(&record(9999), 9999) {
        Err(SendError::QueueFull) => {}
        other => panic!("expected QueueFull, got {other:?}"),
    }
    assert_eq!(
        sink.held(),
        HELD_MAX + ROUND_AT - 10,
        "handed over what fit"
    );
}

/// `--kafka-rounds` from the flag, the environment and the config file, shown by
/// `config show` (flag > env > file > default on).
#[test]
fn kafka_rounds_comes_from_flag_env_and_the_config_file() {
    let dir = support::temp_dir("rounds-config");
    let file = dir.join("pgoutbox.toml");
    std::fs::write(&file, "brokers = \"b:1\"\nkafka_rounds = false\n").unwrap();
    let show =
        |args: &[&str], env: &[(&str, &str)]| support::config_show_line(args, env, "kafka_rounds");
    assert_eq!(show(&["--brokers", "b:1"], &[]), "kafka_rounds = true");
    assert_eq!(
        show(&["--brokers", "b:1", "--kafka-rounds", "false"], &[]),
        "kafka_rounds = false"
    );
    assert_eq!(
        show(&["--brokers", "b:1"], &[("PGOUTBOX_KAFKA_ROUNDS", "false")]),
        "kafka_rounds = false"
    );
    let file = file.to_str().unwrap();
    assert_eq!(show(&["--config", file], &[]), "kafka_rounds = false");
    assert_eq!(
        show(&["--config", file], &[("PGOUTBOX_KAFKA_ROUNDS", "true")]),
        "kafka_rounds = true"
    );
    assert_eq!(
        show(&["--config", file, "--kafka-rounds"], &[]),
        "kafka_rounds = true"
    );
}

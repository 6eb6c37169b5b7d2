//! Unit tests of the metrics: counters, histograms, readiness, and the exposition
//! pinned byte for byte (`exposition.txt`).

use super::*;

#[test]
fn a_histogram_sample_on_a_bound_counts_in_its_bucket_and_every_later_one() {
    let m = Metrics::default();
    for micros in [1_000, 1_001, 2_500, 30_000_000, 30_000_001, -5] {
        m.observe_latency_micros(micros);
    }
    let text = m.render();
    for (le, n) in [
        ("0.001", 2), // 1,000 µs and the negative sample (as 0)
        ("0.0025", 4),
        ("0.005", 4),
        ("10", 4),
        ("30", 5),
        ("+Inf", 6),
    ] {
        let series = format!("outbox_relay_latency_seconds_bucket{{le=\"{le}\"}} {n}\n");
        assert!(text.contains(&series), "{series}in {text}");
    }
    assert!(
        text.contains("outbox_relay_latency_seconds_count 6\n"),
        "{text}"
    );
}

#[test]
fn renders_counters_histogram_and_gauges() {
    let m = Metrics::default();
    m.published("outbox.event.order");
    m.published("outbox.event.order");
    m.failed("bad\"topic");
    m.observe_latency_micros(3_000);
    m.observe_latency_micros(200_000);
    m.observe_kafka_latency_micros(2_000);
    m.set_slot(100, 42);
    let text = m.render();
    assert!(
        text.contains("outbox_events_published_total{topic=\"outbox.event.order\"} 2"),
        "{text}"
    );
    assert!(
        text.contains("outbox_events_failed_total{topic=\"bad\\\"topic\"} 1"),
        "{text}"
    );
    assert!(
        text.contains("outbox_relay_latency_seconds_bucket{le=\"0.005\"} 1"),
        "{text}"
    );
    assert!(
        text.contains("outbox_relay_latency_seconds_bucket{le=\"0.25\"} 2"),
        "{text}"
    );
    assert!(
        text.contains("outbox_relay_latency_seconds_count 2"),
        "{text}"
    );
    assert!(
        text.contains("pgoutbox_kafka_latency_seconds_bucket{le=\"0.001\"} 0"),
        "{text}"
    );
    assert!(
        text.contains("pgoutbox_kafka_latency_seconds_bucket{le=\"0.0025\"} 1"),
        "{text}"
    );
    assert!(
        text.contains("pgoutbox_kafka_latency_seconds_count 1"),
        "{text}"
    );
    assert!(text.contains("pgoutbox_slot_lag_bytes 42"), "{text}");
    assert!(
        text.contains("pgoutbox_promotions_followed_total 0"),
        "{text}"
    );
    m.promotion_followed();
    assert!(m.render().contains("pgoutbox_promotions_followed_total 1"));
    assert!(!m.ready());
    m.set_replication_connected(true);
    m.set_producer_connected(true);
    assert!(!m.ready(), "connected but not yet active");
    m.set_role(Role::Active);
    assert!(m.ready());
}

#[test]
fn a_stall_is_not_ready_until_the_next_ack_and_is_counted() {
    let m = Metrics::default();
    m.set_role(Role::Active);
    m.set_replication_connected(true);
    m.set_producer_connected(true);
    m.set_oldest_in_flight_age(std::time::Duration::from_millis(61_500));
    assert!(m.stalled("no kafka ack for 61s".into()), "a stall begins");
    assert!(!m.ready());
    assert_eq!(
        m.readiness(),
        "role: active\nreplication: connected\nproducer: connected\nstalled: no kafka ack for 61s\n"
    );
    let text = m.render();
    assert!(text.contains("pgoutbox_stalls_total 1\n"), "{text}");
    assert!(
        text.contains("pgoutbox_oldest_in_flight_age_seconds 61.5\n"),
        "{text}"
    );
    assert!(
        !m.stalled("no kafka ack for 122s".into()),
        "no ack since: the same stall goes on"
    );
    assert!(m.render().contains("pgoutbox_stalls_total 2\n"));
    m.acked();
    assert!(m.ready());
    assert!(!m.readiness().contains("stalled"));
    assert!(
        m.stalled("again".into()),
        "after an ack a stall begins anew"
    );
    assert!(
        m.render().contains("pgoutbox_stalls_total 3\n"),
        "a counter"
    );
}

#[test]
fn a_publication_change_is_counted_and_never_ready_again() {
    let m = Metrics::default();
    m.set_role(Role::Active);
    m.set_replication_connected(true);
    m.set_producer_connected(true);
    assert!(m.ready());
    m.publication_changed("outbox table \"public\".\"outbox\" was removed".into());
    assert!(!m.ready());
    assert!(m.readiness().contains("publication changed: outbox table"));
    m.acked();
    assert!(!m.ready(), "an ack does not clear it: the relay stops");
    assert!(m
        .render()
        .contains("pgoutbox_publication_changes_total 1\n"));
}

#[test]
fn renders_role_build_info_and_process() {
    let m = Metrics::default();
    m.set_role(Role::Standby);
    let text = m.render();
    assert!(
        text.contains("pgoutbox_role{role=\"standby\"} 1\n"),
        "{text}"
    );
    assert!(
        text.contains("pgoutbox_role{role=\"active\"} 0\n"),
        "{text}"
    );
    assert!(
        text.contains("pgoutbox_role{role=\"connecting\"} 0\n"),
        "{text}"
    );
    let info = format!(
        "pgoutbox_build_info{{version=\"{}\",librdkafka=\"2.",
        env!("CARGO_PKG_VERSION")
    );
    assert!(text.contains(&info), "{text}");
    #[cfg(target_os = "linux")]
    assert!(text.contains("\nprocess_resident_memory_bytes "), "{text}");
}

/// The whole exposition, byte for byte, with every family sampled: per-topic
/// counters (a label value to escape among them), labelled and plain counters,
/// gauges, both histograms, the heartbeat's, poll mode's, role, build information
/// and process series. The alert rules and the dashboard under `deploy/` name
/// these series: a change of renderer (or of a name, a HELP line or a label) must
/// show up here. `PGOUTBOX_BLESS=1 cargo test --lib exposition_is_the_golden_text`
/// rewrites the file after an intended change.
#[test]
fn exposition_is_the_golden_text() {
    use crate::metrics::poll::Wake;
    use std::time::Duration;
    let m = Metrics::default();
    for (topic, n) in [("outbox.event.order", 3), ("outbox.event.customer", 1)] {
        for _ in 0..n {
            m.published(topic);
        }
    }
    m.published("odd\\topic\"with\nnewline");
    m.failed("outbox.event.order");
    m.invalid_row(Cause::NullKey, Action::Deliver);
    m.invalid_row(Cause::TooLarge, Action::Dlq);
    m.invalid_row(Cause::InvalidJson, Action::Skip);
    m.invalid_row(Cause::InvalidJson, Action::Skip);
    m.trace_context(Outcome::Propagated);
    m.trace_context(Outcome::Propagated);
    m.trace_context(Outcome::TracestateDropped);
    for micros in [800, 1_000, 4_200, 120_000, 31_000_000] {
        m.observe_latency_micros(micros);
    }
    for micros in [700, 2_600] {
        m.observe_kafka_latency_micros(micros);
    }
    m.set_slot(0x1_6B37_4D48, 8_192);
    m.set_in_flight(12, 34_567);
    m.set_in_flight_limits(10_000, 64 << 20);
    m.set_in_flight_window(3_000);
    m.reconnected();
    m.message_ignored();
    m.promotion_followed();
    for _ in 0..5 {
        m.kafka_client_error();
    }
    m.set_replication_connected(true);
    m.set_producer_connected(false);
    m.set_oldest_in_flight_age(Duration::from_millis(2_250));
    m.stalled("no kafka ack".into());
    m.publication_changed("outbox table dropped".into());
    m.set_role(Role::Active);
    m.heartbeat.sent();
    m.heartbeat.sent();
    m.heartbeat.failed();
    m.heartbeat.foreign();
    m.heartbeat.seen(1, 0);
    m.poll.set_backlog(42, Some(Duration::from_millis(1_500)));
    m.poll.batch(10, 9);
    m.poll.woke(Wake::Notify);
    m.poll.woke(Wake::Drain);
    let text = m.render_with(&Scrape {
        process: process::Sample::known(),
        version: "9.8.7",
        librdkafka: "2.11.0".into(),
        heartbeat_age: Some(Duration::from_millis(1_250)),
        heartbeat_round_trip: Some(Duration::from_micros(3_500)),
    });
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/src/metrics/exposition.txt");
    if std::env::var_os("PGOUTBOX_BLESS").is_some() {
        std::fs::write(path, &text).expect("write the golden exposition");
    }
    let golden = std::fs::read_to_string(path).expect("the golden exposition");
    if text != golden {
        let line = text
            .lines()
            .zip(golden.lines())
            .position(|(a, b)| a != b)
            .unwrap_or(text.lines().count().min(golden.lines().count()));
        panic!(
            "the exposition differs from {path} from line {}:\n  rendered: {:?}\n  golden:   {:?}\n(PGOUTBOX_BLESS=1 rewrites it after an intended change)",
            line + 1,
            text.lines().nth(line),
            golden.lines().nth(line)
        );
    }
}

/// Every sample line belongs to a family declared by `# TYPE` before it, and no
/// family is declared twice (what a Prometheus parser insists on).
#[test]
fn exposition_declares_each_family_once_before_its_samples() {
    let m = Metrics::default();
    m.published("t");
    m.observe_latency_micros(10);
    let text = m.render();
    let mut declared = std::collections::BTreeSet::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let name = rest.split(' ').next().unwrap_or_default();
            assert!(declared.insert(name.to_owned()), "{name} declared twice");
        } else if !line.starts_with('#') {
            let name = line.split(['{', ' ']).next().unwrap_or_default();
            let family = ["_bucket", "_sum", "_count"]
                .iter()
                .find_map(|s| name.strip_suffix(s).filter(|f| declared.contains(*f)))
                .unwrap_or(name);
            assert!(
                declared.contains(family),
                "sample {line:?} before its # TYPE"
            );
        }
    }
}

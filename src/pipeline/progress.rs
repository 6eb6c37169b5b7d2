//! The operator's log lines about a session's progress: the periodic `progress`
//! line and the drain's start and timeout. Owns their wording and fields; nothing
//! here decides anything. Fields are plain numbers (never a Rust `Debug` form such as
//! `Some(9.742ms)`), so JSON logs carry them as numbers.

use std::time::Duration;

use super::relay::Relay;

/// How often a progress line is logged.
pub(super) const PROGRESS_INTERVAL: Duration = Duration::from_secs(10);

/// The periodic line: produced and acked counts, latency and its Kafka share,
/// in-flight window, LSN.
pub(super) fn log(relay: &Relay<'_>) {
    let (stats, tracker) = (relay.stats(), relay.tracker());
    tracing::info!(
        produced = stats.produced,
        latency_p50_ms = stats.latency.quantile(0.5).map(millis),
        latency_p99_ms = stats.latency.quantile(0.99).map(millis),
        in_kafka_p50_ms = stats.in_kafka.quantile(0.5).map(millis),
        in_kafka_p99_ms = stats.in_kafka.quantile(0.99).map(millis),
        acked = stats.acked,
        in_flight = tracker.in_flight_records(),
        in_flight_bytes = tracker.in_flight_bytes(),
        open_txns = tracker.pending_txns(),
        waiting_for_queue = relay.waiting_for_queue(),
        confirmed = %tracker.confirmed(),
        "progress"
    );
}

/// A latency as milliseconds with microsecond precision: a number in JSON logs, and
/// absent (not `None`) before the first ack.
fn millis(latency: Duration) -> f64 {
    latency.as_micros() as f64 / 1000.0
}

/// Shutdown began.
pub(super) fn draining(relay: &Relay<'_>) {
    tracing::info!(
        in_flight = relay.tracker().in_flight_records(),
        "draining in-flight records"
    );
}

/// The drain deadline passed with records in flight.
pub(super) fn drain_timed_out(relay: &Relay<'_>) {
    tracing::warn!(
        in_flight = relay.tracker().in_flight_records(),
        "drain timeout: exiting with records in flight; they will be resent from the slot"
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn latency_fields_are_milliseconds() {
        assert_eq!(millis(Duration::from_micros(9_742)), 9.742);
        assert_eq!(millis(Duration::from_secs(2)), 2000.0);
    }
}

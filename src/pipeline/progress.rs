//! The operator's log lines about a session's progress: the periodic `progress`
//! line and the drain's start and timeout. Owns their wording and fields; nothing
//! here decides anything.

use std::time::Duration;

use super::relay::Relay;

/// How often a progress line is logged.
pub(super) const PROGRESS_INTERVAL: Duration = Duration::from_secs(10);

/// The periodic line: produced and acked counts, latency, in-flight window, LSN.
pub(super) fn log(relay: &Relay<'_>) {
    let (stats, tracker) = (relay.stats(), relay.tracker());
    tracing::info!(
        produced = stats.produced,
        latency_p50 = ?stats.latency.quantile(0.5),
        latency_p99 = ?stats.latency.quantile(0.99),
        acked = stats.acked,
        in_flight = tracker.in_flight_records(),
        in_flight_bytes = tracker.in_flight_bytes(),
        open_txns = tracker.pending_txns(),
        waiting_for_queue = relay.waiting_for_queue(),
        confirmed = %tracker.confirmed(),
        "progress"
    );
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

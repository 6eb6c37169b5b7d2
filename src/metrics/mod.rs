//! Process metrics and readiness, rendered in the Prometheus text format.
//!
//! Owns the metric names (constants below) and the shared [`Metrics`] value the
//! pipeline, the producer callback, `run` and the HTTP endpoint use. [`role`] holds
//! the active/standby state and what `/readyz` makes of it; [`heartbeat`] what the
//! end-to-end heartbeat saw; [`poll`] and [`transactions`] the series of poll mode
//! and of exactly-once delivery; `process` the standard `process_*` metrics read
//! from `/proc`.
//!
//! Naming follows <https://prometheus.io/docs/practices/naming/>: base units
//! (`_seconds`, `_bytes`), `_total` on counters only, one state per series for enums
//! (`pgoutbox_role{role}`), `_info` for a constant 1 carrying labels. Everything is
//! prefixed `pgoutbox_` except the three `outbox_*` record metrics, which keep the
//! names of the original outbox relays (Debezium-era dashboards and alerts use them).
//!
//! Invariants: updates are lock-free except per-topic counters (one short mutex, no
//! allocation after a topic's first record) and a stall's reason; rendering never
//! blocks updates for long; an active relay is not ready while a stall
//! (`--stall-timeout`) detected since the last ack lasts, nor while its heartbeat is
//! stale (`--heartbeat-max-age`).
//!
//! The exposition is written by hand, not by `prometheus-client` (issue "House II",
//! item 6; `cargo run --release --example metrics_exposition`, same families, HELP
//! lines, buckets and values on both sides, 100 topics, medians of three runs of
//! seven on a loaded 2-core machine, ratio ours / theirs). Hot path: counter inc
//! 0.99, two gauges set 0.07 (the crate's `set` is a swap), histogram observe 0.92,
//! per-topic counter 0.38 (the crate needs an owned label set: one allocation per
//! event, none here). A scrape: the crate encodes 2.6× faster than we render without
//! the `/proc` reads (5.6× with them; it has no process collector) and allocates 7
//! times (40 kB) where we allocate 351 (74 kB). Size: three more crates (dtoa, the
//! crate, its derive macro), 1.1 MB of rlibs, ~63 kB of its code in the example
//! binary against ~21 kB for all of `pgoutbox::metrics`. It is faster only at the
//! scrape (every 15 s or so, not per event), larger, and cannot render our
//! exposition: it refuses counter names ending `_total` and drops the suffix from
//! their HELP and TYPE lines, appends `.` to every HELP text, writes `le="1.0"` for
//! `le="1"`, leaves out a family with no sample yet (ours declares the heartbeat
//! gauges and the per-topic counters always, for the alert rules) and ends with
//! `# EOF` (113 of 260 lines differ). The test
//! `exposition_is_the_golden_text` pins the text byte for byte (`exposition.txt`).
//!
//! Lag, one definition for `/metrics` and `pgoutbox status`: the server's WAL
//! position minus the slot's `confirmed_flush_lsn`. `status` reads both in one
//! query (`pg_current_wal_lsn()`); the relay takes the WAL end the walsender last
//! reported (in every XLogData and keepalive message) minus the LSN it last
//! confirmed to the server, refreshed at each status tick (100 ms).

pub mod heartbeat;
pub mod poll;
mod process;
pub mod role;
pub mod transactions;

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::sync::Mutex;

use crate::outbox::invalid::{Action, Cause};
use crate::outbox::trace::Outcome;

use role::Health;
pub use role::Role;

/// Column order of the invalid-row counters.
const ACTIONS: [Action; 4] = Action::ALL;

/// Records acked by Kafka, per topic.
pub const EVENTS_PUBLISHED: &str = "outbox_events_published_total";
/// Records Kafka failed to take, per topic.
pub const EVENTS_FAILED: &str = "outbox_events_failed_total";
/// Poison rows by cause and action (`--on-invalid`).
pub const INVALID_ROWS: &str = "pgoutbox_invalid_rows_total";
/// Rows' trace context by outcome (`--trace-context`).
pub const TRACE_CONTEXT: &str = "pgoutbox_trace_context_total";
/// Commit → broker-ack latency histogram.
pub const RELAY_LATENCY: &str = "outbox_relay_latency_seconds";
/// The Kafka share of it: hand-over to the producer → ack.
pub const KAFKA_LATENCY: &str = "pgoutbox_kafka_latency_seconds";
/// WAL bytes between the server's WAL end and the confirmed LSN.
pub const SLOT_LAG_BYTES: &str = "pgoutbox_slot_lag_bytes";
/// The confirmed LSN as a number.
pub const CONFIRMED_LSN: &str = "pgoutbox_confirmed_lsn";
/// Records handed to the producer and not yet acked.
pub const IN_FLIGHT_RECORDS: &str = "pgoutbox_in_flight_records";
/// Bytes of those records.
pub const IN_FLIGHT_BYTES: &str = "pgoutbox_in_flight_bytes";
/// The in-flight window's cap in records (`--max-in-flight`).
pub const IN_FLIGHT_MAX_RECORDS: &str = "pgoutbox_in_flight_max_records";
/// The records the window lets be in flight now (at most the cap).
pub const IN_FLIGHT_WINDOW_RECORDS: &str = "pgoutbox_in_flight_window_records";
/// The in-flight window's cap in bytes (`--max-in-flight-bytes`).
pub const IN_FLIGHT_MAX_BYTES: &str = "pgoutbox_in_flight_max_bytes";
/// Resident memory of the process (the Prometheus clients' standard name).
pub const RESIDENT_MEMORY: &str = "process_resident_memory_bytes";
/// Its peak since the process started (`VmHWM`).
pub const RESIDENT_MEMORY_PEAK: &str = "pgoutbox_resident_memory_peak_bytes";
/// Replication sessions restarted after a transient error.
pub const RECONNECTS: &str = "pgoutbox_reconnects_total";
/// Non-transactional logical decoding messages with an outbox prefix, not relayed
/// (`--message-non-transactional ignore`).
pub const MESSAGES_IGNORED: &str = "pgoutbox_messages_ignored_total";
/// Promotions followed: the server came back as a later timeline of the same
/// cluster with the slot present (a synchronized failover slot).
pub const PROMOTIONS_FOLLOWED: &str = "pgoutbox_promotions_followed_total";
/// 1 while the replication stream is up.
pub const REPLICATION_CONNECTED: &str = "pgoutbox_replication_connected";
/// 1 while the Kafka producer reaches a broker.
pub const PRODUCER_CONNECTED: &str = "pgoutbox_producer_connected";
/// Seconds the oldest in-flight transaction has gone without an ack.
pub const OLDEST_IN_FLIGHT_AGE: &str = "pgoutbox_oldest_in_flight_age_seconds";
/// Sessions ended because the oldest in-flight record got no ack (`--stall-timeout`).
pub const STALLS: &str = "pgoutbox_stalls_total";
/// Changes of the publication that stopped it covering the outbox, seen by the
/// publication watch (each stops the relay).
pub const PUBLICATION_CHANGES: &str = "pgoutbox_publication_changes_total";
/// librdkafka client errors and warnings, logged or not (an outage logs few lines).
pub const KAFKA_CLIENT_ERRORS: &str = "pgoutbox_kafka_client_errors_total";
/// Round trip of the last heartbeat seen: emitted → back through the stream.
pub const HEARTBEAT_ROUND_TRIP: &str = "pgoutbox_heartbeat_round_trip_seconds";
/// Age of the newest heartbeat of this relay seen back (now − its emit time).
pub const HEARTBEAT_AGE: &str = "pgoutbox_heartbeat_age_seconds";
/// Heartbeats emitted.
pub const HEARTBEATS_SENT: &str = "pgoutbox_heartbeats_sent_total";
/// This relay's heartbeats seen back in its replication stream.
pub const HEARTBEATS_SEEN: &str = "pgoutbox_heartbeats_seen_total";
/// Heartbeat emissions that failed (SQL connection down, read-only server, …).
pub const HEARTBEATS_FAILED: &str = "pgoutbox_heartbeats_failed_total";
/// Heartbeats of other relays (other slots, earlier processes) seen and ignored.
pub const HEARTBEATS_FOREIGN: &str = "pgoutbox_heartbeats_foreign_total";
/// One series per [`Role`], 1 for the current one.
pub const ROLE: &str = "pgoutbox_role";
/// Constant 1, labelled with the version and the librdkafka version.
pub const BUILD_INFO: &str = "pgoutbox_build_info";
/// 1 for the delivery mode in force (`--delivery`), 0 for the other.
pub const DELIVERY: &str = "pgoutbox_delivery";

/// Upper bounds (seconds) of the latency histogram buckets.
const LATENCY_BUCKETS: [f64; 14] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
];

/// All metrics of the process.
#[derive(Debug, Default)]
pub struct Metrics {
    published: Mutex<BTreeMap<String, u64>>,
    failed: Mutex<BTreeMap<String, u64>>,
    /// [cause][action], indexed by `Cause::index` and `ACTIONS`.
    invalid: [[AtomicU64; ACTIONS.len()]; Cause::ALL.len()],
    /// Indexed like `Outcome::ALL`.
    trace_context: [AtomicU64; Outcome::ALL.len()],
    /// Commit → ack ([`RELAY_LATENCY`]).
    latency: Histogram,
    /// Hand-over to librdkafka → ack ([`KAFKA_LATENCY`]).
    kafka_latency: Histogram,
    slot_lag_bytes: AtomicU64,
    confirmed_lsn: AtomicU64,
    in_flight_records: AtomicU64,
    in_flight_bytes: AtomicU64,
    in_flight_max_records: AtomicU64,
    in_flight_window_records: AtomicU64,
    in_flight_max_bytes: AtomicU64,
    reconnects: AtomicU64,
    messages_ignored: AtomicU64,
    promotions_followed: AtomicU64,
    kafka_client_errors: AtomicU64,
    replication_connected: AtomicBool,
    producer_connected: AtomicBool,
    oldest_in_flight_age_ms: AtomicU64,
    stalls: AtomicU64,
    /// Set from a stall until the next ack; `stall` holds why, for `/readyz`.
    stalled: AtomicBool,
    stall: Mutex<String>,
    publication_changes: AtomicU64,
    /// The last publication change seen, for `/readyz` (not ready from then on).
    publication_change: Mutex<Option<String>>,
    /// A [`Role`] as its number.
    role: AtomicU8,
    /// `--delivery exactly-once` is in force (from the start, standby included).
    exactly_once: AtomicBool,
    /// The end-to-end heartbeat ([`crate::heartbeat`]).
    pub heartbeat: heartbeat::HeartbeatState,
    /// Poll mode's series (`run --source poll`).
    pub poll: poll::PollMetrics,
    /// Exactly-once's series (`run --delivery exactly-once`).
    pub transactions: transactions::TransactionMetrics,
}

/// A Prometheus histogram of durations over [`LATENCY_BUCKETS`], lock-free: a
/// sample increments the one bucket it falls in (the first bound ≥ it; past the
/// last bound, only the count), and rendering sums them into Prometheus'
/// cumulative `le` series.
#[derive(Debug, Default)]
struct Histogram {
    buckets: [AtomicU64; LATENCY_BUCKETS.len()],
    count: AtomicU64,
    sum_micros: AtomicU64,
}

/// [`LATENCY_BUCKETS`] in microseconds.
const LATENCY_BOUNDS_MICROS: [u64; LATENCY_BUCKETS.len()] = {
    let mut out = [0; LATENCY_BUCKETS.len()];
    let mut i = 0;
    while i < out.len() {
        out[i] = (LATENCY_BUCKETS[i] * 1e6 + 0.5) as u64; // rounded, not truncated
        i += 1;
    }
    out
};

impl Histogram {
    /// One sample; a negative one (clocks apart) counts as 0.
    fn observe_micros(&self, micros: i64) {
        let micros = u64::try_from(micros).unwrap_or(0);
        let i = LATENCY_BOUNDS_MICROS.partition_point(|bound| *bound < micros);
        if let Some(bucket) = self.buckets.get(i) {
            bucket.fetch_add(1, Ordering::Relaxed);
        }
        self.count.fetch_add(1, Ordering::Relaxed);
        self.sum_micros.fetch_add(micros, Ordering::Relaxed);
    }

    /// The series of `name`, with its help line.
    fn render(&self, out: &mut String, name: &str, help: &str) {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} histogram");
        let mut cumulative = 0;
        for (bound, bucket) in LATENCY_BUCKETS.iter().zip(&self.buckets) {
            cumulative += bucket.load(Ordering::Relaxed);
            let _ = writeln!(out, "{name}_bucket{{le=\"{bound}\"}} {cumulative}");
        }
        // A sample landing meanwhile may be visible in its bucket and not yet in
        // the count, or the other way: the count is raised to the buckets' sum so
        // that `+Inf` (and `_count`) is never below an `le` series.
        let count = self.count.load(Ordering::Relaxed).max(cumulative);
        let _ = writeln!(out, "{name}_bucket{{le=\"+Inf\"}} {count}");
        let sum = self.sum_micros.load(Ordering::Relaxed) as f64 / 1e6;
        let _ = writeln!(out, "{name}_sum {sum}\n{name}_count {count}");
    }
}

fn bump(map: &Mutex<BTreeMap<String, u64>>, topic: &str) {
    let mut map = map.lock().unwrap_or_else(|e| e.into_inner());
    match map.get_mut(topic) {
        Some(n) => *n += 1,
        None => {
            map.insert(topic.to_owned(), 1);
        }
    }
}

impl Metrics {
    /// A record for `topic` was acked.
    pub fn published(&self, topic: &str) {
        bump(&self.published, topic);
    }

    /// Records acked so far, per topic (what a replay's summary counts).
    pub fn published_by_topic(&self) -> BTreeMap<String, u64> {
        self.published
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// A record for `topic` failed.
    pub fn failed(&self, topic: &str) {
        bump(&self.failed, topic);
    }

    /// A poison row met its policy.
    pub fn invalid_row(&self, cause: Cause, action: Action) {
        let a = ACTIONS.iter().position(|x| *x == action).unwrap_or(0);
        self.invalid[cause.index()][a].fetch_add(1, Ordering::Relaxed);
    }

    /// A row's trace context went `outcome`.
    pub fn trace_context(&self, outcome: Outcome) {
        let i = Outcome::ALL.iter().position(|x| *x == outcome).unwrap_or(0);
        self.trace_context[i].fetch_add(1, Ordering::Relaxed);
    }

    /// One commit → ack latency sample.
    pub fn observe_latency_micros(&self, micros: i64) {
        self.latency.observe_micros(micros);
    }

    /// One hand-over → ack sample: the Kafka share of a commit → ack sample.
    pub fn observe_kafka_latency_micros(&self, micros: i64) {
        self.kafka_latency.observe_micros(micros);
    }

    /// Slot lag and confirmed position.
    pub fn set_slot(&self, confirmed: u64, lag_bytes: u64) {
        self.confirmed_lsn.store(confirmed, Ordering::Relaxed);
        self.slot_lag_bytes.store(lag_bytes, Ordering::Relaxed);
    }

    /// The in-flight window.
    pub fn set_in_flight(&self, records: usize, bytes: usize) {
        self.in_flight_records
            .store(records as u64, Ordering::Relaxed);
        self.in_flight_bytes.store(bytes as u64, Ordering::Relaxed);
    }

    /// The records the window lets be in flight now (at most the cap: see
    /// [`Window`](crate::pipeline::window::Window)).
    pub fn set_in_flight_window(&self, records: usize) {
        self.in_flight_window_records
            .store(records as u64, Ordering::Relaxed);
    }

    /// The in-flight window's caps (what [`Metrics::set_in_flight`] is measured
    /// against; memory follows them).
    pub fn set_in_flight_limits(&self, records: usize, bytes: usize) {
        let n = |v: usize| u64::try_from(v).unwrap_or(u64::MAX);
        self.in_flight_max_records
            .store(n(records), Ordering::Relaxed);
        self.in_flight_max_bytes.store(n(bytes), Ordering::Relaxed);
    }

    /// A session restarted.
    pub fn reconnected(&self) {
        self.reconnects.fetch_add(1, Ordering::Relaxed);
    }

    /// A non-transactional message with an outbox prefix was not relayed; returns
    /// the count so far.
    pub fn message_ignored(&self) -> u64 {
        self.messages_ignored.fetch_add(1, Ordering::Relaxed) + 1
    }

    /// A session started on a promoted server (see [`PROMOTIONS_FOLLOWED`]).
    pub fn promotion_followed(&self) {
        self.promotions_followed.fetch_add(1, Ordering::Relaxed);
    }

    /// librdkafka reported a client error or a warning.
    pub fn kafka_client_error(&self) {
        self.kafka_client_errors.fetch_add(1, Ordering::Relaxed);
    }

    /// Replication stream up/down.
    pub fn set_replication_connected(&self, up: bool) {
        self.replication_connected.store(up, Ordering::Relaxed);
    }

    /// Producer reaches a broker or not.
    pub fn set_producer_connected(&self, up: bool) {
        self.producer_connected.store(up, Ordering::Relaxed);
    }

    /// How long the oldest in-flight transaction has gone without an ack.
    pub fn set_oldest_in_flight_age(&self, age: std::time::Duration) {
        let ms = u64::try_from(age.as_millis()).unwrap_or(u64::MAX);
        self.oldest_in_flight_age_ms.store(ms, Ordering::Relaxed);
    }

    /// The publication stopped covering the outbox (`why`): counted, and not ready
    /// from now on (the relay stops).
    pub fn publication_changed(&self, why: String) {
        self.publication_changes.fetch_add(1, Ordering::Relaxed);
        *self
            .publication_change
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = Some(why);
    }

    /// A stall was detected: not ready (with `why`) until the next ack. Returns
    /// whether a stall begins here: `false` when the relay is still stalled since
    /// an earlier one (no ack in between), so the caller says so only once.
    pub fn stalled(&self, why: String) -> bool {
        *self.stall.lock().unwrap_or_else(|e| e.into_inner()) = why;
        self.stalls.fetch_add(1, Ordering::Relaxed);
        !self.stalled.swap(true, Ordering::Relaxed)
    }

    /// A record was acked: a stall, if any, is over.
    pub fn acked(&self) {
        if self.stalled.load(Ordering::Relaxed) {
            self.stalled.store(false, Ordering::Relaxed);
        }
    }

    /// What the relay does with the slot now.
    /// Becoming active starts the heartbeat's age afresh.
    pub fn set_role(&self, role: Role) {
        let before = self.role.swap(role as u8, Ordering::Relaxed);
        if role == Role::Active && before != Role::Active as u8 {
            self.heartbeat.arm();
        }
    }

    /// Which delivery mode is in force (`--delivery`), for `/metrics` and `status`.
    pub fn set_exactly_once(&self, on: bool) {
        self.exactly_once.store(on, Ordering::Relaxed);
    }

    /// The current role.
    pub fn role(&self) -> Role {
        Role::from_u8(self.role.load(Ordering::Relaxed))
    }

    fn health(&self) -> Health {
        let stalled = self
            .stalled
            .load(Ordering::Relaxed)
            .then(|| self.stall.lock().unwrap_or_else(|e| e.into_inner()).clone());
        Health {
            role: self.role(),
            replication: self.replication_connected.load(Ordering::Relaxed),
            producer: self.producer_connected.load(Ordering::Relaxed),
            stalled,
            heartbeat: self.heartbeat.health_line(),
            publication_change: self
                .publication_change
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .clone(),
        }
    }

    /// Whether the instance does its part: active with both connections up, or a
    /// standby whose producer is up (see [`role`]).
    pub fn ready(&self) -> bool {
        self.health().ready()
    }

    /// The role and each connection's state, for the `/readyz` body.
    pub fn readiness(&self) -> String {
        self.health().body()
    }

    /// The Prometheus text exposition.
    pub fn render(&self) -> String {
        let (_, librdkafka) = rdkafka::util::get_rdkafka_version();
        self.render_with(&Scrape {
            process: process::Sample::read(),
            version: env!("CARGO_PKG_VERSION"),
            librdkafka,
            heartbeat_age: self.heartbeat.age(),
            heartbeat_round_trip: self.heartbeat.round_trip(),
        })
    }

    /// The exposition, with what a scrape reads from outside the counters given.
    fn render_with(&self, scrape: &Scrape) -> String {
        let mut out = String::with_capacity(2048);
        let counter_per_topic =
            |out: &mut String, name: &str, help: &str, map: &Mutex<BTreeMap<String, u64>>| {
                let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} counter");
                for (topic, n) in map.lock().unwrap_or_else(|e| e.into_inner()).iter() {
                    let _ = writeln!(out, "{name}{{topic=\"{}\"}} {n}", escape(topic));
                }
            };
        counter_per_topic(
            &mut out,
            EVENTS_PUBLISHED,
            "Outbox records acknowledged by Kafka.",
            &self.published,
        );
        counter_per_topic(
            &mut out,
            EVENTS_FAILED,
            "Outbox records Kafka did not accept.",
            &self.failed,
        );
        let _ = writeln!(
            out,
            "# HELP {INVALID_ROWS} Outbox rows with a poison cause, by cause and the action taken (--on-invalid; deliver: sent as they are).\n# TYPE {INVALID_ROWS} counter"
        );
        for cause in Cause::ALL {
            for (action, n) in ACTIONS.iter().zip(&self.invalid[cause.index()]) {
                if !cause.allows(*action) {
                    continue;
                }
                let _ = writeln!(
                    out,
                    "{INVALID_ROWS}{{cause=\"{}\",action=\"{}\"}} {}",
                    cause.name(),
                    action.name(),
                    n.load(Ordering::Relaxed)
                );
            }
        }
        let _ = writeln!(
            out,
            "# HELP {TRACE_CONTEXT} Outbox rows by what became of their W3C trace context (--trace-context).\n# TYPE {TRACE_CONTEXT} counter"
        );
        for (outcome, n) in Outcome::ALL.iter().zip(&self.trace_context) {
            let _ = writeln!(
                out,
                "{TRACE_CONTEXT}{{outcome=\"{}\"}} {}",
                outcome.name(),
                n.load(Ordering::Relaxed)
            );
        }
        self.latency.render(
            &mut out,
            RELAY_LATENCY,
            "Time from transaction commit to Kafka acknowledgement.",
        );
        self.kafka_latency.render(
            &mut out,
            KAFKA_LATENCY,
            "Time from handing a record to the Kafka producer to its acknowledgement (the Kafka share of outbox_relay_latency_seconds).",
        );
        let gauge = |out: &mut String, name: &str, kind: &str, help: &str, v: u64| {
            let _ = writeln!(
                out,
                "# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {v}"
            );
        };
        gauge(
            &mut out,
            SLOT_LAG_BYTES,
            "gauge",
            "WAL bytes between the server's WAL end and the confirmed LSN.",
            self.slot_lag_bytes.load(Ordering::Relaxed),
        );
        gauge(
            &mut out,
            CONFIRMED_LSN,
            "gauge",
            "Confirmed flush LSN (byte position).",
            self.confirmed_lsn.load(Ordering::Relaxed),
        );
        gauge(
            &mut out,
            IN_FLIGHT_RECORDS,
            "gauge",
            "Records awaiting a Kafka ack.",
            self.in_flight_records.load(Ordering::Relaxed),
        );
        gauge(
            &mut out,
            IN_FLIGHT_BYTES,
            "gauge",
            "Bytes of records awaiting a Kafka ack.",
            self.in_flight_bytes.load(Ordering::Relaxed),
        );
        gauge(
            &mut out,
            IN_FLIGHT_MAX_RECORDS,
            "gauge",
            "The in-flight window's cap in records (--max-in-flight): the window in use (pgoutbox_in_flight_window_records) never exceeds it.",
            self.in_flight_max_records.load(Ordering::Relaxed),
        );
        gauge(
            &mut out,
            IN_FLIGHT_WINDOW_RECORDS,
            "gauge",
            "The records the window lets be in flight now: the largest of 1,000, 250 per partition written to, and twice the broker's ack rate × round trip; at most the cap.",
            self.in_flight_window_records.load(Ordering::Relaxed),
        );
        gauge(
            &mut out,
            IN_FLIGHT_MAX_BYTES,
            "gauge",
            "The in-flight window's cap in bytes (--max-in-flight-bytes): WAL is not read while this many await an ack.",
            self.in_flight_max_bytes.load(Ordering::Relaxed),
        );
        gauge(
            &mut out,
            RECONNECTS,
            "counter",
            "Replication sessions restarted after a transient error.",
            self.reconnects.load(Ordering::Relaxed),
        );
        gauge(
            &mut out,
            MESSAGES_IGNORED,
            "counter",
            "Non-transactional logical decoding messages with an outbox prefix that were not relayed (--message-non-transactional ignore).",
            self.messages_ignored.load(Ordering::Relaxed),
        );
        gauge(
            &mut out,
            PROMOTIONS_FOLLOWED,
            "counter",
            "Failovers followed: sessions started on a promoted server (same system, later timeline) from its synchronized slot.",
            self.promotions_followed.load(Ordering::Relaxed),
        );
        gauge(
            &mut out,
            KAFKA_CLIENT_ERRORS,
            "counter",
            "librdkafka client errors and warnings (the log shows an outage once, then a summary a minute).",
            self.kafka_client_errors.load(Ordering::Relaxed),
        );
        gauge(
            &mut out,
            REPLICATION_CONNECTED,
            "gauge",
            "1 while the replication stream is connected.",
            u64::from(self.replication_connected.load(Ordering::Relaxed)),
        );
        gauge(
            &mut out,
            PRODUCER_CONNECTED,
            "gauge",
            "1 while the Kafka producer reaches a broker.",
            u64::from(self.producer_connected.load(Ordering::Relaxed)),
        );
        let age = self.oldest_in_flight_age_ms.load(Ordering::Relaxed) as f64 / 1e3;
        let _ = writeln!(
            out,
            "# HELP {OLDEST_IN_FLIGHT_AGE} Seconds the oldest transaction with records in flight has gone without a Kafka ack (0: nothing in flight).\n# TYPE {OLDEST_IN_FLIGHT_AGE} gauge\n{OLDEST_IN_FLIGHT_AGE} {age}"
        );
        gauge(
            &mut out,
            STALLS,
            "counter",
            "Sessions ended because the oldest in-flight record got no ack within --stall-timeout (the producer was replaced, the session resumed from the slot).",
            self.stalls.load(Ordering::Relaxed),
        );
        gauge(
            &mut out,
            PUBLICATION_CHANGES,
            "counter",
            "Changes of the publication that stopped it covering the outbox (a table dropped from it or re-created, inserts or a row filter changed), seen by the publication watch; each stops the relay.",
            self.publication_changes.load(Ordering::Relaxed),
        );
        self.render_heartbeat(&mut out, scrape);
        self.poll.render(&mut out);
        self.transactions.render(&mut out);
        self.render_identity(&mut out, scrape);
        scrape.process.render(&mut out);
        out
    }

    /// The heartbeat's counters, and its gauges while it is on.
    fn render_heartbeat(&self, out: &mut String, scrape: &Scrape) {
        let h = &self.heartbeat;
        for (name, help, n) in [
            (
                HEARTBEATS_SENT,
                "Heartbeats emitted (pg_logical_emit_message, --heartbeat-interval).",
                &h.sent,
            ),
            (
                HEARTBEATS_SEEN,
                "This relay's heartbeats seen back in its replication stream.",
                &h.seen,
            ),
            (
                HEARTBEATS_FAILED,
                "Heartbeat emissions that failed (retried at the next interval).",
                &h.failed,
            ),
            (
                HEARTBEATS_FOREIGN,
                "Heartbeats of other relays or earlier processes seen and ignored.",
                &h.foreign,
            ),
        ] {
            let _ = writeln!(
                out,
                "# HELP {name} {help}\n# TYPE {name} counter\n{name} {}",
                n.load(Ordering::Relaxed)
            );
        }
        // Declared always (alert rules may name them), sampled only when known: no
        // age while the heartbeat is off, no round trip before the first one.
        for (name, help, value) in [
            (HEARTBEAT_AGE, "Age (now minus emit time) of the newest heartbeat of this relay seen back through its replication stream, counted from when it became active at most; /readyz fails past --heartbeat-max-age. Absent while the heartbeat is off.", scrape.heartbeat_age),
            (HEARTBEAT_ROUND_TRIP, "Time from emitting the last heartbeat seen to reading it back from the replication stream.", scrape.heartbeat_round_trip),
        ] {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} gauge");
            if let Some(v) = value {
                let _ = writeln!(out, "{name} {}", v.as_secs_f64());
            }
        }
    }

    /// The role gauge and the build information.
    fn render_identity(&self, out: &mut String, scrape: &Scrape) {
        let _ = writeln!(
            out,
            "# HELP {ROLE} 1 for what this relay does with the slot: active (streams), standby (waits for the slot held by another process) or connecting.\n# TYPE {ROLE} gauge"
        );
        let current = self.role();
        for role in Role::ALL {
            let _ = writeln!(
                out,
                "{ROLE}{{role=\"{}\"}} {}",
                role.name(),
                u8::from(role == current)
            );
        }
        let exactly_once = self.exactly_once.load(Ordering::Relaxed);
        let _ = writeln!(
            out,
            "# HELP {DELIVERY} 1 for the delivery mode in force (--delivery): at-least-once or exactly-once.\n# TYPE {DELIVERY} gauge\n{DELIVERY}{{mode=\"at-least-once\"}} {}\n{DELIVERY}{{mode=\"exactly-once\"}} {}",
            u8::from(!exactly_once),
            u8::from(exactly_once)
        );
        let _ = writeln!(
            out,
            "# HELP {BUILD_INFO} Version of pgoutbox and of the librdkafka it is built with.\n# TYPE {BUILD_INFO} gauge\n{BUILD_INFO}{{version=\"{}\",librdkafka=\"{}\"}} 1",
            scrape.version,
            escape(&scrape.librdkafka)
        );
    }
}

/// What a scrape reads from outside the counters: the process, the versions and
/// the heartbeat's clock (given, so that a test renders a known exposition).
struct Scrape {
    process: process::Sample,
    version: &'static str,
    librdkafka: String,
    heartbeat_age: Option<std::time::Duration>,
    heartbeat_round_trip: Option<std::time::Duration>,
}

/// Escape a label value (backslash, quote, newline).
fn escape(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

#[cfg(test)]
mod tests;

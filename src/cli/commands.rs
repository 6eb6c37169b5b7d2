//! The arguments of the commands that stream or send events: `run`, `tail`,
//! `replay`, and the Kafka and state-file flags they share.
//!
//! Raw flags only, as clap parses them; `crate::config` validates them.

use clap::{Args, ValueEnum};

use super::{
    FormatArgs, NonTransactionalArg, OnUpdateArg, PollArgs, RecordArgs, RoutingArgs, SlotArg,
    SlotFailoverArg, SourceArgs, SourceKindArg, DEFAULT_HTTP_ADDR,
};

/// `--delivery`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum DeliveryArg {
    /// Idempotent producer; the slot follows acks (the default).
    AtLeastOnce,
    /// Kafka transactions with the source position inside.
    ExactlyOnce,
}

/// An on/off setting.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Switch {
    On,
    Off,
}

/// `--delivery` and the exactly-once settings: `run` acts on them, `check` checks
/// for them and `tail` says which mode `run` would be in.
#[derive(Debug, Clone, Args)]
pub struct DeliveryArgs {
    /// `at-least-once`: a crash resends what was in flight (consumers deduplicate
    /// on the `id` header). `exactly-once`: records go out in Kafka transactions,
    /// each also holding a watermark (the last PostgreSQL commit it carries) in
    /// --watermark-topic, so a restarted relay resumes after what Kafka committed and
    /// a `read_committed` consumer sees every event once, across crashes; a second
    /// relay with the same slot fences the first. Consumers must read with
    /// isolation.level=read_committed (the Java client's default is
    /// read_uncommitted). Logical mode only; needs Apache Kafka (or a broker that
    /// honours transactions).
    #[arg(long = "delivery", id = "delivery", env = "PGOUTBOX_DELIVERY", value_enum, default_value_t = DeliveryArg::AtLeastOnce)]
    pub mode: DeliveryArg,

    /// With --delivery exactly-once: the compacted topic that holds each relay's
    /// watermark (key: the transactional id). Created with cleanup.policy=compact
    /// when missing and allowed.
    #[arg(
        long,
        env = "PGOUTBOX_WATERMARK_TOPIC",
        default_value = "pgoutbox.offsets",
        value_name = "TOPIC"
    )]
    pub watermark_topic: String,

    /// With --delivery exactly-once: the producer's transactional.id (default
    /// `pgoutbox-<system identifier>-<database>-<slot>`). Only one relay may use it
    /// at a time: a new one fences the old.
    #[arg(long, env = "PGOUTBOX_TRANSACTIONAL_ID", value_name = "ID")]
    pub transactional_id: Option<String>,

    /// With --delivery exactly-once: a Kafka transaction commits at the first
    /// PostgreSQL commit after it has been open this long, or holds 10,000 records
    /// or 16 MiB (a PostgreSQL transaction is never split between two). Longer: less
    /// commit overhead per event, later visibility to read_committed consumers.
    #[arg(long, env = "PGOUTBOX_TRANSACTION_INTERVAL", default_value = "100ms", value_parser = humantime::parse_duration, value_name = "DURATION")]
    pub transaction_interval: std::time::Duration,
}

/// `pgoutbox tail`.
#[derive(Debug, Clone, Args)]
pub struct TailArgs {
    #[command(flatten)]
    pub source: SourceArgs,

    #[command(flatten)]
    pub routing: RoutingArgs,

    /// The record path, as `run` has it: tail shows the record `run` would send.
    #[command(flatten)]
    pub record_format: FormatArgs,

    /// The poison-row policy and record time, as `run` has them.
    #[command(flatten)]
    pub records: RecordArgs,

    #[command(flatten)]
    pub delivery: DeliveryArgs,

    /// Output format: one JSON object per line, or a readable block per event.
    #[arg(long, value_enum, default_value_t = TailFormat::Json)]
    pub format: TailFormat,

    /// Exit after printing this many events.
    #[arg(long, value_name = "N")]
    pub limit: Option<u64>,

    /// Read an existing slot instead of a temporary one: shows its backlog from
    /// confirmed_flush_lsn on, and never confirms anything (the slot does not move).
    /// Deliberately has no environment twin, so a production PGOUTBOX_SLOT never
    /// leaks into a debugging session.
    #[arg(long, value_name = "NAME")]
    pub slot: Option<String>,
}

/// Output format of `tail`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum TailFormat {
    /// One JSON object per line (for jq and scripts).
    Json,
    /// A block per event, for humans.
    Pretty,
}

/// `pgoutbox run`.
#[derive(Debug, Clone, Args)]
pub struct RunArgs {
    #[command(flatten)]
    pub source: SourceArgs,

    #[command(flatten)]
    pub source_kind: SourceKindArg,

    #[command(flatten)]
    pub poll: PollArgs,

    #[command(flatten)]
    pub routing: RoutingArgs,

    #[command(flatten)]
    pub slot: SlotArg,

    #[command(flatten)]
    pub slot_failover: SlotFailoverArg,

    #[command(flatten)]
    pub format: FormatArgs,

    /// Kafka bootstrap servers, comma-separated host:port.
    #[arg(long, env = "PGOUTBOX_BROKERS", value_name = "HOST:PORT,...")]
    pub brokers: Option<String>,

    #[command(flatten)]
    pub kafka: KafkaArgs,

    /// What to do with an UPDATE or DELETE of an outbox row (only seen with a
    /// publication that publishes them).
    #[arg(long, env = "PGOUTBOX_ON_UPDATE", value_enum, default_value_t = OnUpdateArg::Ignore)]
    pub on_update: OnUpdateArg,

    #[command(flatten)]
    pub records: RecordArgs,

    /// What to do with a non-transactional logical decoding message with an outbox
    /// prefix (pg_logical_emit_message(false, …): sent at once, even if its
    /// transaction rolls back): `ignore` (count it in pgoutbox_messages_ignored_total
    /// and warn, the default) or `relay` (send it as a unit of its own, confirmed at
    /// its LSN once acked).
    #[arg(
        long,
        env = "PGOUTBOX_MESSAGE_NON_TRANSACTIONAL",
        value_enum,
        default_value_t = NonTransactionalArg::Ignore
    )]
    pub message_non_transactional: NonTransactionalArg,

    #[command(flatten)]
    pub delivery: DeliveryArgs,

    /// The most records that may await a Kafka ack before WAL reading pauses. Each
    /// costs about 1 KB of memory while it waits (small rows: librdkafka's copy, its
    /// headers and request buffers, the relay's bookkeeping). Below this cap the
    /// window follows what the broker needs, the largest of: 1,000 records; 250 per
    /// partition written to; twice the broker's ack rate × round trip (a broker far
    /// away). A near broker and a topic of a few partitions keep ~1,000 in flight
    /// whatever the backlog (/metrics: pgoutbox_in_flight_window_records). An outbox
    /// routed to thousands of partitions drains faster with a cap of about 100 per
    /// partition written to, if it has the memory.
    #[arg(
        long,
        env = "PGOUTBOX_MAX_IN_FLIGHT",
        default_value_t = 10_000,
        value_name = "RECORDS"
    )]
    pub max_in_flight: usize,

    /// Stop reading WAL while this many bytes (topic + key + value) await an ack.
    #[arg(long, env = "PGOUTBOX_MAX_IN_FLIGHT_BYTES", default_value_t = 64 << 20, value_name = "BYTES")]
    pub max_in_flight_bytes: usize,

    /// Send small records in rounds: while librdkafka holds 5 records not yet
    /// acked, hold further ones and hand them over together once those are, so a
    /// steady stream of small transactions leaves as one request per round trip
    /// instead of keeping librdkafka's broker thread busy-polling (its idempotent
    /// producer spins while a partition has 5 records in flight). Measured: 32–41 %
    /// less relay CPU per event at 5,000–10,000 one-row transactions/s, p99 at
    /// 5,000/s down 32–51 %. The cost: on a topic with several partitions, a record
    /// may wait one more round trip (p50 at 10,000/s on a saturated machine: +0.5
    /// to +8 ms). Logical mode only (poll mode sends batches). `false` hands every
    /// record over at once.
    #[arg(
        long,
        env = "PGOUTBOX_KAFKA_ROUNDS",
        default_value_t = true,
        action = clap::ArgAction::Set,
        num_args = 0..=1,
        default_missing_value = "true",
        value_parser = clap::builder::BoolishValueParser::new(),
        value_name = "BOOL"
    )]
    pub kafka_rounds: bool,

    /// At live rates, read the replication stream in batches: after reading the end
    /// of a transaction, wait up to this long before reading again, so the
    /// transactions that arrive meanwhile are read, handed to Kafka and acknowledged
    /// together — one wake-up of each of the relay's threads per batch instead of
    /// per transaction. The
    /// first event after a quiet spell is read at once, a backlog (16 KiB waiting)
    /// is read at once, and an event waits at most this long. Measured at 1,000
    /// one-row transactions/s with synchronous_commit=on: 29 % less relay CPU per
    /// event (103 against 145 µs) for 1.7 ms more p50 commit→ack (4.0 against 2.3
    /// ms); at 5,000/s 32 % less. Needs TCP to the server (SO_RCVLOWAT); over a Unix
    /// socket the stream is read as it arrives. At most 1s; `0` reads every
    /// transaction as it arrives.
    #[arg(long, env = "PGOUTBOX_WAL_LINGER", default_value = "2ms", value_parser = humantime::parse_duration, value_name = "DURATION")]
    pub wal_linger: std::time::Duration,

    /// Serve /metrics (Prometheus), /livez and /readyz here; `off` disables it.
    /// Loopback by default: exposing it is a deliberate choice (0.0.0.0:10737).
    #[arg(
        long,
        env = "PGOUTBOX_HTTP_ADDR",
        default_value = DEFAULT_HTTP_ADDR,
        value_name = "ADDR:PORT|off"
    )]
    pub http_addr: String,

    /// On SIGTERM, wait this long for in-flight records before exiting anyway
    /// (unconfirmed records are resent after restart).
    #[arg(long, env = "PGOUTBOX_DRAIN_TIMEOUT", default_value = "30s", value_parser = humantime::parse_duration, value_name = "DURATION")]
    pub drain_timeout: std::time::Duration,

    /// When the oldest in-flight record has had no Kafka ack for this long, say so
    /// (WARN naming the record, /readyz 503, pgoutbox_stalls_total) and recover:
    /// replace the producer and resume from the slot (nothing confirmed past the
    /// record, so nothing is lost). Catches a producer that retries forever without
    /// succeeding, e.g. under a producer id a restarted broker no longer knows.
    /// Keep it above librdkafka's request.timeout.ms (30 s), so a slow broker's
    /// retry gets its chance first; `0` turns the check off.
    #[arg(long, env = "PGOUTBOX_STALL_TIMEOUT", default_value = "60s", value_parser = humantime::parse_duration, value_name = "DURATION")]
    pub stall_timeout: std::time::Duration,

    /// Every DURATION, emit a heartbeat — a non-transactional logical decoding
    /// message (prefix `pgoutbox-heartbeat`, naming this relay's slot) — on an ordinary
    /// SQL connection to the server the stream reads from, and time it when it comes
    /// back through the replication stream: pgoutbox_heartbeat_age_seconds and
    /// pgoutbox_heartbeat_round_trip_seconds prove the pipeline alive when no event
    /// flows, and the slot advances on a quiet database. Never sent to Kafka. Needs
    /// PostgreSQL 14+ (off on 13, said once at startup); `0` turns it off.
    #[arg(long, env = "PGOUTBOX_HEARTBEAT_INTERVAL", default_value = "10s", value_parser = humantime::parse_duration, value_name = "DURATION")]
    pub heartbeat_interval: std::time::Duration,

    /// /readyz fails (naming the cause) when the newest of this relay's heartbeats
    /// back through the stream is older than this (time since it was emitted); a WARN
    /// is logged once when it goes stale, an INFO when a fresh one comes back. At least --heartbeat-interval; a few intervals leaves room
    /// for a slow commit or a busy walsender.
    #[arg(long, env = "PGOUTBOX_HEARTBEAT_MAX_AGE", default_value = "60s", value_parser = humantime::parse_duration, value_name = "DURATION")]
    pub heartbeat_max_age: std::time::Duration,

    #[command(flatten)]
    pub state: StateDirArg,

    /// Start even though the slot was advanced, dropped, re-created or moved to
    /// another server behind the relay's back: log the skipped range, create the slot
    /// if missing, rewrite the state file. Applies to this start only. Deliberately
    /// has no environment twin, so it is never left on in a service's settings.
    #[arg(long)]
    pub accept_slot_reset: bool,

    /// Start even though the publication stopped covering the outbox since the
    /// relay last checked it (an outbox table dropped from it or re-created, its
    /// row filter or publish actions changed, the publication re-created): take it
    /// as it is now. Only after the publication was fixed and the rows of the window
    /// the stop named were re-published with `pgoutbox replay`. Applies to this start
    /// only; deliberately has no environment twin.
    #[arg(long)]
    pub accept_publication_change: bool,

    /// Start even though a mapped column of an outbox table changed type in a way
    /// that changes its records' shape (`type-changed`, e.g. `aggregate_id bigint`
    /// made `text`): drop the column types the relay kept in its state file and pin
    /// those of the next rows it reads, so from them on records carry the new type.
    /// Only once consumers accept records of the new shape. Applies to this start
    /// only; deliberately has no environment twin.
    #[arg(long)]
    pub accept_type_change: bool,

    /// When an outbox table is re-created (DROP + CREATE, a rename swap) and not
    /// published, and nothing else about the publication changed: `on` re-adds it
    /// to the publication and sends the rows written to it meanwhile, from the
    /// WAL, in order, before any later row (PostgreSQL 14+; the relay's role must
    /// own the publication and the table, or be a superuser; writers wait for the
    /// repair's few milliseconds); `off` stops the relay with the fix instead.
    /// A failed repair stops it too, saying why.
    #[arg(long, env = "PGOUTBOX_PUBLICATION_REPAIR", value_enum, default_value_t = Switch::On, value_name = "on|off")]
    pub publication_repair: Switch,

    /// With --delivery exactly-once: start even though the watermark topic no
    /// longer holds this relay's watermark while its state file says it committed
    /// some there (the topic was deleted or re-created): resume from the slot, so
    /// read_committed consumers may see again what Kafka committed past the slot's
    /// position (nothing after a clean stop). Applies to this start only;
    /// deliberately has no environment twin.
    #[arg(long)]
    pub accept_watermark_reset: bool,
}

/// `pgoutbox replay`.
#[derive(Debug, Clone, Args)]
pub struct ReplayArgs {
    #[command(flatten)]
    pub source: SourceArgs,

    #[command(flatten)]
    pub routing: RoutingArgs,

    #[command(flatten)]
    pub format: FormatArgs,

    #[command(flatten)]
    pub records: RecordArgs,

    /// Kafka bootstrap servers, comma-separated host:port (not needed with --dry-run).
    #[arg(long, env = "PGOUTBOX_BROKERS", value_name = "HOST:PORT,...")]
    pub brokers: Option<String>,

    #[command(flatten)]
    pub kafka: KafkaArgs,

    /// Replay rows whose timestamp column (--timestamp-column, default created_at)
    /// is at or after TIME: RFC 3339 (2026-12-01T10:00:00Z, 2026-12-01 10:00:00+01:00;
    /// without an offset: UTC) or an age such as 90m, 2h, 3days (that long before now).
    #[arg(long, value_name = "TIME")]
    pub from: Option<String>,

    /// Replay rows whose timestamp column is before TIME (same forms as --from).
    #[arg(long, value_name = "TIME")]
    pub to: Option<String>,

    /// Replay the rows with these event ids (the --id-column); repeatable or
    /// comma-separated. An id not found is reported, never silently passed over.
    #[arg(long = "id", value_delimiter = ',', value_name = "ID")]
    pub ids: Vec<String>,

    /// Replay every row of the outbox tables (with --from/--to/--id, those narrow it).
    #[arg(long)]
    pub all: bool,

    /// Not supported, and refused with the reason: an outbox row holds no WAL
    /// position, so no row can be selected by LSN. Use --from/--to or --id.
    #[arg(long, value_name = "LSN")]
    pub since_lsn: Option<String>,

    /// Send nothing: print each record that would be sent (topic, key, partition
    /// key, headers, timestamp, value) as one JSON object per line on stdout.
    #[arg(long)]
    pub dry_run: bool,

    /// Replay is at-least-once only: it sends rows again on purpose, as plain
    /// idempotent writes outside any relay's Kafka transactions and watermark (a
    /// read_committed consumer sees them once acked; consumers deduplicate on the
    /// `id` header). `exactly-once` (also from PGOUTBOX_DELIVERY or a shared
    /// config file) is refused with the reason.
    #[arg(long = "delivery", env = "PGOUTBOX_DELIVERY", value_enum, default_value_t = DeliveryArg::AtLeastOnce)]
    pub delivery: DeliveryArg,

    /// Rows fetched from the cursor at a time (memory is bounded by it and by the
    /// producer's queue, not by the number of rows replayed).
    #[arg(long, default_value_t = 1000, value_name = "ROWS")]
    pub batch_size: usize,
}

/// How the producer reaches the brokers: the same for `run` and `check`, so a TLS or
/// SASL cluster can be pre-checked with the settings `run` will use.
#[derive(Debug, Clone, Args)]
pub struct KafkaArgs {
    /// Extra librdkafka producer setting (repeatable, or comma-separated: a comma
    /// starts a new setting only when `key=` follows), e.g. --kafka-option linger.ms=10,
    /// or security.protocol=SASL_SSL, sasl.mechanism=SCRAM-SHA-256, sasl.username=…,
    /// ssl.ca.location=/etc/kafka-ca.crt. Settings that would weaken delivery (acks,
    /// enable.idempotence) are refused; secret values (sasl.password, *.password, …)
    /// are never shown.
    #[arg(
        long = "kafka-option",
        env = "PGOUTBOX_KAFKA_OPTION",
        value_name = "KEY=VALUE"
    )]
    pub kafka_options: Vec<String>,

    /// Read the Kafka SASL password (librdkafka sasl.password) from this file (e.g. a
    /// mounted secret); it overrides a sasl.password given with --kafka-option.
    #[arg(long, env = "PGOUTBOX_KAFKA_SASL_PASSWORD_FILE", value_name = "FILE")]
    pub kafka_sasl_password_file: Option<std::path::PathBuf>,
}

/// Where `run` keeps its state file: `run` writes it, `teardown` removes it with the
/// slot.
#[derive(Debug, Clone, Args)]
pub struct StateDirArg {
    /// Directory of the state file (the last LSN confirmed to PostgreSQL, checked
    /// against the slot at every start). Default: $STATE_DIRECTORY (systemd), else
    /// $XDG_STATE_HOME/pgoutbox, else ~/.local/state/pgoutbox. `off` disables the
    /// slot-safety checks that need it.
    #[arg(long, env = "PGOUTBOX_STATE_DIR", value_name = "DIR|off")]
    pub state_dir: Option<String>,
}

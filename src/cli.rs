//! Command-line interface: the raw arguments, as clap parses them.
//!
//! Owns flag names, environment twins (`PGOUTBOX_<NAME>`), defaults and help text.
//! Nothing here is validated beyond what clap does; [`crate::config`] turns these
//! into a validated configuration, and no clap type is used past it.

use clap::{Args, Parser, Subcommand, ValueEnum};

use crate::config::router_keys as keys;

/// Where `run` serves metrics and health by default. Port 10737: free in Prometheus'
/// default-port allocations (9100–9999 is full; 9187 is postgres_exporter's, often on
/// the database host) and unassigned by IANA; below Linux's ephemeral range, so the
/// kernel never hands it to an outgoing connection.
pub const DEFAULT_HTTP_ADDR: &str = "127.0.0.1:10737";

/// Stream a PostgreSQL transactional outbox through logical replication.
///
/// pgoutbox reads inserted outbox rows from a `pgoutput` logical replication stream
/// (publication filtered to the outbox tables) in commit order.
#[derive(Debug, Parser)]
#[command(
    name = "pgoutbox",
    version,
    propagate_version = true,
    max_term_width = 100,
    after_help = crate::exit::help()
)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,

    /// TOML configuration file: keys are the long flag names with `_` (e.g.
    /// `database_url`, `brokers`, `table = [..]`), plus `[tables."schema.name"]`
    /// sections for per-table column mapping and topic template. Precedence:
    /// flag > environment > file > default.
    #[arg(long, global = true, env = "PGOUTBOX_CONFIG", value_name = "FILE")]
    pub config: Option<std::path::PathBuf>,

    /// Log format on stderr: human-readable lines, or one JSON object per line.
    /// Filter with RUST_LOG (e.g. RUST_LOG=pgoutbox=debug).
    #[arg(long, global = true, env = "PGOUTBOX_LOG_FORMAT", value_enum, default_value_t = LogFormat::Human)]
    pub log_format: LogFormat,

    /// Color in human log lines: `auto` colors only when stderr is a terminal and
    /// NO_COLOR is unset or empty (see no-color.org) and TERM is not `dumb`;
    /// `always` and `never` decide regardless.
    #[arg(long, global = true, env = "PGOUTBOX_COLOR", value_enum, default_value_t = ColorWhen::Auto, value_name = "WHEN")]
    pub color: ColorWhen,
}

/// `--color` values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ColorWhen {
    /// On a terminal, unless NO_COLOR or TERM=dumb says otherwise.
    Auto,
    /// Always (e.g. a log viewer that renders ANSI colors).
    Always,
    /// Never.
    Never,
}

/// `--log-format` values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    /// Readable lines (colored on a terminal; see --color).
    Human,
    /// One JSON object per line, for log shippers.
    Json,
}

/// Subcommands.
// Parsed once per process: the size of `Run` costs nothing worth a box.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Relay outbox rows to Kafka; confirm the slot only after Kafka acked.
    ///
    /// Creates the publication and the slot (a failover slot on PostgreSQL 17+) when
    /// missing, resumes where it last confirmed — the state file's position when the
    /// slot fell behind it across a PostgreSQL restart, else the slot's
    /// confirmed_flush_lsn — and confirms a transaction's commit LSN only once its
    /// records and all earlier ones are acked (acks=all, idempotent producer). A lost
    /// connection (PostgreSQL or Kafka) is retried; a second `run` on the same slot
    /// stands by and takes over when the first one stops. SIGTERM drains and exits 0.
    ///
    /// Example: pgoutbox run --database-url postgres://relay@db/shop --brokers kafka:9092
    Run(RunArgs),
    /// Print decoded outbox events to stdout as they commit, one JSON object per line.
    ///
    /// Needs no Kafka. By default reads through a temporary replication slot that
    /// disappears when tail exits, so no persistent slot or confirmed LSN is touched;
    /// only events committed after tail starts are shown. Logs go to stderr.
    ///
    /// Example: pgoutbox tail --database-url postgres://app@localhost/shop --limit 10
    Tail(TailArgs),
    /// Send events still in the outbox table to Kafka again, selected by time or id.
    ///
    /// Reads the rows with SQL (one consistent snapshot, a cursor fetched in batches)
    /// and sends each through the same mapping, checks, --on-invalid policy,
    /// converters and producer settings as `run`, with one more header:
    /// `pgoutbox.replay` = the replay's start time (RFC 3339, UTC), the same on
    /// every record of one replay. Order: per table by the timestamp column, then
    /// the id column — not commit order (a row holds no commit position), though
    /// one key's events keep their order when their timestamps do. Waits for every
    /// ack, prints a summary and exits non-zero naming any record that failed.
    /// Needs no slot and never touches one; `run` may keep running meanwhile.
    ///
    /// Needs a selector: --from/--to, --id, or --all (selectors deliberately have no
    /// environment twin, so a variable left in a service's environment never selects
    /// a replay). Only rows still in the table can be replayed: rows deleted by a
    /// cleanup job (or the insert-then-delete pattern) and events sent as logical
    /// decoding messages (no table) are gone: their WAL is recycled.
    ///
    /// Examples:
    ///   pgoutbox replay --from 2h --dry-run
    ///   pgoutbox replay --from 2026-12-01T10:00:00Z --to 2026-12-01T11:00:00Z --brokers kafka:9092
    ///   pgoutbox replay --id 6f1c…,9a2e… --brokers kafka:9092
    #[command(verbatim_doc_comment)]
    Replay(ReplayArgs),
    /// Check everything the relay needs, report every problem in one run.
    ///
    /// wal_level, slot/sender headroom, role attributes, outbox tables and mapped
    /// columns, publication, slot (plugin, wal_status, failover and
    /// synchronized_standby_slots on 17+), max_slot_wal_keep_size, and
    /// the brokers when --brokers is given. Each line names the object, what was
    /// observed and the exact fix. Exits non-zero if any check fails.
    ///
    /// With --source poll, what poll mode needs instead (no wal_level, REPLICATION,
    /// publication or slot): the tables and mapped columns, a nullable published_at
    /// timestamptz, an index WHERE published_at IS NULL, the --poll-order-by column,
    /// the privileges for --poll-mark, and the NOTIFY trigger (a caveat when missing).
    ///
    /// Example: pgoutbox check --source poll --database-url postgres://relay@db/shop
    Check(CheckArgs),
    /// Show the replication slot: active pid, confirmed LSN, lag, wal_status, failover.
    Status(StatusArgs),
    /// Drop the replication slot, the publication and run's state file of the slot
    /// (asks for --yes).
    Teardown(TeardownArgs),
    /// Configuration helpers: show the effective configuration, import Debezium.
    #[command(subcommand)]
    Config(ConfigCommand),
    /// Print a shell completion script (bash, zsh, fish, elvish, powershell).
    Completions {
        /// Target shell.
        shell: clap_complete::Shell,
    },
    /// Print a man page (roff) to stdout, or write them all into a directory.
    ///
    /// `pgoutbox man | man -l -` shows this command's page, `pgoutbox man run` the page
    /// of `pgoutbox run` (pgoutbox-run(1)); `pgoutbox man --out-dir
    /// /usr/local/share/man/man1` installs every page the others refer to.
    Man(ManArgs),
    /// Create the publication and the replication slot if they are missing.
    ///
    /// Idempotent: existing objects are checked, never altered. With --print-sql,
    /// only prints the SQL a DBA would run.
    Setup(SetupArgs),
    /// Delete outbox rows the relay is done with, older than --older-than, in small
    /// batches (one short transaction each, so no long lock).
    ///
    /// --source poll: rows whose published_at is older than the cutoff (unpublished
    /// rows are never touched). --source logical: rows whose timestamp column is older
    /// than the cutoff AND whose inserting transaction the replication slot has
    /// confirmed (finished before the slot's catalog_xmin horizon), so a row not yet
    /// relayed survives however old it is. Prints a summary (rows, batches, time,
    /// longest batch). --dry-run only counts.
    ///
    /// Example: pgoutbox cleanup --database-url postgres://relay@db/shop --older-than 7d
    Cleanup(CleanupArgs),
}

/// `pgoutbox man`.
#[derive(Debug, Clone, Args)]
pub struct ManArgs {
    /// The (sub)command whose page to print, e.g. `run` or `config show`; none: the
    /// page of pgoutbox itself.
    #[arg(value_name = "COMMAND", conflicts_with = "out_dir")]
    pub command: Vec<String>,

    /// Write every page (pgoutbox.1, pgoutbox-run.1, pgoutbox-config-show.1, …) into
    /// this directory instead.
    #[arg(long, value_name = "DIR")]
    pub out_dir: Option<std::path::PathBuf>,
}

/// How `run` finds new outbox events (`--source`). Shared by the subcommands that
/// behave differently per mode (`run`, `setup`, `check`, `cleanup`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, ValueEnum)]
pub enum SourceKind {
    /// Logical replication (pgoutput): committed inserts read from the WAL through a
    /// replication slot, in commit order. Needs wal_level=logical and REPLICATION.
    #[default]
    Logical,
    /// Polling: claim unpublished rows with SELECT … FOR UPDATE SKIP LOCKED, mark them
    /// published after Kafka acked. For servers without logical replication.
    Poll,
}

/// `--source`, flattened into the subcommands that know both modes.
#[derive(Debug, Clone, Args)]
pub struct SourceKindArg {
    /// Where events come from: `logical` (replication slot, commit order) or `poll`
    /// (SELECT … FOR UPDATE SKIP LOCKED on the outbox table, for servers where
    /// wal_level=logical or the REPLICATION privilege is out of reach).
    #[arg(
        long = "source",
        env = "PGOUTBOX_SOURCE",
        value_enum,
        default_value_t = SourceKind::Logical,
        value_name = "KIND"
    )]
    pub kind: SourceKind,
}

/// `--poll-mark` on its own, for `check` (which needs no other poll setting).
#[derive(Debug, Clone, Args)]
pub struct PollMarkFlag {
    /// With --source poll: how the relay marks a row once Kafka acked it: `published`
    /// sets published_at (needs the column, its partial index, UPDATE on it), `delete`
    /// deletes it (needs DELETE, and UPDATE on some column: SELECT … FOR UPDATE
    /// requires it). Use the value `run` uses.
    #[arg(
        long = "poll-mark",
        env = "PGOUTBOX_POLL_MARK",
        value_enum,
        default_value_t = PollMarkArg::Published,
        value_name = "published|delete"
    )]
    pub mark: PollMarkArg,
}

/// The column poll mode claims rows in order of; shared by `run` and `setup`.
#[derive(Debug, Clone, Args)]
pub struct PollOrderArg {
    /// With --source poll: the column rows are claimed and published in order of. The
    /// default `seq` is a bigint identity column `setup --source poll` adds (adding it
    /// rewrites the table once under an exclusive lock: do it before the table grows,
    /// or name an existing increasing column). Row order follows this column, not
    /// commit order: a row of a long transaction that commits after newer rows were
    /// published is published after them. A timestamp like created_at = now() is a
    /// poor choice: equal for every row of one transaction, so ties scramble them.
    #[arg(
        long = "poll-order-by",
        env = "PGOUTBOX_POLL_ORDER_BY",
        default_value = "seq",
        value_name = "COLUMN"
    )]
    pub order_by: String,
}

/// Poll mode's settings (`run --source poll`).
#[derive(Debug, Clone, Args)]
pub struct PollArgs {
    #[command(flatten)]
    pub order: PollOrderArg,

    /// With --source poll: rows claimed per transaction (SELECT … LIMIT n FOR UPDATE
    /// SKIP LOCKED). Also the most a crash sends twice: the batch in flight is
    /// unmarked, so it is claimed and sent again.
    #[arg(
        long = "poll-batch-size",
        env = "PGOUTBOX_POLL_BATCH_SIZE",
        default_value_t = 500,
        value_name = "ROWS"
    )]
    pub batch_size: usize,

    /// With --source poll: poll at least this often. The insert trigger's NOTIFY wakes
    /// the relay at once; this is the fallback (no trigger installed, a notification
    /// lost with a connection). A full batch is followed by the next one at once.
    /// NOTIFY serializes the commits of inserting transactions: when writers need that
    /// throughput, drop the trigger pgoutbox_poll_notify and poll every 100ms instead.
    #[arg(long = "poll-interval", env = "PGOUTBOX_POLL_INTERVAL", default_value = "1s", value_parser = humantime::parse_duration, value_name = "DURATION")]
    pub interval: std::time::Duration,

    /// With --source poll: what happens to a row once Kafka acked it, in the claiming
    /// transaction: `published` sets published_at = now() (the row stays for audit;
    /// delete it later with `pgoutbox cleanup`), `delete` deletes it.
    #[arg(
        long = "poll-mark",
        env = "PGOUTBOX_POLL_MARK",
        value_enum,
        default_value_t = PollMarkArg::Published,
        value_name = "published|delete"
    )]
    pub mark: PollMarkArg,
}

/// `--poll-mark` values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum PollMarkArg {
    /// Set published_at = now().
    Published,
    /// Delete the row.
    Delete,
}

/// Where the outbox lives.
#[derive(Debug, Clone, Args)]
pub struct SourceArgs {
    /// PostgreSQL connection string: a libpq URL (postgres://user:pass@host:5432/db?sslmode=require)
    /// or key=value pairs. Unset parts fall back to PGHOST, PGPORT, PGUSER, PGPASSWORD,
    /// PGDATABASE, PGSSLMODE, PGSSLROOTCERT and ~/.pgpass, like psql. Several servers:
    /// postgres://a:5432,b:5432/db?target_session_attrs=read-write — the relay uses the
    /// one that accepts writes and finds the new primary by itself after a failover.
    #[arg(
        long,
        env = "PGOUTBOX_DATABASE_URL",
        value_name = "URL",
        hide_env_values = true
    )]
    pub database_url: Option<String>,

    /// Read the connection string from this file instead (e.g. a mounted secret).
    #[arg(
        long,
        env = "PGOUTBOX_DATABASE_URL_FILE",
        value_name = "FILE",
        conflicts_with = "database_url"
    )]
    pub database_url_file: Option<std::path::PathBuf>,

    /// Read the database password from this file; it overrides a password in the URL.
    #[arg(long, env = "PGOUTBOX_DATABASE_PASSWORD_FILE", value_name = "FILE")]
    pub database_password_file: Option<std::path::PathBuf>,

    /// Publication that carries the outbox tables (created FOR TABLE … WITH (publish = 'insert')
    /// when missing).
    #[arg(
        long,
        env = "PGOUTBOX_PUBLICATION",
        default_value = "pgoutbox",
        value_name = "NAME"
    )]
    pub publication: String,

    /// Outbox table as schema.table; repeat the flag (or comma-separate the env var) for several.
    /// `run` relays every table of the publication, so each must be listed: a row of
    /// any other published table stops it (`check` reports such tables).
    #[arg(
        long = "table",
        env = "PGOUTBOX_TABLE",
        value_delimiter = ',',
        default_value = "public.outbox",
        value_name = "SCHEMA.TABLE"
    )]
    pub tables: Vec<String>,

    /// Logical decoding messages with this prefix are outbox events too (the
    /// table-less outbox, PostgreSQL 14+): `pg_logical_emit_message(true, 'pgoutbox',
    /// '{"id":…,"aggregate_type":…,"aggregate_id":…,"payload":…}')`, or the helper
    /// `outbox_emit_message(…)` of sql/outbox_message.sql. Field names are the mapped
    /// column names (--key-column etc. apply); an optional `headers` object of strings
    /// becomes Kafka headers. Exact match; repeatable (or comma-separated); an empty
    /// value turns messages off. A message that is not such an object is a poison
    /// event (--on-invalid bad-message).
    #[arg(
        long = "message-prefix",
        env = "PGOUTBOX_MESSAGE_PREFIX",
        value_delimiter = ',',
        default_value = "pgoutbox",
        value_name = "PREFIX"
    )]
    pub message_prefixes: Vec<String>,

    /// The table-less outbox: relay logical decoding messages only (--message-prefix),
    /// with no outbox table. The publication is then created empty (CREATE
    /// PUBLICATION <name>, no table: the slot still needs one) and must stay empty;
    /// `check` and `status` report the mode. Needs PostgreSQL 14+. Conflicts with --table.
    #[arg(
        long,
        env = "PGOUTBOX_MESSAGES_ONLY",
        conflicts_with = "tables",
        default_value_t = false,
        action = clap::ArgAction::Set,
        num_args = 0..=1,
        default_missing_value = "true",
        value_parser = clap::builder::BoolishValueParser::new(),
        value_name = "BOOL"
    )]
    pub messages_only: bool,
}

/// How rows become records. Debezium Outbox Event Router option names are accepted
/// as flag aliases (e.g. `--table.field.event.key`).
#[derive(Debug, Clone, Args)]
pub struct RoutingArgs {
    /// Column whose value fills ${routedByValue} in the topic template.
    #[arg(
        long,
        alias = keys::ROUTE_BY_FIELD.debezium,
        env = "PGOUTBOX_ROUTE_BY_FIELD",
        default_value = keys::ROUTE_BY_FIELD.default,
        value_name = "COLUMN"
    )]
    pub route_by_field: String,

    /// Topic name template, Debezium syntax.
    #[arg(
        long,
        alias = keys::TOPIC_TEMPLATE.debezium,
        env = "PGOUTBOX_TOPIC_TEMPLATE",
        default_value = keys::TOPIC_TEMPLATE.default,
        value_name = "TEMPLATE"
    )]
    pub topic_template: String,

    /// Column holding the event id (record header `id`).
    #[arg(
        long,
        alias = keys::ID_COLUMN.debezium,
        env = "PGOUTBOX_ID_COLUMN",
        default_value = keys::ID_COLUMN.default,
        value_name = "COLUMN"
    )]
    pub id_column: String,

    /// Column holding the record key.
    #[arg(
        long,
        alias = keys::KEY_COLUMN.debezium,
        env = "PGOUTBOX_KEY_COLUMN",
        default_value = keys::KEY_COLUMN.default,
        value_name = "COLUMN"
    )]
    pub key_column: String,

    /// Column holding the event type (record header `event_type`).
    #[arg(
        long,
        alias = keys::EVENT_TYPE_COLUMN.debezium,
        env = "PGOUTBOX_EVENT_TYPE_COLUMN",
        default_value = keys::EVENT_TYPE_COLUMN.default,
        value_name = "COLUMN"
    )]
    pub event_type_column: String,

    /// Column holding the record value.
    #[arg(
        long,
        alias = keys::PAYLOAD_COLUMN.debezium,
        env = "PGOUTBOX_PAYLOAD_COLUMN",
        default_value = keys::PAYLOAD_COLUMN.default,
        value_name = "COLUMN"
    )]
    pub payload_column: String,

    /// Column holding the record timestamp (the commit time is used when absent or NULL).
    #[arg(
        long,
        alias = keys::TIMESTAMP_COLUMN.debezium,
        env = "PGOUTBOX_TIMESTAMP_COLUMN",
        default_value = keys::TIMESTAMP_COLUMN.default,
        value_name = "COLUMN"
    )]
    pub timestamp_column: String,

    /// Propagate W3C trace context: the column (or COLUMN.KEY[.KEY…], keys into a
    /// JSON column such as the payload or a headers column) whose value becomes the
    /// record headers `traceparent` and `tracestate`. The value there may be a
    /// traceparent string, a JSON object with `traceparent` (and `tracestate`) keys,
    /// or Debezium's properties text (`traceparent=…`). A NULL or missing value sends
    /// no header; a malformed one is logged, counted
    /// (pgoutbox_trace_context_total) and left out — the event is still sent.
    /// Examples: --trace-context traceparent, --trace-context headers,
    /// --trace-context payload.meta.traceparent. Off when unset.
    #[arg(
        long,
        alias = keys::TRACE_CONTEXT.debezium,
        env = "PGOUTBOX_TRACE_CONTEXT",
        value_name = "COLUMN[.KEY…]"
    )]
    pub trace_context: Option<String>,

    /// Column reported as `aggregate_type` by tail.
    #[arg(
        long,
        env = "PGOUTBOX_AGGREGATE_TYPE_COLUMN",
        default_value = "aggregate_type",
        value_name = "COLUMN"
    )]
    pub aggregate_type_column: String,
}

/// How records are serialised: the headers and the Kafka Connect converters of a
/// Debezium connector, for consumers that must not tell the difference.
#[derive(Debug, Clone, Args)]
pub struct FormatArgs {
    /// Put a column in a record header or in the value's envelope, Debezium's
    /// table.fields.additional.placement: `COLUMN:header[:ALIAS]` or
    /// `COLUMN:envelope[:ALIAS]` (the value becomes {"payload": …, ALIAS: …}).
    /// Repeatable (or comma-separated). Without it the event type column goes to
    /// header `event_type`; once given, exactly the listed columns are placed
    /// (`none`: no header but `id`, as Debezium without placements), e.g.
    /// --placement event_type:header:eventType.
    #[arg(
        long = "placement",
        alias = "table.fields.additional.placement",
        env = "PGOUTBOX_PLACEMENT",
        value_delimiter = ',',
        value_name = "COLUMN:PLACE[:ALIAS]"
    )]
    pub placements: Vec<String>,

    /// How the key is serialised, as Kafka Connect's key.converter: `string`
    /// (StringConverter: the column's text), `json` (JsonConverter with
    /// schemas.enable=false: a quoted JSON string, which hashes to another partition)
    /// or `json-schemas` (JsonConverter with schemas, the Connect worker's default:
    /// {"schema":…,"payload":…}).
    #[arg(long, env = "PGOUTBOX_KEY_CONVERTER", value_enum, default_value_t = ConverterArg::String)]
    pub key_converter: ConverterArg,

    /// How the value is serialised, as Kafka Connect's value.converter (see
    /// --key-converter). `json` writes a jsonb payload as a JSON string
    /// ("{\"a\": 1}"); with --expand-json-payload as the JSON itself.
    #[arg(long, env = "PGOUTBOX_VALUE_CONVERTER", value_enum, default_value_t = ConverterArg::String)]
    pub value_converter: ConverterArg,

    /// Debezium's table.expand.json.payload: a JSON-object payload becomes a Connect
    /// struct (compact JSON without null fields and empty arrays, with an inferred
    /// schema under json-schemas); other payloads stay as they are.
    #[arg(
        long,
        alias = "table.expand.json.payload",
        env = "PGOUTBOX_EXPAND_JSON_PAYLOAD"
    )]
    pub expand_json_payload: bool,

    /// Debezium's topic.prefix (the connector's logical name); only names the
    /// Connect schema of an envelope value under json-schemas:
    /// LOGICAL_NAME.schema.table.route.Value.
    #[arg(
        long,
        env = "PGOUTBOX_LOGICAL_NAME",
        default_value = "pgoutbox",
        value_name = "NAME"
    )]
    pub logical_name: String,
}

/// A Kafka Connect converter (`--key-converter`, `--value-converter`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ConverterArg {
    /// StringConverter.
    String,
    /// JsonConverter, schemas.enable=false.
    Json,
    /// JsonConverter, schemas.enable=true (the Connect worker's default).
    JsonSchemas,
}

/// The replication slot the relay consumes.
#[derive(Debug, Clone, Args)]
pub struct SlotArg {
    /// Replication slot (a pgoutput logical slot; created by `setup`/`run` when missing).
    #[arg(
        long = "slot",
        env = "PGOUTBOX_SLOT",
        default_value = "pgoutbox",
        value_name = "NAME"
    )]
    pub name: String,
}

/// Whether a slot the relay creates is a failover slot.
#[derive(Debug, Clone, Args)]
pub struct SlotFailoverArg {
    /// Create the slot as a failover slot (PostgreSQL 17+): standbys with
    /// sync_replication_slots = on keep a copy, so after a failover the relay resumes
    /// on the promoted standby by itself. Needs synchronized_standby_slots on the
    /// primary (`check` tells). An existing slot is not altered: `check` warns and
    /// prints the ALTER_REPLICATION_SLOT command. No effect on PostgreSQL 16 and
    /// older, which have no failover slots (see "Failover" in the README).
    #[arg(
        long,
        env = "PGOUTBOX_SLOT_FAILOVER",
        default_value_t = true,
        action = clap::ArgAction::Set,
        num_args = 0..=1,
        default_missing_value = "true",
        value_parser = clap::builder::BoolishValueParser::new(),
        value_name = "BOOL"
    )]
    pub slot_failover: bool,
}

/// `pgoutbox tail`.
#[derive(Debug, Clone, Args)]
pub struct TailArgs {
    #[command(flatten)]
    pub source: SourceArgs,

    #[command(flatten)]
    pub routing: RoutingArgs,

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

    /// Stop reading WAL while this many records await a Kafka ack.
    #[arg(
        long,
        env = "PGOUTBOX_MAX_IN_FLIGHT",
        default_value_t = 50_000,
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
}

/// What becomes of a row on its way to Kafka beyond its mapping: the poison-row
/// policy, the dead-letter topic and the record time. The same for `run` and
/// `replay`, so a replayed row meets the same rules.
#[derive(Debug, Clone, Args)]
pub struct RecordArgs {
    /// What to do with a poison row: `fail` (stop before it, the default), `dlq`
    /// (write it to --dlq-topic with the reason in headers) or `skip` (log and count).
    /// `POLICY` sets every cause, `CAUSE=POLICY` one of: null-key (key column NULL or
    /// empty), invalid-topic, null-route (route-by column NULL or empty: the topic
    /// would be the template's bare prefix, e.g. `outbox.event.`), too-large,
    /// invalid-json, missing-column, bad-message (a logical decoding message that is
    /// not an outbox event object). `null-key=deliver` sends keyless rows as they
    /// are, as Debezium does: NULL → a null Kafka key (spread over partitions, no
    /// per-key order), empty → empty key bytes (one fixed partition). Repeatable,
    /// applied in order, e.g. `--on-invalid dlq --on-invalid missing-column=fail`.
    #[arg(
        long,
        env = "PGOUTBOX_ON_INVALID",
        value_delimiter = ',',
        value_name = "[CAUSE=]fail|dlq|skip|deliver"
    )]
    pub on_invalid: Vec<String>,

    /// The time each record carries: `column` (the timestamp column, e.g.
    /// created_at; the commit time when it is absent, NULL or unparseable),
    /// `commit` (the transaction's commit time) or `processing` (when pgoutbox read
    /// the row, as Debezium stamps it; a record resent after a restart gets a new
    /// time). For the broker's append time, set the topic's
    /// message.timestamp.type=LogAppendTime instead.
    #[arg(long, env = "PGOUTBOX_RECORD_TIMESTAMP", value_enum, default_value_t = RecordTimestampArg::Column)]
    pub record_timestamp: RecordTimestampArg,

    /// Dead-letter topic for `--on-invalid dlq`.
    #[arg(
        long,
        env = "PGOUTBOX_DLQ_TOPIC",
        default_value = crate::outbox::invalid::DEFAULT_DLQ_TOPIC,
        value_name = "TOPIC"
    )]
    pub dlq_topic: String,
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

    /// Rows fetched from the cursor at a time (memory is bounded by it and by the
    /// producer's queue, not by the number of rows replayed).
    #[arg(long, default_value_t = 1000, value_name = "ROWS")]
    pub batch_size: usize,
}

/// `--message-non-transactional` values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum NonTransactionalArg {
    /// Count and warn; not relayed.
    Ignore,
    /// Relay as a unit of its own.
    Relay,
}

/// `--on-update` values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum OnUpdateArg {
    /// Skip silently.
    Ignore,
    /// Skip with a warning.
    Warn,
    /// Stop the relay.
    Fail,
}

/// `--record-timestamp` values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum RecordTimestampArg {
    /// The timestamp column, else the commit time.
    Column,
    /// The transaction's commit time.
    Commit,
    /// When pgoutbox read the row (Debezium's default).
    Processing,
}

/// `pgoutbox config …`.
#[derive(Debug, Subcommand)]
pub enum ConfigCommand {
    /// Print the effective `run` configuration as TOML, secrets redacted.
    Show(Box<RunArgs>),
    /// Translate a Debezium PostgreSQL connector + Outbox Event Router config (JSON)
    /// into pgoutbox TOML on stdout; keys that cannot be honoured are reported on stderr.
    ImportDebezium {
        /// The connector JSON (Kafka Connect REST form or flat config).
        file: std::path::PathBuf,
    },
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

/// `pgoutbox check`.
#[derive(Debug, Clone, Args)]
pub struct CheckArgs {
    #[command(flatten)]
    pub source: SourceArgs,

    #[command(flatten)]
    pub kind: SourceKindArg,

    #[command(flatten)]
    pub poll_mark: PollMarkFlag,

    #[command(flatten)]
    pub poll_order: PollOrderArg,

    #[command(flatten)]
    pub routing: RoutingArgs,

    #[command(flatten)]
    pub slot: SlotArg,

    #[command(flatten)]
    pub slot_failover: SlotFailoverArg,

    /// Also check these Kafka brokers are reachable, with the --kafka-option settings
    /// `run` uses (TLS, SASL, …).
    #[arg(long, env = "PGOUTBOX_BROKERS", value_name = "HOST:PORT,...")]
    pub brokers: Option<String>,

    #[command(flatten)]
    pub kafka: KafkaArgs,

    /// Output JSON instead of lines.
    #[arg(long)]
    pub json: bool,
}

/// `pgoutbox cleanup`.
#[derive(Debug, Clone, Args)]
pub struct CleanupArgs {
    #[command(flatten)]
    pub source: SourceArgs,

    #[command(flatten)]
    pub kind: SourceKindArg,

    #[command(flatten)]
    pub routing: RoutingArgs,

    #[command(flatten)]
    pub slot: SlotArg,

    /// Delete rows older than this: `7d`, `12h`, `30m`, `1h 30m` (the timestamp
    /// column in logical mode, published_at in poll mode). 0 is refused without --force.
    #[arg(long, value_parser = humantime::parse_duration, value_name = "DURATION")]
    pub older_than: std::time::Duration,

    /// Rows per batch; each batch is one DELETE in its own short transaction.
    #[arg(
        long,
        env = "PGOUTBOX_CLEANUP_BATCH_SIZE",
        default_value_t = crate::ops::cleanup::DEFAULT_BATCH_SIZE,
        value_parser = clap::value_parser!(u32).range(1..),
        value_name = "ROWS"
    )]
    pub batch_size: u32,

    /// Only count the rows that would be deleted.
    #[arg(long)]
    pub dry_run: bool,

    /// Accept --older-than 0 (delete everything the relay is done with, however new).
    #[arg(long)]
    pub force: bool,

    /// Logical mode without the slot test: delete by age alone. Only when the outbox
    /// table is not the last copy of its events (the slot was dropped on purpose, the
    /// events are archived elsewhere). Deliberately has no environment twin.
    #[arg(long)]
    pub not_last_copy: bool,
}

/// `pgoutbox status`.
#[derive(Debug, Clone, Args)]
pub struct StatusArgs {
    #[command(flatten)]
    pub source: SourceArgs,

    #[command(flatten)]
    pub slot: SlotArg,

    /// Output JSON.
    #[arg(long)]
    pub json: bool,

    /// Refresh every N seconds until interrupted.
    #[arg(long, value_name = "SECONDS", num_args = 0..=1, default_missing_value = "2")]
    pub watch: Option<u64>,
}

/// `pgoutbox teardown`.
#[derive(Debug, Clone, Args)]
pub struct TeardownArgs {
    #[command(flatten)]
    pub source: SourceArgs,

    #[command(flatten)]
    pub slot: SlotArg,

    /// The state directory `run` uses: the slot's state file there is removed with
    /// the slot, so the next `run` starts afresh instead of refusing.
    #[command(flatten)]
    pub state: StateDirArg,

    /// Really drop them (the slot's position is lost: undelivered events must then be
    /// recovered from the outbox table).
    #[arg(long)]
    pub yes: bool,
}

/// `pgoutbox setup`.
#[derive(Debug, Clone, Args)]
pub struct SetupArgs {
    #[command(flatten)]
    pub source: SourceArgs,

    #[command(flatten)]
    pub source_kind: SourceKindArg,

    #[command(flatten)]
    pub poll_order: PollOrderArg,

    #[command(flatten)]
    pub slot: SlotArg,

    #[command(flatten)]
    pub slot_failover: SlotFailoverArg,

    /// Only print the SQL (publication first, then slot) and the least-privilege
    /// role grants for a DBA to run; change nothing.
    #[arg(long)]
    pub print_sql: bool,

    /// Role name used in the printed grants.
    #[arg(long, default_value = "pgoutbox", value_name = "ROLE")]
    pub role: String,
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn cli_definition_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn debezium_names_are_aliases() {
        let cli = Cli::try_parse_from([
            "pgoutbox",
            "tail",
            "--table.field.event.key",
            "order_id",
            "--route.by.field",
            "kind",
            "--route.topic.replacement",
            "events.${routedByValue}",
        ])
        .unwrap();
        let Command::Tail(t) = cli.command else {
            panic!()
        };
        assert_eq!(t.routing.key_column, "order_id");
        assert_eq!(t.routing.route_by_field, "kind");
        assert_eq!(t.routing.topic_template, "events.${routedByValue}");
    }

    #[test]
    fn every_router_key_is_a_run_flag_with_its_alias_and_default() {
        let mut cli = Cli::command();
        cli.build();
        let run = cli.find_subcommand("run").expect("run subcommand");
        for k in keys::ROUTER_KEYS {
            let long = k.key.replace('_', "-");
            let arg = run
                .get_arguments()
                .find(|a| a.get_long() == Some(long.as_str()))
                .unwrap_or_else(|| panic!("no --{long} for router key {}", k.key));
            let aliases = arg.get_all_aliases().unwrap_or_default();
            assert_eq!(aliases, vec![k.debezium], "--{long}");
            let defaults: Vec<_> = arg.get_default_values().iter().collect();
            if k.default.is_empty() {
                assert!(defaults.is_empty(), "--{long} has no default");
            } else {
                assert_eq!(defaults, vec![k.default], "--{long}");
            }
        }
    }

    #[test]
    fn tables_repeat_and_default() {
        let cli = Cli::try_parse_from(["pgoutbox", "tail"]).unwrap();
        let Command::Tail(t) = cli.command else {
            panic!()
        };
        assert_eq!(t.source.tables, vec!["public.outbox"]);
        let cli =
            Cli::try_parse_from(["pgoutbox", "tail", "--table", "a.b", "--table", "c"]).unwrap();
        let Command::Tail(t) = cli.command else {
            panic!()
        };
        assert_eq!(t.source.tables, vec!["a.b", "c"]);
    }
}

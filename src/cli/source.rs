//! Where events come from: the database and outbox tables (`SourceArgs`), the
//! replication slot, and how the relay finds new rows (`--source logical|poll`, with
//! poll mode's settings).
//!
//! Raw flags only, as clap parses them; `crate::config` validates them.

use clap::{Args, ValueEnum};

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

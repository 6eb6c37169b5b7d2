//! The arguments of the operator commands: `check`, `cleanup`, `status`,
//! `teardown` and `setup`.
//!
//! Raw flags only, as clap parses them; `crate::config` validates them.

use clap::Args;

use super::{
    DeliveryArgs, KafkaArgs, PollMarkFlag, PollOrderArg, RoutingArgs, SlotArg, SlotFailoverArg,
    SourceArgs, SourceKindArg, StateDirArg,
};

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

    #[command(flatten)]
    pub delivery: DeliveryArgs,

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

    /// Where the relay serves /metrics (its `run --http-addr`, the same variable and
    /// config key): status shows its in-flight window against the caps and its
    /// memory; `off` leaves the relay out.
    #[arg(
        long,
        env = "PGOUTBOX_HTTP_ADDR",
        default_value = super::DEFAULT_HTTP_ADDR,
        value_name = "ADDR:PORT|off"
    )]
    pub http_addr: String,
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

    /// Also install the republish trigger (superuser): an event trigger that adds a
    /// re-created outbox table (DROP + CREATE, or a rename swap) to the publication
    /// in the same transaction, so no row of it goes unpublished and `run` goes on
    /// instead of stopping. Without it such a migration stops the relay until the
    /// publication is fixed (see `pgoutbox check`, line `layout`).
    #[arg(long)]
    pub republish_trigger: bool,

    /// Only print the SQL (publication first, then slot) and the least-privilege
    /// role grants for a DBA to run; change nothing.
    #[arg(long)]
    pub print_sql: bool,

    /// Role name used in the printed grants.
    #[arg(long, default_value = "pgoutbox", value_name = "ROLE")]
    pub role: String,
}

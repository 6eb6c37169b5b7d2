//! Command-line interface: the raw arguments, as clap parses them.
//!
//! Owns flag names, environment twins (`PGOUTBOX_<NAME>`), defaults and help text.
//! Nothing here is validated beyond what clap does; [`crate::config`] turns these
//! into a validated configuration, and no clap type is used past it.
//!
//! # Layout
//! - here: [`Cli`], the global flags and the [`Command`] list;
//! - [`source`]: the database, tables, slot and `--source logical|poll`;
//! - [`record`]: how a row becomes a record (mapping, topic rules, format, policies);
//! - [`commands`]: `run`, `tail`, `replay` and the Kafka/state flags they share;
//! - [`ops`]: `check`, `cleanup`, `status`, `teardown`, `setup`;
//! - [`router_keys`]: the Debezium option names each mapping flag also answers to.
//!
//! Layering: the front's first stage. It imports neither `crate::config` (which
//! reads it) nor the error→status rules; `--help` prints the exit-status table of
//! the leaf [`crate::exit`]. Checked by `layering::tests::front_modules_form_no_cycle`.

use clap::{Args, Parser, Subcommand, ValueEnum};

pub mod commands;
pub mod ops;
pub mod record;
pub mod router_keys;
pub mod source;

pub use commands::*;
pub use ops::*;
pub use record::*;
pub use source::*;

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

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    use super::router_keys as keys;
    use super::*;

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

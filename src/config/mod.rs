//! Validated configuration: raw CLI arguments → the settings struct of each room.
//!
//! Owns every check of user input (connection string, table names, slot names,
//! templates) so errors name the flag, the value and the fix before anything
//! connects, and the translation into the plain settings the rooms below declare
//! themselves: [`SourceConfig`] (`pg::source`), [`TailConfig`] (`tail`),
//! [`PipelineConfig`] (`pipeline`), [`SafetyConfig`] (`safety`), [`RunConfig`]
//! (`run`).
//!
//! - [`file`](mod@file): the TOML file layer (flag > env > file > default);
//! - the Debezium Outbox Event Router option names live in [`crate::cli::router_keys`];
//! - [`debezium`]: `config import-debezium`, a connector configuration → TOML;
//! - `routing`: [`RoutingConfig`], the column mapping and topic rules per table;
//! - `show`: `config show`, the effective configuration as TOML ([`show_toml`]).
//!
//! Invariants: only `main`, `cli` and this module know clap and config types (no
//! room below imports `crate::cli` or `crate::config`); the password only exists
//! inside `ConnInfo` as a `Secret`.

pub mod debezium;
pub mod file;
mod routing;
mod show;

pub use routing::{RoutingConfig, TemplateSource};
pub use show::{show, show_toml};

use std::time::Duration;

use self::file::TableOverrides;
use crate::cli::{
    ColorWhen, ConverterArg, DeliveryArg, DeliveryArgs, FormatArgs, KafkaArgs, NonTransactionalArg,
    OnUpdateArg, PollMarkArg, RecordArgs, RecordTimestampArg, ReplayArgs, RunArgs, SourceArgs,
    SourceKind, TailArgs, TailFormat as TailFormatArg,
};
use crate::heartbeat::HeartbeatConfig;
use crate::kafka::config::{KafkaOptions, OptionError};
use crate::outbox::connect::{Converter, Placement, PlacementError, RecordFormat};
use crate::outbox::invalid::{InvalidPolicy, PolicyError};
use crate::outbox::record::RecordTimestamp;
use crate::outbox::routing::TemplateError;
use crate::outbox::trace::TraceError;
use crate::pg::client::conninfo::{ConnInfo, ConnInfoError};
use crate::pg::names::TableName;
use crate::pg::source::SourceConfig;
use crate::pipeline::exactly_once::ExactlyOnceConfig;
use crate::pipeline::{MessageConfig, OnUpdate, PipelineConfig};
use crate::poll::{Mark, PollConfig};
use crate::replay::{RawSelection, ReplayConfig, Selection, SelectionError};
use crate::run::RunConfig;
use crate::safety::SafetyConfig;
use crate::secret::Secret;
use crate::state;
use crate::tail::{TailConfig, TailFormat};

/// The longest `--wal-linger` taken: past it the linger stops trading a little
/// latency for CPU and only delays events.
pub const MAX_WAL_LINGER: Duration = Duration::from_secs(1);

/// A configuration error, reported before anything connects.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// The connection string does not parse.
    #[error("invalid --database-url / PGOUTBOX_DATABASE_URL")]
    DatabaseUrl(#[source] ConnInfoError),
    /// A table name is empty or malformed.
    #[error("invalid --table {0:?}: expected schema.table or table (schema public)")]
    Table(String),
    /// A slot name PostgreSQL would reject.
    #[error("invalid slot name {0:?}: use 1-63 lowercase letters, digits and underscores")]
    Slot(String),
    /// No tables.
    #[error("no outbox table given; fix: pass --table schema.table, or --messages-only for the table-less outbox")]
    NoTables,
    /// `--messages-only` with every prefix empty.
    #[error("--messages-only relays logical decoding messages only, but --message-prefix is empty; fix: pass --message-prefix pgoutbox (the default) or drop --messages-only")]
    NoMessagePrefix,
    /// `--source poll` with `--messages-only`.
    #[error("--source poll reads rows of an outbox table, but --messages-only names none: logical decoding messages exist only in the WAL, which only --source logical reads; fix: drop --messages-only (and name the table with --table), or use --source logical")]
    PollMessagesOnly,
    /// `--accept-watermark-reset` without `--delivery exactly-once`.
    #[error("--accept-watermark-reset applies only with --delivery exactly-once (there is no watermark in at-least-once mode); fix: drop it, or add --delivery exactly-once")]
    AcceptWatermarkReset,
    /// `replay` with `--delivery exactly-once`.
    #[error("pgoutbox replay is at-least-once only: it sends rows again on purpose, outside any relay's Kafka transactions and watermark, so a crash mid-replay and a rerun send rows twice, and a relay's exactly-once stream is unchanged by it; fix: run replay with --delivery at-least-once (unset PGOUTBOX_DELIVERY or the config file's delivery key for it); consumers deduplicate replayed rows on the id header")]
    ReplayExactlyOnce,
    /// `--source poll` with `--delivery exactly-once`.
    #[error("--delivery exactly-once needs --source logical: the watermark it writes in each Kafka transaction is a WAL position, and poll mode marks claimed rows in the table instead, outside the Kafka transaction; fix: use --source logical, or --delivery at-least-once with poll mode (consumers deduplicate on the id header)")]
    PollExactlyOnce,
    /// `--transaction-interval 0`.
    #[error("--transaction-interval must be more than 0")]
    ZeroTransactionInterval,
    /// The relay's own heartbeat prefix given as an outbox prefix.
    #[error("invalid --message-prefix {0:?}: the relay's own heartbeat messages use it; fix: choose another prefix")]
    ReservedPrefix(String),
    /// A `--kafka-option` that does not parse or would weaken delivery.
    #[error(transparent)]
    KafkaOption(#[from] OptionError),
    /// Empty `--brokers`.
    #[error(
        "no Kafka brokers given; fix: pass --brokers host:port (or PGOUTBOX_BROKERS, or brokers = \"…\" in the config file)"
    )]
    NoBrokers,
    /// A zero window.
    #[error("--{0} must be at least 1")]
    ZeroWindow(&'static str),
    /// A secret file could not be read.
    #[error("cannot read {flag} {path}")]
    SecretFile {
        flag: &'static str,
        path: std::path::PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// `--heartbeat-max-age` below `--heartbeat-interval`: every heartbeat would
    /// arrive stale.
    #[error("--heartbeat-max-age {max_age} is shorter than --heartbeat-interval {interval}: /readyz would fail between any two heartbeats; fix: set --heartbeat-max-age to a few intervals (e.g. {suggested}), or --heartbeat-interval 0 to turn the heartbeat off")]
    HeartbeatMaxAge {
        max_age: String,
        interval: String,
        suggested: String,
    },
    /// `--wal-linger` past [`MAX_WAL_LINGER`].
    #[error("--wal-linger {0} is longer than {max}: every event that follows another within it waits up to that long before it is read; fix: use a few milliseconds (the default is 2ms), or 0 to read every transaction as it arrives", max = humantime::format_duration(MAX_WAL_LINGER))]
    WalLinger(humantime::FormattedDuration),
    /// Unparseable `--http-addr`.
    #[error("invalid --http-addr {0:?}: expected ip:port like 127.0.0.1:10737, or off")]
    HttpAddr(String),
    /// A bad `--on-invalid` / `--dlq-topic`.
    #[error(transparent)]
    Invalid(#[from] PolicyError),
    /// No state directory.
    #[error(transparent)]
    StateDir(#[from] crate::state::StateError),
    /// A `--trace-context` (or a table's `trace_context`) that does not parse.
    #[error(transparent)]
    TraceContext(#[from] TraceError),
    /// A `--placement` that does not parse.
    #[error(transparent)]
    Placement(#[from] PlacementError),
    /// A replay selection that cannot be used.
    #[error(transparent)]
    Replay(#[from] SelectionError),
    /// A topic template that can never render a legal topic name.
    #[error("invalid {origin} {template:?}: {reason}")]
    TopicTemplate {
        /// `--topic-template`, or the config file's table section.
        origin: String,
        /// The template as given.
        template: String,
        /// What is wrong, and the fix.
        reason: TemplateError,
    },
}

/// Read a secret file: contents trimmed of surrounding whitespace (a trailing newline
/// from `echo` or a Kubernetes secret must not become part of the secret).
fn read_secret(flag: &'static str, path: &std::path::Path) -> Result<String, ConfigError> {
    std::fs::read_to_string(path)
        .map(|s| s.trim().to_owned())
        .map_err(|source| ConfigError::SecretFile {
            flag,
            path: path.to_owned(),
            source,
        })
}

/// Validate source arguments.
pub fn source(args: &SourceArgs) -> Result<SourceConfig, ConfigError> {
    let url = match &args.database_url_file {
        Some(path) => read_secret("--database-url-file", path)?,
        None => args.database_url.clone().unwrap_or_default(),
    };
    let mut conninfo = ConnInfo::parse(&url).map_err(ConfigError::DatabaseUrl)?;
    if let Some(path) = &args.database_password_file {
        conninfo.password = Some(Secret::from(read_secret("--database-password-file", path)?));
    }
    let mut tables: Vec<TableName> = Vec::new();
    for raw in &args.tables {
        let table = TableName::parse(raw).ok_or_else(|| ConfigError::Table(raw.clone()))?;
        if !tables.contains(&table) {
            tables.push(table);
        }
    }
    if args.messages_only {
        tables.clear();
    } else if tables.is_empty() {
        return Err(ConfigError::NoTables);
    }
    let message_prefixes = message_prefixes(&args.message_prefixes)?;
    if args.messages_only && message_prefixes.is_empty() {
        return Err(ConfigError::NoMessagePrefix);
    }
    Ok(SourceConfig {
        conninfo,
        publication: args.publication.clone(),
        tables,
        message_prefixes,
        messages_only: args.messages_only,
    })
}

/// `--message-prefix` values: empty ones dropped (`--message-prefix ''` turns
/// messages off), duplicates removed, the heartbeat prefix refused.
fn message_prefixes(raw: &[String]) -> Result<Vec<String>, ConfigError> {
    let mut prefixes: Vec<String> = Vec::new();
    for prefix in raw.iter().filter(|p| !p.is_empty()) {
        if prefix == crate::outbox::message::HEARTBEAT_PREFIX {
            return Err(ConfigError::ReservedPrefix(prefix.clone()));
        }
        if !prefixes.contains(prefix) {
            prefixes.push(prefix.clone());
        }
    }
    Ok(prefixes)
}

/// Whether human log lines carry ANSI colors: `--color always|never` decide;
/// `auto` colors only a terminal, and not when `NO_COLOR` is set to a non-empty
/// value (<https://no-color.org>) or `TERM` is `dumb`. `env` looks up a variable.
pub fn log_colors(
    when: ColorWhen,
    is_terminal: bool,
    env: &dyn Fn(&str) -> Option<String>,
) -> bool {
    match when {
        ColorWhen::Always => true,
        ColorWhen::Never => false,
        ColorWhen::Auto => {
            let no_color = matches!(env("NO_COLOR"), Some(v) if !v.is_empty());
            let dumb = env("TERM").as_deref() == Some("dumb");
            is_terminal && !no_color && !dumb
        }
    }
}

/// Check a replication slot name against PostgreSQL's rule.
pub fn validate_slot(name: &str) -> Result<String, ConfigError> {
    let ok = !name.is_empty()
        && name.len() <= 63
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_');
    if ok {
        Ok(name.to_owned())
    } else {
        Err(ConfigError::Slot(name.to_owned()))
    }
}

/// Validate `tail` arguments.
pub fn tail(args: &TailArgs, overrides: &TableOverrides) -> Result<TailConfig, ConfigError> {
    let source = source(&args.source)?;
    let routing = RoutingConfig::from_args(&args.routing, overrides)?;
    let (format, placements) = format(&args.record_format)?;
    let mut tables = routing.specs(&source.tables)?;
    for spec in &mut tables {
        spec.mapping.placements.clone_from(&placements);
    }
    let messages = routing.messages(&source, placements, NonTransactionalArg::Ignore)?;
    // `run`'s record path: tail shows the record `run` would send for each row.
    let pipeline = PipelineConfig {
        tables,
        messages,
        format,
        publication: source.publication.clone(),
        on_update: OnUpdate::Ignore,
        invalid: InvalidPolicy::parse(&args.records.on_invalid, &args.records.dlq_topic)?,
        record_timestamp: record_timestamp(&args.records),
        // Tail sends nothing: no window, no drain, no status, no stall.
        max_in_flight_records: 1,
        max_in_flight_bytes: 1,
        drain_timeout: Duration::ZERO,
        status_interval: Duration::from_millis(100),
        stall_timeout: None,
        refusals: Default::default(),
        pinned: Default::default(),
    };
    Ok(TailConfig {
        pipeline,
        source,
        format: match args.format {
            TailFormatArg::Json => TailFormat::Json,
            TailFormatArg::Pretty => TailFormat::Pretty,
        },
        limit: args.limit,
        slot: args.slot.as_deref().map(validate_slot).transpose()?,
        delivery: delivery(&args.delivery, false)?,
    })
}

/// Validate the librdkafka settings (`run` and `check`): parsing refuses unsafe
/// options, before anything connects; the SASL password file overrides
/// `sasl.password`.
pub fn kafka_options(args: &KafkaArgs) -> Result<KafkaOptions, ConfigError> {
    let mut options = KafkaOptions::parse(&args.kafka_options)?;
    if let Some(path) = &args.kafka_sasl_password_file {
        let password = read_secret("--kafka-sasl-password-file", path)?;
        options.set_secret("sasl.password", Secret::from(password));
    }
    Ok(options)
}

/// Validate `run` arguments.
pub fn run(args: &RunArgs, overrides: &TableOverrides) -> Result<RunConfig, ConfigError> {
    let cfg = build_run(args, overrides)?;
    match missing(&cfg).into_iter().next() {
        Some(err) => Err(err),
        None => Ok(cfg),
    }
}

/// Required settings `cfg` lacks.
fn missing(cfg: &RunConfig) -> Vec<ConfigError> {
    let mut missing = Vec::new();
    if cfg.brokers.is_empty() {
        missing.push(ConfigError::NoBrokers);
    }
    missing
}

/// `--delivery` and its settings: `None` for at-least-once. Exactly-once needs the
/// logical source (`poll`: poll mode was chosen).
pub fn delivery(args: &DeliveryArgs, poll: bool) -> Result<Option<ExactlyOnceConfig>, ConfigError> {
    match args.mode {
        DeliveryArg::AtLeastOnce => Ok(None),
        DeliveryArg::ExactlyOnce if poll => Err(ConfigError::PollExactlyOnce),
        DeliveryArg::ExactlyOnce if args.transaction_interval.is_zero() => {
            Err(ConfigError::ZeroTransactionInterval)
        }
        DeliveryArg::ExactlyOnce => Ok(Some(ExactlyOnceConfig {
            watermark_topic: args.watermark_topic.trim().to_owned(),
            transactional_id: args
                .transactional_id
                .as_deref()
                .map(str::trim)
                .filter(|id| !id.is_empty())
                .map(str::to_owned),
            interval: args.transaction_interval,
            accept_reset: false,
        })),
    }
}

fn build_run(args: &RunArgs, overrides: &TableOverrides) -> Result<RunConfig, ConfigError> {
    let source = source(&args.source)?;
    let routing = RoutingConfig::from_args(&args.routing, overrides)?;
    let kafka_options = kafka_options(&args.kafka)?;
    let brokers = args.brokers.as_deref().unwrap_or("").trim().to_owned();
    if args.max_in_flight == 0 {
        return Err(ConfigError::ZeroWindow("max-in-flight"));
    }
    if args.max_in_flight_bytes == 0 {
        return Err(ConfigError::ZeroWindow("max-in-flight-bytes"));
    }
    if args.wal_linger > MAX_WAL_LINGER {
        return Err(ConfigError::WalLinger(humantime::format_duration(
            args.wal_linger,
        )));
    }
    let (format, placements) = format(&args.format)?;
    let mut tables = routing.specs(&source.tables)?;
    for spec in &mut tables {
        spec.mapping.placements.clone_from(&placements);
    }

    let messages = routing.messages(&source, placements, args.message_non_transactional)?;
    let pipeline = PipelineConfig {
        tables,
        messages,
        format,
        publication: source.publication.clone(),
        on_update: match args.on_update {
            OnUpdateArg::Ignore => OnUpdate::Ignore,
            OnUpdateArg::Warn => OnUpdate::Warn,
            OnUpdateArg::Fail => OnUpdate::Fail,
        },
        invalid: InvalidPolicy::parse(&args.records.on_invalid, &args.records.dlq_topic)?,
        record_timestamp: record_timestamp(&args.records),
        max_in_flight_records: args.max_in_flight,
        max_in_flight_bytes: args.max_in_flight_bytes,
        drain_timeout: args.drain_timeout,
        // Short: the slot should follow acks closely, so a crash resends little.
        status_interval: Duration::from_millis(100),
        stall_timeout: Some(args.stall_timeout).filter(|t| !t.is_zero()),
        refusals: Default::default(),
        pinned: Default::default(),
    };
    let poll = poll(args)?;
    let mut exactly_once = delivery(&args.delivery, poll.is_some())?;
    match &mut exactly_once {
        Some(eos) => eos.accept_reset = args.accept_watermark_reset,
        None if args.accept_watermark_reset => return Err(ConfigError::AcceptWatermarkReset),
        None => {}
    }
    let mut heartbeat = heartbeat(args.heartbeat_interval, args.heartbeat_max_age)?;
    if poll.is_some() {
        // The heartbeat travels through a replication stream; poll mode has none.
        heartbeat.interval = None;
    }
    Ok(RunConfig {
        source,
        slot: validate_slot(&args.slot.name)?,
        slot_failover: args.slot_failover.slot_failover,
        brokers,
        kafka_options,
        kafka_rounds: args.kafka_rounds,
        wal_linger: args.wal_linger,
        pipeline,
        max_backoff: Duration::from_secs(5),
        http_addr: match args.http_addr.trim() {
            "off" | "" => None,
            addr => Some(
                addr.parse()
                    .map_err(|_| ConfigError::HttpAddr(addr.to_owned()))?,
            ),
        },
        safety: SafetyConfig {
            state_dir: state::state_dir(args.state.state_dir.as_deref())?,
            accept_slot_reset: args.accept_slot_reset,
            accept_publication_change: args.accept_publication_change,
            accept_type_change: args.accept_type_change,
            publication_repair: args.publication_repair == crate::cli::Switch::On,
        },
        heartbeat,
        poll,
        exactly_once,
    })
}

fn record_timestamp(args: &RecordArgs) -> RecordTimestamp {
    match args.record_timestamp {
        RecordTimestampArg::Column => RecordTimestamp::Column,
        RecordTimestampArg::Commit => RecordTimestamp::Commit,
        RecordTimestampArg::Processing => RecordTimestamp::Processing,
    }
}

/// Validate `replay` arguments: the same tables, mapping, record format, poison
/// policy and producer settings as `run`, and a selection.
pub fn replay(args: &ReplayArgs, overrides: &TableOverrides) -> Result<ReplayConfig, ConfigError> {
    if matches!(args.delivery, crate::cli::DeliveryArg::ExactlyOnce) {
        return Err(ConfigError::ReplayExactlyOnce);
    }
    // Logical decoding messages live only in the WAL: nothing to read back.
    if args.source.messages_only || args.source.tables.iter().all(|t| t.trim().is_empty()) {
        return Err(SelectionError::NoTable.into());
    }
    let selection = Selection::parse(&RawSelection {
        from: args.from.as_deref(),
        to: args.to.as_deref(),
        ids: &args.ids,
        all: args.all,
        since_lsn: args.since_lsn.as_deref(),
    })?;
    let source = source(&args.source)?;
    let routing = RoutingConfig::from_args(&args.routing, overrides)?;
    let (format, placements) = format(&args.format)?;
    let mut tables = routing.specs(&source.tables)?;
    for spec in &mut tables {
        spec.mapping.placements.clone_from(&placements);
    }
    let kafka = match args.dry_run {
        true => None,
        false => {
            let brokers = args.brokers.as_deref().unwrap_or("").trim().to_owned();
            if brokers.is_empty() {
                return Err(ConfigError::NoBrokers);
            }
            Some((brokers, kafka_options(&args.kafka)?))
        }
    };
    let pipeline = PipelineConfig {
        tables,
        format,
        publication: source.publication.clone(),
        on_update: OnUpdate::Ignore,
        // Replay reads table rows only; no logical decoding message reaches it.
        messages: MessageConfig {
            prefixes: Vec::new(),
            ..MessageConfig::default()
        },
        invalid: InvalidPolicy::parse(&args.records.on_invalid, &args.records.dlq_topic)?,
        record_timestamp: record_timestamp(&args.records),
        // Replay's own window (no --max-in-flight flags; rows come --batch-size at
        // a time), applied by the deliverer's one rule: see replay/deliver.rs.
        max_in_flight_records: crate::replay::MAX_IN_FLIGHT,
        max_in_flight_bytes: usize::MAX,
        drain_timeout: Duration::from_secs(30),
        status_interval: Duration::from_millis(100),
        stall_timeout: None,
        refusals: Default::default(),
        pinned: Default::default(),
    };
    Ok(ReplayConfig {
        source,
        pipeline,
        selection,
        kafka,
        batch_size: args.batch_size.max(1),
    })
}

/// Validate `--heartbeat-interval` (`0`: off) and `--heartbeat-max-age` (at least
/// the interval when on).
pub fn heartbeat(interval: Duration, max_age: Duration) -> Result<HeartbeatConfig, ConfigError> {
    let interval = Some(interval).filter(|i| !i.is_zero());
    if let Some(i) = interval.filter(|i| max_age < *i) {
        let show = |d: Duration| humantime::format_duration(d).to_string();
        return Err(ConfigError::HeartbeatMaxAge {
            max_age: show(max_age),
            interval: show(i),
            suggested: show(i * 6),
        });
    }
    Ok(HeartbeatConfig { interval, max_age })
}

/// Poll mode's settings when `--source poll`.
fn poll(args: &RunArgs) -> Result<Option<PollConfig>, ConfigError> {
    if args.source_kind.kind != SourceKind::Poll {
        return Ok(None);
    }
    if args.source.messages_only {
        return Err(ConfigError::PollMessagesOnly);
    }
    if args.poll.batch_size == 0 {
        return Err(ConfigError::ZeroWindow("poll-batch-size"));
    }
    Ok(Some(PollConfig {
        batch_size: args.poll.batch_size,
        interval: args.poll.interval.max(Duration::from_millis(1)),
        mark: match args.poll.mark {
            PollMarkArg::Published => Mark::Published,
            PollMarkArg::Delete => Mark::Delete,
        },
        order_by: args.poll.order.order_by.clone(),
    }))
}

/// Validate record-format arguments: the format and the placements (`None` when
/// `--placement` was not given: the default `event_type` header).
pub fn format(args: &FormatArgs) -> Result<(RecordFormat, Option<Vec<Placement>>), ConfigError> {
    let converter = |c: ConverterArg| match c {
        ConverterArg::String => Converter::String,
        ConverterArg::Json => Converter::Json,
        ConverterArg::JsonSchemas => Converter::JsonSchemas,
    };
    let placements = match args.placements.is_empty() {
        true => None,
        false => Some(Placement::parse_list(&args.placements)?),
    };
    let format = RecordFormat {
        key: converter(args.key_converter),
        value: converter(args.value_converter),
        expand_json: args.expand_json_payload,
        logical_name: args.logical_name.clone(),
    };
    Ok((format, placements))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::outbox::event::ColumnMapping;

    /// Regression (issue 13 item 7): NO_COLOR was ignored on a terminal.
    #[test]
    fn log_colors_follow_color_no_color_and_term() {
        // (NO_COLOR, TERM) as the environment.
        let env = |no_color: Option<&'static str>, term: Option<&'static str>| {
            move |name: &str| match name {
                "NO_COLOR" => no_color.map(str::to_owned),
                "TERM" => term.map(str::to_owned),
                _ => None,
            }
        };
        let plain = env(None, Some("xterm"));
        assert!(log_colors(ColorWhen::Auto, true, &plain));
        assert!(!log_colors(ColorWhen::Auto, false, &plain));
        assert!(!log_colors(ColorWhen::Auto, true, &env(Some("1"), None)));
        assert!(log_colors(ColorWhen::Auto, true, &env(Some(""), None)));
        assert!(!log_colors(ColorWhen::Auto, true, &env(None, Some("dumb"))));
        assert!(log_colors(ColorWhen::Always, false, &env(Some("1"), None)));
        assert!(!log_colors(ColorWhen::Never, true, &plain));
    }

    /// A config file's per-table template is checked too, naming its section.
    #[test]
    fn a_bad_table_template_names_its_section() {
        let table = TableName::parse("public.orders").unwrap();
        let mut overrides = TableOverrides::new();
        overrides.insert(
            "public.orders".into(),
            [(
                "topic_template".to_owned(),
                "orders ${routedByValue}".to_owned(),
            )]
            .into(),
        );
        let routing = RoutingConfig {
            mapping: ColumnMapping::default(),
            topic_template: "outbox.event.${routedByValue}".into(),
            overrides,
        };
        let err = routing.specs(&[table]).unwrap_err().to_string();
        assert_eq!(
            err,
            "invalid topic_template of [tables.\"public.orders\"] in the config file \
             \"orders ${routedByValue}\": ' ' (character 7) cannot be part of a Kafka topic \
             name, which allows only a-z A-Z 0-9 . _ -; fix: e.g. orders.${routedByValue}"
        );
    }

    #[test]
    fn slot_names() {
        assert!(validate_slot("pgoutbox_1").is_ok());
        assert!(validate_slot("Bad").is_err());
        assert!(validate_slot("").is_err());
        assert!(validate_slot(&"a".repeat(64)).is_err());
    }

    #[test]
    fn tables_are_deduplicated_and_validated() {
        let args = SourceArgs {
            database_url: Some("postgres://u@h/db".into()),
            database_url_file: None,
            database_password_file: None,
            publication: "p".into(),
            tables: vec!["outbox".into(), "public.outbox".into(), "s.t".into()],
            message_prefixes: vec!["pgoutbox".into()],
            messages_only: false,
        };
        let cfg = source(&args).unwrap();
        assert_eq!(cfg.tables.len(), 2);
        let bad = SourceArgs {
            tables: vec!["a.".into()],
            ..args
        };
        assert!(matches!(source(&bad), Err(ConfigError::Table(_))));
    }

    #[test]
    fn messages_only_has_no_table_and_needs_a_prefix() {
        let args = SourceArgs {
            database_url: Some("postgres://u@h/db".into()),
            database_url_file: None,
            database_password_file: None,
            publication: "p".into(),
            tables: vec!["public.outbox".into()],
            message_prefixes: vec!["a".into(), "".into(), "b".into(), "a".into()],
            messages_only: true,
        };
        let cfg = source(&args).unwrap();
        assert!(cfg.tables.is_empty() && cfg.messages_only);
        assert_eq!(cfg.message_prefixes, ["a", "b"]);
        let none = SourceArgs {
            message_prefixes: vec!["".into()],
            ..args.clone()
        };
        let err = source(&none).unwrap_err().to_string();
        assert!(err.contains("fix: pass --message-prefix pgoutbox"), "{err}");
        let heartbeat = SourceArgs {
            message_prefixes: vec!["pgoutbox-heartbeat".into()],
            ..args
        };
        assert!(matches!(
            source(&heartbeat),
            Err(ConfigError::ReservedPrefix(_))
        ));
    }

    #[test]
    fn messages_only_is_refused_by_poll_mode_and_replay() {
        use clap::Parser;
        let parse = |argv: &[&str]| crate::cli::Cli::try_parse_from(argv).unwrap().command;
        let crate::cli::Command::Run(run) = parse(&[
            "pgoutbox",
            "run",
            "--source",
            "poll",
            "--messages-only",
            "--brokers",
            "k:9092",
        ]) else {
            panic!()
        };
        assert!(matches!(poll(&run), Err(ConfigError::PollMessagesOnly)));
        let crate::cli::Command::Replay(replay_args) = parse(&[
            "pgoutbox",
            "replay",
            "--messages-only",
            "--all",
            "--dry-run",
        ]) else {
            panic!()
        };
        let err = replay(&replay_args, &TableOverrides::new()).unwrap_err();
        assert!(
            matches!(err, ConfigError::Replay(SelectionError::NoTable)),
            "{err}"
        );
    }

    #[test]
    fn trace_context_is_global_or_per_table_and_checked() {
        use clap::Parser;
        let cli = crate::cli::Cli::try_parse_from([
            "pgoutbox",
            "tail",
            "--trace-context",
            "headers",
            "--table",
            "a.o,b.o",
        ])
        .unwrap();
        let crate::cli::Command::Tail(args) = cli.command else {
            panic!()
        };
        let mut overrides = TableOverrides::new();
        overrides.insert(
            "b.o".into(),
            [("trace_context".to_owned(), "payload.meta".to_owned())].into(),
        );
        let routing = RoutingConfig::from_args(&args.routing, &overrides).unwrap();
        let tables = [
            TableName::parse("a.o").unwrap(),
            TableName::parse("b.o").unwrap(),
        ];
        let specs = routing.specs(&tables).unwrap();
        let field = |i: usize| {
            specs[i]
                .mapping
                .trace_context
                .as_ref()
                .map(|f| f.to_string())
        };
        assert_eq!(field(0).as_deref(), Some("headers"));
        assert_eq!(field(1).as_deref(), Some("payload.meta"));
        overrides.insert(
            "a.o".into(),
            [("trace_context".to_owned(), ".x".to_owned())].into(),
        );
        let routing = RoutingConfig::from_args(&args.routing, &overrides).unwrap();
        let err = routing.specs(&tables).unwrap_err().to_string();
        assert!(err.contains("invalid --trace-context \".x\""), "{err}");
    }

    #[test]
    fn heartbeat_zero_is_off_and_the_max_age_is_at_least_the_interval() {
        let s = Duration::from_secs;
        let off = heartbeat(Duration::ZERO, s(1)).unwrap();
        assert_eq!(off.interval, None, "0 turns it off, whatever the max age");
        let on = heartbeat(s(10), s(10)).unwrap();
        assert_eq!((on.interval, on.max_age), (Some(s(10)), s(10)));
        let err = heartbeat(s(10), s(5)).unwrap_err().to_string();
        assert_eq!(
            err,
            "--heartbeat-max-age 5s is shorter than --heartbeat-interval 10s: /readyz would fail between any two heartbeats; fix: set --heartbeat-max-age to a few intervals (e.g. 1m), or --heartbeat-interval 0 to turn the heartbeat off"
        );
    }
}

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
//! - [`router_keys`]: the one table of Debezium Outbox Event Router option names;
//! - [`debezium`]: `config import-debezium`, a connector configuration → TOML.
//!
//! Invariants: only `main`, `cli` and this module know clap and config types (no
//! room below imports `crate::cli` or `crate::config`); the password only exists
//! inside `ConnInfo` as a `Secret`.

pub mod debezium;
pub mod file;
pub mod router_keys;

use std::time::Duration;

use self::file::TableOverrides;
use crate::cli::{
    OnUpdateArg, RoutingArgs, RunArgs, SourceArgs, TailArgs, TailFormat as TailFormatArg,
};
use crate::kafka::config::{KafkaOptions, OptionError};
use crate::outbox::event::ColumnMapping;
use crate::outbox::invalid::{InvalidPolicy, PolicyError};
use crate::outbox::routing::TopicTemplate;
use crate::outbox::tables::TableSpec;
use crate::pg::catalog::TableName;
use crate::pg::conninfo::{ConnInfo, ConnInfoError};
use crate::pg::source::SourceConfig;
use crate::pipeline::{OnUpdate, PipelineConfig};
use crate::run::RunConfig;
use crate::safety::SafetyConfig;
use crate::secret::Secret;
use crate::state;
use crate::tail::{TailConfig, TailFormat};

/// A configuration error, reported before anything connects.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// The connection string does not parse.
    #[error("invalid --database-url / PGOUTBOX_DATABASE_URL: {0}")]
    DatabaseUrl(#[source] ConnInfoError),
    /// A table name is empty or malformed.
    #[error("invalid --table {0:?}: expected schema.table or table (schema public)")]
    Table(String),
    /// A slot name PostgreSQL would reject.
    #[error("invalid slot name {0:?}: use 1-63 lowercase letters, digits and underscores")]
    Slot(String),
    /// No tables.
    #[error("no outbox table given; fix: pass --table schema.table")]
    NoTables,
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
    #[error("cannot read {flag} {path}: {source}")]
    SecretFile {
        flag: &'static str,
        path: std::path::PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// Unparseable `--http-addr`.
    #[error("invalid --http-addr {0:?}: expected ip:port like 127.0.0.1:10737, or off")]
    HttpAddr(String),
    /// A bad `--on-invalid` / `--dlq-topic`.
    #[error(transparent)]
    Invalid(#[from] PolicyError),
    /// No state directory.
    #[error(transparent)]
    StateDir(#[from] crate::state::StateError),
}

/// How rows become records: the global column mapping and topic template, and the
/// config file's per-table overrides.
#[derive(Debug, Clone)]
pub struct RoutingConfig {
    /// Column mapping (flags / env / file top level).
    pub mapping: ColumnMapping,
    /// Topic template.
    pub topic_template: TopicTemplate,
    /// Per-table overrides from the config file's `[tables."schema.name"]`.
    pub overrides: TableOverrides,
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
    if tables.is_empty() {
        return Err(ConfigError::NoTables);
    }
    Ok(SourceConfig {
        conninfo,
        publication: args.publication.clone(),
        tables,
    })
}

impl RoutingConfig {
    /// Validate routing arguments; `overrides` come from the config file.
    pub fn from_args(args: &RoutingArgs, overrides: &TableOverrides) -> Self {
        Self {
            overrides: overrides.clone(),
            mapping: ColumnMapping {
                id: args.id_column.clone(),
                aggregate_type: args.aggregate_type_column.clone(),
                route_by: args.route_by_field.clone(),
                key: args.key_column.clone(),
                event_type: args.event_type_column.clone(),
                payload: args.payload_column.clone(),
                timestamp: args.timestamp_column.clone(),
            },
            topic_template: TopicTemplate::new(&args.topic_template),
        }
    }

    /// One spec per table: the global mapping and template, with the table's
    /// overrides from the config file applied.
    pub fn specs(&self, tables: &[TableName]) -> Vec<TableSpec> {
        tables
            .iter()
            .map(|table| {
                let mut mapping = self.mapping.clone();
                let mut template = self.topic_template.clone();
                let o = self.overrides.get(&table.to_string());
                for (key, value) in o.into_iter().flatten() {
                    let v = value.clone();
                    match key.as_str() {
                        "route_by_field" => mapping.route_by = v,
                        "topic_template" => template = TopicTemplate::new(&v),
                        "id_column" => mapping.id = v,
                        "key_column" => mapping.key = v,
                        "event_type_column" => mapping.event_type = v,
                        "payload_column" => mapping.payload = v,
                        "timestamp_column" => mapping.timestamp = v,
                        "aggregate_type_column" => mapping.aggregate_type = v,
                        _ => {}
                    }
                }
                TableSpec {
                    table: table.clone(),
                    mapping,
                    template,
                }
            })
            .collect()
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
    let routing = RoutingConfig::from_args(&args.routing, overrides);
    Ok(TailConfig {
        tables: routing.specs(&source.tables),
        source,
        format: match args.format {
            TailFormatArg::Json => TailFormat::Json,
            TailFormatArg::Pretty => TailFormat::Pretty,
        },
        limit: args.limit,
        slot: args.slot.as_deref().map(validate_slot).transpose()?,
    })
}

/// Validate `run` arguments.
pub fn run(args: &RunArgs, overrides: &TableOverrides) -> Result<RunConfig, ConfigError> {
    let source = source(&args.source)?;
    let routing = RoutingConfig::from_args(&args.routing, overrides);
    // Parsing also refuses unsafe options, before anything connects.
    let mut kafka_options = KafkaOptions::parse(&args.kafka_options)?;
    if let Some(path) = &args.kafka_sasl_password_file {
        let password = read_secret("--kafka-sasl-password-file", path)?;
        kafka_options.set_secret("sasl.password", Secret::from(password));
    }
    let brokers = args.brokers.as_deref().unwrap_or("").trim().to_owned();
    if brokers.is_empty() {
        return Err(ConfigError::NoBrokers);
    }
    if args.max_in_flight == 0 {
        return Err(ConfigError::ZeroWindow("max-in-flight"));
    }
    if args.max_in_flight_bytes == 0 {
        return Err(ConfigError::ZeroWindow("max-in-flight-bytes"));
    }
    let pipeline = PipelineConfig {
        tables: routing.specs(&source.tables),
        on_update: match args.on_update {
            OnUpdateArg::Ignore => OnUpdate::Ignore,
            OnUpdateArg::Warn => OnUpdate::Warn,
            OnUpdateArg::Fail => OnUpdate::Fail,
        },
        invalid: InvalidPolicy::parse(&args.on_invalid, &args.dlq_topic)?,
        max_in_flight_records: args.max_in_flight,
        max_in_flight_bytes: args.max_in_flight_bytes,
        drain_timeout: args.drain_timeout,
        // Short: the slot should follow acks closely, so a crash resends little.
        status_interval: Duration::from_millis(100),
    };
    Ok(RunConfig {
        source,
        slot: validate_slot(&args.slot.name)?,
        brokers,
        kafka_options,
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
            state_dir: state::state_dir(args.state_dir.as_deref())?,
            accept_slot_reset: args.accept_slot_reset,
        },
    })
}

/// The effective `run` configuration as config-file TOML, secrets redacted: the
/// database URL without its password, and every secret Kafka option
/// ([`crate::kafka::config::is_secret`]).
pub fn show_toml(cfg: &RunConfig) -> String {
    let q = |s: &str| format!("\"{}\"", s.replace('\\', "\\\\").replace('"', "\\\""));
    let list = |items: Vec<String>| {
        format!(
            "[{}]",
            items.iter().map(|i| q(i)).collect::<Vec<_>>().join(", ")
        )
    };
    let mut out = String::new();
    let mut line = |k: &str, v: String| out.push_str(&format!("{k} = {v}\n"));
    line("database_url", q(&cfg.source.conninfo.redacted()));
    if cfg.source.conninfo.password.is_some() {
        line("# database password", q("[redacted]"));
    }
    line("publication", q(&cfg.source.publication));
    line("slot", q(&cfg.slot));
    line("brokers", q(&cfg.brokers));
    let options = cfg
        .kafka_options
        .redacted()
        .into_iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    line("kafka_option", list(options));
    line(
        "table",
        list(
            cfg.pipeline
                .tables
                .iter()
                .map(|t| t.table.to_string())
                .collect(),
        ),
    );
    line(
        "max_in_flight",
        cfg.pipeline.max_in_flight_records.to_string(),
    );
    line(
        "max_in_flight_bytes",
        cfg.pipeline.max_in_flight_bytes.to_string(),
    );
    line("on_invalid", list(cfg.pipeline.invalid.describe()));
    line("dlq_topic", q(&cfg.pipeline.invalid.dlq_topic));
    line(
        "drain_timeout",
        q(&humantime::format_duration(cfg.pipeline.drain_timeout).to_string()),
    );
    line(
        "http_addr",
        q(&cfg.http_addr.map_or("off".to_owned(), |a| a.to_string())),
    );
    line(
        "state_dir",
        q(&cfg
            .safety
            .state_dir
            .as_ref()
            .map_or("off".to_owned(), |d| d.display().to_string())),
    );
    for spec in &cfg.pipeline.tables {
        let m = &spec.mapping;
        out.push_str(&format!("\n[tables.{}]\n", q(&spec.table.to_string())));
        for (k, v) in [
            ("topic_template", spec.template.as_str()),
            ("route_by_field", m.route_by.clone()),
            ("id_column", m.id.clone()),
            ("key_column", m.key.clone()),
            ("event_type_column", m.event_type.clone()),
            ("payload_column", m.payload.clone()),
            ("timestamp_column", m.timestamp.clone()),
            ("aggregate_type_column", m.aggregate_type.clone()),
        ] {
            out.push_str(&format!("{k} = {}\n", q(&v)));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

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
        };
        let cfg = source(&args).unwrap();
        assert_eq!(cfg.tables.len(), 2);
        let bad = SourceArgs {
            tables: vec!["a.".into()],
            ..args
        };
        assert!(matches!(source(&bad), Err(ConfigError::Table(_))));
    }
}

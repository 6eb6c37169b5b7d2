//! Validated configuration: raw CLI arguments → typed settings.
//!
//! Owns every check of user input (connection string, table names, slot names,
//! templates) so errors name the flag, the value and the fix before anything
//! connects. Invariant: nothing past this module sees a clap type, and the password
//! only exists inside `ConnInfo` as a `Secret`.

use std::time::Duration;

use crate::cli::{OnUpdateArg, RoutingArgs, RunArgs, SourceArgs, TailArgs, TailFormat};
use crate::kafka::config::UnsafeOption;
use crate::outbox::event::ColumnMapping;
use crate::outbox::routing::TopicTemplate;
use crate::pg::catalog::TableName;
use crate::pg::conninfo::{ConnInfo, ConnInfoError};
use crate::pipeline::{OnUpdate, PipelineConfig};
use crate::run::RunConfig;

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
    /// A `--kafka-option` without `=`.
    #[error("invalid --kafka-option {0:?}: expected key=value, e.g. linger.ms=10")]
    KafkaOption(String),
    /// A `--kafka-option` that would weaken delivery.
    #[error(transparent)]
    UnsafeKafkaOption(#[from] UnsafeOption),
    /// Empty `--brokers`.
    #[error(
        "--brokers / PGOUTBOX_BROKERS is empty; fix: pass host:port of at least one Kafka broker"
    )]
    NoBrokers,
    /// A zero window.
    #[error("--{0} must be at least 1")]
    ZeroWindow(&'static str),
    /// Unparseable `--http-addr`.
    #[error("invalid --http-addr {0:?}: expected ip:port like 127.0.0.1:9187, or off")]
    HttpAddr(String),
}

/// Where the outbox lives.
#[derive(Debug, Clone)]
pub struct SourceConfig {
    /// Connection parameters (password redacted in Debug).
    pub conninfo: ConnInfo,
    /// Publication name.
    pub publication: String,
    /// Outbox tables, deduplicated, in the order given.
    pub tables: Vec<TableName>,
}

/// How rows become records.
#[derive(Debug, Clone)]
pub struct RoutingConfig {
    /// Column mapping.
    pub mapping: ColumnMapping,
    /// Topic template.
    pub topic_template: TopicTemplate,
}

/// `pgoutbox tail`.
#[derive(Debug, Clone)]
pub struct TailConfig {
    /// Source.
    pub source: SourceConfig,
    /// Routing (to show the topic `run` would use).
    pub routing: RoutingConfig,
    /// Output format.
    pub format: TailFormat,
    /// Stop after this many events.
    pub limit: Option<u64>,
    /// Existing slot to read (never confirmed); `None` = temporary slot.
    pub slot: Option<String>,
}

impl SourceConfig {
    /// Validate source arguments.
    pub fn from_args(args: &SourceArgs) -> Result<Self, ConfigError> {
        let conninfo = ConnInfo::parse(args.database_url.as_deref().unwrap_or(""))
            .map_err(ConfigError::DatabaseUrl)?;
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
        Ok(Self {
            conninfo,
            publication: args.publication.clone(),
            tables,
        })
    }
}

impl RoutingConfig {
    /// Validate routing arguments.
    pub fn from_args(args: &RoutingArgs) -> Self {
        Self {
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

impl TailConfig {
    /// Validate `tail` arguments.
    pub fn from_args(args: &TailArgs) -> Result<Self, ConfigError> {
        Ok(Self {
            source: SourceConfig::from_args(&args.source)?,
            routing: RoutingConfig::from_args(&args.routing),
            format: args.format,
            limit: args.limit,
            slot: args.slot.as_deref().map(validate_slot).transpose()?,
        })
    }
}

impl RunConfig {
    /// Validate `run` arguments.
    pub fn from_args(args: &RunArgs) -> Result<Self, ConfigError> {
        let source = SourceConfig::from_args(&args.source)?;
        let routing = RoutingConfig::from_args(&args.routing);
        let mut kafka_options = Vec::new();
        for raw in &args.kafka_options {
            let (k, v) = raw
                .split_once('=')
                .filter(|(k, _)| !k.trim().is_empty())
                .ok_or_else(|| ConfigError::KafkaOption(raw.clone()))?;
            kafka_options.push((k.trim().to_owned(), v.trim().to_owned()));
        }
        // Check the options now, so a refused one fails before anything connects.
        crate::kafka::config::producer_config("", &kafka_options)?;
        if args.brokers.trim().is_empty() {
            return Err(ConfigError::NoBrokers);
        }
        if args.max_in_flight == 0 {
            return Err(ConfigError::ZeroWindow("max-in-flight"));
        }
        if args.max_in_flight_bytes == 0 {
            return Err(ConfigError::ZeroWindow("max-in-flight-bytes"));
        }
        let pipeline = PipelineConfig {
            tables: source.tables.clone(),
            mapping: routing.mapping,
            topic_template: routing.topic_template,
            on_update: match args.on_update {
                OnUpdateArg::Ignore => OnUpdate::Ignore,
                OnUpdateArg::Warn => OnUpdate::Warn,
                OnUpdateArg::Fail => OnUpdate::Fail,
            },
            max_in_flight_records: args.max_in_flight,
            max_in_flight_bytes: args.max_in_flight_bytes,
            drain_timeout: args.drain_timeout,
            // Short: the slot should follow acks closely, so a crash resends little.
            status_interval: Duration::from_millis(100),
        };
        Ok(Self {
            source,
            slot: validate_slot(&args.slot)?,
            brokers: args.brokers.trim().to_owned(),
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
        })
    }
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
            publication: "p".into(),
            tables: vec!["outbox".into(), "public.outbox".into(), "s.t".into()],
        };
        let cfg = SourceConfig::from_args(&args).unwrap();
        assert_eq!(cfg.tables.len(), 2);
        let bad = SourceArgs {
            tables: vec!["a.".into()],
            ..args
        };
        assert!(matches!(
            SourceConfig::from_args(&bad),
            Err(ConfigError::Table(_))
        ));
    }
}

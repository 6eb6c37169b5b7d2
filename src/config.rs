//! Validated configuration: raw CLI arguments → typed settings.
//!
//! Owns every check of user input (connection string, table names, slot names,
//! templates) so errors name the flag, the value and the fix before anything
//! connects. Invariant: nothing past this module sees a clap type, and the password
//! only exists inside `ConnInfo` as a `Secret`.

use crate::cli::{RoutingArgs, SourceArgs, TailArgs, TailFormat};
use crate::outbox::event::ColumnMapping;
use crate::outbox::routing::TopicTemplate;
use crate::pg::catalog::TableName;
use crate::pg::conninfo::{ConnInfo, ConnInfoError};

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
                route_by: args.route_by_field.clone(),
                ..ColumnMapping::default()
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

//! How rows become records, as configured: the global column mapping and topic
//! template from flags, environment and file top level, and the file's per-table
//! overrides ([`RoutingConfig`]), validated into one `TableSpec` per outbox table
//! (and the message route of the table-less outbox).
//!
//! Invariant: every template is parsed and every per-table override checked against
//! the outbox tables before anything connects; an error names the table section or
//! flag it came from ([`TemplateSource::origin`]).

use crate::cli::{NonTransactionalArg, RoutingArgs};
use crate::outbox::connect::Placement;
use crate::outbox::event::ColumnMapping;
use crate::outbox::routing::TopicTemplate;
use crate::outbox::tables::TableSpec;
use crate::outbox::trace::TraceField;
use crate::pg::names::TableName;
use crate::pg::source::SourceConfig;
use crate::pipeline::{MessageConfig, NonTransactional};

use super::file::TableOverrides;
use super::ConfigError;

/// How rows become records: the global column mapping and topic template, and the
/// config file's per-table overrides.
#[derive(Debug, Clone)]
pub struct RoutingConfig {
    /// Column mapping (flags / env / file top level).
    pub mapping: ColumnMapping,
    /// Topic template, as given (validated by [`RoutingConfig::specs`]).
    pub topic_template: String,
    /// Per-table overrides from the config file's `[tables."schema.name"]`.
    pub overrides: TableOverrides,
}

impl RoutingConfig {
    /// Validate routing arguments; `overrides` come from the config file.
    pub fn from_args(args: &RoutingArgs, overrides: &TableOverrides) -> Result<Self, ConfigError> {
        Ok(Self {
            overrides: overrides.clone(),
            mapping: ColumnMapping {
                id: args.id_column.clone(),
                aggregate_type: args.aggregate_type_column.clone(),
                route_by: args.route_by_field.clone(),
                key: args.key_column.clone(),
                event_type: args.event_type_column.clone(),
                payload: args.payload_column.clone(),
                timestamp: args.timestamp_column.clone(),
                trace_context: TraceField::parse(args.trace_context.as_deref().unwrap_or(""))?,
                placements: None,
                not_null: Vec::new(),
            },
            topic_template: args.topic_template.clone(),
        })
    }

    /// One spec per table: the global mapping and template, with the table's
    /// overrides from the config file applied; a template that can never render a
    /// legal topic name is refused, naming where it came from.
    pub fn specs(&self, tables: &[TableName]) -> Result<Vec<TableSpec>, ConfigError> {
        self.templates(tables)
            .into_iter()
            .zip(self.mappings(tables)?)
            .map(|(t, mapping)| {
                let template = TopicTemplate::parse(&t.template).map_err(|reason| {
                    ConfigError::TopicTemplate {
                        origin: t.origin,
                        template: t.template.clone(),
                        reason,
                    }
                })?;
                Ok(TableSpec {
                    table: t.table,
                    mapping,
                    template,
                })
            })
            .collect()
    }

    /// The message settings: the global mapping (no table overrides: a message has
    /// no table) with the placements, and the global topic template.
    pub fn messages(
        &self,
        source: &SourceConfig,
        placements: Option<Vec<Placement>>,
        non_transactional: NonTransactionalArg,
    ) -> Result<MessageConfig, ConfigError> {
        let template = TopicTemplate::parse(&self.topic_template).map_err(|reason| {
            ConfigError::TopicTemplate {
                origin: "--topic-template".into(),
                template: self.topic_template.clone(),
                reason,
            }
        })?;
        Ok(MessageConfig {
            prefixes: source.message_prefixes.clone(),
            non_transactional: match non_transactional {
                NonTransactionalArg::Ignore => NonTransactional::Ignore,
                NonTransactionalArg::Relay => NonTransactional::Relay,
            },
            mapping: ColumnMapping {
                placements,
                ..self.mapping.clone()
            },
            template,
        })
    }

    /// Each table's topic template as given, and where it was given; unvalidated
    /// (`check` reports a bad one as a failed check).
    pub fn templates(&self, tables: &[TableName]) -> Vec<TemplateSource> {
        tables
            .iter()
            .map(|table| {
                let name = table.to_string();
                match self
                    .overrides
                    .get(&name)
                    .and_then(|o| o.get("topic_template"))
                {
                    Some(template) => TemplateSource {
                        table: table.clone(),
                        template: template.clone(),
                        origin: format!("topic_template of [tables.\"{name}\"] in the config file"),
                    },
                    None => TemplateSource {
                        table: table.clone(),
                        template: self.topic_template.clone(),
                        origin: "--topic-template".into(),
                    },
                }
            })
            .collect()
    }

    /// Each table's column mapping: the global one with the table's overrides.
    pub fn mappings(&self, tables: &[TableName]) -> Result<Vec<ColumnMapping>, ConfigError> {
        tables
            .iter()
            .map(|table| {
                let mut mapping = self.mapping.clone();
                let o = self.overrides.get(&table.to_string());
                for (key, value) in o.into_iter().flatten() {
                    let v = value.clone();
                    match key.as_str() {
                        "route_by_field" => mapping.route_by = v,
                        "id_column" => mapping.id = v,
                        "key_column" => mapping.key = v,
                        "event_type_column" => mapping.event_type = v,
                        "payload_column" => mapping.payload = v,
                        "timestamp_column" => mapping.timestamp = v,
                        "aggregate_type_column" => mapping.aggregate_type = v,
                        "trace_context" => mapping.trace_context = TraceField::parse(&v)?,
                        _ => {}
                    }
                }
                Ok(mapping)
            })
            .collect()
    }
}

/// One table's topic template before validation.
#[derive(Debug, Clone)]
pub struct TemplateSource {
    /// The table.
    pub table: TableName,
    /// The template text.
    pub template: String,
    /// Where it was set, for error messages.
    pub origin: String,
}

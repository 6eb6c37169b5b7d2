//! `config show`: the effective `run` configuration, as TOML the file layer reads
//! back.
//!
//! Invariants: every given value is validated as `run` would ([`show`] fails on a bad
//! one) but a required setting still missing is listed, not fatal; the output never
//! holds a secret (the database URL without its password, secret Kafka options
//! redacted).

use crate::cli::RunArgs;
use crate::outbox::event::ColumnMapping;
use crate::outbox::routing::TopicTemplate;
use crate::run::RunConfig;

use super::file::TableOverrides;
use super::{build_run, missing, ConfigError};

/// Validate `run` arguments for `config show`, a display command: a required
/// setting still missing is returned next to the configuration instead of failing
/// (every value that is given is still validated).
pub fn show(
    args: &RunArgs,
    overrides: &TableOverrides,
) -> Result<(RunConfig, Vec<ConfigError>), ConfigError> {
    let cfg = build_run(args, overrides)?;
    let missing = missing(&cfg);
    Ok((cfg, missing))
}

/// The effective `run` configuration as config-file TOML, secrets redacted: the
/// database URL without its password, and every secret Kafka option
/// ([`crate::kafka::config::is_secret`]).
pub fn show_toml(cfg: &RunConfig) -> String {
    let q = toml_string;
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
    line(
        "source",
        q(if cfg.poll.is_some() {
            "poll"
        } else {
            "logical"
        }),
    );
    if let Some(poll) = &cfg.poll {
        line("poll_batch_size", poll.batch_size.to_string());
        line(
            "poll_interval",
            q(&humantime::format_duration(poll.interval).to_string()),
        );
        line("poll_mark", q(poll.mark.name()));
        line("poll_order_by", q(&poll.order_by));
    }
    line("publication", q(&cfg.source.publication));
    line("slot", q(&cfg.slot));
    line("slot_failover", cfg.slot_failover.to_string());
    if cfg.brokers.is_empty() {
        line(
            "# brokers",
            "(missing: `run` needs --brokers host:port)".to_owned(),
        );
    } else {
        line("brokers", q(&cfg.brokers));
    }
    let options = cfg
        .kafka_options
        .redacted()
        .into_iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    line("kafka_option", list(options));
    line("kafka_rounds", cfg.kafka_rounds.to_string());
    line(
        "wal_linger",
        q(&humantime::format_duration(cfg.wal_linger).to_string()),
    );
    if cfg.source.messages_only {
        line("messages_only", "true".to_owned());
    } else {
        let tables = cfg.pipeline.tables.iter().map(|t| t.table.to_string());
        line("table", list(tables.collect()));
    }
    let messages = &cfg.pipeline.messages;
    line("message_prefix", list(messages.prefixes.clone()));
    line(
        "message_non_transactional",
        q(messages.non_transactional.name()),
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
    line("record_timestamp", q(cfg.pipeline.record_timestamp.name()));
    let f = &cfg.pipeline.format;
    line("key_converter", q(f.key.name()));
    line("value_converter", q(f.value.name()));
    line("expand_json_payload", f.expand_json.to_string());
    line("logical_name", q(&f.logical_name));
    let first = cfg.pipeline.tables.first().map(|t| &t.mapping);
    let mapping = first.unwrap_or(&cfg.pipeline.messages.mapping);
    if let Some(placements) = mapping.placements.as_ref() {
        let items = placements
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>();
        line(
            "placement",
            list(if items.is_empty() {
                vec!["none".to_owned()]
            } else {
                items
            }),
        );
    }
    line("dlq_topic", q(&cfg.pipeline.invalid.dlq_topic));
    line(
        "drain_timeout",
        q(&humantime::format_duration(cfg.pipeline.drain_timeout).to_string()),
    );
    line(
        "stall_timeout",
        q(&cfg.pipeline.stall_timeout.map_or("0s".to_owned(), |t| {
            humantime::format_duration(t).to_string()
        })),
    );
    match &cfg.exactly_once {
        None => line("delivery", q("at-least-once")),
        Some(eos) => {
            line("delivery", q("exactly-once"));
            line("watermark_topic", q(&eos.watermark_topic));
            if let Some(id) = &eos.transactional_id {
                line("transactional_id", q(id));
            }
            line(
                "transaction_interval",
                q(&humantime::format_duration(eos.interval).to_string()),
            );
        }
    }
    let hb = &cfg.heartbeat;
    line(
        "heartbeat_interval",
        q(&hb.interval.map_or("0s".to_owned(), |i| {
            humantime::format_duration(i).to_string()
        })),
    );
    line(
        "heartbeat_max_age",
        q(&humantime::format_duration(hb.max_age).to_string()),
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
    if cfg.source.messages_only {
        // No table: the global mapping (the message field names) at top level.
        out.push_str(&mapping_toml(&messages.template, &messages.mapping));
    }
    for spec in &cfg.pipeline.tables {
        out.push_str(&format!("\n[tables.{}]\n", q(&spec.table.to_string())));
        out.push_str(&mapping_toml(&spec.template, &spec.mapping));
    }
    out
}

/// `s` as a TOML basic string.
fn toml_string(s: &str) -> String {
    format!("\"{}\"", s.replace('\\', "\\\\").replace('"', "\\\""))
}

/// `key = "value"` lines of a topic template and a column mapping.
fn mapping_toml(template: &TopicTemplate, m: &ColumnMapping) -> String {
    let q = toml_string;
    let mut out = String::new();
    for (k, v) in [
        ("topic_template", template.as_str()),
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
    if let Some(field) = &m.trace_context {
        out.push_str(&format!("trace_context = {}\n", q(&field.to_string())));
    }
    out
}
